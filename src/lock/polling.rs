//! The polling loop: try, pause a jittered, doubling time, try again, until the deadline.
//!
//! It is the trait's default `acquire`. Locks that cannot queue their waiters (Redis,
//! Redlock, the MySQL locks) poll; a release notice, where the backend sends one, cuts
//! the pause short. The jitter keeps a crowd of waiters from retrying in lockstep.
//!
//! The deadline is checked between attempts, so an attempt must end by it too. An
//! attempt whose backend answers slowly runs in a task of its own ([`answer_by`]): the
//! waiter stops waiting at the deadline, and a grant that was answered later is given
//! back, never handed to a buyer who has given up.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::oneshot;

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

/// Runs `attempt` in a task of its own and waits for its answer until `deadline`;
/// `None` if it had none by then. The attempt goes on within its own bounds, and an
/// answer that comes too late goes to `undo`, which gives back what it granted. So
/// does an answer whose waiter went away (its buyer's request was cut short). Without
/// a deadline (a try-acquire), the attempt simply runs here.
pub async fn answer_by<T, Attempt, Undo>(deadline: Option<Instant>, attempt: Attempt, undo: Undo) -> Option<T>
where
    T: Send + 'static,
    Attempt: Future<Output = T> + Send + 'static,
    Undo: Fn(T) + Send + Sync + 'static,
{
    let Some(deadline) = deadline else {
        return Some(attempt.await);
    };
    let undo = Arc::new(undo);
    let (answer, answered) = oneshot::channel();
    let undo_late = undo.clone();
    tokio::spawn(async move {
        if let Err(late) = answer.send(attempt.await) {
            undo_late(late);
        }
    });
    let mut waiting = Waiting { answered, undo };
    let answer = tokio::time::timeout_at(deadline.into(), &mut waiting.answered).await;
    answer.ok()?.ok()
}

/// The waiting end of [`answer_by`]. Dropped before the answer was read (at the
/// deadline, or with its waiter), it lets no answer in, and undoes one that got in.
struct Waiting<T> {
    answered: oneshot::Receiver<T>,
    undo: Arc<dyn Fn(T) + Send + Sync>,
}

impl<T> Drop for Waiting<T> {
    fn drop(&mut self) {
        self.answered.close();
        if let Ok(late) = self.answered.try_recv() {
            (self.undo)(late);
        }
    }
}
