//! What one instance has done, for Prometheus: `GET /metrics` in the text format.
//!
//! Built on the `prometheus` crate, in a registry of the instance's own (two instances
//! in one test process must not share counters). Names follow Prometheus conventions:
//! `seckill_` first, `_total` on counters, base units (`_seconds`), and labels for the
//! parts of one measurement (the reason a buyer was turned away, the step a fencing
//! token was refused at).
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `seckill_units_sold_total` | counter | units this instance sold |
//! | `seckill_sold_out_answers_total` | counter | buyers told "sold out" |
//! | `seckill_sold_out_from_memory_total` | counter | of those, told by the sold-out flag without asking a lock (`--sold-out-flag`) |
//! | `seckill_orders_written_total` | counter | `--orders`: orders this instance's writer put into MySQL (one written again after a take-over counts again) |
//! | `seckill_orders_taken_over_total` | counter | `--orders`: orders it took over from a consumer that left them pending |
//! | `seckill_reduce_failures_total{reason}` | counter | buyers turned away, by error code (`lock_timeout`, `lock_lost`, `lock_backend_unavailable`, `stock_backend_unavailable`, `sale_reset`, `sale_outcome_unknown`, ...) |
//! | `seckill_lock_wait_seconds` | histogram | from asking for the lock to holding it, for every grant |
//! | `seckill_lock_waiters` | gauge | buyers waiting for the lock right now |
//! | `seckill_locks_held` | gauge | grants this instance holds right now, from the grant to the release's answer (a lab finds the holder by it, whatever the backend) |
//! | `seckill_sale_step_seconds{step}` | histogram | each step of a sale under a lock: `queued` (for this instance's local queue), `lock` (the lock's acquire, after the queue), `read` and `write` (the stock, fenced), `release` |
//! | `seckill_fencing_refusals_total{step}` | counter | reads and writes the stock refused because a newer holder had been there |
//! | `seckill_group_size` | histogram | `--group-commit`: the buyers each grant sold to, one observation per grant |
//! | `seckill_info{strategy,fencing,instance}` | gauge | always 1: what this instance runs |
//!
//! A strategy adds metrics of its own through its lock
//! ([`DistributedLock::own_stats`](crate::lock::DistributedLock::own_stats)), read at each scrape:
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `seckill_lock_mode{mode}` | gauge | `redis-degrade`: 1 for the mode in use (`redis` or `mysql`), 0 for the other |
//! | `seckill_lock_mode_switches_total` | counter | `redis-degrade`: mode switches this instance has seen |

use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Group sizes, one buyer to `--group-max`'s most (`crate::sale::group`).
const GROUP_SIZE_BUCKETS: [f64; 12] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 64.0, 1024.0];

/// Lock waits from 1 ms to about 16 s: a free Redis lock is granted in about a
/// millisecond, a crowd behind a MySQL lock waits seconds.
const LOCK_WAIT_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0,
];

/// Steps of a sale from 50 µs (one round trip on loopback) to about 16 s.
const STEP_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 4.0, 16.0,
];

/// A step of one sale under a lock, timed by the sale itself (`seckill::sale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaleStep {
    /// Waiting for this instance's local queue, before asking the lock.
    Queued,
    /// The lock's acquire, from asking to the grant: waiting and its round trips.
    Lock,
    /// The fenced read of the stock.
    Read,
    /// The fenced write of the sale.
    Write,
    /// The release, until the lock answered.
    Release,
}

impl SaleStep {
    pub const ALL: [SaleStep; 5] = [
        SaleStep::Queued,
        SaleStep::Lock,
        SaleStep::Read,
        SaleStep::Write,
        SaleStep::Release,
    ];

    /// The `step` label.
    pub fn name(self) -> &'static str {
        match self {
            SaleStep::Queued => "queued",
            SaleStep::Lock => "lock",
            SaleStep::Read => "read",
            SaleStep::Write => "write",
            SaleStep::Release => "release",
        }
    }
}

/// The metrics of one instance.
pub struct Metrics {
    registry: Registry,
    units_sold: IntCounter,
    sold_out_answers: IntCounter,
    sold_out_from_memory: IntCounter,
    orders_written: IntCounter,
    orders_taken_over: IntCounter,
    failures: IntCounterVec,
    lock_wait: Histogram,
    lock_waiters: IntGauge,
    locks_held: IntGauge,
    sale_steps: HistogramVec,
    fencing_refusals: IntCounterVec,
    group_size: Histogram,
}

/// Where the stock refused a token: on the read, or on the write.
#[derive(Clone, Copy, Debug)]
pub enum FencedStep {
    Read,
    Write,
}

impl Metrics {
    pub fn new(strategy: &str, fencing: &str, instance: &str) -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let counter = IntCounter::with_opts(Opts::new(name, help)).expect("a valid metric name");
            registry.register(Box::new(counter.clone())).expect("registered once");
            counter
        };
        let units_sold = counter("seckill_units_sold_total", "Units this instance sold.");
        let sold_out_answers = counter(
            "seckill_sold_out_answers_total",
            "Buyers told that the stock is sold out.",
        );
        let sold_out_from_memory = counter(
            "seckill_sold_out_from_memory_total",
            "Buyers told sold out by the sold-out flag, without asking a lock.",
        );
        let orders_written = counter(
            "seckill_orders_written_total",
            "Orders this instance's writer put into MySQL (--orders).",
        );
        let orders_taken_over = counter(
            "seckill_orders_taken_over_total",
            "Orders this instance's writer took over from a consumer that left them pending (--orders).",
        );
        let failures = IntCounterVec::new(
            Opts::new(
                "seckill_reduce_failures_total",
                "Buyers turned away, by the error code they were given.",
            ),
            &["reason"],
        )
        .expect("a valid metric");
        let lock_wait = Histogram::with_opts(
            HistogramOpts::new(
                "seckill_lock_wait_seconds",
                "From asking for the lock to holding it, per grant.",
            )
            .buckets(LOCK_WAIT_BUCKETS.to_vec()),
        )
        .expect("a valid metric");
        let lock_waiters = IntGauge::with_opts(Opts::new(
            "seckill_lock_waiters",
            "Buyers waiting for the lock right now.",
        ))
        .expect("a valid metric");
        let locks_held = IntGauge::with_opts(Opts::new(
            "seckill_locks_held",
            "Grants this instance holds right now, from the grant to the release's answer.",
        ))
        .expect("a valid metric");
        let sale_steps = HistogramVec::new(
            HistogramOpts::new(
                "seckill_sale_step_seconds",
                "Each step of a sale under a lock: queued, lock, read, write, release.",
            )
            .buckets(STEP_BUCKETS.to_vec()),
            &["step"],
        )
        .expect("a valid metric");
        let fencing_refusals = IntCounterVec::new(
            Opts::new(
                "seckill_fencing_refusals_total",
                "Stock reads and writes refused because a newer lock holder had been there.",
            ),
            &["step"],
        )
        .expect("a valid metric");
        let group_size = Histogram::with_opts(
            HistogramOpts::new(
                "seckill_group_size",
                "With --group-commit: the buyers one grant sold to, per grant.",
            )
            .buckets(GROUP_SIZE_BUCKETS.to_vec()),
        )
        .expect("a valid metric");
        let info = IntGaugeVec::new(
            Opts::new("seckill_info", "What this instance runs; always 1."),
            &["strategy", "fencing", "instance"],
        )
        .expect("a valid metric");
        info.with_label_values(&[strategy, fencing, instance]).set(1);
        for collector in [
            Box::new(failures.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(lock_wait.clone()),
            Box::new(lock_waiters.clone()),
            Box::new(locks_held.clone()),
            Box::new(sale_steps.clone()),
            Box::new(fencing_refusals.clone()),
            Box::new(group_size.clone()),
            Box::new(info),
        ] {
            registry.register(collector).expect("registered once");
        }
        Metrics {
            registry,
            units_sold,
            sold_out_answers,
            sold_out_from_memory,
            orders_written,
            orders_taken_over,
            failures,
            lock_wait,
            lock_waiters,
            locks_held,
            sale_steps,
            fencing_refusals,
            group_size,
        }
    }

    /// A grant sold to a group of `buyers` (`--group-commit`).
    pub fn record_group(&self, buyers: usize) {
        self.group_size.observe(buyers as f64);
    }

    /// One buyer's answer: sold, sold out, or the error code of a refusal.
    pub fn record_answer(&self, answer: Result<bool, &'static str>) {
        match answer {
            Ok(true) => self.units_sold.inc(),
            Ok(false) => self.sold_out_answers.inc(),
            Err(code) => self.failures.with_label_values(&[code]).inc(),
        }
    }

    /// A buyer told "sold out" by the sold-out flag (counted as an answer too).
    pub fn record_sold_out_from_memory(&self) {
        self.sold_out_from_memory.inc();
    }

    /// The order writer put `orders` into MySQL, `taken_over` of them from another consumer.
    pub fn record_orders_written(&self, orders: usize, taken_over: usize) {
        self.orders_written.inc_by(orders as u64);
        self.orders_taken_over.inc_by(taken_over as u64);
    }

    /// A grant, after waiting `seconds` for it.
    pub fn record_lock_wait(&self, seconds: f64) {
        self.lock_wait.observe(seconds);
    }

    /// One step of a sale took `took`.
    pub fn record_step(&self, step: SaleStep, took: std::time::Duration) {
        self.sale_steps
            .with_label_values(&[step.name()])
            .observe(took.as_secs_f64());
    }

    /// Counts a buyer as waiting for the lock until the returned guard is dropped.
    pub fn waiting_for_the_lock(&self) -> Counted {
        Counted::in_gauge(&self.lock_waiters)
    }

    /// Counts a grant as held until the returned guard is dropped.
    pub fn holding_a_lock(&self) -> Counted {
        Counted::in_gauge(&self.locks_held)
    }

    pub fn record_fencing_refusal(&self, step: FencedStep) {
        let step = match step {
            FencedStep::Read => "read",
            FencedStep::Write => "write",
        };
        self.fencing_refusals.with_label_values(&[step]).inc();
    }

    /// The text format, with the strategy's own metrics (`own`, as of now) among the
    /// instance's, in name order.
    pub fn render(&self, own: Vec<MetricFamily>) -> String {
        let mut families = self.registry.gather();
        families.extend(own);
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&families, &mut text)
            .expect("text encoding cannot fail");
        String::from_utf8(text).expect("the text format is UTF-8")
    }
}

/// Keeps one counted in a gauge (`seckill_lock_waiters`, `seckill_locks_held`) while it
/// lives. It owns a handle of the gauge, so a buyer on a group's waiting list can carry it.
pub struct Counted(IntGauge);

impl Counted {
    fn in_gauge(gauge: &IntGauge) -> Self {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}
