//! The MySQL pool of `src/store/mysql.rs`: a connection used a moment ago goes to the
//! next statement without a ping first, and one idle long enough is pinged, so a
//! MariaDB that restarted meanwhile costs no failed statement. The MySQL locks keep
//! their connections between statements (`src/lock/parts/kept_connections.rs`), so
//! they send no ping at all while busy, and a kept connection the server closed fails
//! one attempt at most; a connection whose statement nobody waits for any more closes
//! instead of going back to the pool. Against a MariaDB of the test's own, whose
//! counters only this test moves (the last test: the shared one, through a proxy).

use testkit::nemesis::Fault;

use std::time::{Duration, Instant};

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::mysql_version::MySqlVersionLock;
use seckill::lock::DistributedLock;
use sqlx::MySqlPool;

/// The pings the server has answered since it started (MariaDB counts a `COM_PING`
/// among its admin commands).
async fn pings(pool: &MySqlPool) -> u64 {
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_admin_commands'")
        .fetch_one(pool)
        .await
        .unwrap();
    value.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_pool_sends_no_ping_before_each_statement() {
    let mariadb = testkit::PrivateServer::mariadb();
    let pool = seckill::store::mysql::connect_checked(&mariadb.mysql_url(), 4)
        .await
        .unwrap();
    const STATEMENTS: u64 = 200;
    let before = pings(&pool).await;
    let started = Instant::now();
    for _ in 0..STATEMENTS {
        sqlx::query("SELECT 1").execute(&pool).await.unwrap();
    }
    let took = started.elapsed();
    // sqlx itself pings each connection it takes back, off the caller's path; the ping
    // that counts is the one before a statement, which sqlx's default sends too.
    let per_statement = (pings(&pool).await - before - 1) as f64 / STATEMENTS as f64;
    println!(
        "{STATEMENTS} statements one after another: {per_statement:.2} pings each, {:.0} µs each",
        took.as_micros() as f64 / STATEMENTS as f64
    );
    assert!(
        per_statement <= 1.1,
        "{per_statement:.2} pings per statement: a ping before statements as well as after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_window_is_pinged_and_replaced_after_a_restart() {
    let mut mariadb = testkit::PrivateServer::mariadb();
    let pool = seckill::store::mysql::connect_checked(&mariadb.mysql_url(), 2)
        .await
        .unwrap();
    sqlx::query("SELECT 1").execute(&pool).await.unwrap();
    mariadb.stop();
    mariadb.restart();
    // Idle past the window: the pool pings its old connections, finds them dead, and
    // opens new ones, so the first statement after the restart succeeds.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for statement in 1..=4 {
        sqlx::query("SELECT 1")
            .execute(&pool)
            .await
            .unwrap_or_else(|error| panic!("statement {statement} after the restart failed: {error}"));
    }
}

/// Longer than any of these tests: no grant expires, and none is renewed.
const LOCK_TTL: Duration = Duration::from_secs(10);

/// A `mysql-version` lock on `pool`.
fn version_lock(pool: &MySqlPool) -> MySqlVersionLock {
    MySqlVersionLock::new(
        pool.clone(),
        MySqlLockOptions {
            ttl: LOCK_TTL,
            renew: false,
            permits: Some(4),
        },
    )
}

/// Takes and gives back `key` on `lock` `GRANTS` times, and counts the server's pings
/// per grant. sqlx pings a connection it takes back in a task of its own, so the count
/// waits a moment for any such ping to arrive.
async fn pings_per_grant(pool: &MySqlPool, lock: &dyn DistributedLock, key: &str) -> f64 {
    const GRANTS: u64 = 100;
    let before = pings(pool).await;
    for _ in 0..GRANTS {
        let guard = lock.try_acquire(key, &testkit::owner()).await.unwrap();
        guard.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The count's own statement may be pinged on its way back: one at most.
    (pings(pool).await - before).saturating_sub(1) as f64 / GRANTS as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_locks_send_no_ping_while_busy() {
    let mariadb = testkit::PrivateServer::mariadb();
    let pool = seckill::store::mysql::connect_checked(&mariadb.mysql_url(), 8)
        .await
        .unwrap();
    let table = MySqlLock::new(
        pool.clone(),
        MySqlLockOptions {
            ttl: LOCK_TTL,
            renew: false,
            permits: Some(4),
        },
    );
    let version = version_lock(&pool);
    for (name, lock) in [("mysql", &table as &dyn DistributedLock), ("mysql-version", &version)] {
        let per_grant = pings_per_grant(&pool, lock, &format!("pings-{name}")).await;
        println!("{name}: {per_grant:.2} pings per grant (a grant and its release are two statements or more)");
        assert!(
            per_grant <= 0.05,
            "{name} sent {per_grant:.2} pings per grant: its connections went back to the pool"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_the_server_closed_fails_one_attempt_only() {
    let mariadb = testkit::PrivateServer::mariadb();
    let pool = seckill::store::mysql::connect_checked(&mariadb.mysql_url(), 8)
        .await
        .unwrap();
    let lock = version_lock(&pool);
    let key = "killed-connection";
    let guard = lock.try_acquire(key, &testkit::owner()).await.unwrap();
    guard.release().await.unwrap(); // its connection is kept now

    // Another session kills every connection of the lock's pool, the kept one among them.
    let admin = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&mariadb.mysql_url())
        .await
        .unwrap();
    let theirs: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM information_schema.processlist WHERE user = 'seckill' AND id <> CONNECTION_ID()",
    )
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!theirs.is_empty(), "the lock's pool has connections to kill");
    let killed = theirs.len();
    for id in theirs {
        // A number the server gave: nothing to escape.
        let kill = sqlx::AssertSqlSafe(format!("KILL {id}"));
        sqlx::query(kill).execute(&admin).await.unwrap();
    }

    // Within the 500 ms trust a connection is used without a ping, kept or pooled: each
    // killed one may fail one attempt, the price chaos.md counts. None may fail twice,
    // so an attempt succeeds before the failures outnumber the killed connections.
    let mut failed = 0;
    loop {
        match lock.try_acquire(key, &testkit::owner()).await {
            Ok(guard) => {
                guard.release().await.unwrap();
                break;
            }
            Err(error) => {
                failed += 1;
                assert!(
                    failed <= killed,
                    "{failed} attempts failed after {killed} connections were killed: a dead one \
                     was used twice. The last: {error}"
                );
            }
        }
    }
    println!("{killed} connections killed, {failed} attempts failed before one succeeded");
}

/// A statement its caller stopped waiting for (a renewal cut short by its own timeout,
/// say) closes its connection. Given back, the pool would ping it, and against a
/// silent server that ping waits as long as TCP does, holding a place in the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_its_caller_stopped_waiting_for_closes_its_connection() {
    let proxy = testkit::nemesis::Proxy::start(testkit::mysql_port()).await;
    let pool = testkit::mysql_pool_through(proxy.port).await;
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: false,
        permits: Some(3),
    };
    let lock = MySqlLock::new(pool.clone(), options);
    let held = lock
        .acquire(
            &testkit::unique_key("abandoned"),
            &testkit::owner(),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    let open = pool.size();
    proxy.strike(Fault::Blackhole);

    let cut_short = tokio::time::timeout(Duration::from_millis(200), held.release()).await;
    assert!(
        cut_short.is_err(),
        "the release should still be waiting on the silent server"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        pool.size(),
        open - 1,
        "the abandoned statement's connection is still counted in the pool"
    );
}
