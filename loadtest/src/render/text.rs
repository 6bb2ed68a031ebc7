//! The verdict of one run as the terminal prints it: what was measured, line by line,
//! then the headline.

use std::fmt::{Display, Write};

use seckill::strategy::FencingStatus;

use crate::history::checks::{Check, Status};
use crate::verdict::database::DatabaseCost;
use crate::verdict::{Report, Verdict};

use super::per_sale_label;

/// The report being written: a title, then one line per figure, its label in a column.
struct Lines(String);

impl Lines {
    fn line(&mut self, label: &str, value: impl Display) {
        let _ = writeln!(self.0, "  {label:<22}{value}");
    }
}

impl Report {
    /// The verdict as a reader should see it: how the run was set up, what the sale
    /// ended with, what the buyers were told, how fast, what the database did, then the verdict.
    pub fn render(&self) -> String {
        let mut out = Lines(format!("== seckill load test: strategy `{}` ==\n", self.strategy));
        self.setup_lines(&mut out);
        self.outcome_lines(&mut out);
        self.answer_lines(&mut out);
        out.line(
            "time",
            format!("{:.3} s, {:.0} req/s", self.seconds, self.requests_per_second),
        );
        out.line(
            "latency",
            format!(
                "p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
                self.p50_ms, self.p95_ms, self.p99_ms
            ),
        );
        if let Some(cost) = &self.database {
            database_lines(cost, &mut out);
        }
        if !self.checks.is_empty() {
            out.line("checks", checks_line(&self.checks));
        }
        for finding in &self.findings {
            let _ = writeln!(out.0, "  - {finding}");
        }
        let _ = writeln!(out.0, "verdict: {}", self.headline());
        out.0
    }

    fn headline(&self) -> String {
        match (self.verdict, self.expected_to_oversell) {
            (Verdict::Held, false) => "HELD: no oversell, nothing lost".to_owned(),
            (Verdict::Held, true) => format!(
                "HELD, NOT AS EXPECTED: `{}` cannot guard two instances, but this run did not show the race",
                self.strategy
            ),
            (Verdict::Oversold, true) => {
                format!("OVERSOLD, as expected: `{}` cannot guard two instances", self.strategy)
            }
            (Verdict::Oversold, false) => format!("OVERSOLD: `{}` let two buyers take the same unit", self.strategy),
            (Verdict::Lost, _) => "LOST: buyers were told something the records do not show".to_owned(),
            (Verdict::WrongAnswer, _) => {
                "WRONG ANSWER: a buyer was told what no order of the sale explains (see the checks)".to_owned()
            }
        }
    }

    /// Where the crowd went, how many, and what the sale started with.
    fn setup_lines(&self, out: &mut Lines) {
        out.line("hosts", self.hosts.join(", "));
        let buyers = match self.repeat_requests {
            0 => format!("{} (one request each, all at once)", self.users),
            repeats => format!(
                "{} requests, all at once, from {} buyers ({repeats} buy twice at once, through both hosts)",
                self.users,
                self.users - repeats
            ),
        };
        out.line("buyers", buyers);
        if self.one_per_buyer {
            out.line("one per buyer", "yes (--one-per-buyer)");
        }
        out.line("fencing", fencing_label(self.fencing));
        let initial = match self.stock_segments {
            1 => self.initial_stock.to_string(),
            segments => format!(
                "{} in {segments} segments, each behind a lock of its own",
                self.initial_stock
            ),
        };
        out.line("initial stock", initial);
    }

    /// What the records say the sale ended with, and every way it could have gone wrong.
    fn outcome_lines(&self, out: &mut Lines) {
        out.line("sold (lucky)", self.lucky);
        out.line("stock left", self.stock_left);
        out.line(
            "stock + lucky",
            format!("{} (must be {})", self.stock_left + self.lucky, self.initial_stock),
        );
        out.line("sale records", self.sale_records);
        out.line("holders overlapped", self.holders_overlapped);
        out.line(
            "fence refused",
            format!(
                "{} reads, {} writes",
                self.fence_refused.reads, self.fence_refused.writes
            ),
        );
        out.line("units sold twice", self.units_sold_twice);
        if self.repeat_requests > 0 || self.buyers_served_twice > 0 {
            out.line("buyers with 2+ units", self.buyers_served_twice);
        }
        out.line(
            "fencing regressions",
            self.fencing_regressions
                .map_or("n/a (no fencing tokens)".to_owned(), |n| n.to_string()),
        );
    }

    /// What the buyers were told, and the orders the sales became.
    fn answer_lines(&self, out: &mut Lines) {
        out.line("answered sold", self.told_sold);
        out.line("answered sold out", self.told_sold_out);
        if self.one_per_buyer {
            out.line("refused as repeat", self.told_already_bought);
        }
        if let Some(orders) = &self.orders {
            out.line(
                "orders in MySQL",
                format!(
                    "{} ({} unread and {} pending in the stream, after waiting {} ms for them)",
                    orders.rows, orders.unread, orders.pending, orders.waited_ms
                ),
            );
        }
        // Always printed, 0 included: a report's lines are the same from run to run, so
        // the lessons' published outputs can be checked against a new run (tests/it/docs/lessons.rs).
        out.line("answered unknown", self.told_unknown);
        let errors = if self.errors.is_empty() {
            "0".to_owned()
        } else {
            let kinds: Vec<String> = self.errors.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
            format!("{} ({})", self.error_count(), kinds.join(", "))
        };
        out.line("errors", errors);
    }
}

/// The history's checks by their outcome: `FAIL unique; pass lost, phantom; skipped ...`.
fn checks_line(checks: &[Check]) -> String {
    let outcomes = [
        (Status::Fail, "FAIL"),
        (Status::Unknown, "unknown"),
        (Status::Pass, "pass"),
        (Status::Skipped, "skipped"),
    ];
    let groups: Vec<String> = outcomes
        .iter()
        .filter_map(|(status, word)| {
            let names: Vec<&str> = checks
                .iter()
                .filter(|check| check.status == *status)
                .map(|check| check.name.as_str())
                .collect();
            (!names.is_empty()).then(|| format!("{word} {}", names.join(", ")))
        })
        .collect();
    groups.join("; ")
}

/// What the attack cost MySQL, and the mode each `redis-degrade` instance ended in.
fn database_lines(cost: &DatabaseCost, out: &mut Lines) {
    let statements = match (cost.statements, &cost.statements_unmeasured) {
        (Some(n), _) => format!("{n} ({} per sale)", per_sale_label(cost.statements_per_sale())),
        (None, Some(why)) => format!("not measured: {why}"),
        (None, None) => "not measured".to_owned(),
    };
    out.line("mysql statements", statements);
    out.line(
        "lock attempts",
        format!(
            "{} ({} per sale), {} version conflicts ({} per sale)",
            cost.attempts,
            per_sale_label(cost.attempts_per_sale()),
            cost.conflicts,
            per_sale_label(cost.conflicts_per_sale())
        ),
    );
    out.line(
        "semaphore",
        format!(
            "{}; at most {} attempts in flight",
            cost.semaphore_label(),
            cost.peak_in_flight
        ),
    );
    for (instance, degrade) in cost.degrade.iter().enumerate() {
        let mode = degrade
            .mode
            .map_or("unknown".to_owned(), |mode| format!("{mode:?}").to_lowercase());
        out.line(
            &format!("lock mode, instance {}", instance + 1),
            format!(
                "{mode} (epoch {}), {} switches seen; {:.1} s on redis, {:.1} s on mysql",
                degrade.epoch, degrade.switches, degrade.seconds_in_redis, degrade.seconds_in_mysql
            ),
        );
    }
}

fn fencing_label(fencing: FencingStatus) -> &'static str {
    match fencing {
        FencingStatus::On => "on (the stock refuses an older token)",
        FencingStatus::Off => "off (--fencing off: tokens issued, not checked)",
        FencingStatus::NoTokens => "none (this strategy issues no tokens)",
        FencingStatus::NotNeeded => "not needed (no lock)",
    }
}

#[cfg(test)]
mod tests {
    use crate::verdict::report::tests::report;
    use crate::verdict::Verdict;

    #[test]
    fn a_baseline_that_oversold_reads_as_expected() {
        assert!(report("none", Verdict::Oversold).render().contains("as expected"));
    }

    #[test]
    fn without_tokens_the_fencing_check_reads_not_applicable() {
        let text = report("none", Verdict::Oversold).render();
        assert!(text.contains("fencing regressions   n/a"), "{text}");
    }
}
