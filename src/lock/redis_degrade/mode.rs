//! The mode every instance of `redis-degrade` shares (Redis or MySQL), and each
//! instance's lease on it: the part of the degrade protocol that lives in MySQL.
//!
//! See [`super`] for the protocol and why it is safe; this module is its
//! bookkeeping. Tables: `migrations/0003_lock_modes.sql`. Every time is the database
//! server's clock, turned into a local deadline with a drift margin on the safe side.
//!
//! ## How it works
//! 1. **One mode row** per degrading lock: `(mode, epoch, grants_from)`.
//! 2. **A lease per instance.** Every `ttl / 3` an instance renews its lease on the
//!    *current* epoch, in one transaction that reads the mode row with a shared lock
//!    and writes `expires_at = NOW(3) + ttl` for that epoch. It may grant in that
//!    epoch's mode while its lease is trusted (`sent + ttl - drift`), and not before
//!    `grants_from`.
//! 3. **A switch** locks the mode row (`FOR UPDATE`, so it waits for every renewal in
//!    flight), reads the latest lease expiry of the old epoch (and any earlier one), and
//!    writes the new mode, `epoch + 1`, and `grants_from = max(now, that expiry, the old
//!    grants_from)`. From then on no lease of
//!    the old epoch is renewed (a renewal reads the new epoch), so by `grants_from`
//!    every instance has stopped trusting it.

use std::time::{Duration, Instant};

use sqlx::mysql::MySqlPool;

use crate::lock::parts::keepalive::drift;

/// Which lock grants, in one epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Redis,
    Mysql,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Redis => "redis",
            Mode::Mysql => "mysql",
        }
    }

    fn parse(text: &str) -> Option<Mode> {
        match text {
            "redis" => Some(Mode::Redis),
            "mysql" => Some(Mode::Mysql),
            _ => None,
        }
    }
}

/// What one instance may do now, as its last renewal (or switch) told it.
#[derive(Clone, Copy, Debug)]
pub struct ModeLease {
    pub mode: Mode,
    pub epoch: u64,
    /// Grants in this epoch may start here (local clock, drift margin added).
    pub grants_from: Instant,
    /// ... and must end here, unless a renewal moves it.
    pub trusted_until: Instant,
}

impl ModeLease {
    /// Whether this instance may hold a grant of this epoch at `now`.
    ///
    /// Every grant of a new epoch starts after its `grants_from` (plus the drift margin). Within
    /// one epoch only one lock grants (Redis, or MySQL), and it excludes itself. So no two holders
    /// overlap, across instances and in both directions, as long as pauses are shorter than the
    /// drift margin lets through. That is the same assumption every lease-based lock makes; where
    /// it fails, the epoch fences (step 4 of [`super`]).
    pub fn allows_grants_at(&self, now: Instant) -> bool {
        self.grants_from <= now && now < self.trusted_until
    }
}

/// Creates the mode row of a lock used for the first time: Redis, epoch 1. Binds: name.
const CREATE_MODE: &str = "INSERT IGNORE INTO seckill_lock_modes (name, mode, epoch, grants_from) \
     VALUES (?, 'redis', 1, NOW(3))";
/// Step 2: the current mode, locked against a switch until the renewal commits. Binds: name.
const READ_MODE_SHARED: &str = "SELECT mode, epoch, \
     CAST(GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(3), grants_from), 0) AS SIGNED) AS wait_us \
     FROM seckill_lock_modes WHERE name = ? LOCK IN SHARE MODE";
/// Step 2. Binds: instance, name, epoch, ttl in µs.
const RENEW_LEASE: &str = "INSERT INTO seckill_lock_mode_leases (instance, name, epoch, expires_at) \
     VALUES (?, ?, ?, NOW(3) + INTERVAL ? MICROSECOND) \
     ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), expires_at = VALUES(expires_at)";
/// Step 3: the mode, locked until the switch commits. Binds: name.
const READ_MODE_FOR_SWITCH: &str = "SELECT mode, epoch FROM seckill_lock_modes WHERE name = ? FOR UPDATE";
/// Step 3: how long until the last lease of this or any earlier epoch ends (0 if none
/// is left). Binds: name, epoch.
const LAST_LEASE_ENDS_IN: &str =
    "SELECT CAST(GREATEST(COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at)), 0), 0) \
     AS SIGNED) FROM seckill_lock_mode_leases WHERE name = ? AND epoch <= ? LOCK IN SHARE MODE";
/// Step 3. Never earlier than the old `grants_from`: a switch soon after another must
/// still wait for the leases the first one waits for. Binds: mode, µs until the old
/// epochs' last lease ends, name, old epoch.
const SWITCH: &str = "UPDATE seckill_lock_modes \
     SET mode = ?, epoch = epoch + 1, grants_from = GREATEST(grants_from, NOW(3) + INTERVAL ? MICROSECOND) \
     WHERE name = ? AND epoch = ?";
/// At shutdown: this instance holds no lease any more. Binds: instance.
const DROP_LEASE: &str = "DELETE FROM seckill_lock_mode_leases WHERE instance = ?";

/// One instance's side of the shared mode.
pub struct SharedMode {
    pool: MySqlPool,
    name: String,
    instance: String,
    ttl: Duration,
}

impl SharedMode {
    /// The mode of lock `name`, as instance `instance` sees it; creates the row if needed.
    pub async fn open(pool: MySqlPool, name: &str, instance: &str, ttl: Duration) -> Result<Self, sqlx::Error> {
        sqlx::query(CREATE_MODE).bind(name).execute(&pool).await?;
        Ok(SharedMode {
            pool,
            name: name.to_owned(),
            instance: instance.to_owned(),
            ttl,
        })
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Step 2: renews this instance's lease on the current epoch and says what it may do.
    ///
    /// The second link of "Why no two holders overlap" in [`super`]: an instance trusts its lease
    /// until `sent + ttl - drift`, where `sent` precedes the renewal's server time. With clocks that
    /// drift less than `drift` (1% of the TTL plus 2 ms) over one TTL, it stops trusting the lease
    /// before `expires_at`.
    pub async fn renew(&self) -> Result<ModeLease, sqlx::Error> {
        let sent = Instant::now();
        let mut transaction = self.pool.begin().await?;
        let (mode, epoch, wait_us): (String, u64, i64) = sqlx::query_as(READ_MODE_SHARED)
            .bind(&self.name)
            .fetch_one(&mut *transaction)
            .await?;
        sqlx::query(RENEW_LEASE)
            .bind(&self.instance)
            .bind(&self.name)
            .bind(epoch)
            .bind(self.ttl.as_micros() as u64)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        let answered = Instant::now();
        let mode = Mode::parse(&mode).ok_or_else(|| sqlx::Error::Protocol(format!("unknown lock mode `{mode}`")))?;
        Ok(ModeLease {
            mode,
            epoch,
            // The wait was measured on the server at some moment before we got the
            // answer: counting it from the answer is later, so on the safe side.
            grants_from: match wait_us {
                ..=0 => sent, // the epoch's grants started already
                wait => answered + Duration::from_micros(wait as u64) + drift(self.ttl),
            },
            trusted_until: sent + self.ttl.saturating_sub(drift(self.ttl)),
        })
    }

    /// Step 3: switches from `from_epoch` to `to`. `false` if someone else switched first.
    /// A switch locks the mode row, so it waits for renewals in flight, and writes
    /// `grants_from`: the moment the last lease on the old epoch ends.
    ///
    /// The first link of "Why no two holders overlap" in [`super`]: a lease on epoch `e` is only
    /// renewed by a transaction that read epoch `e` with a shared lock on the mode row. The switch
    /// holds an exclusive lock on it, so every such renewal committed before the switch and none
    /// after. Each set `expires_at = its own time + ttl`, and the switch read the largest of them.
    /// So `grants_from >= every expires_at of epoch e`, and of earlier epochs, and the previous
    /// `grants_from`.
    pub async fn switch(&self, from_epoch: u64, to: Mode) -> Result<bool, sqlx::Error> {
        let mut transaction = self.pool.begin().await?;
        let (_, epoch): (String, u64) = sqlx::query_as(READ_MODE_FOR_SWITCH)
            .bind(&self.name)
            .fetch_one(&mut *transaction)
            .await?;
        if epoch != from_epoch {
            transaction.rollback().await?;
            return Ok(false);
        }
        let (last_lease_ends_in_us,): (i64,) = sqlx::query_as(LAST_LEASE_ENDS_IN)
            .bind(&self.name)
            .bind(from_epoch)
            .fetch_one(&mut *transaction)
            .await?;
        sqlx::query(SWITCH)
            .bind(to.as_str())
            .bind(last_lease_ends_in_us.max(0))
            .bind(&self.name)
            .bind(from_epoch)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(true)
    }

    /// Gives up this instance's lease (at shutdown), so a later switch need not wait for it.
    pub async fn leave(&self) -> Result<(), sqlx::Error> {
        sqlx::query(DROP_LEASE).bind(&self.instance).execute(&self.pool).await?;
        Ok(())
    }
}
