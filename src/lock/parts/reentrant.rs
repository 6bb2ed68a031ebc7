//! Reentrancy, kept in one place for every backend: an owner may take a key it holds.
//!
//! ## How it works
//! Curator's `InterProcessMutex` keeps, in the process, a hold count per thread and
//! lock; only the first acquire goes to ZooKeeper and only the last release does.
//! This wrapper does the same per [`Owner`] and key:
//! 1. An acquire by an owner that already holds the key adds one to its hold count and
//!    is granted at once, with the same fencing token and lease.
//! 2. Any other acquire goes to the backend; the backend's guard is kept here.
//! 3. Each release takes one hold away; the one that brings the count to zero gives
//!    the backend's guard back.
//!
//! A backend that keeps the count in its own storage (a lock table with a hold count
//! column) says so with [`DistributedLock::keeps_reentrancy`]; this wrapper then passes
//! every call straight through.
//!
//! ## Limitations
//! An owner is one logical caller taking its locks one after another. Two tasks that
//! share an owner and race for the same key both go to the backend, and the second
//! waits like a stranger would.
//!
//! ## References
//! - Apache Curator, `InterProcessMutex` (its `threadData` map of hold counts):
//!   <https://curator.apache.org/docs/recipes-shared-reentrant-lock>

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;

use super::unpoisoned;
use crate::lock::{DistributedLock, GuardInfo, HandOver, LockError, LockGuard, Owner, Release};

/// The backend's grant, and how many times its owner has taken it.
struct Hold {
    count: usize,
    info: GuardInfo,
    backend_release: Box<dyn Release>,
}

type Holds = Arc<StdMutex<HashMap<(Owner, String), Hold>>>;

/// Any [`DistributedLock`], made reentrant per owner.
#[derive(Clone)]
pub struct Reentrant {
    backend: Arc<dyn DistributedLock>,
    holds: Holds,
}

impl Reentrant {
    pub fn new(backend: Arc<dyn DistributedLock>) -> Self {
        Reentrant {
            backend,
            holds: Arc::default(),
        }
    }

    /// The wrapped backend.
    pub fn backend(&self) -> &Arc<dyn DistributedLock> {
        &self.backend
    }

    /// One attempt, as [`DistributedLock::try_acquire`]; granted at once if `owner` holds `key`.
    pub async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        if let Some(guard) = self.reenter(key, owner) {
            return Ok(guard);
        }
        let granted = self.backend.try_acquire(key, owner).await?;
        Ok(self.first_hold(owner, granted))
    }

    /// Waits up to `timeout`, as [`DistributedLock::acquire`]; granted at once if `owner` holds `key`.
    pub async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        if let Some(guard) = self.reenter(key, owner) {
            return Ok(guard);
        }
        let granted = self.backend.acquire(key, owner, timeout).await?;
        Ok(self.first_hold(owner, granted))
    }

    /// Releases `guard`'s hold, and with its last hold gives the key to `next` where the
    /// backend can ([`LockGuard::hand_over`]); `next`'s grant is kept here like any other.
    pub async fn hand_over(&self, guard: LockGuard, next: &Owner) -> Result<HandOver, LockError> {
        match guard.hand_over(next).await? {
            HandOver::Granted(granted) => Ok(HandOver::Granted(self.first_hold(next, granted))),
            HandOver::Queued(place) => {
                let (this, next) = (self.clone(), next.clone());
                Ok(HandOver::Queued(
                    place.then(move |granted| this.first_hold(&next, granted)),
                ))
            }
            HandOver::Released => Ok(HandOver::Released),
        }
    }

    pub async fn shutdown(&self) -> Result<(), LockError> {
        self.backend.shutdown().await
    }

    /// A further hold of a key `owner` already holds, or `None`.
    fn reenter(&self, key: &str, owner: &Owner) -> Option<LockGuard> {
        if self.backend.keeps_reentrancy() {
            return None;
        }
        let mut holds = unpoisoned(&self.holds);
        let hold = holds.get_mut(&(owner.clone(), key.to_owned()))?;
        hold.count += 1;
        Some(
            hold.info
                .clone()
                .into_guard(ReleaseOneHold::new(self.holds.clone(), (owner.clone(), key.to_owned()))),
        )
    }

    /// Keeps the backend's grant here and hands out a guard that counts down.
    fn first_hold(&self, owner: &Owner, granted: LockGuard) -> LockGuard {
        if self.backend.keeps_reentrancy() {
            return granted;
        }
        let (info, backend_release) = granted.into_parts();
        let id = (owner.clone(), info.key.clone());
        unpoisoned(&self.holds).insert(
            id.clone(),
            Hold {
                count: 1,
                info: info.clone(),
                backend_release,
            },
        );
        info.into_guard(ReleaseOneHold::new(self.holds.clone(), id))
    }
}

/// Releasing one hold: the last one gives the backend's grant back.
///
/// Dropped without `release`, it still counts its hold down; if that was the last,
/// the backend's grant is dropped too, which behaves like a crashed holder (renewal
/// stops and the lease runs out), as the contract asks.
struct ReleaseOneHold {
    holds: Holds,
    id: (Owner, String),
    counted_down: bool,
}

impl ReleaseOneHold {
    fn new(holds: Holds, id: (Owner, String)) -> Self {
        ReleaseOneHold {
            holds,
            id,
            counted_down: false,
        }
    }

    /// Takes this hold away, once; the backend's grant if it was the last.
    fn count_down(&mut self) -> Option<Hold> {
        if std::mem::replace(&mut self.counted_down, true) {
            return None;
        }
        let mut holds = unpoisoned(&self.holds);
        let hold = holds.get_mut(&self.id)?;
        hold.count -= 1;
        if hold.count > 0 {
            return None;
        }
        holds.remove(&self.id)
    }
}

#[async_trait]
impl Release for ReleaseOneHold {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        match self.count_down() {
            Some(last) => last.backend_release.release().await,
            None => Ok(()),
        }
    }

    /// Only the last hold gives the key away; an earlier one just counts down.
    async fn hand_over(mut self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        match self.count_down() {
            Some(last) => last.backend_release.hand_over(next).await,
            None => Ok(HandOver::Released),
        }
    }
}

impl Drop for ReleaseOneHold {
    fn drop(&mut self) {
        drop(self.count_down());
    }
}
