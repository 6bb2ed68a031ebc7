//! Helpers shared by the integration tests. They need a real Redis: `make test`
//! starts one. A missing server fails the test loudly; nothing is skipped.
#![allow(dead_code)]

use std::time::Duration;

use seckill::lock::redis::RedisLockOptions;

/// The Redis the tests use, `SECKILL_TEST_REDIS_URL` or the standard local port.
/// `db` picks a logical database, so tests that use the fixed stock keys do not collide.
pub fn redis_url(db: u8) -> String {
    let base = std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    format!("{}/{db}", base.trim_end_matches('/'))
}

/// A client that has answered a PING, or a panic that says how to get one.
pub async fn redis_client(db: u8) -> redis::Client {
    let url = redis_url(db);
    let client = redis::Client::open(url.as_str()).expect("SECKILL_TEST_REDIS_URL is a Redis URL");
    let ping = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut connection).await
    };
    match tokio::time::timeout(Duration::from_secs(3), ping).await {
        Ok(Ok(_)) => client,
        outcome => panic!(
            "these tests need Redis at {url}, which did not answer ({outcome:?}). \
             Run `make test` (it starts the servers) or `make services` first."
        ),
    }
}

pub async fn connection(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    client.get_multiplexed_async_connection().await.expect("Redis answered a moment ago")
}

/// A key no other test (or earlier run) uses.
pub fn unique_key(label: &str) -> String {
    format!("test:{label}:{:016x}", rand::random::<u64>())
}

pub fn redis_options(ttl_ms: u64, renew: bool) -> RedisLockOptions {
    RedisLockOptions { ttl: Duration::from_millis(ttl_ms), renew }
}

/// Runs `tasks_per_lock` tasks per lock; each adds 1 to a Redis counter `iterations`
/// times by a deliberately non-atomic read, pause, write, holding its lock around it.
/// Returns the final counter: `locks.len() * tasks_per_lock * iterations` if and only
/// if no two read-modify-writes overlapped.
pub async fn racing_increments(
    client: &redis::Client,
    locks: Vec<std::sync::Arc<dyn seckill::lock::DistributedLock>>,
    tasks_per_lock: usize,
    iterations: usize,
) -> i64 {
    let counter = unique_key("counter");
    let lock_key = unique_key("lock");
    let mut tasks = Vec::new();
    for lock in locks {
        for _ in 0..tasks_per_lock {
            let (lock, counter, lock_key) = (lock.clone(), counter.clone(), lock_key.clone());
            let mut connection = connection(client).await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..iterations {
                    let guard = lock.acquire(&lock_key, Duration::from_secs(20)).await.expect("lock within 20 s");
                    let value: i64 = redis::cmd("GET")
                        .arg(&counter)
                        .query_async::<Option<i64>>(&mut connection)
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    // Give another task every chance to read the same value.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    redis::cmd("SET").arg(&counter).arg(value + 1).query_async::<()>(&mut connection).await.unwrap();
                    lock.release(guard).await.expect("release by the holder");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("increment task panicked");
    }
    let mut connection = connection(client).await;
    let total: i64 = redis::cmd("GET").arg(&counter).query_async(&mut connection).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&counter).query_async(&mut connection).await.unwrap();
    total
}

/// An instance on a free port, selling from Redis database `db`.
pub async fn instance(strategy: seckill::lock::Strategy, db: u8, acquire_timeout_ms: u64) -> seckill::server::Instance {
    redis_client(db).await; // fail loudly if Redis is missing
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    config.redis_url = redis_url(db);
    config.acquire_timeout_ms = acquire_timeout_ms;
    seckill::server::Instance::start(config).await.expect("instance starts")
}
