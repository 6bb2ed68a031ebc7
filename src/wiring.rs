//! The wiring: from a [`Config`] to the lock that guards the sale, and to the parts
//! of the sale that depend on the strategy (segments, the sold-out flag, the orders).
//!
//! Each strategy builds itself: `build` beside its lock reads its own flags (a clap
//! `Args` struct flattened into the config) and connects to its servers, with the
//! error that says how to start one that is not there. [`build`] here only picks which.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::lock::parts::reentrant::Reentrant;
use crate::lock::{etcd, local, mysql, mysql_version, none, redis, redis_degrade, redlock, zookeeper, DistributedLock};
use crate::metrics::Metrics;
use crate::orders::OrderWriter;
use crate::sale::keys::Keys;
use crate::sale::segments::Segments;
use crate::sale::sold_out::SoldOutMemory;
use crate::sale::Guarding;
use crate::store::redis_master::{MasterAddress, MasterConnection, ReplicaWait};
use crate::strategy::Strategy;

/// The segments of the stock (`--stock-segments`), or why this strategy cannot split it.
pub fn segments(config: &Config) -> anyhow::Result<Segments> {
    let segments = Segments::new(config.stock_segments).map_err(anyhow::Error::msg)?;
    if segments != Segments::ONE && config.lock == Strategy::Atomic {
        anyhow::bail!(
            "--stock-segments {} splits the stock between locks, and `--lock atomic` takes none: \
             its one script already sells without a lock. Leave --stock-segments at 1, or pick a lock strategy",
            config.stock_segments
        );
    }
    Ok(segments)
}

/// The sale's keys, laid out for the stock's Redis (see [`crate::sale::keys`]), or why
/// the prefix cannot name them on a Redis Cluster.
pub fn stock_keys(config: &Config, stock_redis: &MasterAddress) -> anyhow::Result<Keys> {
    let keys = Keys::with_prefix(&config.key_prefix).on_cluster(stock_redis.is_cluster());
    if !keys.is_on_cluster() {
        return Ok(keys);
    }
    if config.key_prefix.contains(['{', '}']) {
        anyhow::bail!(
            "--key-prefix `{}` holds a brace, and on a Redis Cluster the sale puts each segment's keys under a \
             hash tag of its own (`{{segment:2}}`): a brace in the prefix would become the tag. Leave the braces out",
            config.key_prefix
        );
    }
    Ok(keys)
}

/// `--group-commit`'s most buyers per grant (`--group-max`), or why this run cannot group:
/// a group is the buyers waiting in an instance's local queue (see [`crate::sale::group`]).
pub fn group_max(config: &Config) -> anyhow::Result<Option<u32>> {
    if !config.group_commit {
        return Ok(None);
    }
    if config.lock == Strategy::Atomic {
        anyhow::bail!(
            "--group-commit sells to a group under one lock grant, and `--lock atomic` takes no lock: its one script \
             already sells each unit in one round trip. Leave --group-commit off, or pick a lock strategy"
        );
    }
    if !config.lock.takes_a_local_queue() {
        anyhow::bail!(
            "--group-commit gathers the buyers waiting in an instance's local queue, and `--lock {}` has none: a \
             baseline shows its race one buyer at a time. Leave --group-commit off with the baselines",
            config.lock
        );
    }
    if !config.local_queue {
        anyhow::bail!(
            "--group-commit gathers the buyers waiting in the local queue, and --local-queue false takes the queue \
             away. Leave --local-queue on (its default), or --group-commit off"
        );
    }
    Ok(Some(config.group_max))
}

/// The sold-out flag (`--sold-out-flag`), or why this strategy has no use for it.
pub fn sold_out_memory(config: &Config, segments: Segments) -> anyhow::Result<Option<SoldOutMemory>> {
    if !config.sold_out_flag {
        return Ok(None);
    }
    if config.lock.expected_to_oversell() {
        anyhow::bail!(
            "--sold-out-flag trusts that a segment read empty stays empty, and under `--lock {}` a late write \
             can put a unit back. Leave --sold-out-flag off with the baselines",
            config.lock
        );
    }
    if config.lock == Strategy::Atomic {
        anyhow::bail!(
            "--sold-out-flag saves a sold-out buyer the lock grants of its walk through the segments; \
             `--lock atomic` takes no lock, and its one script answers \"sold out\" as fast as the flag would. \
             Leave --sold-out-flag off, or pick a lock strategy"
        );
    }
    Ok(Some(SoldOutMemory::new(segments)))
}

/// With `--stock-wait-replicas`, the `WAIT` every sale takes before it counts.
pub fn stock_replica_wait(config: &Config) -> Option<ReplicaWait> {
    (config.stock_wait_replicas > 0).then(|| ReplicaWait {
        replicas: config.stock_wait_replicas,
        timeout: Duration::from_millis(config.stock_wait_timeout_ms),
    })
}

/// Builds what `config.lock` names: each strategy builds itself from its own flags
/// (`build` beside its lock); this only picks which one.
pub async fn build(config: &Config, stock_redis: &MasterAddress) -> anyhow::Result<Guarding> {
    let setup = config.setup(stock_redis);
    let lock: Arc<dyn DistributedLock> = match config.lock {
        Strategy::None => Arc::new(none::NoLock),
        Strategy::Local => Arc::new(local::LocalLock::default()),
        Strategy::Redis => Arc::new(redis::build(&config.redis, &setup).await?),
        Strategy::RedisDegrade => {
            Arc::new(redis_degrade::build(&config.degrade, &config.redis, &config.mysql, &setup).await?)
        }
        Strategy::Redlock => Arc::new(redlock::build(&config.redlock, &setup).await?),
        Strategy::Etcd => Arc::new(etcd::build(&config.etcd, &setup).await?),
        Strategy::Zookeeper => Arc::new(zookeeper::build(&config.zookeeper, &setup).await?),
        Strategy::Mysql => Arc::new(mysql::build(&config.mysql, &setup).await?),
        Strategy::MysqlVersion => Arc::new(mysql_version::build(&config.mysql, &setup).await?),
        Strategy::Atomic => return Ok(Guarding::AtomicScript),
    };
    Ok(Guarding::Lock(Reentrant::new(lock)))
}

/// With `--orders`, the instance's consumers of the orders streams (see [`crate::orders`]):
/// one per stream (one, or one per segment on a cluster), each on a Redis connection of
/// its own, sharing a small MySQL pool.
pub async fn order_writers(
    config: &Config,
    stock_redis: &MasterAddress,
    keys: &Keys,
    segments: Segments,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Option<Vec<OrderWriter>>> {
    if !config.orders {
        return Ok(None);
    }
    let mysql = crate::store::mysql::connect_checked(&config.mysql_url, crate::orders::WRITER_CONNECTIONS)
        .await
        .context("--orders writes every order into MySQL")?;
    let mut writers = Vec::new();
    for group in keys.groups(segments) {
        let redis = MasterConnection::connect(stock_redis)
            .await
            .with_context(|| format!("connecting the order writer to Redis at {}", config.redis_url))?;
        writers.push(
            OrderWriter::new(
                redis,
                keys.orders_of(group),
                mysql.clone(),
                config.instance_name(),
                Duration::from_millis(config.orders_claim_idle_ms),
                metrics.clone(),
            )
            .with_replica_wait(stock_replica_wait(config)),
        );
    }
    Ok(Some(writers))
}
