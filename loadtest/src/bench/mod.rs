//! `make bench`: every strategy measured the same way, against its own bound.
//!
//! For one strategy (two instances already running), [`measure`]:
//! 1. times the round trip to each backend on the lock's critical path, on a quiet
//!    machine ([`bound`]), three times in the course of the run;
//! 2. runs the 500-buyer / 300-unit crowd N times: the lesson's numbers, with the
//!    median and spread of each, and every lock wait the service reported;
//! 3. measures one keep-alive client alone (serial: one sale's whole path, and the
//!    HTTP turnaround between two sales: [`turnaround`]), then many at once for a few
//!    seconds against a stock that does not run out ([`sustained`]), watching who used
//!    the CPU meanwhile ([`cpu`]);
//!    each in a few windows, of which the median is reported (this machine is shared,
//!    and one window can be unlucky);
//! 4. divides the sustained rate by the backend bound and by the lock's own (protocol)
//!    bound, and the serial rate by the serial bound ([`bound`] says what each is).
//!    With the stock in N segments (`--stock-segments`), N locks sell at once, so the
//!    sustained bounds are N times one lock's: the most segments can give.
//!
//! [`scale`] sets the runs with the stock on a Redis Cluster beside the same runs on one
//! Redis, and models the cluster past this machine. [`lockbench`] measures the locks alone,
//! without the sale around them.
//!
//! [`crate::render::tables`] turns the results of every strategy into the README's
//! tables, and settles with them the original articles' claim "performance: redis >
//! zookeeper > database".

pub mod bound;

pub mod breakdown;

pub mod server_requests;

pub mod sustained;

pub mod turnaround;

pub mod cpu;

pub mod groups;

pub mod lockbench;

pub mod scale;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use seckill::config::Config;
use seckill::store::redis_cluster::ClusterAddress;
use seckill::strategy::{FencingStatus, Strategy};

use crate::latency::Latencies;
use crate::verdict::{Options, Report, Verdict};
use bound::{RoundTrip, Step};
use breakdown::StepTime;
use cpu::{CpuReport, Watched};
use groups::GroupSizes;
use server_requests::RequestRate;
use sustained::{Load, Throughput};

/// A safe lock should sell at least this fraction of its backend bound under sustained load.
pub const TARGET_RATIO: f64 = 0.7;
/// One client alone should sell at least this fraction of the serial bound.
pub const SERIAL_TARGET_RATIO: f64 = 0.8;

/// How to measure one strategy.
#[derive(Clone)]
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
    /// Into how many segments the stock was split, each behind a lock of its own.
    #[serde(default = "crate::verdict::crowd::one_segment")]
    pub stock_segments: u32,
    /// Whether the instances ran with `--sold-out-flag`.
    #[serde(default)]
    pub sold_out_flag: bool,
    /// The masters of the Redis Cluster the stock was on; `None` for one Redis.
    #[serde(default)]
    pub stock_shards: Option<u32>,
    pub expected_to_oversell: bool,
    pub crowd: CrowdSummary,
    pub crowd_runs: Vec<Report>,
    /// Every lock wait of every crowd run, sorted, for the distribution.
    pub lock_waits_ms: Vec<f64>,
    pub round_trips: Vec<RoundTrip>,
    /// `None` for the baselines, which have no lock to wait on.
    pub critical_path: Option<Vec<Step>>,
    /// One sale per critical path: the lock's own protocol (a diagnostic); times the
    /// segments, as every sustained bound is.
    pub bound_sales_per_second: Option<f64>,
    /// The backend's minimal path (see [`bound::backend_path`]); `None` for the baselines
    /// and for results written before it existed.
    #[serde(default)]
    pub backend_path: Option<Vec<Step>>,
    #[serde(default)]
    pub backend_bound_sales_per_second: Option<f64>,
    /// One client alone at the backend's minimum (see [`bound::serial_path`]).
    #[serde(default)]
    pub serial_bound_sales_per_second: Option<f64>,
    /// The same round trips, timed through one more sustained window ([`probed_window`]);
    /// empty in results written before it existed.
    #[serde(default)]
    pub round_trips_under_load: Vec<RoundTrip>,
    /// The backend bound at the round trips under load: what the servers allowed, as
    /// slow as the load made them.
    #[serde(default)]
    pub backend_bound_under_load_sales_per_second: Option<f64>,
    /// The window the round trips under load were timed in; counted in no other figure.
    #[serde(default)]
    pub probed_window: Option<Throughput>,
    /// One more window against a sale with nothing left: how fast the buyers after the
    /// sell-out are answered (see `--sold-out-flag`); `None` for the baselines.
    #[serde(default)]
    pub sold_out_window: Option<Throughput>,
    pub serial: Throughput,
    /// The window with the median rate.
    pub sustained: Throughput,
    /// Sales per second over every sustained window.
    pub sustained_spread: Spread,
    pub sustained_windows: usize,
    /// Over every sustained window together.
    pub sustained_cpu: CpuReport,
    /// Each step's mean over the serial windows, one client alone (see `sustained_steps`).
    #[serde(default)]
    pub serial_steps: Vec<StepTime>,
    /// One client's mean HTTP turnaround, `GET /healthz` ([`turnaround`]); `None` for a
    /// peer without that page, or results written before it was timed.
    #[serde(default)]
    pub serial_turnaround_ms: Option<f64>,
    /// Each step's mean over the sustained windows, from the instances' `/metrics`
    /// (empty for a peer without them, or results written before they existed).
    #[serde(default)]
    pub sustained_steps: Vec<StepTime>,
    /// What the servers answered per unit sold over the sustained windows, busiest first.
    #[serde(default)]
    pub sustained_requests: Vec<RequestRate>,
    /// With `--group-commit`: the units each grant sold over the sustained windows.
    #[serde(default)]
    pub sustained_groups: Option<GroupSizes>,
}

impl StrategyBench {
    pub fn critical_path_round_trips(&self) -> Option<f64> {
        round_trips_of(self.critical_path.as_deref())
    }

    pub fn backend_path_round_trips(&self) -> Option<f64> {
        round_trips_of(self.backend_path.as_deref())
    }

    /// Sustained sales/s over the lock's protocol bound: how close it runs to its design.
    pub fn sustained_ratio(&self) -> Option<f64> {
        self.bound_sales_per_second
            .map(|bound| self.sustained.sales_per_second / bound)
    }

    /// Sustained sales/s over the backend bound: the goal is [`TARGET_RATIO`].
    pub fn sustained_backend_ratio(&self) -> Option<f64> {
        self.backend_bound_sales_per_second
            .map(|bound| self.sustained.sales_per_second / bound)
    }

    /// The probed window's sales/s over the backend bound at its round trips: near 1,
    /// the lock sells as fast as the servers answered under that load.
    pub fn sustained_backend_ratio_under_load(&self) -> Option<f64> {
        let window = self.probed_window.as_ref()?;
        self.backend_bound_under_load_sales_per_second
            .map(|bound| window.sales_per_second / bound)
    }

    /// One client's sales/s over the serial bound: the goal is [`SERIAL_TARGET_RATIO`].
    pub fn serial_ratio(&self) -> Option<f64> {
        self.serial_bound_sales_per_second
            .map(|bound| self.serial.sales_per_second / bound)
    }

    /// Every crowd run and every load window (the probed one too: it is judged with
    /// the sustained windows; and the one after the sell-out) ended as the strategy promises.
    pub fn kept_its_promise(&self) -> bool {
        let held = |verdict| verdict == Verdict::Held;
        let tail_held = self.sold_out_window.as_ref().is_none_or(|window| held(window.verdict));
        self.crowd.runs_passed == self.crowd.runs
            && (self.expected_to_oversell || (held(self.sustained.verdict) && held(self.serial.verdict) && tail_held))
    }
}

/// The runs of each lock that was also run over several stock segments: its plain run
/// (one segment, no variant) and its runs with no variant but `+segments-N` (the sold-out
/// flag changes only the tail; a lock or a stock elsewhere is another comparison), by
/// strategy, then by segments.
pub fn runs_over_segments(benches: &[StrategyBench]) -> Vec<&StrategyBench> {
    let only_segmented = |bench: &StrategyBench| {
        bench.label == bench.strategy || bench.label == format!("{}+segments-{}", bench.strategy, bench.stock_segments)
    };
    let split = |strategy: &str| {
        benches
            .iter()
            .any(|bench| bench.strategy == strategy && bench.stock_segments > 1 && only_segmented(bench))
    };
    let mut runs: Vec<&StrategyBench> = benches
        .iter()
        .filter(|bench| bench.critical_path.is_some() && split(&bench.strategy) && only_segmented(bench))
        .collect();
    runs.sort_by_key(|bench| (bench.strategy.clone(), bench.stock_segments));
    runs
}

/// How many masters serve the stock, if it is on a Redis Cluster.
async fn stock_shards(redis_url: &str) -> anyhow::Result<Option<u32>> {
    let Some(cluster) = ClusterAddress::parse(redis_url) else {
        return Ok(None);
    };
    let masters = cluster.map_err(anyhow::Error::msg)?.masters().await;
    let masters = masters.with_context(|| format!("asking the stock cluster {redis_url} for its masters"))?;
    Ok(Some(masters.len() as u32))
}

fn round_trips_of(path: Option<&[Step]>) -> Option<f64> {
    path.map(|path| path.iter().map(|step| step.round_trips).sum())
}

/// Measures one strategy whose two instances are running, in the steps of the module notes.
pub async fn measure(options: &BenchOptions) -> anyhow::Result<StrategyBench> {
    let (target, strategy, options) = as_the_instances_run(options).await?;
    let options = &options;
    let (round_trips, crowd, serial) = crowd_and_serial(strategy, options).await?;

    // N segments are N locks, each with its own critical path: at most N times one.
    let segments = f64::from(target.stock_segments);
    let sustained_bound = |path: &Option<Vec<Step>>, round_trips: &[RoundTrip]| {
        path.as_ref()
            .and_then(|path| bound::bound_sales_per_second(path, round_trips))
            .map(|bound| bound * segments)
    };
    let critical_path = bound::critical_path(strategy);
    let bound_sales_per_second = sustained_bound(&critical_path, &round_trips);
    let backend_path = bound::backend_path(strategy);
    let backend_bound_sales_per_second = sustained_bound(&backend_path, &round_trips);
    let serial_bound_sales_per_second =
        bound::serial_path(strategy).and_then(|path| bound::bound_sales_per_second(&path, &round_trips));

    let sustained = sustained_windows(strategy, options).await?;
    let (probed, round_trips_under_load) = probed_window(strategy, options).await?;
    let backend_bound_under_load_sales_per_second = sustained_bound(&backend_path, &round_trips_under_load);
    let sold_out_window = sold_out_window(strategy, options).await?;

    Ok(StrategyBench {
        label: options.label.clone(),
        strategy: target.strategy,
        fencing: target.fencing,
        stock_segments: target.stock_segments,
        sold_out_flag: target.sold_out_flag,
        stock_shards: stock_shards(&options.config.redis_url).await?,
        expected_to_oversell: strategy.expected_to_oversell(),
        crowd: crowd.summary,
        crowd_runs: crowd.runs,
        lock_waits_ms: crowd.lock_waits_ms,
        round_trips,
        critical_path,
        bound_sales_per_second,
        backend_path,
        backend_bound_sales_per_second,
        serial_bound_sales_per_second,
        round_trips_under_load,
        backend_bound_under_load_sales_per_second,
        sustained: median_window(sustained.windows, Some(&probed)),
        probed_window: Some(probed),
        sold_out_window,
        serial: serial.window,
        sustained_spread: sustained.spread,
        sustained_windows: options.sustained_runs.max(1),
        sustained_cpu: sustained.cpu,
        serial_steps: serial.steps,
        serial_turnaround_ms: serial.turnaround_ms,
        sustained_steps: sustained.steps,
        sustained_requests: sustained.requests,
        sustained_groups: sustained.groups,
    })
}

/// The tail of a sale, after the sell-out: only a lock has anything to save there.
async fn sold_out_window(strategy: Strategy, options: &BenchOptions) -> anyhow::Result<Option<Throughput>> {
    if strategy.expected_to_oversell() || strategy == Strategy::Atomic {
        return Ok(None);
    }
    Ok(Some(
        sustained::measure_sold_out(&options.crowd, &options.sustained).await?,
    ))
}

/// What the instances run, as the strategy this benchmark knows, and `options` as they
/// run it. Only what the instances run: each crowd run resets the sale itself.
async fn as_the_instances_run(
    options: &BenchOptions,
) -> anyhow::Result<(crate::verdict::crowd::Target, Strategy, BenchOptions)> {
    let target = crate::verdict::crowd::target_of(&options.crowd.hosts).await?;
    let strategy = <Strategy as clap::ValueEnum>::from_str(&target.strategy, true).map_err(|_| {
        anyhow::anyhow!(
            "the instances run `{}`, which this benchmark does not know",
            target.strategy
        )
    })?;
    // The probes time the stock's writes as the instances send them: with the `WAIT` of
    // `--stock-wait-replicas` when they wait, so that the bounds include it.
    let options = BenchOptions {
        config: Config {
            stock_wait_replicas: target.stock_wait_replicas,
            ..options.config.clone()
        },
        ..options.clone()
    };
    Ok((target, strategy, options))
}

/// Steps 1 to 3: the crowd runs and the serial client, with the round trips timed three
/// times (now, after the crowd, after the serial client) and the quickest median of each
/// kept: one stall of this shared machine during one probe must not move the bound.
async fn crowd_and_serial(
    strategy: Strategy,
    options: &BenchOptions,
) -> anyhow::Result<(Vec<RoundTrip>, Crowd, Serial)> {
    let mut round_trips = bound::measure_round_trips(strategy, &options.config).await?;
    let crowd = crowd_runs(options).await?;
    bound::keep_quickest(
        &mut round_trips,
        bound::measure_round_trips(strategy, &options.config).await?,
    );
    let serial = serial_windows(options).await?;
    bound::keep_quickest(
        &mut round_trips,
        bound::measure_round_trips(strategy, &options.config).await?,
    );
    Ok((round_trips, crowd, serial))
}

/// Step 2: the crowd runs, and every lock wait they saw, sorted.
struct Crowd {
    runs: Vec<Report>,
    lock_waits_ms: Vec<f64>,
    summary: CrowdSummary,
}

async fn crowd_runs(options: &BenchOptions) -> anyhow::Result<Crowd> {
    let mut runs = Vec::new();
    for _ in 0..options.runs.max(1) {
        runs.push(crate::verdict::run(&options.crowd).await?);
    }
    let mut lock_waits_ms: Vec<f64> = runs.iter().flat_map(|run| run.lock_waits_ms.iter().copied()).collect();
    lock_waits_ms.sort_by(f64::total_cmp);
    let waits = Latencies::of_ms(lock_waits_ms.iter().copied());
    let summary = CrowdSummary {
        runs: runs.len(),
        runs_passed: runs.iter().filter(|run| run.passed()).count(),
        units_sold: Spread::of(runs.iter().map(|run| run.lucky as f64)),
        requests_per_second: Spread::of(runs.iter().map(|run| run.requests_per_second)),
        p50_ms: Spread::of(runs.iter().map(|run| run.p50_ms)),
        p95_ms: Spread::of(runs.iter().map(|run| run.p95_ms)),
        p99_ms: Spread::of(runs.iter().map(|run| run.p99_ms)),
        lock_wait_p50_ms: waits.percentile_ms(0.5),
        lock_wait_p99_ms: waits.percentile_ms(0.99),
    };
    Ok(Crowd {
        runs,
        lock_waits_ms,
        summary,
    })
}

/// Step 3, serial: one keep-alive client alone on the first instance.
struct Serial {
    /// The median window.
    window: Throughput,
    steps: Vec<StepTime>,
    turnaround_ms: Option<f64>,
}

async fn serial_windows(options: &BenchOptions) -> anyhow::Result<Serial> {
    let one_client = Options {
        hosts: options.crowd.hosts[..1].to_vec(),
        ..options.crowd.clone()
    };
    let one_connection = Load {
        connections: 1,
        seconds: options.serial_seconds,
    };
    let steps_before = breakdown::scrape(&options.crowd.hosts).await.ok();
    let mut windows = Vec::new();
    for _ in 0..options.sustained_runs.max(1) {
        windows.push(sustained::measure(&one_client, &one_connection).await?);
    }
    let window = median_window(windows, None);
    let steps = steps_between(steps_before, &options.crowd.hosts).await;
    let turnaround_ms = match turnaround::measure(&one_client.hosts[0]).await {
        Ok(mean) => Some(mean.as_secs_f64() * 1000.0),
        Err(error) => {
            eprintln!("bench: no HTTP turnaround for {}: {error:#}", one_client.hosts[0]);
            None
        }
    };
    Ok(Serial {
        window,
        steps,
        turnaround_ms,
    })
}

/// Step 3, sustained: many connections on both instances, with what the servers answered,
/// the CPU each watched process used, and each step's time over all the windows.
struct Sustained {
    windows: Vec<Throughput>,
    spread: Spread,
    requests: Vec<RequestRate>,
    cpu: CpuReport,
    steps: Vec<StepTime>,
    groups: Option<GroupSizes>,
}

async fn sustained_windows(strategy: Strategy, options: &BenchOptions) -> anyhow::Result<Sustained> {
    let mut watched = options.watched.clone();
    watched.push(Watched {
        name: "load generator".into(),
        pid: std::process::id(),
    });
    let pages_before = breakdown::scrape(&options.crowd.hosts).await.ok();
    let requests_before = server_requests::read(strategy, &options.config).await;
    let before = cpu::sample(&watched);
    let started = std::time::Instant::now();
    let mut windows = Vec::new();
    for _ in 0..options.sustained_runs.max(1) {
        windows.push(sustained::measure(&options.crowd, &options.sustained).await?);
    }
    let requests_after = server_requests::read(strategy, &options.config).await;
    let sold_in_windows = windows.iter().map(|window| window.sold).sum();
    let cpu = cpu::between(
        &watched,
        &before,
        &cpu::sample(&watched),
        started.elapsed().as_secs_f64(),
    );
    let pages_after = breakdown::scrape(&options.crowd.hosts).await.ok();
    let (steps, groups) = match (pages_before, pages_after) {
        (Some(before), Some(after)) => (
            breakdown::step_times(&breakdown::step_sums(&before), &breakdown::step_sums(&after)),
            groups::between(&before, &after),
        ),
        _ => (Vec::new(), None),
    };
    Ok(Sustained {
        spread: Spread::of(windows.iter().map(|window| window.sales_per_second)),
        requests: server_requests::per_sale(&requests_before, &requests_after, sold_in_windows),
        cpu,
        steps,
        groups,
        windows,
    })
}

/// Each step's mean since the `/metrics` pages `before` (none: a peer without them).
async fn steps_between(before: Option<Vec<String>>, hosts: &[String]) -> Vec<StepTime> {
    match (before, breakdown::scrape(hosts).await.ok()) {
        (Some(before), Some(after)) => {
            breakdown::step_times(&breakdown::step_sums(&before), &breakdown::step_sums(&after))
        }
        _ => Vec::new(),
    }
}

/// One more sustained window, with the round trips timed through it on a thread of
/// their own ([`bound::probe_under_load`]). It counts in no other figure: the probes'
/// requests would add to the servers' counts per unit sold.
async fn probed_window(strategy: Strategy, options: &BenchOptions) -> anyhow::Result<(Throughput, Vec<RoundTrip>)> {
    let (stop_probing, probing_stopped) = tokio::sync::oneshot::channel();
    let config = options.config.clone();
    let probing = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(bound::probe_under_load(strategy, config, probing_stopped))
    });
    let window = sustained::measure(&options.crowd, &options.sustained).await;
    let _ = stop_probing.send(()); // also when the window failed: the thread ends either way
    let samples = tokio::task::spawn_blocking(move || probing.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the probes' thread panicked"))?;
    let window = window?;
    let counted = window
        .counted
        .clone()
        .context("a window just measured knows when it counted")?;
    let round_trips = bound::summarize_between(&samples?, counted);
    Ok((window, round_trips))
}

/// The window with the median rate, carrying the verdict of the first window that did
/// not hold, `also_judged` included: every window must have held, not only the median one.
fn median_window(mut windows: Vec<Throughput>, also_judged: Option<&Throughput>) -> Throughput {
    let broken = windows
        .iter()
        .chain(also_judged)
        .map(|window| window.verdict)
        .find(|verdict| *verdict != Verdict::Held);
    windows.sort_by(|a, b| a.sales_per_second.total_cmp(&b.sales_per_second));
    let mut median = windows.swap_remove(windows.len() / 2);
    median.verdict = broken.unwrap_or(median.verdict);
    median
}
