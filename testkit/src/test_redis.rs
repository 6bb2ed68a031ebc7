//! The project's test Redis, and a sale of a test's own in it.
//!
//! The tests write only to the project's own test Redis (`make services` starts it on
//! port 6390 with its data in `.run/redis-test`), and check that it is that one before
//! they write, so a user's own Redis is never touched. `SECKILL_TEST_REDIS_URL` points
//! them elsewhere on purpose.
//!
//! Tests that sell run a [`TestSale`] of their own: a key prefix no other test (or
//! earlier run) uses, given to the instances as `--key-prefix`. Every key of the sale
//! starts with it, the lock's too, so tests running at once never sell from one stock.

use std::time::Duration;

use seckill::sale::keys::Keys;

/// A sale of a test's own: its keys carry a prefix no other test uses.
#[derive(Clone, Debug)]
pub struct TestSale {
    keys: Keys,
}

impl Default for TestSale {
    fn default() -> Self {
        Self::new()
    }
}

impl TestSale {
    /// A sale under a prefix drawn at random.
    pub fn new() -> Self {
        TestSale {
            keys: Keys::with_prefix(&format!("t-{:016x}:", rand::random::<u64>())),
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// What the instances get as `--key-prefix`.
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// Takes the lock of the sale's whole stock as another holder would, for `ms`: the
    /// `redis` lock's key, set under a value no instance owns.
    pub async fn hold_the_stock_lock(&self, ms: u64) {
        let _: () = redis::cmd("SET")
            .arg(self.keys.lock_of(seckill::sale::segments::Segment::WHOLE))
            .arg("someone-else")
            .arg("PX")
            .arg(ms)
            .query_async(&mut connection(&redis_client().await).await)
            .await
            .expect("Redis answers");
    }

    /// Deletes every key of the sale, as a Redis that lost its data would, and nothing
    /// of the other tests' sales.
    pub async fn lose_every_key(&self) {
        let mut redis = connection(&redis_client().await).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix()))
            .query_async(&mut redis)
            .await
            .expect("Redis answers");
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut redis)
                .await
                .expect("Redis answers");
        }
    }
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

/// The Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| PROJECT_TEST_REDIS.to_owned())
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
pub async fn redis_client() -> redis::Client {
    let url = redis_url();
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

/// A connection to the master `client` names, as the service holds its stock's.
pub async fn master_connection(client: &redis::Client) -> seckill::store::redis_master::MasterConnection {
    seckill::store::redis_master::MasterConnection::connect(&client.into())
        .await
        .expect("Redis answered a moment ago")
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
