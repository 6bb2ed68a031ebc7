//! The tables, one line a row: docs/results/chaos.md and docs/results/clock-jump.md show
//! them, and their pages say what each column means.

use crate::render::document::{Align, Table};

use super::{Expect, Row, Run, Tally};

/// Which of the two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// `make chaos`: a row is a fault against a strategy, over several runs.
    Chaos,
    /// `make clock-jump`: a row is a scenario of jumping clocks, one run.
    ClockJump,
}

/// The table of `rows` in `layout`.
pub fn table(rows: &[Row], layout: Layout) -> Table {
    let mut checks: Vec<&str> = Vec::new();
    for name in rows.iter().flat_map(Row::check_names) {
        if !checks.contains(&name) {
            checks.push(name);
        }
    }
    let mut columns: Vec<(&str, Align)> = match layout {
        Layout::Chaos => vec![
            ("fault", Align::Left),
            ("strategy", Align::Left),
            ("fencing", Align::Left),
            ("runs", Align::Right),
        ],
        Layout::ClockJump => vec![
            ("scenario", Align::Left),
            ("lock", Align::Left),
            ("fencing", Align::Left),
        ],
    };
    columns.push(("expected", Align::Left));
    columns.extend(checks.iter().map(|&name| (name, Align::Right)));
    columns.extend(match layout {
        Layout::Chaos => CHAOS_FIGURES,
        Layout::ClockJump => CLOCK_JUMP_FIGURES,
    });
    let mut table = Table::new(&columns);
    for row in rows {
        let mut cells = vec![
            row.fault().to_owned(),
            row.strategy().to_owned(),
            row.fencing().to_owned(),
        ];
        if layout == Layout::Chaos {
            cells.push(row.runs.len().to_string());
        }
        cells.push(expected(row).to_owned());
        cells.extend(checks.iter().map(|check| check_cell(row.tally(check))));
        cells.extend(match layout {
            Layout::Chaos => chaos_figures(row),
            Layout::ClockJump => clock_jump_figures(row),
        });
        table.push(cells);
    }
    table
}

const CHAOS_FIGURES: &[(&str, Align)] = &[
    ("holders that overlapped", Align::Right),
    ("writes and reads the fence refused", Align::Right),
    ("units sold twice", Align::Right),
    ("sold", Align::Right),
    ("units that did not exist", Align::Right),
    ("units with two orders", Align::Right),
    ("503 answers", Align::Right),
    ("unknown outcomes", Align::Right),
    ("sold without a quorum", Align::Right),
    ("longest time without a sale after the fault (worst run)", Align::Right),
    ("time to first sale after the heal (worst run)", Align::Right),
    ("verdicts", Align::Left),
];

const CLOCK_JUMP_FIGURES: &[(&str, Align)] = &[
    ("units sold twice", Align::Right),
    ("holders overlapped", Align::Right),
    ("writes refused by the fence", Align::Right),
    ("buyers told lock_lost", Align::Right),
    ("sold", Align::Right),
];

fn expected(row: &Row) -> &'static str {
    match row.expect() {
        Expect::Holds => "holds",
        Expect::Fails => "fails",
        Expect::MayFail => "may fail",
    }
}

/// The runs that failed a check, and those it could not decide; `-` where no run ran it.
fn check_cell(tally: Tally) -> String {
    match tally {
        Tally { checked: 0, .. } => "-".to_owned(),
        Tally { failed, unknown: 0, .. } => failed.to_string(),
        Tally { failed, unknown, .. } => format!("{failed} ({unknown} unknown)"),
    }
}

fn chaos_figures(row: &Row) -> Vec<String> {
    let report = |figure: fn(&Run) -> u64| row.sum(figure).to_string();
    let optional = |sum: Option<u64>| sum.map_or("-".to_owned(), |n| n.to_string());
    let worst_stall = row
        .runs
        .iter()
        .map(|run| run.timings.longest_stall_ms)
        .max()
        .unwrap_or(0);
    let worst_heal = row
        .runs
        .iter()
        .filter_map(|run| run.timings.first_sale_after_heal_ms)
        .max();
    let verdicts: Vec<String> = row.runs.iter().map(|run| verdict_word(run)).collect();
    vec![
        report(|run| run.report.holders_overlapped as u64),
        report(|run| (run.report.fence_refused.reads + run.report.fence_refused.writes) as u64),
        report(|run| run.report.units_sold_twice as u64),
        report(|run| run.report.lucky.max(0) as u64),
        report(Run::units_beyond_stock),
        optional(row.sum_of_some(|run| run.spec.units_with_two_orders)),
        report(|run| run.answers("503 ")),
        report(|run| run.report.told_unknown as u64),
        optional(row.sum_of_some(|run| run.timings.sold_without_quorum.map(|n| n as u64))),
        format!("{worst_stall} ms"),
        worst_heal.map_or("-".to_owned(), |ms| format!("{ms} ms")),
        verdicts.join(" "),
    ]
}

fn clock_jump_figures(row: &Row) -> Vec<String> {
    let report = |figure: fn(&Run) -> u64| row.sum(figure).to_string();
    let overlapped = match row.runs.iter().any(|run| run.spec.instance_clocks_jump) {
        // The grant log's times are the instances' wall clocks, which jumped.
        true => "-".to_owned(),
        false => report(|run| run.report.holders_overlapped as u64),
    };
    vec![
        report(|run| run.report.units_sold_twice as u64),
        overlapped,
        report(|run| run.report.fence_refused.writes as u64),
        report(|run| run.answers("503 lock_lost")),
        report(|run| run.report.lucky.max(0) as u64),
    ]
}

fn verdict_word(run: &Run) -> String {
    serde_json::to_value(run.report.verdict)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", run.report.verdict))
}
