//! What only `redis-degrade` must do: switch to the MySQL version lock when its Redis
//! dies and back when it heals, and never let a holder of the old mode overlap a holder
//! of the new one, in either direction; and never hand over with a token counter that
//! went back. Against a private lock Redis per test and the
//! MariaDB that `make test` starts. `cargo test --test it lock::redis_degrade:: -- --nocapture` prints
//! what it measured.

use std::time::{Duration, Instant};

use seckill::lock::mysql::MySqlLockOptions;
use seckill::lock::mysql_version::MySqlVersionLock;
use seckill::lock::redis::RedisLock;
use seckill::lock::redis_degrade::mode::{Mode, SharedMode};
use seckill::lock::redis_degrade::outage::OutageRule;
use seckill::lock::redis_degrade::{DegradeOptions, DegradingLock};
use seckill::lock::{DistributedLock, HandOver, LockGuard};
use testkit::PrivateRedis;

const TTL: Duration = Duration::from_millis(1000);

/// One instance: its own connections, sharing the mode called `mode_name`.
async fn instance(lock_redis: &PrivateRedis, mode_name: &str, recover_after: Duration) -> DegradingLock {
    let pool = testkit::mysql_pool().await;
    let redis_lock = RedisLock::connect(
        &lock_redis.client(),
        testkit::redis_options(TTL.as_millis() as u64, true),
    )
    .await
    .unwrap();
    let mysql_lock = MySqlVersionLock::new(
        pool.clone(),
        MySqlLockOptions {
            ttl: TTL,
            renew: true,
            permits: Some(3),
        },
    );
    let shared = SharedMode::open(pool, mode_name, &testkit::unique_key("instance"), TTL)
        .await
        .unwrap();
    let options = DegradeOptions {
        ttl: TTL,
        outage: OutageRule {
            after_failures: 3,
            after: Duration::from_millis(1000),
        },
        recover_after,
    };
    DegradingLock::start(redis_lock, lock_redis.client(), mysql_lock, shared, options)
        .await
        .unwrap()
}

fn epoch_of(guard: &LockGuard) -> u64 {
    guard.fencing_token().expect("redis-degrade grants carry tokens").epoch
}

fn mode_of(lock: &DegradingLock) -> Option<Mode> {
    lock.mode_stats().mode
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_switches_to_mysql_when_its_redis_dies_and_back_when_redis_heals() {
    let lock_redis = PrivateRedis::start();
    let port = lock_redis.port;
    let lock = instance(&lock_redis, &testkit::unique_key("mode"), Duration::from_secs(1)).await;
    let key = testkit::unique_key("switch");

    let first = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((mode_of(&lock), epoch_of(&first)), (Some(Mode::Redis), 1));
    first.release().await.unwrap();

    drop(lock_redis); // killed
    let died = Instant::now();
    let degraded = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(15))
        .await
        .expect("granted by MySQL");
    let took = died.elapsed();
    assert_eq!((mode_of(&lock), epoch_of(&degraded)), (Some(Mode::Mysql), 2));
    degraded.release().await.unwrap();
    println!("lock Redis killed: first grant from MySQL after {took:?}");

    let _lock_redis = PrivateRedis::start_on(port);
    let healed = Instant::now();
    loop {
        let guard = lock
            .acquire(&key, &testkit::owner(), Duration::from_secs(5))
            .await
            .unwrap();
        let epoch = epoch_of(&guard);
        guard.release().await.unwrap();
        if epoch == 3 {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(15),
            "still on MySQL 15 s after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("lock Redis back: first grant from Redis after {:?}", healed.elapsed());
    assert_eq!(mode_of(&lock), Some(Mode::Redis));
    let stats = lock.mode_stats();
    assert_eq!(stats.switches, 2);
    assert!(
        stats.seconds_in_mysql > 0.0 && stats.seconds_in_redis > 0.0,
        "{stats:?}"
    );
}

/// A holds a grant of the current mode; the mode switches; B asks for the same key.
/// B must not be granted before A's grant has ended.
async fn switch_under_a_holder(from: Mode, to: Mode) {
    let lock_redis = PrivateRedis::start();
    let mode_name = testkit::unique_key("mode");
    let pool = testkit::mysql_pool().await;
    sqlx::query("INSERT INTO seckill_lock_modes (name, mode, epoch, grants_from) VALUES (?, ?, 1, NOW(3))")
        .bind(&mode_name)
        .bind(if from == Mode::Redis { "redis" } else { "mysql" })
        .execute(&pool)
        .await
        .unwrap();
    let never = Duration::from_secs(3600); // no switch but the test's own
    let (a, b) = (
        instance(&lock_redis, &mode_name, never).await,
        instance(&lock_redis, &mode_name, never).await,
    );
    let key = testkit::unique_key("overlap");
    let held = a
        .acquire(&key, &testkit::owner(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((mode_of(&a), epoch_of(&held)), (Some(from), 1));

    let switcher = SharedMode::open(pool, &mode_name, &testkit::unique_key("switcher"), TTL)
        .await
        .unwrap();
    assert!(switcher.switch(1, to).await.unwrap());
    let switched = Instant::now();
    // B learns of the switch at once; A only at its next renewal, up to a third of a
    // TTL later. The worst order for safety: B may not grant before A has stopped.
    b.refresh_mode().await;

    // A never releases: as if it were still inside its critical section.
    let a_lost = tokio::spawn({
        let lease = held.lease().clone();
        async move {
            lease.lost().await;
            Instant::now()
        }
    });
    let granted = b
        .acquire(&key, &testkit::owner(), Duration::from_secs(10))
        .await
        .expect("B gets the new mode's grant");
    let b_granted = Instant::now();
    let a_lost = a_lost.await.unwrap();
    println!(
        "{from:?} -> {to:?}: A's grant ended {:?} after the switch, B's started {:?} after it",
        a_lost - switched,
        b_granted - switched
    );
    assert!(a_lost <= b_granted, "B was granted while A still trusted its grant");
    assert!(!held.is_held());
    assert_eq!(epoch_of(&granted), 2, "the new mode's grants carry the new epoch");
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_to_mysql_grants_nothing_until_every_redis_holder_has_stopped() {
    switch_under_a_holder(Mode::Redis, Mode::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_back_to_redis_grants_nothing_until_every_mysql_holder_has_stopped() {
    switch_under_a_holder(Mode::Mysql, Mode::Redis).await;
}

/// Two instances reach one lock Redis by two spellings of its URL. They must share one
/// mode (one row, one epoch), or one could switch to MySQL while the other grants in
/// Redis. The instances' mode leases in MySQL say which mode each one renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_spell_the_lock_redis_differently_share_one_mode() {
    use seckill::strategy::Strategy;
    let lock_redis = PrivateRedis::start();
    let port = lock_redis.url().rsplit(':').next().unwrap().to_owned();
    let spellings = [
        format!("redis://localhost:{port}"),
        format!("redis://127.0.0.1:{port}/0"),
    ];
    let mut instances = Vec::new();
    for url in spellings {
        instances.push(
            testkit::instance_with(Strategy::RedisDegrade, &testkit::TestSale::new(), |config| {
                config.redis.lock_redis_url = Some(url)
            })
            .await,
        );
    }
    tokio::time::sleep(TTL).await; // every instance has renewed its mode lease

    let modes: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT name FROM seckill_lock_mode_leases WHERE name LIKE ? AND expires_at > NOW(3)",
    )
    .bind(format!("%:{port}%"))
    .fetch_all(&testkit::mysql_pool().await)
    .await
    .unwrap();
    assert_eq!(
        modes.len(),
        1,
        "one lock Redis, one mode; the instances renew {modes:?}"
    );
    for instance in instances {
        instance.stop().await.unwrap();
    }
}

/// `/metrics` of a `redis-degrade` instance says which mode it runs in and counts its
/// switches; tests/it/metrics.rs checks that a strategy without modes shows neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degrading_instance_shows_its_mode_and_its_switches_in_metrics() {
    use seckill::strategy::Strategy;
    let lock_redis = PrivateRedis::start();
    let url = lock_redis.url().to_owned();
    let instance = testkit::instance_with(Strategy::RedisDegrade, &testkit::TestSale::new(), |config| {
        config.redis.lock_redis_url = Some(url)
    })
    .await;
    let metrics = reqwest::get(format!("{}/metrics", instance.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("seckill_lock_mode{mode=\"redis\"} 1"), "{metrics}");
    assert!(metrics.contains("seckill_lock_mode{mode=\"mysql\"} 0"), "{metrics}");
    assert!(metrics.contains("seckill_lock_mode_switches_total 0"), "{metrics}");
    instance.stop().await.unwrap();
}

/// In Redis mode a waiter of another instance is woken by the release script's
/// announcement, as the `redis` lock's waiters are, and does not wait for its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_redis_mode_a_release_wakes_a_waiter_of_another_instance_at_once() {
    // A median under 10 ms: measured alone, not beside a crowd on the other core.
    let _turn = testkit::take_turn().await;
    let lock_redis = PrivateRedis::start();
    let mode_name = testkit::unique_key("wake-up");
    let holder = std::sync::Arc::new(instance(&lock_redis, &mode_name, Duration::from_secs(5)).await);
    let waiter = std::sync::Arc::new(instance(&lock_redis, &mode_name, Duration::from_secs(5)).await);
    let mut gaps = Vec::new();
    for round in 0..8 {
        let key = testkit::unique_key(&format!("wake-{round}"));
        let held = holder
            .acquire(&key, &testkit::owner(), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(mode_of(&holder), Some(Mode::Redis));
        let waiting = tokio::spawn({
            let (waiter, key) = (waiter.clone(), key.clone());
            async move {
                let granted = waiter.acquire(&key, &testkit::owner(), Duration::from_secs(5)).await;
                (Instant::now(), granted)
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await; // the waiter's backoff is at its longest
        held.release().await.unwrap();
        let released = Instant::now();
        let (granted_at, granted) = waiting.await.unwrap();
        granted.unwrap().release().await.unwrap();
        gaps.push(granted_at.saturating_duration_since(released));
    }
    gaps.sort();
    println!("redis-degrade, Redis mode: hand-overs {gaps:?}");
    assert!(
        gaps[4] < Duration::from_millis(10),
        "the median hand-over waited for a poll: {gaps:?}"
    );
}

/// A hand-over is a grant: in Redis mode it goes through the Redis lock's hand-over and
/// carries the epoch; once the epoch has ended (a switch), a holder cannot hand over
/// into it: it releases, and the next grant is an acquire in the new mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_stays_in_its_epoch_and_a_holder_of_an_ended_epoch_releases_instead() {
    let lock_redis = PrivateRedis::start();
    let mode_name = testkit::unique_key("mode");
    let never = Duration::from_secs(3600); // no switch but the test's own
    let lock = instance(&lock_redis, &mode_name, never).await;
    let key = testkit::unique_key("hand-over");
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(5))
        .await
        .unwrap();
    let token = held.fencing_token().unwrap().clone();

    let HandOver::Granted(handed) = held.hand_over(&testkit::owner()).await.unwrap() else {
        panic!("in Redis mode, within its epoch, the key is handed over");
    };
    let handed_token = handed.fencing_token().unwrap().clone();
    assert_eq!((handed_token.epoch, handed_token.counter), (1, token.counter + 1));
    assert!(handed.is_held());

    let switcher = SharedMode::open(
        testkit::mysql_pool().await,
        &mode_name,
        &testkit::unique_key("switcher"),
        TTL,
    )
    .await
    .unwrap();
    assert!(switcher.switch(1, Mode::Mysql).await.unwrap());
    lock.refresh_mode().await;
    let handed_again = handed.hand_over(&testkit::owner()).await.unwrap();
    assert!(
        matches!(handed_again, HandOver::Released),
        "a holder of epoch 1 handed over after the switch: {handed_again:?}"
    );
    let mut connection = lock_redis.client().get_multiplexed_async_connection().await.unwrap();
    let value: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut connection).await.unwrap();
    assert_eq!(value, None, "released in the lock Redis");
}

/// A lock Redis that forgot part of its count (restored from an older snapshot, say)
/// still holds our key, but its next token is one the stock may have seen already. The
/// hand-over sees the counter go back in its epoch and releases instead of granting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_whose_token_counter_went_back_releases_instead() {
    let lock_redis = PrivateRedis::start();
    let never = Duration::from_secs(3600); // no switch back within the test
    let lock = instance(&lock_redis, &testkit::unique_key("mode"), never).await;
    let key = testkit::unique_key("went-back");
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(5))
        .await
        .unwrap();
    let mut connection = lock_redis.client().get_multiplexed_async_connection().await.unwrap();
    redis::cmd("SET")
        .arg(format!("{key}:fence"))
        .arg(0)
        .query_async::<()>(&mut connection)
        .await
        .unwrap();

    let handed = held.hand_over(&testkit::owner()).await.unwrap();
    assert!(
        matches!(handed, HandOver::Released),
        "handed over with a token counter that went back: {handed:?}"
    );
    let value: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut connection).await.unwrap();
    assert_eq!(value, None, "released in the lock Redis");
}
