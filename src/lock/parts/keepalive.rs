//! A background task that renews a lease while its lock is held.
//!
//! Leases expire so that a crashed holder cannot block everyone forever. A *live*
//! holder whose critical section runs longer than the lease must therefore renew it.
//!
//! ## How it works
//! 1. The lease is counted from the moment the grant was *sent*, not from when its
//!    answer arrived: the server may have started the clock any time after sending.
//!    The holder believes in it until `sent + ttl - drift`, where the drift margin
//!    (1% of the TTL plus 2 ms, as the Redlock spec uses) covers clocks that run at
//!    slightly different speeds on client and server.
//! 2. Every `ttl / 3` the task sends a renewal with its own short timeout (`ttl / 6`),
//!    so a slow backend cannot eat the lease while a renewal waits. A renewal that
//!    succeeds moves the end of the lease to `its send time + ttl - drift`. Because the
//!    timeout is well under `ttl / 3`, two renewals can fail in a row before the lease ends.
//! 3. The task publishes the lease's end through the guard's [`Lease`]. When the backend
//!    says the lease is no longer ours, or the end passes without a successful renewal,
//!    it publishes [`LeaseState::Lost`] and stops: from then on another holder may be in
//!    the critical section.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lock::{Lease, LeaseState, LockError};

/// Renews every `ttl / RENEWALS_PER_TTL`.
pub const RENEWALS_PER_TTL: u32 = 3;
/// A renewal gives up after `ttl / RENEWAL_TIMEOUT_DIVISOR`: well under the renewal period.
pub const RENEWAL_TIMEOUT_DIVISOR: u32 = 6;
/// The Redlock spec's clock drift allowance: 1% of the TTL ...
pub const CLOCK_DRIFT_FACTOR: f64 = 0.01;
/// ... plus 2 ms for the resolution of the timers.
pub const CLOCK_DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// How long a lease granted (or renewed) at `sent` may be trusted: `sent + ttl - drift`.
pub fn trusted_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

/// The clock drift margin for a lease of `ttl`.
pub fn drift(ttl: Duration) -> Duration {
    ttl.mul_f64(CLOCK_DRIFT_FACTOR) + CLOCK_DRIFT_FLOOR
}

/// A fixed lease with no renewal: trusted until `sent + ttl - drift`, then lost.
/// Keep the returned sender as long as the grant lives: dropping it ends the lease.
pub fn fixed_lease(sent: Instant, ttl: Duration) -> (watch::Sender<LeaseState>, Lease) {
    Lease::watched(LeaseState::HeldUntil(trusted_until(sent, ttl)))
}

/// A grant's side of its lease: a renewal task, or (renewal off, to show expiry) a
/// fixed lease of one TTL. Dropping it, or [`LeaseKeeper::stop`], ends the lease.
pub enum LeaseKeeper {
    Renewing(KeepAlive),
    Fixed(watch::Sender<LeaseState>),
    Stopped,
}

impl LeaseKeeper {
    /// Renews with `renew` (as [`KeepAlive::spawn`]) when `renewing`, or holds a fixed
    /// lease of one TTL. Returns the keeper and the holder's view of the lease.
    pub fn start<F, Fut>(
        renewing: bool,
        backend: &'static str,
        key: &str,
        ttl: Duration,
        sent: Instant,
        renew: F,
    ) -> (Self, Lease)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, LockError>> + Send,
    {
        if renewing {
            let (keepalive, lease) = KeepAlive::spawn(backend, key, ttl, sent, renew);
            (LeaseKeeper::Renewing(keepalive), lease)
        } else {
            let (sender, lease) = fixed_lease(sent, ttl);
            (LeaseKeeper::Fixed(sender), lease)
        }
    }

    /// Stops renewing. A release calls it first, so that a renewal cannot race it.
    pub fn stop(&mut self) {
        *self = LeaseKeeper::Stopped;
    }
}

/// Handle to a running renewal. Dropping it aborts the task, which never blocks,
/// so it is safe in `Drop`; the lease then reads as lost.
pub struct KeepAlive {
    task: JoinHandle<()>,
}

impl KeepAlive {
    /// Starts renewing a lease of `ttl` granted by a request sent at `sent`.
    /// `renew` answers `Ok(true)` when the lease was extended, `Ok(false)` when it is
    /// no longer ours. Returns the handle and the holder's view of the lease.
    pub fn spawn<F, Fut>(backend: &'static str, key: &str, ttl: Duration, sent: Instant, mut renew: F) -> (Self, Lease)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, LockError>> + Send,
    {
        let (state, lease) = Lease::watched(LeaseState::HeldUntil(trusted_until(sent, ttl)));
        let key = key.to_owned();
        let period = ttl / RENEWALS_PER_TTL;
        let renewal_timeout = ttl / RENEWAL_TIMEOUT_DIVISOR;
        let task = tokio::spawn(async move {
            let mut lease_ends = trusted_until(sent, ttl);
            let mut next_renewal = sent + period;
            loop {
                tokio::time::sleep_until(next_renewal.min(lease_ends).into()).await;
                if Instant::now() >= lease_ends {
                    tracing::warn!(backend, key, "no renewal succeeded before the lease ran out: lock lost");
                    break;
                }
                let sent = Instant::now();
                next_renewal = sent + period;
                match tokio::time::timeout(renewal_timeout, renew()).await {
                    Ok(Ok(true)) => {
                        lease_ends = trusted_until(sent, ttl);
                        state.send_replace(LeaseState::HeldUntil(lease_ends));
                    }
                    Ok(Ok(false)) => {
                        tracing::warn!(backend, key, "lease was taken over before renewal: lock lost");
                        break;
                    }
                    Ok(Err(error)) => tracing::debug!(backend, key, %error, "renewal failed, will retry"),
                    Err(_) => tracing::debug!(backend, key, ?renewal_timeout, "renewal timed out, will retry"),
                }
            }
            state.send_replace(LeaseState::Lost);
        });
        (KeepAlive { task }, lease)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_renewal_that_never_answers_is_abandoned_and_the_next_one_keeps_the_lease() {
        let ttl = Duration::from_millis(300);
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let sent = Instant::now();
        let (_keepalive, lease) = KeepAlive::spawn("test", "key", ttl, sent, move || {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if call == 0 {
                    std::future::pending::<()>().await; // the first renewal's answer is lost
                }
                Ok(true)
            }
        });
        // The first lease ends at 295 ms; the renewal at 200 ms moved it to 495 ms.
        tokio::time::sleep_until((sent + Duration::from_millis(400)).into()).await;
        assert!(
            lease.is_held(),
            "a renewal stuck without its own timeout let the lease run out"
        );
        assert!(calls.load(Ordering::SeqCst) >= 2);
    }

    #[tokio::test]
    async fn a_lease_is_trusted_until_its_ttl_less_the_drift_margin() {
        let sent = Instant::now();
        let ttl = Duration::from_millis(1000);
        assert_eq!(trusted_until(sent, ttl), sent + Duration::from_millis(988));
        let (_sender, lease) = fixed_lease(sent, Duration::from_millis(100));
        assert!(lease.is_held());
        tokio::time::sleep_until((sent + Duration::from_millis(100)).into()).await;
        assert!(
            !lease.is_held(),
            "trusted up to the TTL itself, not TTL minus the drift"
        );
    }
}
