//! The project's test Redis, and which of its databases belongs to which test file.
//!
//! The tests write only to the project's own test Redis (`make services` starts it on
//! port 6390 with its data in `.run/redis-test`), and check that it is that one before
//! they write, so a user's own Redis is never touched. `SECKILL_TEST_REDIS_URL` points
//! them elsewhere on purpose.
//!
//! Tests that use the stock's fixed key names need a logical database of their own, or
//! two test files running at once would sell from one stock. [`DATABASES`] is the one
//! table of who owns which database; [`redis_url`] refuses a database that the table
//! does not give to the calling test file, so the table cannot drift.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Which test file owns which databases: `(package folder/test file, databases)`.
pub const DATABASES: &[(&str, RangeInclusive<u8>)] = &[
    // Shared: tests that use unique keys only (locks, counters), never the stock's.
    ("*", 0..=0),
    ("seckill/http", 1..=9),
    ("loadtest/e2e", 10..=19),
    ("seckill/lock_conformance", 20..=29),
    ("seckill/fencing", 30..=39), // 38: a lock Redis restarted empty
    ("seckill/http", 40..=41),
    ("seckill/backend_outages", 42..=43),
    ("loadtest/e2e", 44..=44),
    ("seckill/backend_outages", 45..=46),
    ("loadtest/e2e", 47..=47),
    ("loadtest/degrade", 48..=49),
    ("loadtest/e2e", 50..=50),
    ("seckill/hostile", 51..=53),
    ("seckill/chaos", 54..=55),
    ("seckill/metrics", 56..=56),
    ("loadtest/lockbench", 57..=57),
    ("loadtest/bench", 58..=58),
    ("seckill/dashboard", 59..=60),
    ("seckill/local_queue", 61..=61),
    ("seckill/cli", 62..=62),
    ("seckill/own_servers", 63..=63),
    ("loadtest/nemesis", 68..=68),
    ("seckill/chaos", 69..=69),
    ("seckill/shutdown", 72..=72),
    ("seckill/shutdown", 78..=78),
    ("seckill/degrade", 73..=73),
    ("seckill/clock_jumps", 74..=76),
    ("seckill/failover", 79..=79),
    ("loadtest/e2e", 80..=82),
    ("seckill/segments", 83..=86),
    ("seckill/sold_out", 87..=90),
    ("seckill/one_per_buyer", 91..=94),
    ("loadtest/e2e", 95..=97),
    ("seckill/orders", 98..=100),
    ("loadtest/e2e", 101..=102),
    ("seckill/mysql_token_order", 103..=103),
    ("seckill/fencing", 104..=106),
    ("seckill/sold_out", 107..=107),
    ("seckill/fencing", 108..=108),
    ("loadtest/e2e", 109..=109),
];

/// The test file this code is compiled into, as [`DATABASES`] names it.
fn this_test_file() -> String {
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let package = if package == "loadtest" {
        package
    } else {
        "seckill".to_owned()
    };
    format!("{package}/{}", env!("CARGO_CRATE_NAME"))
}

/// Panics unless [`DATABASES`] gives `db` to the calling test file.
fn check_ownership(db: u8) {
    let file = this_test_file();
    let owned = DATABASES
        .iter()
        .any(|(owner, dbs)| (*owner == "*" || *owner == file) && dbs.contains(&db));
    assert!(owned, "test Redis database {db} is not given to {file} in DATABASES (tests/common/test_redis.rs): add it there, on a database no other file uses");
}

/// The project's test Redis, as `scripts/services.sh` starts it.
pub const PROJECT_TEST_REDIS: &str = "redis://127.0.0.1:6390";

/// The project's folder, from the root tests or from `loadtest/tests`.
pub fn project_root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = if manifest.join("scripts/services.sh").exists() {
        manifest
    } else {
        manifest.parent().unwrap()
    };
    root.to_path_buf()
}

/// The folder the project's test Redis keeps its data in: how we recognise it.
fn project_test_redis_dir() -> String {
    project_root().join(".run/redis-test").display().to_string()
}

/// The Redis the tests use. `db` picks a logical database, so tests that use the
/// fixed stock keys do not collide.
pub fn redis_url(db: u8) -> String {
    check_ownership(db);
    let base = std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| PROJECT_TEST_REDIS.to_owned());
    format!("{}/{db}", base.trim_end_matches('/'))
}

/// Whether the Redis at `url` is the project's test Redis (by its data folder).
pub async fn is_project_test_redis(url: &str) -> Result<bool, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let (_, dir): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query_async(&mut connection)
        .await?;
    Ok(dir == project_test_redis_dir())
}

/// A client that has answered a PING and is safe to write to, or a panic that says
/// how to get one.
pub async fn redis_client(db: u8) -> redis::Client {
    let url = redis_url(db);
    match tokio::time::timeout(Duration::from_secs(3), is_project_test_redis(&url)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) if std::env::var("SECKILL_TEST_REDIS_URL").is_ok() => {} // chosen on purpose
        Ok(Ok(false)) => panic!(
            "the Redis at {url} is not the project's test Redis (its data folder is not {}); \
             the tests write to it, so they refuse. Stop that server and run `make test`.",
            project_test_redis_dir()
        ),
        outcome => panic!(
            "these tests need the project's test Redis at {url}, which did not answer ({outcome:?}). \
             Run `make test` (it starts the servers) or `make services` first."
        ),
    }
    redis::Client::open(url.as_str()).expect("a Redis URL")
}

pub async fn connection(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answered a moment ago")
}

/// A key no other test (or earlier run) uses.
pub fn unique_key(label: &str) -> String {
    format!("test:{label}:{:016x}", rand::random::<u64>())
}

/// Deletes `key`, as an expiry would.
pub async fn delete_key(client: &redis::Client, key: &str) {
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut connection(client).await)
        .await
        .expect("Redis answers");
}
