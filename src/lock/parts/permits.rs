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
//! never wait behind the crowd that waits for it.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, SemaphorePermit};

/// At most `limit` acquire attempts of one instance talk to the database at once.
pub struct Permits {
    limit: Option<usize>,
    semaphore: Option<Semaphore>,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

/// What [`Permits`] saw, for `/healthz` and the load test report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitStats {
    /// The bound; `None` when there is no semaphore.
    pub permits: Option<usize>,
    /// The most attempts that were talking to the database at the same time.
    pub peak_in_flight: usize,
}

/// One attempt let through; dropping it lets the next one in.
pub struct Pass<'a> {
    _permit: Option<SemaphorePermit<'a>>,
    in_flight: &'a AtomicUsize,
}

impl Permits {
    /// `None`: no bound, every waiter talks to the database whenever it likes.
    pub fn new(limit: Option<usize>) -> Self {
        Permits {
            limit,
            semaphore: limit.map(Semaphore::new),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        }
    }

    /// Waits for a permit. `None` once [`close`](Self::close)d.
    pub async fn enter(&self) -> Option<Pass<'_>> {
        let permit = match &self.semaphore {
            Some(semaphore) => Some(semaphore.acquire().await.ok()?),
            None => None,
        };
        let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_in_flight.fetch_max(now_in_flight, Ordering::SeqCst);
        Some(Pass {
            _permit: permit,
            in_flight: &self.in_flight,
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

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
