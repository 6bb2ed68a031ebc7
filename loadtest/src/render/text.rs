//! The verdict of one run as the terminal prints it: what was measured, line by line,
//! then the headline.

use seckill::strategy::FencingStatus;

use crate::verdict::{Report, Verdict};

use super::per_sale_label;

impl Report {
    /// The verdict as a reader should see it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let headline = match (self.verdict, self.expected_to_oversell) {
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
        };
        let line = |out: &mut String, label: &str, value: String| out.push_str(&format!("  {label:<22}{value}\n"));
        out.push_str(&format!("== seckill load test: strategy `{}` ==\n", self.strategy));
        line(&mut out, "hosts", self.hosts.join(", "));
        let buyers = match self.repeat_requests {
            0 => format!("{} (one request each, all at once)", self.users),
            repeats => format!(
                "{} requests, all at once, from {} buyers ({repeats} buy twice at once, through both hosts)",
                self.users,
                self.users - repeats
            ),
        };
        line(&mut out, "buyers", buyers);
        if self.one_per_buyer {
            line(&mut out, "one per buyer", "yes (--one-per-buyer)".to_owned());
        }
        line(&mut out, "fencing", fencing_label(self.fencing).to_owned());
        let initial = match self.stock_segments {
            1 => self.initial_stock.to_string(),
            segments => format!(
                "{} in {segments} segments, each behind a lock of its own",
                self.initial_stock
            ),
        };
        line(&mut out, "initial stock", initial);
        line(&mut out, "sold (lucky)", self.lucky.to_string());
        line(&mut out, "stock left", self.stock_left.to_string());
        line(
            &mut out,
            "stock + lucky",
            format!("{} (must be {})", self.stock_left + self.lucky, self.initial_stock),
        );
        line(&mut out, "sale records", self.sale_records.to_string());
        line(&mut out, "holders overlapped", self.holders_overlapped.to_string());
        line(
            &mut out,
            "fence refused",
            format!(
                "{} reads, {} writes",
                self.fence_refused.reads, self.fence_refused.writes
            ),
        );
        line(&mut out, "units sold twice", self.units_sold_twice.to_string());
        if self.repeat_requests > 0 || self.buyers_served_twice > 0 {
            line(&mut out, "buyers with 2+ units", self.buyers_served_twice.to_string());
        }
        line(
            &mut out,
            "fencing regressions",
            self.fencing_regressions
                .map_or("n/a (no fencing tokens)".to_owned(), |n| n.to_string()),
        );
        line(&mut out, "answered sold", self.told_sold.to_string());
        line(&mut out, "answered sold out", self.told_sold_out.to_string());
        if self.one_per_buyer {
            line(&mut out, "refused as repeat", self.told_already_bought.to_string());
        }
        if let Some(orders) = &self.orders {
            line(
                &mut out,
                "orders in MySQL",
                format!(
                    "{} ({} unread and {} pending in the stream, after waiting {} ms for them)",
                    orders.rows, orders.unread, orders.pending, orders.waited_ms
                ),
            );
        }
        // Always printed, 0 included: a report's lines are the same from run to run, so
        // the lessons' published outputs can be checked against a new run (tests/lessons.rs).
        line(&mut out, "answered unknown", self.told_unknown.to_string());
        let errors = if self.errors.is_empty() {
            "0".to_owned()
        } else {
            let kinds: Vec<String> = self.errors.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
            format!("{} ({})", self.error_count(), kinds.join(", "))
        };
        line(&mut out, "errors", errors);
        line(
            &mut out,
            "time",
            format!("{:.3} s, {:.0} req/s", self.seconds, self.requests_per_second),
        );
        line(
            &mut out,
            "latency",
            format!(
                "p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
                self.p50_ms, self.p95_ms, self.p99_ms
            ),
        );
        if let Some(cost) = &self.database {
            let statements = match (cost.statements, &cost.statements_unmeasured) {
                (Some(n), _) => format!("{n} ({} per sale)", per_sale_label(cost.statements_per_sale())),
                (None, Some(why)) => format!("not measured: {why}"),
                (None, None) => "not measured".to_owned(),
            };
            line(&mut out, "mysql statements", statements);
            line(
                &mut out,
                "lock attempts",
                format!(
                    "{} ({} per sale), {} version conflicts ({} per sale)",
                    cost.attempts,
                    per_sale_label(cost.attempts_per_sale()),
                    cost.conflicts,
                    per_sale_label(cost.conflicts_per_sale())
                ),
            );
            line(
                &mut out,
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
                line(
                    &mut out,
                    &format!("lock mode, instance {}", instance + 1),
                    format!(
                        "{mode} (epoch {}), {} switches seen; {:.1} s on redis, {:.1} s on mysql",
                        degrade.epoch, degrade.switches, degrade.seconds_in_redis, degrade.seconds_in_mysql
                    ),
                );
            }
        }
        for finding in &self.findings {
            out.push_str(&format!("  - {finding}\n"));
        }
        out.push_str(&format!("verdict: {headline}\n"));
        out
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
