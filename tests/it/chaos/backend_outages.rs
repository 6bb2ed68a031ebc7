//! What a buyer receives while the lock's server is down, and how soon sales resume
//! when it is back: against private etcd, ZooKeeper and MariaDB servers that the tests kill.
//! `cargo test --test it chaos::backend_outages:: -- --nocapture` prints what it measured.

use std::time::{Duration, Instant};

use serde_json::Value;

use seckill::strategy::Strategy;

async fn reduce(url: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{url}/stock/reduce")).await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn lucky(sale: &testkit::TestSale) -> i64 {
    let client = testkit::redis_client().await;
    redis::cmd("GET")
        .arg(sale.keys().lucky())
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap()
}

/// Sells once, kills the lock's server, buys while it is down, restarts it, and
/// buys until a sale goes through again.
async fn outage(
    strategy: Strategy,
    server: &mut testkit::PrivateServer,
    adjust: impl FnOnce(&mut seckill::config::Config),
) {
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(strategy, &sale, |config| {
        config.acquire_timeout_ms = 3_000;
        adjust(config);
    })
    .await;
    testkit::reset_stock(&app.url, 10).await;
    assert_eq!(reduce(&app.url).await.1["sold"], true);

    server.stop();
    let asked = Instant::now();
    let (status, body) = reduce(&app.url).await;
    let answered_in = asked.elapsed();
    println!("{strategy} down: {status} {} after {answered_in:?}", body["error"]);
    assert_eq!(status, 503, "{body}");
    let code = body["error"].as_str().unwrap();
    assert!(code == "lock_backend_unavailable" || code == "lock_timeout", "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert!(
        answered_in < Duration::from_secs(10),
        "the buyer waited {answered_in:?}"
    );
    assert_eq!(
        lucky(&sale).await,
        1,
        "nothing may be sold while the lock's server is down"
    );

    server.restart();
    let back = Instant::now();
    loop {
        let (status, body) = reduce(&app.url).await;
        if status == 200 && body["sold"] == true {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "no sale 30 s after {strategy} came back: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("{strategy} back: first sale {:?} after the restart", back.elapsed());
    assert_eq!(lucky(&sale).await, 2);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_etcd_is_down_buyers_get_a_503_and_sales_resume_when_it_is_back() {
    let mut etcd = testkit::PrivateServer::etcd();
    let endpoint = format!("http://127.0.0.1:{}", etcd.port);
    outage(Strategy::Etcd, &mut etcd, |config| {
        config.etcd.etcd_endpoints = vec![endpoint]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_zookeeper_is_down_buyers_get_a_503_and_sales_resume_when_it_is_back() {
    let mut zookeeper = testkit::PrivateServer::zookeeper();
    let connect = format!("127.0.0.1:{}", zookeeper.port);
    outage(Strategy::Zookeeper, &mut zookeeper, |config| {
        config.zookeeper.zk_connect = connect
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_mariadb_is_down_the_lock_table_answers_503_and_sales_resume_when_it_is_back() {
    let mut mariadb = testkit::PrivateServer::mariadb();
    let url = mariadb.mysql_url();
    outage(Strategy::Mysql, &mut mariadb, |config| config.mysql_url = url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_mariadb_is_down_the_version_lock_answers_503_and_sales_resume_when_it_is_back() {
    let mut mariadb = testkit::PrivateServer::mariadb();
    let url = mariadb.mysql_url();
    outage(Strategy::MysqlVersion, &mut mariadb, |config| config.mysql_url = url).await;
}
