//! One suite, run against every strategy that promises mutual exclusion.
//!
//! Each strategy supplies `contenders(n)`: `n` handles that compete for the same keys
//! the way the strategy is meant to be used. For a distributed lock that is `n`
//! independent connections, as from `n` processes; for the in-process lock it is `n`
//! handles on one process's lock, which is all that lock promises.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::local::LocalLock;
use seckill::lock::redis::RedisLock;
use seckill::lock::{DistributedLock, LockError};

macro_rules! conformance_suite {
    ($strategy:ident, $contenders:expr) => {
        mod $strategy {
            use super::*;

            async fn contenders(n: usize) -> (::redis::Client, Vec<Arc<dyn DistributedLock>>) {
                let client = common::redis_client(0).await;
                let locks = ($contenders)(client.clone(), n).await;
                (client, locks)
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_read_modify_writes_under_the_lock_lose_no_update() {
                let (client, locks) = contenders(2).await;
                let total = common::racing_increments(&client, locks, 4, 25).await;
                assert_eq!(total, 2 * 4 * 25, "some increments overlapped: the lock let two holders in");
            }

            #[tokio::test]
            async fn try_acquire_fails_fast_while_the_lock_is_held() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("held");
                let guard = locks[0].try_acquire(&key).await.expect("a free key is granted");
                let started = Instant::now();
                let refused = locks[1].try_acquire(&key).await;
                assert!(matches!(refused, Err(LockError::Busy { .. })), "expected Busy, got {refused:?}");
                assert!(started.elapsed() < Duration::from_millis(200), "try_acquire waited {:?}", started.elapsed());
                locks[0].release(guard).await.unwrap();
            }

            #[tokio::test]
            async fn acquire_gives_up_with_a_timeout_error_while_the_lock_is_held() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("timeout");
                let guard = locks[0].acquire(&key, Duration::from_secs(1)).await.unwrap();
                let started = Instant::now();
                let refused = locks[1].acquire(&key, Duration::from_millis(300)).await;
                let waited = started.elapsed();
                assert!(matches!(refused, Err(LockError::Timeout { .. })), "expected Timeout, got {refused:?}");
                assert!(waited >= Duration::from_millis(300), "gave up early, after {waited:?}");
                assert!(waited < Duration::from_millis(1500), "overshot the timeout: {waited:?}");
                locks[0].release(guard).await.unwrap();
            }

            #[tokio::test]
            async fn a_waiter_gets_the_lock_soon_after_it_is_released() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("handover");
                let guard = locks[0].acquire(&key, Duration::from_secs(1)).await.unwrap();
                let waiter = {
                    let (lock, key) = (locks[1].clone(), key.clone());
                    tokio::spawn(async move {
                        let guard = lock.acquire(&key, Duration::from_secs(5)).await?;
                        let granted_at = Instant::now();
                        lock.release(guard).await?;
                        Ok::<_, LockError>(granted_at)
                    })
                };
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(!waiter.is_finished(), "the waiter got a lock that was still held");
                let released_at = Instant::now();
                locks[0].release(guard).await.unwrap();
                let granted_at = waiter.await.unwrap().expect("the waiter gets the lock");
                let handover = granted_at.saturating_duration_since(released_at);
                assert!(handover < Duration::from_millis(200), "handover took {handover:?}");
            }

            #[tokio::test]
            async fn different_keys_do_not_block_each_other() {
                let (_, locks) = contenders(2).await;
                let first = locks[0].try_acquire(&common::unique_key("a")).await.unwrap();
                let second = locks[1].try_acquire(&common::unique_key("b")).await.expect("another key is free");
                locks[0].release(first).await.unwrap();
                locks[1].release(second).await.unwrap();
            }
        }
    };
}

conformance_suite!(redis, |client: ::redis::Client, n: usize| async move {
    let mut locks: Vec<Arc<dyn DistributedLock>> = Vec::new();
    for _ in 0..n {
        // One connection per contender, as from separate processes.
        locks.push(Arc::new(RedisLock::connect(&client, common::redis_options(2000, true)).await.unwrap()));
    }
    locks
});

conformance_suite!(local, |_client: ::redis::Client, n: usize| async move {
    // One process, one lock: every contender shares it.
    let lock: Arc<dyn DistributedLock> = Arc::new(LocalLock::default());
    vec![lock; n]
});
