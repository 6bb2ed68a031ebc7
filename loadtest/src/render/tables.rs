//! The tables that compare: several verdict runs (`loadtest --compare`), the strategies
//! of a benchmark (`bench report`, the README), and the locks alone (`lockbench`).
//! Each is built once as a [`Table`] and written as Markdown or HTML by the caller.

use crate::bench::bound::PAUSE_UNDER_LOAD;
use crate::bench::bound::{Access, Backend, RoundTrip};
use crate::bench::breakdown::{mean_ms, StepTime};
use crate::bench::lockbench::Run;
use crate::bench::scale::{self, Model, MODELLED_SHARDS};
use crate::bench::{runs_over_segments, Spread, StrategyBench, SERIAL_TARGET_RATIO, TARGET_RATIO};
use crate::verdict::{Report, Verdict};

use super::document::{Align, Block, Table};
use super::per_sale_label;

use Align::{Left, Right};

/// What a missing figure reads as (a baseline has no bound).
const MISSING: &str = "—";

/// A run's verdict in a table or a chart: the bad ones in capitals.
pub fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Held => "held",
        Verdict::Oversold => "OVERSOLD",
        Verdict::Lost => "LOST",
        Verdict::WrongAnswer => "WRONG ANSWER",
    }
}

/// Several verdict runs, one row each.
pub fn comparison(reports: &[Report]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("verdict", Left),
        ("expected", Left),
        ("sold", Right),
        ("stock left", Right),
        ("units sold twice", Right),
        ("errors", Right),
        ("req/s", Right),
        ("p50 ms", Right),
        ("p99 ms", Right),
        ("stmts/sale", Right),
        ("conflicts/sale", Right),
    ]);
    for r in reports {
        let expected = if r.expected_to_oversell { "oversells" } else { "holds" };
        let (statements, conflicts) = match &r.database {
            Some(cost) => (
                per_sale_label(cost.statements_per_sale()),
                per_sale_label(cost.conflicts_per_sale()),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        table.push(vec![
            r.label(),
            verdict_word(r.verdict).to_owned(),
            expected.to_owned(),
            r.lucky.to_string(),
            r.stock_left.to_string(),
            r.units_sold_twice.to_string(),
            r.error_count().to_string(),
            format!("{:.0}", r.requests_per_second),
            format!("{:.1}", r.p50_ms),
            format!("{:.1}", r.p99_ms),
            statements,
            conflicts,
        ]);
    }
    table
}

/// The README's tables of a benchmark: the crowd runs, then the rates against the
/// bounds, then the ordering found and what each strategy ran out of; then what the
/// runs past one lock add, when there are some.
pub fn bench(benches: &[StrategyBench]) -> Vec<Block> {
    let mut blocks = one_lock(benches);
    blocks.extend(past_one_lock(benches));
    blocks
}

/// Every run as one lock guarding one stock: the crowd, the rates against the bounds,
/// the same under load, where the time goes, the servers' requests, the ordering.
fn one_lock(benches: &[StrategyBench]) -> Vec<Block> {
    let runs = benches.first().map_or(0, |bench| bench.crowd.runs);
    let connections = benches.first().map_or(0, |bench| bench.sustained.connections);
    let windows = benches.first().map_or(0, |bench| bench.sustained_windows);
    vec![
        Block::Text(format!(
            "The crowd: 500 buyers, 300 units, two instances; median (min–max) of {runs} runs."
        )),
        Block::Table(crowd(benches)),
        Block::Text(format!(
            "Sales per second against the bound: serial is one keep-alive client alone; sustained is \
             {connections} keep-alive connections on both instances, stock that does not run out, median (min–max) \
             of {windows} windows. A bound is one sale per path, a path's round trips x each backend's \
             round-trip time measured in the same run: the protocol bound takes the lock's own path, the \
             backend bound the fewest round trips any correct lock on that backend needs, the serial bound \
             that for one client alone (acquire, read, write, release). A run that waits for a replica \
             (`+stock-wait`) times the stock's write with its `WAIT`, in one pipeline, as the sale sends it. \
             The goals: sustained at least {TARGET_RATIO} of the backend bound, serial at least {SERIAL_TARGET_RATIO} of the serial bound."
        )),
        Block::Table(rates(benches)),
        Block::Text(format!(
            "The same round trips under sustained load: the probe above, on a thread of its own, a round of one \
             request of each kind to each backend and then a pause of {} ms, through one more sustained window \
             that counts in no other figure; only the requests sent while that window was timed are kept \
             (`probe_under_load` in `loadtest/src/bench/bound.rs`). Under load a server answers slower (a write \
             waits behind the lock's own writes for the log, and every process shares the machine's cores). \
             The backend bound at these round trips is what the servers allowed under that load, against the \
             sales per second of that window.",
            PAUSE_UNDER_LOAD.as_millis()
        )),
        Block::Table(under_load(benches)),
        Block::Text(
            "Where the time goes under sustained load, means in ms (`loadtest/src/bench/breakdown.rs`): each step \
             of a sale as the service timed it (`seckill_sale_step_seconds` in /metrics), then, from the grant log, \
             the hold (grant to release sent) and the hand-over gap (release sent to the next grant, on whichever \
             instance), split by whether the next holder was on the same instance or the other. Under contention \
             hold + gap is one sale of the critical path, about 1000 / sales per second (with the stock in N \
             segments, each segment's lock hands over its own grants: N x 1000 / sales per second)."
                .to_owned(),
        ),
        Block::Table(time_spent(benches)),
        Block::Text(
            "One client alone, where a sale's time goes, means in µs (`loadtest/src/bench/turnaround.rs`): the \
             client's time per sale (1,000,000 / serial sales per second) against the HTTP turnaround (`GET \
             /healthz` on the same kind of connection, no backend) and the steps the service timed. The service \
             answers before it releases, so the release runs during the turnaround and the next sale waits only \
             for what is left of it (queued). The rest is the sale's own glue in the service."
                .to_owned(),
        ),
        Block::Table(serial_time(benches)),
        Block::Text(
            "What the servers answered per unit sold under sustained load, busiest first, waiters and \
             renewals included, from each server's own counters (`loadtest/src/bench/server_requests.rs`): \
             Redis `INFO commandstats`, etcd's gRPC messages, MySQL's `Com_*` statements, ZooKeeper's packets. \
             Redis counts a Lua script as one `evalsha`, and each command the script calls once more: most of \
             the stock Redis's `get` and `hset` are the sale's own scripts at work, not requests of their own."
                .to_owned(),
        ),
        Block::Table(server_requests(benches)),
        Block::Text(ordering(benches)),
    ]
}

/// The runs that go past one lock, each beside its twin: over segments, after the
/// sell-out, in groups, on the stock cluster. Only the parts the report has runs for.
fn past_one_lock(benches: &[StrategyBench]) -> Vec<Block> {
    let connections = benches.first().map_or(0, |bench| bench.sustained.connections);
    let mut blocks = Vec::new();
    if !runs_over_segments(benches).is_empty() {
        blocks.push(Block::Text(
            "Past one lock: the stock split into N segments (`--stock-segments N`, `src/sale/segments.rs`), each \
             behind a lock key of its own, so N holders sell at once. The bound is N times one lock's backend \
             bound at the round trips of that run: what segments could give if nothing else ran out. The \
             speed-up is against the same strategy with the stock in one piece, in the same report."
                .to_owned(),
        ));
        blocks.push(Block::Table(segments(benches)));
    }
    if benches.iter().any(|bench| bench.sold_out_window.is_some()) {
        blocks.push(Block::Text(format!(
            "After the sell-out: the same {connections} connections against a sale with nothing left, the tail \
             of a flash sale, where every answer is \"sold out\" (`measure_sold_out` in \
             `loadtest/src/bench/sustained.rs`). Without the sold-out flag each of those buyers reads the stock \
             under a lock, every segment of it; a run ending in `+sold-out-flag` answers from memory once every \
             segment is known empty, after one read of the sale's name, which every reset draws anew \
             (`src/sale/sold_out.rs`)."
        )));
        blocks.push(Block::Table(after_the_sell_out(benches)));
    }
    if benches.iter().any(|bench| bench.sustained_groups.is_some()) {
        blocks.push(Block::Text(
            "Past one sale per grant: with `+group-commit` a grant sells to every buyer then waiting in its \
             instance's local queue for the same lock (`src/sale/group/mod.rs`): one read, one write of all their \
             units, one release. Units per grant are the buyers per grant in `seckill_group_size` over the \
             sustained windows: the mean, and the histogram's bucket that holds the median and the 99th \
             percentile (at most that many). The one-unit bound is the backend bound above, one unit per \
             grant; times the mean units per grant it is the same chain of round trips re-stated per unit. \
             The speed-up is against the same run without groups, in this report."
                .to_owned(),
        ));
        blocks.push(Block::Table(grouped(benches)));
    }
    if !scale::on_two_stocks(benches).is_empty() {
        blocks.push(Block::Text(
            "Past one machine: the stock on the Redis Cluster of `make cluster` (`+stock-cluster`: three masters \
             with a replica each, every segment's keys under a hash tag of its own, `src/store/redis_cluster.rs`) \
             beside the same run on one Redis, in this report. All six nodes share this machine's cores with \
             everything else, so the rows measure what the cluster costs a sale, not how far it scales: the stock's \
             CPU per sale adds up every node, replicas included."
                .to_owned(),
        ));
        blocks.push(Block::Table(on_two_stocks(benches)));
        blocks.push(Block::Text(
            "A model of the scale, with each shard on a machine of its own, from the one-Redis run's figures \
             (`loadtest/src/bench/scale.rs`): sales/s = min(segments x one segment's bound, shards holding a \
             segment x 1,000,000 / the stock's µs per sale, 1,000,000 / the lock server's µs per sale), with as \
             many segments per shard as the measured cluster held. It leaves out the walk across empty segments \
             near the sell-out, the orders writer and the network between machines."
                .to_owned(),
        ));
        blocks.push(Block::Table(scale_model(benches)));
    }
    blocks
}

/// Each run with `+group-commit` beside the same run without it.
fn grouped(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("run", Left),
        ("sustained sales/s", Right),
        ("without groups", Right),
        ("speed-up", Right),
        ("units per grant: mean", Right),
        ("median, at most", Right),
        ("p99, at most", Right),
        ("one-unit backend bound", Right),
        ("x mean units per grant", Right),
        ("sustained / that", Right),
        ("what ran out under sustained load", Left),
    ]);
    for bench in benches {
        let Some(groups) = &bench.sustained_groups else {
            continue;
        };
        let alone = bench.label.replace("+group-commit", "");
        let without = benches.iter().find(|other| other.label == alone);
        let sustained = bench.sustained.sales_per_second;
        let per_grant_bound = bench.backend_bound_sales_per_second.map(|bound| bound * groups.mean);
        table.push(vec![
            bench.label.clone(),
            spread(&bench.sustained_spread, 0),
            without.map_or_else(|| MISSING.to_owned(), |other| spread(&other.sustained_spread, 0)),
            without.map_or_else(
                || MISSING.to_owned(),
                |other| format!("{:.2}x", sustained / other.sustained.sales_per_second),
            ),
            format!("{:.1}", groups.mean),
            format!("{:.0}", groups.median_at_most),
            format!("{:.0}", groups.p99_at_most),
            rate(bench.backend_bound_sales_per_second),
            rate(per_grant_bound),
            ratio(per_grant_bound.map(|bound| sustained / bound), None),
            bench.sustained_cpu.saturated.clone(),
        ]);
    }
    table
}

/// Each run on the cluster beside the same run on one Redis.
fn on_two_stocks(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("run on the cluster", Left),
        ("masters", Right),
        ("stock segments", Right),
        ("sustained sales/s, one Redis", Right),
        ("sustained sales/s, cluster", Right),
        ("cluster / one Redis", Right),
        ("stock CPU µs per sale, one Redis", Right),
        ("stock CPU µs per sale, cluster", Right),
        ("what ran out on the cluster", Left),
    ]);
    for pair in scale::on_two_stocks(benches) {
        let (cluster, one_redis) = (pair.cluster, pair.one_redis);
        table.push(vec![
            cluster.label.clone(),
            cluster
                .stock_shards
                .map_or_else(|| MISSING.to_owned(), |shards| shards.to_string()),
            cluster.stock_segments.to_string(),
            spread(&one_redis.sustained_spread, 0),
            spread(&cluster.sustained_spread, 0),
            format!(
                "{:.2}",
                cluster.sustained.sales_per_second / one_redis.sustained.sales_per_second
            ),
            micros(scale::stock_us_per_sale(one_redis)),
            micros(scale::stock_us_per_sale(cluster)),
            cluster.sustained_cpu.saturated.clone(),
        ]);
    }
    table
}

/// The model of [`scale`], read at a few shard counts for each one-Redis run.
fn scale_model(benches: &[StrategyBench]) -> Table {
    let mut columns = vec![
        ("run on one Redis", Left),
        ("segments a shard holds", Right),
        ("one segment's bound", Right),
        ("stock µs per sale", Right),
        ("lock server µs per sale", Right),
    ];
    let headers: Vec<String> = MODELLED_SHARDS
        .iter()
        .map(|shards| {
            format!(
                "{shards} shard{}: sales/s (what stops it)",
                if *shards == 1 { "" } else { "s" }
            )
        })
        .collect();
    columns.extend(headers.iter().map(|header| (header.as_str(), Right)));
    let mut table = Table::new(&columns);
    for pair in scale::on_two_stocks(benches) {
        let Some(model) = Model::of(&pair) else {
            continue;
        };
        let mut row = vec![
            pair.one_redis.label.clone(),
            match model.segments_per_shard {
                0 => "the sale in one piece".to_owned(),
                per_shard => per_shard.to_string(),
            },
            rate(model.segment_bound),
            micros(Some(model.stock_us_per_sale)),
            micros(model.lock_server_us_per_sale),
        ];
        row.extend(MODELLED_SHARDS.iter().map(|&shards| {
            let (sales, limit) = model.at(shards);
            format!("{sales:.0} ({})", limit.name())
        }));
        table.push(row);
    }
    table
}

/// CPU time per sale in whole µs, or [`MISSING`].
fn micros(us: Option<f64>) -> String {
    us.map_or_else(|| MISSING.to_owned(), |us| format!("{us:.0}"))
}

/// How fast each lock's instances answer the buyers who come after the last unit.
fn after_the_sell_out(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("answers/s after the sell-out", Right),
        ("p50 ms", Right),
        ("p99 ms", Right),
        ("sustained sales/s, for scale", Right),
    ]);
    for bench in benches {
        let Some(window) = &bench.sold_out_window else {
            continue;
        };
        table.push(vec![
            bench.label.clone(),
            format!("{:.0}", window.answers_per_second),
            format!("{:.2}", window.p50_ms),
            format!("{:.2}", window.p99_ms),
            format!("{:.0}", bench.sustained.sales_per_second),
        ]);
    }
    table
}

/// Each strategy run over several stock segments: its rate against N locks' bound.
fn segments(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("stock segments", Right),
        ("sustained sales/s", Right),
        ("speed-up over one segment", Right),
        ("N x one lock's backend bound", Right),
        ("sustained / that bound", Right),
        ("what ran out under sustained load", Left),
    ]);
    let runs = runs_over_segments(benches);
    for bench in &runs {
        let one_segment = runs
            .iter()
            .find(|other| other.strategy == bench.strategy && other.stock_segments == 1)
            .map(|other| other.sustained.sales_per_second);
        let speed_up = one_segment.map(|one| bench.sustained.sales_per_second / one);
        table.push(vec![
            bench.label.clone(),
            bench.stock_segments.to_string(),
            spread(&bench.sustained_spread, 0),
            speed_up.map_or_else(|| MISSING.to_owned(), |speed_up| format!("{speed_up:.2}x")),
            rate(bench.backend_bound_sales_per_second),
            ratio(bench.sustained_backend_ratio(), None),
            bench.sustained_cpu.saturated.clone(),
        ]);
    }
    table
}

/// The busiest requests per sale of each strategy's servers.
fn server_requests(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[("strategy", Left), ("requests per unit sold", Left)]);
    for bench in benches.iter().filter(|bench| !bench.sustained_requests.is_empty()) {
        let busiest: Vec<String> = bench
            .sustained_requests
            .iter()
            .take(8)
            .map(|rate| format!("{} {} {:.2}", rate.server, rate.request, rate.per_sale))
            .collect();
        table.push(vec![bench.label.clone(), busiest.join(", ")]);
    }
    table
}

/// One client alone: the time its sales spent in the lock's and the stock's round trips,
/// against the whole of a sale as the client saw it; the rest is HTTP and the service.
fn serial_round_trips(bench: &StrategyBench) -> String {
    let steps: Option<Vec<f64>> = ["lock", "read", "write", "release"]
        .into_iter()
        .map(|name| mean_ms(&bench.serial_steps, name))
        .collect();
    match steps {
        Some(steps) if bench.serial.sales_per_second > 0.0 => format!(
            "{:.2} / {:.2}",
            steps.iter().sum::<f64>(),
            1000.0 / bench.serial.sales_per_second
        ),
        _ => MISSING.to_owned(),
    }
}

/// One client alone: the client's time per sale, split into the HTTP turnaround and
/// the steps the service timed; for the strategies whose steps `/metrics` shows.
fn serial_time(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("per sale", Right),
        ("HTTP turnaround", Right),
        ("queued", Right),
        ("lock", Right),
        ("read", Right),
        ("write", Right),
        ("rest", Right),
        ("release, during the turnaround", Right),
        ("serial / serial bound", Right),
    ]);
    for bench in benches {
        let Some(turnaround_ms) = bench.serial_turnaround_ms else {
            continue; // results written before the turnaround was timed
        };
        let Some(split) = SerialSplit::of(bench.serial.sales_per_second, turnaround_ms, &bench.serial_steps) else {
            continue; // a peer without /metrics, or atomic: one script, no steps
        };
        let mut row = vec![bench.label.clone()];
        row.extend(split.cells());
        row.push(ratio(bench.serial_ratio(), Some(SERIAL_TARGET_RATIO)));
        table.push(row);
    }
    table
}

/// One serial sale as the client saw it, in µs: turnaround + queued + lock + read +
/// write + rest. The release runs during the turnaround, so it is shown, not added.
struct SerialSplit {
    per_sale_us: f64,
    turnaround_us: f64,
    /// queued, lock, read, write: the steps the client waits for.
    waited_us: [Option<f64>; 4],
    release_us: Option<f64>,
}

impl SerialSplit {
    const WAITED: [&'static str; 4] = ["queued", "lock", "read", "write"];

    fn of(sales_per_second: f64, turnaround_ms: f64, steps: &[StepTime]) -> Option<Self> {
        let step_us = |name| mean_ms(steps, name).map(|ms| ms * 1000.0);
        step_us("read")?; // atomic runs one script, and a peer has no /metrics: no steps to split
        (sales_per_second > 0.0).then(|| SerialSplit {
            per_sale_us: 1e6 / sales_per_second,
            turnaround_us: turnaround_ms * 1000.0,
            waited_us: Self::WAITED.map(step_us),
            release_us: step_us("release"),
        })
    }

    /// What the client's time holds beyond the turnaround and the steps: the sale's glue.
    fn rest_us(&self) -> f64 {
        self.per_sale_us - self.turnaround_us - self.waited_us.iter().flatten().sum::<f64>()
    }

    fn cells(&self) -> Vec<String> {
        let us = |value: Option<f64>| value.map_or_else(|| MISSING.to_owned(), |value| format!("{value:.0}"));
        let mut cells = vec![us(Some(self.per_sale_us)), us(Some(self.turnaround_us))];
        cells.extend(self.waited_us.map(us));
        cells.push(us(Some(self.rest_us())));
        cells.push(us(self.release_us));
        cells
    }
}

/// Each strategy's steps and hand-over, for those that hold a lock.
fn time_spent(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("queued", Right),
        ("lock", Right),
        ("read", Right),
        ("write", Right),
        ("release", Right),
        ("hold", Right),
        ("hand-over gap (median)", Right),
        ("to the other instance: share, gap", Right),
        ("same instance: gap", Right),
        ("hold + gap / 1000 per sale", Right),
        ("serial: lock + read + write + release / 1000 per sale", Right),
    ]);
    for bench in benches {
        let Some(hand_over) = &bench.sustained.hand_over else {
            continue;
        };
        if bench.critical_path.is_none() {
            continue; // nothing serializes the baselines' sales
        }
        let step = |name: &str| {
            mean_ms(&bench.sustained_steps, name).map_or_else(|| MISSING.to_owned(), |mean| format!("{mean:.2}"))
        };
        // Each segment's lock hands over its own grants: one sale of its path is N of all.
        let segments = bench.stock_segments.max(1);
        let handovers = hand_over.hand_overs.max(1);
        let per_sale_ms = 1000.0 * f64::from(segments) / bench.sustained.sales_per_second.max(f64::MIN_POSITIVE);
        table.push(vec![
            bench.label.clone(),
            step("queued"),
            step("lock"),
            step("read"),
            step("write"),
            step("release"),
            format!("{:.2}", hand_over.mean_hold_ms),
            format!("{:.2} ({:.2})", hand_over.mean_gap_ms, hand_over.median_gap_ms),
            format!(
                "{:.0}%, {:.2}",
                100.0 * hand_over.across_instances as f64 / handovers as f64,
                hand_over.mean_gap_across_ms
            ),
            format!("{:.2}", hand_over.mean_gap_within_ms),
            format!(
                "{:.2} / {:.2}",
                hand_over.mean_hold_ms + hand_over.mean_gap_ms,
                per_sale_ms
            ),
            serial_round_trips(bench),
        ]);
    }
    table
}

fn spread(s: &Spread, digits: usize) -> String {
    format!("{:.digits$} ({:.digits$}–{:.digits$})", s.median, s.min, s.max)
}

/// The crowd runs of each strategy.
fn crowd(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("runs as promised", Right),
        ("units sold", Right),
        ("req/s", Right),
        ("p50 ms", Right),
        ("p95 ms", Right),
        ("p99 ms", Right),
        ("lock wait p50 / p99 ms", Right),
    ]);
    for bench in benches {
        let c = &bench.crowd;
        table.push(vec![
            bench.label.clone(),
            format!("{}/{}", c.runs_passed, c.runs),
            spread(&c.units_sold, 0),
            spread(&c.requests_per_second, 0),
            spread(&c.p50_ms, 1),
            spread(&c.p95_ms, 1),
            spread(&c.p99_ms, 1),
            format!("{:.1} / {:.1}", c.lock_wait_p50_ms, c.lock_wait_p99_ms),
        ]);
    }
    table
}

/// Each strategy's rates against its bounds, and what ran out.
fn rates(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("serial sales/s", Right),
        ("sustained sales/s", Right),
        ("RTT µs (read / write)", Left),
        ("round trips: lock's path / backend's minimum", Right),
        ("protocol bound", Right),
        ("backend bound", Right),
        ("serial bound", Right),
        ("sustained / backend bound", Right),
        ("sustained / protocol bound", Right),
        ("serial / serial bound", Right),
        ("what ran out under sustained load", Left),
    ]);
    for bench in benches {
        let rtts: Vec<String> = backends_timed(&bench.round_trips)
            .map(|backend| format!("{} {}", backend.name(), read_and_write_us(&bench.round_trips, backend)))
            .collect();
        let oversold = if bench.sustained.verdict == Verdict::Oversold {
            " (oversold)"
        } else {
            ""
        };
        let trips = bench
            .critical_path_round_trips()
            .zip(bench.backend_path_round_trips())
            .map(|(lock, backend)| format!("{lock} / {backend}"));
        table.push(vec![
            bench.label.clone(),
            format!("{:.0}", bench.serial.sales_per_second),
            format!("{}{oversold}", spread(&bench.sustained_spread, 0)),
            rtts.join(", "),
            trips.unwrap_or_else(|| MISSING.to_owned()),
            rate(bench.bound_sales_per_second),
            rate(bench.backend_bound_sales_per_second),
            rate(bench.serial_bound_sales_per_second),
            // The goal is one lock's; over N segments the ratio says how far they scale.
            ratio(
                bench.sustained_backend_ratio(),
                (bench.stock_segments == 1).then_some(TARGET_RATIO),
            ),
            ratio(bench.sustained_ratio(), None),
            ratio(bench.serial_ratio(), Some(SERIAL_TARGET_RATIO)),
            bench.sustained_cpu.saturated.clone(),
        ]);
    }
    table
}

/// The backends timed, in the order they were.
fn backends_timed(round_trips: &[RoundTrip]) -> impl Iterator<Item = Backend> + '_ {
    round_trips
        .iter()
        .filter(|rtt| rtt.access == Access::Read)
        .map(|rtt| rtt.backend)
}

/// A backend's median read and write round trips in µs, "read / write".
fn read_and_write_us(round_trips: &[RoundTrip], backend: Backend) -> String {
    let median = |access| {
        round_trips
            .iter()
            .find(|rtt| rtt.backend == backend && rtt.access == access)
            .map_or(0.0, |rtt| rtt.median_us)
    };
    format!("{:.0} / {:.0}", median(Access::Read), median(Access::Write))
}

/// Each lock's round trips quiet and under load, and its rate against the backend bound at the latter.
fn under_load(benches: &[StrategyBench]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("RTT µs, quiet → under load (read / write)", Left),
        ("backend bound", Right),
        ("backend bound under load", Right),
        ("sales/s in that window", Right),
        ("that window / backend bound under load", Right),
    ]);
    for bench in benches {
        let (Some(bound_under_load), Some(window)) =
            (bench.backend_bound_under_load_sales_per_second, &bench.probed_window)
        else {
            continue; // a baseline, or results from before the probes under load
        };
        let rtts: Vec<String> = backends_timed(&bench.round_trips_under_load)
            .map(|backend| {
                format!(
                    "{} {} → {}",
                    backend.name(),
                    read_and_write_us(&bench.round_trips, backend),
                    read_and_write_us(&bench.round_trips_under_load, backend)
                )
            })
            .collect();
        table.push(vec![
            bench.label.clone(),
            rtts.join(", "),
            rate(bench.backend_bound_sales_per_second),
            rate(Some(bound_under_load)),
            rate(Some(window.sales_per_second)),
            ratio(bench.sustained_backend_ratio_under_load(), None),
        ]);
    }
    table
}

/// A rate in whole sales per second, or [`MISSING`].
fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| MISSING.to_owned(), |rate| format!("{rate:.0}"))
}

/// A ratio, said against its goal when it has one, or [`MISSING`].
fn ratio(ratio: Option<f64>, goal: Option<f64>) -> String {
    ratio.map_or_else(|| MISSING.to_owned(), |ratio| ratio_against_goal(ratio, goal))
}

/// The safe strategies fastest first, and whether the original articles' claim holds.
pub fn ordering(benches: &[StrategyBench]) -> String {
    let mut safe: Vec<&StrategyBench> = benches.iter().filter(|bench| !bench.expected_to_oversell).collect();
    safe.sort_by(|a, b| b.sustained.sales_per_second.total_cmp(&a.sustained.sales_per_second));
    let ranked: Vec<String> = safe
        .iter()
        .map(|bench| format!("{} ({:.0})", bench.label, bench.sustained.sales_per_second))
        .collect();
    let mut out = format!("Ordering by sustained sales/s: {}\n", ranked.join(" > "));
    let rate = |label: &str| {
        benches
            .iter()
            .find(|bench| bench.label == label)
            .map(|b| b.sustained.sales_per_second)
    };
    let database = ["mysql", "mysql-version"]
        .iter()
        .filter_map(|label| rate(label))
        .reduce(f64::max);
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

/// The header of the lock benchmark's table.
pub fn lockbench_table() -> Table {
    Table::new(&[
        ("strategy", Left),
        ("contenders", Right),
        ("keys", Left),
        ("pairs/s", Right),
        ("median pair ms", Right),
        ("p99 pair ms", Right),
        ("errors", Right),
    ])
}

/// One run of the lock benchmark as a row of [`lockbench_table`]. `lockbench` prints
/// each as it is measured; `bench report` puts them all in the report.
pub fn lockbench_row(run: &Run) -> Vec<String> {
    vec![
        run.strategy.clone(),
        run.contenders.to_string(),
        run.keys.clone(),
        format!("{:.0}", run.pairs_per_second),
        format!("{:.2}", run.median_pair_ms),
        format!("{:.2}", run.p99_pair_ms),
        run.errors.to_string(),
    ]
}

/// Every run of the lock benchmark.
pub fn lockbench(runs: &[Run]) -> Table {
    let mut table = lockbench_table();
    runs.iter().for_each(|run| table.push(lockbench_row(run)));
    table
}

/// Each peer's runs on one key beside ours on the same backend, contenders alike:
/// pairs per second and the median pair, and ours over the recipe's.
pub fn against_recipes(runs: &[Run]) -> Table {
    let mut table = Table::new(&[
        ("recipe", Left),
        ("ours", Left),
        ("contenders", Right),
        ("recipe pairs/s", Right),
        ("ours pairs/s", Right),
        ("ours / recipe", Right),
        ("recipe median / p99 ms", Right),
        ("ours median / p99 ms", Right),
    ]);
    for peer in runs.iter().filter(|run| run.keys == "one") {
        let Some(ours_name) = &peer.recipe_of else { continue };
        let ours = runs.iter().find(|run| {
            run.recipe_of.is_none()
                && &run.strategy == ours_name
                && run.contenders == peer.contenders
                && run.keys == peer.keys
        });
        let Some(ours) = ours else { continue };
        table.push(vec![
            peer.strategy.clone(),
            ours.strategy.clone(),
            peer.contenders.to_string(),
            format!("{:.0}", peer.pairs_per_second),
            format!("{:.0}", ours.pairs_per_second),
            format!(
                "{:.2}",
                ours.pairs_per_second / peer.pairs_per_second.max(f64::MIN_POSITIVE)
            ),
            format!("{:.2} / {:.2}", peer.median_pair_ms, peer.p99_pair_ms),
            format!("{:.2} / {:.2}", ours.median_pair_ms, ours.p99_pair_ms),
        ]);
    }
    table
}

/// A ratio to its goal, as the bench table shows it: two decimals, and "below" when it
/// misses. A miss that two decimals would round up to the goal (0.695 against 0.7) gets a
/// third decimal, so the table never says "0.70 (below 0.7)".
fn ratio_against_goal(ratio: f64, goal: Option<f64>) -> String {
    match goal {
        Some(goal) if ratio < goal => {
            let shown = format!("{ratio:.2}");
            let shown = if shown.parse::<f64>().is_ok_and(|rounded| rounded >= goal) {
                format!("{ratio:.3}")
            } else {
                shown
            };
            format!("{shown} (below {goal})")
        }
        _ => format!("{ratio:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::document::markdown;
    use crate::verdict::report::tests::report;

    #[test]
    fn the_comparison_has_a_row_per_run_under_its_header() {
        let table = comparison(&[report("none", Verdict::Oversold), report("redis", Verdict::Held)]).markdown();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[0].starts_with("| strategy | verdict | expected | sold |"),
            "{table}"
        );
        assert!(lines[1].starts_with("| --- | --- | --- | ---: |"), "{table}");
        assert_eq!(
            lines[2],
            "| none | OVERSOLD | oversells | 3 | 0 | 0 | 0 | 5 | 1.0 | 1.0 | - | - |"
        );
    }

    #[test]
    fn a_serial_sale_is_the_turnaround_the_waited_steps_and_the_rest() {
        let step = |step: &str, mean_ms| StepTime {
            step: step.into(),
            count: 100.0,
            mean_ms,
        };
        let steps = [
            step("queued", 0.010),
            step("lock", 0.090),
            step("read", 0.100),
            step("write", 0.100),
            step("release", 0.110),
        ];
        // 2000 sales/s: 500 µs a sale, of which 100 the turnaround and 300 the steps.
        let split = SerialSplit::of(2000.0, 0.100, &steps).expect("a split");
        assert_eq!(split.cells(), ["500", "100", "10", "90", "100", "100", "100", "110"]);
        assert!(
            SerialSplit::of(2000.0, 0.100, &[]).is_none(),
            "no steps (atomic, a peer): no split"
        );
    }

    #[test]
    fn a_lockbench_run_is_one_row() {
        let run = Run {
            strategy: "redis".into(),
            contenders: 16,
            keys: "one each".into(),
            pairs: 100,
            errors: 0,
            pairs_per_second: 4321.4,
            median_pair_ms: 0.123,
            p99_pair_ms: 1.5,
            first_error: None,
            recipe_of: None,
        };
        assert_eq!(
            markdown(&[Block::Table(lockbench(&[run]))]),
            "| strategy | contenders | keys | pairs/s | median pair ms | p99 pair ms | errors |\n\
             | --- | ---: | --- | ---: | ---: | ---: | ---: |\n\
             | redis | 16 | one each | 4321 | 0.12 | 1.50 | 0 |\n"
        );
    }

    #[test]
    fn each_recipe_is_set_beside_our_lock_at_the_same_contenders() {
        let run = |strategy: &str, recipe_of: Option<&str>, contenders, pairs_per_second| Run {
            strategy: strategy.into(),
            contenders,
            keys: "one".into(),
            pairs: 10,
            errors: 0,
            pairs_per_second,
            median_pair_ms: 1.0,
            p99_pair_ms: 2.0,
            first_error: None,
            recipe_of: recipe_of.map(Into::into),
        };
        let runs = [
            run("zookeeper", None, 1, 900.0),
            run("zookeeper", None, 16, 1000.0),
            run("curator InterProcessMutex", Some("zookeeper"), 16, 500.0),
            run("redis-py Lock", Some("redis"), 16, 100.0), // no redis run: no row
        ];
        let table = markdown(&[Block::Table(against_recipes(&runs))]);
        assert!(
            table.contains("| curator InterProcessMutex | zookeeper | 16 | 500 | 1000 | 2.00 |"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 3, "one row, the 16-contender one:\n{table}");
    }

    #[test]
    fn a_ratio_that_misses_its_goal_never_reads_as_the_goal() {
        assert_eq!(ratio_against_goal(0.6951, Some(0.7)), "0.695 (below 0.7)");
        assert_eq!(ratio_against_goal(0.699, Some(0.7)), "0.699 (below 0.7)");
        assert_eq!(ratio_against_goal(0.57, Some(0.7)), "0.57 (below 0.7)");
        assert_eq!(ratio_against_goal(0.84, Some(0.7)), "0.84");
        assert_eq!(ratio_against_goal(0.7, Some(0.7)), "0.70");
        assert_eq!(ratio_against_goal(0.42, None), "0.42");
    }
}
