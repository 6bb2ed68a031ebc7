//! A history's events paired into operations, one per request, then patched with what
//! Redis persisted, as etcd's robustness tests patch theirs: a request whose outcome the
//! buyer never learned is settled by the sale records where they can tell.
//!
//! - an `info` whose buyer has a sale record no answer claimed becomes a sale of that
//!   record's unit, still open (it took effect at some moment after it was sent);
//! - an `info` whose buyer has none is dropped: every sale writes its record in the
//!   script that takes its unit, so no record means no sale;
//! - an `info` that names no buyer cannot be told: it stays open, and the model may
//!   take it as a sale or as nothing; so does a "sold" that named no unit, which the
//!   `lost` check then judges;
//! - a sold answer whose sale record is in this sale is of this sale, whatever name it
//!   carries: an atomic sale settled after a lost answer names the sale its instance
//!   last saw, which may be the one before the reset.
//!
//! A steady load may be restocked while it runs ([`Fault::Restock`]): the reset deletes
//! the ended sale's records, so its requests cannot be patched or held against them.
//! [`Operations::set_apart_ended`] keeps them aside, where only `unique` reads them.

use std::collections::BTreeMap;

use seckill::api::SoldUnit;
use seckill::lock::FencingToken;
use seckill::sale::stock::SaleRecord;

use super::{Event, Fault, Process, What, SOLD_OUT, SOLD_UNNAMED};

/// One buyer's request, from its invocation to its end.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    pub process: u64,
    pub buyer: Option<String>,
    pub host: String,
    pub invoked_us: u64,
    /// When the buyer heard an answer; `None` if it heard none before the history ended.
    pub answered_us: Option<u64>,
    pub outcome: Outcome,
}

/// How a request ended, as the checks judge it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A unit was sold. `settled`: the buyer did not hear it; the sale records told.
    Sold {
        unit: SoldUnit,
        instance: String,
        fencing_token: Option<FencingToken>,
        settled: bool,
    },
    /// "Sold out": a statement about the stock, which the model judges.
    SoldOut,
    /// Nothing was sold, and the answer said so (`503 lock_timeout`, `409 already_bought`).
    Refused(String),
    /// The outcome is unknown and the records cannot tell (a request that named no buyer).
    Unknown(String),
}

impl Operation {
    /// When the operation's effect is known to be done: `None` (infinity) for one whose
    /// buyer never heard the outcome.
    pub fn returns_at(&self) -> Option<u64> {
        match &self.outcome {
            Outcome::Sold { settled: true, .. } | Outcome::Unknown(_) => None,
            _ => self.answered_us,
        }
    }

    pub fn sold_unit(&self) -> Option<&SoldUnit> {
        match &self.outcome {
            Outcome::Sold { unit, .. } => Some(unit),
            _ => None,
        }
    }

    /// `process 7 (buyer-7 via :8090)`: how a check names the operation.
    pub fn name(&self) -> String {
        let port = self.host.rsplit(':').next().unwrap_or(&self.host);
        match &self.buyer {
            Some(buyer) => format!("process {} ({buyer} via :{port})", self.process),
            None => format!("process {} (via :{port})", self.process),
        }
    }
}

/// The requests of a history, and what it says besides: the requests whose buyer heard
/// an `info` before the patch dropped or settled them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Operations {
    pub operations: Vec<Operation>,
    /// `info` answers whose sale records showed no sale: nothing happened.
    pub dropped: usize,
    /// `info` answers the sale records settled as sales.
    pub settled: usize,
    /// The requests of the sales a restock ended during the run, set apart by
    /// [`Operations::set_apart_ended`]: their records went with their sale.
    pub ended: Vec<Operation>,
}

/// The sales a restock ended during a run, by the names its `restock` events carry, each
/// with when its restock was recorded (once the reset had answered), and when the last
/// of those restocks was.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Restocks {
    ended: BTreeMap<String, u64>,
    last_us: Option<u64>,
}

impl Restocks {
    /// The restocks of `events`, but for the sale named `current`, the one the records
    /// read after the run belong to: a restock whose reset failed ended nothing, and its
    /// event still names the sale that went on.
    pub fn of(events: &[Event], current: &str) -> Restocks {
        let mut restocks = Restocks::default();
        for event in events {
            if let What::Fault {
                fault: Fault::Restock,
                detail,
                ..
            } = &event.what
            {
                if let Some(ended) = detail.as_deref().filter(|&ended| ended != current) {
                    restocks.ended.entry(ended.to_owned()).or_insert(event.at_us);
                    restocks.last_us = Some(event.at_us);
                }
            }
        }
        restocks
    }

    /// Whether `operation` belongs to a sale that ended: sold in it and sent before its
    /// restock (one sent after could not have bought in it), or told "sold out" before
    /// the last restock (a statement about the stock before it).
    fn hold(&self, operation: &Operation) -> bool {
        match (&operation.outcome, operation.answered_us, self.last_us) {
            (Outcome::Sold { unit, .. }, _, _) => self
                .ended
                .get(&unit.sale)
                .is_some_and(|&restocked_us| operation.invoked_us < restocked_us),
            (Outcome::SoldOut, Some(answered), Some(last)) => answered < last,
            _ => false,
        }
    }
}

impl Operations {
    /// Moves the requests of the sales `restocks` ended into [`Operations::ended`]. Called
    /// after [`patch`], which keeps in this sale every answer whose record it holds,
    /// whatever name the answer carries. A request whose outcome is unknown stays: the
    /// records of this sale settle it, or the model takes it as a sale or as nothing.
    pub fn set_apart_ended(&mut self, restocks: &Restocks) {
        let (ended, current) = std::mem::take(&mut self.operations)
            .into_iter()
            .partition(|operation| restocks.hold(operation));
        self.operations = current;
        self.ended = ended;
    }
}

/// Pairs every `invoke` with the event that ends it. A request still open when the
/// history ends is an `info` with the answer `no answer`.
pub fn pair(events: &[Event]) -> Vec<Operation> {
    let mut open: BTreeMap<u64, Operation> = BTreeMap::new();
    let mut done = Vec::new();
    for event in events {
        let Process::Buyer(process) = event.process else {
            continue;
        };
        let outcome = match &event.what {
            What::Invoke { buyer, host } => {
                let invoked = Operation {
                    process,
                    buyer: buyer.clone(),
                    host: host.clone(),
                    invoked_us: event.at_us,
                    answered_us: None,
                    outcome: Outcome::Unknown("no answer".into()),
                };
                done.extend(open.insert(process, invoked));
                continue;
            }
            What::Ok {
                instance,
                sold_unit,
                fencing_token,
            } => Outcome::Sold {
                unit: sold_unit.clone(),
                instance: instance.clone(),
                fencing_token: fencing_token.clone(),
                settled: false,
            },
            What::Fail { answer } if answer == SOLD_OUT => Outcome::SoldOut,
            What::Fail { answer } => Outcome::Refused(answer.clone()),
            What::Info { answer } => Outcome::Unknown(answer.clone()),
            What::Fault { .. } => continue,
        };
        if let Some(mut operation) = open.remove(&process) {
            operation.answered_us = Some(event.at_us);
            operation.outcome = outcome;
            done.push(operation);
        }
    }
    done.extend(open.into_values());
    done.sort_by_key(|operation| (operation.invoked_us, operation.process));
    done
}

/// The records no answer of `operations` claimed, by buyer, in the order they were
/// written (on a cluster the list is read segment by segment, so by the time of the write).
fn unclaimed_by_buyer<'r>(
    operations: &[Operation],
    records: &'r [SaleRecord],
) -> BTreeMap<&'r str, Vec<&'r SaleRecord>> {
    let claimed: std::collections::HashSet<&str> = operations
        .iter()
        .filter_map(|operation| operation.sold_unit().map(|unit| unit.sale_id.as_str()))
        .collect();
    let mut unclaimed: BTreeMap<&str, Vec<&SaleRecord>> = BTreeMap::new();
    for record in records
        .iter()
        .filter(|record| !claimed.contains(record.sale_id.as_str()))
    {
        if let Some(buyer) = &record.buyer {
            unclaimed.entry(buyer.as_str()).or_default().push(record);
        }
    }
    for left in unclaimed.values_mut() {
        left.sort_by_key(|record| record.sold_at_ms);
    }
    unclaimed
}

/// Settles the unknown outcomes of `operations` with the sale records of the sale named
/// `sale` (see the module's notes).
pub fn patch(mut operations: Vec<Operation>, sale: &str, records: &[SaleRecord]) -> Operations {
    let recorded: std::collections::HashSet<&str> = records.iter().map(|record| record.sale_id.as_str()).collect();
    for operation in &mut operations {
        if let Outcome::Sold { unit, .. } = &mut operation.outcome {
            if recorded.contains(unit.sale_id.as_str()) {
                unit.sale = sale.to_owned();
            }
        }
    }
    let mut unclaimed = unclaimed_by_buyer(&operations, records);
    let mut patched = Operations::default();
    for mut operation in operations {
        let (Outcome::Unknown(answer), Some(buyer)) = (&operation.outcome, &operation.buyer) else {
            patched.operations.push(operation);
            continue;
        };
        let sold_unnamed = answer == SOLD_UNNAMED;
        let record = unclaimed
            .get_mut(buyer.as_str())
            .and_then(|left| match left.is_empty() {
                true => None,
                false => Some(left.remove(0)),
            });
        match record {
            Some(record) => {
                operation.outcome = Outcome::Sold {
                    unit: SoldUnit {
                        sale: sale.to_owned(),
                        segment: record.segment.unwrap_or(0),
                        unit: record.stock_before,
                        sale_id: record.sale_id.clone(),
                    },
                    instance: record.instance.clone(),
                    fencing_token: record.fencing_token.clone(),
                    settled: true,
                };
                patched.settled += 1;
                patched.operations.push(operation);
            }
            // Told "sold" without a unit, and no record: the `lost` check judges it.
            None if sold_unnamed => patched.operations.push(operation),
            None => patched.dropped += 1,
        }
    }
    patched
}

/// The requests of `events` as the sale named `sale` judges them: paired, patched with
/// its `records`, and those of the sales a restock ended set apart.
pub fn of_sale(events: &[Event], sale: &str, records: &[SaleRecord]) -> Operations {
    let mut operations = patch(pair(events), sale, records);
    operations.set_apart_ended(&Restocks::of(events, sale));
    operations
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::history::{Event, Fault, NemesisName, Process, What};

    /// The nemesis struck `seckill-8080` with `fault` at `at_us`.
    pub fn fault(at_us: u64, fault: Fault) -> Event {
        Event {
            at_us,
            process: Process::Nemesis(NemesisName::Nemesis),
            what: What::Fault {
                fault,
                target: "seckill-8080".into(),
                detail: None,
            },
        }
    }

    pub fn invoke(at_us: u64, process: u64) -> Event {
        Event {
            at_us,
            process: Process::Buyer(process),
            what: What::Invoke {
                buyer: Some(format!("buyer-{process}")),
                host: "http://127.0.0.1:8080".into(),
            },
        }
    }

    pub fn sold(at_us: u64, process: u64, unit: i64) -> Event {
        Event {
            at_us,
            process: Process::Buyer(process),
            what: What::Ok {
                instance: "seckill-8080".into(),
                sold_unit: SoldUnit {
                    sale: "s".into(),
                    segment: 0,
                    unit,
                    sale_id: format!("sale-{process}"),
                },
                fencing_token: None,
            },
        }
    }

    pub fn ended(at_us: u64, process: u64, what: What) -> Event {
        Event {
            at_us,
            process: Process::Buyer(process),
            what,
        }
    }

    /// The third review's finding 2: "sold out" (process 2) from a memory of an old sale,
    /// while this sale of 2 units still has one, which a later buyer (process 3) gets.
    pub fn stale_sold_out() -> [Event; 6] {
        [
            invoke(0, 1),
            sold(2, 1, 2),
            invoke(3, 2),
            told_sold_out(4, 2),
            invoke(5, 3),
            sold(6, 3, 1),
        ]
    }

    /// Process `process` heard "sold out" at `at_us`.
    pub fn told_sold_out(at_us: u64, process: u64) -> Event {
        ended(
            at_us,
            process,
            What::Fail {
                answer: "sold_out".into(),
            },
        )
    }

    pub fn record(sale_id: &str, buyer: &str, stock_before: i64) -> SaleRecord {
        SaleRecord {
            sale_id: sale_id.into(),
            instance: "seckill-8080".into(),
            port: 8080,
            strategy: "redis".into(),
            stock_before,
            segment: None,
            buyer: Some(buyer.into()),
            fencing_token: None,
            group: None,
            lock_wait_ms: 0.0,
            locked_at_ms: 0,
            sold_at_ms: 0,
        }
    }

    #[test]
    fn each_invocation_pairs_with_the_next_event_of_its_process() {
        let events = [
            invoke(1, 1),
            invoke(2, 2),
            sold(5, 2, 3),
            ended(
                6,
                1,
                What::Fail {
                    answer: "sold_out".into(),
                },
            ),
            invoke(7, 3),
        ];
        let operations = pair(&events);
        let seen: Vec<(u64, Option<u64>, bool)> = operations
            .iter()
            .map(|op| (op.process, op.answered_us, matches!(op.outcome, Outcome::SoldOut)))
            .collect();
        assert_eq!(seen, [(1, Some(6), true), (2, Some(5), false), (3, None, false)]);
        assert_eq!(operations[1].sold_unit().map(|unit| unit.unit), Some(3));
        assert_eq!(operations[2].outcome, Outcome::Unknown("no answer".into()));
    }

    #[test]
    fn a_buyers_records_settle_its_requests_in_the_order_they_were_written() {
        // Two requests of one buyer, both unknown; on a cluster its records are read
        // segment by segment, the later sale first.
        let unknown = || What::Info {
            answer: "timeout".into(),
        };
        let mut events = vec![
            invoke(0, 1),
            invoke(1, 2),
            ended(9, 1, unknown()),
            ended(9, 2, unknown()),
        ];
        if let What::Invoke { buyer, .. } = &mut events[1].what {
            *buyer = Some("buyer-1".into());
        }
        let later = SaleRecord {
            sold_at_ms: 20,
            ..record("later", "buyer-1", 1)
        };
        let earlier = SaleRecord {
            sold_at_ms: 10,
            ..record("earlier", "buyer-1", 2)
        };
        let patched = patch(pair(&events), "s", &[later, earlier]);
        let settled: Vec<(u64, &str)> = patched
            .operations
            .iter()
            .map(|op| (op.process, op.sold_unit().unwrap().sale_id.as_str()))
            .collect();
        assert_eq!(settled, [(1, "earlier"), (2, "later")]);
    }

    #[test]
    fn an_unknown_outcome_is_settled_by_its_buyers_record_or_dropped_without_one() {
        let unknown = |answer: &str| What::Info { answer: answer.into() };
        let events = [
            invoke(1, 1),
            invoke(1, 2),
            invoke(1, 3),
            sold(4, 1, 3),
            ended(5, 2, unknown("504 sale_outcome_unknown")),
            ended(6, 3, unknown("timeout")),
        ];
        let records = [record("sale-1", "buyer-1", 3), record("lost-answer", "buyer-2", 2)];
        let patched = patch(pair(&events), "s", &records);
        assert_eq!((patched.settled, patched.dropped), (1, 1), "{patched:?}");
        let settled = &patched.operations[1];
        assert_eq!(settled.process, 2);
        assert_eq!(
            settled.sold_unit().map(|unit| (unit.unit, unit.sale_id.as_str())),
            Some((2, "lost-answer"))
        );
        assert_eq!(settled.returns_at(), None, "a settled sale is open: it ended unseen");
        assert_eq!(patched.operations.len(), 2, "buyer-3 has no record: nothing happened");
    }
}
