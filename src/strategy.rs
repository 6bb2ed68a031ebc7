//! Which strategy guards the stock: the closed list, and the one `match` that builds it.
//!
//! Every strategy but one is a lock around the read-check-write (see [`crate::lock`]).
//! `atomic` is not a lock: it moves the whole check-and-decrement into one Redis
//! script (see [`crate::stock`]), which is why it is the speed ceiling.

use std::sync::Arc;

use anyhow::Context;

use crate::config::Config;
use crate::lock::degrade::{DegradeOptions, DegradingLock};
use crate::lock::etcd::{EtcdLock, EtcdLockOptions};
use crate::lock::lock_mode::SharedMode;
use crate::lock::mysql::{MySqlLock, MySqlLockOptions};
use crate::lock::mysql_version::{MySqlVersionLock, MySqlVersionLockOptions};
use crate::lock::redis::{RedisLock, RedisLockOptions};
use crate::lock::redlock::{Redlock, RedlockOptions};
use crate::lock::reentrant::Reentrant;
use crate::lock::zookeeper::{ZooKeeperLock, ZooKeeperLockOptions};
use crate::lock::{local, none, DistributedLock};

/// Every strategy the service can run with; `--lock <strategy>` picks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// No lock: the read-check-write races and the sale oversells.
    None,
    /// An in-process mutex: correct inside one instance, oversells across two.
    Local,
    /// Redis `SET NX PX` with an owner token, owner-checked release and renewal.
    Redis,
    /// Redis, switching every instance to the MySQL version lock while Redis fails, and back.
    RedisDegrade,
    /// Redlock: `SET NX PX` on a majority of independent Redis masters, with validity.
    Redlock,
    /// etcd: keys under a kept-alive lease, granted in revision order.
    Etcd,
    /// ZooKeeper: ephemeral sequential nodes, each waiter watching its predecessor.
    Zookeeper,
    /// MySQL: a row per held lock, unique by name, with owner, hold count and expiry.
    Mysql,
    /// MySQL, optimistic: a compare-and-set on a version column, one row per lock name.
    MysqlVersion,
    /// No lock: one Lua script does the whole check-and-decrement inside Redis.
    Atomic,
}

impl Strategy {
    /// The name used on the command line, in responses and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Local => "local",
            Strategy::Redis => "redis",
            Strategy::RedisDegrade => "redis-degrade",
            Strategy::Redlock => "redlock",
            Strategy::Etcd => "etcd",
            Strategy::Zookeeper => "zookeeper",
            Strategy::Mysql => "mysql",
            Strategy::MysqlVersion => "mysql-version",
            Strategy::Atomic => "atomic",
        }
    }

    /// Whether the buyers of an instance line up in process before this strategy's lock
    /// (`src/sale.rs`, step 0). Not for the baselines, whose lesson is the race; and not
    /// for `redis-degrade`, which decides that Redis is down by counting failed attempts
    /// in a row: behind a line only one attempt at a time can fail, each after Redis's
    /// response timeout, and a frozen Redis would be noticed three times later.
    pub fn takes_a_local_queue(self) -> bool {
        !self.expected_to_oversell() && self != Strategy::RedisDegrade
    }

    /// Whether two instances running this strategy are expected to oversell.
    pub fn expected_to_oversell(self) -> bool {
        matches!(self, Strategy::None | Strategy::Local)
    }

    /// Whether its grants carry fencing tokens the stock can check.
    pub fn issues_fencing_tokens(self) -> bool {
        matches!(
            self,
            Strategy::Redis
                | Strategy::RedisDegrade
                | Strategy::Etcd
                | Strategy::Zookeeper
                | Strategy::Mysql
                | Strategy::MysqlVersion
        )
    }

    /// Whether the sale is fenced under `fencing`: only with tokens, and only if asked.
    pub fn fencing(self, fencing: Fencing) -> FencingStatus {
        match (self, fencing) {
            (Strategy::Atomic, _) => FencingStatus::NotNeeded,
            (strategy, _) if !strategy.issues_fencing_tokens() => FencingStatus::NoTokens,
            (_, Fencing::On) => FencingStatus::On,
            (_, Fencing::Off) => FencingStatus::Off,
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `--fencing on|off`: whether the stock checks the lock's fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fencing {
    On,
    Off,
}

/// How a running strategy is fenced, as `/healthz` and the load test report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FencingStatus {
    /// Reads and writes of the stock check the grant's token.
    On,
    /// The strategy has tokens, but `--fencing off` asked not to check them (the lesson).
    Off,
    /// The strategy issues no tokens (`none`, `local`): the sale runs unfenced.
    NoTokens,
    /// `atomic` takes no lock, so there is nothing to fence.
    NotNeeded,
}

impl FencingStatus {
    /// As `/healthz` spells it.
    pub fn name(self) -> &'static str {
        match self {
            FencingStatus::On => "on",
            FencingStatus::Off => "off",
            FencingStatus::NoTokens => "no_tokens",
            FencingStatus::NotNeeded => "not_needed",
        }
    }

    pub fn is_on(self) -> bool {
        self == FencingStatus::On
    }
}

/// What guards the stock: a lock around a read-modify-write, or one atomic script.
#[derive(Clone)]
pub enum Guarding {
    Lock(Reentrant),
    AtomicScript,
}

impl Guarding {
    /// Gives back every lock still held, at shutdown.
    pub async fn shutdown(&self) {
        if let Guarding::Lock(lock) = self {
            if let Err(error) = lock.shutdown().await {
                tracing::warn!(%error, "the lock did not shut down cleanly; its leases will run out on their own");
            }
        }
    }
}

/// The options of the `redis` lock, as `config` sets them.
pub fn redis_lock_options(config: &Config) -> RedisLockOptions {
    RedisLockOptions { ttl: config.lock_ttl(), renew: true }
}

/// Builds what `config.lock` names. The one place that knows every strategy.
pub async fn build(config: &Config, redis: &::redis::Client) -> anyhow::Result<Guarding> {
    let lock: Arc<dyn DistributedLock> = match config.lock {
        Strategy::None => Arc::new(none::NoLock),
        Strategy::Local => Arc::new(local::LocalLock::default()),
        Strategy::Redis => {
            let lock_redis = lock_redis(config, redis).await?;
            Arc::new(RedisLock::connect(&lock_redis, redis_lock_options(config)).await?)
        }
        Strategy::RedisDegrade => {
            let lock_redis = lock_redis(config, redis).await?;
            let redis_lock = RedisLock::connect(&lock_redis, redis_lock_options(config)).await?;
            let pool = connect_mysql(config).await?;
            let mysql_options =
                MySqlVersionLockOptions { ttl: config.lock_ttl(), renew: true, permits: config.mysql_permits() };
            let mysql_lock = MySqlVersionLock::new(pool.clone(), mysql_options);
            let instance = format!("{}-{:016x}", config.instance_name(), rand::random::<u64>());
            // Instances that share a lock Redis share its mode (the password never lands in MySQL).
            let mode_name = crate::mysql_store::without_password(config.lock_redis_url());
            let shared = SharedMode::open(pool, &mode_name, &instance, config.lock_ttl())
                .await
                .context("cannot open the lock's shared mode in MySQL")?;
            let options = DegradeOptions {
                ttl: config.lock_ttl(),
                failures_to_degrade: config.degrade_after_failures,
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
            let options = RedlockOptions { ttl: config.lock_ttl(), renew: true, node_timeout };
            Arc::new(Redlock::connect(&config.redlock_urls, options).await.with_context(|| {
                format!(
                    "cannot use the Redlock masters {}.\n  Start them with `make services` (ports 6381 to 6385), \
                     or point --redlock-urls / SECKILL_REDLOCK_URLS at at least 3 running Redis masters",
                    config.redlock_urls.join(",")
                )
            })?)
        }
        Strategy::Etcd => {
            let options = EtcdLockOptions { endpoints: config.etcd_endpoints.clone(), ttl: config.lock_ttl() };
            Arc::new(EtcdLock::connect(options).await.with_context(|| {
                format!(
                    "cannot reach etcd at {}.\n  Start it with `make services` (or `etcd`), or point \
                     --etcd-endpoints / SECKILL_ETCD_ENDPOINTS at a running server",
                    config.etcd_endpoints.join(",")
                )
            })?)
        }
        Strategy::Zookeeper => {
            let options =
                ZooKeeperLockOptions { connect: config.zk_connect.clone(), session_timeout: config.lock_ttl() };
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
            let options = MySqlLockOptions { ttl: config.lock_ttl(), renew: true, permits: config.mysql_permits() };
            Arc::new(MySqlLock::new(pool, options))
        }
        Strategy::MysqlVersion => {
            let pool = connect_mysql(config).await?;
            let options =
                MySqlVersionLockOptions { ttl: config.lock_ttl(), renew: true, permits: config.mysql_permits() };
            Arc::new(MySqlVersionLock::new(pool, options))
        }
        Strategy::Atomic => return Ok(Guarding::AtomicScript),
    };
    Ok(Guarding::Lock(Reentrant::new(lock)))
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
    crate::mysql_store::connect_checked(&config.mysql_url, config.mysql_pool).await
}

/// The Redis the lock lives in: the stock's `client`, or `--lock-redis-url` checked.
async fn lock_redis(config: &Config, stock_redis: &::redis::Client) -> anyhow::Result<::redis::Client> {
    match &config.lock_redis_url {
        None => Ok(stock_redis.clone()),
        Some(url) => Ok(crate::redis_store::connect_checked(url)
            .await
            .context("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL)")?
            .0),
    }
}
