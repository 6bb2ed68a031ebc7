//! A group's flow, from the buyer whose turn comes to each buyer's answer: the steps of one
//! sale (`crate::sale`, in its mod.rs) for many buyers at once, with one grant, one read,
//! one write and one release.

use std::future::Future;

use backon::{ConstantBuilder, Retryable};

use super::*;
use crate::lock::parts::reentrant::Reentrant;
use crate::lock::LockGuard;
use crate::metrics::{FencedStep, SaleStep};
use crate::sale::grant_log::unix_us;
use crate::sale::local_queue;
use crate::sale::stock::unix_ms;
use crate::sale::{conclude, new_sale_id, BuyerAnswer, Purchase, Released, Sale, Tried, SETTLE_DEADLINE, SETTLE_RETRY};

/// A buyer the group's leader never answered: a bug, said as one.
fn unanswered() -> AppError {
    AppError::internal("a group's leader ended without answering one of its buyers")
}

/// A buyer still waiting leaves with `if_left`; one a group took already waits for the
/// outcome the group tells it.
async fn leave_or_hear(waiting: &GroupQueue, ticket: &mut Ticket, if_left: AppError) -> MemberOutcome {
    match waiting.leave(ticket) {
        true => Err(if_left),
        false => (&mut ticket.outcome).await.unwrap_or_else(|_| Err(unanswered())),
    }
}

/// The leader runs its group to the end, and `hear`s its own outcome as soon as the group
/// tells it: the buyer hears it then, before the group's release, which goes on after.
async fn hear_while_leading(
    ticket: &mut Ticket,
    leading: impl Future<Output = ()>,
    hear: impl FnOnce(MemberOutcome) -> Tried,
) -> Tried {
    tokio::pin!(leading);
    tokio::select! {
        biased;
        outcome = &mut ticket.outcome => {
            let tried = hear(outcome.unwrap_or_else(|_| Err(unanswered())));
            leading.await;
            tried
        }
        // The group told every buyer before it released: the outcome is in the ticket.
        () = &mut leading => hear(ticket.answered().unwrap_or_else(|| Err(unanswered()))),
    }
}

/// The flow of a group, from the buyer whose turn comes to each buyer's answer: the
/// sale's own steps ([`Sale::sell_from`] and the rest, in `mod.rs`) for many buyers at once.
impl Sale {
    /// Steps 0 to 4 in one segment, in a group ([`crate::sale::group`]): the buyer joins
    /// the segment's waiting list, then waits for its turn in the local queue or for its
    /// outcome. The buyer whose turn comes leads a group ([`Sale::sell_to_group`]) and
    /// hears its own outcome, as every buyer of the group does, before the release.
    pub(in crate::sale) async fn sell_from_in_a_group(
        &self,
        groups: &GroupCommit,
        lock: &Reentrant,
        segment: Segment,
        last: bool,
        answer: &mut Option<BuyerAnswer>,
        purchase: &Purchase,
    ) -> Tried {
        let Some(queue) = self.local_queue.as_ref().map(|queues| &queues[segment.index as usize]) else {
            let error = AppError::internal("group commit without a local queue (refused at start)");
            return conclude(Err(error), last, answer);
        };
        let waiting = groups.waiting_in(segment);
        let deadline = purchase.waiting_since + self.acquire_timeout;
        let mut ticket = waiting.join(
            purchase.buyer.clone(),
            purchase.waiting_since,
            deadline,
            self.metrics.waiting_for_the_lock(),
        );
        let asked = Instant::now();
        let outcome = tokio::select! {
            biased;
            outcome = &mut ticket.outcome => outcome.unwrap_or_else(|_| Err(unanswered())),
            turn = queue.wait_for_turn(deadline) => match (turn, ticket.answered()) {
                // The group before took this buyer, and answered it as it passed the turn on.
                // A turn left unused passes on what was handed to it.
                (turn, Some(outcome)) => {
                    if let Some(turn) = turn {
                        turn.pass_on().await;
                    }
                    outcome
                }
                (None, None) => leave_or_hear(waiting, &mut ticket, self.lock_timeout(segment)).await,
                // The turn came as this buyer's deadline passed: it leaves, and the next
                // buyer leads (a group waits for the lock no longer than its earliest buyer).
                (Some(turn), None) if Instant::now() >= deadline && waiting.leave(&ticket) => {
                    turn.pass_on().await;
                    Err(self.lock_timeout(segment))
                }
                (Some(turn), None) => {
                    self.metrics.record_step(SaleStep::Queued, asked.elapsed());
                    let group = waiting.take(&ticket, groups.max);
                    let leading = self.sell_to_group(groups, lock, segment, turn, group);
                    return hear_while_leading(&mut ticket, leading, |outcome| conclude(outcome, last, answer)).await;
                }
            },
            // Not in a group yet: a stopping instance turns it away.
            () = self.in_flight.stopping.cancelled() => leave_or_hear(waiting, &mut ticket, AppError::ShuttingDown).await,
        };
        conclude(outcome, last, answer)
    }

    /// Steps 1 to 4 for a group, by its leader, who holds the segment's turn: one grant,
    /// one read, one write, each buyer told, one release.
    pub(in crate::sale) async fn sell_to_group(
        &self,
        groups: &GroupCommit,
        lock: &Reentrant,
        segment: Segment,
        mut turn: local_queue::Turn<'_>,
        mut group: Vec<Member>,
    ) {
        // No buyer of the group waits for the lock past its own deadline.
        let Some(deadline) = group.iter().map(|member| member.deadline).min() else {
            return;
        };
        let asked = Instant::now();
        let granted = tokio::select! {
            granted = self.grant_in_turn(lock, segment, Some(&mut turn), deadline) => granted,
            () = self.in_flight.stopping.cancelled() => Err(AppError::ShuttingDown),
        };
        let granted_at_us = unix_us();
        group.iter_mut().for_each(Member::done_waiting);
        let guard = match granted {
            Ok(guard) => guard,
            Err(error) => {
                for member in group {
                    member.tell(Err(error.clone()));
                }
                return;
            }
        };
        let holding = self.metrics.holding_a_lock();
        self.metrics.record_lock_wait(asked.elapsed().as_secs_f64());
        self.metrics.record_group(group.len());
        let outcomes = self.decrement_group(groups, &guard, segment, &group, deadline).await;
        let sold_or_tried = !outcomes
            .iter()
            .all(|outcome| matches!(outcome, Ok(SaleOutcome { sold: false, .. })));
        for (member, outcome) in group.into_iter().zip(outcomes) {
            member.tell(outcome);
        }
        let released = Released {
            segment,
            granted_at_us,
            sold_or_tried,
        };
        let someone_waits = groups.waiting_in(segment).someone_waits();
        self.release(lock, Some(turn), Some(someone_waits), guard, released)
            .await;
        drop(holding);
    }

    /// Steps 2 and 3 for a group under `guard`: one fenced read, then one fenced write of
    /// `min(buyers, stock)` units (see [`crate::sale::group`]). Each buyer's outcome, in
    /// the group's order; a refusal of the read or the write is every buyer's.
    pub(in crate::sale) async fn decrement_group(
        &self,
        groups: &GroupCommit,
        guard: &LockGuard,
        segment: Segment,
        group: &[Member],
        deadline: Instant,
    ) -> Vec<Result<SaleOutcome, AppError>> {
        let locked_at_ms = unix_ms(); // the lock was granted just before this call
        let token = self.fence_token(guard);
        // The group's read and write carry one id, as one sale's do: the fence's.
        let group_id = new_sale_id();

        // 2. Read and check, as one sale does; a group's read checks no buyer.
        let (stock, sale) = match self.read_for_group(guard, segment, group, &group_id, deadline).await {
            Ok(read) => read,
            Err(every_outcome) => return every_outcome,
        };

        // 3. Write every unit of the group, each buyer's record under its own sale id.
        let records = self.records_of(group, segment, guard, &group_id, locked_at_ms);
        let write = GroupWrite {
            segment,
            group_id: &group_id,
            stock_read: stock,
            read_from: &sale,
            token,
            records: &records,
        };
        let written = match self.write_group(groups, &write).await {
            Ok(written) => written,
            Err(every_outcome) => return every_outcome,
        };
        let outcomes: Vec<_> = group
            .iter()
            .zip(&records)
            .zip(written)
            .map(|((member, record), written)| match written {
                MemberWritten::Sold { stock_after } => Ok(told(
                    member,
                    guard,
                    SaleOutcome::sold(stock_after, &sale, segment, &record.sale_id),
                )),
                MemberWritten::SoldOut => Ok(told(member, guard, SaleOutcome::sold_out(0.0, None))),
                MemberWritten::AlreadyBought => Err(AppError::AlreadyBought),
            })
            .collect();
        if outcomes
            .iter()
            .any(|outcome| matches!(outcome, Ok(SaleOutcome { stock_after: 0, .. })))
        {
            // Emptied by the group, in the sale its read saw: the flag learns it.
            self.learn_empty(&sale, segment);
        }
        outcomes
    }

    /// Step 2 for a group under `guard`: the units in `segment` and the sale they belong
    /// to, or every buyer's outcome when the group stops here (a refused read, a segment
    /// read empty, a lease gone before the write).
    async fn read_for_group(
        &self,
        guard: &LockGuard,
        segment: Segment,
        group: &[Member],
        group_id: &str,
        deadline: Instant,
    ) -> Result<(i64, SaleName), Vec<Result<SaleOutcome, AppError>>> {
        let everyone = |error: AppError| every_buyer_hears(error, group.len());
        let token = self.fence_token(guard);
        let (stock, sale) = self
            .fenced_read(guard, segment, token, group_id, None, deadline)
            .await
            .map_err(everyone)?;
        if stock <= 0 {
            // Read empty: the flag learns it, under the name the segment showed.
            self.learn_empty(&sale, segment);
            let sold_out = |member: &Member| told(member, guard, SaleOutcome::sold_out(0.0, None));
            return Err(self.sold_out_here(segment, group, &sold_out).await);
        }
        // A lease that ran out while we read means someone else may be selling now.
        if !guard.is_held() {
            return Err(everyone(AppError::LockLost));
        }
        if let Some(pause) = self.chaos_pause_before_write {
            // As for one sale (see `decrement`): the window a paused holder writes in.
            tokio::time::sleep(pause).await;
        }
        Ok((stock, sale))
    }

    /// Each buyer's sale record for the group's write, under its own sale id and the
    /// group's. The script knows which unit each buyer gets, so none says `stock_before`.
    fn records_of(
        &self,
        group: &[Member],
        segment: Segment,
        guard: &LockGuard,
        group_id: &str,
        locked_at_ms: u64,
    ) -> Vec<SaleRecord> {
        group
            .iter()
            .map(|member| {
                SaleRecord::new(
                    &self.seller,
                    &new_sale_id(),
                    segment,
                    0,
                    guard.fencing_token().cloned(),
                    member.lock_wait_ms(),
                    locked_at_ms,
                )
                .with_buyer(member.buyer.as_ref())
                .in_group(group_id)
            })
            .collect()
    }

    /// Step 3's write for a group: each buyer's part of it, or, when nothing of it was
    /// sold or its outcome is not known, every buyer's outcome.
    pub(in crate::sale) async fn write_group(
        &self,
        groups: &GroupCommit,
        write: &GroupWrite<'_>,
    ) -> Result<Vec<MemberWritten>, Vec<Result<SaleOutcome, AppError>>> {
        let everyone = |error: AppError| every_buyer_hears(error, write.records.len());
        let writing = Instant::now();
        let written = groups.scripts.write(&self.store, write).await;
        self.metrics.record_step(SaleStep::Write, writing.elapsed());
        match written {
            Ok(GroupWritten::Written(written)) => Ok(written),
            Ok(GroupWritten::Fenced) => {
                tracing::warn!(token = ?write.token, buyers = write.records.len(), "the stock refused a group's write: another holder read in between");
                self.metrics.record_fencing_refusal(FencedStep::Write);
                Err(everyone(AppError::LockLost))
            }
            Ok(GroupWritten::SaleReset) => {
                tracing::info!(
                    group_id = write.group_id,
                    "a reset began a new sale between the group's read and its write; nothing was written"
                );
                Err(everyone(AppError::SaleReset))
            }
            Ok(GroupWritten::Aborted) => Err(everyone(AppError::internal("a group's sale id was reused"))),
            Err(error) => self.settle_group(groups, write, error).await,
        }
    }

    /// A group's read found `segment` empty: "sold out" to every buyer, but on a cluster
    /// with one unit per buyer, "already bought" to those who got a unit of it before
    /// (each segment a buyer passes checks its buyers: see [`crate::sale::buyers`]).
    pub(in crate::sale) async fn sold_out_here(
        &self,
        segment: Segment,
        group: &[Member],
        sold_out: &impl Fn(&Member) -> SaleOutcome,
    ) -> Vec<Result<SaleOutcome, AppError>> {
        let checked: Vec<&BuyerId> = group
            .iter()
            .filter_map(|member| self.store.buyer_to_check_per_segment(member.buyer.as_ref()))
            .collect();
        let bought = match checked.is_empty() {
            true => Vec::new(),
            false => match self.store.bought_here(segment, &checked).await {
                Ok(bought) => bought,
                Err(error) => return group.iter().map(|_| Err(AppError::from(error.clone()))).collect(),
            },
        };
        let bought_here = |buyer: &BuyerId| {
            checked
                .iter()
                .zip(&bought)
                .any(|(checked, &yes)| yes && *checked == buyer)
        };
        group
            .iter()
            .map(|member| match &member.buyer {
                Some(buyer) if bought_here(buyer) => Err(AppError::AlreadyBought),
                _ => Ok(sold_out(member)),
            })
            .collect()
    }

    /// A group's write went unanswered: ask Redis how it ended, as [`Sale::settle`] does
    /// for one sale. `Err` holds every buyer's answer when that cannot be known.
    pub(in crate::sale) async fn settle_group(
        &self,
        groups: &GroupCommit,
        write: &GroupWrite<'_>,
        error: StockError,
    ) -> Result<Vec<MemberWritten>, Vec<Result<SaleOutcome, AppError>>> {
        let each = |error: &dyn Fn(String) -> AppError| -> Vec<Result<SaleOutcome, AppError>> {
            write
                .records
                .iter()
                .map(|record| Err(error(record.sale_id.clone())))
                .collect()
        };
        if self.store.waits_for_replicas() {
            // As for one sale: whatever the master says now, a failover may undo.
            tracing::warn!(group_id = write.group_id, %error, "the group's sale is not known to be replicated; its outcome is unknown");
            return Err(each(&|sale_id| AppError::SaleOutcomeUnknown { sale_id }));
        }
        tracing::warn!(group_id = write.group_id, %error, "the group's write went unanswered; settling it");
        let until = Instant::now() + SETTLE_DEADLINE;
        let every_pause = ConstantBuilder::new().with_delay(SETTLE_RETRY).without_max_times();
        let settled = (|| {
            groups.scripts.settle(
                &self.store,
                write.segment,
                write.group_id,
                write.records,
                write.read_from,
            )
        })
        .retry(every_pause)
        .when(|_| Instant::now() < until)
        .await;
        match settled {
            Ok(GroupSettled::Written(written)) => Ok(written),
            Ok(GroupSettled::NotWritten) => Err(each(&|_| AppError::SaleNotWritten)),
            Ok(GroupSettled::Unknown) => Err(each(&|sale_id| AppError::SaleOutcomeLostInReset { sale_id })),
            Err(error) => {
                tracing::error!(group_id = write.group_id, %error, "redis did not answer; the group's outcome is unknown");
                Err(each(&|sale_id| AppError::SaleOutcomeUnknown { sale_id }))
            }
        }
    }
}

/// `outcome` as `member` hears it: with its wait for the lock and the grant's token.
fn told(member: &Member, guard: &LockGuard, outcome: SaleOutcome) -> SaleOutcome {
    outcome.under(member.lock_wait_ms(), guard.fencing_token().cloned())
}

/// One refusal, as each of a group's `buyers` hears it: nothing of the group was sold.
pub(in crate::sale) fn every_buyer_hears(error: AppError, buyers: usize) -> Vec<Result<SaleOutcome, AppError>> {
    vec![Err(error); buyers]
}
