//! A background task that renews a lease while its lock is held.
//!
//! Leases expire so that a crashed holder cannot block everyone forever. A *live*
//! holder whose critical section runs longer than the lease must therefore renew it.
//! The renewal runs every `ttl / 3`, so two renewals can fail in a row before the
//! lease runs out.
//!
//! If the backend says the lease is no longer ours, or renewals keep failing for a
//! whole TTL, the task marks the lock *lost* and stops: from then on another holder
//! may be inside the critical section, and [`crate::lock::LockGuard::is_held`] says so.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::LockError;

/// Renews every `ttl / RENEWALS_PER_TTL`.
pub const RENEWALS_PER_TTL: u32 = 3;

/// Handle to a running renewal. Stopping it (or dropping it) aborts the task;
/// aborting never blocks, so it is safe in `Drop`.
pub struct KeepAlive {
    lost: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl KeepAlive {
    /// Starts renewing. `renew` answers `Ok(true)` when the lease was extended,
    /// `Ok(false)` when it is no longer ours.
    pub fn spawn<F, Fut>(backend: &'static str, key: &str, ttl: Duration, mut renew: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, LockError>> + Send,
    {
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        let key = key.to_owned();
        let task = tokio::spawn(async move {
            let mut last_renewed = Instant::now();
            loop {
                tokio::time::sleep(ttl / RENEWALS_PER_TTL).await;
                match renew().await {
                    Ok(true) => last_renewed = Instant::now(),
                    Ok(false) => {
                        tracing::warn!(backend, key, "lease was taken over before renewal: lock lost");
                        break;
                    }
                    Err(error) if last_renewed.elapsed() >= ttl => {
                        tracing::warn!(backend, key, %error, "renewal failed for a whole TTL: lock lost");
                        break;
                    }
                    Err(error) => tracing::debug!(backend, key, %error, "renewal failed, will retry"),
                }
            }
            flag.store(true, Ordering::SeqCst);
        });
        KeepAlive { lost, task }
    }

    /// True once the lease is known to be gone.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}
