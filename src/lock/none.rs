//! No lock at all: the baseline that shows why the others exist.
//!
//! ## How it works
//! 1. `try_acquire` always succeeds at once.
//! 2. `release` does nothing.
//!
//! ## Limitations
//! This is the bug the rest of the folder fixes. Two buyers read `stock = 5`, both
//! write `4`, both count a sale: one unit is sold twice. Under the 500-request load
//! test the sale records show the same unit more than once and `stock + lucky`
//! no longer equals the initial stock. There is no fencing token either, so the
//! stock cannot refuse anyone: the sale runs unfenced.
//!
//! ## References
//! - "Lost update", in Martin Kleppmann, *Designing Data-Intensive Applications*, ch. 7.

use async_trait::async_trait;

use crate::lock::{Description, DistributedLock, LockError, LockGuard, NothingToRelease, Owner};

/// What this strategy is (see [`crate::lock::description`]).
/// No lock: the read-check-write races, and two instances oversell.
pub const DESCRIPTION: Description = Description {
    name: "none",
    backend: None,
    tokens: false,
    oversells: true,
    critical_path: None,
};

/// A lock that never excludes anyone.
pub struct NoLock;

#[async_trait]
impl DistributedLock for NoLock {
    async fn try_acquire(&self, key: &str, _owner: &Owner) -> Result<LockGuard, LockError> {
        Ok(LockGuard::new(key, NothingToRelease))
    }
}
