//! One suite, run against every strategy that promises mutual exclusion.
//!
//! Each strategy supplies `contenders(n)`: `n` handles that compete for the same keys
//! the way the strategy is meant to be used. For a distributed lock that is `n`
//! independent connections, as from `n` processes; for the in-process lock it is `n`
//! handles on one process's lock, which is all that lock promises. It also says what
//! it has (fencing tokens, a lease that can be lost) and how to take its lease away.
//!
//! A new backend joins with one `conformance_suite!` line at the bottom.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::local::LocalLock;
use seckill::lock::redis::RedisLock;
use seckill::lock::reentrant::Reentrant;
use seckill::lock::{DistributedLock, LockError};
use seckill::stock::{SaleRecord, Seller, StockRead, StockStore, WriteOutcome};

/// What a strategy offers, so the suite knows which promises to check.
struct Traits {
    /// Contenders are separate clients (as from separate processes), not one shared handle.
    separate_clients: bool,
    /// Grants carry fencing tokens.
    fencing_tokens: bool,
    /// Grants have a lease that the backend can take away; `lose_lease` does that.
    lease: bool,
    /// A test Redis database of its own, for the tests that use the stock's fixed keys.
    stock_db: u8,
}

type LoseLease = fn(::redis::Client, String) -> Pin<Box<dyn Future<Output = ()> + Send>>;

macro_rules! conformance_suite {
    ($strategy:ident, $traits:expr, $contenders:expr, $lose_lease:expr) => {
        mod $strategy {
            use super::*;

            const TRAITS: Traits = $traits;
            const LOSE_LEASE: LoseLease = $lose_lease;

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
                let guard = locks[0].try_acquire(&key, &common::owner()).await.expect("a free key is granted");
                let started = Instant::now();
                let refused = locks[1].try_acquire(&key, &common::owner()).await;
                assert!(matches!(refused, Err(LockError::Busy { .. })), "expected Busy, got {refused:?}");
                assert!(started.elapsed() < Duration::from_millis(200), "try_acquire waited {:?}", started.elapsed());
                guard.release().await.unwrap();
            }

            #[tokio::test]
            async fn acquire_gives_up_with_a_timeout_error_while_the_lock_is_held() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("timeout");
                let guard = locks[0].acquire(&key, &common::owner(), Duration::from_secs(1)).await.unwrap();
                let started = Instant::now();
                let refused = locks[1].acquire(&key, &common::owner(), Duration::from_millis(300)).await;
                let waited = started.elapsed();
                assert!(matches!(refused, Err(LockError::Timeout { .. })), "expected Timeout, got {refused:?}");
                assert!(waited >= Duration::from_millis(300), "gave up early, after {waited:?}");
                assert!(waited < Duration::from_millis(1500), "overshot the timeout: {waited:?}");
                guard.release().await.unwrap();
            }

            #[tokio::test]
            async fn a_waiter_gets_the_lock_soon_after_it_is_released() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("handover");
                let guard = locks[0].acquire(&key, &common::owner(), Duration::from_secs(1)).await.unwrap();
                let waiter = {
                    let (lock, key) = (locks[1].clone(), key.clone());
                    tokio::spawn(async move {
                        let guard = lock.acquire(&key, &common::owner(), Duration::from_secs(5)).await?;
                        let granted_at = Instant::now();
                        guard.release().await?;
                        Ok::<_, LockError>(granted_at)
                    })
                };
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(!waiter.is_finished(), "the waiter got a lock that was still held");
                let released_at = Instant::now();
                guard.release().await.unwrap();
                let granted_at = waiter.await.unwrap().expect("the waiter gets the lock");
                let handover = granted_at.saturating_duration_since(released_at);
                assert!(handover < Duration::from_millis(200), "handover took {handover:?}");
            }

            #[tokio::test]
            async fn different_keys_do_not_block_each_other() {
                let (_, locks) = contenders(2).await;
                let first = locks[0].try_acquire(&common::unique_key("a"), &common::owner()).await.unwrap();
                let second = locks[1]
                    .try_acquire(&common::unique_key("b"), &common::owner())
                    .await
                    .expect("another key is free");
                first.release().await.unwrap();
                second.release().await.unwrap();
            }

            #[tokio::test]
            async fn an_owner_reenters_a_key_it_holds_and_frees_it_only_at_its_last_release() {
                let (_, locks) = contenders(2).await;
                let (mine, theirs) = (Reentrant::new(locks[0].clone()), Reentrant::new(locks[1].clone()));
                let (me, stranger) = (common::owner(), common::owner());
                let key = common::unique_key("reentrant");

                let outer = mine.acquire(&key, &me, Duration::from_secs(1)).await.unwrap();
                let started = Instant::now();
                let inner = mine.acquire(&key, &me, Duration::from_secs(1)).await.expect("the owner re-enters");
                assert!(started.elapsed() < Duration::from_millis(100), "re-entry waited {:?}", started.elapsed());
                assert_eq!(inner.fencing_token(), outer.fencing_token(), "one grant, one token");

                inner.release().await.unwrap();
                let refused = theirs.try_acquire(&key, &stranger).await;
                assert!(
                    matches!(refused, Err(LockError::Busy { .. })),
                    "freed at the first of two releases: {refused:?}"
                );
                outer.release().await.unwrap();
                let granted =
                    theirs.acquire(&key, &stranger, Duration::from_secs(2)).await.expect("free after the last release");
                granted.release().await.unwrap();
            }

            #[tokio::test]
            async fn fencing_tokens_grow_strictly_with_every_grant() {
                if !TRAITS.fencing_tokens {
                    return; // this strategy issues no tokens; its sale runs unfenced
                }
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("fence");
                let mut tokens = Vec::new();
                for round in 0..6 {
                    let guard = locks[round % 2].acquire(&key, &common::owner(), Duration::from_secs(2)).await.unwrap();
                    tokens.push(guard.fencing_token().expect("every grant carries a token").order());
                    guard.release().await.unwrap();
                }
                assert!(tokens.windows(2).all(|pair| pair[1] > pair[0]), "tokens did not grow: {tokens:?}");
            }

            #[tokio::test]
            async fn a_lost_lease_is_seen_by_the_holder_and_its_write_is_refused() {
                if !TRAITS.lease {
                    return; // no lease to lose: the lock lasts until it is released
                }
                let (client, locks) = contenders(2).await;
                let stock_client = common::redis_client(TRAITS.stock_db).await;
                let store = StockStore::new(::redis::aio::ConnectionManager::new(stock_client).await.unwrap());
                store.reset(10).await.unwrap();
                let key = common::unique_key("lost");

                let old = locks[0].acquire(&key, &common::owner(), Duration::from_secs(2)).await.unwrap();
                let old_token = old.fencing_token().cloned();
                assert_eq!(store.read(old_token.as_ref()).await.unwrap(), StockRead::Stock(10));
                assert!(old.is_held());

                LOSE_LEASE(client, key.clone()).await;
                let new = locks[1].acquire(&key, &common::owner(), Duration::from_secs(10)).await.expect("taken over");
                let new_token = new.fencing_token().cloned();
                assert_eq!(store.read(new_token.as_ref()).await.unwrap(), StockRead::Stock(10));

                tokio::time::timeout(Duration::from_secs(5), old.lease().lost())
                    .await
                    .expect("the old holder learns that its lease is gone");
                assert!(!old.is_held());
                let seller = Seller { instance: "old".into(), port: 0, strategy: "test" };
                let record = SaleRecord::new(&seller, "stale-write", 10, old_token.clone(), 0.0, 0);
                let refused = store.write(&record, 9, old_token.as_ref()).await.unwrap();
                if TRAITS.fencing_tokens {
                    assert_eq!(
                        refused,
                        WriteOutcome::Fenced,
                        "the stock took a write from a holder whose lock is gone"
                    );
                    let snapshot = store.snapshot().await.unwrap();
                    assert_eq!((snapshot.stock, snapshot.lucky), (10, 0), "something was sold: {snapshot:?}");
                }
                assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
                new.release().await.unwrap();
            }

            #[tokio::test]
            async fn shutdown_frees_what_was_held_and_refuses_new_acquires() {
                let (_, locks) = contenders(2).await;
                let key = common::unique_key("shutdown");
                let held = locks[0].acquire(&key, &common::owner(), Duration::from_secs(1)).await.unwrap();
                locks[0].shutdown().await.expect("shutdown succeeds");
                let refused = locks[0].try_acquire(&common::unique_key("after"), &common::owner()).await;
                assert!(matches!(refused, Err(LockError::ShutDown { .. })), "expected ShutDown, got {refused:?}");
                if TRAITS.separate_clients {
                    // Another process gets the key at once, not after a lease runs out.
                    let started = Instant::now();
                    let granted = locks[1].acquire(&key, &common::owner(), Duration::from_secs(5)).await.unwrap();
                    assert!(started.elapsed() < Duration::from_millis(500), "freed only after {:?}", started.elapsed());
                    granted.release().await.unwrap();
                }
                drop(held);
            }
        }
    };
}

conformance_suite!(
    redis,
    Traits { separate_clients: true, fencing_tokens: true, lease: true, stock_db: 20 },
    |client: ::redis::Client, n: usize| async move {
        let mut locks: Vec<Arc<dyn DistributedLock>> = Vec::new();
        for _ in 0..n {
            // One connection per contender, as from separate processes.
            locks.push(Arc::new(RedisLock::connect(&client, common::redis_options(900, true)).await.unwrap()));
        }
        locks
    },
    |client, key| Box::pin(async move {
        // As if the lease ran out: the key is gone, and the renewal will find it so.
        let _: () = ::redis::cmd("DEL").arg(&key).query_async(&mut common::connection(&client).await).await.unwrap();
    })
);

conformance_suite!(
    local,
    Traits { separate_clients: false, fencing_tokens: false, lease: false, stock_db: 21 },
    |_client: ::redis::Client, n: usize| async move {
        // One process, one lock: every contender shares it.
        let lock: Arc<dyn DistributedLock> = Arc::new(LocalLock::default());
        vec![lock; n]
    },
    |_, _| Box::pin(async {})
);
