//! Small helpers for the lock tests: options, owners, and the race a lock must close.

use crate::nemesis::Fault;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::redis::RedisLockOptions;
use seckill::lock::{DistributedLock, LockError, Owner};

use super::test_redis::{connection, unique_key};

pub fn redis_options(ttl_ms: u64, renew: bool) -> RedisLockOptions {
    RedisLockOptions {
        ttl: Duration::from_millis(ttl_ms),
        renew,
        ..RedisLockOptions::default()
    }
}

pub fn owner() -> Owner {
    Owner::new("test")
}

/// Runs `tasks_per_lock` tasks per lock; each adds 1 to a Redis counter `iterations`
/// times by a deliberately non-atomic read, pause, write, holding its lock around it.
/// Returns the final counter: `locks.len() * tasks_per_lock * iterations` if and only
/// if no two read-modify-writes overlapped.
pub async fn racing_increments(
    client: &redis::Client,
    locks: Vec<Arc<dyn DistributedLock>>,
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
                    let guard = lock
                        .acquire(&lock_key, &owner(), Duration::from_secs(20))
                        .await
                        .expect("lock within 20 s");
                    let value: i64 = redis::cmd("GET")
                        .arg(&counter)
                        .query_async::<Option<i64>>(&mut connection)
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    // Give another task every chance to read the same value.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    redis::cmd("SET")
                        .arg(&counter)
                        .arg(value + 1)
                        .query_async::<()>(&mut connection)
                        .await
                        .unwrap();
                    guard.release().await.expect("release by the holder");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("increment task panicked");
    }
    let mut connection = connection(client).await;
    let total: i64 = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut connection)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&counter)
        .query_async(&mut connection)
        .await
        .unwrap();
    total
}

/// `lock`, whose rows live `ttl`, talks to MariaDB through `proxy`. It takes a key, then
/// the server goes silent: nothing passes, and no connection closes. The release must
/// fail within a TTL and a second (a statement waits at most one TTL for its answer).
/// The next acquire ends by its own deadline, 1 s, as a timeout: it waited for MySQL's
/// answer as for a held key. TCP alone would wait about 15 minutes. (The error may
/// also be the pool's own: a release that finds no connection recent enough to skip
/// its ping waits for a new one, at most 2 s.)
pub async fn a_mysql_lock_fails_in_time_when_mysql_goes_silent(
    lock: &dyn DistributedLock,
    ttl: Duration,
    proxy: &crate::nemesis::Proxy,
) {
    let in_time = ttl.max(Duration::from_secs(2)) + Duration::from_secs(1);
    let held = lock
        .acquire(&unique_key("silent-mysql"), &owner(), Duration::from_secs(1))
        .await
        .unwrap();
    proxy.strike(Fault::Blackhole);

    let started = Instant::now();
    let released = tokio::time::timeout(in_time, held.release()).await;
    let waited = started.elapsed();
    assert!(
        matches!(released, Ok(Err(LockError::Backend { .. }))),
        "the release against a silent MySQL gave {released:?} after {waited:?}"
    );

    let started = Instant::now();
    let acquired = tokio::time::timeout(
        in_time,
        lock.acquire(&unique_key("silent-mysql"), &owner(), Duration::from_secs(1)),
    )
    .await;
    let waited = started.elapsed();
    assert!(
        matches!(acquired, Ok(Err(LockError::Timeout { .. }))),
        "the acquire against a silent MySQL gave {acquired:?} after {waited:?}"
    );
}

/// How long a buyer waits for the lock in the slow-MySQL tests, and how late its
/// answer may come (a scheduler's slack, far below a statement's TTL-long bound).
pub const SLOW_MYSQL_BUYER_TIMEOUT: Duration = Duration::from_secs(1);
const SLOW_MYSQL_ANSWER_SLACK: Duration = Duration::from_millis(300);
/// How late MySQL answers the first statement that names the slow test's key.
pub const SLOW_MYSQL_LATE_BY: Duration = Duration::from_secs(3);

/// `lock`, with one permit, talks to MariaDB through `proxy`. MySQL runs the first
/// statement that names `name` at once, but its answer comes [`SLOW_MYSQL_LATE_BY`] late:
/// a slow server, as the buyer sees it. The acquire must answer by its deadline, and so
/// must the next buyer's wait for the permit the first attempt still holds. Returns when
/// the first acquire was asked, for the caller's check of the late grant.
pub async fn mysql_acquires_answer_by_their_deadline(
    lock: &dyn DistributedLock,
    name: &str,
    proxy: &crate::nemesis::Proxy,
) -> Instant {
    proxy.hold_the_answer_to(name.as_bytes(), SLOW_MYSQL_LATE_BY);
    let asked = Instant::now();
    let cut_short = tokio::time::timeout(
        Duration::from_secs(5),
        lock.acquire(name, &owner(), SLOW_MYSQL_BUYER_TIMEOUT),
    )
    .await;
    let waited = asked.elapsed();
    assert!(
        matches!(cut_short, Ok(Err(LockError::Timeout { .. })))
            && waited < SLOW_MYSQL_BUYER_TIMEOUT + SLOW_MYSQL_ANSWER_SLACK,
        "an acquire must answer by its deadline, not a statement's TTL later: {:?} after {waited:?}",
        cut_short.map(|acquired| acquired.map(|_| "granted"))
    );

    let started = Instant::now();
    let no_turn = lock
        .acquire(&unique_key("slow-mysql-other"), &owner(), SLOW_MYSQL_BUYER_TIMEOUT)
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(no_turn, Err(LockError::Timeout { .. }))
            && waited < SLOW_MYSQL_BUYER_TIMEOUT + SLOW_MYSQL_ANSWER_SLACK,
        "the wait for a permit must end by the deadline: {:?} after {waited:?}",
        no_turn.map(|_| "granted")
    );
    asked
}
