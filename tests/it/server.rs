//! The end of a sale and the end of an instance, in the order that keeps a sale whole:
//! a buyer is answered from the sale's write, not after the release; and a stopping
//! instance gives its lock back only once the sales it granted have written, and leaves
//! no ZooKeeper node of a buyer it turned away.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill::lock::zookeeper::ZooKeeperLock;
use seckill::lock::DistributedLock;
use seckill::sale::segments::Segment;
use seckill::strategy::{Fencing, Strategy};

const STOCK: i64 = 10;

/// One `GET /stock/reduce`: its status and its JSON body.
async fn buy(base_url: &str) -> (u16, serde_json::Value) {
    let answer = reqwest::get(format!("{base_url}/stock/reduce"))
        .await
        .expect("the instance answers");
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or_default())
}

/// Waits (up to 2 s) until the instance named `instance` holds `lock:stock`: the
/// Redis lock's value starts with its holder's instance name.
async fn wait_until_held_by(sale: &testkit::TestSale, redis: &mut redis::aio::MultiplexedConnection, instance: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let holder: Option<String> = redis.get(sale.keys().lock_of(Segment::WHOLE)).await.unwrap();
        if holder.is_some_and(|holder| holder.starts_with(&format!("{instance}:"))) {
            return;
        }
        assert!(Instant::now() < deadline, "{instance} never held lock:stock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Instance A is asked to stop while its sale holds the lock and has read the stock but
/// not yet written it (it lingers 1.5 s there). Its grace for requests is 100 ms, far
/// shorter. If A gave its lock back when the grace ran out, B would be granted, read the
/// same stock and write it, and A's late write would sell that unit a second time:
/// fencing is off, so nothing else refuses it. A must drain its sale first.
#[tokio::test]
async fn a_stopping_instance_keeps_its_lock_until_the_sale_it_granted_has_written() {
    let sale = testkit::TestSale::new();
    let first = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.fencing = Fencing::Off;
        config.chaos_pause_before_write_ms = Some(1_500);
        config.shutdown_grace_ms = 100;
    })
    .await;
    let second = testkit::instance_with(Strategy::Redis, &sale, |config| config.fencing = Fencing::Off).await;
    testkit::reset_stock(&second.url, STOCK).await;
    let client = testkit::redis_client().await;
    let mut redis = testkit::connection(&client).await;

    let first_name = format!("seckill-{}", first.port);
    let first_url = first.url.clone();
    let first_sale = tokio::spawn(async move { buy(&first_url).await });
    wait_until_held_by(&sale, &mut redis, &first_name).await;
    let stopping = tokio::spawn(first.stop());
    tokio::time::sleep(Duration::from_millis(300)).await; // past the grace
    let (second_status, second_body) = buy(&second.url).await;
    let (first_status, first_body) = first_sale.await.unwrap();
    stopping.await.unwrap().expect("the first instance stops cleanly");

    let stock: i64 = redis.get(sale.keys().stock()).await.unwrap();
    let lucky: i64 = redis.get(sale.keys().lucky()).await.unwrap();
    assert_eq!(
        (first_status, second_status),
        (200, 200),
        "both buyers are served: {first_body} {second_body}"
    );
    assert_eq!(
        (stock, lucky),
        (STOCK - 2, 2),
        "two sales must leave {} units; {stock} left means both sold one unit: {first_body} {second_body}",
        STOCK - 2
    );
}

/// ZooKeeper stops answering while a sale lingers before its write (1 s). The write
/// goes to the stock Redis and succeeds; the release cannot reach ZooKeeper. The buyer
/// must hear "sold" as soon as the write stands, not after the release gives up: the
/// client gives up after 2 s of silence, and a delete that retries until the session
/// ends (Curator's guaranteed delete) would keep a sold unit from its buyer even longer.
#[tokio::test]
async fn a_sale_is_answered_from_its_write_while_its_release_cannot_reach_the_lock() {
    let zookeeper = testkit::PrivateServer::zookeeper();
    let instance = testkit::instance_with(Strategy::Zookeeper, &testkit::TestSale::new(), |config| {
        config.zookeeper.zk_connect = format!("127.0.0.1:{}", zookeeper.port);
        config.lock_ttl_ms = 15_000;
        config.chaos_pause_before_write_ms = Some(1_000);
    })
    .await;
    testkit::reset_stock(&instance.url, STOCK).await;

    let url = instance.url.clone();
    let sale = tokio::spawn(async move {
        let started = Instant::now();
        (buy(&url).await, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(400)).await; // granted, lingering before the write
    zookeeper.freeze();
    let ((status, body), answered_after) = sale.await.unwrap();
    zookeeper.thaw();

    assert_eq!(status, 200, "the sale was written, so it is sold: {body}");
    assert_eq!(body["sold"], true, "{body}");
    assert!(
        answered_after < Duration::from_millis(1_600),
        "answered {answered_after:?} after the buy: the buyer waited for the release, not for the write"
    );
}

/// The names in the ZooKeeper queue of lock `key`.
async fn zookeeper_queue(observer: &zookeeper_client::Client, key: &str) -> Vec<String> {
    match observer.list_children(&format!("/seckill/locks/{key}")).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(error) => panic!("ZooKeeper answers: {error}"),
    }
}

/// Waits (up to 5 s) until the ZooKeeper queue of `key` holds `nodes` nodes.
async fn wait_until_queued(observer: &zookeeper_client::Client, key: &str, nodes: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while zookeeper_queue(observer, key).await.len() != nodes {
        assert!(Instant::now() < deadline, "the queue of {key} never held {nodes} nodes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long instance A's next buyer waits, from A's release, for lock `key`.
async fn next_grant_after(a: &ZooKeeperLock, held: seckill::lock::LockGuard, key: &str) -> Duration {
    held.release().await.expect("A still holds");
    let released = Instant::now();
    let next = a
        .acquire(key, &testkit::owner(), Duration::from_secs(10))
        .await
        .expect("A's next buyer is served");
    let waited = released.elapsed();
    next.release().await.unwrap();
    waited
}

/// Instance B's buyer is turned away while it waits behind A (the sale drops its acquire,
/// as at shutdown), yet B goes on. Its node must leave the queue at once: A's next buyer
/// would otherwise wait behind it for as long as B's session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_waiter_dropped_before_its_turn_takes_its_node_out_of_the_queue() {
    let key = testkit::unique_key("zk-dropped-waiter");
    let observer = zookeeper_client::Client::connect(&testkit::zookeeper_connect())
        .await
        .unwrap();
    let a = ZooKeeperLock::connect(testkit::zookeeper_options(4_000)).await.unwrap();
    let b = Arc::new(ZooKeeperLock::connect(testkit::zookeeper_options(4_000)).await.unwrap());
    let held = a.try_acquire(&key, &testkit::owner()).await.expect("a new key is free");

    let waiter = tokio::spawn({
        let (b, key) = (b.clone(), key.clone());
        async move { b.acquire(&key, &testkit::owner(), Duration::from_secs(30)).await }
    });
    wait_until_queued(&observer, &key, 2).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());

    let waited = next_grant_after(&a, held, &key).await;
    assert!(
        waited < Duration::from_secs(1),
        "A's next buyer waited {waited:?} after A's release, behind the node of B's dropped waiter"
    );
}

/// Instance A holds; B's buyer queues behind it; B stops: the sale drops the waiting
/// acquire, then shuts the lock down, and the process exits. B runs on a runtime of its
/// own, shut down after the lock's shutdown as the exit would: nothing B did not send by
/// then is sent. A session that is not closed stays until it expires (4 s to 40 s), and
/// with it any node of B's still in the queue. So the shutdown must close the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_zookeeper_instance_closes_its_session_so_no_node_of_it_stays_queued() {
    let key = testkit::unique_key("zk-stopping");
    let observer = zookeeper_client::Client::connect(&testkit::zookeeper_connect())
        .await
        .unwrap();
    let a = ZooKeeperLock::connect(testkit::zookeeper_options(4_000)).await.unwrap();
    let held = a.try_acquire(&key, &testkit::owner()).await.expect("a new key is free");

    let b_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let b = b_runtime
        .spawn(ZooKeeperLock::connect(testkit::zookeeper_options(4_000)))
        .await
        .unwrap()
        .map(Arc::new)
        .unwrap();
    let waiter = b_runtime.spawn({
        let (b, key) = (b.clone(), key.clone());
        async move { b.acquire(&key, &testkit::owner(), Duration::from_secs(30)).await }
    });
    wait_until_queued(&observer, &key, 2).await;
    let b_session = b.client().await.expect("the session is open").state_watcher();
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    let stopping = b.clone();
    b_runtime
        .spawn(async move { stopping.shutdown().await })
        .await
        .unwrap()
        .expect("B's lock shuts down");
    let b_session_after_shutdown = b_session.peek_state();
    b_runtime.shutdown_background();
    let queue_after_shutdown = zookeeper_queue(&observer, &key).await;

    let waited = next_grant_after(&a, held, &key).await;
    assert!(
        waited < Duration::from_secs(1),
        "A's next buyer waited {waited:?} after A's release, behind a node of the stopped B"
    );
    assert_eq!(
        queue_after_shutdown.len(),
        1,
        "B's node outlived its shutdown: {queue_after_shutdown:?}"
    );
    assert_eq!(
        b_session_after_shutdown,
        zookeeper_client::SessionState::Closed,
        "B's shutdown did not close its session"
    );
    drop(b);
}
