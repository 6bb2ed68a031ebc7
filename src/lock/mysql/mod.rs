//! A lock in a database table: a row per held lock, made unique by its primary key.
//!
//! The lock the original articles build on MySQL (the Chinese SpringBoot posts this project grew from),
//! improved step by step as they do. The table is created by `migrations/0001_lock_table.sql` (and
//! `0004_numbered_grants.sql`); every time is the database server's clock (`NOW(3)`), so instances with
//! different clocks agree on expiry. The SQL statements are in `statements.rs`, one attempt (steps 1 to
//! 4) in `attempt.rs`, and a grant with its release and hand-over in `grants.rs`.
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

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::kept_connections::KeptConnections;
use crate::lock::parts::permits::Permits;
use crate::lock::parts::release_notices::{poll_until_granted_or_noticed, ReleaseNotices};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::{DistributedLock, LockCounters, LockError, LockGuard, Owner};
use crate::store::mysql::micros;

mod statements;
mod grants;
mod attempt;

use grants::Grants;
use statements::{DELETE_ROW, READ_AUTOINC_LOCK_MODE, SWEEP_EXPIRED};

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
             carry a smaller fencing token, and the stock refuses that buyer (src/lock/mysql/mod.rs, step 5).\n  \
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

fn backend_error(error: sqlx::Error) -> LockError {
    LockError::backend(BACKEND, error)
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
