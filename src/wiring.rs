//! The wiring: from a [`Config`] to the lock that guards the sale.
//!
//! The one place that knows how to build every strategy: which servers each one
//! needs, how to connect to them, and the error that says how to start a server that
//! is not there. [`crate::strategy`] is only the list; this module makes the list real.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::lock::etcd::{EtcdLock, EtcdLockOptions};
use crate::lock::mysql::{MySqlLock, MySqlLockOptions};
use crate::lock::mysql_version::{MySqlVersionLock, MySqlVersionLockOptions};
use crate::lock::parts::master_connection::MasterAddress;
use crate::lock::parts::reentrant::Reentrant;
use crate::lock::parts::release_notices::ReleaseNotices;
use crate::lock::redis::{RedisLock, RedisLockOptions, ReplicaWait};
use crate::lock::redis_degrade::mode::SharedMode;
use crate::lock::redis_degrade::outage::OutageRule;
use crate::lock::redis_degrade::{DegradeOptions, DegradingLock};
use crate::lock::redlock::{Redlock, RedlockOptions};
use crate::lock::zookeeper::{ZooKeeperLock, ZooKeeperLockOptions};
use crate::lock::{local, none, DistributedLock};
use crate::metrics::Metrics;
use crate::orders::OrderWriter;
use crate::sale::keys::Keys;
use crate::sale::segments::Segments;
use crate::sale::sold_out::SoldOutMemory;
use crate::sale::Guarding;
use crate::strategy::Strategy;

/// The options of the `redis` lock, as `config` sets them.
pub fn redis_lock_options(config: &Config) -> anyhow::Result<RedisLockOptions> {
    let wait_for_replicas = (config.lock_redis_wait_replicas > 0).then(|| ReplicaWait {
        replicas: config.lock_redis_wait_replicas,
        timeout: std::time::Duration::from_millis(config.lock_redis_wait_timeout_ms),
    });
    if let Some(wait) = &wait_for_replicas {
        wait.check_against(config.lock_ttl()).map_err(anyhow::Error::msg)?;
    }
    Ok(RedisLockOptions {
        ttl: config.lock_ttl(),
        renew: true,
        wait_for_replicas,
    })
}

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

/// Builds what `config.lock` names. The one place that knows every strategy.
pub async fn build(config: &Config, redis: &::redis::Client) -> anyhow::Result<Guarding> {
    let lock: Arc<dyn DistributedLock> = match config.lock {
        Strategy::None => Arc::new(none::NoLock),
        Strategy::Local => Arc::new(local::LocalLock::default()),
        Strategy::Redis => {
            let options = redis_lock_options(config)?;
            let address = lock_redis_address(config, redis)?;
            let (url, moves) = (config.lock_redis_url(), address.moves());
            let lock = RedisLock::connect_fenced_by(address, redis, options)
                .await
                .with_context(|| match moves {
                    true => format!(
                        "cannot reach the lock's master through its Sentinels (--lock-redis-url / SECKILL_LOCK_REDIS_URL = {url}): \
                         each Sentinel must answer and name a master that answers; `make cluster` starts three"
                    ),
                    false => format!("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL = {url})"),
                })?;
            Arc::new(lock)
        }
        Strategy::RedisDegrade => {
            let options = redis_lock_options(config)?;
            let lock_redis = lock_redis(config, redis).await?;
            let redis_lock = RedisLock::connect(&lock_redis, options).await?;
            let pool = connect_mysql(config).await?;
            let mysql_options = MySqlVersionLockOptions {
                ttl: config.lock_ttl(),
                renew: true,
                permits: config.mysql_permits(),
            };
            // While degraded the lock Redis is down: the MySQL lock's notices go on the stock Redis.
            let notices = release_notices(config, redis).await?;
            let mysql_lock = MySqlVersionLock::new(pool.clone(), mysql_options).with_release_notices(notices);
            let instance = format!("{}-{:016x}", config.instance_name(), rand::random::<u64>());
            let mode_name = degrade_mode_name(config, &lock_redis).await?;
            let shared = SharedMode::open(pool, &mode_name, &instance, config.lock_ttl())
                .await
                .context("cannot open the lock's shared mode in MySQL")?;
            let options = DegradeOptions {
                ttl: config.lock_ttl(),
                outage: OutageRule {
                    after_failures: config.degrade_after_failures,
                    after: std::time::Duration::from_millis(config.degrade_after_ms),
                },
                recover_after: std::time::Duration::from_millis(config.degrade_recover_ms),
            };
            Arc::new(DegradingLock::start(redis_lock, lock_redis, mysql_lock, shared, options).await?)
        }
        Strategy::Redlock => {
            let node_timeout = std::time::Duration::from_millis(config.redlock_node_timeout_ms);
            if node_timeout * 10 > config.lock_ttl() {
                anyhow::bail!(
                    "--redlock-node-timeout-ms ({} ms) must be at most a tenth of --lock-ttl-ms ({} ms): \
                     a master that does not answer must cost a small part of the lease, not most of it",
                    config.redlock_node_timeout_ms,
                    config.lock_ttl_ms
                );
            }
            let options = RedlockOptions {
                ttl: config.lock_ttl(),
                renew: true,
                node_timeout,
            };
            let lock = Redlock::connect(&config.redlock_urls, options).await.with_context(|| {
                format!(
                    "cannot use the Redlock masters {}.\n  Start them with `make services` (ports 6381 to 6385), \
                     or point --redlock-urls / SECKILL_REDLOCK_URLS at at least 3 running Redis masters",
                    config.redlock_urls.join(",")
                )
            })?;
            Arc::new(lock.with_release_notices(release_notices(config, redis).await?))
        }
        Strategy::Etcd => {
            let options = EtcdLockOptions {
                endpoints: config.etcd_endpoints.clone(),
                ttl: config.lock_ttl(),
            };
            Arc::new(EtcdLock::connect(options).await.with_context(|| {
                format!(
                    "cannot reach etcd at {}.\n  Start it with `make services` (or `etcd`), or point \
                     --etcd-endpoints / SECKILL_ETCD_ENDPOINTS at a running server",
                    config.etcd_endpoints.join(",")
                )
            })?)
        }
        Strategy::Zookeeper => {
            let options = ZooKeeperLockOptions {
                connect: config.zk_connect.clone(),
                session_timeout: config.lock_ttl(),
            };
            Arc::new(ZooKeeperLock::connect(options).await.with_context(|| {
                format!(
                    "cannot reach ZooKeeper at {}.\n  Start it with `make services`, or point \
                     --zk-connect / SECKILL_ZK_CONNECT at a running server",
                    config.zk_connect
                )
            })?)
        }
        Strategy::Mysql => {
            let pool = connect_mysql(config).await?;
            refuse_out_of_order_tokens(config, &pool).await?;
            let options = MySqlLockOptions {
                ttl: config.lock_ttl(),
                renew: true,
                permits: config.mysql_permits(),
            };
            let notices = release_notices(config, redis).await?;
            Arc::new(MySqlLock::new(pool, options).with_release_notices(notices))
        }
        Strategy::MysqlVersion => {
            let pool = connect_mysql(config).await?;
            let options = MySqlVersionLockOptions {
                ttl: config.lock_ttl(),
                renew: true,
                permits: config.mysql_permits(),
            };
            let notices = release_notices(config, redis).await?;
            Arc::new(MySqlVersionLock::new(pool, options).with_release_notices(notices))
        }
        Strategy::Atomic => return Ok(Guarding::AtomicScript),
    };
    Ok(Guarding::Lock(Reentrant::new(lock)))
}

/// Release notices on the stock Redis, for the locks whose backend cannot wake a waiter;
/// `None` when `--release-notices false` leaves them polling.
async fn release_notices(config: &Config, redis: &::redis::Client) -> anyhow::Result<Option<ReleaseNotices>> {
    if !config.release_notices {
        return Ok(None);
    }
    let notices = ReleaseNotices::announce_on(redis).await.with_context(|| {
        format!(
            "cannot reach the stock Redis ({}) to announce lock releases on it.\n  Start it with \
             `make services`, or point --redis-url / SECKILL_REDIS_URL at a running server",
            config.redis_url
        )
    })?;
    Ok(Some(notices))
}

/// With `--orders`, the instance's consumer of the orders stream (see [`crate::orders`]),
/// on a Redis connection and a small MySQL pool of its own.
pub async fn order_writer(
    config: &Config,
    stock_redis: &::redis::Client,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Option<OrderWriter>> {
    if !config.orders {
        return Ok(None);
    }
    let redis = crate::store::redis::connection_manager(stock_redis)
        .await
        .with_context(|| format!("connecting the order writer to Redis at {}", config.redis_url))?;
    let mysql = crate::store::mysql::connect_checked(&config.mysql_url, crate::orders::WRITER_CONNECTIONS)
        .await
        .context("--orders writes every order into MySQL")?;
    Ok(Some(OrderWriter::new(
        redis,
        Keys::with_prefix(&config.key_prefix).orders(),
        mysql,
        config.instance_name(),
        Duration::from_millis(config.orders_claim_idle_ms),
        metrics,
    )))
}

/// The pool of the MySQL strategies, after checking that the semaphore leaves
/// connections free for renewals and releases.
async fn connect_mysql(config: &Config) -> anyhow::Result<sqlx::MySqlPool> {
    if config.mysql_permits >= config.mysql_pool {
        anyhow::bail!(
            "--mysql-permits ({}) must be less than --mysql-pool ({}): renewals and releases need \
             connections that waiting buyers cannot take. Lower the permits or raise the pool \
             (--mysql-permits 0 takes the semaphore away)",
            config.mysql_permits,
            config.mysql_pool
        );
    }
    if config.mysql_permits().is_none() {
        tracing::warn!(
            pool = config.mysql_pool,
            "--mysql-permits 0: no semaphore in front of MySQL; every waiter polls it, up to the pool's size"
        );
    }
    crate::store::mysql::connect_checked(&config.mysql_url, config.mysql_pool).await
}

/// Refuses a MySQL server on which the lock table's tokens could come out of the grants'
/// order (src/lock/mysql.rs, step 5): a buyer would then be refused by the stock's fence.
async fn refuse_out_of_order_tokens(config: &Config, pool: &sqlx::MySqlPool) -> anyhow::Result<()> {
    let url = crate::store::mysql::without_password(&config.mysql_url);
    let mode = crate::lock::mysql::autoinc_lock_mode(pool)
        .await
        .with_context(|| format!("reading innodb_autoinc_lock_mode from MySQL at {url}"))?;
    let needed = crate::lock::mysql::NEEDED_AUTOINC_LOCK_MODE;
    if mode != needed {
        anyhow::bail!(
            "--lock mysql needs innodb_autoinc_lock_mode = {needed} on MySQL at {url}, and it is {mode}. \
             In mode {mode} an insert takes its AUTO_INCREMENT id before it finishes, so a later grant can \
             carry a smaller fencing token, and the stock refuses that buyer (src/lock/mysql.rs, step 5).\n  \
             Restart the server with --innodb-autoinc-lock-mode={needed} (`make services` and \
             docker-compose.yml do), or use --lock mysql-version, whose tokens are a version column"
        );
    }
    Ok(())
}

/// The name of `redis-degrade`'s shared mode. The instances that share a lock Redis must
/// share its mode, or each would switch on its own, with epochs of its own, and one could
/// grant in Redis while another grants in MySQL. A URL does not name a server
/// (`localhost` and `127.0.0.1/0` are one), so the server says where it is: the address
/// it accepted our connection on, and the database (`CLIENT INFO`). A proxy in between
/// changes nothing: the address is the server's own.
async fn degrade_mode_name(config: &Config, lock_redis: &::redis::Client) -> anyhow::Result<String> {
    if let Some(name) = &config.degrade_mode_name {
        return Ok(name.clone());
    }
    let mut connection = lock_redis
        .get_multiplexed_async_connection()
        .await
        .context("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL)")?;
    let info: String = ::redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(&mut connection)
        .await
        .context("asking the lock Redis where it is (CLIENT INFO, Redis 6.2 or newer); or name the mode with --degrade-mode-name")?;
    let field = |name: &str| {
        info.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    match (field("laddr"), field("db")) {
        (Some(address), Some(db)) => Ok(format!("redis://{address}/{db}")),
        _ => anyhow::bail!(
            "the lock Redis's CLIENT INFO has no laddr or db ({info}); name the mode with --degrade-mode-name"
        ),
    }
}

/// Where `--lock redis` keeps its lock: the stock's Redis, a server of its own, or the
/// master that Sentinels name.
fn lock_redis_address(config: &Config, stock_redis: &::redis::Client) -> anyhow::Result<MasterAddress> {
    match &config.lock_redis_url {
        None => Ok(stock_redis.into()),
        Some(url) => MasterAddress::parse(url).map_err(|problem| {
            anyhow::anyhow!(
                "{problem}; set --lock-redis-url / SECKILL_LOCK_REDIS_URL to redis://host:port or \
                 redis-sentinel://host:port,host:port#master-name"
            )
        }),
    }
}

/// The Redis `redis-degrade` keeps its lock in: the stock's, or `--lock-redis-url` checked.
async fn lock_redis(config: &Config, stock_redis: &::redis::Client) -> anyhow::Result<::redis::Client> {
    if lock_redis_address(config, stock_redis)?.moves() {
        anyhow::bail!(
            "--lock redis-degrade does not follow Sentinels yet: its fallback decides by the lock Redis's own address. \
             Give it one server (--lock-redis-url redis://host:port), or use --lock redis with redis-sentinel://"
        );
    }
    match &config.lock_redis_url {
        None => Ok(stock_redis.clone()),
        Some(url) => Ok(crate::store::redis::connect_checked(url)
            .await
            .context("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL)")?
            .0),
    }
}
