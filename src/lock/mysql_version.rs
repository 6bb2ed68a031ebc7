//! Optimistic locking: a compare-and-set on a version column.
//!
//! The original articles' other MySQL lock. Nobody holds a database lock while it waits, and no row is ever
//! inserted or deleted per grant: one row per lock name, created once by `migrations/0002_version_lock.sql`'s
//! table, whose `version` goes up by one at every grant. Every time is the database server's clock (`NOW(3)`).
//!
//! ## How it works
//! 1. **One row per lock name** `(name, version, owner, expires_at)`; `owner` is empty while nobody holds
//!    it. The first taker of a new name inserts it (`INSERT IGNORE`, version 0, free).
//! 2. **Acquire reads the row, then compares and sets** ([`TAKE_IF_UNCHANGED`]): a grant, whose token is the
//!    new version, or a conflict. After a release it may compare and set without reading first (`Seen`).
//! 3. **Release is another compare-and-set**, on the version and the owner (`GIVE_BACK`).
//! 4. **Expiry and renewal** as the other leases: a live holder renews every `ttl / 3`, and a row past
//!    `expires_at` is free for the next compare-and-set (`Grants::renew_with`).
//! 5. **The semaphore, and the deadline.** At most `--mysql-permits` attempts of one instance talk to MySQL
//!    at once, and every attempt ends by the acquire's deadline ([`MySqlVersionLock::acquire`]).
//! 6. **Direct hand-over.** A release whose local queue has a buyer waiting gives the row to that buyer in
//!    one compare-and-set ([`MySqlVersionLock::hands_over`]).
//!
//! Reentrancy is not in the row: [`crate::lock::parts::reentrant`] keeps the hold count in process.
//!
//! ## Limitations
//! - **Conflicts are work thrown away.** Every waiter reads, and every waiter that saw the row free races
//!   the others with a write; all but one lose ([`MySqlVersionLock::stats`]).
//! - **No queue, no wake-up.** Waiters poll; MySQL cannot tell them of a release. A notice on the stock Redis
//!   wakes them instead ([`MySqlVersionLock::with_release_notices`]).
//! - **One database**, as for [`super::mysql`]: a failover that loses the last commit can lose a grant; the
//!   version still orders the holders, and the stock refuses the older one.
//! - **Pauses.** A holder paused past its expiry loses the row to a taker; its release then changes nothing,
//!   and the stock refuses its older token.
//! - **A silent server.** A statement waits at most one TTL for its answer (`Grants::connections`). The
//!   buyer waits only until its acquire's deadline (step 5).
//!
//! ## References
//! - Martin Fowler, "Optimistic Offline Lock": <https://martinfowler.com/eaaCatalog/optimisticOfflineLock.html>
//! - Martin Kleppmann, "How to do distributed locking" (fencing tokens):
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::mysql::MySqlPool;

use crate::lock::parts::counters::AttemptCounters;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::store::mysql::micros;

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::mysql::{MySqlArgs, MySqlLockOptions};
use crate::lock::parts::keepalive::LeaseKeeper;
use crate::lock::parts::kept_connections::KeptConnections;
use crate::lock::parts::permits::{Permits, Turn};
use crate::lock::parts::release_notices::{pause_unless_released, ReleaseNotices};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::unpoisoned;
use crate::lock::polling::{answer_by, poll_until_granted};
use crate::lock::{DistributedLock, FencingToken, HandOver, Lease, LockCounters, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "mysql-version";

/// What this strategy is (see [`crate::lock::description`]).
/// On MySQL, with the version as the token.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(Mysql),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the release, answered, then its
/// notice on the stock Redis wakes a waiter, which compares and sets at the version it
/// saw the row held at (step 2). See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (UPDATE owner = ''), answered", Mysql, Write, 1.0),
    step("wake-up (notice on the stock Redis)", StockRedis, Read, 1.0),
    step("compare-and-set the version it saw held", Mysql, Write, 1.0),
];

/// Step 2's read. `expired` is computed by the server, on the server's clock. Binds: name.
pub const READ_ROW: &str = "SELECT version, owner, CAST(expires_at <= NOW(3) AS SIGNED) AS expired \
     FROM seckill_version_locks WHERE name = ?";
/// Step 1: the row of a name used for the first time. Binds: name.
const CREATE_ROW: &str = "INSERT IGNORE INTO seckill_version_locks (name, version, owner, expires_at) \
     VALUES (?, 0, '', NOW(3))";
/// Step 2's compare-and-set. One affected row is a grant, and the new version is its fencing token. Zero
/// affected rows is a **conflict**: someone else changed the row between our read and our write; we count
/// it, back off and read again, until the acquire timeout. A row that the read already shows held is not
/// tried at all: that is "busy". Binds: owner, ttl in microseconds, name, the version read.
pub const TAKE_IF_UNCHANGED: &str = "UPDATE seckill_version_locks \
     SET version = version + 1, owner = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND version = ? AND (owner = '' OR expires_at <= NOW(3))";
/// Step 3: the release, a compare-and-set on the version and the owner. A holder whose row was taken over
/// (it expired) changes nothing, and learns it was lost. Binds: name, version, owner.
const GIVE_BACK: &str = "UPDATE seckill_version_locks SET owner = '' WHERE name = ? AND version = ? AND owner = ?";
/// Step 4: only our own grant, only while it has not expired. Binds: ttl in µs, name, version, owner.
const RENEW: &str = "UPDATE seckill_version_locks SET expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND version = ? AND owner = ? AND expires_at > NOW(3)";
/// Step 6: the release that grants the row to the next owner, in one compare-and-set
/// on our version and owner. Binds: the next owner, ttl in µs, name, version, owner.
const HAND_OVER: &str = "UPDATE seckill_version_locks \
     SET version = version + 1, owner = ?, expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND version = ? AND owner = ?";

/// Builds `--lock mysql-version` from the MySQL locks' flags.
pub async fn build(args: &MySqlArgs, setup: &Setup) -> anyhow::Result<MySqlVersionLock> {
    build_on(args.connect(&setup.mysql_url).await?, args, setup).await
}

/// The same on a pool made already (`redis-degrade` shares its pool with its mode).
pub async fn build_on(pool: MySqlPool, args: &MySqlArgs, setup: &Setup) -> anyhow::Result<MySqlVersionLock> {
    let notices = setup.release_notices().await?;
    Ok(MySqlVersionLock::new(pool, args.options(setup)).with_release_notices(notices))
}

/// An optimistic lock on rows of `seckill_version_locks`.
pub struct MySqlVersionLock {
    grants: Grants,
    permits: Permits,
    shut_down: ShutDownSwitch,
}

/// What making a grant and giving it back need, shared by the lock and its guards: a
/// hand-over (step 6) makes the next grant from the guard of the last.
#[derive(Clone)]
struct Grants {
    /// Every statement of the lock goes through its kept connections
    /// ([`crate::lock::parts::kept_connections`]). There a statement waits at most one TTL for its answer:
    /// a row it wrote later has expired by then.
    connections: KeptConnections,
    options: MySqlLockOptions,
    counters: Arc<AttemptCounters>,
    /// Grants this handle holds, version to (name, owner), so `shutdown` can give them back.
    held: HeldGrants<(String, u64), String>,
    /// Release notices on a Redis, when the wiring gives some: MySQL cannot notify.
    notices: Option<Arc<ReleaseNotices>>,
    /// Per row, the version this handle gave it back at (step 3): free at that version
    /// unless another instance took it since. The next try compares and sets at it.
    given_back: GivenBack,
    /// How many times this handle read a row (step 2).
    rows_read: Arc<AtomicU64>,
}

type GivenBack = Arc<StdMutex<HashMap<String, u64>>>;

/// The row as step 2 reads it.
#[derive(sqlx::FromRow)]
struct Row {
    version: u64,
    owner: String,
    expired: i64,
}

impl Row {
    fn is_free(&self) -> bool {
        self.owner.is_empty() || self.expired != 0
    }
}

/// One attempt's result.
enum Attempt {
    Granted {
        version: u64,
    },
    /// The read showed a live holder, at this version.
    Held {
        version: u64,
    },
    /// The row was free when read, and someone else's write came first.
    Conflict,
    /// MySQL did not answer by the acquire's deadline (step 5).
    Unanswered,
}

fn backend_error(error: sqlx::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

impl MySqlVersionLock {
    /// Uses `pool`, migrated already (see [`crate::store::mysql`]).
    pub fn new(pool: MySqlPool, options: MySqlLockOptions) -> Self {
        MySqlVersionLock {
            grants: Grants {
                connections: KeptConnections::new(pool, options.ttl),
                options,
                counters: Arc::default(),
                held: HeldGrants::default(),
                notices: None,
                given_back: GivenBack::default(),
                rows_read: Arc::default(),
            },
            permits: Permits::new(options.permits),
            shut_down: ShutDownSwitch::new(BACKEND),
        }
    }

    /// How many times this handle read a row (step 2): a waiter woken by a release
    /// notice compares and sets without one.
    pub fn rows_read(&self) -> u64 {
        self.grants.rows_read.load(Ordering::Relaxed)
    }

    /// Announces this handle's releases and wakes its waiters through `notices`
    /// ([`crate::lock::parts::release_notices`]): a waiter tries as soon as another
    /// instance released, instead of at its next poll. The lock still decides.
    /// `None` leaves the waiters polling (`--release-notices false`).
    pub fn with_release_notices(mut self, notices: Option<ReleaseNotices>) -> Self {
        self.grants.notices = notices.map(Arc::new);
        self
    }

    /// One try that ends by `deadline` (step 5), for a lock built around this one that
    /// runs its own polling loop.
    pub async fn try_acquire_by(&self, key: &str, owner: &Owner, deadline: Instant) -> Result<LockGuard, LockError> {
        self.try_once(key, owner, &Seen::default(), Some(deadline)).await
    }

    /// The signal an announced release of `key` fires, with notices; for a lock built
    /// around this one.
    pub fn release_signal(&self, key: &str) -> Option<Arc<tokio::sync::Notify>> {
        self.grants.notices.as_ref().map(|notices| notices.signal(key))
    }
}

impl Grants {
    /// Steps 1 and 2: one read, and one compare-and-set if the row was free. With
    /// `likely_free_at`, the compare-and-set at that version goes first.
    async fn attempt(&self, name: &str, owner: &Owner, likely_free_at: Option<u64>) -> Result<Attempt, sqlx::Error> {
        if let Some(version) = likely_free_at {
            if self.take(name, owner, version).await? {
                return Ok(Attempt::Granted { version: version + 1 });
            }
        }
        self.rows_read.fetch_add(1, Ordering::Relaxed);
        let read = self
            .connections
            .fetch_optional(sqlx::query_as::<_, Row>(READ_ROW).bind(name))
            .await?;
        let row = match read {
            Some(row) => row,
            None => {
                // Whoever creates it, it starts free at version 0; if someone took it
                // meanwhile, our compare-and-set below is a conflict like any other.
                self.connections.execute(sqlx::query(CREATE_ROW).bind(name)).await?;
                Row {
                    version: 0,
                    owner: String::new(),
                    expired: 1,
                }
            }
        };
        if !row.is_free() {
            return Ok(Attempt::Held { version: row.version });
        }
        Ok(if self.take(name, owner, row.version).await? {
            Attempt::Granted {
                version: row.version + 1,
            }
        } else {
            Attempt::Conflict
        })
    }

    /// Step 2's compare-and-set at `version`: whether it granted.
    async fn take(&self, name: &str, owner: &Owner, version: u64) -> Result<bool, sqlx::Error> {
        let taken = self
            .connections
            .execute(
                sqlx::query(TAKE_IF_UNCHANGED)
                    .bind(owner.as_str())
                    .bind(micros(self.options.ttl))
                    .bind(name)
                    .bind(version),
            )
            .await
            .inspect_err(|_| {
                let granted = (version + 1, owner.as_str().to_owned());
                self.give_back_in_background(name, &[granted]);
            })?;
        Ok(taken.rows_affected() == 1)
    }

    /// A grant of `name` at `version`, asked for at `sent`: held here until released,
    /// renewed (step 4), with the version as its fencing token.
    fn guard(&self, name: &str, owner: &Owner, version: u64, sent: Instant) -> LockGuard {
        self.counters.grant();
        self.held.insert((name.to_owned(), version), owner.as_str().to_owned());
        let (keeper, lease) = self.renew_with(name, owner, version, sent);
        let grant = VersionGrant {
            grants: self.clone(),
            name: name.to_owned(),
            owner: owner.as_str().to_owned(),
            version,
            lease: keeper,
        };
        LockGuard::new(name, grant)
            .with_fencing_token(FencingToken::new(BACKEND, 0, version))
            .with_lease(lease)
    }

    /// A statement that changes the row may have run even though its answer never
    /// came: give back what it may have granted, each (version, owner) in order, so the
    /// key is not blocked until the row expires. Each is sent again until MySQL answers,
    /// for at most one TTL; after that the row has expired anyway.
    fn give_back_in_background(&self, name: &str, grants: &[(u64, String)]) {
        let (connections, name, grants) = (self.connections.clone(), name.to_owned(), grants.to_vec());
        let give_up = Instant::now() + self.options.ttl;
        tokio::spawn(async move {
            for (version, owner) in grants {
                let give_back = || sqlx::query(GIVE_BACK).bind(&name).bind(version).bind(&owner);
                connections.execute_until_answered(give_back, give_up).await;
            }
        });
    }

    /// Step 5: an attempt answered after its acquire's deadline granted the row to
    /// nobody who waits for it, so the row goes back.
    fn give_back_late(&self, name: &str, owner: &Owner, late: Result<Attempt, sqlx::Error>) {
        if let Ok(Attempt::Granted { version }) = late {
            tracing::info!(
                name,
                "a grant was answered after its acquire's deadline: giving it back"
            );
            self.give_back_in_background(name, &[(version, owner.as_str().to_owned())]);
        }
    }

    /// Step 4: a lease renewed every `ttl / 3` with a compare-and-set on its version
    /// ([`crate::lock::parts::keepalive`]), or a fixed one. A row past `expires_at` is free for the next
    /// compare-and-set (step 2), so a vanished holder blocks the key for at most one TTL. Nothing needs
    /// sweeping: the row stays.
    fn renew_with(&self, name: &str, owner: &Owner, version: u64, sent: Instant) -> (LeaseKeeper, Lease) {
        let (connections, ttl) = (self.connections.clone(), self.options.ttl);
        let (name_owned, owner) = (name.to_owned(), owner.as_str().to_owned());
        LeaseKeeper::start(self.options.renew, BACKEND, name, ttl, sent, move || {
            let (connections, name, owner) = (connections.clone(), name_owned.clone(), owner.clone());
            async move {
                let renewed = connections
                    .execute(
                        sqlx::query(RENEW)
                            .bind(micros(ttl))
                            .bind(&name)
                            .bind(version)
                            .bind(&owner),
                    )
                    .await
                    .map_err(backend_error)?;
                Ok(renewed.rows_affected() == 1)
            }
        })
    }
}

/// One grant: what its release needs.
struct VersionGrant {
    grants: Grants,
    name: String,
    owner: String,
    version: u64,
    /// The lease: renewed while the grant lives, when renewal is on.
    lease: LeaseKeeper,
}

impl VersionGrant {
    /// No longer renewed, no longer held: what both endings of a grant do first.
    fn end(&mut self) {
        self.lease.stop(); // stop renewing before giving the row away
        self.grants.held.remove(&(self.name.clone(), self.version));
    }
}

#[async_trait]
impl Release for VersionGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        grant.end();
        let given_back = grant
            .grants
            .connections
            .execute(
                sqlx::query(GIVE_BACK)
                    .bind(&grant.name)
                    .bind(grant.version)
                    .bind(&grant.owner),
            )
            .await
            .map_err(backend_error)?;
        if given_back.rows_affected() == 1 {
            if let Some(notices) = &grant.grants.notices {
                notices.announce(&grant.name);
            }
            unpoisoned(&grant.grants.given_back).insert(grant.name, grant.version);
            Ok(())
        } else {
            Err(LockError::Lost { key: grant.name })
        }
    }

    /// Step 6: one compare-and-set on our version and owner gives the row to `next`,
    /// at the next version. No notice goes out: the row never came free.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let mut grant = *self;
        grant.end();
        let sent = Instant::now();
        let handed = grant
            .grants
            .connections
            .execute(
                sqlx::query(HAND_OVER)
                    .bind(next.as_str())
                    .bind(micros(grant.grants.options.ttl))
                    .bind(&grant.name)
                    .bind(grant.version)
                    .bind(&grant.owner),
            )
            .await
            .inspect_err(|_| {
                // Either the row is still ours or it is `next`'s: give back whichever it is.
                let ours = (grant.version, grant.owner.clone());
                let next = (grant.version + 1, next.as_str().to_owned());
                grant.grants.give_back_in_background(&grant.name, &[ours, next]);
            })
            .map_err(backend_error)?;
        if handed.rows_affected() != 1 {
            return Err(LockError::Lost { key: grant.name });
        }
        Ok(HandOver::Granted(grant.grants.guard(
            &grant.name,
            next,
            grant.version + 1,
            sent,
        )))
    }
}

/// What a waiter saw between its tries (step 2). A waiter that saw the row held at version `v` and then
/// hears a release announced compares and sets at `v` straight away, without reading first: a release
/// leaves the row free at the version it was held at. So does the next acquire of the instance that gave
/// the row back at `v` (`Grants::given_back`). If the row moved on (another instance came first), the write
/// changes nothing and the read follows.
#[derive(Default)]
struct Seen {
    /// The version its last read saw the row held at.
    held_at: StdMutex<Option<u64>>,
    /// Whether a release was announced since.
    release_announced: AtomicBool,
}

impl MySqlVersionLock {
    /// One try. The compare-and-set goes first, without a read, at the version this
    /// handle gave the row back at (one try uses it), or after a read that showed the
    /// row held and an announced release, at the version it was held at.
    ///
    /// With a `deadline` (an acquire's, step 5), the wait for a permit ends there, and
    /// so does the wait for MySQL's answer. The statements go on in their own task, and
    /// a grant answered after the deadline is given back.
    async fn try_once(
        &self,
        key: &str,
        owner: &Owner,
        seen: &Seen,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let pass = match self.permits.enter_by(deadline).await {
            Turn::Pass(pass) => pass,
            // Our turn did not come in time: as for a held row, the poll times out.
            Turn::Late => return Err(LockError::Busy { key: key.to_owned() }),
            Turn::Closed => return Err(self.shut_down.refusal()),
        };
        let sent = Instant::now();
        self.grants.counters.attempt();
        let released_since = seen.release_announced.swap(false, Ordering::SeqCst);
        let held_at = unpoisoned(&seen.held_at).take().filter(|_| released_since);
        let free_at = unpoisoned(&self.grants.given_back).remove(key).or(held_at);
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let attempting = async move {
            let attempt = grants.attempt(&name, &owned, free_at).await;
            drop(pass); // the permit is held as long as the statements run
            attempt
        };
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let undo = move |late| grants.give_back_late(&name, &owned, late);
        let attempt = answer_by(deadline, attempting, undo)
            .await
            .unwrap_or(Ok(Attempt::Unanswered));
        let version = match attempt.map_err(backend_error)? {
            Attempt::Granted { version } => version,
            Attempt::Held { version } => {
                *unpoisoned(&seen.held_at) = Some(version);
                return Err(LockError::Busy { key: key.to_owned() });
            }
            Attempt::Conflict => {
                self.grants.counters.conflict();
                return Err(LockError::Busy { key: key.to_owned() });
            }
            Attempt::Unanswered => return Err(LockError::Busy { key: key.to_owned() }),
        };
        Ok(self.grants.guard(key, owner, version, sent))
    }
}

#[async_trait]
impl DistributedLock for MySqlVersionLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        self.try_once(key, owner, &Seen::default(), None).await
    }

    /// Polls; with release notices, each pause ends when a release of `key` is announced, and the try after
    /// it compares and sets at the version last seen held (step 2). A notice is a hint that wakes one
    /// waiter per instance at once; the compare-and-set still decides.
    ///
    /// Step 5: at most `--mysql-permits` attempts of one instance talk to MySQL at once
    /// ([`crate::lock::parts::permits`]); `--mysql-permits 0` takes the bound away, to measure what it
    /// saves. Every try ends by the deadline, however long the TTL: its wait for a permit, and its wait for
    /// MySQL's answer. The statements go on in a task of their own ([`crate::lock::polling::answer_by`]),
    /// and a grant answered after the deadline is given back at once, never handed to a buyer who has given
    /// up.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let deadline = Instant::now() + timeout;
        let seen = &Seen::default();
        let released = self.release_signal(key);
        let wait = |pause: Duration| {
            let released = released.clone();
            async move {
                if pause_unless_released(released.as_deref(), pause).await {
                    seen.release_announced.store(true, Ordering::SeqCst);
                }
            }
        };
        poll_until_granted(key, timeout, || self.try_once(key, owner, seen, Some(deadline)), wait).await
    }

    /// Step 6: a release whose local queue has a buyer waiting ([`crate::sale::local_queue`]) gives the row
    /// to that buyer in one compare-and-set on the holder's version and owner (`HAND_OVER`). The new
    /// version is the new grant's token. One durable write where a release and the next compare-and-set
    /// take two, and no release notice: the row never came free.
    fn hands_over(&self) -> bool {
        true
    }

    /// Gives back every row this handle still holds, and refuses later acquires.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        self.permits.close();
        let held = self.grants.held.take_all();
        for ((name, version), owner) in held {
            self.grants
                .connections
                .execute(sqlx::query(GIVE_BACK).bind(&name).bind(version).bind(&owner))
                .await
                .map_err(backend_error)?;
        }
        Ok(())
    }

    /// Conflicts are work thrown away: under a crowd the statements per sale grow with the number of
    /// waiters, which is the articles' "MySQL cannot hold under high concurrency". The load test measures
    /// it (statements and conflicts per sale, with and without the semaphore).
    fn stats(&self) -> Option<LockCounters> {
        Some(self.grants.counters.stats(&self.permits))
    }
}
