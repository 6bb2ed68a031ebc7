//! Connecting to MySQL (or MariaDB), with errors that say what to do, and applying
//! the migrations in `migrations/`.
//!
//! One pool per instance; its timeouts are short on purpose, so that a buyer gets a
//! clear 503 quickly when the database is down.

use std::time::Duration;

use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::Connection;

/// How long a request waits for a free connection (or a new one) before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// A connection back in the pool for less than this is handed out without a ping, as
/// HikariCP (Spring Boot's pool) does with its `aliveBypassWindowMs` of 500 ms. sqlx's
/// default pings every connection it hands out: one more round trip before each
/// statement, which on a lock's critical path is one more round trip per grant
/// (sqlx issue #1743; its `before_acquire` docs give this recipe). sqlx also pings each
/// connection it takes back, off the caller's path; no option turns that one off, so
/// the MySQL locks keep their connections between statements
/// ([`crate::lock::parts::kept_connections`]), under this same window.
/// The price: a connection that died inside the window (MariaDB restarted under load)
/// fails its next statement, and that buyer gets a 503, where a ping would have swapped
/// it first (docs/results/chaos.md, `mysql-killed`).
pub const TRUSTED_WITHOUT_A_PING: Duration = Duration::from_millis(500);
/// How long that ping may take: a connection whose server went silent is swapped, not
/// waited on for the whole acquire timeout.
const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// Connects, checks the server answers, and applies the migrations. Two instances
/// starting at once are fine: the migrator takes a database lock first.
pub async fn connect_checked(url: &str, pool_size: u32) -> anyhow::Result<MySqlPool> {
    let shown = without_password(url);
    let url_shown = &shown;
    let unreachable = |error: sqlx::Error| {
        anyhow::anyhow!(
            "cannot use MySQL at {url_shown}: {error}.\n  Start it with `make services` (MariaDB on 127.0.0.1:3306, \
             database and user `seckill`), or point --mysql-url / SECKILL_MYSQL_URL at a running server \
             with a database and an account the service may use."
        )
    };
    let pool = MySqlPoolOptions::new()
        .max_connections(pool_size)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|connection, metadata| {
            Box::pin(async move {
                // A connection idle for a while may have been closed by the server (a
                // restart, `wait_timeout`). An error here makes sqlx drop it and hand out
                // another, or open a new one.
                if metadata.idle_for >= TRUSTED_WITHOUT_A_PING {
                    tokio::time::timeout(PING_TIMEOUT, connection.ping())
                        .await
                        .map_err(|_| {
                            std::io::Error::new(std::io::ErrorKind::TimedOut, "ping of an idle connection")
                        })??;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await
        .map_err(unreachable)?;
    migrate(&pool)
        .await
        .map_err(|error| anyhow::anyhow!("applying the migrations in migrations/ to {url_shown} failed: {error}"))?;
    Ok(pool)
}

/// The name of the database lock held while migrating.
const MIGRATION_LOCK: &str = "seckill_migrations";
/// How long a starting instance waits for another one's migrations, in seconds.
const MIGRATION_LOCK_WAIT_SECONDS: i32 = 60;

/// Applies `migrations/` under a named database lock. sqlx's migrator takes one too,
/// but with a timeout of -1, which MariaDB reads as "do not wait": two instances
/// starting together would both apply the same migration. Ours waits; the migrator's
/// own lock on the same connection is then granted at once (named locks are reentrant).
async fn migrate(pool: &MySqlPool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut connection = pool.acquire().await?;
    let (locked,): (Option<i32>,) = sqlx::query_as("SELECT GET_LOCK(?, ?)")
        .bind(MIGRATION_LOCK)
        .bind(MIGRATION_LOCK_WAIT_SECONDS)
        .fetch_one(&mut *connection)
        .await?;
    if locked != Some(1) {
        return Err(format!("another instance held the migration lock for {MIGRATION_LOCK_WAIT_SECONDS} s").into());
    }
    let migrated = sqlx::migrate!("./migrations").run(&mut *connection).await;
    sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *connection)
        .await?;
    Ok(migrated?)
}

/// The URL with its password replaced by `***`, for messages and logs.
pub fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _password)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// MySQL error 1062: a duplicate key.
pub const ER_DUP_ENTRY: u16 = 1062;
/// MySQL error 1213: the transaction was chosen as a deadlock victim and rolled back.
pub const ER_LOCK_DEADLOCK: u16 = 1213;

/// The server's error number, when the server answered with an error.
pub fn error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(error) => error
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|error| error.number()),
        _ => None,
    }
}

/// A duration as the whole microseconds an `INTERVAL ? MICROSECOND` binds.
pub fn micros(duration: Duration) -> u64 {
    duration.as_micros() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            super::without_password("mysql://seckill:secret@127.0.0.1:3306/seckill"),
            "mysql://seckill:***@127.0.0.1:3306/seckill"
        );
        assert_eq!(
            super::without_password("mysql://127.0.0.1/seckill"),
            "mysql://127.0.0.1/seckill"
        );
    }
}
