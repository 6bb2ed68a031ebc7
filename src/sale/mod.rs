//! One sale, start to end: the read-check-write under a lock, and what the buyer is told.
//!
//! ## The decrement under a lock
//! 0. Queue in process: the buyers of one instance line up (first come, first served)
//!    in the local queue of the lock key ([`crate::sale::local_queue`]), and only the head of
//!    the queue asks the distributed lock. Two instances then put two contenders before
//!    the backend instead of hundreds: a release is followed at once by the next local
//!    buyer's acquire (or hands it the lock, step 4), instead of by a crowd that polls
//!    or wakes up, and the backend serves the holder instead of the crowd. It changes
//!    who asks, never what a grant means: the distributed lock still decides between
//!    instances. (`--local-queue false` takes it away, to measure it.)
//! 1. Acquire the lock (wait at most the acquire timeout, the local queue included),
//!    unless the last holder handed it to this buyer's turn (step 4).
//! 2. Read the stock, fenced by the grant's token (see [`crate::sale::stock`]). If it is 0,
//!    the sale is over: sold out.
//! 3. Write `stock - 1`, `lucky + 1` and the sale record, fenced by the same token; in
//!    the same script, record the buyer (`--one-per-buyer`, [`crate::sale::buyers`]) and
//!    append the order (`--orders`, [`crate::orders`]).
//! 4. Answer the buyer from 2 and 3, then release the lock, whatever happened there,
//!    and log the grant's interval unless its read found the segment empty
//!    ([`crate::sale::grant_log`]). With a buyer waiting in the
//!    local queue, the release hands the lock to that buyer where the backend can: the
//!    direct hand-over of [`crate::sale::local_queue`].
//!
//! With the stock split into segments ([`crate::sale::segments`], `--stock-segments`), steps 0
//! to 4 run in one segment, under its own local queue and lock key, and again in the
//! next while the segment read is empty. "Sold out" means every segment was read empty.
//!
//! With `--group-commit` ([`group`]), steps 1 to 4 are taken once for every buyer then
//! waiting in the segment's local queue: one grant, one fenced read, one fenced write of
//! all their units, each buyer told its own outcome, one release.
//!
//! Steps 2 and 3 live in `critical_section.rs`; this file keeps the steps around them.
//! They are separate round trips on purpose: between them another buyer can
//! read the same `stock`. That gap is the race the lock must close, and the `none`
//! strategy shows what happens when nothing does. Step 3 is one script only so that a
//! crash cannot leave half a sale behind; it does not close the gap by itself.
//!
//! ## Answers that tell the truth
//! - The sale runs in a task of its own. When a buyer hangs up, axum drops the request
//!   handler; if the sale lived in that handler, a guard dropped between acquire and
//!   release would keep the lock for a whole TTL and stall every other buyer. In its
//!   own task the sale always reaches step 4.
//! - The buyer hears the outcome of the write, not of the release: a release that
//!   cannot reach its backend (a ZooKeeper that stopped answering, say) may retry for a
//!   long time, and a unit already sold must not come back as a timeout meanwhile.
//!
//! ## Stopping without breaking a sale
//! An instance asked to stop first turns away the buyers not yet granted the lock (in
//! its local queue or waiting for the lock), then waits for every sale that holds a
//! grant to finish, and only then gives its locks back ([`Sale::shut_down`]). Giving a
//! lock back under a sale that has read the stock but not yet written it would let
//! another instance sell the same unit. (A grant the backend made just as its waiter was
//! turned away is nobody's: it ends with its lease, or with the session the lock's
//! shutdown closes.)

pub mod segments;
pub mod keys;
pub mod buyers;
pub mod stock;
pub mod sold_out;
pub mod grant_log;
pub mod local_queue;
pub mod error;
pub mod group;
mod critical_section;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{Health, SoldUnit};
use crate::lock::critical_path::{step, Access::Write, Backend::StockRedis, Step};
use crate::lock::parts::reentrant::Reentrant;
use crate::lock::{DistributedLock, FencingToken, LockError, LockGuard, LockStats, Owner};
use crate::metrics::{Metrics, SaleStep};
use crate::sale::buyers::BuyerId;
use crate::sale::error::AppError;
use crate::sale::grant_log::{unix_us, GrantRecord};
use crate::sale::group::GroupCommit;
use crate::sale::local_queue::LocalQueue;
use crate::sale::segments::Segment;
use crate::sale::sold_out::{KnownEmpty, SoldOutMemory};
use crate::sale::stock::{SaleName, Seller, StockStore};
use crate::strategy::FencingStatus;

/// How long a sale keeps asking Redis how an unanswered write ended.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between two such questions.
const SETTLE_RETRY: Duration = Duration::from_millis(200);
/// Upper bound on everything after the lock is granted: a read and a write (each
/// bounded by the Redis response timeout), settling, release, and slack. The HTTP
/// request timeout is the acquire timeout plus this for each stock segment a buyer may
/// try, so it never cuts a sale short.
pub const STEPS_AFTER_ACQUIRE_BUDGET: Duration = Duration::from_secs(20);

/// What guards the stock: a lock around a read-modify-write, or one atomic script.
#[derive(Clone)]
pub enum Guarding {
    Lock(Reentrant),
    AtomicScript,
}

impl Guarding {
    /// Whether a release can hand the lock to the next buyer in its own request.
    pub fn hands_over(&self) -> bool {
        matches!(self, Guarding::Lock(lock) if lock.backend().hands_over())
    }

    /// Gives back every lock still held, at shutdown.
    async fn shutdown(&self) {
        if let Guarding::Lock(lock) = self {
            if let Err(error) = lock.shutdown().await {
                tracing::warn!(%error, "the lock did not shut down cleanly; its leases will run out on their own");
            }
        }
    }
}

/// The sale tasks of one instance, so that a shutdown can wait for them.
#[derive(Default)]
struct SalesInFlight {
    tasks: TaskTracker,
    /// Cancelled at shutdown: the sales not yet granted the lock give up.
    stopping: CancellationToken,
}

/// The sale's part of every lock's critical path (see [`crate::lock::critical_path`]):
/// the holder's fenced read and its write, two scripts on the stock Redis. The fenced
/// read writes too: it raises the token's high-water mark.
pub const CRITICAL_PATH: &[Step] = &[
    step("read the stock", StockRedis, Write, 1.0),
    step("write the sale", StockRedis, Write, 1.0),
];

/// The answer to one buyer.
#[derive(Clone, Debug, Serialize)]
pub struct SaleOutcome {
    pub sold: bool,
    /// The stock after this request: what it wrote (in its segment, when the stock is
    /// split), or 0 when sold out.
    pub stock_after: i64,
    pub lock_wait_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<FencingToken>,
    /// The unit sold, when one was: what the buyer's answer names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sold_unit: Option<SoldUnit>,
}

impl SaleOutcome {
    /// "Sold out", after waiting `lock_wait_ms` for locks.
    fn sold_out(lock_wait_ms: f64, fencing_token: Option<FencingToken>) -> Self {
        SaleOutcome {
            sold: false,
            stock_after: 0,
            lock_wait_ms,
            fencing_token,
            sold_unit: None,
        }
    }

    /// One unit sold: the one above `stock_after` in `segment` of the sale named `sale`,
    /// under the sale id `sale_id`.
    fn sold(stock_after: i64, sale: &SaleName, segment: Segment, sale_id: &str) -> Self {
        SaleOutcome {
            sold: true,
            stock_after,
            lock_wait_ms: 0.0,
            fencing_token: None,
            sold_unit: Some(SoldUnit {
                sale: sale.0.clone(),
                segment: segment.index,
                unit: stock_after + 1,
                sale_id: sale_id.to_owned(),
            }),
        }
    }

    /// The same answer, after waiting `lock_wait_ms` for locks under the grant of `token`.
    fn under(self, lock_wait_ms: f64, fencing_token: Option<FencingToken>) -> Self {
        SaleOutcome {
            lock_wait_ms,
            fencing_token,
            ..self
        }
    }
}

/// What a sale is made of, as the server builds it from the config.
pub struct SaleSetup {
    pub store: StockStore,
    pub guarding: Guarding,
    pub seller: Seller,
    pub acquire_timeout: Duration,
    /// How the sale is fenced: `On` checks the grant's token on the read and the write.
    pub fencing: FencingStatus,
    /// Yield between read and write: the baselines only, so their race shows every run.
    pub widen_race: bool,
    /// Chaos lessons only (`--chaos-pause-before-write-ms`): linger between the lease
    /// check and the write, the window in which a paused holder writes after its lease.
    pub chaos_pause_before_write: Option<Duration>,
    /// What `GET /metrics` shows.
    pub metrics: Arc<Metrics>,
    /// The sold-out flag (`--sold-out-flag`): the segments this instance saw empty.
    pub sold_out: Option<SoldOutMemory>,
    /// Step 0: the local queue in front of a distributed lock, one per segment of
    /// the stock; `None` for the baselines (whose lesson is the race) and with
    /// `--local-queue false`.
    pub local_queue: Option<Vec<LocalQueue>>,
    /// `--group-commit`: the most buyers one grant sells to; `None` sells one unit per
    /// grant. Needs the local queue, whose waiting buyers make the groups.
    pub group_max: Option<u32>,
}

/// Everything a sale needs; shared by every request of one instance.
pub struct Sale {
    store: StockStore,
    guarding: Guarding,
    seller: Seller,
    acquire_timeout: Duration,
    fencing: FencingStatus,
    widen_race: bool,
    chaos_pause_before_write: Option<Duration>,
    metrics: Arc<Metrics>,
    sold_out: Option<SoldOutMemory>,
    local_queue: Option<Vec<LocalQueue>>,
    /// With `--group-commit`: the buyers waiting to be sold to in a group (see [`group`]).
    groups: Option<GroupCommit>,
    /// Every sale task still running.
    in_flight: SalesInFlight,
}

impl Sale {
    pub fn new(setup: SaleSetup) -> Self {
        let groups = setup.group_max.map(|max| GroupCommit::new(setup.store.segments(), max));
        Sale {
            store: setup.store,
            guarding: setup.guarding,
            seller: setup.seller,
            acquire_timeout: setup.acquire_timeout,
            fencing: setup.fencing,
            widen_race: setup.widen_race,
            chaos_pause_before_write: setup.chaos_pause_before_write,
            metrics: setup.metrics,
            sold_out: setup.sold_out,
            groups,
            local_queue: setup.local_queue,
            in_flight: SalesInFlight::default(),
        }
    }

    /// The stock this sale sells from.
    pub fn store(&self) -> &StockStore {
        &self.store
    }

    /// How the sale is fenced.
    pub fn fencing(&self) -> FencingStatus {
        self.fencing
    }

    /// Who sells: the instance, its port and its strategy.
    pub fn seller(&self) -> &Seller {
        &self.seller
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The distributed lock under the sale's reentrancy; `None` for the atomic script.
    fn lock(&self) -> Option<&Arc<dyn DistributedLock>> {
        match &self.guarding {
            Guarding::Lock(lock) => Some(lock.backend()),
            Guarding::AtomicScript => None,
        }
    }

    /// What the lock counted since it started, for the locks that count, with what its
    /// strategy counts of its own beside it.
    pub fn lock_stats(&self) -> Option<LockStats> {
        let lock = self.lock()?;
        Some(LockStats::new(lock.stats()?, lock.own_stats()))
    }

    /// The metrics the lock's strategy keeps of its own (none for most).
    pub fn own_metrics(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.lock()
            .and_then(|lock| lock.own_stats())
            .map(|own| own.metrics)
            .unwrap_or_default()
    }

    /// How this sale sells, as `GET /healthz` tells it.
    pub fn health(&self) -> Health {
        let local_queue = self.local_queue.as_deref();
        Health {
            status: "ok".to_owned(),
            strategy: self.seller.strategy.to_owned(),
            fencing: self.fencing,
            local_queue: local_queue.is_some(),
            hand_over: local_queue.is_some_and(|queues| queues.iter().any(LocalQueue::hands_over)),
            stock_segments: self.store.segments().count(),
            sold_out_flag: self.sold_out.is_some(),
            one_per_buyer: self.store.one_per_buyer(),
            orders: self.store.orders(),
            stock_wait_replicas: self.store.replicas_waited_for(),
            group_max: self.groups.as_ref().map_or(0, |groups| groups.max as u32),
            instance: self.seller.instance.clone(),
            port: self.seller.port,
            key_prefix: self.store.keys().prefix().to_owned(),
            lock_stats: self.lock_stats(),
        }
    }

    /// Sells one unit to `buyer` if any is left, in a task of its own (see the module
    /// notes), and answers as soon as the outcome is known; the task may still be
    /// releasing the lock. With `--one-per-buyer` a buyer must be named, and one who
    /// already got a unit gets none (see [`crate::sale::buyers`]).
    pub async fn sell_one(self: &Arc<Self>, buyer: Option<BuyerId>) -> Result<SaleOutcome, AppError> {
        if self.store.one_per_buyer() && buyer.is_none() {
            return Err(AppError::BuyerRequired);
        }
        let (answer, answered) = oneshot::channel();
        let sale = self.clone();
        self.in_flight.tasks.spawn(async move {
            match &sale.guarding {
                Guarding::Lock(lock) => sale.sell_under_lock(lock, buyer, answer).await,
                Guarding::AtomicScript => {
                    let _ = answer.send(sale.sell_atomically(buyer.as_ref()).await);
                }
            }
        });
        answered
            .await
            .map_err(|_| AppError::internal("the sale's task ended without an answer"))?
    }

    /// Stops the sale: the sales not yet granted are turned away, the granted ones
    /// finish (each is bounded by the steps after the acquire), and only then are the
    /// locks given back. A lock given back earlier would let
    /// another instance sell the unit a sale here has read but not yet written.
    pub async fn shut_down(&self) {
        self.in_flight.stopping.cancel();
        self.in_flight.tasks.close();
        let bound = STEPS_AFTER_ACQUIRE_BUDGET;
        if tokio::time::timeout(bound, self.in_flight.tasks.wait()).await.is_err() {
            tracing::error!(
                still_running = self.in_flight.tasks.len(),
                ?bound,
                "sales still running after their bound; their locks are left to run out on their own"
            );
            return;
        }
        // A buyer turned away after the turn passed to it leaves its handed grant behind.
        for queue in self.local_queue.iter().flatten() {
            queue.give_back_left_over().await;
        }
        self.guarding.shutdown().await;
    }

    /// Steps 0 to 4, in one segment after another (see [`crate::sale::segments`]) until one
    /// has a unit or every one was read empty. The answer goes out as soon as the
    /// buyer's outcome is known, each release after it.
    async fn sell_under_lock(&self, lock: &Reentrant, buyer: Option<BuyerId>, answer: BuyerAnswer) {
        let waiting_since = Instant::now();
        let known = self.known_empty().await;
        let checked_buyer = self.store.buyer_to_check_per_segment(buyer.as_ref());
        let order: Vec<Segment> = match checked_buyer {
            // On a cluster, one walk per buyer (see `crate::sale::buyers`).
            Some(buyer) => {
                let segments = self.store.segments();
                segments.visiting_order(buyer.home(segments.count())).collect()
            }
            None => self.store.segments().random_visiting_order().collect(),
        };
        let (skipped, to_try): (Vec<Segment>, Vec<Segment>) =
            order.into_iter().partition(|segment| known.is_empty(*segment));
        if let (Some(buyer), false) = (checked_buyer, to_try.is_empty()) {
            // A segment the flag skips may be where this buyer got a unit before it emptied.
            let refused = match self.store.bought_in_any(&skipped, buyer).await {
                Ok(false) => None,
                Ok(true) => Some(AppError::AlreadyBought),
                Err(error) => Some(error.into()),
            };
            if let Some(refused) = refused {
                let _ = answer.send(Err(refused));
                return;
            }
        }
        let mut segments = to_try.into_iter().peekable();
        if segments.peek().is_none() {
            // Every segment is known empty in the sale of this name: no lock to ask.
            self.metrics.record_sold_out_from_memory();
            let _ = answer.send(Ok(SaleOutcome::sold_out(0.0, None)));
            return;
        }
        let purchase = Purchase { buyer, waiting_since };
        let mut answer = Some(answer);
        while let Some(segment) = segments.next() {
            let last = segments.peek().is_none();
            let tried = self.sell_from(lock, segment, last, &mut answer, &purchase).await;
            if tried == Tried::Answered {
                return;
            }
        }
    }

    /// With the sold-out flag, the sale's name and the segments known empty in it, read
    /// before any segment is (see [`crate::sale::sold_out`]). Nothing without the flag, for a
    /// sale no reset named, or when Redis does not answer (the sale then says what failed).
    async fn known_empty(&self) -> KnownEmpty {
        let Some(memory) = &self.sold_out else {
            return KnownEmpty::default();
        };
        match self.store.sale_name().await {
            Ok(Some(sale)) => memory.known_in(&sale),
            Ok(None) => KnownEmpty::default(),
            Err(error) => {
                tracing::debug!(%error, "cannot read the sale's name; the sold-out flag sits this sale out");
                KnownEmpty::default()
            }
        }
    }

    /// Steps 0 to 4 in one segment. The buyer is answered here unless the segment was
    /// empty and another is left to try. With `--group-commit`, in a group
    /// ([`Sale::sell_from_in_a_group`]).
    async fn sell_from(
        &self,
        lock: &Reentrant,
        segment: Segment,
        last: bool,
        answer: &mut Option<BuyerAnswer>,
        purchase: &Purchase,
    ) -> Tried {
        if let Some(groups) = &self.groups {
            return self
                .sell_from_in_a_group(groups, lock, segment, last, answer, purchase)
                .await;
        }
        let waiting_since = purchase.waiting_since;
        let asked = Instant::now();
        let waiting = self.metrics.waiting_for_the_lock();
        let granted = tokio::select! {
            granted = self.wait_for_the_lock(lock, segment, asked, waiting_since + self.acquire_timeout) => granted,
            // Not granted yet: nothing to finish, so a stopping instance turns it away.
            () = self.in_flight.stopping.cancelled() => Err(AppError::ShuttingDown),
        };
        let granted_at_us = unix_us();
        let (turn, guard) = match granted {
            Ok(granted) => granted,
            Err(error) => return conclude(Err(error), last, answer),
        };
        drop(waiting);
        let holding = self.metrics.holding_a_lock();
        self.metrics.record_lock_wait(asked.elapsed().as_secs_f64());
        // What the buyer waited for locks: in every segment it tried so far.
        let lock_wait_ms = waiting_since.elapsed().as_secs_f64() * 1000.0;

        // 2 and 3. Read, check, write; and tell the buyer, unless another segment may have a unit.
        let outcome = self
            .decrement(
                &guard,
                segment,
                lock_wait_ms,
                purchase.buyer.as_ref(),
                waiting_since + self.acquire_timeout,
            )
            .await;
        let empty = matches!(outcome, Ok(SaleOutcome { sold: false, .. }));
        let next = conclude(outcome, last, answer);

        // 4. Release, even if the decrement failed: the next buyer should not wait out a TTL.
        let released = Released {
            segment,
            granted_at_us,
            sold_or_tried: !empty,
        };
        self.release(lock, turn, None, guard, released).await;
        drop(holding);
        next
    }

    /// With the sold-out flag, remembers that `segment` is empty in the sale named `sale`:
    /// the name the segment itself showed in the read, not the one the buyer read before
    /// it. On a cluster a reset renames the sale before it resets each segment, and a
    /// segment not reset yet is still the old sale's (see `crate::sale::sold_out`).
    fn learn_empty(&self, sale: &SaleName, segment: Segment) {
        if let (Some(memory), false) = (&self.sold_out, sale.0.is_empty()) {
            memory.learn_empty(&sale.0, segment);
        }
    }

    /// Step 4: gives the lock back (to the next buyer of the local queue, where it can),
    /// then logs the grant. `someone_waits` overrides the local queue's own count of the
    /// buyers after this one (group commit knows better, see [`crate::sale::group`]).
    async fn release(
        &self,
        lock: &Reentrant,
        turn: Option<local_queue::Turn<'_>>,
        someone_waits: Option<bool>,
        guard: LockGuard,
        released: Released,
    ) {
        let grant = GrantRecord {
            instance: self.seller.instance.clone(),
            segment: released.segment.label(),
            fencing_token: guard.fencing_token().cloned(),
            granted_at_us: released.granted_at_us,
            released_at_us: unix_us(),
        };
        let releasing = Instant::now();
        let next = || Owner::new(&self.seller.instance);
        let outcome = match (turn, someone_waits) {
            // The local queue hands the lock to its next buyer where it can.
            (Some(turn), Some(waits)) => turn.release_handing_over_if(waits, lock, guard, next).await,
            (Some(turn), None) => turn.release(lock, guard, next).await,
            (None, _) => guard.release().await,
        };
        self.metrics.record_step(SaleStep::Release, releasing.elapsed());
        match outcome {
            Ok(()) => {}
            // A fenced sale cannot have overlapped another holder's; an unfenced one may have.
            Err(LockError::Lost { key }) => {
                tracing::warn!(key, fenced = self.fencing.is_on(), "lock expired before release");
            }
            // Each lock cleans up after a failed release (it retries the delete, or the key
            // goes with its lease or session): nothing stays held for good.
            Err(error) => {
                tracing::warn!(%error, "release failed; the lock deletes the grant in the background, or it ends with its lease or session")
            }
        }
        // Off the lock's path: the next local buyer may already hold it. A grant that read
        // an empty segment sold nothing and could sell nothing, so it is not logged: after
        // the sell-out, the log would otherwise grow with every answer.
        if released.sold_or_tried {
            if let Err(error) = grant_log::append(&self.store, &grant).await {
                tracing::debug!(%error, "the grant log missed a grant");
            }
        }
    }

    /// Steps 0 and 1 in `segment`, by `deadline`: our turn in this instance's local
    /// queue of that segment (kept until after the release), then its lock: the grant
    /// the last holder handed to this turn, or a grant of our own. Each sale is an
    /// owner of its own.
    async fn wait_for_the_lock(
        &self,
        lock: &Reentrant,
        segment: Segment,
        asked: Instant,
        deadline: Instant,
    ) -> Result<(Option<local_queue::Turn<'_>>, LockGuard), AppError> {
        let mut turn = match &self.local_queue {
            // The deadline is the buyer's, over every segment it tried.
            Some(queues) => Some(
                queues[segment.index as usize]
                    .wait_for_turn(deadline)
                    .await
                    .ok_or_else(|| self.lock_timeout(segment))?,
            ),
            None => None,
        };
        let queued = Instant::now();
        self.metrics.record_step(SaleStep::Queued, queued - asked);
        let guard = self.grant_in_turn(lock, segment, turn.as_mut(), deadline).await?;
        Ok((turn, guard))
    }

    /// Step 1 once the turn is ours (or without a local queue): the grant the last
    /// holder handed to this turn, or a grant of our own, by `deadline`.
    async fn grant_in_turn(
        &self,
        lock: &Reentrant,
        segment: Segment,
        turn: Option<&mut local_queue::Turn<'_>>,
        deadline: Instant,
    ) -> Result<LockGuard, AppError> {
        let queued = Instant::now();
        let handed = match turn {
            Some(turn) => turn.handed_grant_or_step_aside(deadline).await,
            None => None,
        };
        let guard = match handed {
            Some(guard) => guard,
            None => {
                let owner = Owner::new(&self.seller.instance);
                // From now: a step aside or a queued place may have used some of it.
                let left = deadline.saturating_duration_since(Instant::now());
                lock.acquire(&self.store.keys().lock_of(segment), &owner, left).await?
            }
        };
        self.metrics.record_step(SaleStep::Lock, queued.elapsed());
        Ok(guard)
    }

    /// The token the stock checks for a sale under `guard`: the grant's, unless fencing is off.
    fn fence_token<'g>(&self, guard: &'g LockGuard) -> Option<&'g FencingToken> {
        guard.fencing_token().filter(|_| self.fencing.is_on())
    }

    /// The error of a buyer whose deadline passed before its turn came.
    fn lock_timeout(&self, segment: Segment) -> AppError {
        LockError::Timeout {
            key: self.store.keys().lock_of(segment),
            waited: self.acquire_timeout,
        }
        .into()
    }
}

/// One buyer's request, as it walks the segments.
struct Purchase {
    buyer: Option<BuyerId>,
    /// When the buyer started waiting: its acquire timeout counts over every segment.
    waiting_since: Instant,
}

/// Where a buyer's answer goes: to the request that waits for it.
type BuyerAnswer = oneshot::Sender<Result<SaleOutcome, AppError>>;

/// How the try of one segment ended.
#[derive(Debug, PartialEq, Eq)]
enum Tried {
    /// The buyer was told the outcome.
    Answered,
    /// The segment was empty, and another is left to try.
    Empty,
}

/// Tells the buyer its outcome in one segment, unless the segment was empty and another
/// is left to try (`last` is false).
fn conclude(outcome: Result<SaleOutcome, AppError>, last: bool, answer: &mut Option<BuyerAnswer>) -> Tried {
    if !last && matches!(outcome, Ok(SaleOutcome { sold: false, .. })) {
        return Tried::Empty;
    }
    if let Some(answer) = answer.take() {
        let _ = answer.send(outcome);
    }
    Tried::Answered
}

/// What the release of a grant logs (see [`Sale::release`]).
struct Released {
    segment: Segment,
    granted_at_us: u64,
    /// Whether the grant sold, or failed trying; one that read its segment empty is not logged.
    sold_or_tried: bool,
}

/// 96 random bits: no two sale attempts share an id.
fn new_sale_id() -> String {
    format!("{:024x}", rand::random::<u128>() >> 32)
}
