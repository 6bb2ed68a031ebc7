//! Why a lock could not be taken or given back: the lock layer's one error type.
//!
//! The HTTP layer turns each variant into one answer (see `crate::sale::error`).

use std::sync::Arc;
use std::time::Duration;

/// Why a lock could not be taken or given back. Clone, so that every buyer of a group
/// (`crate::sale::group`) can be told the one reason the group's grant failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the key right now (only from `try_acquire`).
    #[error("lock `{key}` is held by someone else")]
    Busy { key: String },
    /// The key stayed taken for the whole acquire timeout.
    #[error("gave up on lock `{key}` after waiting {waited:?}")]
    Timeout { key: String, waited: Duration },
    /// The lease ran out (or was taken over) before release:
    /// another holder may have run its critical section at the same time.
    #[error("lock `{key}` was lost before release: its lease expired or another owner took it")]
    Lost { key: String },
    /// The backend itself failed: down, unreachable, or answered nonsense.
    #[error("{backend} failed: {source}")]
    Backend {
        backend: &'static str,
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The lock was shut down: the process is stopping.
    #[error("the {backend} lock is shut down; no new locks are granted")]
    ShutDown { backend: &'static str },
}

impl LockError {
    pub fn backend(backend: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        LockError::Backend {
            backend,
            source: Arc::new(source),
        }
    }
}
