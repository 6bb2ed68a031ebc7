//! Redis that degrades to the MySQL version lock when it fails, and comes back.
//!
//! The original articles: "if Redis dies, MySQL takes over; so that MySQL does not die too, a semaphore of 10
//! permits in front of the MySQL optimistic lock; when Redis recovers, go back to Redis." Built here as a wrapper
//! around two locks, not a branch inside either ([`DegradingLock`]).
//!
//! ## The danger
//! Switching is easy; switching without two holders is not. A Redis holder granted just before Redis died may
//! still be in its critical section when the first MySQL grant is made. Two instances notice a failure at
//! different moments: one grants from MySQL while the other still grants from Redis. On the way back, one
//! instance takes the Redis lock while the other still grants the MySQL one.
//!
//! ## How it works
//! ### The protocol
//! Every instance that uses the same lock Redis shares one **mode** in MySQL ([`mode`]): `redis` or `mysql`,
//! with an **epoch** that grows at every switch.
//! 1. **Grant only under a mode lease.** Each instance renews a lease on the current epoch every `ttl / 3`
//!    (`renew_mode_lease`). It grants in the epoch's mode only while that lease is trusted, and every grant's
//!    own lease is bounded by it (`bound_by_epoch`).
//! 2. **Switch by moving the epoch.** An instance whose attempts find Redis down switches the mode to `mysql`
//!    (`redis_failed`); one whose probes find it back switches it to `redis` (`probe_while_degraded`). A switch
//!    writes `grants_from`: the moment the last lease on the old epoch ends ([`mode::SharedMode::switch`]).
//! 3. **Wait out the old epoch.** No instance grants in the new epoch before `grants_from`. Buyers wait (within
//!    their acquire timeout) for about one TTL (the `wait` in [`DegradingLock::acquire`]).
//! 4. **Fence with the epoch.** A grant's fencing token is `(epoch, the inner lock's token)`, so the stock refuses
//!    any holder of an older epoch once a newer one has read: the safety net, should the timing assumptions
//!    below ever fail.
//! 5. **A hand-over is a grant too.** A release that hands the key to the next buyer of the local queue does so
//!    only while the grant's epoch allows grants, and binds the handed grant as in steps 1 and 4 (`EpochGrant`).
//!
//! ```text
//!  Redis dies        A switches (epoch 1 -> 2)          grants_from
//!      |                 |                                  |
//!  A: ==redis grant==|   |  (A's lease on epoch 1 ends) ....|==mysql grant==
//!  B: ====redis grant (B still believes epoch 1)===|        |
//!                        |  B's renewal reads epoch 2: its  |
//!                        |  epoch-1 holders are told "lost" |==mysql grant==
//!      ---------------------------------------------------------------> time
//!                        |<--- at most one TTL ------------>|
//! ```
//!
//! ### Why no two holders overlap
//! Let a switch from epoch `e` commit at time `s` (all times on the database's clock).
//! - Every renewal of epoch `e` read the mode row with a shared lock, and the switch holds an exclusive one: all
//!   committed before `s`, so `grants_from >= every expires_at of epoch e` ([`mode::SharedMode::switch`]).
//! - An instance stops trusting its epoch-`e` lease a drift margin before `expires_at` ([`mode::SharedMode::renew`]).
//!   Every epoch-`e` grant is bounded by that lease, so every epoch-`e` holder has stopped by `grants_from`.
//! - Every grant of epoch `e + 1` starts after `grants_from` (plus the drift margin), and within one epoch only
//!   one lock grants. So no two holders overlap while pauses stay within the drift margin
//!   ([`mode::ModeLease::allows_grants_at`]). Where that fails, the epoch fences.
//!
//! ## Limitations
//! - **MySQL is always needed** for the mode lease, also while Redis is healthy (`no_mode_lease`).
//! - **A switch costs about one TTL** without grants, in each direction.
//! - **Redis failures are judged per instance**, from its own attempts: a Redis that is slow for one instance
//!   only can switch everybody to MySQL ([`outage`]).
//! - **One timeout is an outage** with the defaults: `--degrade-after-ms` (1 s) is shorter than the Redis client's
//!   response timeout (2 s) ([`outage::OutageRule`]).
//! - **A Redis that reloads its data** answers `LOADING`, which the Redis lock treats as "busy, try again": an
//!   answer, never an outage (`attempt`).
//! - **A lock Redis that restarts empty** starts its token counter again at 1; an instance that sees the counter
//!   go back switches to MySQL at once (`redis_forgot_its_counter`).
//!
//! ## References
//! - Martin Kleppmann, "How to do distributed locking" (fencing tokens, epochs):
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>
//! - Cary Gray and David Cheriton, "Leases: An Efficient Fault-Tolerant Mechanism for
//!   Distributed File Cache Consistency" (1989): waiting out a lease instead of revoking it.

pub mod mode;
pub mod outage;
pub mod stats;
mod epoch_grant;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::epoch_grant::{bound_by_epoch, epoch_allows_grants, went_back, NewestRedisTokens};
use self::mode::{Mode, ModeLease, SharedMode};
use self::outage::{OutageJudge, OutageRule};
use self::stats::ModeClock;
pub use self::stats::{DegradeStats, STATS_KEY};
use crate::lock::critical_path::{Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::mysql::MySqlArgs;
use crate::lock::mysql_version::{self, MySqlVersionLock};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::parts::unpoisoned;
use crate::lock::polling::{poll_until_granted, BACKOFF_MAX};
use crate::lock::redis::{RedisArgs, RedisLock};
use crate::lock::{DistributedLock, LockCounters, LockError, LockGuard, OwnStats, Owner};
use crate::store::redis_master::MasterAddress;

const BACKEND: &str = "redis-degrade";

/// What this strategy is (see [`crate::lock::description`]).
/// Counted as its normal mode: the lock Redis, with a token per grant.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(LockRedis),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next, in Redis mode: the `redis` lock's
/// scripts through this wrapper, its waiters woken by the release script's pub/sub
/// announcement as the `redis` lock's are, so the `redis` lock's path. See
/// [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = crate::lock::redis::CRITICAL_PATH;
/// How often the lock Redis is probed while degraded.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// How a [`DegradingLock`] decides to switch.
#[derive(Clone, Copy, Debug)]
pub struct DegradeOptions {
    /// Lease of the grants and of the mode lease.
    pub ttl: Duration,
    /// When the lock Redis counts as down, and every instance switches to MySQL.
    pub outage: OutageRule,
    /// How long the lock Redis must answer every probe before switching back.
    pub recover_after: Duration,
}

/// The flags of `--lock redis-degrade` (flattened into the config); it reads the `redis`
/// lock's and the MySQL locks' flags too.
#[derive(Clone, Debug, clap::Args)]
pub struct DegradeArgs {
    /// `--lock redis-degrade`: lock Redis failures in a row (errors or timeouts) that
    /// switch every instance to the MySQL version lock.
    #[arg(long, env = "SECKILL_DEGRADE_AFTER_FAILURES", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub degrade_after_failures: u32,
    /// `--lock redis-degrade`: how long every lock Redis attempt may fail, from the first
    /// failed one's send, before every instance switches to the MySQL version lock. The
    /// switch comes at this or at --degrade-after-failures, whichever is first. Behind the
    /// local queue an instance has few attempts out, so time notices a frozen Redis at its
    /// first timeout, where counting needs three.
    #[arg(long, env = "SECKILL_DEGRADE_AFTER_MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub degrade_after_ms: u64,
    /// `--lock redis-degrade`: the name of the mode that the instances sharing one lock
    /// Redis share; default: the address that Redis accepted the connection on and the
    /// database (`CLIENT INFO`), the same however each instance spells the URL. Set it
    /// when that differs between instances (a Redis behind NAT, or on two addresses).
    #[arg(long, env = "SECKILL_DEGRADE_MODE_NAME", value_parser = non_empty_name)]
    pub degrade_mode_name: Option<String>,
    /// `--lock redis-degrade`: how long the lock Redis must answer every probe before
    /// every instance switches back to it, in milliseconds.
    #[arg(long, env = "SECKILL_DEGRADE_RECOVER_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub degrade_recover_ms: u64,
}

/// Builds `--lock redis-degrade`: the `redis` lock, the MySQL version lock, and the mode
/// they share.
pub async fn build(
    args: &DegradeArgs,
    redis: &RedisArgs,
    mysql: &MySqlArgs,
    setup: &Setup,
) -> anyhow::Result<DegradingLock> {
    let lock_redis = lock_redis(redis, setup).await?;
    let redis_lock = RedisLock::connect(&lock_redis, redis.options(setup.ttl)?).await?;
    let pool = mysql.connect(&setup.mysql_url).await?;
    // While degraded the lock Redis is down: the MySQL lock's notices go on the stock Redis.
    let mysql_lock = mysql_version::build_on(pool.clone(), mysql, setup).await?;
    let instance = format!("{}-{:016x}", setup.instance, rand::random::<u64>());
    let mode_name = mode_name(args, &lock_redis).await?;
    let shared = SharedMode::open(pool, &mode_name, &instance, setup.ttl)
        .await
        .context("cannot open the lock's shared mode in MySQL")?;
    let options = DegradeOptions {
        ttl: setup.ttl,
        outage: OutageRule {
            after_failures: args.degrade_after_failures,
            after: Duration::from_millis(args.degrade_after_ms),
        },
        recover_after: Duration::from_millis(args.degrade_recover_ms),
    };
    Ok(DegradingLock::start(redis_lock, lock_redis, mysql_lock, shared, options).await?)
}

/// The Redis this lock keeps its lock in: the stock's, or `--lock-redis-url` checked.
async fn lock_redis(args: &RedisArgs, setup: &Setup) -> anyhow::Result<redis::Client> {
    let MasterAddress::Server(client) = args.address(&setup.stock_redis)? else {
        anyhow::bail!(
            "--lock redis-degrade does not follow Sentinels yet: its fallback decides by the lock Redis's own address. \
             Give it one server (--lock-redis-url redis://host:port), or use --lock redis with redis-sentinel://"
        );
    };
    if let Some(url) = &args.lock_redis_url {
        let role = "lock Redis";
        crate::store::redis_master::connect_checked(url, role, "--lock-redis-url / SECKILL_LOCK_REDIS_URL").await?;
    }
    Ok(client)
}

/// The name of the shared mode. The instances that share a lock Redis must share its
/// mode, or each would switch on its own, with epochs of its own, and one could grant in
/// Redis while another grants in MySQL. A URL does not name a server (`localhost` and
/// `127.0.0.1/0` are one), so the server says where it is: the address it accepted our
/// connection on, and the database (`CLIENT INFO`). A proxy in between changes nothing:
/// the address is the server's own.
async fn mode_name(args: &DegradeArgs, lock_redis: &redis::Client) -> anyhow::Result<String> {
    if let Some(name) = &args.degrade_mode_name {
        return Ok(name.clone());
    }
    let mut connection = lock_redis
        .get_multiplexed_async_connection()
        .await
        .context("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL)")?;
    let info: String = redis::cmd("CLIENT")
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

fn non_empty_name(name: &str) -> Result<String, String> {
    match name.trim() {
        "" => Err("the mode name must not be empty; leave the option out to name the mode after the lock Redis".into()),
        name => Ok(name.to_owned()),
    }
}

/// Redis, or the MySQL version lock while Redis is down. A wrapper around two locks, not a branch inside
/// either: [`RedisLock`] on the *lock* Redis, and [`MySqlVersionLock`] behind its semaphore
/// ([`crate::lock::parts::permits`]).
pub struct DegradingLock {
    redis: RedisLock,
    mysql: MySqlVersionLock,
    shared: Arc<SharedMode>,
    /// The last mode lease this instance renewed.
    view: watch::Receiver<Option<ModeLease>>,
    renew_now: Arc<tokio::sync::Notify>,
    outage: OutageJudge,
    /// Noted at every Redis grant and hand-over, to see the counter go back (`epoch_grant::went_back`).
    newest_redis_token: NewestRedisTokens,
    options: DegradeOptions,
    stats: Arc<StdMutex<ModeClock>>,
    shut_down: ShutDownSwitch,
    tasks: Vec<JoinHandle<()>>,
}

impl DegradingLock {
    /// The mode, the switches and the time in each mode, as of now.
    pub fn mode_stats(&self) -> DegradeStats {
        unpoisoned(&self.stats).stats()
    }

    /// Composes the two locks; renews the first mode lease before it returns, so a
    /// MySQL that cannot keep one is refused at start.
    pub async fn start(
        redis: RedisLock,
        lock_redis: redis::Client,
        mysql: MySqlVersionLock,
        shared: SharedMode,
        options: DegradeOptions,
    ) -> Result<Self, LockError> {
        let shared = Arc::new(shared);
        let first = shared
            .renew()
            .await
            .map_err(|error| LockError::backend(BACKEND, error))?;
        let (publish, view) = watch::channel(Some(first));
        let stats = Arc::new(StdMutex::new(ModeClock::default()));
        unpoisoned(&stats).observe(first.mode, first.epoch);
        let renew_now = Arc::new(tokio::sync::Notify::new());
        let renewer = tokio::spawn(renew_mode_lease(
            shared.clone(),
            publish,
            renew_now.clone(),
            stats.clone(),
        ));
        let prober = tokio::spawn(probe_while_degraded(
            lock_redis,
            shared.clone(),
            view.clone(),
            renew_now.clone(),
            options.recover_after,
        ));
        Ok(DegradingLock {
            redis,
            mysql,
            shared,
            view,
            renew_now,
            outage: OutageJudge::new(options.outage),
            newest_redis_token: NewestRedisTokens::default(),
            options,
            stats,
            shut_down: ShutDownSwitch::new(BACKEND),
            tasks: vec![renewer, prober],
        })
    }

    /// Renews the mode lease now instead of at the next beat, and waits for the answer
    /// (at most one TTL): this instance then knows of any switch made so far.
    pub async fn refresh_mode(&self) {
        let mut view = self.view.clone();
        view.borrow_and_update();
        self.renew_now.notify_one();
        let _ = tokio::time::timeout(self.options.ttl, view.changed()).await;
    }

    /// The mode lease as the last renewal left it.
    fn current(&self) -> Option<ModeLease> {
        *self.view.borrow()
    }

    /// One attempt in the mode `lease` says, bounded by that lease, and in MySQL mode by
    /// the caller's `deadline` if it has one (a MySQL attempt may wait for a permit, then
    /// for each statement).
    async fn attempt(
        &self,
        lease: ModeLease,
        key: &str,
        owner: &Owner,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let sent = Instant::now();
        let inner = match lease.mode {
            Mode::Redis => match self.redis.try_acquire(key, owner).await {
                Err(LockError::Backend { backend, source }) => {
                    self.redis_failed(lease, sent, &*source).await;
                    return Err(LockError::Backend { backend, source });
                }
                granted_or_busy => {
                    // A Redis that reloads its data answers `LOADING`, which the Redis lock treats as
                    // "busy, try again": it counts as an answer, and never as an outage.
                    if matches!(granted_or_busy, Ok(_) | Err(LockError::Busy { .. })) {
                        self.outage.answered(Instant::now());
                    }
                    let guard = granted_or_busy?;
                    if self.redis_forgot_its_counter(lease, &guard) {
                        let _ = guard.release().await;
                        return Err(LockError::Busy { key: key.to_owned() });
                    }
                    guard
                }
            },
            Mode::Mysql => match deadline {
                Some(deadline) => self.mysql.try_acquire_by(key, owner, deadline).await?,
                None => self.mysql.try_acquire(key, owner).await?,
            },
        };
        // The grant took time: it counts only if the epoch's lease still allows it.
        if !epoch_allows_grants(&self.view, lease.epoch) {
            let _ = inner.release().await;
            return Err(LockError::Busy { key: key.to_owned() });
        }
        Ok(bound_by_epoch(inner, lease.epoch, &self.view, &self.newest_redis_token))
    }

    /// A lock Redis that restarted empty hands out its token counter from 1 again; in the
    /// same epoch the stock would refuse every such token as older than the last sale.
    /// Seen here as a counter that went back: switch at once, so that Redis comes back
    /// later under a newer epoch, whose tokens outrank every earlier one.
    fn redis_forgot_its_counter(&self, lease: ModeLease, guard: &LockGuard) -> bool {
        let Some(counter) = guard.fencing_token().map(|token| token.counter) else {
            return false;
        };
        if went_back(&self.newest_redis_token, guard.key(), lease.epoch, counter) {
            tracing::warn!(
                epoch = lease.epoch,
                counter,
                "the lock Redis forgot its token counter (restarted empty)"
            );
            self.outage.declare_down();
            let shared = self.shared.clone();
            let renew_now = self.renew_now.clone();
            tokio::spawn(async move {
                if let Err(error) = shared.switch(lease.epoch, Mode::Mysql).await {
                    tracing::warn!(%error, "could not switch to the MySQL lock");
                }
                renew_now.notify_one();
            });
            return true;
        }
        false
    }

    /// Step 2, downwards: an attempt sent at `sent` failed; once the failures make an
    /// outage, switch this epoch to MySQL. An outage ([`outage`]) is `--degrade-after-failures`
    /// failures in a row, or every attempt failing for `--degrade-after-ms`.
    async fn redis_failed(&self, lease: ModeLease, sent: Instant, error: &(dyn std::error::Error + Send + Sync)) {
        tracing::debug!(%error, "the lock Redis failed");
        let Some(outage) = self.outage.failed(sent, Instant::now()) else {
            return;
        };
        match self.shared.switch(lease.epoch, Mode::Mysql).await {
            Ok(true) => tracing::warn!(
                failures = outage.failures,
                lasted = ?outage.lasted,
                %error,
                "the lock Redis keeps failing: switching to the MySQL lock"
            ),
            Ok(false) => {} // another instance switched first
            Err(error) => tracing::warn!(%error, "could not switch to the MySQL lock"),
        }
        self.renew_now.notify_one();
    }
}

/// Step 1: renews this instance's mode lease every `ttl / 3`, or at once when asked. Each
/// renewal is one small transaction, not one per sale.
async fn renew_mode_lease(
    shared: Arc<SharedMode>,
    publish: watch::Sender<Option<ModeLease>>,
    renew_now: Arc<tokio::sync::Notify>,
    stats: Arc<StdMutex<ModeClock>>,
) {
    let period = shared.ttl() / 3;
    let timeout = shared.ttl() / 6;
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = renew_now.notified() => {}
        }
        match tokio::time::timeout(timeout, shared.renew()).await {
            Ok(Ok(lease)) => {
                unpoisoned(&stats).observe(lease.mode, lease.epoch);
                publish.send_replace(Some(lease));
            }
            // The old lease stays published and runs out by itself.
            Ok(Err(error)) => tracing::warn!(%error, "could not renew the lock's mode lease in MySQL"),
            Err(_) => tracing::warn!(?timeout, "renewing the lock's mode lease in MySQL timed out"),
        }
    }
}

/// Step 2, upwards: while degraded, ping the lock Redis; once it has answered every
/// probe for `recover_after` (`--degrade-recover-ms`), switch back. Long enough that a Redis that flaps does not
/// drag every instance through a switch (one TTL without grants) each time.
async fn probe_while_degraded(
    lock_redis: redis::Client,
    shared: Arc<SharedMode>,
    view: watch::Receiver<Option<ModeLease>>,
    renew_now: Arc<tokio::sync::Notify>,
    recover_after: Duration,
) {
    let mut healthy_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(lease) = *view.borrow() else { continue };
        if lease.mode != Mode::Mysql {
            healthy_since = None;
            continue;
        }
        let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
            let mut connection = lock_redis.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut connection).await
        })
        .await;
        if !matches!(answered, Ok(Ok(_))) {
            healthy_since = None;
            continue;
        }
        let since = *healthy_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= recover_after {
            match shared.switch(lease.epoch, Mode::Redis).await {
                Ok(true) => tracing::warn!(?recover_after, "the lock Redis is back: switching to it"),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "could not switch back to the Redis lock"),
            }
            healthy_since = None;
            renew_now.notify_one();
        }
    }
}

#[async_trait]
impl DistributedLock for DegradingLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        match self.current() {
            Some(lease) if lease.allows_grants_at(Instant::now()) => self.attempt(lease, key, owner, None).await,
            Some(lease) if Instant::now() < lease.grants_from => Err(LockError::Busy { key: key.to_owned() }),
            _ => Err(no_mode_lease()),
        }
    }

    /// Polls in whichever mode is current, and waits out a switch (step 3) instead of
    /// failing. A Redis failure is retried (in MySQL once enough of them switched).
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let deadline = Instant::now() + timeout;
        let attempt = || async {
            self.shut_down.refuse_if_shut_down()?;
            let busy = || Err(LockError::Busy { key: key.to_owned() });
            let now = Instant::now();
            match self.current() {
                Some(lease) if lease.allows_grants_at(now) => {
                    match self.attempt(lease, key, owner, Some(deadline)).await {
                        Err(LockError::Backend { .. }) if lease.mode == Mode::Redis => busy(),
                        granted_busy_or_failed => granted_busy_or_failed,
                    }
                }
                // Step 3: the new epoch starts at `grants_from`; `wait` sleeps until then.
                Some(lease) if now < lease.grants_from => busy(),
                // No trusted mode lease: MySQL does not answer the renewals.
                _ if now + BACKOFF_MAX >= deadline => Err(no_mode_lease()),
                _ => busy(),
            }
        };
        // Taken before the first attempt, so a release between a refused attempt and the
        // wait still wakes it: the Redis lock's own announcements, and the MySQL lock's
        // notices on the stock Redis when the wiring gave it some.
        let (redis_released, mysql_released) = (self.redis.release_signal(key), self.mysql.release_signal(key));
        let wait = |pause: Duration| {
            let (redis_released, mysql_released) = (redis_released.clone(), mysql_released.clone());
            async move {
                let now = Instant::now();
                let left = deadline.saturating_duration_since(now);
                if let Some(lease) = self.current().filter(|lease| now < lease.grants_from) {
                    // Step 3: no grant before the new epoch starts; a notice cannot change that.
                    tokio::time::sleep((lease.grants_from - now).min(left)).await;
                    return;
                }
                let mysql_released = async {
                    match &mysql_released {
                        Some(signal) => signal.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(pause.min(left)) => {}
                    () = redis_released.notified() => {}
                    () = mysql_released => {}
                }
            }
        };
        poll_until_granted(key, timeout, attempt, wait).await
    }

    /// As its Redis lock does, in the mode it is meant to run in: not with a replica
    /// wait. (In MySQL mode a release could always hand over.)
    fn hands_over(&self) -> bool {
        self.redis.hands_over()
    }

    /// Gives back both locks' grants and this instance's mode lease.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        for task in &self.tasks {
            task.abort();
        }
        let redis = self.redis.shutdown().await;
        let mysql = self.mysql.shutdown().await;
        self.shared
            .leave()
            .await
            .map_err(|error| LockError::backend(BACKEND, error))?;
        redis.and(mysql)
    }

    /// The MySQL lock's counters.
    fn stats(&self) -> Option<LockCounters> {
        Some(self.mysql.stats().unwrap_or_default())
    }

    /// The mode, the switches and the time in each mode.
    fn own_stats(&self) -> Option<OwnStats> {
        Some(self.mode_stats().own_stats())
    }
}

/// MySQL is always needed for the mode lease, also while Redis is healthy. An instance that
/// cannot renew its lease stops granting (a buyer gets `503 lock_backend_unavailable`) rather
/// than risk a holder in another mode.
fn no_mode_lease() -> LockError {
    LockError::backend(
        BACKEND,
        std::io::Error::other(
            "this instance holds no lease on the lock's mode (MySQL does not answer its renewals), \
             so it grants nothing rather than risk a holder in the other mode",
        ),
    )
}

impl Drop for DegradingLock {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
