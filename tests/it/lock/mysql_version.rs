//! What only the MySQL locks must do beyond the conformance suite: the optimistic
//! lock's compare-and-set refuses a stale version and counts its conflicts, and the
//! semaphore in front of MySQL bounds how many attempts talk to it at once, for both
//! MySQL locks. Against the MariaDB that `make test` starts.

use std::sync::Arc;
use std::time::Duration;

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::mysql_version::{MySqlVersionLock, TAKE_IF_UNCHANGED};
use seckill::lock::{DistributedLock, HandOver, LockError};
use sqlx::MySqlPool;

fn options(permits: Option<usize>) -> MySqlLockOptions {
    MySqlLockOptions {
        ttl: Duration::from_millis(5000),
        renew: true,
        permits,
    }
}

async fn pool_of(size: u32) -> MySqlPool {
    seckill::store::mysql::connect_checked(&testkit::mysql_url(), size)
        .await
        .expect("MariaDB runs (`make services`)")
}

async fn row(pool: &MySqlPool, name: &str) -> (u64, String) {
    sqlx::query_as("SELECT version, owner FROM seckill_version_locks WHERE name = ?")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_compare_and_set_with_a_version_read_before_another_grant_changes_nothing() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlVersionLock::new(pool.clone(), options(Some(3)));
    let name = testkit::unique_key("stale");
    let first = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        first.fencing_token().unwrap().counter,
        1,
        "a new row's first grant is version 1"
    );
    first.release().await.unwrap();
    let (read_by_a_slow_writer, _) = row(&pool, &name).await;

    // Meanwhile another buyer takes the row and gives it back: the version moves on.
    let second = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    second.release().await.unwrap();

    // The slow writer's compare-and-set, with the version it read: the row is free, yet it loses.
    let stale = sqlx::query(TAKE_IF_UNCHANGED)
        .bind("slow-writer")
        .bind(5_000_000u64)
        .bind(&name)
        .bind(read_by_a_slow_writer)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(stale.rows_affected(), 0, "a stale version won the row");
    assert_eq!(
        row(&pool, &name).await,
        (2, String::new()),
        "the row changed under a stale version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takers_racing_for_a_free_row_get_one_grant_and_the_others_are_counted_as_conflicts() {
    let lock = Arc::new(MySqlVersionLock::new(pool_of(12).await, options(None)));
    let (rounds, takers) = (20u64, 10u64);
    for round in 0..rounds {
        let name = testkit::unique_key(&format!("race-{round}"));
        let attempts = (0..takers).map(|_| {
            let (lock, name) = (lock.clone(), name.clone());
            tokio::spawn(async move { lock.try_acquire(&name, &testkit::owner()).await })
        });
        let mut granted = Vec::new();
        for attempt in futures_util::future::join_all(attempts).await {
            match attempt.unwrap() {
                Ok(guard) => granted.push(guard),
                Err(LockError::Busy { .. }) => {}
                Err(other) => panic!("round {round}: {other}"),
            }
        }
        assert_eq!(granted.len(), 1, "round {round}: {} takers won one row", granted.len());
        for guard in granted {
            guard.release().await.unwrap();
        }
    }
    let stats = lock.stats().unwrap();
    assert_eq!((stats.attempts, stats.grants), (rounds * takers, rounds));
    // Every loser either read the row held (busy) or lost the compare-and-set (a conflict).
    // Ten takers fired at once read the free row together, so most of them lose the write.
    assert!(
        stats.conflicts > 0 && stats.conflicts <= rounds * (takers - 1),
        "conflicts counted: {}, out of {} losers",
        stats.conflicts,
        rounds * (takers - 1)
    );
}

/// 30 waiters on one instance poll a held key for a while; returns the most attempts
/// that were talking to MySQL at the same time.
async fn peak_attempts_in_flight(lock: Arc<dyn DistributedLock>, holder: &dyn DistributedLock) -> usize {
    let name = testkit::unique_key("crowd");
    let held = holder
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let waiters = (0..30).map(|_| {
        let (lock, name) = (lock.clone(), name.clone());
        tokio::spawn(async move {
            lock.acquire(&name, &testkit::owner(), Duration::from_millis(1500))
                .await
        })
    });
    for waited in futures_util::future::join_all(waiters).await {
        assert!(
            matches!(waited.unwrap(), Err(LockError::Timeout { .. })),
            "a waiter got a held key"
        );
    }
    held.release().await.unwrap();
    lock.stats().unwrap().permits.peak_in_flight
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_lets_at_most_its_permits_of_attempts_talk_to_mysql_at_once() {
    let holder = MySqlVersionLock::new(testkit::mysql_pool().await, options(Some(3)));
    let table_options = |permits| MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits,
    };

    let bounded = peak_attempts_in_flight(
        Arc::new(MySqlVersionLock::new(pool_of(12).await, options(Some(3)))),
        &holder,
    );
    assert_eq!(bounded.await, 3, "mysql-version with 3 permits");
    let unbounded = peak_attempts_in_flight(
        Arc::new(MySqlVersionLock::new(pool_of(12).await, options(None))),
        &holder,
    );
    assert!(
        unbounded.await > 3,
        "without the semaphore the crowd should exceed 3 at once"
    );

    let holder = MySqlLock::new(testkit::mysql_pool().await, table_options(Some(3)));
    let bounded = peak_attempts_in_flight(
        Arc::new(MySqlLock::new(pool_of(12).await, table_options(Some(3)))),
        &holder,
    );
    assert_eq!(bounded.await, 3, "mysql with 3 permits");
    let unbounded = peak_attempts_in_flight(
        Arc::new(MySqlLock::new(pool_of(12).await, table_options(None))),
        &holder,
    );
    assert!(
        unbounded.await > 3,
        "without the semaphore the crowd should exceed 3 at once"
    );
}

/// Step 2 of `src/lock/mysql_version.rs`: a release leaves the row free at its version,
/// so the next acquire of the instance that gave it back compares and sets at once.
#[tokio::test]
async fn an_instance_that_gave_a_row_back_takes_it_again_without_reading_it() {
    let lock = MySqlVersionLock::new(pool_of(2).await, options(Some(3)));
    let key = testkit::unique_key("given-back");
    let first = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let first_version = first.fencing_token().unwrap().counter;
    first.release().await.unwrap();
    let reads = lock.rows_read();

    let again = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        lock.rows_read(),
        reads,
        "the second acquire read the row it had given back"
    );
    assert_eq!(again.fencing_token().unwrap().counter, first_version + 1);
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_hand_over_gives_the_row_to_the_next_owner_at_the_next_version() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlVersionLock::new(pool.clone(), options(Some(3)));
    let key = testkit::unique_key("hand-over");
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let version = held.fencing_token().unwrap().counter;
    let next = testkit::owner();

    let HandOver::Granted(handed) = held.hand_over(&next).await.unwrap() else {
        panic!("the version lock hands its row over");
    };
    assert_eq!(handed.fencing_token().unwrap().counter, version + 1);
    assert_eq!(
        row(&pool, &key).await,
        (version + 1, next.as_str().to_owned()),
        "the row belongs to the next owner, one version on"
    );
    let stranger = MySqlVersionLock::new(pool.clone(), options(Some(3)));
    let refused = stranger.try_acquire(&key, &testkit::owner()).await;
    assert!(matches!(refused, Err(LockError::Busy { .. })), "{refused:?}");

    handed.release().await.unwrap();
    assert_eq!(row(&pool, &key).await, (version + 1, String::new()), "given back");
}

#[tokio::test]
async fn a_hand_over_of_a_row_someone_took_over_changes_nothing_and_says_lost() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlVersionLock::new(pool.clone(), options(Some(3)));
    let key = testkit::unique_key("hand-over-lost");
    let held = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    // The row expires, and another instance takes it.
    sqlx::query("UPDATE seckill_version_locks SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = ?")
        .bind(&key)
        .execute(&pool)
        .await
        .unwrap();
    let taker = MySqlVersionLock::new(pool.clone(), options(Some(3)));
    let taken = taker
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let before = row(&pool, &key).await;

    let handed = held.hand_over(&testkit::owner()).await;
    assert!(matches!(handed, Err(LockError::Lost { .. })), "{handed:?}");
    assert_eq!(row(&pool, &key).await, before, "the taker's row is untouched");
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_lock_whose_server_went_silent_fails_in_time() {
    let proxy = testkit::nemesis::Proxy::start(testkit::mysql_port()).await;
    let ttl = Duration::from_secs(2);
    let options = MySqlLockOptions {
        ttl,
        ..options(Some(3))
    };
    let lock = MySqlVersionLock::new(testkit::mysql_pool_through(proxy.port).await, options);
    testkit::a_mysql_lock_fails_in_time_when_mysql_goes_silent(&lock, ttl, &proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_lock_against_a_slow_mysql_answers_by_its_deadline_and_gives_its_late_grant_back() {
    let proxy = testkit::nemesis::Proxy::start(testkit::mysql_port()).await;
    let pool = testkit::mysql_pool().await;
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(30),
        ..options(Some(1))
    };
    let lock = MySqlVersionLock::new(testkit::mysql_pool_through(proxy.port).await, options);
    let name = testkit::unique_key("slow-mysql-version");
    let asked = testkit::mysql_acquires_answer_by_their_deadline(&lock, &name, &proxy).await;

    // The answer arrives, the attempt goes on and its compare-and-set grants version 1:
    // nobody waits for that grant any more, so the row is given back.
    while version_and_owner(&pool, &name).await != Some((1, String::new())) {
        assert!(
            asked.elapsed() < testkit::SLOW_MYSQL_LATE_BY + Duration::from_secs(2),
            "a grant answered after its buyer gave up must be given back, not kept for a TTL: {:?}",
            version_and_owner(&pool, &name).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn version_and_owner(pool: &MySqlPool, name: &str) -> Option<(u64, String)> {
    sqlx::query_as("SELECT version, owner FROM seckill_version_locks WHERE name = ?")
        .bind(name)
        .fetch_optional(pool)
        .await
        .unwrap()
}
