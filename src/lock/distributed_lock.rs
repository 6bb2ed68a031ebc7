//! The trait every strategy implements.
//!
//! It names no strategy: what one strategy counts of its own (`redis-degrade`'s mode)
//! comes through [`DistributedLock::own_stats`], whose default has nothing. What the
//! counts are is [`crate::lock::stats`].

use std::time::Duration;

use async_trait::async_trait;

use crate::lock::polling::poll_until_granted;
use crate::lock::stats::{LockCounters, OwnStats};
use crate::lock::{LockError, LockGuard, Owner};

/// A mutual-exclusion lock on a string key, shared by every instance of the service.
#[async_trait]
pub trait DistributedLock: Send + Sync {
    /// One attempt: the guard if the key was free, [`LockError::Busy`] if not.
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError>;

    /// Waits until the key may be free again, or `pause` has passed.
    /// The default just sleeps; backends that can announce a release override it.
    async fn wait_for_release(&self, _key: &str, pause: Duration) {
        tokio::time::sleep(pause).await;
    }

    /// Retries [`try_acquire`](Self::try_acquire) until it succeeds or `timeout` passes.
    ///
    /// Between attempts the waiter sleeps a jittered, doubling pause (2 ms up to 50 ms),
    /// cut short when the backend announces a release. The jitter keeps a crowd of
    /// waiters from retrying in lockstep.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        poll_until_granted(
            key,
            timeout,
            || self.try_acquire(key, owner),
            |pause| self.wait_for_release(key, pause),
        )
        .await
    }

    /// Whether the backend itself counts an owner's repeated grants of one key
    /// (a hold count in its own storage). If not, [`Reentrant`](super::parts::reentrant::Reentrant) does it.
    fn keeps_reentrancy(&self) -> bool {
        false
    }

    /// Whether a release can give the key to the next owner in its own request
    /// ([`Release::hand_over`](super::Release::hand_over)). The default releases instead.
    fn hands_over(&self) -> bool {
        false
    }

    /// Gives back everything this handle holds and refuses later acquires.
    /// The default has nothing to give back.
    async fn shutdown(&self) -> Result<(), LockError> {
        Ok(())
    }

    /// What the lock counted since it started, for backends that count (the database
    /// locks, whose cost per sale is the lesson).
    fn stats(&self) -> Option<LockCounters> {
        None
    }

    /// What this strategy counts beyond [`LockCounters`], as of now. The default counts nothing.
    fn own_stats(&self) -> Option<OwnStats> {
        None
    }
}
