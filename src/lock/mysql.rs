//! A lock in a database table: a row per held lock, made unique by its primary key.
//!
//! The lock the original articles build on MySQL (the Chinese SpringBoot posts this project grew from),
//! improved step by step as they do. The table is created by `migrations/0001_lock_table.sql` (and
//! `0004_numbered_grants.sql`); every time is the database server's clock (`NOW(3)`), so instances with
//! different clocks agree on expiry.
//!
//! ## How it works
//! 1. **Acquire inserts a row** `(name, owner, hold_count = 1, expires_at)`. The primary key on `name` does
//!    the locking, and the row's AUTO_INCREMENT `grant_id` numbers the grant (`Grants::insert_row`).
//! 2. **Reentrant.** On a duplicate key, one read says who holds the row; the same owner raises its hold
//!    count. Release lowers it, and deletes the row with the last hold (`MySqlGrant::give_back`).
//! 3. **Expiry.** A row past `expires_at` is deleted by one conditional `DELETE` (`DELETE_EXPIRED`), and the
//!    taker inserts its own. A live holder renews every `ttl / 3`; a sweeper clears old rows (`sweep_expired_rows`).
//! 4. **Blocking** polls with a jittered backoff, cut short by a release notice, behind a semaphore; every
//!    attempt ends by the acquire's deadline ([`MySqlLock::acquire`]).
//! 5. **Fencing token.** The row's `grant_id`, taken by the insert itself. A later grant has a larger id
//!    only under `innodb_autoinc_lock_mode = 0` ([`NEEDED_AUTOINC_LOCK_MODE`]).
//! 6. **Direct hand-over.** A release whose local queue has a buyer waiting gives the row to that buyer in
//!    one statement ([`MySqlLock::hands_over`]).
//!
//! ## Limitations
//! - **One database.** The lock is as available as the database; a failover that loses the last commits
//!   can lose a grant, and then two holders exist (the fencing token still orders them).
//! - **Cost.** A grant is two statements (the insert, and the release's delete), or one when it was handed
//!   over (step 6); a refused attempt two. Every waiter polls, woken early by a release notice.
//! - **Pauses.** A holder paused past its expiry loses its row to a taker; the stock refuses its older token.
//! - **A silent server.** A statement waits at most one TTL for its answer (`Grants::connections`). The
//!   buyer waits only until its acquire's deadline (step 4).
//! - **A server setting.** The tokens need `innodb_autoinc_lock_mode = 0` (step 5), which a server takes
//!   only at start (`--innodb-autoinc-lock-mode=0`); see [`NEEDED_AUTOINC_LOCK_MODE`].
//!
//! ## References
//! - MySQL, "Locking Reads" and InnoDB row locks: <https://dev.mysql.com/doc/refman/8.0/en/innodb-locking-reads.html>
//! - Martin Kleppmann, "How to do distributed locking" (fencing tokens):
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use sqlx::mysql::MySqlPool;
use tokio::task::JoinHandle;

use crate::lock::parts::counters::AttemptCounters;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::store::mysql::{error_number, micros, ER_LOCK_DEADLOCK};

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::keepalive::LeaseKeeper;
use crate::lock::parts::kept_connections::KeptConnections;
use crate::lock::parts::permits::{Permits, Turn};
use crate::lock::parts::release_notices::{poll_until_granted_or_noticed, ReleaseNotices};
use crate::lock::parts::setup::Setup;
use crate::lock::polling::answer_by;
use crate::lock::{DistributedLock, FencingToken, HandOver, LockCounters, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "mysql";

/// What this strategy is (see [`crate::lock::description`]).
/// On MySQL, with the row's id as the token.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(Mysql),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the release, answered, then its
/// notice on the stock Redis wakes a waiter, which inserts the row and so takes its token. See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (DELETE row), answered", Mysql, Write, 1.0),
    step("wake-up (notice on the stock Redis)", StockRedis, Read, 1.0),
    step("acquire (INSERT row, its id the token)", Mysql, Write, 1.0),
];

/// Step 1: the insert that is the lock, and numbers it (`grant_id`). Binds: name, owner, ttl in microseconds.
const INSERT_ROW: &str = "INSERT INTO seckill_locks (name, owner, hold_count, expires_at) \
     VALUES (?, ?, 1, NOW(3) + INTERVAL ? MICROSECOND)";
/// Step 2: the owner re-enters its own live row. Binds: name, owner.
const REENTER: &str = "UPDATE seckill_locks SET hold_count = hold_count + 1 \
     WHERE name = ? AND owner = ? AND expires_at > NOW(3)";
/// After a refused insert: who holds the row, whether it expired, its grant. Binds: name.
const READ_HOLDER: &str = "SELECT owner, CAST(expires_at <= NOW(3) AS SIGNED), grant_id, hand_overs \
     FROM seckill_locks WHERE name = ?";
/// Step 3: clear an expired row, so that the taker can insert its own (step 1) for a new id: a holder that
/// vanished does not block forever. InnoDB locks the row and re-checks the condition, and the primary key
/// admits one insert, so two takers can never both win. Binds: name.
const DELETE_EXPIRED: &str = "DELETE FROM seckill_locks WHERE name = ? AND expires_at <= NOW(3)";
/// Step 3's renewal, every `ttl / 3` ([`crate::lock::parts::keepalive`]): only our own grant, only while it
/// has not expired. Binds: ttl in µs, name, owner, token.
const RENEW: &str = "UPDATE seckill_locks SET expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND owner = ? AND grant_id = ? AND expires_at > NOW(3)";
/// Release of a hold that is not the last. Binds: name, owner, token.
const RELEASE_ONE_HOLD: &str = "UPDATE seckill_locks SET hold_count = hold_count - 1 \
     WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count > 1";
/// Release of the last hold. Binds: name, owner, token.
const DELETE_LAST_HOLD: &str =
    "DELETE FROM seckill_locks WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count = 1";
/// Shutdown: the row, whatever its hold count. Binds: name, owner, token.
const DELETE_ROW: &str = "DELETE FROM seckill_locks WHERE name = ? AND owner = ? AND grant_id = ?";
/// Step 6: the release that grants the row to the next owner, one UPDATE on the last
/// hold of our own grant. Binds: the next owner, ttl in µs, name, owner, grant id.
const HAND_OVER: &str = "UPDATE seckill_locks \
     SET owner = ?, hand_overs = hand_overs + 1, expires_at = NOW(3) + INTERVAL ? MICROSECOND \
     WHERE name = ? AND owner = ? AND grant_id = ? AND hold_count = 1";
/// The sweeper: rows expired for a whole TTL already. Binds: ttl in microseconds.
const SWEEP_EXPIRED: &str = "DELETE FROM seckill_locks WHERE expires_at < NOW(3) - INTERVAL ? MICROSECOND";
/// The epoch of the tokens taken from `grant_id` and `hand_overs` (steps 5 and 6), so they outrank every
/// older one at the stock's fence. An earlier version raised a counter in `seckill_lock_fences` and stamped
/// it on the row: three statements per grant, and a half-made row to clean up when the second or third
/// failed. Those tokens were epoch 0, and `grant_id` alone was epoch 1.
const TOKEN_EPOCH: u64 = 2;
/// A token is `grant_id * HAND_OVERS_PER_ROW + hand_overs` (step 6), so a row is handed
/// over fewer times than this; then it is released, and the next grant is a new row.
/// Decimal, so that a token reads as its row and its hand-over: 1234005.
const HAND_OVERS_PER_ROW: u64 = 1000;
/// How the server hands out AUTO_INCREMENT ids (step 5). Binds: none.
const READ_AUTOINC_LOCK_MODE: &str = "SELECT CAST(@@innodb_autoinc_lock_mode AS SIGNED)";
/// The `innodb_autoinc_lock_mode` under which a later grant has a larger id (step 5):
/// "traditional", an insert's id taken and used within one lock on the table.
///
/// InnoDB's AUTO_INCREMENT counter only grows (across deleted rows and server restarts), and a name's next
/// row is inserted only after its last one is gone. So a later grant has a larger id, on one condition: the
/// server hands the ids out in the order the inserts finish, which is this mode. The default (1 on MariaDB,
/// 2 on MySQL 8) hands an id out when an insert starts, under a short mutex. An insert that stalls just
/// after (its thread descheduled) can then commit after a later insert of the same name has been granted,
/// has sold and has released. Its grant carries the smaller token, and the stock refuses its buyer (CI met
/// this once, on 2026-11-26: token 855 read after 858). With mode 0 the insert keeps the table's AUTO-INC
/// lock to the end of its statement, so the next insert takes its id after this one has found the name free
/// or held. The wiring refuses a server with another mode ([`autoinc_lock_mode`]);
/// `tests/it/lock/mysql_token_order.rs` pauses a MariaDB thread in that gap, under each mode. A server
/// takes the mode only at start. In it, every insert into the table waits for the one before it to finish
/// its statement, other names' inserts too.
pub const NEEDED_AUTOINC_LOCK_MODE: i64 = 0;

/// The server's `innodb_autoinc_lock_mode`: the lock's tokens keep the grants' order
/// only when it is [`NEEDED_AUTOINC_LOCK_MODE`] (step 5).
pub async fn autoinc_lock_mode(pool: &MySqlPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(READ_AUTOINC_LOCK_MODE).fetch_one(pool).await
}

/// How a MySQL lock behaves: the lock table ([`MySqlLock`]) and the version lock
/// ([`crate::lock::mysql_version`]) take the same options.
#[derive(Clone, Copy, Debug)]
pub struct MySqlLockOptions {
    /// How long a grant lives without renewal.
    pub ttl: Duration,
    /// Renew every `ttl / 3` while held. Off only to demonstrate expiry.
    pub renew: bool,
    /// How many acquire attempts of this instance may talk to MySQL at once (the articles'
    /// semaphore, see [`crate::lock::parts::permits`]). Fewer than the pool's connections, so that
    /// renewals and releases, which take no permit, always find a connection. `None`:
    /// no bound, to measure what the bound saves.
    pub permits: Option<usize>,
}

/// The flags of the MySQL locks, `mysql`, `mysql-version` and `redis-degrade`'s fallback
/// (flattened into the config).
#[derive(Clone, Debug, clap::Args)]
pub struct MySqlArgs {
    /// Connections in this instance's MySQL pool; more than --mysql-permits.
    #[arg(long, env = "SECKILL_MYSQL_POOL", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub mysql_pool: u32,
    /// Lock attempts of this instance that may talk to MySQL at once (the semaphore in
    /// front of MySQL); fewer than --mysql-pool, so renewals and releases always get a
    /// connection. 0: no semaphore (to measure what it saves).
    #[arg(long, env = "SECKILL_MYSQL_PERMITS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub mysql_permits: u32,
}

impl MySqlArgs {
    /// The semaphore in front of MySQL: `None` for `--mysql-permits 0`.
    pub fn permits(&self) -> Option<usize> {
        (self.mysql_permits > 0).then_some(self.mysql_permits as usize)
    }

    /// The options of a MySQL lock built from these flags: renewed, with the
    /// setup's TTL.
    pub fn options(&self, setup: &Setup) -> MySqlLockOptions {
        MySqlLockOptions {
            ttl: setup.ttl,
            renew: true,
            permits: self.permits(),
        }
    }

    /// The pool of the MySQL locks, after checking that the semaphore leaves
    /// connections free for renewals and releases.
    pub async fn connect(&self, mysql_url: &str) -> anyhow::Result<MySqlPool> {
        if self.mysql_permits >= self.mysql_pool {
            anyhow::bail!(
                "--mysql-permits ({}) must be less than --mysql-pool ({}): renewals and releases need \
                 connections that waiting buyers cannot take. Lower the permits or raise the pool \
                 (--mysql-permits 0 takes the semaphore away)",
                self.mysql_permits,
                self.mysql_pool
            );
        }
        if self.permits().is_none() {
            tracing::warn!(
                pool = self.mysql_pool,
                "--mysql-permits 0: no semaphore in front of MySQL; every waiter polls it, up to the pool's size"
            );
        }
        crate::store::mysql::connect_checked(mysql_url, self.mysql_pool).await
    }
}

/// Builds `--lock mysql` from its flags.
pub async fn build(args: &MySqlArgs, setup: &Setup) -> anyhow::Result<MySqlLock> {
    let pool = args.connect(&setup.mysql_url).await?;
    refuse_out_of_order_tokens(&setup.mysql_url, &pool).await?;
    let notices = setup.release_notices().await?;
    Ok(MySqlLock::new(pool, args.options(setup)).with_release_notices(notices))
}

/// Refuses a MySQL server on which the lock table's tokens could come out of the grants'
/// order (step 5): a buyer would then be refused by the stock's fence.
async fn refuse_out_of_order_tokens(mysql_url: &str, pool: &MySqlPool) -> anyhow::Result<()> {
    let url = crate::store::mysql::without_password(mysql_url);
    let mode = autoinc_lock_mode(pool)
        .await
        .with_context(|| format!("reading innodb_autoinc_lock_mode from MySQL at {url}"))?;
    let needed = NEEDED_AUTOINC_LOCK_MODE;
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

/// A lock whose grants are rows of `seckill_locks`.
pub struct MySqlLock {
    grants: Grants,
    permits: Permits,
    shut_down: ShutDownSwitch,
    sweeper: JoinHandle<()>,
}

/// What making a grant and giving it back need, shared by the lock and its guards: a
/// hand-over (step 6) makes the next grant from the guard of the last.
#[derive(Clone)]
struct Grants {
    /// Every statement of the lock goes through its kept connections; the sweeper uses the pool. There a
    /// statement waits at most one TTL for its answer: a row it wrote later has expired by then.
    connections: KeptConnections,
    options: MySqlLockOptions,
    counters: Arc<AttemptCounters>,
    /// Grants this handle holds, grant id to (name, owner), so `shutdown` can delete them.
    held: HeldGrants<u64, (String, String)>,
    /// Release notices on a Redis, when the wiring gives some: MySQL cannot notify.
    notices: Option<Arc<ReleaseNotices>>,
}

/// One grant of a row: the row's id, and how many times the row was handed over
/// before this grant (step 6). Together they are the fencing token.
#[derive(Clone, Copy, Debug)]
struct RowGrant {
    grant_id: u64,
    hand_overs: u64,
}

impl RowGrant {
    fn inserted(grant_id: u64) -> Self {
        RowGrant {
            grant_id,
            hand_overs: 0,
        }
    }

    fn token(self) -> FencingToken {
        FencingToken::new(
            BACKEND,
            TOKEN_EPOCH,
            self.grant_id * HAND_OVERS_PER_ROW + self.hand_overs,
        )
    }

    /// The grant a hand-over of this one makes, if the token has room for it.
    fn handed_over(self) -> Option<Self> {
        let hand_overs = self.hand_overs + 1;
        (hand_overs < HAND_OVERS_PER_ROW).then_some(RowGrant { hand_overs, ..self })
    }
}

fn backend_error(error: sqlx::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// How a row was granted.
#[derive(Clone, Copy)]
enum Granted {
    /// A new grant (inserted, or taken over from an expired holder): a new token.
    Fresh,
    /// The owner re-entered its own row: its token stays.
    Reentered,
}

impl MySqlLock {
    /// Uses `pool` (migrated already, see [`crate::store::mysql`]) and starts the sweeper.
    pub fn new(pool: MySqlPool, options: MySqlLockOptions) -> Self {
        let sweeper = tokio::spawn(sweep_expired_rows(pool.clone(), options.ttl));
        MySqlLock {
            grants: Grants {
                connections: KeptConnections::new(pool, options.ttl),
                options,
                counters: Arc::default(),
                held: HeldGrants::default(),
                notices: None,
            },
            permits: Permits::new(options.permits),
            shut_down: ShutDownSwitch::new(BACKEND),
            sweeper,
        }
    }

    /// Announces this handle's releases and wakes its waiters through `notices`
    /// ([`crate::lock::parts::release_notices`]): a waiter tries as soon as another
    /// instance released, instead of at its next poll. The lock still decides.
    /// `None` leaves the waiters polling (`--release-notices false`).
    pub fn with_release_notices(mut self, notices: Option<ReleaseNotices>) -> Self {
        self.grants.notices = notices.map(Arc::new);
        self
    }

    /// One attempt. With a `deadline` (an acquire's, step 4), the wait for a permit ends
    /// there, and so does the wait for MySQL's answer. The statements go on in their
    /// own task, and a grant answered after the deadline is given back.
    async fn attempt(&self, key: &str, owner: &Owner, deadline: Option<Instant>) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let pass = match self.permits.enter_by(deadline).await {
            Turn::Pass(pass) => pass,
            // Our turn did not come in time: as for a held row, the poll times out.
            Turn::Late => return Err(LockError::Busy { key: key.to_owned() }),
            Turn::Closed => return Err(self.shut_down.refusal()),
        };
        let sent = Instant::now();
        self.grants.counters.attempt();
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let granting = async move {
            let granted = grants.grant_row(&name, &owned).await;
            drop(pass); // the permit is held as long as the statements run
            granted
        };
        let (grants, name, owned) = (self.grants.clone(), key.to_owned(), owner.clone());
        let undo = move |late| grants.give_back_late(&name, &owned, late);
        // No answer by the deadline: as for a held row, the poll times out.
        let granted = answer_by(deadline, granting, undo).await.unwrap_or(Ok(None));
        let Some((granted, row)) = granted.map_err(backend_error)? else {
            return Err(LockError::Busy { key: key.to_owned() });
        };
        Ok(self.grants.guard(key, owner, row, granted, sent))
    }
}

/// How often a release is retried after losing a deadlock, and the pause before each retry
/// (grown by the attempt number): waiters' inserts come and go, so a retry soon wins.
const RELEASE_ATTEMPTS: u32 = 20;
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(2);

/// Whether this transaction was chosen as a deadlock victim and rolled back.
fn is_deadlock(error: &sqlx::Error) -> bool {
    error_number(error) == Some(ER_LOCK_DEADLOCK)
}

/// Step 3's sweeper: deletes rows that expired a whole TTL ago, every TTL, for the life of the lock, as the
/// articles' scheduled task does.
async fn sweep_expired_rows(pool: MySqlPool, ttl: Duration) {
    loop {
        tokio::time::sleep(ttl).await;
        match sqlx::query(SWEEP_EXPIRED).bind(micros(ttl)).execute(&pool).await {
            Ok(swept) if swept.rows_affected() > 0 => {
                tracing::info!(rows = swept.rows_affected(), "swept lock rows whose holders vanished")
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "the lock sweeper could not reach MySQL; will retry"),
        }
    }
}

impl Drop for MySqlLock {
    fn drop(&mut self) {
        self.sweeper.abort();
    }
}

impl Grants {
    /// Steps 1 to 3: `None` if someone else holds `name`.
    ///
    /// InnoDB may pick this transaction as a deadlock victim when several buyers insert
    /// the same name while its holder deletes it (a known pattern of duplicate-key
    /// checks); the server has rolled it back by then, and it counts as "held": the
    /// caller backs off and tries again.
    async fn grant_row(&self, name: &str, owner: &Owner) -> Result<Option<(Granted, RowGrant)>, sqlx::Error> {
        match self.try_grant_row(name, owner).await {
            Err(error) if is_deadlock(&error) => Ok(None),
            granted_or_failed => granted_or_failed,
        }
    }

    /// A refused attempt costs two statements (the insert, and a read of who holds the row and until when);
    /// only a re-entry or a take-over writes again. Each statement commits on its own: under InnoDB's
    /// default isolation an `UPDATE` keeps the rows it scanned locked until its transaction ends, and a
    /// crowd of waiters in open transactions would stall the holder.
    async fn try_grant_row(&self, name: &str, owner: &Owner) -> Result<Option<(Granted, RowGrant)>, sqlx::Error> {
        // Each statement runs on its own (autocommit), so a waiter's attempt holds row
        // locks only for one statement, never across the next: waiters cannot queue up
        // behind each other on the holder's row.
        if let Some(grant_id) = self.insert_row(name, owner).await? {
            return Ok(Some((Granted::Fresh, RowGrant::inserted(grant_id))));
        }
        // Held: one read says by whom and until when, so that a refused attempt costs a
        // write and a read, and only the rare re-entry or take-over writes again.
        let holder: Option<(String, i64, u64, u64)> = self
            .connections
            .fetch_optional(sqlx::query_as(READ_HOLDER).bind(name))
            .await?;
        match holder {
            Some((holder, expired, grant_id, hand_overs)) if holder == owner.as_str() && expired == 0 => {
                let reentered = self
                    .connections
                    .execute(sqlx::query(REENTER).bind(name).bind(owner.as_str()))
                    .await?;
                let row = RowGrant { grant_id, hand_overs };
                Ok((reentered.rows_affected() == 1).then_some((Granted::Reentered, row)))
            }
            Some((_, expired, _, _)) if expired != 0 => {
                self.connections.execute(sqlx::query(DELETE_EXPIRED).bind(name)).await?;
                // Another taker may insert first; then its row is the grant, and ours is "held".
                let inserted = self.insert_row(name, owner).await?;
                Ok(inserted.map(|grant_id| (Granted::Fresh, RowGrant::inserted(grant_id))))
            }
            Some(_) => Ok(None), // held, and alive
            None => Ok(None),    // released since our insert: the next attempt finds it free
        }
    }

    /// Step 1: the row's id if the insert made it ours, `None` on a duplicate key. The primary key on
    /// `name` does the locking: a second insert for a held name fails with a duplicate-key error, which
    /// means "held". The row's `grant_id` is AUTO_INCREMENT, and that id is the fencing token (step 5).
    async fn insert_row(&self, name: &str, owner: &Owner) -> Result<Option<u64>, sqlx::Error> {
        let inserted = self
            .connections
            .execute(
                sqlx::query(INSERT_ROW)
                    .bind(name)
                    .bind(owner.as_str())
                    .bind(micros(self.options.ttl)),
            )
            .await;
        match inserted {
            Ok(inserted) => Ok(Some(inserted.last_insert_id())),
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Step 4: an attempt answered after its acquire's deadline granted nothing to
    /// anyone, so what it did goes back: the new row, or the extra hold.
    fn give_back_late(&self, name: &str, owner: &Owner, late: Result<Option<(Granted, RowGrant)>, sqlx::Error>) {
        let Ok(Some((granted, row))) = late else { return };
        let statement = match granted {
            Granted::Fresh => DELETE_LAST_HOLD,
            Granted::Reentered => RELEASE_ONE_HOLD,
        };
        let (grants, name, owner) = (self.clone(), name.to_owned(), owner.as_str().to_owned());
        let give_up = Instant::now() + self.options.ttl;
        tracing::info!(
            name,
            "a grant was answered after its acquire's deadline: giving it back"
        );
        tokio::spawn(async move {
            let give_back = || sqlx::query(statement).bind(&name).bind(&owner).bind(row.grant_id);
            grants.connections.execute_until_answered(give_back, give_up).await;
            if let (Granted::Fresh, Some(notices)) = (granted, &grants.notices) {
                notices.announce(&name);
            }
        });
    }

    /// A grant of row `row` of `name`, asked for at `sent`: held here until released
    /// (a fresh one), renewed, with its fencing token.
    fn guard(&self, name: &str, owner: &Owner, row: RowGrant, granted: Granted, sent: Instant) -> LockGuard {
        if let Granted::Fresh = granted {
            self.counters.grant();
            self.held
                .insert(row.grant_id, (name.to_owned(), owner.as_str().to_owned()));
        }
        let (connections, ttl) = (self.connections.clone(), self.options.ttl);
        let (name_owned, owner_name) = (name.to_owned(), owner.as_str().to_owned());
        let (keeper, lease) = LeaseKeeper::start(self.options.renew, BACKEND, name, ttl, sent, move || {
            let (connections, name, owner) = (connections.clone(), name_owned.clone(), owner_name.clone());
            async move {
                let renewed = connections
                    .execute(
                        sqlx::query(RENEW)
                            .bind(micros(ttl))
                            .bind(&name)
                            .bind(&owner)
                            .bind(row.grant_id),
                    )
                    .await
                    .map_err(backend_error)?;
                Ok(renewed.rows_affected() == 1)
            }
        });
        let grant = MySqlGrant {
            grants: self.clone(),
            name: name.to_owned(),
            owner: owner.as_str().to_owned(),
            row,
            reentered: matches!(granted, Granted::Reentered),
            lease: keeper,
        };
        LockGuard::new(name, grant)
            .with_fencing_token(row.token())
            .with_lease(lease)
    }

    /// A hand-over that may have run although its answer never came: delete the row
    /// if one of `owners` has it, in order, so the key is not blocked until it expires.
    /// Each delete is sent again until MySQL answers, for at most one TTL; after that
    /// the row has expired anyway.
    fn delete_in_background(&self, name: &str, owners: [String; 2], grant_id: u64) {
        let (connections, name) = (self.connections.clone(), name.to_owned());
        let give_up = Instant::now() + self.options.ttl;
        tokio::spawn(async move {
            for owner in owners {
                let delete = || sqlx::query(DELETE_ROW).bind(&name).bind(&owner).bind(grant_id);
                connections.execute_until_answered(delete, give_up).await;
            }
        });
    }
}

/// One grant: what its release needs.
struct MySqlGrant {
    grants: Grants,
    name: String,
    owner: String,
    row: RowGrant,
    /// The owner took the row again while holding it: this hold is seldom the last.
    reentered: bool,
    /// The lease: renewed while the grant lives, when renewal is on.
    lease: LeaseKeeper,
}

impl MySqlGrant {
    /// Step 2's release: one hold less, and the row gone with the last, only for our own owner and token.
    /// `true` if it was ours. A fresh grant is nearly always the last hold, a re-entered one nearly never:
    /// each first tries the statement that usually ends it, so a release is one round trip.
    async fn give_back(&self) -> Result<bool, sqlx::Error> {
        let order = if self.reentered {
            [RELEASE_ONE_HOLD, DELETE_LAST_HOLD]
        } else {
            [DELETE_LAST_HOLD, RELEASE_ONE_HOLD]
        };
        for statement in order {
            let changed = self
                .grants
                .connections
                .execute(
                    sqlx::query(statement)
                        .bind(&self.name)
                        .bind(&self.owner)
                        .bind(self.row.grant_id),
                )
                .await?;
            if changed.rows_affected() == 1 {
                if statement == DELETE_LAST_HOLD {
                    self.grants.held.remove(&self.row.grant_id);
                }
                return Ok(true);
            }
        }
        self.grants.held.remove(&self.row.grant_id); // neither: the row was no longer ours
        Ok(false)
    }
}

#[async_trait]
impl Release for MySqlGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the row goes
        let mut attempt = 1;
        let ours = loop {
            match grant.give_back().await {
                Err(error) if is_deadlock(&error) && attempt < RELEASE_ATTEMPTS => {
                    tokio::time::sleep(RELEASE_RETRY_PAUSE * attempt).await;
                    attempt += 1;
                }
                given_back => break given_back.map_err(backend_error)?,
            }
        };
        if ours {
            if let Some(notices) = &grant.grants.notices {
                notices.announce(&grant.name);
            }
            Ok(())
        } else {
            Err(LockError::Lost {
                key: grant.name.clone(),
            })
        }
    }

    /// Step 6: one UPDATE gives the row to `next`, one hand-over on. No notice goes
    /// out: the row never came free. A re-entered hold is not the last, and a row at the
    /// end of its tokens' range must go: both release instead.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let Some(handed) = self.row.handed_over().filter(|_| !self.reentered) else {
            return self.release().await.map(|()| HandOver::Released);
        };
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the row changes hands
        let sent = Instant::now();
        let changed = grant
            .grants
            .connections
            .execute(
                sqlx::query(HAND_OVER)
                    .bind(next.as_str())
                    .bind(micros(grant.grants.options.ttl))
                    .bind(&grant.name)
                    .bind(&grant.owner)
                    .bind(grant.row.grant_id),
            )
            .await;
        match changed {
            Ok(changed) if changed.rows_affected() == 1 => {
                let grants = grant.grants.clone();
                grants.held.remove(&grant.row.grant_id);
                Ok(HandOver::Granted(grants.guard(
                    &grant.name,
                    next,
                    handed,
                    Granted::Fresh,
                    sent,
                )))
            }
            // Not ours, or not our last hold (the owner re-entered through another guard),
            // or rolled back as a deadlock's victim: the release tells them apart, and
            // retries a deadlock.
            Ok(_) => Box::new(grant).release().await.map(|()| HandOver::Released),
            Err(error) if is_deadlock(&error) => Box::new(grant).release().await.map(|()| HandOver::Released),
            Err(error) => {
                // Either the row is still ours or it is `next`'s: delete whichever it is.
                let grants = &grant.grants;
                grants.held.remove(&grant.row.grant_id);
                let owners = [grant.owner.clone(), next.as_str().to_owned()];
                grants.delete_in_background(&grant.name, owners, grant.row.grant_id);
                Err(backend_error(error))
            }
        }
    }
}

#[async_trait]
impl DistributedLock for MySqlLock {
    /// One attempt.
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        self.attempt(key, owner, None).await
    }

    /// Step 4: the trait's bounded loop, with a jittered backoff until the timeout. With release notices,
    /// each pause ends when a release of `key` is announced: MySQL cannot wake a waiter, so the wiring
    /// announces each release on the stock Redis ([`crate::lock::parts::release_notices`]); a hint, the row
    /// still decides. At most `--mysql-permits` attempts of one instance talk to MySQL at once (a
    /// semaphore, as the articles put in front of MySQL, [`MySqlLockOptions::permits`]), so a crowd of
    /// waiters cannot take every pooled connection from the holder's renewal and release. Every attempt
    /// ends by the deadline, however long the TTL (see `attempt`): a grant answered later is given back at
    /// once (the new row deleted, the extra hold taken off), never handed to a buyer who has given up.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let deadline = Instant::now() + timeout;
        poll_until_granted_or_noticed(self.grants.notices.as_deref(), key, timeout, || {
            self.attempt(key, owner, Some(deadline))
        })
        .await
    }

    /// The row keeps the owner's hold count itself (step 2).
    fn keeps_reentrancy(&self) -> bool {
        true
    }

    /// Step 6: a release whose local queue has a buyer waiting ([`crate::sale::local_queue`]) gives the row
    /// to that buyer in one statement (`HAND_OVER`): one durable write where a delete and the next insert
    /// take two. An UPDATE takes no new AUTO_INCREMENT id, so the row counts its hand-overs, and the token
    /// is `grant_id * 1000 + hand_overs`. A hand-over outranks the grant it came from, and a new row
    /// outranks every hand-over of the last. A row handed over 999 times is released instead, so the count
    /// never reaches the id's digits. A holder whose row was taken over changes nothing, and learns it was
    /// lost.
    fn hands_over(&self) -> bool {
        true
    }

    /// Deletes every row this handle still holds, and refuses later acquires.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        self.permits.close();
        self.sweeper.abort();
        let held = self.grants.held.take_all();
        for (grant_id, (name, owner)) in held {
            self.grants
                .connections
                .execute(sqlx::query(DELETE_ROW).bind(&name).bind(&owner).bind(grant_id))
                .await
                .map_err(backend_error)?;
        }
        Ok(())
    }

    /// A lock table has no version conflicts: a refused insert is simply "held".
    fn stats(&self) -> Option<LockCounters> {
        Some(self.grants.counters.stats(&self.permits))
    }
}
