//! The polling loop: try, pause a jittered, doubling time, try again, until the deadline.
//!
//! It is the trait's default `acquire`. Locks that cannot queue their waiters (Redis,
//! Redlock, the MySQL locks) poll; a release notice, where the backend sends one, cuts
//! the pause short. The jitter keeps a crowd of waiters from retrying in lockstep.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::lock::{LockError, LockGuard};

/// First pause of a waiter that was not woken by a release notification.
pub const BACKOFF_START: Duration = Duration::from_millis(2);
/// Longest pause between two attempts: bounds how stale a waiter can be.
pub const BACKOFF_MAX: Duration = Duration::from_millis(50);

/// Calls `attempt` until it answers anything but [`LockError::Busy`], or `timeout` passes.
/// Between two attempts it calls `wait` with the pause to take; `wait` may return early
/// (a release was announced) or wait longer (it knows when the key frees up).
pub async fn poll_until_granted<Try, TryFut, Wait, WaitFut>(
    key: &str,
    timeout: Duration,
    mut attempt: Try,
    mut wait: Wait,
) -> Result<LockGuard, LockError>
where
    Try: FnMut() -> TryFut,
    TryFut: std::future::Future<Output = Result<LockGuard, LockError>>,
    Wait: FnMut(Duration) -> WaitFut,
    WaitFut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut pause = BACKOFF_START;
    loop {
        match attempt().await {
            Err(LockError::Busy { .. }) => {}
            granted_or_failed => return granted_or_failed,
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Timeout {
                key: key.to_owned(),
                waited: now - started,
            });
        }
        let jittered = pause.mul_f64(rand::rng().random_range(0.5..1.5));
        wait(jittered.min(deadline - now)).await;
        pause = (pause * 2).min(BACKOFF_MAX);
    }
}
