//! The local queue (`src/sale/local_queue.rs`): the buyers of one instance line up in
//! process, and only the head of the queue asks the distributed lock. Seen from the
//! backend: at most one acquire attempt of an instance is ever in flight, where without
//! the local queue the crowd fills the semaphore in front of MySQL; and a release hands
//! the lock to the next buyer in line, a bounded number of times in a row, without
//! stranding a grant nobody came for.

use testkit::nemesis::Fault;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::lock::mysql::MySqlLockOptions;
use seckill::lock::mysql_version::MySqlVersionLock;
use seckill::lock::parts::reentrant::Reentrant;
use seckill::lock::redis::RedisLock;
use seckill::lock::DistributedLock;
use seckill::sale::local_queue::{LocalQueue, Turn, HAND_OVERS_IN_A_ROW};
use seckill::strategy::Strategy;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

const BUYERS: usize = 60;
/// A line long enough to last several runs of hand-overs.
const LONG_LINE: usize = 300;

// Each test takes its turn (`testkit::take_turn`): they count the lock's requests, which
// a crowd on the other core would slow into timeouts.

/// What the lock of one `mysql-version` instance counted (`lock_stats` in /healthz)
/// while `BUYERS` bought from it at once, each a unit, with the settings `adjust` changes.
async fn lock_stats_after_a_crowd(adjust: impl FnOnce(&mut seckill::config::Config)) -> seckill::lock::LockStats {
    let instance = testkit::instance_with(Strategy::MysqlVersion, &testkit::TestSale::new(), |config| {
        config.acquire_timeout_ms = 30_000;
        adjust(config);
    })
    .await;
    testkit::reset_stock(&instance.url, 1_000).await;
    let http = reqwest::Client::new();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|_| {
            let (http, url) = (http.clone(), instance.url.clone());
            tokio::spawn(async move { testkit::buy(&http, &url).await })
        })
        .collect();
    for buyer in buyers {
        assert_eq!(buyer.await.unwrap(), "sold");
    }
    let stats = testkit::healthz(&instance.url)
        .await
        .lock_stats
        .expect("a MySQL lock counts its attempts");
    instance.stop().await.unwrap();
    stats
}

/// The most acquire attempts one instance had at MySQL at once while `BUYERS` bought.
async fn peak_attempts_at_mysql(local_queue: bool) -> u64 {
    let stats = lock_stats_after_a_crowd(|config| config.local_queue = local_queue).await;
    stats.counters.permits.peak_in_flight as u64
}

/// Grants and acquire attempts of one instance while `BUYERS` bought.
async fn grants_and_attempts(hand_over: bool) -> (u64, u64) {
    let stats = lock_stats_after_a_crowd(|config| config.hand_over = hand_over).await;
    (stats.counters.grants, stats.counters.attempts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_head_of_an_instances_line_asks_the_lock() {
    let _turn = testkit::take_turn().await;
    assert_eq!(
        peak_attempts_at_mysql(true).await,
        1,
        "with the local queue, one attempt at a time reaches MySQL"
    );
    let without = peak_attempts_at_mysql(false).await;
    assert!(
        without > 1,
        "without the local queue, the crowd reaches MySQL several at a time (peak {without})"
    );
}

/// With a line of buyers on one instance, a release hands the lock to the next buyer
/// in one statement: most grants never ask MySQL, and every run of hand-overs stops
/// at the bound with a plain release, whose next grant is an attempt of its own.
/// `--hand-over false` makes every grant an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_next_buyer_in_line_a_bounded_number_of_times() {
    let _turn = testkit::take_turn().await;
    let (grants, attempts) = grants_and_attempts(true).await;
    assert_eq!(grants, BUYERS as u64);
    // One instance, one buyer at a time asking: every attempt is a grant, and every
    // other grant was handed over.
    let handed = grants - attempts;
    assert!(
        handed >= grants / 2,
        "only {handed} of {grants} grants were handed over ({attempts} attempts)"
    );
    assert!(
        handed <= u64::from(HAND_OVERS_IN_A_ROW) * attempts,
        "{handed} hand-overs after {attempts} attempts: a run went past {HAND_OVERS_IN_A_ROW}"
    );
    assert_eq!(
        grants_and_attempts(false).await,
        (BUYERS as u64, BUYERS as u64),
        "with --hand-over false every grant is an attempt"
    );
}

/// A run of hand-overs ends in a plain release and a pause, so a buyer of another
/// instance is served while this instance's line is still long, not after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_of_another_instance_is_served_while_this_instances_line_is_long() {
    let _turn = testkit::take_turn().await;
    let adjust = |config: &mut seckill::config::Config| config.acquire_timeout_ms = 30_000;
    let sale = testkit::TestSale::new();
    let busy = testkit::instance_with(Strategy::MysqlVersion, &sale, adjust).await;
    let other = testkit::instance_with(Strategy::MysqlVersion, &sale, adjust).await;
    testkit::reset_stock(&busy.url, 1_000).await;
    let http = reqwest::Client::new();
    let line: Vec<_> = (0..LONG_LINE)
        .map(|_| {
            let (http, url) = (http.clone(), busy.url.clone());
            tokio::spawn(async move { (testkit::buy(&http, &url).await, Instant::now()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let answer = testkit::buy(&http, &other.url).await;
    let other_served = Instant::now();
    assert_eq!(answer, "sold");
    let mut served_later = 0;
    for buyer in line {
        let (answer, served) = buyer.await.unwrap();
        assert_eq!(answer, "sold");
        served_later += usize::from(served > other_served);
    }
    busy.stop().await.unwrap();
    other.stop().await.unwrap();
    assert!(
        served_later >= LONG_LINE / 2,
        "the other instance's buyer was served after {} of the {LONG_LINE} buyers in line",
        LONG_LINE - served_later
    );
}

/// A grant handed over to a buyer who gave up while the hand-over was on its way
/// goes back at once: the holder finds the line empty and gives it back, instead of
/// leaving it to its lease while the other instances wait.
#[tokio::test]
async fn a_grant_handed_to_a_buyer_who_gave_up_goes_back_at_once() {
    let direct: MySqlConnectOptions = testkit::mysql_url().parse().unwrap();
    let proxy = testkit::nemesis::Proxy::start(direct.get_port()).await;
    let through_proxy = MySqlPoolOptions::new()
        .max_connections(2)
        .connect_with(direct.clone().port(proxy.port))
        .await
        .unwrap();
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(30),
        renew: true,
        permits: None,
    };
    let lock = Reentrant::new(Arc::new(MySqlVersionLock::new(through_proxy, options)));
    let queue = LocalQueue::new(true);
    let key = testkit::unique_key("unclaimed");
    let turn = queue
        .wait_for_turn(Instant::now() + Duration::from_secs(1))
        .await
        .unwrap();
    let guard = lock
        .acquire(&key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let version = guard.fencing_token().unwrap().counter;

    // A second buyer lines up, so the release hands over; the hand-over's answer is
    // held until after that buyer gave up.
    let gives_up = queue.wait_for_turn(Instant::now() + Duration::from_millis(300));
    proxy.strike(Fault::HoldAnswers);
    let hands_over = turn.release(&lock, guard, testkit::owner);
    let answers_later = async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        proxy.strike(Fault::Healed);
    };
    let (gave_up, released, ()) = tokio::join!(gives_up, hands_over, answers_later);
    assert!(gave_up.is_none(), "the second buyer's deadline passed in line");
    released.unwrap();

    let row: (u64, String) = sqlx::query_as("SELECT version, owner FROM seckill_version_locks WHERE name = ?")
        .bind(&key)
        .fetch_one(&testkit::mysql_pool().await)
        .await
        .unwrap();
    assert_eq!(
        row,
        (version + 1, String::new()),
        "the grant handed to nobody is still held (version {version} was the holder's)"
    );
}

/// The start of a hand-over: a first buyer takes the turn and a grant of `key`, a second
/// buyer queues, and the release hands that buyer the lock and passes it the turn.
/// Returns the second buyer's wait, which holds the turn once it runs again.
async fn hand_over_to_a_second_buyer<'q>(
    queue: &'q LocalQueue,
    lock: &Reentrant,
    key: &str,
) -> Pin<Box<impl Future<Output = Option<Turn<'q>>> + 'q>> {
    let far = Instant::now() + Duration::from_secs(30);
    let turn = queue.wait_for_turn(far).await.unwrap();
    let guard = lock
        .acquire(key, &testkit::owner(), Duration::from_secs(1))
        .await
        .unwrap();
    let mut next = Box::pin(queue.wait_for_turn(far));
    assert!(futures_util::poll!(&mut next).is_pending(), "the turn is taken");
    turn.release(lock, guard, testkit::owner).await.unwrap();
    next
}

/// A buyer turned away (the instance stopping) after the turn passed to it leaves the
/// grant handed to it in the queue: nobody else will take that turn, so the sale's
/// shutdown gives it back before the lock's own shutdown.
#[tokio::test]
async fn a_grant_left_by_a_buyer_turned_away_after_its_turn_came_is_given_back_at_shutdown() {
    let pool = testkit::mysql_pool().await;
    let options = MySqlLockOptions {
        ttl: Duration::from_secs(30),
        renew: true,
        permits: None,
    };
    let lock = Reentrant::new(Arc::new(MySqlVersionLock::new(pool.clone(), options)));
    let queue = LocalQueue::new(true);
    let key = testkit::unique_key("left-over");
    let turned_away = hand_over_to_a_second_buyer(&queue, &lock, &key).await;
    // It is turned away before it ever runs again, as a stopping instance does.
    drop(turned_away);
    let owner = || async {
        sqlx::query_scalar::<_, String>("SELECT owner FROM seckill_version_locks WHERE name = ?")
            .bind(&key)
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_ne!(owner().await, "", "the handed grant waits in the queue");

    queue.give_back_left_over().await;
    assert_eq!(owner().await, "", "given back");
}

/// With group commit a buyer may take its turn and leave it unused: the group before
/// already answered it, or its deadline passed as the turn came
/// (`Sale::sell_from_in_a_group`). The grant the last holder handed to that turn must
/// not stay in the queue, renewed by its keepalive, while other instances wait: passed
/// on unused, the turn gives it back when no buyer takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_passed_on_unused_gives_back_the_grant_handed_to_it() {
    const TTL_MS: u64 = 300;
    let client = testkit::redis_client().await;
    let connect = || async {
        RedisLock::connect(&client, testkit::redis_options(TTL_MS, true))
            .await
            .unwrap()
    };
    let lock = Reentrant::new(Arc::new(connect().await));
    let other_instance = connect().await;
    let queue = LocalQueue::new(true);
    let key = testkit::unique_key("passed-on");
    let next = hand_over_to_a_second_buyer(&queue, &lock, &key).await;
    let unused = next.await.expect("the turn passed to the second buyer");
    // It leaves the turn unused, as a buyer already answered does.
    unused.pass_on().await;

    tokio::time::sleep(Duration::from_millis(3 * TTL_MS)).await;
    let granted = other_instance.try_acquire(&key, &testkit::owner()).await;
    assert!(
        granted.is_ok(),
        "another instance still finds the key held three TTLs later: {granted:?}"
    );
    granted.unwrap().release().await.unwrap();
    lock.shutdown().await.unwrap();
}
