//! What only a lease-based lock must do: expire, renew, refuse a non-owner, fence.

mod common;

use std::time::{Duration, Instant};

use seckill::lock::redis::RedisLock;
use seckill::lock::{DistributedLock, LockError};

async fn lock(ttl_ms: u64, renew: bool) -> (redis::Client, RedisLock) {
    let client = common::redis_client(0).await;
    let lock = RedisLock::connect(&client, common::redis_options(ttl_ms, renew)).await.unwrap();
    (client, lock)
}

async fn get(client: &redis::Client, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(&mut common::connection(client).await).await.unwrap()
}

#[tokio::test]
async fn release_is_refused_once_the_lease_expired_and_another_owner_holds_the_key() {
    let (client, slow) = lock(200, false).await;
    let (_, fast) = lock(5000, true).await;
    let key = common::unique_key("owner");

    let stale = slow.acquire(&key, Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // the "GC pause" outlives the lease
    let current = fast.try_acquire(&key).await.expect("the expired key is free");

    let refused = slow.release(stale).await;
    assert!(matches!(refused, Err(LockError::Lost { .. })), "expected Lost, got {refused:?}");
    assert_eq!(
        get(&client, &key).await.as_deref(),
        Some(current.token.as_str()),
        "the stale release deleted the new owner's lock"
    );
    fast.release(current).await.expect("the real owner can release");
    assert_eq!(get(&client, &key).await, None);
}

#[tokio::test]
async fn release_leaves_a_key_alone_when_its_token_is_someone_elses() {
    let (client, lock) = lock(5000, true).await;
    let key = common::unique_key("foreign");
    let guard = lock.acquire(&key, Duration::from_secs(1)).await.unwrap();
    // Someone else's value lands on the key (as after an expiry and a new grant).
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("someone-else")
        .query_async(&mut common::connection(&client).await)
        .await
        .unwrap();
    let refused = lock.release(guard).await;
    assert!(matches!(refused, Err(LockError::Lost { .. })), "expected Lost, got {refused:?}");
    assert_eq!(get(&client, &key).await.as_deref(), Some("someone-else"));
}

#[tokio::test]
async fn a_lock_whose_holder_vanished_is_free_again_after_its_ttl() {
    let (_, crashed) = lock(300, true).await;
    let (_, survivor) = lock(300, true).await;
    let key = common::unique_key("vanish");

    let guard = crashed.acquire(&key, Duration::from_secs(1)).await.unwrap();
    drop(guard); // no release: the holder is gone, and so is its renewal
    let dropped_at = Instant::now();
    assert!(
        matches!(survivor.try_acquire(&key).await, Err(LockError::Busy { .. })),
        "the lease should outlive the holder for a while"
    );

    let guard = survivor.acquire(&key, Duration::from_secs(3)).await.expect("granted once the lease runs out");
    let waited = dropped_at.elapsed();
    assert!(waited >= Duration::from_millis(150), "granted after {waited:?}: before the lease ran out?");
    assert!(waited < Duration::from_millis(1500), "granted only after {waited:?}");
    survivor.release(guard).await.unwrap();
}

#[tokio::test]
async fn renewal_keeps_a_live_holders_lock_well_past_its_ttl() {
    let (_, holder) = lock(300, true).await;
    let (_, rival) = lock(300, true).await;
    let key = common::unique_key("renew");

    let guard = holder.acquire(&key, Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await; // more than three TTLs
    assert!(guard.is_held());
    assert!(matches!(rival.try_acquire(&key).await, Err(LockError::Busy { .. })), "the renewed lock was taken");
    holder.release(guard).await.expect("still the owner after 1 s");
}

#[tokio::test]
async fn without_renewal_a_slow_holder_loses_its_lock_after_the_ttl() {
    let (_, holder) = lock(200, false).await;
    let (_, rival) = lock(200, false).await;
    let key = common::unique_key("norenew");

    let guard = holder.acquire(&key, Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = rival.try_acquire(&key).await.expect("an unrenewed lease expires");
    assert!(matches!(holder.release(guard).await, Err(LockError::Lost { .. })));
    rival.release(taken).await.unwrap();
}

#[tokio::test]
async fn a_guard_reports_the_lock_lost_when_renewal_finds_the_key_taken_over() {
    let (client, lock) = lock(300, true).await;
    let key = common::unique_key("takeover");
    let guard = lock.acquire(&key, Duration::from_secs(1)).await.unwrap();
    assert!(guard.is_held());
    let _: () =
        redis::cmd("SET").arg(&key).arg("usurper").query_async(&mut common::connection(&client).await).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // at least one renewal
    assert!(!guard.is_held(), "renewal should have noticed the key is no longer ours");
}

#[tokio::test]
async fn fencing_tokens_grow_with_every_grant() {
    let (_, first) = lock(2000, true).await;
    let (_, second) = lock(2000, true).await;
    let key = common::unique_key("fence");
    let mut tokens = Vec::new();
    for round in 0..6 {
        let lock = if round % 2 == 0 { &first } else { &second };
        let guard = lock.acquire(&key, Duration::from_secs(1)).await.unwrap();
        tokens.push(guard.fencing_token.expect("redis grants carry a fencing token"));
        lock.release(guard).await.unwrap();
    }
    assert!(tokens.windows(2).all(|pair| pair[1] > pair[0]), "tokens did not grow: {tokens:?}");
}

#[tokio::test]
async fn connecting_to_a_redis_that_is_down_is_a_backend_error_not_a_hang() {
    let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
    let started = Instant::now();
    let result = RedisLock::connect(&client, common::redis_options(1000, true)).await;
    assert!(matches!(result, Err(LockError::Backend { backend: "redis", .. })));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}
