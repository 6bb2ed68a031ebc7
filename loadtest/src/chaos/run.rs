//! One run of a chaos row: what the script that played it declares, and what its
//! report and its history show.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::history::{self, checks::Status, Event, Fault, Process, What};
use crate::Report;

/// A buyer answered "sold" this long after a quorum was lost should not have been: a
/// holder granted before the loss may still finish its sale within it.
pub const NO_QUORUM_GRACE_US: u64 = 1_000_000;

/// What the script declares about one run, one JSON line of its runs file
/// (`scripts/chaos.sh` and `scripts/clock-jump.sh` append one after each run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The row: `holder-paused`, `redis-clock-jump`.
    pub fault: String,
    pub strategy: String,
    pub run: u32,
    pub expect: Expect,
    /// The load test's report (`--report-file`), beside the runs file unless absolute;
    /// its history is beside it (`run.json` has `run.history.jsonl`).
    pub report: PathBuf,
    /// The fault takes a majority of the lock's servers away, from its first `kill` to
    /// the first `start` after it: no sale may begin in between.
    #[serde(default)]
    pub quorum_lost: bool,
    /// What `seckill reconcile` found after the run: units in two order rows.
    #[serde(default)]
    pub units_with_two_orders: Option<u64>,
    /// Answers no buyer of this row may hear (`503 lock_lost`: a lease ended by a jump).
    #[serde(default)]
    pub never_answer: Vec<String>,
    /// The instances' clocks jump: their grant log's times say nothing of overlaps.
    #[serde(default)]
    pub instance_clocks_jump: bool,
}

/// What a row is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Every check must pass in every run: the strategy promises it.
    Holds,
    /// The row exists to show the anomaly: a failed check is the lesson, and a run in
    /// which none failed missed its moment.
    Fails,
    /// No promise either way: the row shows what a strategy does without its fence
    /// under a fault that need not break it.
    MayFail,
}

/// A run, judged.
pub struct Run {
    pub spec: RunSpec,
    pub report: Report,
    pub timings: Timings,
}

/// What the history says about time: the outage a buyer saw, and how soon the sale
/// went on once the fault was over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// The longest time, in ms, with no buyer told "sold", from the first fault on.
    pub longest_stall_ms: u64,
    /// From the end of the last fault (a resume, a start, a heal) to the next "sold".
    pub first_sale_after_heal_ms: Option<u64>,
    /// Buyers told "sold" while a quorum was lost, past the grace.
    pub sold_without_quorum: Option<usize>,
}

/// Reads every run of a runs file, in its order.
pub fn read_runs(runs_file: &Path) -> anyhow::Result<Vec<Run>> {
    let text = std::fs::read_to_string(runs_file)
        .with_context(|| format!("cannot read the runs file {}", runs_file.display()))?;
    let dir = runs_file.parent().unwrap_or(Path::new("."));
    let mut runs = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let spec: RunSpec = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not a run", runs_file.display(), number + 1))?;
        runs.push(Run::read(spec, dir)?);
    }
    anyhow::ensure!(!runs.is_empty(), "{} names no run", runs_file.display());
    Ok(runs)
}

impl Run {
    fn read(spec: RunSpec, dir: &Path) -> anyhow::Result<Run> {
        let report_path = dir.join(&spec.report);
        let text = std::fs::read_to_string(&report_path)
            .with_context(|| format!("cannot read the report of {}: {}", spec.fault, report_path.display()))?;
        let report: Report = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a report of the load test", report_path.display()))?;
        anyhow::ensure!(
            !report.checks.is_empty(),
            "{} has no checks: a load test older than the history checker wrote it; run the row again",
            report_path.display()
        );
        let history = history::read(&history::beside_report(&report_path, "history.jsonl"))?;
        let events = with_late_faults(history, &report_path)?;
        let timings = Timings::of(&events, report.stock_left > 0, spec.quorum_lost)
            .with_context(|| format!("{}, run {}", spec.fault, spec.run))?;
        Ok(Run { spec, report, timings })
    }

    /// Whether this run failed the check `name`, could not tell, or passed.
    pub fn status_of(&self, name: &str) -> Option<Status> {
        self.report
            .checks
            .iter()
            .find(|check| check.name == name)
            .map(|check| check.status)
    }

    /// Answers this run gave that its row forbids, as `answer: count`.
    pub fn forbidden_answers(&self) -> Vec<String> {
        self.spec
            .never_answer
            .iter()
            .filter_map(|answer| {
                let heard = self.answers(answer);
                (heard > 0).then(|| format!("{heard} buyers told {answer}"))
            })
            .collect()
    }

    /// Answers whose kind starts with `kind` (`503 `, `503 lock_lost`), from the report's errors.
    pub fn answers(&self, kind: &str) -> u64 {
        let errors = &self.report.errors;
        errors
            .iter()
            .filter(|(answer, _)| answer.starts_with(kind))
            .map(|(_, n)| *n as u64)
            .sum()
    }

    /// Buyers told "sold" beyond the stock: units that did not exist.
    pub fn units_beyond_stock(&self) -> u64 {
        (self.report.told_sold as i64 - self.report.initial_stock).max(0) as u64
    }
}

/// The history, with the faults of its faults file (`run.faults.jsonl`) that the load
/// test, which reads that file when it ends, did not see: a heal recorded after the last
/// answer still ends the fault.
fn with_late_faults(mut events: Vec<Event>, report: &Path) -> anyhow::Result<Vec<Event>> {
    let faults = history::beside_report(report, "faults.jsonl");
    if faults.exists() {
        for fault in history::read(&faults)? {
            if !events.contains(&fault) {
                events.push(fault);
            }
        }
        events.sort_by_key(|event| event.at_us);
    }
    Ok(events)
}

impl Timings {
    /// The timings of a history whose faults are in it. `stock_left`: units were left at
    /// the end, so the time from the last sale to the end counts as standing still too.
    pub fn of(events: &[Event], stock_left: bool, quorum_lost: bool) -> anyhow::Result<Timings> {
        let faults: Vec<(u64, Fault)> = events
            .iter()
            .filter_map(|event| match event.what {
                What::Fault { fault, .. } => Some((event.at_us, fault)),
                _ => None,
            })
            .collect();
        let Some(&(struck_at, _)) = faults.first() else {
            anyhow::bail!("its history has no fault: the fault never struck, or was not recorded");
        };
        let sold: Vec<u64> = events
            .iter()
            .filter(|event| matches!(event.what, What::Ok { .. }))
            .map(|event| event.at_us)
            .collect();
        let ended_at = events
            .iter()
            .filter(|event| matches!(event.process, Process::Buyer(_)))
            .map(|event| event.at_us)
            .max()
            .unwrap_or(struck_at);
        let heal_at = faults
            .iter()
            .rev()
            .find(|(_, fault)| matches!(fault, Fault::Resume | Fault::Start | Fault::Heal))
            .map(|&(at, _)| at);
        Ok(Timings {
            longest_stall_ms: longest_stall(&sold, struck_at, stock_left.then_some(ended_at)) / 1000,
            first_sale_after_heal_ms: heal_at
                .and_then(|healed| first_sale_after(&sold, healed, stock_left.then_some(ended_at)))
                .map(|us| us / 1000),
            sold_without_quorum: quorum_lost.then(|| sold_without_quorum(&sold, &faults)),
        })
    }
}

/// The longest gap between sales after `from`, starting at `from`; with `open_until`,
/// the time from the last sale to then counts too.
fn longest_stall(sold: &[u64], from: u64, open_until: Option<u64>) -> u64 {
    let mut previous = from;
    let mut longest = 0;
    for &at in sold.iter().filter(|&&at| at > from) {
        longest = longest.max(at - previous);
        previous = at;
    }
    match open_until {
        Some(end) => longest.max(end.saturating_sub(previous)),
        None => longest,
    }
}

/// From `healed` to the first sale after it; or, if none came while units were left,
/// to the end. `None` when the sale was over before the heal.
fn first_sale_after(sold: &[u64], healed: u64, open_until: Option<u64>) -> Option<u64> {
    match sold.iter().find(|&&at| at > healed) {
        Some(&at) => Some(at - healed),
        None => open_until.filter(|&end| end > healed).map(|end| end - healed),
    }
}

/// Sales answered between the first kill (plus the grace) and the first start after it.
fn sold_without_quorum(sold: &[u64], faults: &[(u64, Fault)]) -> usize {
    let Some(&(lost_at, _)) = faults.iter().find(|(_, fault)| *fault == Fault::Kill) else {
        return 0;
    };
    let back_at = faults
        .iter()
        .find(|&&(at, fault)| fault == Fault::Start && at > lost_at)
        .map_or(u64::MAX, |&(at, _)| at);
    sold.iter()
        .filter(|&&at| at > lost_at + NO_QUORUM_GRACE_US && at < back_at)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::operations;

    fn sold_at(at_us: u64) -> Event {
        operations::tests::sold(at_us, at_us, 1)
    }

    fn fault_at(at_us: u64, fault: Fault) -> Event {
        operations::tests::fault(at_us, fault)
    }

    fn ms(n: u64) -> u64 {
        n * 1000
    }

    #[test]
    fn the_stall_is_the_longest_gap_between_sales_from_the_fault_on() {
        let events = [
            sold_at(ms(1)),
            fault_at(ms(10), Fault::Pause),
            sold_at(ms(30)),
            sold_at(ms(530)),
            sold_at(ms(540)),
        ];
        let timings = Timings::of(&events, false, false).unwrap();
        assert_eq!(timings.longest_stall_ms, 500);
        assert_eq!(timings.first_sale_after_heal_ms, None, "nothing healed");
        assert_eq!(timings.sold_without_quorum, None, "no quorum was lost");
    }

    #[test]
    fn while_units_are_left_the_time_after_the_last_sale_stands_still_too() {
        let mut events = vec![
            fault_at(ms(10), Fault::Partition),
            sold_at(ms(20)),
            fault_at(ms(900), Fault::Heal),
        ];
        events.push(Event {
            at_us: ms(2000),
            process: Process::Buyer(1),
            what: What::Fail {
                answer: "503 lock_timeout".into(),
            },
        });
        // A fault recorded after the last answer is not the end of the sale.
        events.push(fault_at(ms(9000), Fault::Kill));
        let timings = Timings::of(&events, true, false).unwrap();
        assert_eq!(timings.longest_stall_ms, 1980);
        assert_eq!(
            timings.first_sale_after_heal_ms,
            Some(1100),
            "nobody sold after the heal: until the end"
        );
        assert_eq!(
            Timings::of(&events, false, false).unwrap().first_sale_after_heal_ms,
            None
        );
    }

    #[test]
    fn the_first_sale_after_the_last_heal_counts() {
        let events = [
            fault_at(ms(10), Fault::Reset),
            fault_at(ms(20), Fault::Heal),
            sold_at(ms(25)),
            fault_at(ms(40), Fault::Reset),
            fault_at(ms(50), Fault::Heal),
            sold_at(ms(120)),
        ];
        assert_eq!(
            Timings::of(&events, false, false).unwrap().first_sale_after_heal_ms,
            Some(70)
        );
    }

    #[test]
    fn sales_past_the_grace_before_the_quorum_is_back_are_counted() {
        let events = [
            fault_at(ms(100), Fault::Kill),
            fault_at(ms(101), Fault::Kill),
            sold_at(ms(900)),
            sold_at(ms(1200)),
            sold_at(ms(3000)),
            fault_at(ms(4100), Fault::Start),
            sold_at(ms(4200)),
        ];
        assert_eq!(Timings::of(&events, false, true).unwrap().sold_without_quorum, Some(2));
    }

    #[test]
    fn a_history_without_a_fault_is_refused() {
        let error = Timings::of(&[sold_at(ms(1))], false, false).unwrap_err().to_string();
        assert!(error.contains("never struck"), "{error}");
    }
}
