//! What only the Redis lease lock must do: expire, renew on time, refuse a non-owner,
//! answer by its deadline, clean up after a failed acquire, and keep no state for keys
//! nobody uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use seckill::lock::local::LocalLock;
use seckill::lock::redis::{RedisLock, RedisLockOptions};
use seckill::lock::{DistributedLock, HandOver, LockError, LockGuard};
use seckill::store::redis_master::ReplicaWait;

async fn lock(ttl_ms: u64, renew: bool) -> (redis::Client, RedisLock) {
    let client = testkit::redis_client().await;
    let lock = RedisLock::connect(&client, testkit::redis_options(ttl_ms, renew))
        .await
        .unwrap();
    (client, lock)
}

async fn get(client: &redis::Client, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut testkit::connection(client).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn release_is_refused_once_the_lease_expired_and_another_owner_holds_the_key() {
    let (client, slow) = lock(200, false).await;
    let (_, fast) = lock(5000, true).await;
    let key = testkit::unique_key("owner");

    let stale = slow
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // the "GC pause" outlives the lease
    assert!(!stale.is_held(), "the holder's own view of its lease ran out too");
    let current = fast
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("the expired key is free");
    let current_value = get(&client, &key).await.expect("the new owner's key");

    let refused = stale.release().await;
    assert!(
        matches!(refused, Err(LockError::Lost { .. })),
        "expected Lost, got {refused:?}"
    );
    assert_eq!(
        get(&client, &key).await,
        Some(current_value),
        "the stale release deleted the new owner's lock"
    );
    current.release().await.expect("the real owner can release");
    assert_eq!(get(&client, &key).await, None);
}

#[tokio::test]
async fn release_leaves_a_key_alone_when_its_token_is_someone_elses() {
    let (client, lock) = lock(5000, true).await;
    let key = testkit::unique_key("foreign");
    let guard = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    // Someone else's value lands on the key (as after an expiry and a new grant).
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("someone-else")
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap();
    let refused = guard.release().await;
    assert!(
        matches!(refused, Err(LockError::Lost { .. })),
        "expected Lost, got {refused:?}"
    );
    assert_eq!(get(&client, &key).await.as_deref(), Some("someone-else"));
}

#[tokio::test]
async fn a_lock_whose_holder_vanished_is_free_again_after_its_ttl() {
    let (_, crashed) = lock(300, true).await;
    let (_, survivor) = lock(300, true).await;
    let key = testkit::unique_key("vanish");

    let guard = crashed
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    drop(guard); // no release: the holder is gone, and so is its renewal
    let dropped_at = Instant::now();
    assert!(
        matches!(
            survivor.try_acquire(&key, &testkit::owner()).await,
            Err(LockError::Busy { .. })
        ),
        "the lease should outlive the holder for a while"
    );

    let guard = survivor
        .acquire(&key, &testkit::owner(), Duration::from_secs(3))
        .await
        .expect("granted once the lease runs out");
    let waited = dropped_at.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "granted after {waited:?}: before the lease ran out?"
    );
    assert!(waited < Duration::from_millis(1500), "granted only after {waited:?}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn renewal_keeps_a_live_holders_lock_well_past_its_ttl() {
    let (_, holder) = lock(300, true).await;
    let (_, rival) = lock(300, true).await;
    let key = testkit::unique_key("renew");

    let guard = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await; // more than three TTLs
    assert!(guard.is_held());
    assert!(
        matches!(
            rival.try_acquire(&key, &testkit::owner()).await,
            Err(LockError::Busy { .. })
        ),
        "the renewed lock was taken"
    );
    guard.release().await.expect("still the owner after 1 s");
}

#[tokio::test]
async fn without_renewal_a_slow_holder_loses_its_lock_after_the_ttl() {
    let (_, holder) = lock(200, false).await;
    let (_, rival) = lock(200, false).await;
    let key = testkit::unique_key("norenew");

    let guard = holder
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = rival
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("an unrenewed lease expires");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    taken.release().await.unwrap();
}

#[tokio::test]
async fn a_guard_reports_the_lock_lost_when_renewal_finds_the_key_taken_over() {
    let (client, lock) = lock(300, true).await;
    let key = testkit::unique_key("takeover");
    let guard = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(guard.is_held());
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("usurper")
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // at least one renewal
    assert!(
        !guard.is_held(),
        "renewal should have noticed the key is no longer ours"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_redis_stops_answering_counts_its_lease_lost_before_the_ttl_not_after() {
    // A TTL of 3 s, so that the drift margin (1% and 2 ms: 32 ms) outlasts the acquire's
    // own round trip on a loaded machine; with 900 ms it was 11 ms.
    let redis = testkit::PrivateRedis::start();
    let lock = RedisLock::connect(&redis.client(), testkit::redis_options(3000, true))
        .await
        .unwrap();
    let before_acquire = Instant::now();
    let guard = lock
        .acquire("frozen", &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    redis.freeze();

    // Renewals at 1 s and 2 s time out (each after 500 ms, not the 2 s response
    // timeout): two failed renewals do not end the lease, but its end does.
    tokio::time::sleep_until((before_acquire + Duration::from_millis(2600)).into()).await;
    assert!(guard.is_held(), "the lease was given up before two renewals had failed");
    tokio::time::sleep_until((before_acquire + Duration::from_millis(3000)).into()).await;
    assert!(
        !guard.is_held(),
        "still trusted at the TTL: the drift margin was not taken off"
    );
    tokio::time::timeout(Duration::from_millis(100), guard.lease().lost())
        .await
        .expect("the lost signal fired");
    redis.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_timed_out_leaves_no_key_behind_once_redis_answers_again() {
    let redis = testkit::PrivateRedis::start();
    let (impatient, next) = (
        RedisLock::connect(&redis.client(), testkit::redis_options(10_000, true))
            .await
            .unwrap(),
        RedisLock::connect(&redis.client(), testkit::redis_options(10_000, true))
            .await
            .unwrap(),
    );
    // Load the scripts first, so the frozen acquire is one EVALSHA that will run.
    impatient
        .try_acquire("warm-up", &testkit::owner())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redis.freeze();
    let failed = impatient.try_acquire("stuck", &testkit::owner()).await;
    assert!(
        matches!(failed, Err(LockError::Backend { .. })),
        "expected a backend error, got {failed:?}"
    );
    redis.thaw(); // Redis now runs the SET NX it was sent while frozen: a 10 s key nobody holds

    let started = Instant::now();
    let granted = next.acquire("stuck", &testkit::owner(), Duration::from_secs(5)).await;
    let guard = granted.expect("the abandoned grant was released, not left to expire after 10 s");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}

/// A lock on `redis` whose grants live 10 s: long enough that a grant left behind shows.
async fn ten_second_lock(redis: &testkit::PrivateRedis) -> RedisLock {
    RedisLock::connect(&redis.client(), testkit::redis_options(10_000, true))
        .await
        .unwrap()
}

/// Asks `waiter` for `key` for 300 ms in a task of its own, so that freezing Redis
/// cannot delay it: the answer, and when it came.
fn acquire_for_300_ms(waiter: &Arc<RedisLock>, key: &str) -> JoinHandle<(Result<LockGuard, LockError>, Duration)> {
    let (waiter, key) = (waiter.clone(), key.to_owned());
    tokio::spawn(async move {
        let started = Instant::now();
        let answer = waiter
            .acquire(&key, &testkit::owner(), Duration::from_millis(300))
            .await;
        (answer, started.elapsed())
    })
}

/// The answer must be a timeout, within 500 ms: not the 2 s response timeout, nor a grant.
fn expect_a_timeout_by_the_deadline(answer: Result<LockGuard, LockError>, answered_after: Duration) {
    let answer = answer.map(|_| "granted");
    assert!(
        matches!(answer, Err(LockError::Timeout { .. })) && answered_after < Duration::from_millis(500),
        "an acquire with a 300 ms timeout answered after {answered_after:?}: {answer:?}"
    );
}

/// Redis has run an acquire whose buyer gave up: that late grant, the key's 2nd, must
/// go back. So `next` gets the key at once with the 3rd token, not after the 10 s lease.
async fn expect_the_late_grant_given_back(next: &RedisLock, key: &str) {
    let started = Instant::now();
    let guard = next
        .acquire(key, &testkit::owner(), Duration::from_secs(5))
        .await
        .expect("the late grant was given back before its 10 s lease ended");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(1), "the next owner waited {waited:?}");
    let counter = guard.fencing_token().unwrap().counter;
    assert_eq!(counter, 3, "the late grant should have taken token 2, and this one 3");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_on_a_frozen_redis_answers_by_its_deadline_and_its_late_grant_goes_back() {
    let redis = testkit::PrivateRedis::start();
    let (waiter, next) = (Arc::new(ten_second_lock(&redis).await), ten_second_lock(&redis).await);
    let key = testkit::unique_key("frozen-acquire");
    // Load the scripts and begin the epoch first, so the frozen acquire is one EVALSHA.
    let warm_up = waiter.try_acquire(&key, &testkit::owner()).await.unwrap();
    warm_up.release().await.unwrap();
    redis.freeze();

    let (answer, answered_after) = acquire_for_300_ms(&waiter, &key).await.unwrap();
    redis.thaw(); // Redis now runs the acquire it was sent: the free key goes to a buyer who gave up
    expect_a_timeout_by_the_deadline(answer, answered_after);
    expect_the_late_grant_given_back(&next, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_answers_by_its_deadline_when_redis_goes_silent_midway_and_its_late_grant_goes_back() {
    let redis = testkit::PrivateRedis::start();
    let holder = RedisLock::connect(&redis.client(), testkit::redis_options(200, false))
        .await
        .unwrap();
    let (waiter, next) = (Arc::new(ten_second_lock(&redis).await), ten_second_lock(&redis).await);
    let key = testkit::unique_key("silent-midway");
    // Held for 200 ms, never renewed: the waiter's first attempts find the key busy.
    let _held = holder.try_acquire(&key, &testkit::owner()).await.unwrap();
    let started = Instant::now();
    let waiting = acquire_for_300_ms(&waiter, &key);
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.freeze(); // the waiter's next attempt gets no answer

    // Thawed after the waiter's deadline, before its request's 2 s response timeout.
    // The holder's lease has ended meanwhile, so that request now grants the key.
    tokio::time::sleep_until((started + Duration::from_millis(600)).into()).await;
    redis.thaw();
    let (answer, answered_after) = waiting.await.unwrap();
    expect_a_timeout_by_the_deadline(answer, answered_after);
    expect_the_late_grant_given_back(&next, &key).await;
}

/// Grants and releases 50 fresh keys on `lock`, then asks it how many it remembers.
async fn expect_at_most_one_key_remembered_after_50_fresh_keys(
    lock: &dyn DistributedLock,
    remembered: impl Fn() -> usize,
) {
    for _ in 0..50 {
        let guard = lock
            .acquire(&testkit::unique_key("many"), &testkit::owner(), Duration::from_secs(1))
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    assert!(remembered() <= 1, "{} keys remembered", remembered());
}

#[tokio::test]
async fn the_waiter_signals_of_keys_nobody_waits_for_are_forgotten() {
    let (_, lock) = lock(2000, true).await;
    expect_at_most_one_key_remembered_after_50_fresh_keys(&lock, || lock.remembered_keys()).await;
}

#[tokio::test]
async fn the_in_process_lock_forgets_keys_nobody_holds() {
    let lock = LocalLock::default();
    expect_at_most_one_key_remembered_after_50_fresh_keys(&lock, || lock.remembered_keys()).await;
}

#[tokio::test]
async fn connecting_to_a_redis_that_is_down_is_a_backend_error_not_a_hang() {
    let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
    let started = Instant::now();
    let result = RedisLock::connect(&client, testkit::redis_options(1000, true)).await;
    assert!(matches!(result, Err(LockError::Backend { backend: "redis", .. })));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// Step 1 under a crowd: when the lock Redis has lost a key's epoch (it restarted empty,
/// or a degraded lock came back to it), the waiters of one instance begin one new epoch
/// between them, not one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_that_finds_the_epoch_missing_begins_one_new_epoch_not_one_each() {
    let (client, lock) = lock(5000, false).await;
    let key = testkit::unique_key("epoch-crowd");
    let epochs_begun = format!("{key}:fence:epochs");
    lock.try_acquire(&key, &testkit::owner())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(get(&client, &epochs_begun).await.as_deref(), Some("1"));

    // The lock Redis forgets the epoch, as after a restart without its data.
    let _: () = redis::cmd("DEL")
        .arg(format!("{key}:fence:epoch"))
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap();
    let lock = std::sync::Arc::new(lock);
    let mut crowd = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (lock, key) = (lock.clone(), key.clone());
        crowd.spawn(async move {
            match lock.try_acquire(&key, &testkit::owner()).await {
                Ok(guard) => guard.release().await.map(|()| true),
                Err(LockError::Busy { .. }) => Ok(false),
                Err(error) => Err(error),
            }
        });
    }
    let mut granted = 0;
    while let Some(answer) = crowd.join_next().await {
        granted += usize::from(answer.unwrap().unwrap());
    }

    assert!(granted >= 1, "nobody in the crowd was granted the lock");
    assert_eq!(
        get(&client, &epochs_begun).await.as_deref(),
        Some("2"),
        "50 waiters who found the epoch missing should begin one new epoch"
    );
}

/// A hand-over is one script: the key takes the next owner's token with a full lease,
/// and the counter numbers the grant in the same epoch, one past the holder's.
#[tokio::test]
async fn a_hand_over_gives_the_key_to_the_next_owner_with_the_next_token() {
    let (client, holder) = lock(5000, true).await;
    let (_, stranger) = lock(5000, true).await;
    let key = testkit::unique_key("hand-over");
    let held = holder.try_acquire(&key, &testkit::owner()).await.unwrap();
    let token = held.fencing_token().unwrap().clone();
    let next = testkit::owner();

    let HandOver::Granted(handed) = held.hand_over(&next).await.unwrap() else {
        panic!("the Redis lock hands its key over");
    };
    let handed_token = handed.fencing_token().unwrap().clone();
    assert_eq!(
        (handed_token.epoch, handed_token.counter),
        (token.epoch, token.counter + 1)
    );
    assert!(get(&client, &key).await.unwrap().starts_with(next.as_str()));
    let refused = stranger.try_acquire(&key, &testkit::owner()).await;
    assert!(matches!(refused, Err(LockError::Busy { .. })), "{refused:?}");

    handed.release().await.unwrap();
    assert_eq!(get(&client, &key).await, None, "released");
}

#[tokio::test]
async fn a_hand_over_of_a_key_someone_took_over_changes_nothing_and_says_lost() {
    let (client, slow) = lock(200, false).await;
    let (_, fast) = lock(5000, true).await;
    let key = testkit::unique_key("hand-over-lost");
    let stale = slow.try_acquire(&key, &testkit::owner()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // the lease ran out
    let current = fast
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let before = get(&client, &key).await;

    let handed = stale.hand_over(&testkit::owner()).await;
    assert!(matches!(handed, Err(LockError::Lost { .. })), "{handed:?}");
    assert_eq!(get(&client, &key).await, before, "the new holder's key is untouched");
    current.release().await.unwrap();
}

/// With a replica wait (`--lock-redis-wait-replicas`) a grant must be acknowledged by
/// replicas, which only an acquire waits for: a hand-over releases instead.
#[tokio::test]
async fn with_a_replica_wait_a_hand_over_releases_instead() {
    let client = testkit::redis_client().await;
    let options = RedisLockOptions {
        wait_for_replicas: Some(ReplicaWait {
            replicas: 0,
            timeout: Duration::from_millis(100),
        }),
        ..testkit::redis_options(5000, true)
    };
    let lock = RedisLock::connect(&client, options).await.unwrap();
    assert!(!lock.hands_over(), "it says it hands over");
    let key = testkit::unique_key("hand-over-waits");
    let held = lock.try_acquire(&key, &testkit::owner()).await.unwrap();
    let handed = held.hand_over(&testkit::owner()).await.unwrap();
    assert!(matches!(handed, HandOver::Released), "{handed:?}");
    assert_eq!(get(&client, &key).await, None, "released");
}
