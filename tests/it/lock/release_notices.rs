//! A release notice wakes a waiter of another instance at once: the locks whose backend
//! cannot notify (the MySQL locks, Redlock) hand over in a few milliseconds instead of
//! at the waiter's next poll. Two handles of one lock, as two instances hold them, each
//! with its own notices on the test Redis; and the same two without notices, to show
//! what the notice saves. Against the servers `make test` starts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::mysql_version::MySqlVersionLock;
use seckill::lock::parts::release_notices::ReleaseNotices;
use seckill::lock::redlock::{Redlock, RedlockOptions};
use seckill::lock::DistributedLock;

const ROUNDS: usize = 8;
/// Long enough for the waiter's backoff to reach its longest pause (50 ms, jittered).
const WAITER_HEAD_START: Duration = Duration::from_millis(200);

async fn notices() -> ReleaseNotices {
    ReleaseNotices::announce_on(testkit::master_connection(&testkit::redis_client().await).await)
}

/// One round on a fresh key: `holder` takes it, `waiter` starts waiting for it, and once
/// the waiter has had its head start, the holder releases. `at_release` runs as soon as
/// the release is answered. Answers the time from the release's answer to the grant.
async fn hand_over_once(
    holder: &dyn DistributedLock,
    waiter: Arc<dyn DistributedLock>,
    key: &str,
    at_release: impl FnOnce(),
) -> Duration {
    let held = holder
        .acquire(key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let key = key.to_owned();
        async move {
            let granted = waiter.acquire(&key, &testkit::owner(), Duration::from_secs(5)).await;
            (Instant::now(), granted)
        }
    });
    tokio::time::sleep(WAITER_HEAD_START).await;
    held.release().await.unwrap();
    let released = Instant::now();
    at_release();
    let (granted_at, granted) = waiting.await.unwrap();
    granted
        .expect("the waiter gets the key once it is released")
        .release()
        .await
        .unwrap();
    granted_at.saturating_duration_since(released)
}

/// One handle holds a key while the other waits for it; the median, over the rounds,
/// of the time from the release's answer to the waiter's grant.
async fn median_hand_over(holder: Arc<dyn DistributedLock>, waiter: Arc<dyn DistributedLock>) -> Duration {
    let mut gaps = Vec::new();
    for round in 0..ROUNDS {
        let key = testkit::unique_key(&format!("notice-{round}"));
        gaps.push(hand_over_once(holder.as_ref(), waiter.clone(), &key, || {}).await);
    }
    gaps.sort();
    gaps[ROUNDS / 2]
}

/// With notices the hand-over takes about one Redis message and one attempt; without,
/// the waiter finds the release at its next poll, tens of milliseconds later. `handle`
/// builds one handle of the lock, as one instance holds it, with the notices given.
async fn assert_notices_cut_the_hand_over<Build, Built>(lock: &str, handle: Build)
where
    Build: Fn(Option<ReleaseNotices>) -> Built,
    Built: std::future::Future<Output = Arc<dyn DistributedLock>>,
{
    // A median of a few milliseconds: measured alone, not beside a crowd on the other core.
    let _turn = testkit::take_turn().await;
    let noticed = median_hand_over(handle(Some(notices().await)).await, handle(Some(notices().await)).await).await;
    let polled = median_hand_over(handle(None).await, handle(None).await).await;
    println!("{lock}: median hand-over {noticed:?} with notices, {polled:?} without");
    assert!(
        noticed < Duration::from_millis(10),
        "{lock}: with notices the waiter got the key a median {noticed:?} after the release"
    );
    assert!(
        polled > noticed * 2,
        "{lock}: without notices the hand-over should wait for a poll: {polled:?}, with them {noticed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_hands_the_mysql_version_lock_over_without_waiting_for_a_poll() {
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits: Some(3),
    };
    assert_notices_cut_the_hand_over("mysql-version", |notices| async move {
        let lock = MySqlVersionLock::new(testkit::mysql_pool().await, options);
        Arc::new(lock.with_release_notices(notices)) as Arc<dyn DistributedLock>
    })
    .await;
}

/// Step 2 of `src/lock/mysql_version.rs`: a waiter that saw the row held and then hears
/// the release announced compares and sets at the version it saw, without reading the
/// row again. Over the rounds, the waiter's reads from each release's answer to its grant
/// are counted. A poll whose pause ends in that window reads, and may add one now and then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_version_waiter_woken_by_a_notice_takes_the_row_without_reading_it_again() {
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits: Some(3),
    };
    let pool = testkit::mysql_pool().await;
    let holder = MySqlVersionLock::new(pool.clone(), options).with_release_notices(Some(notices().await));
    let waiter = Arc::new(MySqlVersionLock::new(pool, options).with_release_notices(Some(notices().await)));
    let mut reads_after_releases = 0;
    for round in 0..ROUNDS {
        let key = testkit::unique_key(&format!("version-notice-{round}"));
        let mut reads_at_release = 0;
        hand_over_once(&holder, waiter.clone(), &key, || {
            reads_at_release = waiter.rows_read();
            assert!(
                reads_at_release > 0,
                "the waiter should have read the row while it was held"
            );
        })
        .await;
        reads_after_releases += waiter.rows_read() - reads_at_release;
    }
    println!("{reads_after_releases} reads after {ROUNDS} releases");
    assert!(
        reads_after_releases <= 2,
        "{reads_after_releases} reads after {ROUNDS} releases: the waiter should take the row at the version it saw held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_hands_the_mysql_lock_table_over_without_waiting_for_a_poll() {
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits: Some(3),
    };
    assert_notices_cut_the_hand_over("mysql", |notices| async move {
        let lock = MySqlLock::new(testkit::mysql_pool().await, options);
        Arc::new(lock.with_release_notices(notices)) as Arc<dyn DistributedLock>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_hands_redlock_over_without_waiting_for_a_poll() {
    let options = RedlockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        node_timeout: Duration::from_millis(50),
    };
    assert_notices_cut_the_hand_over("redlock", |notices| async move {
        let lock = Redlock::connect(&testkit::redlock_urls(), options).await.unwrap();
        Arc::new(lock.with_release_notices(notices)) as Arc<dyn DistributedLock>
    })
    .await;
}
