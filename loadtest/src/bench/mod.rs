//! `make bench`: every strategy measured the same way, against its own bound.
//!
//! For one strategy (two instances already running), [`measure`]:
//! 1. times the round trip to each backend on the lock's critical path, on a quiet
//!    machine ([`bound`]), three times in the course of the run;
//! 2. runs the 500-buyer / 300-unit crowd N times: the lesson's numbers, with the
//!    median and spread of each, and every lock wait the service reported;
//! 3. measures one keep-alive client alone (serial: one sale's whole path), then
//!    many at once for a few seconds against a stock that does not run out
//!    ([`sustained`]), watching who used the CPU meanwhile ([`cpu`]);
//!    each in a few windows, of which the median is reported (this machine is shared,
//!    and one window can be unlucky);
//! 4. divides both rates by the bound.
//!
//! [`lockbench`] measures the locks alone, without the sale around them.
//!
//! [`render_tables`] turns the results of every strategy into the README's tables and
//! settles the seeds' claim "performance: redis > zookeeper > database" with them.

pub mod bound;

pub mod sustained;

pub mod cpu;

pub mod lockbench;

use serde::{Deserialize, Serialize};

use seckill::config::Config;
use seckill::strategy::{FencingStatus, Strategy};

use crate::latency::Latencies;
use crate::verdict::{Options, Report, Verdict};
use bound::{Access, RoundTrip, Step};
use cpu::{CpuReport, Watched};
use sustained::{Load, Throughput};

/// A safe lock should sell at least this fraction of its bound under sustained load.
pub const TARGET_RATIO: f64 = 0.7;

/// How to measure one strategy.
pub struct BenchOptions {
    /// The crowd (hosts, buyers, stock, where to check the result).
    pub crowd: Options,
    /// How the strategy's lock is configured (for the round-trip probes).
    pub config: Config,
    /// What this row is called: the strategy, or a variant of it.
    pub label: String,
    pub runs: usize,
    pub sustained: Load,
    /// Windows of serial and of sustained load; the median one of each is reported.
    pub sustained_runs: usize,
    pub serial_seconds: f64,
    /// The processes whose CPU use is reported (instances, servers).
    pub watched: Vec<Watched>,
}

/// Median and spread of one figure over the runs.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut values: Vec<f64> = values.into_iter().collect();
        values.sort_by(f64::total_cmp);
        Spread {
            // The middle run; of an even number, the lower of the two in the middle.
            median: values.get(values.len().saturating_sub(1) / 2).copied().unwrap_or(0.0),
            min: values.first().copied().unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// The crowd runs in a few figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrowdSummary {
    pub runs: usize,
    /// Runs whose verdict was what the strategy promises.
    pub runs_passed: usize,
    pub units_sold: Spread,
    pub requests_per_second: Spread,
    pub p50_ms: Spread,
    pub p95_ms: Spread,
    pub p99_ms: Spread,
    /// Over every answer of every run.
    pub lock_wait_p50_ms: f64,
    pub lock_wait_p99_ms: f64,
}

/// Everything measured for one strategy.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StrategyBench {
    pub label: String,
    pub strategy: String,
    pub fencing: FencingStatus,
    pub expected_to_oversell: bool,
    pub crowd: CrowdSummary,
    pub crowd_runs: Vec<Report>,
    /// Every lock wait of every crowd run, sorted, for the distribution.
    pub lock_waits_ms: Vec<f64>,
    pub round_trips: Vec<RoundTrip>,
    /// `None` for the baselines, which have no lock to wait on.
    pub critical_path: Option<Vec<Step>>,
    pub bound_sales_per_second: Option<f64>,
    pub serial: Throughput,
    /// The window with the median rate.
    pub sustained: Throughput,
    /// Sales per second over every sustained window.
    pub sustained_spread: Spread,
    pub sustained_windows: usize,
    /// Over every sustained window together.
    pub sustained_cpu: CpuReport,
}

impl StrategyBench {
    pub fn critical_path_round_trips(&self) -> Option<f64> {
        self.critical_path.as_ref().map(|path| path.iter().map(|step| step.round_trips).sum())
    }

    pub fn sustained_ratio(&self) -> Option<f64> {
        self.bound_sales_per_second.map(|bound| self.sustained.sales_per_second / bound)
    }

    pub fn serial_ratio(&self) -> Option<f64> {
        self.bound_sales_per_second.map(|bound| self.serial.sales_per_second / bound)
    }

    /// Every crowd run and both load windows ended as the strategy promises.
    pub fn kept_its_promise(&self) -> bool {
        let held = |verdict| verdict == Verdict::Held;
        self.crowd.runs_passed == self.crowd.runs
            && (self.expected_to_oversell || (held(self.sustained.verdict) && held(self.serial.verdict)))
    }
}

/// Measures one strategy whose two instances are running (see the module notes).
pub async fn measure(options: &BenchOptions) -> anyhow::Result<StrategyBench> {
    // Only what the instances run: each crowd run resets the sale itself.
    let target = crate::verdict::crowd::target_of(&options.crowd.hosts).await?;
    let strategy = <Strategy as clap::ValueEnum>::from_str(&target.strategy, true)
        .map_err(|_| anyhow::anyhow!("the instances run `{}`, which this benchmark does not know", target.strategy))?;

    // Round trips are timed three times (now, after the crowd, after the serial client)
    // and the quickest median of each kept: one stall of this shared machine during one
    // probe must not move the bound.
    let mut round_trips = bound::measure_round_trips(strategy, &options.config).await?;

    let mut crowd_runs = Vec::new();
    for _ in 0..options.runs.max(1) {
        crowd_runs.push(crate::verdict::run(&options.crowd).await?);
    }
    let mut lock_waits_ms: Vec<f64> = crowd_runs.iter().flat_map(|run| run.lock_waits_ms.iter().copied()).collect();
    lock_waits_ms.sort_by(f64::total_cmp);
    let waits = Latencies::of_ms(lock_waits_ms.iter().copied());
    let crowd = CrowdSummary {
        runs: crowd_runs.len(),
        runs_passed: crowd_runs.iter().filter(|run| run.passed()).count(),
        units_sold: Spread::of(crowd_runs.iter().map(|run| run.lucky as f64)),
        requests_per_second: Spread::of(crowd_runs.iter().map(|run| run.requests_per_second)),
        p50_ms: Spread::of(crowd_runs.iter().map(|run| run.p50_ms)),
        p95_ms: Spread::of(crowd_runs.iter().map(|run| run.p95_ms)),
        p99_ms: Spread::of(crowd_runs.iter().map(|run| run.p99_ms)),
        lock_wait_p50_ms: waits.percentile_ms(0.5),
        lock_wait_p99_ms: waits.percentile_ms(0.99),
    };

    bound::keep_quickest(&mut round_trips, bound::measure_round_trips(strategy, &options.config).await?);

    let one_client = Options { hosts: options.crowd.hosts[..1].to_vec(), ..options.crowd.clone() };
    let one_connection = Load { connections: 1, seconds: options.serial_seconds };
    let mut serial_windows = Vec::new();
    for _ in 0..options.sustained_runs.max(1) {
        serial_windows.push(sustained::measure(&one_client, &one_connection).await?);
    }
    let serial = median_window(serial_windows);
    bound::keep_quickest(&mut round_trips, bound::measure_round_trips(strategy, &options.config).await?);
    let critical_path = bound::critical_path(strategy);
    let bound_sales_per_second =
        critical_path.as_ref().and_then(|path| bound::bound_sales_per_second(path, &round_trips));

    let mut watched = options.watched.clone();
    watched.push(Watched { name: "load generator".into(), pid: std::process::id() });
    let before = cpu::sample(&watched);
    let started = std::time::Instant::now();
    let mut windows = Vec::new();
    for _ in 0..options.sustained_runs.max(1) {
        windows.push(sustained::measure(&options.crowd, &options.sustained).await?);
    }
    let sustained_spread = Spread::of(windows.iter().map(|window| window.sales_per_second));
    let sustained = median_window(windows);
    let sustained_cpu = cpu::between(&watched, &before, &cpu::sample(&watched), started.elapsed().as_secs_f64());

    Ok(StrategyBench {
        label: options.label.clone(),
        strategy: target.strategy,
        fencing: target.fencing,
        expected_to_oversell: strategy.expected_to_oversell(),
        crowd,
        crowd_runs,
        lock_waits_ms,
        round_trips,
        critical_path,
        bound_sales_per_second,
        serial,
        sustained,
        sustained_spread,
        sustained_windows: options.sustained_runs.max(1),
        sustained_cpu,
    })
}

/// The window with the median rate, carrying the verdict of the worst: every window
/// must have held, not only the median one.
fn median_window(mut windows: Vec<Throughput>) -> Throughput {
    let broken = windows.iter().map(|window| window.verdict).find(|verdict| *verdict != Verdict::Held);
    windows.sort_by(|a, b| a.sales_per_second.total_cmp(&b.sales_per_second));
    let mut median = windows.swap_remove(windows.len() / 2);
    median.verdict = broken.unwrap_or(median.verdict);
    median
}

fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "—".to_owned())
}

/// The README's tables: the crowd runs, then the rates against the bounds, then the
/// ordering found and what each strategy ran out of.
pub fn render_tables(benches: &[StrategyBench]) -> String {
    let mut out = String::new();
    let runs = benches.first().map_or(0, |bench| bench.crowd.runs);
    out.push_str(&format!(
        "The crowd: 500 buyers, 300 units, two instances; median (min–max) of {runs} runs.\n\n\
         | strategy | runs as promised | units sold | req/s | p50 ms | p95 ms | p99 ms | lock wait p50 / p99 ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    ));
    for bench in benches {
        let c = &bench.crowd;
        let spread =
            |s: &Spread, digits: usize| format!("{:.digits$} ({:.digits$}–{:.digits$})", s.median, s.min, s.max);
        out.push_str(&format!(
            "| {} | {}/{} | {} | {} | {} | {} | {} | {:.1} / {:.1} |\n",
            bench.label,
            c.runs_passed,
            c.runs,
            spread(&c.units_sold, 0),
            spread(&c.requests_per_second, 0),
            spread(&c.p50_ms, 1),
            spread(&c.p95_ms, 1),
            spread(&c.p99_ms, 1),
            c.lock_wait_p50_ms,
            c.lock_wait_p99_ms
        ));
    }
    let connections = benches.first().map_or(0, |bench| bench.sustained.connections);
    let windows = benches.first().map_or(0, |bench| bench.sustained_windows);
    out.push_str(&format!(
        "\nSales per second against the bound: serial is one keep-alive client alone; sustained is \
         {connections} keep-alive connections on both instances, stock that does not run out, median (min–max) \
         of {windows} windows. The bound is \
         one sale per critical path (round trips on it x each backend's measured round-trip time).\n\n\
         | strategy | serial sales/s | sustained sales/s | critical path (round trips) | RTT µs (read / write) | bound sales/s | serial / bound | sustained / bound | what ran out under sustained load |\n\
         | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |\n"
    ));
    for bench in benches {
        let mut rtts: Vec<String> = Vec::new();
        for read in bench.round_trips.iter().filter(|rtt| rtt.access == Access::Read) {
            let write = bench.round_trips.iter().find(|rtt| rtt.backend == read.backend && rtt.access == Access::Write);
            rtts.push(format!(
                "{} {:.0} / {:.0}",
                read.backend.name(),
                read.median_us,
                write.map_or(0.0, |w| w.median_us)
            ));
        }
        let ratio = |ratio: Option<f64>| {
            or_dash(ratio.map(|r| format!("{r:.2}{}", if r < TARGET_RATIO { " (below 0.7)" } else { "" })))
        };
        out.push_str(&format!(
            "| {} | {:.0} | {:.0} ({:.0}–{:.0}){} | {} | {} | {} | {} | {} | {} |\n",
            bench.label,
            bench.serial.sales_per_second,
            bench.sustained_spread.median,
            bench.sustained_spread.min,
            bench.sustained_spread.max,
            if bench.sustained.verdict == Verdict::Oversold { " (oversold)" } else { "" },
            or_dash(bench.critical_path_round_trips().map(|trips| format!("{trips}"))),
            rtts.join(", "),
            or_dash(bench.bound_sales_per_second.map(|bound| format!("{bound:.0}"))),
            ratio(bench.serial_ratio()),
            ratio(bench.sustained_ratio()),
            bench.sustained_cpu.saturated
        ));
    }
    out.push('\n');
    out.push_str(&ordering(benches));
    out
}

/// The safe strategies fastest first, and whether the seeds' claim holds.
pub fn ordering(benches: &[StrategyBench]) -> String {
    let mut safe: Vec<&StrategyBench> = benches.iter().filter(|bench| !bench.expected_to_oversell).collect();
    safe.sort_by(|a, b| b.sustained.sales_per_second.total_cmp(&a.sustained.sales_per_second));
    let ranked: Vec<String> =
        safe.iter().map(|bench| format!("{} ({:.0})", bench.label, bench.sustained.sales_per_second)).collect();
    let mut out = format!("Ordering by sustained sales/s: {}\n", ranked.join(" > "));
    let rate = |label: &str| benches.iter().find(|bench| bench.label == label).map(|b| b.sustained.sales_per_second);
    let database = ["mysql", "mysql-version"].iter().filter_map(|label| rate(label)).reduce(f64::max);
    match (rate("redis"), rate("zookeeper"), database) {
        (Some(redis), Some(zookeeper), Some(database)) => {
            let holds = redis > zookeeper && zookeeper > database;
            out.push_str(&format!(
                "The claim \"redis > zookeeper > database\" {}: redis {redis:.0}, zookeeper {zookeeper:.0}, \
                 the faster MySQL lock {database:.0} sales/s.\n",
                if holds { "holds" } else { "does not hold" }
            ));
        }
        _ => out.push_str(
            "The claim \"redis > zookeeper > database\" needs redis, zookeeper and a MySQL lock in the run.\n",
        ),
    }
    out
}
