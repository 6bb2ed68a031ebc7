//! A lock on one Redis server: `SET key token NX PX ttl`.
//!
//! The grants have files of their own: making one, with its epoch and the clean-up of a failed
//! acquire (`grants.rs`), and one held, with its renewal, release and hand-over (`grant.rs`).
//!
//! ## How it works
//! 1. **Acquire.** `SET lock:stock <token> NX PX <ttl>` creates the key only if absent, with a lease; the
//!    token says who holds it (`new_token`). The same script's `INCR lock:stock:fence` hands out a fencing
//!    token `(epoch, counter)`, in a new epoch after a restart or a failover (`Grants::begin_epoch`).
//! 2. **Renew.** Every `ttl / 3` while held: "if the key still holds my token, `PEXPIRE` it" (`keep_alive`).
//! 3. **Release.** "If the key still holds my token, `DEL` it", one Lua script, then `PUBLISH` (`RELEASE_SCRIPT`).
//! 4. **Wait.** A jittered backoff, woken early by that publication; every attempt ends by the acquire's
//!    deadline ([`RedisLock::acquire`], [`crate::lock::polling::answer_by`]).
//! 5. **Clean up a failed acquire.** A grant that may have happened unanswered, or answered too late, is
//!    released with the same token until Redis answers (`Grants::clean_up_failed_acquire`).
//! 6. **Shut down.** [`RedisLock::shutdown`] releases every key this handle still holds and stops the
//!    listener, so a stopping instance frees the stock at once instead of after a TTL.
//! 7. **Wait for replicas (optional).** With `--lock-redis-wait-replicas N`, a grant or renewal counts only
//!    once N replicas acknowledged it (`WAIT`, [`RedisLockOptions::wait_for_replicas`]).
//! 8. **Direct hand-over.** A release whose local queue has a buyer waiting gives the key to that buyer in
//!    one script ([`RedisLock::hands_over`]).
//!
//! ## Limitations
//! - **One master.** If the master fails over before its replica got the key, two clients can hold the
//!   lock; `WAIT` (step 7) narrows it ([`RedisLockOptions::wait_for_replicas`]).
//! - **Expiry vs pauses.** A holder paused longer than the TTL loses the lock without knowing and may still
//!   write; the fencing token closes that window (`keep_alive`).
//! - **A silent server.** A request waits up to the Redis client's response timeout (2 s) for its answer.
//!   The buyer waits only until its acquire's deadline (step 4); [`RedisLock::try_acquire`] has none.
//! - **A failed acquire's clean-up** is sent once Redis answers again; an acquire still stuck on a broken
//!   connection that Redis reads even later expires with its TTL.
//! - **Clocks.** Expiry is measured by the Redis server's clock, and a jump in it can end a lease early; the
//!   fencing token still refuses the first holder's late write (`keep_alive`).
//!
//! ## References
//! - Redis docs, "Distributed Locks with Redis": <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>
//! - Martin Kleppmann, "How to do distributed locking" (fencing tokens):
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use redis::Script;

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::RENEWAL_TIMEOUT_DIVISOR;
use crate::lock::parts::release_notices::{poll_until_granted_or_noticed, ReleaseNotices, RELEASE_CHANNEL};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::polling::answer_by;
use crate::lock::{DistributedLock, FencingToken, LockError, LockGuard, Owner};
use crate::store::redis_master::{MasterAddress, MasterConnection, ReplicaWait};

mod grants;
mod grant;

use grant::{keep_alive, RedisGrant};
use grants::{Granted, Grants};

const BACKEND: &str = "redis";

/// What this strategy is (see [`crate::lock::description`]).
/// On the lock Redis, with a token per grant.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(LockRedis),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the release script (DEL, PUBLISH),
/// the waiter's instance hearing the PUBLISH, and the waiter's acquire script
/// (SET NX PX and INCR for the token). See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (DEL, PUBLISH)", LockRedis, Write, 0.5),
    step("wake-up (pub/sub message)", LockRedis, Read, 0.5),
    step("acquire (SET NX PX, INCR token)", LockRedis, Write, 1.0),
];

/// Step 1: set the lock key only if absent, with a TTL, and hand out the next fencing token, which grows
/// with every grant. Its keys and arguments head the script: `src/lock/redis/acquire.lua`.
const ACQUIRE_SCRIPT: &str = include_str!("acquire.lua");

/// Extend the lease only if the key still holds our token.
/// Its keys and arguments head the script: `src/lock/redis/renew.lua`.
const RENEW_SCRIPT: &str = include_str!("renew.lua");

/// Step 3: delete the key only if it still holds our token, then tell the waiters (`PUBLISH` on a channel).
/// One script, because a separate `GET` then `DEL` could delete a lock that expired in between and was
/// granted to somebody else. Its keys and arguments head the script: `src/lock/redis/release.lua`.
const RELEASE_SCRIPT: &str = include_str!("release.lua");

/// Step 8: give the key to the next token if it still holds ours, with that grant's token.
/// Its keys and arguments head the script: `src/lock/redis/hand_over.lua`.
const HAND_OVER_SCRIPT: &str = include_str!("hand_over.lua");

/// Store a new epoch unless the one stored is as new: epochs only grow.
/// Its keys and arguments head the script: `src/lock/redis/store_epoch.lua`.
const STORE_EPOCH_SCRIPT: &str = include_str!("store_epoch.lua");

/// How a [`RedisLock`] behaves.
#[derive(Clone, Copy, Debug)]
pub struct RedisLockOptions {
    /// The lease: how long the key lives without renewal.
    pub ttl: Duration,
    /// Renew the lease every `ttl / 3` while held. Off only to demonstrate expiry.
    pub renew: bool,
    /// Step 7: a grant or a renewal counts only once this many replicas have it. A lock Redis with a
    /// replica and Sentinels (`--lock-redis-url redis-sentinel://...#name`) survives its master's death.
    /// But replication is asynchronous: the master answers the grant before its replica has it, and a
    /// replica promoted in between grants the lock again (`make chaos`, row `lock-redis-failover`). Redlock
    /// answers that with several masters. With `--lock-redis-wait-replicas N`, every grant and renewal is
    /// followed by `WAIT N timeout`, and counts only when N replicas acknowledged it. Otherwise the grant
    /// is taken back (step 5) and the buyer told. A replica that acknowledged has the key, but Redis does
    /// not promise that the Sentinels promote that replica, nor that it kept the key through a restart of
    /// its own. Redisson waits too, after every acquire, renewal and unlock script
    /// (`checkLockSyncedSlaves`, on by default, `slavesSyncTimeout` 1 s), and refuses only when *none* of
    /// the connected replicas acknowledged.
    pub wait_for_replicas: Option<ReplicaWait>,
}

impl Default for RedisLockOptions {
    fn default() -> Self {
        RedisLockOptions {
            ttl: Duration::from_secs(3),
            renew: true,
            wait_for_replicas: None,
        }
    }
}

/// A replica wait must fit in a renewal's own timeout (`ttl / 6`), or no renewal could succeed.
fn check_wait_against(wait: &ReplicaWait, ttl: Duration) -> Result<(), String> {
    let renewal_timeout = ttl / RENEWAL_TIMEOUT_DIVISOR;
    if wait.timeout >= renewal_timeout {
        return Err(format!(
            "the replica wait ({:?}) must be shorter than a renewal's timeout, a sixth of the lease ({renewal_timeout:?}): \
             lower --lock-redis-wait-timeout-ms or raise --lock-ttl-ms",
            wait.timeout
        ));
    }
    Ok(())
}

/// Fewer replicas than asked for acknowledged a write in time (step 7).
#[derive(Debug, thiserror::Error)]
#[error(
    "{acknowledged} of the {wanted} replica(s) the lock waits for (--lock-redis-wait-replicas) acknowledged \
     the {what} within {timeout:?}, so it does not count; is the replica up and in sync (INFO replication)?"
)]
pub struct NotReplicated {
    what: &'static str,
    acknowledged: u32,
    wanted: u32,
    timeout: Duration,
}

/// The scripts, shared by the lock and every grant it hands out.
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    hand_over: Script,
    store_epoch: Script,
}

/// The flags of `--lock redis`, which `redis-degrade` reads too (flattened into the config).
#[derive(Clone, Debug, clap::Args)]
pub struct RedisArgs {
    /// The Redis that holds the lock of `--lock redis` and `--lock redis-degrade`;
    /// default: the stock's Redis (--redis-url). For `--lock redis`, also
    /// `redis-sentinel://host:port,host:port[/db]#master-name`: the master that those
    /// Sentinels name, followed when they fail it over.
    #[arg(long, env = "SECKILL_LOCK_REDIS_URL")]
    pub lock_redis_url: Option<String>,
    /// `--lock redis` and `redis-degrade`: replicas that must acknowledge every grant and
    /// renewal (`WAIT`) before it counts, as Redisson's `checkLockSyncedSlaves` does.
    /// 0: none (the grant is answered as soon as the master has it).
    #[arg(long, env = "SECKILL_LOCK_REDIS_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub lock_redis_wait_replicas: u32,
    /// How long a grant or renewal waits for those replicas, in milliseconds; under a
    /// sixth of --lock-ttl-ms (a renewal's own timeout).
    #[arg(long, env = "SECKILL_LOCK_REDIS_WAIT_TIMEOUT_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lock_redis_wait_timeout_ms: u64,
}

impl RedisArgs {
    /// The lock's options, with grants leased for `ttl`.
    pub fn options(&self, ttl: Duration) -> anyhow::Result<RedisLockOptions> {
        let wait_for_replicas = (self.lock_redis_wait_replicas > 0).then(|| ReplicaWait {
            replicas: self.lock_redis_wait_replicas,
            timeout: Duration::from_millis(self.lock_redis_wait_timeout_ms),
        });
        if let Some(wait) = &wait_for_replicas {
            check_wait_against(wait, ttl).map_err(anyhow::Error::msg)?;
        }
        Ok(RedisLockOptions {
            ttl,
            renew: true,
            wait_for_replicas,
        })
    }

    /// Where the lock lives: the stock's Redis, a server of its own, or the master that
    /// Sentinels name.
    pub fn address(&self, stock_redis: &MasterAddress) -> anyhow::Result<MasterAddress> {
        let address = match &self.lock_redis_url {
            None => stock_redis.clone(),
            Some(url) => MasterAddress::parse(url).map_err(|problem| {
                anyhow::anyhow!(
                    "{problem}; set --lock-redis-url / SECKILL_LOCK_REDIS_URL to redis://host:port or \
                     redis-sentinel://host:port,host:port#master-name"
                )
            })?,
        };
        if address.is_cluster() {
            anyhow::bail!(
                "the Redis lock needs one master, a server or the one Sentinels name: its scripts keep a grant \
                 and its waiters together, and a Redis Cluster spreads them over its masters. The stock may \
                 live on a cluster: point --lock-redis-url / SECKILL_LOCK_REDIS_URL at a server of the lock's \
                 own, as in redis://127.0.0.1:6379"
            );
        }
        Ok(address)
    }
}

/// Builds `--lock redis` from its flags.
pub async fn build(args: &RedisArgs, setup: &Setup) -> anyhow::Result<RedisLock> {
    let options = args.options(setup.ttl)?;
    let address = args.address(&setup.stock_redis)?;
    let url = args.lock_redis_url.as_deref().unwrap_or(&setup.stock_redis_url);
    let moves = address.moves();
    RedisLock::connect_fenced_by(address, setup.stock_redis.clone(), options)
        .await
        .with_context(|| match moves {
            true => format!(
                "cannot reach the lock's master through its Sentinels (--lock-redis-url / SECKILL_LOCK_REDIS_URL = {url}): \
                 each Sentinel must answer and name a master that answers; `make cluster` starts three"
            ),
            false => format!("the lock Redis (--lock-redis-url / SECKILL_LOCK_REDIS_URL = {url})"),
        })
}

/// A lock held as a Redis key with an owner token and a lease.
pub struct RedisLock {
    grants: Grants,
    /// The release script's announcements, heard on the lock's master (step 4).
    notices: ReleaseNotices,
    /// Every grant this handle holds, token to key, so `shutdown` can give them back.
    held: HeldGrants<String, String>,
    shut_down: ShutDownSwitch,
}

impl RedisLock {
    /// Connects, and subscribes to release announcements. For a lock that lives beside
    /// the stock: new epochs come from the same Redis.
    pub async fn connect(client: &redis::Client, options: RedisLockOptions) -> Result<Self, LockError> {
        Self::connect_fenced_by(client, client, options).await
    }

    /// A lock in `lock` (a server, or the master its Sentinels name) whose tokens the
    /// stock in `stock` checks: its new epochs come from there (step 1), so that a
    /// restart or a failover of the lock's Redis cannot send tokens back.
    pub async fn connect_fenced_by(
        lock: impl Into<MasterAddress>,
        stock: impl Into<MasterAddress>,
        options: RedisLockOptions,
    ) -> Result<Self, LockError> {
        let (lock, stock) = (lock.into(), stock.into());
        let connection = Self::connection(&lock).await?;
        let granting = match options.wait_for_replicas {
            Some(_) => Self::connection(&lock).await?,
            None => connection.clone(),
        };
        let epochs = match (&lock, &stock) {
            (MasterAddress::Server(lock), MasterAddress::Server(stock)) if same_database(lock, stock) => {
                connection.clone()
            }
            _ => Self::connection(&stock).await?,
        };
        Ok(Self::start(connection, granting, epochs, options))
    }

    async fn connection(address: &MasterAddress) -> Result<MasterConnection, LockError> {
        MasterConnection::connect(address)
            .await
            .map_err(|e| LockError::backend(BACKEND, e))
    }

    fn start(
        connection: MasterConnection,
        granting: MasterConnection,
        epochs: MasterConnection,
        options: RedisLockOptions,
    ) -> Self {
        let master = connection.clone();
        let notices = ReleaseNotices::listen(move || master.client());
        RedisLock {
            grants: Grants {
                connection,
                granting,
                epochs,
                options,
                scripts: Arc::new(Scripts {
                    acquire: Script::new(ACQUIRE_SCRIPT),
                    renew: Script::new(RENEW_SCRIPT),
                    release: Script::new(RELEASE_SCRIPT),
                    hand_over: Script::new(HAND_OVER_SCRIPT),
                    store_epoch: Script::new(STORE_EPOCH_SCRIPT),
                }),
                epochs_begun: Arc::default(),
            },
            notices,
            held: HeldGrants::default(),
            shut_down: ShutDownSwitch::new(BACKEND),
        }
    }

    /// The signal a release of `key` fires (step 4), for a lock built around this one.
    pub fn release_signal(&self, key: &str) -> Arc<tokio::sync::Notify> {
        self.notices.signal(key)
    }

    /// How many keys the waiter map remembers (for the test that it does not grow forever).
    pub fn remembered_keys(&self) -> usize {
        self.notices.remembered_keys()
    }

    fn fencing_key(key: &str) -> String {
        format!("{key}:fence")
    }

    fn epoch_key(key: &str) -> String {
        format!("{key}:fence:epoch")
    }

    /// One attempt. With a `deadline` (an acquire's, step 4), the wait for Redis's
    /// answer ends there. The exchange goes on in its own task, and a grant answered
    /// after the deadline is given back (step 5).
    async fn attempt(&self, key: &str, owner: &Owner, deadline: Option<Instant>) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let token = new_token(owner);
        let (grants, name, own) = (self.grants.clone(), key.to_owned(), token.clone());
        let granting = async move { grants.grant(&name, own).await };
        let (grants, name, own) = (self.grants.clone(), key.to_owned(), token.clone());
        let undo = move |late| grants.give_back_late(&name, &own, late);
        // No answer by the deadline: as for a held key, the poll times out.
        let Some(granted) = answer_by(deadline, granting, undo).await else {
            return Err(LockError::Busy { key: key.to_owned() });
        };
        Ok(self.guard(key, token, granted?))
    }

    /// The guard of `token`'s grant of `key`: held here until released, renewed, with
    /// its fencing token.
    fn guard(&self, key: &str, token: String, granted: Granted) -> LockGuard {
        let grants = &self.grants;
        let (keeper, lease) = keep_alive(
            &grants.granting,
            &grants.scripts,
            grants.options,
            (key, &token),
            granted.sent,
        );
        self.held.insert(token.clone(), key.to_owned());
        let grant = RedisGrant {
            key: key.to_owned(),
            token,
            connection: grants.connection.clone(),
            scripts: grants.scripts.clone(),
            held: self.held.clone(),
            lease: keeper,
            hand_over_with: self.hands_over().then_some(grants.options),
        };
        LockGuard::new(key, grant)
            .with_fencing_token(FencingToken::new(BACKEND, granted.epoch, granted.counter))
            .with_lease(lease)
    }
}

impl Drop for RedisLock {
    fn drop(&mut self) {
        self.notices.stop();
    }
}

#[async_trait]
impl DistributedLock for RedisLock {
    /// One attempt, with no deadline: it waits for Redis's answer up to the whole response timeout (2 s).
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        self.attempt(key, owner, None).await
    }

    /// Step 4: polls, each short jittered pause cut short by the release script's announcement. Each
    /// instance subscribes once and wakes one local waiter per release, so a release does not start a
    /// stampede of retries. Every attempt ends by the deadline, however slowly Redis answers: its requests
    /// go on in a task of their own ([`answer_by`]), and the waiter gets a timeout, as for a held key.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let deadline = Instant::now() + timeout;
        poll_until_granted_or_noticed(Some(&self.notices), key, timeout, || {
            self.attempt(key, owner, Some(deadline))
        })
        .await
    }

    /// Step 8: a release whose local queue has a buyer waiting ([`crate::sale::local_queue`]) runs one
    /// script instead: if the key still holds our token, it takes the next buyer's, with a full lease, and
    /// `INCR` hands out that grant's fencing token in the same epoch. No `PUBLISH`: the key never came
    /// free. On a lock Redis followed through Sentinels, or with `--lock-redis-wait-replicas`, it releases
    /// instead: a grant there needs the replica wait and the new master's epoch (steps 1 and 7), which only
    /// an acquire does.
    fn hands_over(&self) -> bool {
        self.grants.options.wait_for_replicas.is_none() && !self.grants.granting.follows_sentinels()
    }

    /// Releases every key still held through this handle, then stops listening.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        self.notices.stop();
        let held = self.held.take_all();
        let mut connection = self.grants.connection.clone();
        for (token, key) in held {
            self.grants
                .scripts
                .release
                .key(&key)
                .arg(&token)
                .arg(RELEASE_CHANNEL)
                .invoke_async::<i64>(&mut connection)
                .await
                .map_err(|e| LockError::backend(BACKEND, e))?;
        }
        Ok(())
    }
}

/// Whether two clients name the same address and database (spelled alike: a
/// difference in spelling only costs a second connection).
fn same_database(one: &redis::Client, other: &redis::Client) -> bool {
    let (one, other) = (one.get_connection_info(), other.get_connection_info());
    one.addr() == other.addr() && one.redis_settings().db() == other.redis_settings().db()
}

/// Step 1's token: the owner (its instance's name first, so `redis-cli get lock:stock` shows who holds the
/// lock) and 128 random bits: no two acquisitions, in any instance, share a token. It says *who* holds the
/// lock, to the release script and to a reader of Redis.
fn new_token(owner: &Owner) -> String {
    format!("{}:{:032x}", owner.as_str(), rand::random::<u128>())
}
