//! The lesson's verdict: 500 buyers, one request each, all at once, split between two
//! instances; then a verdict read straight from Redis.
//!
//! 1. [`crowd`]: resets the sale and fires the goose users; tallies what each buyer was told.
//! 2. [`orders`]: with `--orders`, once the stream drained, one order in MySQL per unit sold.
//! 3. [`sale_state`]: the sale read back from Redis (not from the service, which could
//!    be wrong), asked again while Redis fails over.
//! 4. [`checker`]: the test oracle. Compares that sale with what the buyers were told
//!    and decides: held, oversold, or lost; the orders judged beside the sale.
//! 5. [`database`]: for the MySQL strategies, what each sale cost the database
//!    (statements, attempts, version conflicts), read before and after the attack.
//! 6. [`report`]: everything one run measured, and whether the strategy kept its promise.
//!
//! [`run`] puts them together, and judges the run's history besides the counts
//! ([`crate::history`]): a check that fails turns a held run into an oversold or a lost one.

pub mod crowd;

pub mod orders;

pub mod sale_state;

pub mod checker;

pub mod database;

pub mod report;

pub use checker::Verdict;
pub use report::Report;

use anyhow::bail;
use seckill::sale::keys::Keys;

use crate::history::checks::{self, Check, Evidence, Status};
use crate::history::linearizable::StockModel;
use crate::history::{operations, Event, Recorder};

/// What to fire at, and how much.
#[derive(Clone, Debug)]
pub struct Options {
    /// Base URLs of the instances; buyer `i` goes to `hosts[i % hosts.len()]`.
    pub hosts: Vec<String>,
    /// Requests, one per goose user; see [`crowd::Buyers`] for who sends them.
    pub users: usize,
    /// The share of those requests (0 to 0.5) sent by a buyer who already sent one,
    /// to show `--one-per-buyer` at work.
    pub repeat_buyers: f64,
    /// Stock to reset to before the attack.
    pub initial_stock: i64,
    /// The Redis the instances sell from, read directly for the verdict.
    pub redis_url: String,
    /// The sale's keys in it (the instances' `--key-prefix`).
    pub keys: Keys,
    /// The MySQL of the MySQL strategies, whose statement counters are read.
    pub mysql_url: String,
    /// Sent with the reset, for instances started with `--admin-token`.
    pub admin_token: Option<String>,
    /// Print goose's own metrics tables too.
    pub goose_metrics: bool,
    /// Also append each event of the history to this file as it happens (`--live-history`).
    pub live_history: Option<std::path::PathBuf>,
}

/// Why a run could not be judged (exit code 2): not a verdict on the strategy.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRun(pub String);

/// Resets the sale, fires the crowd, and judges what happened.
pub async fn run(options: &Options) -> anyhow::Result<Report> {
    refuse_bad(options)?;
    let target = crowd::prepare(options).await?;
    let generation = sale_state::generation(&options.redis_url, &options.keys).await?;
    let counting_cost = database::is_database_lock(&target.strategy);
    let cost_before = match counting_cost {
        true => Some(database::snapshot(&options.hosts, &options.mysql_url).await?),
        false => None,
    };
    let history = match &options.live_history {
        Some(path) => Recorder::live_to(path)?,
        None => Recorder::default(),
    };
    let tally = crowd::attack(options, &history).await?;
    let sale = sale_state::read_sale(&options.redis_url, &options.keys).await?;
    // An instance that died during the attack (the chaos runs kill one) cannot be asked
    // for its counters: the verdict still stands, only the cost is not measured.
    let mut unmeasured = None;
    let database_cost = match &cost_before {
        Some(before) => match database::snapshot(&options.hosts, &options.mysql_url).await {
            Ok(after) => database::DatabaseCost::from_snapshots(before, &after, sale.lucky),
            Err(error) => {
                unmeasured = Some(format!("the lock's cost was not measured: {error:#}"));
                None
            }
        },
        None => None,
    };
    if sale.generation != generation {
        return Err(InvalidRun(format!(
            "the sale was reset while the crowd was buying (reset generation {generation} became {}): \
             another load test or a `POST /stock/reset` ran at the same time. Run it again alone",
            sale.generation
        ))
        .into());
    }
    let orders = orders::read_if_on(&target, &options.redis_url, &options.keys, &options.mysql_url).await?;
    let mut judgement = checker::judge(options.initial_stock, &target, &sale, &tally, orders.as_ref());
    let events = history.events();
    let checks = check_history(&events, &sale, options.initial_stock, target.one_per_buyer);
    judgement.verdict = verdict_of(judgement.verdict, &checks);
    judgement.findings.extend(findings_of(&checks));
    let mut report = Report::new(options, target, &sale, tally, judgement)
        .with_database_cost(database_cost)
        .with_orders(orders);
    report.findings.extend(unmeasured);
    report.checks = checks;
    report.history = events;
    Ok(report)
}

/// Refuses options no run can use, naming the flag and what it takes.
fn refuse_bad(options: &Options) -> anyhow::Result<()> {
    if options.hosts.is_empty() {
        bail!("no hosts to test; pass --hosts http://127.0.0.1:8080,http://127.0.0.1:8090");
    }
    if options.users == 0 {
        bail!("--users must be at least 1");
    }
    if !(0.0..=crowd::MAX_REPEAT_BUYERS).contains(&options.repeat_buyers) {
        bail!(
            "--repeat-buyers must be between 0 and {}, got {}",
            crowd::MAX_REPEAT_BUYERS,
            options.repeat_buyers
        );
    }
    Ok(())
}

/// The history's checks, on its operations patched with the sale records.
pub fn check_history(
    events: &[Event],
    sale: &sale_state::SaleState,
    initial_stock: i64,
    one_per_buyer: bool,
) -> Vec<Check> {
    let operations = operations::of_sale(events, &sale.sale_name, &sale.records);
    let model = StockModel {
        sale: sale.sale_name.clone(),
        units_per_segment: sale.segments.split(initial_stock),
    };
    checks::run_all(&Evidence {
        operations: &operations,
        records: Some(&sale.records),
        model: &model,
        one_per_buyer,
    })
}

/// The counts' verdict, with the history's checks: two buyers of one unit (or of two
/// units with one per buyer, or a fence gone backwards) oversold; a "sold" with no sale,
/// or a sale with no buyer, lost; any other check that fails, an answer no order of the
/// sale explains.
pub fn verdict_of(counted: Verdict, checks: &[Check]) -> Verdict {
    let failed = |name: &str| {
        checks
            .iter()
            .any(|check| check.name == name && check.status == Status::Fail)
    };
    if counted == Verdict::Oversold || ["unique", "one-per-buyer", "fence-order"].into_iter().any(failed) {
        Verdict::Oversold
    } else if counted == Verdict::Lost || ["lost", "phantom"].into_iter().any(failed) {
        Verdict::Lost
    } else if checks.iter().any(|check| check.status == Status::Fail) {
        Verdict::WrongAnswer
    } else {
        counted
    }
}

/// How many findings of each check that did not pass the report's reasons show. The
/// check itself, in the report's JSON, keeps more; the reasons count the rest on one line,
/// so that a report a reader reads whole stays short.
const REASONS_PER_CHECK: usize = 2;

/// What the checks that did not pass found, one line each, named by check.
fn findings_of(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter(|check| matches!(check.status, Status::Fail | Status::Unknown))
        .flat_map(|check| {
            let word = if check.status == Status::Fail {
                "failed"
            } else {
                "could not decide"
            };
            let shown = check.findings.len().min(REASONS_PER_CHECK);
            let more = count_of(&check.findings[shown..]);
            let line = move |finding: &str| format!("check `{}` {word}: {finding}", check.name);
            let counted = (more > 0).then(|| line(&format!("{more} more like these")));
            check.findings[..shown]
                .iter()
                .map(|finding| line(finding))
                .chain(counted)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How many findings `findings` stands for: one a line, but `N more like these` (the
/// check's own count of those it left out) N.
fn count_of(findings: &[String]) -> usize {
    findings
        .iter()
        .map(|finding| {
            finding
                .strip_suffix(" more like these")
                .and_then(|count| count.parse().ok())
                .unwrap_or(1)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reasons_show_two_findings_of_a_check_and_count_the_rest() {
        // As the check keeps nine: five, then a count of the other four.
        let mut findings: Vec<String> = (1..=5).map(|unit| format!("unit {unit} sold twice")).collect();
        findings.push("4 more like these".to_owned());
        let check = Check {
            name: "unique".to_owned(),
            status: Status::Fail,
            findings,
            culprits: Vec::new(),
        };
        assert_eq!(
            findings_of(&[check]),
            [
                "check `unique` failed: unit 1 sold twice",
                "check `unique` failed: unit 2 sold twice",
                "check `unique` failed: 7 more like these",
            ]
        );
    }

    fn failing(names: &[&str]) -> Vec<Check> {
        [
            "unique",
            "lost",
            "phantom",
            "sold-out",
            "real-time",
            "fence-order",
            "linearizable",
        ]
        .into_iter()
        .map(|name| Check {
            name: name.to_owned(),
            status: if names.contains(&name) {
                Status::Fail
            } else {
                Status::Pass
            },
            findings: Vec::new(),
            culprits: Vec::new(),
        })
        .collect()
    }

    #[test]
    fn the_worst_failed_check_names_the_verdict() {
        assert_eq!(verdict_of(Verdict::Held, &failing(&[])), Verdict::Held);
        assert_eq!(
            verdict_of(Verdict::Held, &failing(&["unique", "lost"])),
            Verdict::Oversold
        );
        assert_eq!(
            verdict_of(Verdict::Held, &failing(&["phantom", "sold-out"])),
            Verdict::Lost
        );
        assert_eq!(
            verdict_of(Verdict::Held, &failing(&["sold-out", "real-time"])),
            Verdict::WrongAnswer
        );
        assert_eq!(
            verdict_of(Verdict::Held, &failing(&["linearizable"])),
            Verdict::WrongAnswer
        );
        assert_eq!(
            verdict_of(Verdict::Lost, &failing(&["sold-out"])),
            Verdict::Lost,
            "the counts' lost stays"
        );
    }
}
