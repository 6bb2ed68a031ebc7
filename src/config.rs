//! Command line and environment: every option is `--flag` or `SECKILL_*`.
//!
//! The flags that belong to one strategy live beside its lock, as a clap `Args` struct
//! flattened in here (`RedisArgs` in `src/lock/redis/mod.rs`, ...): `--help` lists them in
//! the same place as before. The rest are the sale's and the service's own.

use std::net::IpAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::lock::etcd::EtcdArgs;
use crate::lock::mysql::MySqlArgs;
use crate::lock::parts::setup::Setup;
use crate::lock::redis::RedisArgs;
use crate::lock::redis_degrade::DegradeArgs;
use crate::lock::redlock::RedlockArgs;
use crate::lock::zookeeper::ZooKeeperArgs;
use crate::store::redis_master::MasterAddress;
use crate::strategy::{Fencing, Strategy};

/// The largest stock a sale may start with (`--initial-stock`, `POST /stock/reset`).
pub const MAX_STOCK: i64 = 1_000_000_000;
/// The most segments a stock may be split into (`--stock-segments`).
pub const MAX_SEGMENTS: u32 = 64;
/// `--group-max` when not given: the most buyers one grant sells to (`src/sale/group/mod.rs`).
pub const DEFAULT_GROUP_MAX: u32 = 64;
/// The largest `--group-max` taken: a group's write carries three arguments per buyer.
pub const MOST_IN_A_GROUP: u32 = 1024;
/// `--max-event-streams` when not given: a classroom's pages, each polling Redis four times a second.
pub const DEFAULT_MAX_EVENT_STREAMS: u32 = 16;
/// The largest `--max-event-streams` taken: every stream reads up to 2000 sale records a tick.
pub const MOST_EVENT_STREAMS: u32 = 1024;

#[derive(Debug, Parser)]
#[command(
    name = "seckill",
    version,
    about = "A flash sale guarded by a distributed lock of your choice"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the flash sale over HTTP.
    Serve(Config),
    /// Compare the orders in MySQL with the stock in Redis (after a failover of the stock).
    Reconcile(ReconcileArgs),
    /// List every strategy `--lock` takes, as its own file describes it: one place the
    /// scripts and the docs can ask instead of typing the list again.
    Strategies(StrategiesArgs),
}

/// `seckill strategies`'s options.
#[derive(Clone, Debug, Args)]
pub struct StrategiesArgs {
    /// One JSON object a strategy, in an array, for scripts (`jq -r '.[].name'`).
    #[arg(long)]
    pub json: bool,
}

/// `seckill reconcile`'s options: where the sale is, in Redis and in MySQL.
#[derive(Clone, Debug, Args)]
pub struct ReconcileArgs {
    /// The stock's Redis: `redis://`, `redis-sentinel://...#name` or `redis-cluster://...`.
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// The sale's key prefix (`--key-prefix` of its instances).
    #[arg(long, env = "SECKILL_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
    /// The MySQL the orders are written into.
    #[arg(
        long,
        env = "SECKILL_MYSQL_URL",
        default_value = "mysql://seckill:seckill@127.0.0.1:3306/seckill"
    )]
    pub mysql_url: String,
    /// How long to wait for the orders streams to drain before counting.
    #[arg(long, default_value_t = 30_000)]
    pub wait_ms: u64,
}

/// How one instance of the service runs.
#[derive(Clone, Debug, Args)]
pub struct Config {
    /// Port to listen on.
    #[arg(long, env = "SECKILL_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, env = "SECKILL_BIND", default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Lock strategy that guards the stock.
    #[arg(long, env = "SECKILL_LOCK", value_enum, default_value_t = Strategy::Redis)]
    pub lock: Strategy,
    /// Redis holding the stock (and the lock, for `--lock redis`).
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// What every key of the sale starts with (`stock`, `lucky`, `lock:stock`...), so two
    /// sales can share one Redis; empty: the names the lessons' `redis-cli` commands read.
    /// Up to 64 letters, digits, `-`, `_`, `.`, `:`, `{` or `}`.
    #[arg(long, env = "SECKILL_KEY_PREFIX", default_value = "", value_parser = key_prefix)]
    pub key_prefix: String,
    /// `--lock redis` (and `redis-degrade`): see [`RedisArgs`].
    #[command(flatten)]
    pub redis: RedisArgs,
    /// `--lock redis-degrade`: see [`DegradeArgs`].
    #[command(flatten)]
    pub degrade: DegradeArgs,
    /// `--lock redlock`: see [`RedlockArgs`].
    #[command(flatten)]
    pub redlock: RedlockArgs,
    /// `--lock etcd`: see [`EtcdArgs`].
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// `--lock zookeeper`: see [`ZooKeeperArgs`].
    #[command(flatten)]
    pub zookeeper: ZooKeeperArgs,
    /// MySQL (or MariaDB) for the MySQL lock strategies; migrations are applied at start.
    #[arg(
        long,
        env = "SECKILL_MYSQL_URL",
        default_value = "mysql://seckill:seckill@127.0.0.1:3306/seckill"
    )]
    pub mysql_url: String,
    /// The MySQL locks (`mysql`, `mysql-version`, `redis-degrade`): see [`MySqlArgs`].
    #[command(flatten)]
    pub mysql: MySqlArgs,
    /// Lease of a distributed lock, in milliseconds; renewed every third of it while held.
    #[arg(long, env = "SECKILL_LOCK_TTL_MS", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(30..=600_000))]
    pub lock_ttl_ms: u64,
    /// How long a buyer waits for the lock before getting a 503, in milliseconds.
    #[arg(long, env = "SECKILL_ACQUIRE_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub acquire_timeout_ms: u64,
    /// Stock put on sale when Redis has none yet, and by `POST /stock/reset` without a body.
    #[arg(long, env = "SECKILL_INITIAL_STOCK", default_value_t = 300,
          value_parser = clap::value_parser!(i64).range(0..=MAX_STOCK))]
    pub initial_stock: i64,
    /// Into how many segments a reset splits the stock, each behind a lock key of its
    /// own (`src/sale/segments.rs`); every instance of one sale must say the same. Not for
    /// `--lock atomic`, which takes no lock.
    #[arg(long, env = "SECKILL_STOCK_SEGMENTS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_SEGMENTS as i64))]
    pub stock_segments: u32,
    /// Whether an instance that has seen every segment of the stock empty answers "sold
    /// out" without a lock, after one read of the sale's name (`src/sale/sold_out.rs`).
    /// Off by default: a stock changed by hand in Redis, without a reset, is not seen.
    #[arg(long, env = "SECKILL_SOLD_OUT_FLAG", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub sold_out_flag: bool,
    /// Whether the sale refuses a second unit to a buyer (`?buyer=` on
    /// `/stock/reduce`, which it then requires), in the script that takes the unit
    /// (`src/sale/buyers.rs`). Every instance of one sale must say the same.
    #[arg(long, env = "SECKILL_ONE_PER_BUYER", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub one_per_buyer: bool,
    /// Replicas that must acknowledge each sale (`WAIT`) before its buyer is told "sold";
    /// 0: none. On a stock Redis that Sentinels fail over, a sale the master acknowledged
    /// and no replica had is lost with it. A sale fewer replicas acknowledged in time is
    /// answered `504 sale_outcome_unknown`.
    #[arg(long, env = "SECKILL_STOCK_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub stock_wait_replicas: u32,
    /// How long a sale waits for those replicas, in milliseconds.
    #[arg(long, env = "SECKILL_STOCK_WAIT_TIMEOUT_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub stock_wait_timeout_ms: u64,
    /// Whether each unit sold also becomes an order row in MySQL (`seckill_orders`): the
    /// script that takes the unit appends it to the Redis Stream `stock:orders`, and a
    /// consumer group of the instances writes it (`src/orders/mod.rs`). Needs --mysql-url.
    #[arg(long, env = "SECKILL_ORDERS", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub orders: bool,
    /// With --orders: an order another instance read but left unwritten this long (it
    /// died, say) is taken over (`XAUTOCLAIM`), in milliseconds.
    #[arg(long, env = "SECKILL_ORDERS_CLAIM_IDLE_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub orders_claim_idle_ms: u64,
    /// Whether the buyers of this instance queue in process first, so that only the head
    /// of that queue asks the distributed lock (see `src/sale/mod.rs`). `false` lets every
    /// buyer ask the backend, to measure what the queue saves.
    #[arg(long, env = "SECKILL_LOCAL_QUEUE", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub local_queue: bool,
    /// Whether a release hands the lock to the next buyer in the local queue in its own
    /// request, where the backend can (not the queue locks; see `src/sale/local_queue.rs`).
    /// `false` releases and lets that buyer acquire, to measure what the hand-over saves.
    #[arg(long, env = "SECKILL_HAND_OVER", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub hand_over: bool,
    /// Whether a grant sells to every buyer then waiting in this instance's local queue
    /// for the same lock, up to --group-max: one fenced read, one fenced write of all
    /// their units, one release (`src/sale/group/mod.rs`). Off, every grant sells one unit.
    #[arg(long, env = "SECKILL_GROUP_COMMIT", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub group_commit: bool,
    /// With --group-commit: the most buyers one grant sells to.
    #[arg(long, env = "SECKILL_GROUP_MAX", default_value_t = DEFAULT_GROUP_MAX,
          value_parser = clap::value_parser!(u32).range(1..=MOST_IN_A_GROUP as i64))]
    pub group_max: u32,
    /// Whether the locks whose backend cannot wake a waiter (`mysql`, `mysql-version`,
    /// `redlock`) announce each release on the stock Redis, so that a waiter of another
    /// instance tries at once instead of at its next poll (`src/lock/parts/release_notices.rs`).
    /// `false` leaves them polling, to measure what the notices save.
    #[arg(long, env = "SECKILL_RELEASE_NOTICES", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub release_notices: bool,
    /// Whether the stock checks the lock's fencing token on every read and write.
    /// `off` exists for the lesson that shows two holders selling one unit.
    #[arg(long, env = "SECKILL_FENCING", value_enum, default_value_t = Fencing::On)]
    pub fencing: Fencing,
    /// Requests served at once; more are refused at once with 503 `overloaded`.
    #[arg(long, env = "SECKILL_MAX_IN_FLIGHT", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_in_flight: u32,
    /// Dashboard event streams (`GET /events`) open at once; more are refused at once
    /// with 503 `overloaded`. A stream lasts as long as its page, so it is not counted as
    /// a request in flight (see `src/http/dashboard.rs`).
    #[arg(long, env = "SECKILL_MAX_EVENT_STREAMS", default_value_t = DEFAULT_MAX_EVENT_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..=MOST_EVENT_STREAMS as i64))]
    pub max_event_streams: u32,
    /// After Ctrl-C or SIGTERM, how long requests in flight may still run, in milliseconds.
    #[arg(long, env = "SECKILL_SHUTDOWN_GRACE_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub shutdown_grace_ms: u64,
    /// Bearer token that `POST /stock/reset` requires. Without one, resets are allowed
    /// only while the service listens on loopback, from a client that names it by a
    /// loopback name or an --allowed-host (see `src/http/admin.rs`).
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", value_parser = non_empty_token)]
    pub admin_token: Option<String>,
    /// Without --admin-token, a reset on loopback must name this machine in its `Host`:
    /// `localhost`, `127.x.x.x`, `[::1]`, or a name given here (repeat the flag, or
    /// separate names with commas), so that a page whose name an attacker rebound to
    /// this machine cannot reset (see `src/http/admin.rs`).
    #[arg(long = "allowed-host", env = "SECKILL_ALLOWED_HOST", value_name = "NAME", value_delimiter = ',',
          value_parser = allowed_host)]
    pub allowed_hosts: Vec<String>,
    /// For the chaos lessons only: every sale waits this long between its lease check
    /// and its write, so that a pause of the process lands in that window.
    #[arg(long, env = "SECKILL_CHAOS_PAUSE_BEFORE_WRITE_MS",
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub chaos_pause_before_write_ms: Option<u64>,
    /// Name stamped on sale records; default `seckill-<port>`.
    #[arg(long, env = "SECKILL_INSTANCE")]
    pub instance: Option<String>,
}

impl Config {
    pub fn instance_name(&self) -> String {
        self.instance
            .clone()
            .unwrap_or_else(|| format!("seckill-{}", self.port))
    }

    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }

    /// The Redis the lock lives in: `--lock-redis-url`, or the stock's.
    pub fn lock_redis_url(&self) -> &str {
        self.redis.lock_redis_url.as_deref().unwrap_or(&self.redis_url)
    }

    pub fn lock_ttl(&self) -> Duration {
        Duration::from_millis(self.lock_ttl_ms)
    }

    /// What every strategy's `build` reads beside its own flags.
    pub fn setup(&self, stock_redis: &MasterAddress) -> Setup {
        Setup {
            ttl: self.lock_ttl(),
            stock_redis: stock_redis.clone(),
            stock_redis_url: self.redis_url.clone(),
            release_notices: self.release_notices,
            mysql_url: self.mysql_url.clone(),
            instance: self.instance_name(),
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// The defaults, as if no flag or variable were given (for tests and embedding).
    pub fn defaults() -> Self {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            config: Config,
        }
        Defaults::parse_from(["seckill"]).config
    }
}

/// An admin token must be worth guessing: at least 16 characters, no white space.
fn non_empty_token(token: &str) -> Result<String, String> {
    if token.len() < 16 || token.chars().any(char::is_whitespace) {
        return Err(
            "the admin token must be at least 16 characters without spaces, e.g. `openssl rand -hex 16`".into(),
        );
    }
    Ok(token.to_owned())
}

/// A key prefix becomes part of Redis keys, etcd keys, ZooKeeper node names and MySQL
/// lock names, so it keeps to characters all four take as they are (no `/`).
pub fn key_prefix(prefix: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:{}".contains(c);
    if prefix.len() > 64 || !prefix.chars().all(allowed) {
        return Err(format!(
            "the key prefix must be up to 64 letters, digits, '-', '_', '.', ':', '{{' or '}}', got {prefix:?}"
        ));
    }
    Ok(prefix.to_owned())
}

/// An `--allowed-host` value as `src/http/admin.rs` compares it with a `Host` header: a
/// host name in lower case, or an address as Rust writes it. A port or a scheme is refused.
pub fn allowed_host(name: &str) -> Result<String, String> {
    let bare = name
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(name);
    if let Ok(address) = bare.parse::<IpAddr>() {
        return Ok(address.to_string());
    }
    let fits = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    if name.is_empty() || name.len() > 253 || !name.chars().all(fits) {
        return Err(format!(
            "an allowed host is a name or an address as the browser's address bar shows it, without scheme or port \
             (e.g. `--allowed-host seckill.lan`), got {name:?}"
        ));
    }
    Ok(name.to_ascii_lowercase())
}
