//! The checks a history must pass, each with a name the report shows and the operations
//! that fail it. They read the operations (patched, see [`super::operations`]) and the
//! sale records Redis persisted, in the order they were written.
//!
//! | check | fails when |
//! | --- | --- |
//! | `unique` | two buyers were told they bought one unit (of one sale and segment, a sale a restock ended too) |
//! | `lost` | a buyer told "sold" has no sale record |
//! | `phantom` | a sale record belongs to no buyer told "sold" or left not knowing |
//! | `sold-out` | "sold out" was answered while a unit was never taken by a request sent before that answer |
//! | `real-time` | a request sent after a "sold out" was answered came back "sold" |
//! | `one-per-buyer` | with `--one-per-buyer`, a buyer got two units |
//! | `fence-order` | fencing tokens went backwards along the order the sales were written (equal only within one group) |
//! | `linearizable` | no order of the requests explains every answer ([`super::linearizable`]) |
//!
//! Two files hold the checks, split by what they read beside the operations:
//! 1. [`answers`]: the answers alone, and the model of the stock (`unique`, `sold-out`,
//!    `real-time`, `one-per-buyer`, `linearizable`); a history checked alone runs them.
//! 2. [`records`]: the answers against the sale records Redis persisted (`lost`,
//!    `phantom`, `fence-order`); skipped when only the history was given.
//!
//! This module runs them all, and keeps how a check answers and how a finding names
//! the requests it found.

mod answers;
mod records;

pub use records::fence_regressions;

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use seckill::sale::stock::SaleRecord;

use super::linearizable::StockModel;
use super::operations::{self, Operation, Operations, Outcome, Restocks};
use super::Event;

use answers::{linearizable, one_per_buyer, real_time, sold_out, unique};
use records::{lost, phantom, with_culprits};

/// How long the linearizability search of one segment may take before it says `unknown`.
pub const SEARCH_LIMIT: Duration = Duration::from_secs(10);

/// What the checks read.
pub struct Evidence<'a> {
    pub operations: &'a Operations,
    /// The sale records, in the order they were written; `None` for a history checked
    /// alone (`loadtest check`), which skips the checks that read them.
    pub records: Option<&'a [SaleRecord]>,
    pub model: &'a StockModel,
    pub one_per_buyer: bool,
}

/// One check's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    /// What fails it, naming the operations; or why it was not run, or what it could not tell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// The processes of the requests that show the failure, those of the first finding
    /// first: the timeline draws them in red.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub culprits: Vec<u64>,
}

/// One thing a check found, and the processes of the requests that show it.
pub struct Finding {
    text: String,
    processes: Vec<u64>,
}

impl Finding {
    fn new(text: String, operations: &[&Operation]) -> Finding {
        let processes = operations.iter().map(|operation| operation.process).collect();
        Finding { text, processes }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    /// The check could not decide (the search ran out of time): never a pass.
    Unknown,
    /// Nothing to check in this run (no tokens, `--one-per-buyer` off).
    Skipped,
}

impl Check {
    /// Passed when nothing was found; else failed, with the first [`SHOWN`] findings.
    fn of(name: &str, found: Vec<Finding>) -> Check {
        let status = if found.is_empty() { Status::Pass } else { Status::Fail };
        let culprits = found
            .iter()
            .flat_map(|finding| finding.processes.iter().copied())
            .collect();
        let mut findings: Vec<String> = found.into_iter().map(|finding| finding.text).collect();
        if findings.len() > SHOWN {
            let more = findings.len() - SHOWN;
            findings.truncate(SHOWN);
            findings.push(format!("{more} more like these"));
        }
        Check {
            name: name.to_owned(),
            status,
            findings,
            culprits,
        }
    }

    /// A check of what the servers hold rather than of the requests (the orders of a
    /// steady load): failed by each of `problems`, which name no request.
    pub fn of_problems(name: &str, problems: Vec<String>) -> Check {
        let found = problems.into_iter().map(|text| Finding {
            text,
            processes: Vec::new(),
        });
        Check::of(name, found.collect())
    }

    fn skipped(name: &str, why: &str) -> Check {
        Check {
            name: name.to_owned(),
            status: Status::Skipped,
            findings: vec![why.to_owned()],
            culprits: Vec::new(),
        }
    }
}

/// Why a history checked alone skips the checks that compare it with the sale records.
const NO_RECORDS: &str = "only the history was given: no sale records to compare it with";

/// The most operations a finding lists; the rest are counted.
const SHOWN: usize = 5;

/// Every check, in the order of the table above.
pub fn run_all(evidence: &Evidence) -> Vec<Check> {
    let operations = &evidence.operations.operations;
    vec![
        Check::of("unique", unique(operations.iter().chain(&evidence.operations.ended))),
        match evidence.records {
            Some(records) => Check::of("lost", lost(operations, records)),
            None => Check::skipped("lost", NO_RECORDS),
        },
        match evidence.records {
            Some(records) => Check::of("phantom", phantom(operations, records)),
            None => Check::skipped("phantom", NO_RECORDS),
        },
        Check::of("sold-out", sold_out(operations, evidence.model)),
        Check::of("real-time", real_time(operations)),
        match evidence.one_per_buyer {
            true => Check::of("one-per-buyer", one_per_buyer(operations)),
            false => Check::skipped("one-per-buyer", "the sale does not hold buyers to one unit"),
        },
        match evidence.records.map(fence_regressions) {
            Some(Some(regressions)) => Check::of("fence-order", with_culprits(regressions, operations)),
            Some(None) => Check::skipped("fence-order", "no sale record carries a fencing token"),
            None => Check::skipped("fence-order", NO_RECORDS),
        },
        linearizable(operations, evidence.model),
    ]
}

/// The checks of a history with no sale records beside it (`loadtest check`): its
/// requests as they were answered, not patched; `lost`, `phantom` and `fence-order`
/// are skipped. The model's sale is the one most "sold" answers name, of the sales no
/// restock ended.
pub fn run_on_history_alone(events: &[Event], stock: &[i64], one_per_buyer: bool) -> Vec<Check> {
    let mut operations = Operations {
        operations: operations::pair(events),
        ..Operations::default()
    };
    // No records tell which sale is current: every sale a restock names ended.
    operations.set_apart_ended(&Restocks::of(events, ""));
    let mut named: HashMap<&str, usize> = HashMap::new();
    for unit in operations.operations.iter().filter_map(Operation::sold_unit) {
        *named.entry(unit.sale.as_str()).or_default() += 1;
    }
    let sale = named
        .into_iter()
        .max_by_key(|&(sale, count)| (count, sale))
        .map(|(sale, _)| sale.to_owned());
    let model = StockModel {
        sale: sale.unwrap_or_default(),
        units_per_segment: stock.to_vec(),
    };
    run_all(&Evidence {
        operations: &operations,
        records: None,
        model: &model,
        one_per_buyer,
    })
}

/// The names of `operations`, the first [`SHOWN`] of them, joined with "and".
fn named(operations: &[&Operation]) -> String {
    let mut names: Vec<String> = operations
        .iter()
        .take(SHOWN)
        .map(|operation| operation.name())
        .collect();
    if operations.len() > SHOWN {
        names.push(format!("{} others", operations.len() - SHOWN));
    }
    names.join(" and ")
}

fn answer_of(operation: &Operation) -> String {
    match &operation.outcome {
        Outcome::Sold { unit, .. } => format!("\"sold\" (unit {})", unit.unit),
        Outcome::SoldOut => "\"sold out\"".to_owned(),
        Outcome::Refused(answer) | Outcome::Unknown(answer) => format!("`{answer}`"),
    }
}

/// Microseconds as milliseconds since the history's first invocation, for findings.
fn at(operations: &[Operation], us: u64) -> String {
    let first = operations
        .iter()
        .map(|operation| operation.invoked_us)
        .min()
        .unwrap_or(us);
    format!("{:.1} ms", us.saturating_sub(first) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::history::operations::{of_sale, tests::*};
    use crate::history::{Event, Fault, What};

    fn model(units: i64) -> StockModel {
        StockModel {
            sale: "s".into(),
            units_per_segment: vec![units],
        }
    }

    /// The checks of a history, by name: status and findings.
    fn checks(events: &[Event], records: &[SaleRecord], units: i64) -> BTreeMap<String, (Status, Vec<String>)> {
        let operations = of_sale(events, "s", records);
        let evidence = Evidence {
            operations: &operations,
            records: Some(records),
            model: &model(units),
            one_per_buyer: true,
        };
        run_all(&evidence)
            .into_iter()
            .map(|check| (check.name, (check.status, check.findings)))
            .collect()
    }

    fn failed(checks: &BTreeMap<String, (Status, Vec<String>)>) -> Vec<&str> {
        checks
            .iter()
            .filter(|(_, (status, _))| *status == Status::Fail)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    #[test]
    fn a_sale_that_sold_each_unit_once_passes_every_check() {
        let events = [
            invoke(0, 1),
            invoke(0, 2),
            invoke(0, 3),
            sold(4, 1, 2),
            sold(5, 2, 1),
            told_sold_out(6, 3),
        ];
        let records = [record("sale-1", "buyer-1", 2), record("sale-2", "buyer-2", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), Vec::<&str>::new(), "{checks:?}");
        assert_eq!(checks["fence-order"].0, Status::Skipped, "no tokens in these records");
    }

    #[test]
    fn one_unit_sold_to_two_buyers_fails_unique_naming_both() {
        let events = [invoke(0, 1), invoke(0, 2), sold(4, 1, 2), sold(5, 2, 2)];
        let records = [record("sale-1", "buyer-1", 2), record("sale-2", "buyer-2", 2)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), ["linearizable", "unique"]);
        assert_eq!(
            checks["unique"].1,
            ["unit 2 of segment 0 was sold to process 1 (buyer-1 via :8080) and process 2 (buyer-2 via :8080)"]
        );
    }

    #[test]
    fn a_history_alone_is_checked_without_the_checks_that_read_the_records() {
        let events = stale_sold_out();
        let checks: BTreeMap<String, Status> = run_on_history_alone(&events, &[2], false)
            .into_iter()
            .map(|check| (check.name, check.status))
            .collect();
        let with = |status: Status| -> Vec<&str> {
            checks
                .iter()
                .filter(|(_, s)| **s == status)
                .map(|(name, _)| name.as_str())
                .collect()
        };
        assert_eq!(with(Status::Fail), ["linearizable", "real-time", "sold-out"]);
        assert_eq!(
            with(Status::Skipped),
            ["fence-order", "lost", "one-per-buyer", "phantom"]
        );
        assert_eq!(with(Status::Pass), ["unique"]);
    }

    #[test]
    fn a_stale_sold_out_fails_sold_out_and_real_time() {
        let events = stale_sold_out();
        let records = [record("sale-1", "buyer-1", 2), record("sale-3", "buyer-3", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), ["linearizable", "real-time", "sold-out"]);
        assert_eq!(
            checks["sold-out"].1,
            ["process 2 (buyer-2 via :8080) heard \"sold out\" at 0.0 ms, but 1 unit(s) were never taken by a request sent before that"]
        );
        assert!(
            checks["real-time"].1[0].starts_with("process 3 (buyer-3 via :8080) was sent at 0.0 ms, after process 2"),
            "{:?}",
            checks["real-time"]
        );
    }

    #[test]
    fn a_sold_answer_without_its_record_fails_lost_and_a_record_without_its_buyer_fails_phantom() {
        let events = [
            invoke(0, 1),
            invoke(0, 2),
            sold(4, 1, 2),
            ended(
                5,
                2,
                What::Fail {
                    answer: "503 lock_lost".into(),
                },
            ),
        ];
        let records = [record("sale-2", "buyer-2", 2)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), ["lost", "phantom"]);
        assert_eq!(
            checks["phantom"].1,
            ["sale sale-2 of unit 2 is in Redis, and process 2 (buyer-2 via :8080) heard `503 lock_lost`"]
        );
    }

    #[test]
    fn a_correct_sale_whose_answer_was_lost_passes() {
        let events = [
            invoke(0, 1),
            invoke(0, 2),
            ended(
                4,
                1,
                What::Info {
                    answer: "504 sale_outcome_unknown".into(),
                },
            ),
            sold(5, 2, 1),
            invoke(6, 3),
            told_sold_out(7, 3),
        ];
        let records = [record("lost", "buyer-1", 2), record("sale-2", "buyer-2", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), Vec::<&str>::new(), "{checks:?}");
    }

    #[test]
    fn a_sale_whose_answer_names_the_sale_before_the_reset_is_judged_in_this_one() {
        // An atomic sale settled after a lost answer names the sale its instance saw
        // last, the one before the reset; its record is in this sale.
        let mut events = vec![
            invoke(0, 1),
            sold(5, 1, 2),
            invoke(6, 2),
            sold(7, 2, 1),
            invoke(8, 3),
            told_sold_out(9, 3),
        ];
        if let What::Ok { sold_unit, .. } = &mut events[1].what {
            sold_unit.sale = "old".into();
        }
        let records = [record("sale-1", "buyer-1", 2), record("sale-2", "buyer-2", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), Vec::<&str>::new(), "{checks:?}");
    }

    /// Process `process` was told it bought `unit` of the sale named `sale`.
    fn sold_in(sale: &str, at_us: u64, process: u64, unit: i64) -> Event {
        let mut event = sold(at_us, process, unit);
        if let What::Ok { sold_unit, .. } = &mut event.what {
            sold_unit.sale = sale.into();
        }
        event
    }

    /// The sale named `ended` was restocked at `at_us`: a new sale, `s`, began.
    fn restock(at_us: u64, ended: &str) -> Event {
        let mut event = fault(at_us, Fault::Restock);
        if let What::Fault { target, detail, .. } = &mut event.what {
            *target = "stock-redis".into();
            *detail = Some(ended.into());
        }
        event
    }

    #[test]
    fn the_sales_of_a_sale_a_restock_ended_are_held_only_to_unique() {
        // Unit 2 of the old sale, then of the new one: the restock deleted the old
        // sale's record, and its "sold out" spoke of the old stock.
        let events = [
            invoke(0, 1),
            sold_in("old", 2, 1, 2),
            invoke(3, 2),
            told_sold_out(4, 2),
            restock(5, "old"),
            invoke(6, 3),
            sold(7, 3, 2),
        ];
        let records = [record("sale-3", "buyer-3", 2)];
        let restocked = checks(&events, &records, 2);
        assert_eq!(failed(&restocked), Vec::<&str>::new(), "{restocked:?}");

        let twice = [
            invoke(0, 1),
            invoke(0, 2),
            sold_in("old", 2, 1, 5),
            sold_in("old", 3, 2, 5),
            restock(5, "old"),
        ];
        let twice = checks(&twice, &[], 5);
        assert_eq!(failed(&twice), ["unique"], "{twice:?}");
        assert_eq!(
            twice["unique"].1,
            ["unit 5 of segment 0 was sold to process 1 (buyer-1 via :8080) and process 2 (buyer-2 via :8080)"]
        );
    }

    #[test]
    fn a_sale_no_restock_ended_before_it_was_sent_is_held_to_its_record() {
        let named_by_none = [invoke(0, 1), sold_in("old", 2, 1, 2), restock(5, "older")];
        let sent_after = [restock(1, "old"), invoke(2, 1), sold_in("old", 3, 1, 2)];
        // A restock whose reset failed names the sale that went on.
        let still_current = [invoke(0, 1), sold(2, 1, 2), restock(5, "s")];
        for events in [&named_by_none[..], &sent_after, &still_current] {
            let checks = checks(events, &[], 2);
            assert!(failed(&checks).contains(&"lost"), "{events:?}: {checks:?}");
        }
        // Nor does it end what the sale's "sold out"s said: one with both units left fails.
        let sold_out_before = [invoke(0, 1), told_sold_out(1, 1), restock(5, "s")];
        let checks = checks(&sold_out_before, &[], 2);
        assert!(failed(&checks).contains(&"sold-out"), "{checks:?}");
    }

    #[test]
    fn an_answer_naming_another_unit_than_its_record_fails_lost() {
        let events = [invoke(0, 1), sold(5, 1, 2)];
        let records = [record("sale-1", "buyer-1", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(
            checks["lost"].1,
            ["process 1 (buyer-1 via :8080) was told it bought unit 2 of segment 0, but its record (sale sale-1) took unit 1 of segment 0"]
        );
    }

    #[test]
    fn a_sold_answer_without_a_unit_or_a_record_fails_lost() {
        let unnamed = What::Info {
            answer: crate::history::SOLD_UNNAMED.into(),
        };
        let events = [invoke(0, 1), ended(5, 1, unnamed)];
        let checks = checks(&events, &[], 2);
        assert_eq!(
            checks["lost"].1,
            ["process 1 (buyer-1 via :8080) was told \"sold\" without a unit, and no sale record holds its sale"]
        );
    }

    #[test]
    fn a_buyer_with_two_units_fails_one_per_buyer() {
        let mut events = vec![invoke(0, 1), invoke(0, 2), sold(4, 1, 2), sold(5, 2, 1)];
        if let What::Invoke { buyer, .. } = &mut events[1].what {
            *buyer = Some("buyer-1".into());
        }
        let records = [record("sale-1", "buyer-1", 2), record("sale-2", "buyer-1", 1)];
        let checks = checks(&events, &records, 2);
        assert_eq!(failed(&checks), ["one-per-buyer"]);
        assert_eq!(checks["one-per-buyer"].1, ["buyer-1 got units [2, 1]"]);
    }

    #[test]
    fn tokens_that_go_backwards_or_repeat_outside_a_group_fail_fence_order() {
        let token = |counter| Some(seckill::lock::FencingToken::new("redis", 0, counter));
        let with = |sale_id: &str, stock_before, counter, group: Option<&str>| SaleRecord {
            fencing_token: token(counter),
            group: group.map(str::to_owned),
            ..record(sale_id, sale_id, stock_before)
        };
        let rising = [
            with("a", 3, 1, None),
            with("b", 2, 2, Some("g")),
            with("c", 1, 2, Some("g")),
        ];
        assert_eq!(fence_regressions(&rising), Some(vec![]));
        let backwards = [with("a", 3, 2, None), with("b", 2, 1, None)];
        assert_eq!(
            fence_regressions(&backwards),
            Some(vec![(
                "sale b (unit 2, token redis#0.1) was written after sale a (unit 3, token redis#0.2)".to_owned(),
                ["b".to_owned(), "a".to_owned()]
            )])
        );
        let repeated = [with("a", 3, 2, None), with("b", 2, 2, None)];
        assert_eq!(fence_regressions(&repeated).map(|found| found.len()), Some(1));
        assert_eq!(fence_regressions(&[record("a", "a", 1)]), None);
    }
}
