//! The stock itself on a master that a Sentinel fails over (`--redis-url
//! redis-sentinel://...`), after its replica missed some sales: the replica's link is
//! cut, three buyers buy, the master is killed and the replica promoted. The sale goes on.
//!
//! Replication is asynchronous, so the promoted replica has three more units than the
//! master had sold, and sells them again: units that did not exist. With
//! `--stock-wait-replicas 1` (`WAIT` after every sale) those three buyers were never told
//! "sold": they heard the outcome is unknown, and nothing is sold twice.
//!
//! Each test has its own master, two replicas and a Sentinel on free ports, and takes its
//! turn. Two replicas, as a shop runs: the promoted one needs a replica of its own, or no
//! sale after the failover could be acknowledged by one.

use std::time::{Duration, Instant};

use seckill::strategy::Strategy;
use testkit::TestSale;

const STOCK: usize = 10;
/// Sold while the replica hears everything, then while it hears nothing.
const REPLICATED: usize = 5;
const UNREPLICATED: usize = 3;

/// What the buyers were told, in order.
struct Told(Vec<String>);

impl Told {
    fn count(&self, answer: &str) -> usize {
        self.0.iter().filter(|told| *told == answer).count()
    }
}

/// A `redis` instance selling `STOCK` from a Sentinel's master, waiting for
/// `wait_replicas` replicas after every sale; the answers of every buyer through the
/// failover, until the promoted master says "sold out".
async fn sell_through_a_failover_of_the_stock(name: &str, wait_replicas: u32) -> Told {
    let _turn = testkit::take_turn().await;
    let (master, replicas, sentinel) = testkit::master_with_two_replicas(name);
    let sale = TestSale::new();
    let instance = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.redis_url = sentinel.url();
        config.stock_wait_replicas = wait_replicas;
        config.acquire_timeout_ms = 3_000;
    })
    .await;
    testkit::reset_stock(&instance.url, STOCK as i64).await;
    let http = reqwest::Client::new();
    let mut told = Vec::new();
    for _ in 0..REPLICATED {
        told.push(testkit::buy(&http, &instance.url).await);
    }
    for replica in &replicas {
        wait_until_the_replica_has(replica, &sale, REPLICATED).await;
    }

    testkit::cut_replicas_off(&master, &[&replicas[0], &replicas[1]]);
    for _ in 0..UNREPLICATED {
        told.push(testkit::buy(&http, &instance.url).await);
    }
    let killed = Instant::now();
    drop(master); // SIGKILL
    for replica in &replicas {
        replica.thaw();
    }
    while !replicas.iter().any(|replica| sentinel.master_port() == replica.port) {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the Sentinel promoted nobody within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Buyers keep coming; those during the move are told 503 and nothing is sold.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = testkit::buy(&http, &instance.url).await;
        if answer == "sold out" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not sold out 30 s after the failover: {told:?}"
        );
        if answer != "sold" {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        told.push(answer);
    }
    instance.stop().await.unwrap();
    println!("told: {told:?}");
    Told(told)
}

/// Waits until the replica counts `units` sold and holds no lock: what it would serve
/// from if promoted now.
async fn wait_until_the_replica_has(replica: &testkit::PrivateRedis, sale: &TestSale, units: usize) {
    let mut connection = testkit::connection(&replica.client()).await;
    let since = Instant::now();
    loop {
        let (lucky, lock): (Option<usize>, Option<String>) = redis::pipe()
            .get(sale.keys().lucky())
            .get(sale.keys().lock_of(seckill::sale::segments::Segment::WHOLE))
            .query_async(&mut connection)
            .await
            .unwrap();
        if lucky == Some(units) && lock.is_none() {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "the replica did not catch up: lucky {lucky:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_wait_a_failover_of_the_stock_sells_units_that_do_not_exist() {
    let told = sell_through_a_failover_of_the_stock("seckill-stock-resells", 0).await;
    // The master told the three buyers "sold"; the promoted replica never saw those
    // sales and sold its last units again.
    assert_eq!(told.count("sold"), STOCK + UNREPLICATED, "{:?}", told.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_tells_the_unreplicated_buyers_the_outcome_is_unknown_and_resells_nothing() {
    let told = sell_through_a_failover_of_the_stock("seckill-stock-waits", 1).await;
    let cut_off = &told.0[REPLICATED..REPLICATED + UNREPLICATED];
    assert!(
        cut_off.iter().all(|answer| answer == "504 sale_outcome_unknown"),
        "the sales no replica acknowledged are not told sold: {:?}",
        told.0
    );
    // After the failover, sales go on once the other replica follows the new master;
    // until then they are not acknowledged either, and told so.
    assert!(
        told.0[REPLICATED + UNREPLICATED..].contains(&"sold".to_owned()),
        "{:?}",
        told.0
    );
    assert!(
        told.count("sold") <= STOCK,
        "a unit sold that did not exist: {:?}",
        told.0
    );
}
