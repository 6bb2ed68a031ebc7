//! What only Redlock must do: grant with a majority when a minority of masters is gone
//! (and what that costs), refuse with the count when a majority is gone, and keep one
//! holder when a master restarts. Against five private Redis masters per test.
//! `cargo test --test it lock::redlock:: -- --nocapture` prints the latencies it measured.

use std::time::{Duration, Instant};

use seckill::lock::redlock::{Redlock, RedlockOptions};
use seckill::lock::{DistributedLock, HandOver, LockError};
use testkit::PrivateRedis;

const NODE_TIMEOUT: Duration = Duration::from_millis(50);

fn options() -> RedlockOptions {
    RedlockOptions {
        ttl: Duration::from_secs(5),
        renew: true,
        node_timeout: NODE_TIMEOUT,
    }
}

fn urls(masters: &[PrivateRedis]) -> Vec<String> {
    masters.iter().map(PrivateRedis::url).collect()
}

/// The median time of 10 try-acquire and release pairs on fresh keys.
async fn median_grant_and_release(lock: &Redlock) -> Duration {
    let mut times = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let guard = lock
            .try_acquire(&testkit::unique_key("latency"), &testkit::owner())
            .await
            .expect("granted");
        guard.release().await.unwrap();
        times.push(started.elapsed());
    }
    times.sort();
    times[5]
}

/// A grant is made once a majority said yes: the other masters' answers are not waited
/// for, so two frozen masters (silent until the node timeout) cost a grant and its
/// release nothing. Two killed ones cost nothing either: their connections are refused
/// at once. The figures are printed beside the one with all five up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_five_masters_gone_it_still_grants_without_waiting_for_them() {
    // Medians of a few milliseconds: measured alone, not beside a crowd on the other core.
    let _turn = testkit::take_turn().await;
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    let all_up = median_grant_and_release(&lock).await;

    // Killed: the connection is refused at once.
    let mut masters = masters;
    let killed: Vec<PrivateRedis> = masters.drain(..2).collect();
    drop(killed);
    let two_killed = median_grant_and_release(&lock).await;

    // Frozen (SIGSTOP): nothing answers, each request to them waits out the node timeout.
    let frozen = [PrivateRedis::start(), PrivateRedis::start()];
    let mut with_frozen: Vec<String> = urls(&masters);
    with_frozen.extend(urls(&frozen));
    let lock = Redlock::connect(&with_frozen, options()).await.unwrap();
    frozen.iter().for_each(PrivateRedis::freeze);
    let two_frozen = median_grant_and_release(&lock).await;

    println!("grant + release, median of 10: all 5 up {all_up:?}, 2 killed {two_killed:?}, 2 frozen {two_frozen:?}");
    // Waiting for the frozen masters would add a node timeout (50 ms) to each of the
    // grant and the release; half of one over this run's own baseline is the line.
    assert!(
        two_frozen < all_up + NODE_TIMEOUT / 2,
        "the grant or the release waited for the frozen minority: {two_frozen:?} (all up: {all_up:?})"
    );
}

/// A release is done once a majority has deleted the value: from then on no majority
/// holds it, and its notice need not wait for the slowest master. With two masters
/// frozen, the release does not wait for them (nor does the acquire: see above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_done_when_a_majority_has_deleted_not_when_the_slowest_answers() {
    let _turn = testkit::take_turn().await;
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    masters[..2].iter().for_each(PrivateRedis::freeze);
    let mut releases = Vec::new();
    for _ in 0..10 {
        let guard = lock
            .try_acquire(&testkit::unique_key("release"), &testkit::owner())
            .await
            .expect("three masters grant");
        let started = Instant::now();
        guard.release().await.expect("three masters delete");
        releases.push(started.elapsed());
    }
    releases.sort();
    println!("release with two masters frozen, sorted: {releases:?}");
    assert!(
        releases[5] < NODE_TIMEOUT / 2,
        "the median release waited for the frozen masters: {releases:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_three_of_five_masters_gone_acquire_fails_and_says_how_many_answered() {
    let mut masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    drop(masters.drain(..3).collect::<Vec<_>>());

    let error = lock
        .try_acquire(&testkit::unique_key("minority"), &testkit::owner())
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(
        message.contains("only 2 of 5 Redlock masters answered") && message.contains("needs 3"),
        "{message}"
    );
    let waited = lock
        .acquire(
            &testkit::unique_key("minority"),
            &testkit::owner(),
            Duration::from_secs(1),
        )
        .await;
    assert!(
        matches!(waited, Err(LockError::Backend { .. })),
        "not a timeout: nobody holds it, {waited:?}"
    );

    // And an instance starting now is refused with the same count.
    let mut two_of_five = urls(&masters);
    two_of_five.extend(std::iter::repeat_n("redis://127.0.0.1:1".to_owned(), 3));
    let refused = Redlock::connect(&two_of_five, options())
        .await
        .err()
        .expect("a start without a majority is refused");
    assert!(
        refused.to_string().contains("only 2 of 5 Redlock masters answer"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_restarts_empty_cannot_hand_the_lock_to_a_second_holder_while_the_others_hold() {
    let mut masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let (first, second) = (
        Redlock::connect(&urls(&masters), options()).await.unwrap(),
        Redlock::connect(&urls(&masters), options()).await.unwrap(),
    );
    let key = testkit::unique_key("restart");
    let held = first.try_acquire(&key, &testkit::owner()).await.unwrap();

    // One master crashes and comes back with nothing: it would say yes to anyone.
    let port = masters[0].port;
    drop(masters.remove(0));
    masters.push(PrivateRedis::start_on(port));
    for _ in 0..5 {
        let taken = second.try_acquire(&key, &testkit::owner()).await;
        assert!(
            matches!(taken, Err(LockError::Busy { .. })),
            "one empty master let a second holder in: {taken:?}"
        );
    }
    assert!(held.is_held());
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_persistence_a_restarted_master_still_holds_its_key_so_a_bare_majority_stays_safe() {
    // The holder gets exactly three of five: two masters are down when it acquires.
    let mut masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start_persistent()).collect();
    let (first, second) = (
        Redlock::connect(&urls(&masters), options()).await.unwrap(),
        Redlock::connect(&urls(&masters), options()).await.unwrap(),
    );
    let down: Vec<(u16, tempfile::TempDir)> = masters.drain(3..).map(PrivateRedis::crash).collect();
    let key = testkit::unique_key("bare-majority");
    let held = first
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("three of five is a majority");

    // One of its three crashes and restarts from its append-only file; the two come back.
    let (port, dir) = masters.remove(0).crash();
    masters.push(PrivateRedis::restart_persistent(port, dir));
    masters.extend(
        down.into_iter()
            .map(|(port, dir)| PrivateRedis::restart_persistent(port, dir)),
    );

    // Without the fsynced file the restarted master and the two that were down would be
    // three yeses for the second holder. With it, the restarted master still says no.
    let taken = second.try_acquire(&key, &testkit::owner()).await;
    assert!(
        matches!(taken, Err(LockError::Busy { .. })),
        "a second holder got the lock: {taken:?}"
    );
    held.release().await.unwrap();
}

/// Renewal by a majority moves the validity on, by the same arithmetic as the grant:
/// a holder whose keys are extended keeps trusting its lock past the first deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_keys_are_renewed_stays_valid_past_its_first_deadline() {
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let ttl = Duration::from_millis(600);
    let lock = Redlock::connect(&urls(&masters), RedlockOptions { ttl, ..options() })
        .await
        .unwrap();
    let guard = lock
        .acquire(&testkit::unique_key("renewed"), &testkit::owner(), ttl)
        .await
        .expect("granted");
    tokio::time::sleep(ttl * 2).await;
    assert!(
        guard.is_held(),
        "renewed on every master, yet the holder stopped trusting its lock at the first deadline"
    );
    guard.release().await.expect("still ours at release");
}

/// What each master holds under `key`: its value, or `None`.
async fn values_on(masters: &[PrivateRedis], key: &str) -> Vec<Option<String>> {
    let mut values = Vec::new();
    for master in masters {
        let mut connection = master.client().get_multiplexed_async_connection().await.unwrap();
        values.push(redis::cmd("GET").arg(key).query_async(&mut connection).await.unwrap());
    }
    values
}

/// A hand-over replaces the holder's value with the next owner's on every master, in
/// one script each: the key is never free on any of them, so a stranger is refused,
/// and the next owner's release frees it everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_puts_the_next_owners_value_on_every_master() {
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    let stranger = Redlock::connect(&urls(&masters), options()).await.unwrap();
    let key = testkit::unique_key("hand-over");
    let held = lock.try_acquire(&key, &testkit::owner()).await.unwrap();
    let next = testkit::owner();

    let HandOver::Granted(handed) = held.hand_over(&next).await.unwrap() else {
        panic!("Redlock hands its key over");
    };
    assert!(handed.is_held());
    // The slowest masters' scripts may still be on their way: wait for them.
    tokio::time::sleep(NODE_TIMEOUT).await;
    let values = values_on(&masters, &key).await;
    assert!(
        values
            .iter()
            .all(|value| value.as_deref().is_some_and(|value| value.starts_with(next.as_str()))),
        "every master holds the next owner's value: {values:?}"
    );
    let refused = stranger.try_acquire(&key, &testkit::owner()).await;
    assert!(matches!(refused, Err(LockError::Busy { .. })), "{refused:?}");

    handed.release().await.unwrap();
    tokio::time::sleep(NODE_TIMEOUT).await;
    assert_eq!(values_on(&masters, &key).await, vec![None; 5], "released everywhere");
}

/// A holder whose value a majority no longer has (it expired there, and someone else
/// took the key) cannot hand it over: it learns it lost the lock, and no master keeps
/// the next owner's value, not even those that still had the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_without_a_majority_says_lost_and_leaves_no_value_behind() {
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    let key = testkit::unique_key("hand-over-lost");
    let held = lock.try_acquire(&key, &testkit::owner()).await.unwrap();
    tokio::time::sleep(NODE_TIMEOUT).await;
    for master in &masters[..3] {
        let mut connection = master.client().get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("someone-else")
            .query_async(&mut connection)
            .await
            .unwrap();
    }
    let next = testkit::owner();

    let handed = held.hand_over(&next).await;
    assert!(matches!(handed, Err(LockError::Lost { .. })), "{handed:?}");
    let values = values_on(&masters, &key).await;
    assert_eq!(
        values,
        [vec![Some("someone-else".to_owned()); 3], vec![None; 2]].concat(),
        "the taker keeps its three masters, and the other two are free"
    );
}

/// A master paused (SIGSTOP) during an acquire reads the set only when it resumes, long
/// after its vote was counted silent and the release, answered by the others, sent its
/// delete. That delete must run after the late set: otherwise the set keeps the key on
/// that master for a whole TTL, with no holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_a_paused_master_runs_late_is_deleted_after_it_by_the_release() {
    let masters: Vec<PrivateRedis> = (0..5).map(|_| PrivateRedis::start()).collect();
    let lock = Redlock::connect(&urls(&masters), options()).await.unwrap();
    let key = testkit::unique_key("late-set");

    masters[0].freeze();
    let guard = lock
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("four masters grant");
    guard.release().await.expect("four masters delete");
    // Past the node timeouts of the paused master's set and of its delete: both silent.
    tokio::time::sleep(NODE_TIMEOUT * 4).await;
    masters[0].thaw();

    let mut paused = masters[0].client().get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut paused).await.unwrap();
        if left == -2 {
            break; // no such key
        }
        assert!(
            Instant::now() < deadline,
            "1 s after it resumed, the paused master still holds the released key, for {left} ms more"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
