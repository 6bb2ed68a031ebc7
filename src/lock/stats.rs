//! What a lock counts, as `/healthz` shows it under `lock_stats` and the load test reads
//! it back: the counters every counting lock keeps ([`LockCounters`]), and beside them,
//! under its own key, what one strategy counts of its own ([`OwnStats`]).
//!
//! [`LockStats`] is both, built directly from the trait's two answers
//! ([`crate::lock::DistributedLock::stats`] and
//! [`own_stats`](crate::lock::DistributedLock::own_stats)); it names no strategy.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// What a database lock counted since it started, as `/healthz` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockCounters {
    /// Acquire attempts that reached the backend.
    pub attempts: u64,
    /// Grants, reentries not included.
    pub grants: u64,
    /// Optimistic locks: compare-and-sets that lost to another writer. 0 for the others.
    pub conflicts: u64,
    /// The semaphore in front of the backend.
    pub permits: PermitStats,
}

/// What the semaphore in front of a backend saw ([`crate::lock::parts::permits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitStats {
    /// The bound; `None` when there is no semaphore.
    pub permits: Option<usize>,
    /// The most attempts that were talking to the database at the same time.
    pub peak_in_flight: usize,
}

/// What one strategy counts of its own: a part of `/healthz`'s `lock_stats`, and metrics.
pub struct OwnStats {
    /// Its key in `lock_stats`.
    pub key: &'static str,
    /// What `/healthz` shows under that key.
    pub healthz: serde_json::Value,
    /// Its metrics for `GET /metrics`, as of now.
    pub metrics: Vec<prometheus::proto::MetricFamily>,
}

/// A lock's counters as `/healthz` shows them under `lock_stats`: the common ones, and
/// beside them, under its key, what the strategy counts of its own (`redis-degrade`'s
/// `degrade`). Both flatten into one JSON object, as the load test reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockStats {
    #[serde(flatten)]
    pub counters: LockCounters,
    /// What the strategy counts of its own, by its key; empty for most strategies.
    #[serde(flatten)]
    pub own: serde_json::Map<String, serde_json::Value>,
}

impl LockStats {
    /// The counters, and what the strategy counts of its own beside them.
    pub fn new(counters: LockCounters, own: Option<OwnStats>) -> Self {
        let own = own.map(|own| (own.key.to_owned(), own.healthz)).into_iter().collect();
        LockStats { counters, own }
    }

    /// The part a strategy keeps under `key`, read back as its type; `None` if there is
    /// none, or if it does not read as `T`.
    pub fn own_part<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        serde_json::from_value(self.own.get(key)?.clone()).ok()
    }
}
