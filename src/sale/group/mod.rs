//! Group commit (`--group-commit`): one grant sells to every buyer waiting on the instance.
//!
//! A lock costs per grant, not per unit. The acquire, the fenced read, the fenced write,
//! the release and the next holder's wake-up are the same round trips whether the grant
//! sells one unit or forty, so every lock that sells one unit per grant stops at the same
//! bound ([`crate::lock::critical_path`]). A database pays for its log the same way and
//! groups its commits: a commit that finds the log busy waits, and the next write of the
//! log takes every commit that waited.
//!
//! ## How a group forms
//! 1. A buyer of a segment joins that segment's waiting list ([`GroupQueue::join`]), then
//!    waits for its turn in the segment's local queue ([`crate::sale::local_queue`]) or for
//!    its outcome, whichever comes first.
//! 2. The buyer whose turn comes leads: it takes itself and the oldest buyers still on the
//!    list, up to `--group-max` ([`GroupQueue::take`]). The buyers who arrive meanwhile
//!    wait for the next turn, and make the next group.
//! 3. The leader acquires the lock once and sells to the group: one fenced read, one
//!    fenced write ([`GROUP_WRITE_SCRIPT`]) that takes `min(buyers, stock)` units in the
//!    group's order, a sale record (and order, and buyer check) per unit, then one release.
//!    Each buyer is told its own outcome before the release: sold, sold out (the buyers
//!    past the stock, from the same read), or already bought.
//! 4. A buyer still on the list when its deadline passes, or when the instance stops,
//!    leaves it ([`GroupQueue::leave`]) and is not in any group. One a leader took already
//!    waits for the group's answer: the leader's steps after the grant are bounded, as a
//!    sale's are.
//!
//! ## The fence, for a group
//! The group's read and its write carry one token and one sale id, the group's, exactly
//! as one sale's do ([`crate::sale::stock`]), so the fence works on the group as it does on
//! a sale: a refused read or write refuses the whole group, every buyer of it hears
//! `503 lock_lost`, and nothing of it is sold. The group's units share that token; each
//! record names its group (`SaleRecord::group`), and a checker accepts equal tokens
//! within one group's records, and nowhere else.
//!
//! ## A group whose answer was lost
//! The write records each buyer's outcome under the buyer's own sale id, and `written`
//! under the group's id, in the script that sells. A settle
//! ([`GROUP_SETTLE_SCRIPT`]) finds those, or records the group's id `aborted` first, so
//! that a late write is refused: whichever reaches Redis first decides, as for one sale.
//!
//! ## What a group costs
//! A buyer waits for the group's slowest step, and a group that fails fails all its
//! buyers at once. The lessons' runs keep one sale per grant: the switch is off by default.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex as StdMutex;
use std::time::Instant;

use redis::Script;
use tokio::sync::oneshot;

use crate::lock::FencingToken;
use crate::metrics::Counted;
use crate::sale::buyers::BuyerId;
use crate::sale::error::AppError;
use crate::sale::segments::{Segment, Segments};
use crate::sale::stock::{SaleName, SaleRecord, SellingCall, StockError, StockStore};
use crate::sale::SaleOutcome;

mod flow;

/// The fenced write of a group: `min(buyers, stock)` units, one record each.
/// Its keys and arguments head the script: `src/sale/group/write.lua`.
pub const GROUP_WRITE_SCRIPT: &str = include_str!("write.lua");

/// Settle a group whose write went unanswered.
/// Its keys and arguments head the script: `src/sale/group/settle.lua`.
pub const GROUP_SETTLE_SCRIPT: &str = include_str!("settle.lua");

/// What one buyer is told: its own outcome in the group's sale.
pub type MemberOutcome = Result<SaleOutcome, AppError>;

/// A buyer on a waiting list, until a leader takes it into a group.
pub struct Member {
    id: u64,
    pub buyer: Option<BuyerId>,
    /// When the buyer started waiting (in any segment of its walk).
    pub waiting_since: Instant,
    /// The buyer's deadline for a grant: no group waits for the lock past its earliest.
    pub deadline: Instant,
    answer: oneshot::Sender<MemberOutcome>,
    /// The buyer counted in `seckill_lock_waiters` until its group is granted, or it
    /// leaves the list: as a buyer alone is counted until its grant.
    waiting: Option<Counted>,
}

impl Member {
    /// How long the buyer has waited, in milliseconds: its sale record's `lock_wait_ms`.
    pub fn lock_wait_ms(&self) -> f64 {
        self.waiting_since.elapsed().as_secs_f64() * 1000.0
    }
}

impl Member {
    /// The group's grant came, or will not come: this buyer no longer waits for the lock.
    pub fn done_waiting(&mut self) {
        self.waiting = None;
    }

    /// Tells the buyer its outcome. A buyer that is no longer listening has left: its
    /// unit, if it got one, stays sold and recorded.
    pub fn tell(self, outcome: MemberOutcome) {
        let _ = self.answer.send(outcome);
    }
}

/// A buyer's place on a waiting list: its id, and where its outcome arrives.
pub struct Ticket {
    id: u64,
    pub outcome: oneshot::Receiver<MemberOutcome>,
}

impl Ticket {
    /// Whether the group's leader has answered this buyer already.
    pub fn answered(&mut self) -> Option<MemberOutcome> {
        self.outcome.try_recv().ok()
    }
}

/// The buyers of one segment waiting to be taken into a group, oldest first.
#[derive(Default)]
pub struct GroupQueue {
    waiting: StdMutex<VecDeque<Member>>,
    next_id: AtomicU64,
}

impl GroupQueue {
    /// Puts a buyer on the list (step 1).
    pub fn join(&self, buyer: Option<BuyerId>, waiting_since: Instant, deadline: Instant, waiting: Counted) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, outcome) = oneshot::channel();
        self.list().push_back(Member {
            id,
            buyer,
            waiting_since,
            deadline,
            answer,
            waiting: Some(waiting),
        });
        Ticket { id, outcome }
    }

    /// The group the leader of `ticket` sells to (step 2): the leader first, then the
    /// oldest buyers on the list, `max` in all. Empty if the leader is not on the list:
    /// a group took it already, and its outcome has arrived.
    pub fn take(&self, ticket: &Ticket, max: usize) -> Vec<Member> {
        let mut list = self.list();
        let Some(at) = list.iter().position(|member| member.id == ticket.id) else {
            return Vec::new();
        };
        let mut group = Vec::with_capacity(max.min(list.len()));
        group.extend(list.remove(at));
        let (now, mut expired) = (Instant::now(), Vec::new());
        while group.len() < max {
            match list.pop_front() {
                // A buyer that stopped listening gave up its place (its task is gone).
                Some(member) if member.answer.is_closed() => continue,
                // One whose deadline passed leaves on its own; in a group it would cut
                // the group's wait for the lock to nothing.
                Some(member) if member.deadline <= now => expired.push(member),
                Some(member) => group.push(member),
                None => break,
            }
        }
        for member in expired.into_iter().rev() {
            list.push_front(member);
        }
        group
    }

    /// Whether a buyer waits on the list for the next group.
    pub fn someone_waits(&self) -> bool {
        !self.list().is_empty()
    }

    /// Takes a buyer off the list (step 4): `true` if it was still there, `false` if a
    /// leader took it into a group, whose answer will come.
    pub fn leave(&self, ticket: &Ticket) -> bool {
        let mut list = self.list();
        match list.iter().position(|member| member.id == ticket.id) {
            Some(at) => {
                list.remove(at);
                true
            }
            None => false,
        }
    }

    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<Member>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the group's write did for one buyer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberWritten {
    Sold {
        stock_after: i64,
    },
    /// The units ran out before this buyer's turn in the group.
    SoldOut,
    /// The buyer got a unit of this sale already (`--one-per-buyer`).
    AlreadyBought,
}

impl MemberWritten {
    fn parse(outcome: &str) -> Self {
        match (outcome, outcome.strip_prefix("sold:")) {
            (_, Some(stock_after)) => MemberWritten::Sold {
                stock_after: stock_after.parse().unwrap_or(0),
            },
            ("repeat", None) => MemberWritten::AlreadyBought,
            _ => MemberWritten::SoldOut,
        }
    }
}

/// What a group's fenced write did.
#[derive(Debug, PartialEq, Eq)]
pub enum GroupWritten {
    /// Each buyer's outcome, in the group's order.
    Written(Vec<MemberWritten>),
    /// A reset began a new sale since the read: nothing was written.
    SaleReset,
    /// A newer holder read since this holder's read: nothing was written.
    Fenced,
    /// The group's id was settled as aborted: nothing was written.
    Aborted,
}

/// How a group whose answer was lost ended.
#[derive(Debug, PartialEq, Eq)]
pub enum GroupSettled {
    Written(Vec<MemberWritten>),
    NotWritten,
    /// A reset deleted the outcomes before the settle: whether the write ran is unknown.
    Unknown,
}

/// One group's sale, as the leader writes it.
pub struct GroupWrite<'a> {
    pub segment: Segment,
    /// The group's sale id: its read's, which the fence remembers.
    pub group_id: &'a str,
    pub stock_read: i64,
    pub read_from: &'a SaleName,
    pub token: Option<&'a FencingToken>,
    /// One record per buyer, in the group's order; each its own sale id.
    pub records: &'a [SaleRecord],
}

/// Group commit in one instance: a waiting list per segment, the most buyers a group
/// takes, and the group's scripts.
pub struct GroupCommit {
    waiting: Vec<GroupQueue>,
    pub max: usize,
    pub scripts: GroupScripts,
}

impl GroupCommit {
    pub fn new(segments: Segments, max: u32) -> Self {
        GroupCommit {
            waiting: segments.all().map(|_| GroupQueue::default()).collect(),
            max: max as usize,
            scripts: GroupScripts::default(),
        }
    }

    /// The waiting list of `segment`.
    pub fn waiting_in(&self, segment: Segment) -> &GroupQueue {
        &self.waiting[segment.index as usize]
    }
}

/// The group's two scripts, loaded once per instance.
pub struct GroupScripts {
    write: Script,
    settle: Script,
}

impl Default for GroupScripts {
    fn default() -> Self {
        GroupScripts {
            write: Script::new(GROUP_WRITE_SCRIPT),
            settle: Script::new(GROUP_SETTLE_SCRIPT),
        }
    }
}

impl GroupScripts {
    /// Step 3's write: every unit of the group in one script, under the group's token.
    pub async fn write(&self, store: &StockStore, group: &GroupWrite<'_>) -> Result<GroupWritten, StockError> {
        let keys = store.keys();
        let segment = group.segment;
        let (epoch, counter) = match group.token {
            Some(token) => (token.epoch.to_string(), token.counter.to_string()),
            None => (String::new(), String::new()),
        };
        let mut args = vec![
            group.group_id.to_owned(),
            group.stock_read.to_string(),
            if store.orders() { "1" } else { "" }.to_owned(),
            group.read_from.0.clone(),
            epoch,
            counter,
        ];
        for record in group.records {
            let buyer = match (store.one_per_buyer(), &record.buyer) {
                (true, Some(buyer)) => buyer.clone(),
                _ => String::new(),
            };
            args.extend([record.sale_id.clone(), buyer, record_without_stock_before(record)]);
        }
        let call = SellingCall {
            script: &self.write,
            keys: vec![
                keys.stock_of(segment),
                keys.lucky_of(segment),
                keys.sales_of(segment),
                keys.outcomes_of(segment),
                keys.fence_of(segment),
                keys.fence_refusals_of(segment),
                keys.total_stock_of(segment),
                keys.buyers_of(segment),
                keys.orders_of(segment),
                keys.sale_name_of(segment),
            ],
            args,
        };
        let (answer, acknowledged) = store.run_selling::<Vec<String>>(&call).await?;
        let mut answer = answer?.into_iter();
        Ok(match answer.next().as_deref() {
            Some("written") => {
                let written: Vec<MemberWritten> = answer.map(|outcome| MemberWritten::parse(&outcome)).collect();
                if written
                    .iter()
                    .any(|member| matches!(member, MemberWritten::Sold { .. }))
                {
                    store.replicated(acknowledged)?;
                }
                GroupWritten::Written(written)
            }
            Some("reset") => GroupWritten::SaleReset,
            Some("fenced") => GroupWritten::Fenced,
            _ => GroupWritten::Aborted,
        })
    }

    /// Decides a group whose write went unanswered (see the module notes).
    pub async fn settle(
        &self,
        store: &StockStore,
        segment: Segment,
        group_id: &str,
        records: &[SaleRecord],
        read_from: &SaleName,
    ) -> Result<GroupSettled, StockError> {
        let mut invocation = self.settle.key(store.keys().outcomes_of(segment));
        invocation
            .key(store.keys().sale_name_of(segment))
            .arg(group_id)
            .arg(&read_from.0);
        for record in records {
            invocation.arg(&record.sale_id);
        }
        let answer: Vec<String> = invocation.invoke_async(&mut store.connection()).await?;
        let mut answer = answer.into_iter();
        Ok(match answer.next().as_deref() {
            Some("written") => GroupSettled::Written(answer.map(|outcome| MemberWritten::parse(&outcome)).collect()),
            Some("reset") => GroupSettled::Unknown,
            _ => GroupSettled::NotWritten,
        })
    }
}

/// The record as JSON without `stock_before`, which the group's write puts first once it
/// knows which unit the buyer gets.
fn record_without_stock_before(record: &SaleRecord) -> String {
    let mut json = serde_json::to_value(record).expect("a sale record serializes");
    if let Some(fields) = json.as_object_mut() {
        fields.remove("stock_before");
    }
    json.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_of(count: usize) -> (GroupQueue, Vec<Ticket>) {
        let queue = GroupQueue::default();
        let now = Instant::now();
        let later = now + std::time::Duration::from_secs(60);
        let tickets = (0..count).map(|_| queue.join(None, now, later, waiting())).collect();
        (queue, tickets)
    }

    /// A buyer's count in a gauge of its own.
    fn waiting() -> Counted {
        crate::metrics::Metrics::new("redis", "on", "group-test").waiting_for_the_lock()
    }

    #[test]
    fn a_buyer_past_its_deadline_stays_out_of_the_group_to_leave_on_its_own() {
        let (queue, tickets) = queue_of(1);
        let now = Instant::now();
        let late = queue.join(None, now, now, waiting());
        let after = queue.join(None, now, now + std::time::Duration::from_secs(60), waiting());
        let group = queue.take(&tickets[0], 64);
        let ids: Vec<u64> = group.iter().map(|member| member.id).collect();
        assert_eq!(ids, [tickets[0].id, after.id]);
        assert!(queue.leave(&late), "still on the list, to leave with its timeout");
    }

    #[test]
    fn the_leader_comes_first_then_the_oldest_up_to_the_most() {
        let (queue, tickets) = queue_of(5);
        let group = queue.take(&tickets[3], 3);
        let ids: Vec<u64> = group.iter().map(|member| member.id).collect();
        assert_eq!(ids, [tickets[3].id, tickets[0].id, tickets[1].id]);
        // The rest wait for the next group.
        assert_eq!(queue.take(&tickets[4], 64).len(), 2);
    }

    #[test]
    fn a_buyer_taken_into_a_group_cannot_leave_and_one_still_waiting_can() {
        let (queue, tickets) = queue_of(3);
        let group = queue.take(&tickets[0], 2);
        assert_eq!(group.len(), 2);
        assert!(!queue.leave(&tickets[1]), "taken: its answer will come");
        assert!(queue.leave(&tickets[2]), "still waiting: it leaves");
        assert!(queue.take(&tickets[2], 64).is_empty(), "and no group takes it");
    }

    #[test]
    fn a_buyer_that_stopped_listening_is_left_out_of_the_group() {
        let (queue, mut tickets) = queue_of(3);
        drop(tickets.remove(1));
        let group = queue.take(&tickets[0], 64);
        assert_eq!(group.len(), 2);
    }

    #[test]
    fn a_record_without_stock_before_reads_back_with_the_units_the_script_puts_first() {
        let seller = crate::sale::stock::Seller {
            instance: "seckill-8080".to_owned(),
            port: 8080,
            strategy: "redis",
        };
        let record = SaleRecord::new(&seller, "id-1", Segment::WHOLE, 0, None, 1.5, 7);
        let json = record_without_stock_before(&record);
        assert!(!json.contains("stock_before"), "{json}");
        // What GROUP_WRITE_SCRIPT does with it.
        let stored = format!("{{\"stock_before\":42,{}", &json[1..]);
        let read: SaleRecord = serde_json::from_str(&stored).unwrap();
        assert_eq!((read.stock_before, read.sale_id.as_str()), (42, "id-1"));
    }
}
