//! A release notice wakes a waiter of another instance at once: the locks whose backend
//! cannot notify (the MySQL locks, Redlock) hand over in a few milliseconds instead of
//! at the waiter's next poll. Two handles of one lock, as two instances hold them, each
//! with its own notices on the test Redis; and the same two without notices, to show
//! what the notice saves. Against the servers `make test` starts.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::mysql_version::{MySqlVersionLock, MySqlVersionLockOptions};
use seckill::lock::parts::release_notices::ReleaseNotices;
use seckill::lock::redlock::{Redlock, RedlockOptions};
use seckill::lock::DistributedLock;

const ROUNDS: usize = 8;
/// Long enough for the waiter's backoff to reach its longest pause (50 ms, jittered).
const WAITER_HEAD_START: Duration = Duration::from_millis(200);

async fn notices() -> ReleaseNotices {
    ReleaseNotices::announce_on(&common::redis_client(0).await)
        .await
        .expect("the test Redis runs (`make services`)")
}

/// One handle holds a key while the other waits for it; the median, over the rounds,
/// of the time from the release's answer to the waiter's grant.
async fn median_hand_over(holder: Arc<dyn DistributedLock>, waiter: Arc<dyn DistributedLock>) -> Duration {
    let mut gaps = Vec::new();
    for round in 0..ROUNDS {
        let key = common::unique_key(&format!("notice-{round}"));
        let held = holder
            .acquire(&key, &common::owner(), Duration::from_secs(1))
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let (waiter, key) = (waiter.clone(), key.clone());
            async move {
                let granted = waiter.acquire(&key, &common::owner(), Duration::from_secs(5)).await;
                (Instant::now(), granted)
            }
        });
        tokio::time::sleep(WAITER_HEAD_START).await;
        held.release().await.unwrap();
        let released = Instant::now();
        let (granted_at, granted) = waiting.await.unwrap();
        granted
            .expect("the waiter gets the key once it is released")
            .release()
            .await
            .unwrap();
        gaps.push(granted_at.saturating_duration_since(released));
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
    let options = MySqlVersionLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits: Some(3),
    };
    assert_notices_cut_the_hand_over("mysql-version", |notices| async move {
        let lock = MySqlVersionLock::new(common::mysql_pool().await, options);
        Arc::new(lock.with_release_notices(notices)) as Arc<dyn DistributedLock>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_hands_the_mysql_lock_table_over_without_waiting_for_a_poll() {
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        permits: Some(3),
    };
    assert_notices_cut_the_hand_over("mysql", |notices| async move {
        let lock = MySqlLock::new(common::mysql_pool().await, options);
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
        let lock = Redlock::connect(&common::redlock_urls(), options).await.unwrap();
        Arc::new(lock.with_release_notices(notices)) as Arc<dyn DistributedLock>
    })
    .await;
}
