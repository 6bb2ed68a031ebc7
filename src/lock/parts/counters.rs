//! What a database lock counts: the cost per sale is the lesson of those locks.

use std::sync::atomic::{AtomicU64, Ordering};

use super::permits::Permits;
use crate::lock::LockCounters;

/// Attempts, grants and conflicts since the lock started.
#[derive(Default)]
pub struct AttemptCounters {
    attempts: AtomicU64,
    grants: AtomicU64,
    conflicts: AtomicU64,
}

impl AttemptCounters {
    /// An acquire attempt reached the backend.
    pub fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// A new grant (a reentry is not one).
    pub fn grant(&self) {
        self.grants.fetch_add(1, Ordering::Relaxed);
    }

    /// An optimistic write lost to another writer.
    pub fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts, with what the semaphore in front of the backend saw.
    pub fn stats(&self, permits: &Permits) -> LockCounters {
        LockCounters {
            attempts: self.attempts.load(Ordering::Relaxed),
            grants: self.grants.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            permits: permits.stats(),
        }
    }
}
