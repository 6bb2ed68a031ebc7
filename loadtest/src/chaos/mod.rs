//! The tables of `make chaos` and `make clock-jump`, judged from the runs' histories.
//!
//! The scripts start the servers and the instances, strike, and stop: after each run
//! they append one line to a runs file ([`run::RunSpec`]: the row, the run, what the row
//! expects). `loadtest chaos-table RUNS-FILE` reads each run's report and history, adds
//! the runs of a row up ([`Row`]), writes the table ([`table`]) with a column per check
//! of the history, and says which rows that must hold did not.
//!
//! No row may sell without a quorum. A row that must hold fails when any run fails a
//! check, leaves one undecided or out, ends with another verdict than held, sells a unit
//! that did not exist, leaves a unit in two orders, or gives an answer the row forbids.
//! A row that exists to fail, or may, fails the suite on nothing else: when a run of a
//! row that exists to fail showed no anomaly, a note says the fault missed its moment.

pub mod matrix;
pub mod run;
pub mod table;

use crate::history::checks::Status;
pub use run::{read_runs, Expect, Run, RunSpec};

/// The runs of one row: one fault, one strategy, one fencing.
pub struct Row<'a> {
    pub runs: Vec<&'a Run>,
}

/// How the runs of a row did on one check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub failed: usize,
    pub unknown: usize,
    /// Runs that ran the check at all (not skipped).
    pub checked: usize,
    /// Runs whose report does not have the check.
    pub missing: usize,
}

/// The runs grouped into rows, in the order each row first ran.
pub fn rows(runs: &[Run]) -> Vec<Row<'_>> {
    let mut rows: Vec<Row> = Vec::new();
    for run in runs {
        match rows.iter_mut().find(|row| row.same_row(run)) {
            Some(row) => row.runs.push(run),
            None => rows.push(Row { runs: vec![run] }),
        }
    }
    rows
}

impl<'a> Row<'a> {
    fn first(&self) -> &'a Run {
        self.runs[0]
    }

    fn same_row(&self, run: &Run) -> bool {
        let first = self.first();
        first.spec.fault == run.spec.fault
            && first.spec.strategy == run.spec.strategy
            && first.report.fencing == run.report.fencing
    }

    pub fn fault(&self) -> &'a str {
        &self.first().spec.fault
    }

    pub fn strategy(&self) -> &'a str {
        &self.first().spec.strategy
    }

    pub fn fencing(&self) -> &'static str {
        self.first().report.fencing.name()
    }

    pub fn expect(&self) -> Expect {
        self.first().spec.expect
    }

    /// The names of the checks of any run, in the order the load test ran them.
    pub fn check_names(&self) -> Vec<&'a str> {
        let mut names: Vec<&'a str> = Vec::new();
        for check in self.runs.iter().flat_map(|run| &run.report.checks) {
            if !names.contains(&check.name.as_str()) {
                names.push(&check.name);
            }
        }
        names
    }

    pub fn tally(&self, check: &str) -> Tally {
        let mut tally = Tally::default();
        for run in &self.runs {
            match run.status_of(check) {
                Some(status) => {
                    tally.checked += usize::from(status != Status::Skipped);
                    tally.failed += usize::from(status == Status::Fail);
                    tally.unknown += usize::from(status == Status::Unknown);
                }
                None => tally.missing += 1,
            }
        }
        tally
    }

    /// The sum over the runs of a figure of each.
    pub fn sum(&self, figure: impl Fn(&Run) -> u64) -> u64 {
        self.runs.iter().map(|run| figure(run)).sum()
    }

    /// The sum of a figure that not every row has: `None` when no run has it.
    pub fn sum_of_some(&self, figure: impl Fn(&Run) -> Option<u64>) -> Option<u64> {
        self.runs.iter().filter_map(|run| figure(run)).reduce(|a, b| a + b)
    }

    /// Runs in which at least one check failed: the anomaly showed.
    pub fn runs_that_failed_a_check(&self) -> usize {
        let failed = |run: &&&Run| run.report.checks.iter().any(|check| check.status == Status::Fail);
        self.runs.iter().filter(failed).count()
    }

    /// Why this row broke a promise; empty when it kept them. No row may sell without a
    /// quorum; a row that must hold may fail no check (nor leave one undecided or out),
    /// end with no other verdict than held, sell no unit that did not exist, leave no
    /// unit in two orders and give no answer it forbids.
    pub fn broken_promises(&self) -> Vec<String> {
        let mut broken = Vec::new();
        if let Some(sold) = self
            .sum_of_some(|run| run.timings.sold_without_quorum.map(|n| n as u64))
            .filter(|&n| n > 0)
        {
            broken.push(format!("{sold} buyers sold to without a quorum"));
        }
        if self.expect() == Expect::Holds {
            broken.extend(self.broken_checks());
            broken.extend(self.runs.iter().filter(|run| !run.report.passed()).map(|run| {
                let verdict = crate::render::tables::verdict_word(run.report.verdict);
                format!("run {} ended {verdict}", run.spec.run)
            }));
            broken.extend(self.broken_counts());
        }
        let label = format!("{}/{} fencing {}", self.fault(), self.strategy(), self.fencing());
        broken.into_iter().map(|why| format!("{label}: {why}")).collect()
    }

    /// The checks that did not pass in every run that ran them: failed, undecided (never a
    /// pass) or missing from a report.
    fn broken_checks(&self) -> Vec<String> {
        let runs = self.runs.len();
        let mut broken = Vec::new();
        for check in self.check_names() {
            let tally = self.tally(check);
            for (count, what) in [
                (tally.failed, "failed"),
                (tally.unknown, "could not decide"),
                (tally.missing, "is missing"),
            ] {
                if count > 0 {
                    broken.push(format!("check `{check}` {what} in {count} of {runs} runs"));
                }
            }
        }
        broken
    }

    /// Units that did not exist, units in two orders, forbidden answers.
    fn broken_counts(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let beyond = self.sum(Run::units_beyond_stock);
        if beyond > 0 {
            broken.push(format!("{beyond} units sold that did not exist"));
        }
        if let Some(doubled) = self
            .sum_of_some(|run| run.spec.units_with_two_orders)
            .filter(|&n| n > 0)
        {
            broken.push(format!("{doubled} units with two orders"));
        }
        broken.extend(self.runs.iter().flat_map(|run| run.forbidden_answers()));
        broken
    }

    /// What a reader should know that is not a failure: a check that could not decide on
    /// a row that makes no promise, a row that exists to fail whose fault missed its moment.
    pub fn notes(&self) -> Vec<String> {
        let label = format!("{}/{} fencing {}", self.fault(), self.strategy(), self.fencing());
        let mut notes: Vec<String> = Vec::new();
        if self.expect() != Expect::Holds {
            notes.extend(self.check_names().into_iter().filter_map(|check| {
                let unknown = self.tally(check).unknown;
                (unknown > 0).then(|| format!("{label}: check `{check}` could not decide in {unknown} runs"))
            }));
        }
        if self.expect() == Expect::Fails && self.runs_that_failed_a_check() < self.runs.len() {
            let missed = self.runs.len() - self.runs_that_failed_a_check();
            notes.push(format!(
                "{label}: no check failed in {missed} of {} runs (the fault missed its moment)",
                self.runs.len()
            ));
        }
        notes
    }
}
