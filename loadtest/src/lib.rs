//! The flash-sale crowd: 500 buyers, one request each, all at once, split between two
//! instances; then a verdict read straight from Redis.
//!
//! ## What is checked
//! After the attack the checker reads `stock`, `lucky` and the `sales` list from Redis
//! (not from the service, which could be wrong) and compares them with what the buyers
//! were told:
//!
//! - **oversold**: `lucky > initial`, `stock + lucky != initial`, `sales != lucky`,
//!   a negative stock, or two sale records that read the same `stock_before` (one unit
//!   sold twice), or fencing tokens that go backwards along the sales list (two holders
//!   overlapped);
//! - **lost**: the number of buyers told "sold" differs from `lucky`.
//!
//! `none` and `local` are expected to oversell across two instances: the report says
//! so, and says so honestly when a run happened not to hit the race.

pub mod chart;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use goose::config::GooseConfiguration;
use goose::prelude::*;
use serde::{Deserialize, Serialize};

use seckill::http::ReduceResponse;
use seckill::lock::Strategy;
use seckill::stock::{SaleRecord, INITIAL_STOCK_KEY, LUCKY_KEY, SALES_KEY, STOCK_KEY};

/// Launch rate, users per second: high enough that all 500 are in flight at once.
const LAUNCH_RATE: &str = "5000";
/// Per-request timeout, seconds: longer than the service's acquire timeout.
const REQUEST_TIMEOUT_SECS: &str = "60";

/// What to fire at, and how much.
#[derive(Clone, Debug)]
pub struct Options {
    /// Base URLs of the instances; buyer `i` goes to `hosts[i % hosts.len()]`.
    pub hosts: Vec<String>,
    /// Buyers, each sending exactly one request.
    pub users: usize,
    /// Stock to reset to before the attack.
    pub initial_stock: i64,
    /// The Redis the instances sell from, read directly for the verdict.
    pub redis_url: String,
    /// Print goose's own metrics tables too.
    pub goose_metrics: bool,
}

/// The verdict of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every unit sold at most once, every sale accounted for.
    Held,
    /// At least one unit was sold twice, or the counters disagree.
    Oversold,
    /// No oversell, but buyers were told something the records do not show.
    Lost,
}

/// Everything measured in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub strategy: String,
    pub hosts: Vec<String>,
    pub users: usize,
    pub initial_stock: i64,
    // What Redis says.
    pub stock_left: i64,
    pub lucky: i64,
    pub sale_records: usize,
    /// Units whose `stock_before` appears in more than one sale record.
    pub units_sold_twice: usize,
    /// Places where the fencing token did not grow along the sales list.
    pub fencing_regressions: usize,
    // What the buyers were told.
    pub told_sold: usize,
    pub told_sold_out: usize,
    pub errors: BTreeMap<String, usize>,
    // How fast.
    pub seconds: f64,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub verdict: Verdict,
    /// Whether this strategy is expected to oversell across two instances.
    pub expected_to_oversell: bool,
    /// Human-readable reasons behind the verdict.
    pub findings: Vec<String>,
}

impl Report {
    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }

    /// Whether the run is a pass: safe strategies must hold; baselines may oversell.
    pub fn passed(&self) -> bool {
        match self.verdict {
            Verdict::Held => true,
            Verdict::Oversold | Verdict::Lost => self.expected_to_oversell,
        }
    }

    /// The verdict as a reader should see it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let headline = match (self.verdict, self.expected_to_oversell) {
            (Verdict::Held, false) => "HELD: no oversell, nothing lost".to_owned(),
            (Verdict::Held, true) => format!(
                "HELD this time: `{}` is expected to oversell across two instances, but this run did not hit the race. Run it again.",
                self.strategy
            ),
            (Verdict::Oversold, true) => format!("OVERSOLD, as expected: `{}` cannot guard two instances", self.strategy),
            (Verdict::Oversold, false) => format!("OVERSOLD: `{}` let two buyers take the same unit", self.strategy),
            (Verdict::Lost, _) => "LOST: buyers were told something the records do not show".to_owned(),
        };
        let line = |out: &mut String, label: &str, value: String| out.push_str(&format!("  {label:<22}{value}\n"));
        out.push_str(&format!("== seckill load test: strategy `{}` ==\n", self.strategy));
        line(&mut out, "hosts", self.hosts.join(", "));
        line(&mut out, "buyers", format!("{} (one request each, all at once)", self.users));
        line(&mut out, "initial stock", self.initial_stock.to_string());
        line(&mut out, "sold (lucky)", self.lucky.to_string());
        line(&mut out, "stock left", self.stock_left.to_string());
        line(&mut out, "stock + lucky", format!("{} (must be {})", self.stock_left + self.lucky, self.initial_stock));
        line(&mut out, "sale records", self.sale_records.to_string());
        line(&mut out, "units sold twice", self.units_sold_twice.to_string());
        line(&mut out, "fencing regressions", self.fencing_regressions.to_string());
        line(&mut out, "answered sold", self.told_sold.to_string());
        line(&mut out, "answered sold out", self.told_sold_out.to_string());
        let errors = if self.errors.is_empty() {
            "0".to_owned()
        } else {
            let kinds: Vec<String> = self.errors.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
            format!("{} ({})", self.error_count(), kinds.join(", "))
        };
        line(&mut out, "errors", errors);
        line(&mut out, "time", format!("{:.3} s, {:.0} req/s", self.seconds, self.requests_per_second));
        line(
            &mut out,
            "latency",
            format!("p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms", self.p50_ms, self.p95_ms, self.p99_ms),
        );
        for finding in &self.findings {
            out.push_str(&format!("  - {finding}\n"));
        }
        out.push_str(&format!("verdict: {headline}\n"));
        out
    }
}

/// One buyer's answer, as the crowd saw it.
enum Answer {
    Sold,
    SoldOut,
    Error(String),
}

/// What the buyers were told, gathered from every goose user.
#[derive(Default)]
struct Tally {
    sold: usize,
    sold_out: usize,
    errors: BTreeMap<String, usize>,
    latencies_ms: Vec<f64>,
    first_sent: Option<Instant>,
    last_answered: Option<Instant>,
}

impl Tally {
    fn record(&mut self, answer: Answer, sent: Instant, answered: Instant) {
        match answer {
            Answer::Sold => self.sold += 1,
            Answer::SoldOut => self.sold_out += 1,
            Answer::Error(kind) => *self.errors.entry(kind).or_default() += 1,
        }
        self.latencies_ms.push((answered - sent).as_secs_f64() * 1000.0);
        self.first_sent = Some(self.first_sent.map_or(sent, |first| first.min(sent)));
        self.last_answered = Some(self.last_answered.map_or(answered, |last| last.max(answered)));
    }
}

/// The strategy an instance reports on `/healthz`.
#[derive(Deserialize)]
struct Health {
    strategy: String,
}

/// Resets the sale, fires the crowd, and judges what happened.
pub async fn run(options: &Options) -> anyhow::Result<Report> {
    if options.hosts.is_empty() {
        bail!("no hosts to test; pass --hosts http://127.0.0.1:8080,http://127.0.0.1:8090");
    }
    if options.users == 0 {
        bail!("--users must be at least 1");
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let strategy = strategy_of(&http, &options.hosts).await?;
    reset(&http, &options.hosts[0], options.initial_stock).await?;

    let tally = Arc::new(Mutex::new(Tally::default()));
    attack(options, tally.clone()).await?;
    let tally = std::mem::take(&mut *tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));

    let sale = read_sale(&options.redis_url).await?;
    Ok(judge(options, strategy, &sale, tally))
}

/// Asks every host which strategy it runs; they must agree.
async fn strategy_of(http: &reqwest::Client, hosts: &[String]) -> anyhow::Result<String> {
    let mut strategies = Vec::new();
    for host in hosts {
        let health: Health = http
            .get(format!("{host}/healthz"))
            .send()
            .await
            .and_then(|response| response.error_for_status())
            .with_context(|| {
                format!("no seckill answers at {host}. Start one with `seckill serve --port <port> --lock <strategy>` (or `make demo`), or fix --hosts")
            })?
            .json()
            .await
            .with_context(|| format!("{host}/healthz did not answer like seckill"))?;
        strategies.push(health.strategy);
    }
    if strategies.iter().any(|s| s != &strategies[0]) {
        let pairs: Vec<String> = hosts.iter().zip(&strategies).map(|(h, s)| format!("{h} runs `{s}`")).collect();
        bail!("the instances run different strategies ({}); start them with the same --lock", pairs.join(", "));
    }
    Ok(strategies.swap_remove(0))
}

async fn reset(http: &reqwest::Client, host: &str, stock: i64) -> anyhow::Result<()> {
    http.post(format!("{host}/stock/reset"))
        .json(&serde_json::json!({ "stock": stock }))
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .with_context(|| format!("cannot reset the stock through {host}/stock/reset"))?;
    Ok(())
}

/// Runs goose: `users` users, one iteration each, launched at once.
async fn attack(options: &Options, tally: Arc<Mutex<Tally>>) -> anyhow::Result<()> {
    let hosts = Arc::new(options.hosts.clone());
    let buy: TransactionFunction = Arc::new(move |user| Box::pin(buy_one(user, hosts.clone(), tally.clone())));
    GooseAttack::initialize_with_config(GooseConfiguration::default())?
        .register_scenario(scenario!("FlashSale").register_transaction(Transaction::new(buy).set_name("reduce")))
        .set_default(GooseDefault::Host, options.hosts[0].as_str())?
        .set_default(GooseDefault::Users, options.users)?
        .set_default(GooseDefault::IncreaseRate, LAUNCH_RATE)?
        .set_default(GooseDefault::Iterations, 1)?
        .set_default(GooseDefault::Timeout, REQUEST_TIMEOUT_SECS)?
        .set_default(GooseDefault::NoPrintMetrics, !options.goose_metrics)?
        .set_default(GooseDefault::NoTelnet, true)?
        .set_default(GooseDefault::Quiet, 1)?
        .execute()
        .await
        .context("goose could not run the attack")?;
    Ok(())
}

/// One buyer: one request to its host, and what the answer meant.
async fn buy_one(user: &mut GooseUser, hosts: Arc<Vec<String>>, tally: Arc<Mutex<Tally>>) -> TransactionResult {
    let host = &hosts[user.weighted_users_index % hosts.len()];
    let sent = Instant::now();
    let goose = user.get_named(&format!("{host}/stock/reduce"), "reduce").await?;
    let answer = match goose.response {
        Err(error) => Answer::Error(if error.is_timeout() { "timeout".into() } else { "connection failed".into() }),
        Ok(response) if response.status().is_success() => match response.json::<ReduceResponse>().await {
            Ok(body) if body.sold => Answer::Sold,
            Ok(_) => Answer::SoldOut,
            Err(_) => Answer::Error("unreadable answer".into()),
        },
        Ok(response) => {
            let status = response.status().as_u16();
            let code = response
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|body| body.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_else(|| "http".to_owned());
            Answer::Error(format!("{status} {code}"))
        }
    };
    let answered = Instant::now();
    tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).record(answer, sent, answered);
    Ok(())
}

/// The sale as Redis holds it after the attack.
struct SaleState {
    stock: i64,
    lucky: i64,
    initial: Option<i64>,
    records: Vec<SaleRecord>,
    unreadable_records: usize,
}

async fn read_sale(redis_url: &str) -> anyhow::Result<SaleState> {
    let client = redis::Client::open(redis_url).with_context(|| format!("`{redis_url}` is not a Redis URL"))?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot reach Redis at {redis_url} to check the result; fix --redis-url"))?;
    let (stock, lucky, initial, raw): (Option<i64>, Option<i64>, Option<i64>, Vec<String>) = redis::pipe()
        .get(STOCK_KEY)
        .get(LUCKY_KEY)
        .get(INITIAL_STOCK_KEY)
        .lrange(SALES_KEY, 0, -1)
        .query_async(&mut connection)
        .await
        .context("reading the sale back from Redis")?;
    let mut records = Vec::with_capacity(raw.len());
    let mut unreadable_records = 0;
    for line in &raw {
        match serde_json::from_str::<SaleRecord>(line) {
            Ok(record) => records.push(record),
            Err(_) => unreadable_records += 1,
        }
    }
    Ok(SaleState { stock: stock.unwrap_or(0), lucky: lucky.unwrap_or(0), initial, records, unreadable_records })
}

/// Compares what Redis holds with what the buyers were told.
fn judge(options: &Options, strategy: String, sale: &SaleState, tally: Tally) -> Report {
    let initial = options.initial_stock;
    let mut oversold = Vec::new();
    let mut lost = Vec::new();

    if sale.initial != Some(initial) {
        oversold.push(format!(
            "the sale was reset to {:?} during the run, not {initial}: another load test ran at the same time?",
            sale.initial
        ));
    }
    if sale.lucky > initial {
        oversold.push(format!("{} buyers got a unit out of {initial}", sale.lucky));
    }
    if sale.stock < 0 {
        oversold.push(format!("stock went negative ({})", sale.stock));
    }
    if sale.stock + sale.lucky != initial {
        oversold.push(format!("stock + lucky = {} + {} != {initial}", sale.stock, sale.lucky));
    }
    let sale_records = sale.records.len() + sale.unreadable_records;
    if sale_records as i64 != sale.lucky {
        oversold.push(format!("{sale_records} sale records for {} lucky buyers", sale.lucky));
    }
    let units_sold_twice = units_sold_twice(&sale.records);
    if units_sold_twice > 0 {
        oversold.push(format!("{units_sold_twice} units appear in more than one sale record"));
    }
    let fencing_regressions = fencing_regressions(&sale.records);
    if fencing_regressions > 0 {
        oversold.push(format!("fencing tokens went backwards {fencing_regressions} times: two holders overlapped"));
    }
    if tally.sold as i64 != sale.lucky {
        lost.push(format!("{} buyers were told \"sold\" but Redis counts {} lucky", tally.sold, sale.lucky));
    }

    let mut findings: Vec<String> = oversold.iter().chain(&lost).cloned().collect();
    let errors: usize = tally.errors.values().sum();
    if errors > 0 && sale.stock > 0 {
        findings.push(format!(
            "{} units stayed unsold because {errors} requests failed (see errors): not an oversell",
            sale.stock
        ));
    }
    let verdict = if !oversold.is_empty() {
        Verdict::Oversold
    } else if !lost.is_empty() {
        Verdict::Lost
    } else {
        Verdict::Held
    };

    let seconds = match (tally.first_sent, tally.last_answered) {
        (Some(first), Some(last)) => (last - first).as_secs_f64(),
        _ => 0.0,
    };
    let answered = tally.latencies_ms.len();
    let mut latencies = tally.latencies_ms;
    latencies.sort_by(f64::total_cmp);
    // The service's own word on which strategies cannot guard two instances.
    let expected_to_oversell =
        <Strategy as clap::ValueEnum>::from_str(&strategy, true).is_ok_and(Strategy::expected_to_oversell);
    Report {
        strategy,
        hosts: options.hosts.clone(),
        users: options.users,
        initial_stock: initial,
        stock_left: sale.stock,
        lucky: sale.lucky,
        sale_records,
        units_sold_twice,
        fencing_regressions,
        told_sold: tally.sold,
        told_sold_out: tally.sold_out,
        errors: tally.errors,
        seconds,
        requests_per_second: if seconds > 0.0 { answered as f64 / seconds } else { 0.0 },
        p50_ms: percentile(&latencies, 0.50),
        p95_ms: percentile(&latencies, 0.95),
        p99_ms: percentile(&latencies, 0.99),
        verdict,
        expected_to_oversell,
        findings,
    }
}

/// How many units were sold more than once: each sale records the stock it read,
/// and under a working lock every value from `initial` down to 1 is read once.
pub fn units_sold_twice(records: &[SaleRecord]) -> usize {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for record in records {
        if !seen.insert(record.stock_before) {
            twice.insert(record.stock_before);
        }
    }
    twice.len()
}

/// How often the fencing token fails to grow from one sale record to the next.
/// Records are appended while the lock is held, so under a working lock a later
/// record always carries a later grant.
pub fn fencing_regressions(records: &[SaleRecord]) -> usize {
    let tokens: Vec<u64> = records.iter().filter_map(|r| r.fencing_token).collect();
    tokens.windows(2).filter(|pair| pair[1] <= pair[0]).count()
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One table comparing the reports of several runs, one row per strategy.
pub fn comparison_table(reports: &[Report]) -> String {
    let mut out = String::new();
    out.push_str(
        "| strategy | verdict | expected | sold | stock left | units sold twice | errors | req/s | p50 ms | p99 ms |\n",
    );
    out.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for r in reports {
        let verdict = match r.verdict {
            Verdict::Held => "held",
            Verdict::Oversold => "OVERSOLD",
            Verdict::Lost => "LOST",
        };
        let expected = if r.expected_to_oversell { "oversells" } else { "holds" };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} |\n",
            r.strategy,
            verdict,
            expected,
            r.lucky,
            r.stock_left,
            r.units_sold_twice,
            r.error_count(),
            r.requests_per_second,
            r.p50_ms,
            r.p99_ms
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(stock_before: i64, fencing_token: Option<u64>) -> SaleRecord {
        SaleRecord {
            instance: "test".into(),
            port: 8080,
            strategy: "redis".into(),
            stock_before,
            fencing_token,
            lock_wait_ms: 0.0,
            locked_at_ms: 0,
            sold_at_ms: 0,
        }
    }

    #[test]
    fn a_stock_value_read_by_two_sales_counts_as_a_unit_sold_twice() {
        let records = [record(3, None), record(2, None), record(2, None), record(2, None), record(1, None)];
        assert_eq!(units_sold_twice(&records), 1);
        assert_eq!(units_sold_twice(&records[..2]), 0);
    }

    #[test]
    fn a_fencing_token_that_does_not_grow_is_a_regression() {
        let records = [record(3, Some(1)), record(2, Some(5)), record(1, Some(4))];
        assert_eq!(fencing_regressions(&records), 1);
        assert_eq!(fencing_regressions(&records[..2]), 0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.50), 50.0);
        assert_eq!(percentile(&sorted, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    fn judged(strategy: &str, stock: i64, lucky: i64, records: Vec<SaleRecord>, told_sold: usize) -> Report {
        let options = Options {
            hosts: vec!["h".into()],
            users: 5,
            initial_stock: 3,
            redis_url: String::new(),
            goose_metrics: false,
        };
        let sale = SaleState { stock, lucky, initial: Some(3), records, unreadable_records: 0 };
        let tally = Tally { sold: told_sold, sold_out: 5 - told_sold, ..Tally::default() };
        judge(&options, strategy.into(), &sale, tally)
    }

    #[test]
    fn a_safe_strategy_that_oversold_fails_the_run() {
        let report = judged("redis", 0, 4, vec![record(3, None), record(2, None), record(2, None), record(1, None)], 4);
        assert_eq!(report.verdict, Verdict::Oversold);
        assert!(!report.passed());
    }

    #[test]
    fn a_baseline_that_oversold_passes_as_expected() {
        let report = judged("none", 0, 4, vec![record(3, None), record(2, None), record(2, None), record(1, None)], 4);
        assert_eq!(report.verdict, Verdict::Oversold);
        assert!(report.passed());
        assert!(report.render().contains("as expected"));
    }

    #[test]
    fn a_sale_the_buyer_was_not_told_about_is_lost() {
        let report = judged("redis", 0, 3, vec![record(3, None), record(2, None), record(1, None)], 2);
        assert_eq!(report.verdict, Verdict::Lost);
        assert!(!report.passed());
    }

    #[test]
    fn an_exact_sale_holds() {
        let report = judged("redis", 0, 3, vec![record(3, Some(1)), record(2, Some(2)), record(1, Some(3))], 3);
        assert_eq!(report.verdict, Verdict::Held, "{}", report.render());
        assert!(report.passed());
    }
}
