//! Building blocks the strategies share. None of them is a strategy.
//!
//! | file | what it does | used by |
//! | --- | --- | --- |
//! | [`release_notices`] | a release wakes a waiter of every instance (Redis pub/sub), a hint the lock still checks | `redis`, `redlock`, `mysql`, `mysql-version` |
//! | [`keepalive`] | renews a lease while it is held, and says when it is lost | every lease-based lock |
//! | [`reentrant`] | lets an owner take a key it already holds | every lock, through the wiring |
//! | [`permits`] | the semaphore in front of MySQL | `mysql`, `mysql-version` |
//! | [`kept_connections`] | MySQL connections kept between statements, so sqlx does not ping each one on its way back to the pool | `mysql`, `mysql-version` |
//! | [`held_grants`] | what a handle holds, so `shutdown` can give it back | `redlock`, `mysql`, `mysql-version` |
//! | [`counters`] | attempts, grants and conflicts, for `/healthz` | `mysql`, `mysql-version` |
//! | [`setup`] | what every strategy's `build` gets from the config, and its release notices | every strategy's `build` |
//! | [`shutdown`] | the switch that refuses acquires once a lock is shut down | every lock that shuts down |

pub mod held_grants;
pub mod keepalive;
pub mod kept_connections;
pub mod permits;
pub mod counters;
pub mod release_notices;
pub mod reentrant;
pub mod shutdown;
pub mod setup;

/// Locks a std mutex even if a task panicked while holding it: the maps the locks keep
/// behind one (held grants, waiters, hold counts) stay consistent between statements,
/// so there is nothing to repair, and a panic elsewhere must not stop every sale.
pub fn unpoisoned<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
