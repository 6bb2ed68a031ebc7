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
//! lock instantly here: there is nothing outside the process to clean up. No fencing
//! token: the sale runs unfenced.
//!
//! ## References
//! - `tokio::sync::Mutex`: <https://docs.rs/tokio/latest/tokio/sync/struct.Mutex.html>

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::{Description, DistributedLock, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "local";

/// What this strategy is (see [`crate::lock::description`]).
/// An in-process mutex: no server, and two instances oversell.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: None,
    tokens: false,
    oversells: true,
    critical_path: None,
};

/// One async mutex per key, in this process only.
pub struct LocalLock {
    // A std mutex is right for the map itself: it is held only to look a key up, never
    // across `.await`. The map holds weak references, so a key nobody holds or waits
    // for costs nothing; dead entries are swept when the map grows.
    mutexes: StdMutex<HashMap<String, Weak<Mutex<()>>>>,
    shut_down: ShutDownSwitch,
}

impl Default for LocalLock {
    fn default() -> Self {
        LocalLock {
            mutexes: StdMutex::default(),
            shut_down: ShutDownSwitch::new(BACKEND),
        }
    }
}

/// The held mutex: dropping it unlocks.
struct HeldMutex(#[allow(dead_code)] OwnedMutexGuard<()>);

#[async_trait]
impl Release for HeldMutex {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        Ok(()) // dropping `self` unlocks the mutex and wakes the next waiter
    }
}

impl LocalLock {
    fn mutex_for(&self, key: &str) -> Result<Arc<Mutex<()>>, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let mut mutexes = self.mutexes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(mutex) = mutexes.get(key).and_then(Weak::upgrade) {
            return Ok(mutex);
        }
        mutexes.retain(|_, mutex| mutex.strong_count() > 0);
        let mutex = Arc::new(Mutex::new(()));
        mutexes.insert(key.to_owned(), Arc::downgrade(&mutex));
        Ok(mutex)
    }

    /// How many keys the map remembers (for the test that it does not grow forever).
    pub fn remembered_keys(&self) -> usize {
        self.mutexes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

#[async_trait]
impl DistributedLock for LocalLock {
    async fn try_acquire(&self, key: &str, _owner: &Owner) -> Result<LockGuard, LockError> {
        match self.mutex_for(key)?.try_lock_owned() {
            Ok(held) => Ok(LockGuard::new(key, HeldMutex(held))),
            Err(_) => Err(LockError::Busy { key: key.to_owned() }),
        }
    }

    /// Queues on the mutex instead of polling: tokio's mutex hands the lock to
    /// waiters in arrival order.
    async fn acquire(&self, key: &str, _owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        match tokio::time::timeout(timeout, self.mutex_for(key)?.lock_owned()).await {
            Ok(held) => Ok(LockGuard::new(key, HeldMutex(held))),
            Err(_) => Err(LockError::Timeout {
                key: key.to_owned(),
                waited: started.elapsed(),
            }),
        }
    }

    /// Refuses new acquires. Held mutexes are freed as their guards go, which for a
    /// stopping process is at once: nothing outside the process remembers them.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        Ok(())
    }
}
