//! The benchmark's runs that go past one lock, each beside its twin: the stock over
//! segments, the tail after the sell-out, group commit, the stock on a cluster and the
//! model of its scale. Apart from [`super::one_lock`]: a report shows them only when it has such runs.

use crate::bench::scale::{self, Model, MODELLED_SHARDS};
use crate::bench::{runs_over_segments, StrategyBench};
use crate::render::document::{Align, Block, Table};

use super::{rate, ratio, spread, MISSING};

use Align::{Left, Right};

/// The runs that go past one lock, each beside its twin: over segments, after the
/// sell-out, in groups, on the stock cluster. Only the parts the report has runs for.
pub(super) fn past_one_lock(benches: &[StrategyBench]) -> Vec<Block> {
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
