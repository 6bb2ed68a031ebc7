//! The local queue: the buyers of one instance queue for a lock in process, and a
//! release can hand the lock straight to the next of them.
//!
//! ## How it works
//! 1. **One local queue per lock key.** A buyer waits for its turn (first come, first
//!    served) behind one mutex, and only the buyer whose turn it is asks the
//!    distributed lock. Two instances then put two contenders before the backend
//!    instead of hundreds, and the backend serves the holder instead of the crowd. It
//!    changes who asks, never what a grant means: the distributed lock still decides
//!    between instances.
//! 2. **Direct hand-over.** A holder whose local queue has a buyer waiting gives the
//!    key to that buyer in the request that releases it
//!    ([`crate::lock::LockGuard::hand_over`]), where the backend can: one round trip
//!    where a release and the next acquire take two, and a grant of its own (with a
//!    newer fencing token, for a lock that has tokens). The grant waits in the queue's
//!    [`Turn`] for whoever comes next. The locks with a lease of their own can (`redis`
//!    on one server, `redlock`, `mysql`, `mysql-version`, `redis-degrade`). A queue
//!    lock's next grant is its oldest entry, often another instance's: `etcd` puts the
//!    next buyer at the back of its queue in the release's request instead, a place
//!    that waits its turn in the [`Turn`] and counts toward no bound (the queue is
//!    fair by itself); `zookeeper` releases (putting the next buyer's node in the
//!    release's `multi` was tried, and sold less).
//! 3. **A bound, for the other instances.** A local queue hands over at most
//!    [`HAND_OVERS_IN_A_ROW`] times in a row, then releases as usual and steps aside:
//!    its next buyer waits [`STEP_ASIDE`] before it asks, so that a waiter of another
//!    instance, woken by the release, takes the free key first. Without the pause the
//!    next local buyer, already first in the queue and first to know, would win it again.
//! 4. **Nothing stranded.** A grant or place nobody came for goes back at once: the
//!    holder that handed it over gives it back when no buyer was left to take the turn,
//!    and so does a buyer whose deadline passed in the queue, or who passes its turn on
//!    unused ([`Turn::pass_on`]). At shutdown the sale gives back what is left
//!    ([`LocalQueue::give_back_left_over`]) before the lock's own shutdown.
//!
//! ## Limitations
//! - The pause in step 3 gives another instance a head start, not a turn: a waiter
//!   that learns of the release later than [`STEP_ASIDE`] still races this queue's next
//!   buyer. When no other instance waits, the pause is lost time, once per run of
//!   hand-overs; for the Redis locks, whose whole hand-over takes about 0.2 ms, it is
//!   long (tokio's timers count whole milliseconds).
//!
//! ## References
//! - Dice, Marathe and Shavit, "Lock Cohorting: A General Technique for Designing NUMA
//!   Locks" (PPoPP 2012): a global lock handed within a cohort, a bounded number of times.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, MutexGuard};

use crate::lock::parts::reentrant::Reentrant;
use crate::lock::{HandOver, LockError, LockGuard, Owner, QueuedPlace};

/// How many hand-overs a local queue makes in a row before it releases as usual (step 3).
/// Under the sustained load of `make bench` the next holder came from the same instance
/// 85% of the time without hand-overs (2026-11-26 09:27 UTC), so runs of a few grants
/// were the rule already.
pub const HAND_OVERS_IN_A_ROW: u32 = 8;

/// How long a local queue's next buyer waits before it asks, after a run of hand-overs ended
/// in a plain release (step 3): longer than a release notice and the compare-and-set it
/// triggers take to reach the backend from another instance (0.5 to 0.9 ms under
/// `make bench`'s load).
pub const STEP_ASIDE: Duration = Duration::from_millis(1);

/// The local queue of one instance's buyers for one lock key.
pub struct LocalQueue {
    turn: Mutex<Baton>,
    /// Buyers waiting for their turn, the head not counted.
    waiting: AtomicUsize,
    /// Whether a release may hand the lock over (step 2); off with `--hand-over false`.
    hand_over: bool,
}

/// What passes from one turn to the next.
#[derive(Default)]
struct Baton {
    /// What the last holder handed over, for whoever takes the next turn.
    handed: Option<Handed>,
    /// Hand-overs since the last plain release.
    in_a_row: u32,
    /// After a run of hand-overs: the next buyer asks no earlier than this (step 3).
    step_aside_until: Option<Instant>,
}

/// What a release left for the next turn (step 2).
enum Handed {
    /// A grant of its own.
    Grant(LockGuard),
    /// A place in a queue lock's queue, granted in its turn.
    Place(QueuedPlace),
}

/// A buyer's turn, first in the local queue; the next buyer's turn starts when it is dropped.
pub struct Turn<'a> {
    queue: &'a LocalQueue,
    baton: MutexGuard<'a, Baton>,
}

/// Counts a buyer in the local queue until it leaves it, its turn taken or not.
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LocalQueue {
    /// An empty local queue; `hand_over` says whether its releases may hand the lock
    /// over (step 2; `--hand-over`).
    pub fn new(hand_over: bool) -> Self {
        LocalQueue {
            turn: Mutex::default(),
            waiting: AtomicUsize::new(0),
            hand_over,
        }
    }

    /// Whether its releases may hand the lock over: `--hand-over`, and the lock can
    /// (`DistributedLock::hands_over`, asked once when the sale is built).
    pub fn hands_over(&self) -> bool {
        self.hand_over
    }

    /// Waits for this buyer's turn until `deadline`; `None` if it passed first. A buyer
    /// who gives up gives back a grant the queue may hold for nobody (step 4).
    pub async fn wait_for_turn(&self, deadline: Instant) -> Option<Turn<'_>> {
        let in_queue = InQueue(&self.waiting);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let baton = tokio::time::timeout_at(deadline.into(), self.turn.lock()).await;
        drop(in_queue);
        match baton {
            Ok(baton) => Some(Turn { queue: self, baton }),
            Err(_) => {
                self.give_back_unclaimed().await;
                None
            }
        }
    }

    /// Gives back a handed grant that no buyer took (step 4). A buyer who holds the
    /// turn takes the grant itself, so only a free turn can hold an unclaimed one.
    async fn give_back_unclaimed(&self) {
        let unclaimed = match self.turn.try_lock() {
            Ok(mut baton) => baton.handed.take(),
            Err(_) => None,
        };
        if let Some(grant) = unclaimed {
            give_back(grant).await;
        }
    }

    /// At shutdown, once no sale runs: gives back a handed grant left in the queue by a
    /// buyer that was turned away after the turn was passed to it (step 4).
    pub async fn give_back_left_over(&self) {
        let left_over = self.turn.lock().await.handed.take();
        if let Some(grant) = left_over {
            give_back(grant).await;
        }
    }
}

/// Gives back a handed grant that nobody will use; a place leaves its queue as it is dropped.
async fn give_back(handed: Handed) {
    let Handed::Grant(grant) = handed else { return };
    if let Err(error) = grant.release().await {
        tracing::warn!(%error, "a handed grant nobody took could not be given back; it ends with its lease");
    }
}

impl Turn<'_> {
    /// What this turn starts with: the grant the last holder handed to it, if it is
    /// still held (one whose lease ran out meanwhile is given back), or the grant of the
    /// place it queued, once its turn comes, by `deadline`; or, after a run of
    /// hand-overs, the pause of step 3. With `None` the buyer acquires as usual.
    pub async fn handed_grant_or_step_aside(&mut self, deadline: Instant) -> Option<LockGuard> {
        if let Some(until) = self.baton.step_aside_until.take() {
            tokio::time::sleep_until(until.into()).await;
        }
        match self.baton.handed.take()? {
            Handed::Grant(handed) if handed.is_held() => Some(handed),
            Handed::Grant(handed) => {
                give_back(Handed::Grant(handed)).await;
                None
            }
            Handed::Place(place) => match place.granted(deadline).await {
                Ok(granted) => Some(granted),
                Err(error) => {
                    tracing::debug!(%error, "a queued place was not granted; acquiring as usual");
                    None
                }
            },
        }
    }

    /// Ends this turn, leaving nothing in the queue for nobody (step 4): a grant in the
    /// baton goes to the next buyer in line, who takes the turn as it passes, or back to
    /// the lock when nobody does. A release that handed over ends its turn so, and so
    /// does a turn that took nothing from the baton: its buyer was answered by the group
    /// before, or its deadline passed as the turn came ([`crate::sale::group`]). Dropped
    /// instead, such a turn would leave the grant in the queue, renewed by its
    /// keepalive, until this queue's next buyer came.
    pub async fn pass_on(self) {
        let queue = self.queue;
        drop(self);
        queue.give_back_unclaimed().await;
    }

    /// Gives `guard`'s key back at the end of this turn, handing it to the next buyer
    /// of this queue, as the owner `next` makes, when one waits and the bound allows
    /// (steps 2 and 3). Then the turn passes, and a handed grant that found nobody
    /// waiting goes back.
    pub async fn release(
        self,
        lock: &Reentrant,
        guard: LockGuard,
        next: impl FnOnce() -> Owner,
    ) -> Result<(), LockError> {
        let someone_waits = self.queue.waiting.load(Ordering::SeqCst) > 0;
        self.release_handing_over_if(someone_waits, lock, guard, next).await
    }

    /// [`Turn::release`], handing over only if `someone_waits`. With group commit
    /// ([`crate::sale::group`]) the buyers a group just served may still be in the queue
    /// on their way out, and only those still on the group's waiting list take a turn.
    pub async fn release_handing_over_if(
        mut self,
        someone_waits: bool,
        lock: &Reentrant,
        guard: LockGuard,
        next: impl FnOnce() -> Owner,
    ) -> Result<(), LockError> {
        let released = if self.queue.hand_over && someone_waits && self.baton.in_a_row < HAND_OVERS_IN_A_ROW {
            lock.hand_over(guard, &next()).await
        } else {
            guard.release().await.map(|()| HandOver::Released)
        };
        let (handed, released) = match released {
            Ok(HandOver::Granted(next)) => {
                self.baton.handed = Some(Handed::Grant(next));
                self.baton.in_a_row += 1;
                (true, Ok(()))
            }
            // The backend's queue is fair by itself: the place waits behind every other
            // instance's entry, so it counts toward no bound.
            Ok(HandOver::Queued(place)) => {
                self.baton.handed = Some(Handed::Place(place));
                self.baton.in_a_row = 0;
                (true, Ok(()))
            }
            other => {
                if self.baton.in_a_row == HAND_OVERS_IN_A_ROW {
                    self.baton.step_aside_until = Some(Instant::now() + STEP_ASIDE);
                }
                self.baton.in_a_row = 0;
                (false, other.map(|_| ()))
            }
        };
        if handed {
            // A waiting buyer takes the turn as it passes; if none does (it gave up
            // meanwhile), nobody will claim the grant.
            self.pass_on().await;
        }
        released
    }
}
