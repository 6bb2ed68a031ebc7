//! The original articles' semaphore in front of MySQL, and the counter that shows what it does.
//!
//! A lock that polls a database sends a statement or three per attempt, and every
//! waiter attempts again and again. Two instances with 250 waiters each would keep
//! hundreds of statements in flight against one database, and the holder's own release
//! would queue behind them. The articles' answer: "a semaphore of 10 permits in the
//! application server, in front of MySQL". [`Permits`] is that semaphore, or no bound at
//! all for the comparison, and it records the most attempts it ever let through at once,
//! so a test and the load test can see the bound hold.
//!
//! Only acquire attempts pass through it. Renewals and releases do not: a holder must
//! never wait behind the crowd that waits for it. An acquire waits for a permit only
//! until its deadline. An attempt keeps its permit until its statements are answered,
//! even one that runs on after its acquire's deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What [`Permits`] saw, for `/healthz` and the load test report (part of the contract).
pub use crate::lock::stats::PermitStats;

/// At most `limit` acquire attempts of one instance talk to the database at once.
pub struct Permits {
    limit: Option<usize>,
    semaphore: Option<Arc<Semaphore>>,
    in_flight: Arc<AtomicUsize>,
    peak_in_flight: AtomicUsize,
}

/// How a wait for a permit by a deadline ended ([`Permits::enter_by`]).
pub enum Turn {
    Pass(Pass),
    /// The deadline passed first.
    Late,
    /// The permits were closed: the lock is shutting down.
    Closed,
}

/// One attempt let through; dropping it lets the next one in. It owns its permit, so
/// an attempt that goes on after its waiter's deadline keeps it to the end.
pub struct Pass {
    _permit: Option<OwnedSemaphorePermit>,
    in_flight: Arc<AtomicUsize>,
}

impl Permits {
    /// `None`: no bound, every waiter talks to the database whenever it likes.
    pub fn new(limit: Option<usize>) -> Self {
        Permits {
            limit,
            semaphore: limit.map(|limit| Arc::new(Semaphore::new(limit))),
            in_flight: Arc::default(),
            peak_in_flight: AtomicUsize::new(0),
        }
    }

    /// Waits for a permit until `deadline`, if there is one. `Turn::Late` if the permit
    /// did not come by then, `Turn::Closed` once [`close`](Self::close)d.
    pub async fn enter_by(&self, deadline: Option<std::time::Instant>) -> Turn {
        let entered = match deadline {
            None => self.enter().await,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), self.enter()).await {
                Ok(entered) => entered,
                Err(_) => return Turn::Late,
            },
        };
        entered.map_or(Turn::Closed, Turn::Pass)
    }

    /// Waits for a permit. `None` once [`close`](Self::close)d.
    pub async fn enter(&self) -> Option<Pass> {
        let permit = match &self.semaphore {
            Some(semaphore) => Some(semaphore.clone().acquire_owned().await.ok()?),
            None => None,
        };
        let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight.fetch_max(now_in_flight, Ordering::SeqCst);
        Some(Pass {
            _permit: permit,
            in_flight: self.in_flight.clone(),
        })
    }

    /// Wakes every waiter with `None` and refuses later ones (at shutdown). Without a
    /// semaphore there is nobody waiting; the lock refuses new attempts itself.
    pub fn close(&self) {
        if let Some(semaphore) = &self.semaphore {
            semaphore.close();
        }
    }

    pub fn stats(&self) -> PermitStats {
        PermitStats {
            permits: self.limit,
            peak_in_flight: self.peak_in_flight.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
