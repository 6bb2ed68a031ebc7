//! What only the MySQL lock table must do: one winner when two take over an expired
//! row, the sweeper, the hold count of nested acquires, migrations that two instances
//! can run at once, a hand-over in one UPDATE whose token outranks the grant it came
//! from. Against the MariaDB that `make test` starts.

use std::sync::Arc;
use std::time::Duration;

use seckill::lock::mysql::{MySqlLock, MySqlLockOptions};
use seckill::lock::{DistributedLock, HandOver, LockError};
use sqlx::MySqlPool;

fn options(ttl_ms: u64, renew: bool) -> MySqlLockOptions {
    MySqlLockOptions {
        ttl: Duration::from_millis(ttl_ms),
        renew,
        permits: Some(3),
    }
}

async fn hold_count(pool: &MySqlPool, name: &str) -> Option<u32> {
    sqlx::query_scalar("SELECT hold_count FROM seckill_locks WHERE name = ?")
        .bind(name)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn expire(pool: &MySqlPool, name: &str) {
    sqlx::query("UPDATE seckill_locks SET expires_at = NOW(3) - INTERVAL 1 SECOND WHERE name = ?")
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_takers_racing_for_one_expired_row_never_both_win() {
    let pool = testkit::mysql_pool().await;
    let (first, second) = (
        Arc::new(MySqlLock::new(pool.clone(), options(5000, true))),
        Arc::new(MySqlLock::new(pool.clone(), options(5000, true))),
    );
    let crashed = MySqlLock::new(pool.clone(), options(5000, false));
    let mut rounds_with_a_winner = 0;
    for round in 0..30 {
        let name = testkit::unique_key(&format!("takeover-{round}"));
        drop(
            crashed
                .acquire(&name, &testkit::owner(), Duration::from_secs(1))
                .await
                .unwrap(),
        ); // gone, row left
        expire(&pool, &name).await;
        let (owner_a, owner_b) = (testkit::owner(), testkit::owner());
        let (a, b) = tokio::join!(first.try_acquire(&name, &owner_a), second.try_acquire(&name, &owner_b));
        let winners = [&a, &b].iter().filter(|taken| taken.is_ok()).count();
        // Never two. Zero happens when InnoDB picks the would-be winner as a deadlock
        // victim: it backs off as if the row were held, and a later attempt wins.
        assert!(
            winners <= 1,
            "round {round}: both took the same expired row: {a:?} / {b:?}"
        );
        rounds_with_a_winner += winners;
        for taken in [a, b].into_iter().flatten() {
            taken.release().await.unwrap();
        }
    }
    assert!(
        rounds_with_a_winner >= 20,
        "only {rounds_with_a_winner} of 30 rounds had a winner"
    );
}

#[tokio::test]
async fn the_sweeper_deletes_the_row_of_a_holder_that_vanished() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(300, false));
    let name = testkit::unique_key("sweep");
    drop(
        lock.acquire(&name, &testkit::owner(), Duration::from_secs(1))
            .await
            .unwrap(),
    ); // no release
    assert_eq!(hold_count(&pool, &name).await, Some(1));
    // Expired after 300 ms, swept once a whole TTL past that, on the sweeper's 300 ms beat.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hold_count(&pool, &name).await, None, "the abandoned row is still there");
}

#[tokio::test]
async fn the_hold_count_in_the_row_follows_nested_acquires_and_releases() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, true));
    let (me, name) = (testkit::owner(), testkit::unique_key("nested"));
    let outer = lock.acquire(&name, &me, Duration::from_secs(1)).await.unwrap();
    let middle = lock.acquire(&name, &me, Duration::from_secs(1)).await.unwrap();
    let inner = lock.acquire(&name, &me, Duration::from_secs(1)).await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, Some(3));
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "one grant, one token");
    inner.release().await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, Some(2));
    middle.release().await.unwrap();
    assert!(matches!(
        lock.try_acquire(&name, &testkit::owner()).await,
        Err(LockError::Busy { .. })
    ));
    outer.release().await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, None);
}

/// On an empty MariaDB of the test's own, so that the migrations really run (the shared
/// one was migrated long ago): four instances start at once, every one starts, and each
/// migration in migrations/ is applied exactly once, successfully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_at_the_same_time_apply_the_migrations_without_tripping() {
    let mariadb = testkit::PrivateServer::mariadb();
    let url = mariadb.mysql_url();
    let starts: Vec<_> = (0..4)
        .map(|_| seckill::store::mysql::connect_checked(&url, 2))
        .collect();
    for started in futures_util::future::join_all(starts).await {
        started.expect("every instance starts");
    }
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).unwrap();
    let mut versions: Vec<i64> = files
        .filter_map(|file| {
            let name = file.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".sql")?.split('_').next()?.parse().ok()
        })
        .collect();
    versions.sort();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let applied: Vec<(i64, bool)> = sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    let expected: Vec<(i64, bool)> = versions.iter().map(|&version| (version, true)).collect();
    assert_eq!(applied, expected, "each migration once, applied");
}

/// A grant is one statement: the insert takes the row and its token, the row's
/// AUTO_INCREMENT id, with no counter to raise and stamp (two statements more, once).
/// A later grant of the name, after a release or after a take-over of an expired row,
/// has a larger one. The token is the id times 1000 (room for the row's hand-overs),
/// epoch 2: it outranks the counters' tokens (epoch 0) and the bare ids' (epoch 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_insert_that_takes_the_lock_also_takes_its_token() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, false));
    let name = testkit::unique_key("numbered");
    let row_id = || async {
        sqlx::query_scalar::<_, u64>("SELECT grant_id FROM seckill_locks WHERE name = ?")
            .bind(&name)
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let grant = || async {
        let guard = lock
            .acquire(&name, &testkit::owner(), Duration::from_secs(1))
            .await
            .unwrap();
        let token = guard.fencing_token().unwrap().clone();
        (guard, token)
    };

    let (first, first_token) = grant().await;
    assert_eq!(
        (first_token.epoch, first_token.counter),
        (2, row_id().await * 1000),
        "the token is the row's id, not yet handed over"
    );
    let counters: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM seckill_lock_fences WHERE name = ?")
        .bind(&name)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(counters, 0, "no counter was raised for the grant");
    first.release().await.unwrap();

    let (second, second_token) = grant().await;
    assert!(
        second_token.order() > first_token.order(),
        "{second_token} after {first_token}"
    );
    drop(second); // its holder vanished: the row stays until it expires
    expire(&pool, &name).await;

    let (third, third_token) = grant().await;
    assert!(
        third_token.order() > second_token.order(),
        "a take-over numbers its grant anew: {third_token} after {second_token}"
    );
    assert_eq!(third_token.counter, row_id().await * 1000);
    third.release().await.unwrap();
}

/// Statements of one kind (`Com_update`, `Com_delete`) that `pool`'s only connection has run so far.
async fn statements_run(pool: &MySqlPool, kind: &str) -> u64 {
    let (_, count): (String, String) = sqlx::query_as("SHOW SESSION STATUS WHERE Variable_name = ?")
        .bind(kind)
        .fetch_one(pool)
        .await
        .unwrap();
    count.parse().unwrap()
}

/// The release is on every hand-over's path, so it is one statement: a grant that was
/// not re-entered deletes its row at once, without first trying to lower a hold count.
/// (Before 2026-11-24 it sent the decrement first: two writes per release.)
#[tokio::test]
async fn a_release_that_ends_the_last_hold_is_one_delete() {
    let one_connection = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&testkit::mysql_url())
        .await
        .unwrap();
    let lock = MySqlLock::new(one_connection.clone(), options(5000, false));
    let name = testkit::unique_key("one-delete");
    let held = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let (updates, deletes) = (
        statements_run(&one_connection, "Com_update").await,
        statements_run(&one_connection, "Com_delete").await,
    );
    held.release().await.unwrap();
    assert_eq!(
        statements_run(&one_connection, "Com_update").await - updates,
        0,
        "no decrement tried"
    );
    assert_eq!(
        statements_run(&one_connection, "Com_delete").await - deletes,
        1,
        "one delete"
    );
    assert_eq!(hold_count(&one_connection, &name).await, None, "the row is gone");
}

async fn holder(pool: &MySqlPool, name: &str) -> (String, u64, u64) {
    sqlx::query_as("SELECT owner, grant_id, hand_overs FROM seckill_locks WHERE name = ?")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A hand-over is one UPDATE of the row: the next owner holds it, the row counts one
/// hand-over more, and the token is the row's id times 1000 plus its hand-overs.
#[tokio::test]
async fn a_hand_over_gives_the_row_to_the_next_owner_with_the_next_token() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, true));
    let name = testkit::unique_key("hand-over");
    let held = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let token = held.fencing_token().unwrap().clone();
    let (_, grant_id, _) = holder(&pool, &name).await;
    let next = testkit::owner();

    let HandOver::Granted(handed) = held.hand_over(&next).await.unwrap() else {
        panic!("the lock table hands its row over");
    };
    let handed_token = handed.fencing_token().unwrap().clone();
    assert_eq!(handed_token.counter, grant_id * 1000 + 1);
    assert!(handed_token.order() > token.order(), "{handed_token} after {token}");
    assert_eq!(holder(&pool, &name).await, (next.as_str().to_owned(), grant_id, 1));
    let stranger = MySqlLock::new(pool.clone(), options(5000, true));
    let refused = stranger.try_acquire(&name, &testkit::owner()).await;
    assert!(matches!(refused, Err(LockError::Busy { .. })), "{refused:?}");

    handed.release().await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, None, "the row is gone with the release");
    let after = stranger
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(
        after.fencing_token().unwrap().order() > handed_token.order(),
        "a new row outranks every hand-over of the last"
    );
    after.release().await.unwrap();
}

#[tokio::test]
async fn a_hand_over_of_a_row_someone_took_over_changes_nothing_and_says_lost() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, true));
    let name = testkit::unique_key("hand-over-lost");
    let held = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    expire(&pool, &name).await;
    let taker = MySqlLock::new(pool.clone(), options(5000, true));
    let taken = taker
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let before = holder(&pool, &name).await;

    let handed = held.hand_over(&testkit::owner()).await;
    assert!(matches!(handed, Err(LockError::Lost { .. })), "{handed:?}");
    assert_eq!(holder(&pool, &name).await, before, "the taker's row is untouched");
    taken.release().await.unwrap();
}

/// A token has room for 999 hand-overs of one row: the next hand-over releases the
/// row instead, and the grant after it is a new row, whose token outranks them all.
#[tokio::test]
async fn a_row_handed_over_999_times_is_released_at_the_next_hand_over() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, false));
    let name = testkit::unique_key("hand-over-limit");
    let mut guard = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    for _ in 0..999 {
        guard = match guard.hand_over(&testkit::owner()).await.unwrap() {
            HandOver::Granted(next) => next,
            other => panic!("{other:?} before the 999th hand-over"),
        };
    }
    let last = guard.fencing_token().unwrap().clone();
    assert_eq!(last.counter % 1000, 999);
    assert!(matches!(
        guard.hand_over(&testkit::owner()).await,
        Ok(HandOver::Released)
    ));
    assert_eq!(hold_count(&pool, &name).await, None, "released");
    let new_row = lock
        .acquire(&name, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(new_row.fencing_token().unwrap().order() > last.order());
    new_row.release().await.unwrap();
}

/// An owner that re-entered holds the row twice: handing over one of its holds must
/// not strand the row. It counts one hold down, like a release, and the other hold
/// still holds the row until it goes too.
#[tokio::test]
async fn a_hand_over_by_an_owner_that_reentered_counts_one_hold_down() {
    let pool = testkit::mysql_pool().await;
    let lock = MySqlLock::new(pool.clone(), options(5000, true));
    let name = testkit::unique_key("hand-over-reentered");
    let owner = testkit::owner();
    let first = lock.acquire(&name, &owner, Duration::from_secs(1)).await.unwrap();
    let second = lock.acquire(&name, &owner, Duration::from_secs(1)).await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, Some(2));

    let handed = first.hand_over(&testkit::owner()).await;
    assert!(matches!(handed, Ok(HandOver::Released)), "{handed:?}");
    assert_eq!(hold_count(&pool, &name).await, Some(1), "one hold left");
    assert_eq!(holder(&pool, &name).await.0, owner.as_str());
    second.release().await.unwrap();
    assert_eq!(hold_count(&pool, &name).await, None, "gone with the last hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_table_whose_server_went_silent_fails_in_time() {
    let proxy = testkit::nemesis::Proxy::start(testkit::mysql_port()).await;
    let lock = MySqlLock::new(testkit::mysql_pool_through(proxy.port).await, options(2000, true));
    testkit::a_mysql_lock_fails_in_time_when_mysql_goes_silent(&lock, Duration::from_secs(2), &proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_against_a_slow_mysql_answers_by_its_deadline_and_its_late_row_is_deleted() {
    let proxy = testkit::nemesis::Proxy::start(testkit::mysql_port()).await;
    let pool = testkit::mysql_pool().await;
    let options = MySqlLockOptions {
        permits: Some(1),
        ..options(30_000, true)
    };
    let lock = MySqlLock::new(testkit::mysql_pool_through(proxy.port).await, options);
    let name = testkit::unique_key("slow-mysql");
    let asked = testkit::mysql_acquires_answer_by_their_deadline(&lock, &name, &proxy).await;
    assert_eq!(hold_count(&pool, &name).await, Some(1), "the insert ran on the server");

    // The answer arrives: nobody waits for that grant any more, so its row goes.
    while hold_count(&pool, &name).await.is_some() {
        assert!(
            asked.elapsed() < testkit::SLOW_MYSQL_LATE_BY + Duration::from_secs(2),
            "a grant answered after its buyer gave up must be deleted, not kept for a TTL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
