//! The benchmark's runs as one lock guarding one stock: the crowd, the rates against
//! the bounds, where the time goes, the servers' requests, the ordering. The first
//! half of the README's tables; the runs past one lock have a file of their own.

use crate::bench::bound::PAUSE_UNDER_LOAD;
use crate::bench::bound::{Access, Backend, RoundTrip};
use crate::bench::breakdown::{mean_ms, StepTime};
use crate::bench::{StrategyBench, SERIAL_TARGET_RATIO, TARGET_RATIO};
use crate::render::document::{Align, Block, Table};
use crate::verdict::Verdict;

use super::{rate, ratio, spread, MISSING};

use Align::{Left, Right};

/// Every run as one lock guarding one stock: how fast it sold, then where the time went.
pub(super) fn one_lock(benches: &[StrategyBench]) -> Vec<Block> {
    let mut blocks = how_fast(benches);
    blocks.extend(where_the_time_goes(benches));
    blocks
}

/// The crowd, the rates against the bounds, and the same under load.
fn how_fast(benches: &[StrategyBench]) -> Vec<Block> {
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
    ]
}

/// Where the time goes under load and for one client alone, what the servers answered,
/// and the ordering found.
fn where_the_time_goes(benches: &[StrategyBench]) -> Vec<Block> {
    vec![
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
