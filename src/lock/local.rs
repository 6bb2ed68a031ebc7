//! An in-process mutex: the lock most people reach for first.
//!
//! ## How it works
//! 1. Each key maps to a `tokio::sync::Mutex` inside this process.
//! 2. `acquire` queues on that mutex (fairly, first come first served) up to the timeout.
//! 3. The guard keeps the mutex's owned guard; `release` drops it, which wakes the next waiter.
//!
//! ## Limitations
//! The mutex lives in one process's memory. Run two instances behind a load
//! balancer and each has its own mutex: one buyer on port 8080 and one on port 8090
//! both "hold the lock" and race exactly as with no lock. That is the lesson of this
//! baseline, and the load test shows it. It is also why a crashed process frees its
//! lock instantly here: there is nothing outside the process to clean up.
//!
//! ## References
//! - `tokio::sync::Mutex`: <https://docs.rs/tokio/latest/tokio/sync/struct.Mutex.html>

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{DistributedLock, LockError, LockGuard};

/// One async mutex per key, in this process only.
#[derive(Default)]
pub struct LocalLock {
    // A std mutex is right for the map itself: it is held only to look a key up, never across `.await`.
    mutexes: StdMutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl LocalLock {
    fn mutex_for(&self, key: &str) -> Arc<Mutex<()>> {
        let mut mutexes = self.mutexes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        mutexes.entry(key.to_owned()).or_default().clone()
    }

    fn guard(key: &str, held: OwnedMutexGuard<()>) -> LockGuard {
        let mut guard = LockGuard::new(key, String::new());
        guard.held = Some(Box::new(held));
        guard
    }
}

#[async_trait]
impl DistributedLock for LocalLock {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn try_acquire(&self, key: &str) -> Result<LockGuard, LockError> {
        match self.mutex_for(key).try_lock_owned() {
            Ok(held) => Ok(Self::guard(key, held)),
            Err(_) => Err(LockError::Busy { key: key.to_owned() }),
        }
    }

    /// Queues on the mutex instead of polling: tokio's mutex hands the lock to
    /// waiters in arrival order.
    async fn acquire(&self, key: &str, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        match tokio::time::timeout(timeout, self.mutex_for(key).lock_owned()).await {
            Ok(held) => Ok(Self::guard(key, held)),
            Err(_) => Err(LockError::Timeout { key: key.to_owned(), waited: started.elapsed() }),
        }
    }

    async fn release(&self, guard: LockGuard) -> Result<(), LockError> {
        // Dropping the owned mutex guard unlocks it.
        drop(guard);
        Ok(())
    }
}
