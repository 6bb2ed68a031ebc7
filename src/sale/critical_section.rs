//! Steps 2 and 3 of a sale, under the lock: the fenced read, the check, the fenced
//! write, and the settle of a write whose answer was lost. And the `atomic` strategy's
//! one script, which does the three inside Redis with no lock. The steps before (the
//! local queue, the acquire) and after (the release) are in [`super`].

use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable};

use crate::lock::{FencingToken, LockGuard};
use crate::metrics::{FencedStep, SaleStep};
use crate::sale::buyers::BuyerId;
use crate::sale::error::AppError;
use crate::sale::segments::Segment;
use crate::sale::stock::{unix_ms, AtomicOutcome, SaleName, SaleRecord, Settled, StockError, StockRead, WriteOutcome};
use crate::sale::{new_sale_id, Sale, SaleOutcome, SETTLE_DEADLINE, SETTLE_RETRY};

/// Between two tries of a fenced read whose Redis master was away (see [`Sale::decrement`]).
const READ_RETRY: Duration = Duration::from_millis(100);

impl Sale {
    /// Steps 2 and 3 under `guard`. The read waits out a failover of the stock's master
    /// until `deadline`, the buyer's ([`Sale::fenced_read`]): so a failover holds the
    /// buyers who hold a lock until there is a master again, instead of failing them.
    pub(super) async fn decrement(
        &self,
        guard: &LockGuard,
        segment: Segment,
        lock_wait_ms: f64,
        buyer: Option<&BuyerId>,
        deadline: Instant,
    ) -> Result<SaleOutcome, AppError> {
        let locked_at_ms = unix_ms(); // the lock was granted just before this call
        let token = self.fence_token(guard);
        // The fence remembers which sale read with a token, so this sale's write must
        // carry the id its read carried.
        let sale_id = new_sale_id();

        // 2. Read and check.
        let (stock, sale) = self
            .fenced_read(guard, segment, token, &sale_id, buyer, deadline)
            .await?;
        let under_this_grant = |outcome: SaleOutcome| outcome.under(lock_wait_ms, guard.fencing_token().cloned());
        let sold = |stock_after| under_this_grant(SaleOutcome::sold(stock_after, &sale, segment, &sale_id));
        if stock <= 0 {
            // Read empty: the flag learns it (see `crate::sale::sold_out`).
            self.learn_empty(&sale, segment);
            return Ok(under_this_grant(SaleOutcome::sold_out(0.0, None)));
        }
        if self.widen_race {
            // Baselines only: give the other buyers a turn here, so the race the lock
            // should close is hit in every run of the lesson, not just most.
            tokio::task::yield_now().await;
        }
        // A lease that ran out while we read means someone else may be selling now.
        if !guard.is_held() {
            return Err(AppError::LockLost);
        }
        if let Some(pause) = self.chaos_pause_before_write {
            // Checked a moment ago, written a moment later: a process stopped right here
            // (a GC pause, SIGSTOP) wakes up and writes with a lease that is long gone.
            // Only the fencing token can refuse that write. `make chaos` shows it.
            tokio::time::sleep(pause).await;
        }

        // 3. Write: the new stock, one more lucky buyer, and the record of it.
        let record = SaleRecord::new(
            &self.seller,
            &sale_id,
            segment,
            stock,
            guard.fencing_token().cloned(),
            lock_wait_ms,
            locked_at_ms,
        )
        .with_buyer(buyer);
        let outcome = self.write(segment, &record, &sale, token).await.map(sold);
        if let Ok(SaleOutcome { stock_after: 0, .. }) = &outcome {
            // Emptied by this sale, in the sale its read saw: the flag learns it.
            self.learn_empty(&sale, segment);
        }
        outcome
    }

    /// Step 3: writes one unit fewer than `record` read, one more lucky buyer and the
    /// record, fenced by `token`, in the sale its read saw. Answers the stock after the
    /// sale, or why nothing was sold; a write whose answer was lost is settled first.
    async fn write(
        &self,
        segment: Segment,
        record: &SaleRecord,
        sale: &SaleName,
        token: Option<&FencingToken>,
    ) -> Result<i64, AppError> {
        let stock = record.stock_before;
        let writing = Instant::now();
        let written = self.store.write(segment, record, stock - 1, sale, token).await;
        self.metrics.record_step(SaleStep::Write, writing.elapsed());
        match written {
            Ok(WriteOutcome::Sold) => Ok(stock - 1),
            Ok(WriteOutcome::Fenced) => {
                tracing::warn!(token = ?token, "the stock refused a write: another holder read in between");
                self.metrics.record_fencing_refusal(FencedStep::Write);
                Err(AppError::LockLost)
            }
            Ok(WriteOutcome::SaleReset) => {
                tracing::info!(
                    sale_id = record.sale_id,
                    "a reset began a new sale between the read and the write; nothing was written"
                );
                Err(AppError::SaleReset)
            }
            Ok(WriteOutcome::Aborted) => Err(AppError::internal("a sale id was reused")),
            Ok(WriteOutcome::AlreadyBought) => Err(AppError::AlreadyBought),
            Err(error) => match self.settle(segment, &record.sale_id, sale, error).await? {
                Settled::Sold { stock_after } => Ok(stock_after),
                Settled::NotSold => Err(AppError::SaleNotWritten),
                Settled::Unknown => Err(AppError::SaleOutcomeLostInReset {
                    sale_id: record.sale_id.clone(),
                }),
            },
        }
    }

    /// Step 2's read under `guard`, for one sale or a group's: the units in `segment` and
    /// the sale they belong to, or why this sale stops here. A read that fails because
    /// the stock's master is away (dead, or failing over: a Sentinel's or a cluster's)
    /// is tried again until `deadline`. Nothing was written yet, and a read with the same
    /// token and sale id is the same read to the fence.
    pub(super) async fn fenced_read(
        &self,
        guard: &LockGuard,
        segment: Segment,
        token: Option<&FencingToken>,
        sale_id: &str,
        buyer: Option<&BuyerId>,
        deadline: Instant,
    ) -> Result<(i64, SaleName), AppError> {
        let reading = Instant::now();
        let every_pause = ConstantBuilder::new().with_delay(READ_RETRY).without_max_times();
        let read = (|| self.store.read_for(segment, token, sale_id, buyer))
            .retry(every_pause)
            .when(|error| master_away(error) && guard.is_held() && Instant::now() < deadline)
            .notify(|error, _| tracing::debug!(%error, "the stock's master is away; reading again"))
            .await;
        self.metrics.record_step(SaleStep::Read, reading.elapsed());
        match read? {
            StockRead::Stock { units, sale } => Ok((units, sale)),
            StockRead::Fenced { newest } => {
                tracing::warn!(token = ?token, newest, "the stock refused a read: a newer holder, or another with this token, has been here");
                self.metrics.record_fencing_refusal(FencedStep::Read);
                Err(AppError::LockLost)
            }
            StockRead::OtherSegments { reset_with } => Err(AppError::SegmentsDisagree {
                this_instance: segment.of,
                reset_with,
            }),
            StockRead::AlreadyBought => Err(AppError::AlreadyBought),
        }
    }

    /// The write's answer was lost: ask Redis which outcome stands until it answers.
    /// `read_from` is the sale the read saw, or the one the atomic script was sent to.
    pub(super) async fn settle(
        &self,
        segment: Segment,
        sale_id: &str,
        read_from: &SaleName,
        error: StockError,
    ) -> Result<Settled, AppError> {
        if self.store.waits_for_replicas() {
            // The master may have the sale and its replicas not yet: whatever the master
            // says now, a failover may undo. The buyer is told the truth, that nobody knows.
            tracing::warn!(sale_id, %error, "the sale is not known to be replicated; its outcome is unknown");
            return Err(AppError::SaleOutcomeUnknown {
                sale_id: sale_id.to_owned(),
            });
        }
        tracing::warn!(sale_id, %error, "the write's answer was lost; settling the sale");
        let deadline = Instant::now() + SETTLE_DEADLINE;
        let every_pause = ConstantBuilder::new().with_delay(SETTLE_RETRY).without_max_times();
        (|| self.store.settle(segment, sale_id, read_from))
            .retry(every_pause)
            .when(|_| Instant::now() < deadline)
            .await
            .map_err(|error| {
                tracing::error!(sale_id, %error, "redis did not answer; the sale's outcome is unknown");
                AppError::SaleOutcomeUnknown {
                    sale_id: sale_id.to_owned(),
                }
            })
    }

    pub(super) async fn sell_atomically(&self, buyer: Option<&BuyerId>) -> Result<SaleOutcome, AppError> {
        let record =
            SaleRecord::new(&self.seller, &new_sale_id(), Segment::WHOLE, 0, None, 0.0, unix_ms()).with_buyer(buyer);
        let whole = Segment::WHOLE;
        // Taken before the script goes: the settle of a lost answer needs it (see `crate::sale::stock`).
        let sent_to = self.store.sale_seen_by_atomic();
        match self.store.sell_atomically(&record).await {
            Ok(AtomicOutcome::Sold { stock_before, sale }) => {
                Ok(SaleOutcome::sold(stock_before - 1, &sale, whole, &record.sale_id))
            }
            Ok(AtomicOutcome::SoldOut) => Ok(SaleOutcome::sold_out(0.0, None)),
            Ok(AtomicOutcome::Aborted) => Err(AppError::internal("a sale id was reused")),
            Ok(AtomicOutcome::AlreadyBought) => Err(AppError::AlreadyBought),
            Ok(AtomicOutcome::OtherSegments { reset_with }) => Err(AppError::SegmentsDisagree {
                this_instance: 1,
                reset_with,
            }),
            Err(error @ StockError::NotANumber { .. }) => Err(error.into()),
            Err(error) => match self.settle(whole, &record.sale_id, &sent_to, error).await? {
                Settled::Sold { stock_after } => Ok(SaleOutcome::sold(stock_after, &sent_to, whole, &record.sale_id)),
                Settled::NotSold => Err(AppError::SaleNotWritten),
                Settled::Unknown => Err(AppError::SaleOutcomeLostInReset {
                    sale_id: record.sale_id.clone(),
                }),
            },
        }
    }
}

/// Whether a stock operation failed because no master serves its key now: the server is
/// gone or silent, a replica, or a cluster whose slot has no master yet.
fn master_away(error: &StockError) -> bool {
    let StockError::Redis(error) = error else {
        return false;
    };
    crate::store::redis_master::may_mean_the_master_moved(error)
        || matches!(
            error.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown | redis::ServerErrorKind::TryAgain)
        )
}
