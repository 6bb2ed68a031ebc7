//! Past one machine: the stock on a Redis Cluster beside the same run on one Redis, and a
//! model of what the cluster would sell with each shard on a machine of its own.
//!
//! On this machine the cluster's six nodes share the cores with the instances, the lock's
//! server and the load generator, so a run on it measures what the cluster costs a sale (a
//! client that routes each script to its slot's master, a replica fed by every write), not
//! what it scales to. The scale is a model, and its inputs are the one-Redis run's figures:
//!
//! ```text
//! sales/s at S shards = min( segments x one segment's bound,              the locks
//!                            shards holding a segment x 1e6 / stock µs,    the stock's shards
//!                            1e6 / lock server µs )                        the lock's server
//! segments = S x the segments a shard holds in the measured cluster (1 for a sale in one piece)
//! ```
//!
//! - **One segment's bound**: one lock's backend bound at the run's round trips; a segment
//!   is a lock of its own, and N of them sell at once (`+segments-N`).
//! - **µs per sale**: a server's CPU time per unit sold under sustained load, from `/proc`
//!   (one core busy for a second is 1,000,000 µs). A shard on a core of its own sells at
//!   most 1,000,000 / its µs per sale.
//! - **The lock's server** is one process here (the lock Redis); nothing in the model
//!   spreads it.
//!
//! What the model leaves out, because these runs do not measure it: the walk across empty
//! segments near the sell-out (the table "After the sell-out"), the orders writer (one per
//! segment's stream), and the network between machines, whose round trips would raise
//! every bound's denominator.

use super::StrategyBench;

/// The variant that puts the stock on the cluster of `make cluster`.
pub const ON_THE_CLUSTER: &str = "+stock-cluster";

/// The shard counts the model is read at: this run's, and beyond.
pub const MODELLED_SHARDS: [u32; 4] = [1, 3, 10, 30];

/// A run with its stock on the cluster, and the same run on one Redis.
pub struct OnTwoStocks<'a> {
    pub cluster: &'a StrategyBench,
    pub one_redis: &'a StrategyBench,
}

/// Each run on the cluster with its twin on one Redis: the same label without
/// [`ON_THE_CLUSTER`]. A run without a twin in the report is left out.
pub fn on_two_stocks(benches: &[StrategyBench]) -> Vec<OnTwoStocks<'_>> {
    benches
        .iter()
        .filter(|bench| bench.stock_shards.is_some())
        .filter_map(|cluster| {
            let twin = cluster.label.replace(ON_THE_CLUSTER, "");
            let one_redis = benches.iter().find(|bench| bench.label == twin)?;
            Some(OnTwoStocks { cluster, one_redis })
        })
        .collect()
}

/// The stock's CPU time per unit sold under sustained load, in µs: the one Redis, or every
/// node of the cluster, replicas included.
pub fn stock_us_per_sale(bench: &StrategyBench) -> Option<f64> {
    us_per_sale(bench, |name| name == "redis" || name.starts_with("stock-cluster-"))
}

/// The lock Redis's CPU time per unit sold, in µs, when the lock lives apart from the stock
/// (a run without a lock there leaves that server idle: `None`).
pub fn lock_server_us_per_sale(bench: &StrategyBench) -> Option<f64> {
    us_per_sale(bench, |name| name == "lock-redis").filter(|&us| us > 0.0)
}

fn us_per_sale(bench: &StrategyBench, is_server: impl Fn(&str) -> bool) -> Option<f64> {
    let mut servers = bench
        .sustained_cpu
        .processes
        .iter()
        .filter(|process| is_server(&process.name));
    let first = servers.next()?;
    let cores = first.cores + servers.map(|process| process.cores).sum::<f64>();
    let sales = bench.sustained.sales_per_second;
    (sales > 0.0).then(|| cores / sales * 1_000_000.0)
}

/// What stops the modelled sale first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Locks,
    StockShards,
    LockServer,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::Locks => "the locks",
            Limit::StockShards => "the stock's shards",
            Limit::LockServer => "the lock's server",
        }
    }
}

/// The model's inputs, read from one run on one Redis and the cluster it was set against.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// One lock's backend bound at the run's round trips; `None` without a lock.
    pub segment_bound: Option<f64>,
    /// How many segments each master held in the measured cluster; 0 for a sale in one piece.
    pub segments_per_shard: u32,
    pub stock_us_per_sale: f64,
    /// `None` when the lock has no server of its own (or no lock is taken).
    pub lock_server_us_per_sale: Option<f64>,
}

impl Model {
    /// The inputs from a pair of runs; `None` if the one-Redis run's stock CPU was not read.
    pub fn of(pair: &OnTwoStocks) -> Option<Model> {
        let segments = pair.one_redis.stock_segments;
        let shards = pair.cluster.stock_shards.unwrap_or(1).max(1);
        Some(Model {
            segment_bound: pair
                .one_redis
                .backend_bound_sales_per_second
                .map(|bound| bound / f64::from(segments)),
            segments_per_shard: if segments > 1 { segments.div_ceil(shards) } else { 0 },
            stock_us_per_sale: stock_us_per_sale(pair.one_redis)?,
            lock_server_us_per_sale: lock_server_us_per_sale(pair.one_redis),
        })
    }

    /// Sales per second at `shards` shards, and what stops it there.
    pub fn at(&self, shards: u32) -> (f64, Limit) {
        let segments = match self.segments_per_shard {
            0 => 1,
            per_shard => shards * per_shard,
        };
        let shards_used = shards.min(segments);
        let mut limits = vec![(
            f64::from(shards_used) * 1_000_000.0 / self.stock_us_per_sale,
            Limit::StockShards,
        )];
        if let Some(bound) = self.segment_bound {
            limits.push((f64::from(segments) * bound, Limit::Locks));
        }
        if let Some(us) = self.lock_server_us_per_sale {
            limits.push((1_000_000.0 / us, Limit::LockServer));
        }
        limits
            .into_iter()
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("the stock is always a limit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segmented() -> Model {
        Model {
            segment_bound: Some(2_000.0),
            segments_per_shard: 2,
            stock_us_per_sale: 100.0,
            lock_server_us_per_sale: Some(20.0),
        }
    }

    #[test]
    fn few_shards_are_held_back_by_their_locks_and_many_by_the_one_lock_server() {
        let model = segmented();
        // 1 shard: 2 segments x 2,000 = 4,000 beside the shard's 10,000 and the lock server's 50,000.
        assert_eq!(model.at(1), (4_000.0, Limit::Locks));
        // 10 shards: 20 segments x 2,000 = 40,000 against 100,000 and 50,000.
        assert_eq!(model.at(10), (40_000.0, Limit::Locks));
        // 30 shards: 120,000 and 300,000 against the one lock server's 50,000.
        assert_eq!(model.at(30), (50_000.0, Limit::LockServer));
    }

    #[test]
    fn a_sale_in_one_piece_stays_on_one_shard_however_many_there_are() {
        let model = Model {
            segment_bound: None,
            segments_per_shard: 0,
            stock_us_per_sale: 50.0,
            lock_server_us_per_sale: None,
        };
        assert_eq!(model.at(1), (20_000.0, Limit::StockShards));
        assert_eq!(model.at(30), (20_000.0, Limit::StockShards));
    }

    #[test]
    fn a_costly_stock_script_makes_the_shards_the_limit() {
        let model = Model {
            stock_us_per_sale: 1_000.0,
            ..segmented()
        };
        assert_eq!(model.at(3), (3_000.0, Limit::StockShards));
    }
}
