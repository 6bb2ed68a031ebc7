//! Orders (`--orders`, `src/orders/mod.rs`), against the project's test Redis and a real
//! MariaDB: every unit sold by two instances becomes one order row; an order a dead
//! consumer read and wrote but never acknowledged is taken over and written again,
//! still one row; a MariaDB killed and started again under the sale loses no order, on
//! one Redis and on a Redis Cluster.
//! The 500-request runs with orders are in loadtest/tests/it/run.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill::orders::ORDERS_GROUP;
use seckill::server::Instance;
use seckill::strategy::Strategy;

async fn instance(sale: &testkit::TestSale, mysql_url: String) -> Instance {
    testkit::instance_with(Strategy::Redis, sale, |config| {
        config.orders = true;
        config.orders_claim_idle_ms = 200;
        config.mysql_url = mysql_url;
    })
    .await
}

/// The sale's name and the ids of the units sold.
async fn sold(sale: &testkit::TestSale) -> (String, BTreeSet<String>) {
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    let name: String = redis.get(sale.keys().sale_name()).await.unwrap();
    let ids = testkit::sale_records(sale)
        .await
        .into_iter()
        .map(|record| record.sale_id)
        .collect();
    (name, ids)
}

/// The sale ids and buyers of the orders of sale `name` in MySQL.
async fn orders_of(mysql_url: &str, name: &str) -> Vec<(String, Option<String>)> {
    let pool = sqlx::MySqlPool::connect(mysql_url).await.unwrap();
    let rows = sqlx::query_as("SELECT sale_id, buyer FROM seckill_orders WHERE sale = ? ORDER BY sale_id")
        .bind(name)
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows
}

/// The orders of sale `name`, once there are `count` of them and the stream holds none
/// (a writer deletes an entry once its row is written) and the group none pending;
/// panics after `within`.
async fn wait_for_orders(
    sale: &testkit::TestSale,
    redis: &mut redis::aio::MultiplexedConnection,
    mysql_url: &str,
    name: &str,
    count: usize,
    within: Duration,
) -> Vec<(String, Option<String>)> {
    let deadline = Instant::now() + within;
    loop {
        let orders = orders_of(mysql_url, name).await;
        // NOGROUP until a consumer has created the group: not drained yet.
        let pending: redis::RedisResult<redis::Value> = redis::cmd("XPENDING")
            .arg(sale.keys().orders())
            .arg(ORDERS_GROUP)
            .query_async(redis)
            .await;
        let none_pending =
            matches!(&pending, Ok(redis::Value::Array(summary)) if summary.first() == Some(&redis::Value::Int(0)));
        let left: usize = redis.xlen(sale.keys().orders()).await.unwrap();
        if orders.len() == count && none_pending && left == 0 {
            return orders;
        }
        assert!(
            Instant::now() < deadline,
            "after {within:?}: {} orders of {count}, {left} left in the stream, pending {pending:?}",
            orders.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_unit_sold_by_two_instances_becomes_one_order_naming_its_buyer() {
    let sale = testkit::TestSale::new();
    let mysql_url = testkit::mysql_url();
    let (first, second) = (
        instance(&sale, mysql_url.clone()).await,
        instance(&sale, mysql_url.clone()).await,
    );
    testkit::reset_stock(&first.url, 20).await;
    let http = reqwest::Client::new();
    let answers = futures_util::future::join_all((0..30).map(|buyer| {
        let url = if buyer % 2 == 0 { &first.url } else { &second.url };
        let http = &http;
        async move { testkit::buy_as(http, url, &format!("buyer-{buyer}")).await }
    }))
    .await;
    assert_eq!(
        answers.iter().filter(|answer| *answer == "sold").count(),
        20,
        "{answers:?}"
    );
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    let (name, sold) = sold(&sale).await;
    let orders = wait_for_orders(&sale, &mut redis, &mysql_url, &name, 20, Duration::from_secs(10)).await;
    let ordered: BTreeSet<String> = orders.iter().map(|(sale_id, _)| sale_id.clone()).collect();
    assert_eq!(ordered, sold, "one order per unit sold, by sale id");
    assert!(orders
        .iter()
        .all(|(_, buyer)| buyer.as_deref().is_some_and(|b| b.starts_with("buyer-"))));
    assert!(testkit::healthz(&first.url).await.orders);
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

/// A consumer that read an order, wrote its row and died before its `XACK` leaves the
/// entry pending. The instance takes it over after `--orders-claim-idle-ms` and writes
/// it again: the primary key keeps it one row, and the entry is acknowledged.
#[tokio::test]
async fn an_order_a_dead_consumer_wrote_but_never_acknowledged_is_taken_over_and_stays_one_row() {
    let sale = testkit::TestSale::new();
    let mysql_url = testkit::mysql_url();
    let app = instance(&sale, mysql_url.clone()).await;
    testkit::reset_stock(&app.url, 5).await;
    let http = reqwest::Client::new();
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "sold");
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    let (name, _) = sold(&sale).await;
    wait_for_orders(&sale, &mut redis, &mysql_url, &name, 1, Duration::from_secs(10)).await;

    // The dead consumer: one new entry, read by "ghost" in the same transaction as it is
    // added (so the instance's consumer cannot read it first), and its row written.
    let ghost_sale = format!("ghost-{:016x}", rand::random::<u64>());
    let record = serde_json::json!({
        "sale_id": &ghost_sale, "instance": "ghost", "port": 1, "strategy": "redis",
        "buyer": "bob", "lock_wait_ms": 0.0, "locked_at_ms": 0, "sold_at_ms": 1_700_000_000_000u64,
    })
    .to_string();
    let (_, read): (String, redis::Value) = redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg(sale.keys().orders())
        .arg("*")
        .arg("sale")
        .arg(&name)
        .arg("record")
        .arg(&record)
        .cmd("XREADGROUP")
        .arg("GROUP")
        .arg(ORDERS_GROUP)
        .arg("ghost")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(sale.keys().orders())
        .arg(">")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(format!("{read:?}").contains(&ghost_sale), "the ghost read it: {read:?}");
    let pool = sqlx::MySqlPool::connect(&mysql_url).await.unwrap();
    sqlx::query(
        "INSERT INTO seckill_orders (sale_id, sale, buyer, instance, sold_at) VALUES (?, ?, 'bob', 'ghost', NOW(3))",
    )
    .bind(&ghost_sale)
    .bind(&name)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let orders = wait_for_orders(&sale, &mut redis, &mysql_url, &name, 2, Duration::from_secs(10)).await;
    assert_eq!(orders.iter().filter(|(sale_id, _)| *sale_id == ghost_sale).count(), 1);
    assert_eq!(testkit::metric(&app.url, "seckill_orders_taken_over_total").await, 1.0);
    assert_eq!(
        testkit::metric(&app.url, "seckill_orders_written_total").await,
        2.0,
        "alice's order, and the ghost's written again"
    );
    app.stop().await.unwrap();
}

/// MariaDB killed under the sale: the sales go on (they need Redis only), the orders
/// wait in the stream, and all of them are written once MariaDB is back, even those of
/// a sale that was reset while MariaDB was down.
#[tokio::test]
async fn a_mariadb_killed_and_started_again_under_the_sale_and_a_reset_loses_no_order() {
    let sale = testkit::TestSale::new();
    let mut mariadb = testkit::PrivateServer::mariadb();
    let mysql_url = mariadb.mysql_url();
    let app = instance(&sale, mysql_url.clone()).await;
    testkit::reset_stock(&app.url, 20).await;
    let http = reqwest::Client::new();
    for buyer in 0..10 {
        assert_eq!(
            testkit::buy_as(&http, &app.url, &format!("before-{buyer}")).await,
            "sold"
        );
    }
    mariadb.stop();
    for buyer in 0..10 {
        assert_eq!(
            testkit::buy_as(&http, &app.url, &format!("during-{buyer}")).await,
            "sold",
            "a sale does not wait for MySQL"
        );
    }
    let (first_sale, first_sold) = sold(&sale).await;
    // A new sale while the first one's last ten orders wait for MySQL.
    testkit::reset_stock(&app.url, 5).await;
    for buyer in 0..3 {
        assert_eq!(testkit::buy_as(&http, &app.url, &format!("next-{buyer}")).await, "sold");
    }
    let (next_sale, next_sold) = sold(&sale).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    mariadb.restart();
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    let ids = |orders: Vec<(String, Option<String>)>| -> BTreeSet<String> {
        orders.into_iter().map(|(sale_id, _)| sale_id).collect()
    };
    let first = wait_for_orders(&sale, &mut redis, &mysql_url, &first_sale, 20, Duration::from_secs(30)).await;
    assert_eq!(ids(first), first_sold, "every order of the sale before the reset");
    let next = wait_for_orders(&sale, &mut redis, &mysql_url, &next_sale, 3, Duration::from_secs(30)).await;
    assert_eq!(ids(next), next_sold);
    app.stop().await.unwrap();
}

/// The buyers of every order row in MySQL, by the name of the sale they bought in.
async fn buyers_by_sale(mysql_url: &str) -> BTreeMap<String, BTreeSet<String>> {
    let pool = sqlx::MySqlPool::connect(mysql_url).await.unwrap();
    let rows: Vec<(String, Option<String>)> = sqlx::query_as("SELECT sale, buyer FROM seckill_orders")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    let mut by_sale = BTreeMap::<String, BTreeSet<String>>::new();
    for (sale, buyer) in rows {
        by_sale.entry(sale).or_default().insert(buyer.unwrap_or_default());
    }
    by_sale
}

/// The test above on a Redis Cluster, where a reset puts each segment on sale in a
/// transaction of its own. Each segment has an orders stream of its own, and the reset
/// must leave it as the one Redis leaves its one: the orders of the first sale, which
/// MariaDB could not take while it was down, are still written once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_mariadb_killed_under_the_sale_and_a_reset_loses_no_order() {
    let _turn = testkit::take_turn().await;
    let cluster = testkit::PrivateRedisCluster::start(3);
    let sale = testkit::TestSale::new();
    let mut mariadb = testkit::PrivateServer::mariadb();
    let mysql_url = mariadb.mysql_url();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        cluster.holds_the_stock_of(config);
        config.stock_segments = 2;
        config.orders = true;
        config.orders_claim_idle_ms = 200;
        config.mysql_url = mysql_url.clone();
    })
    .await;
    let http = reqwest::Client::new();
    let buy_all = |buyers: Vec<String>| {
        let (http, url) = (&http, &app.url);
        async move {
            for buyer in buyers {
                assert_eq!(testkit::buy_as(http, url, &buyer).await, "sold", "{buyer}");
            }
        }
    };
    let named = |prefix: &str, count: usize| -> Vec<String> { (0..count).map(|n| format!("{prefix}-{n}")).collect() };

    testkit::reset_stock(&app.url, 20).await;
    buy_all(named("before", 10)).await;
    mariadb.stop();
    buy_all(named("during", 10)).await;
    // A new sale while the first one's last ten orders wait for MySQL.
    testkit::reset_stock(&app.url, 5).await;
    buy_all(named("next", 3)).await;
    mariadb.restart();

    let first: BTreeSet<String> = named("before", 10).into_iter().chain(named("during", 10)).collect();
    let next: BTreeSet<String> = named("next", 3).into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        let written = buyers_by_sale(&mysql_url).await;
        if written.values().map(BTreeSet::len).sum::<usize>() >= 23 || Instant::now() >= deadline {
            break written;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut buyers: Vec<BTreeSet<String>> = written.into_values().collect();
    buyers.sort_by_key(|buyers| std::cmp::Reverse(buyers.len()));
    assert_eq!(
        buyers,
        [first, next],
        "every order of the sale before the reset, then the three of the next, each under its sale"
    );
    app.stop().await.unwrap();
}

/// `seckill reconcile` against a real sale: three units sold with orders agree (exit 0);
/// then what a failover of the stock leaves behind, played by hand in the two stores: the
/// record of one sale is gone from Redis (the promoted replica never had it) while its
/// order is in MySQL, and another sale of the same unit has a record and an order (the
/// replica sold it again). Reconcile names both, and exits 3.
#[tokio::test]
async fn reconcile_agrees_on_a_clean_sale_and_names_what_a_lost_sale_left_behind() {
    let sale = testkit::TestSale::new();
    let mysql_url = testkit::mysql_url();
    let app = instance(&sale, mysql_url.clone()).await;
    testkit::reset_stock(&app.url, 3).await;
    let http = reqwest::Client::new();
    for _ in 0..3 {
        assert_eq!(testkit::buy(&http, &app.url).await, "sold");
    }
    let (name, _) = sold(&sale).await;
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    wait_for_orders(&sale, &mut redis, &mysql_url, &name, 3, Duration::from_secs(10)).await;
    app.stop().await.unwrap();

    let reconcile = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args([
                "reconcile",
                "--redis-url",
                &testkit::redis_url(),
                "--key-prefix",
                sale.prefix(),
            ])
            .args(["--mysql-url", &mysql_url, "--wait-ms", "2000"])
            .output()
            .expect("seckill runs")
    };
    let clean = reconcile();
    let report = String::from_utf8_lossy(&clean.stdout).into_owned();
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{report}{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(
        report.contains("orders in MySQL                 3") && report.contains("verdict: AGREE"),
        "{report}"
    );

    // The unit sold first (stock_before 3) was lost with its record, and sold again to
    // "late": the promoted replica's record of that sale, and its order.
    let first: String = redis.lpop(sale.keys().sales(), None).await.unwrap();
    let first: seckill::sale::stock::SaleRecord = serde_json::from_str(&first).unwrap();
    let mut resold = first.clone();
    resold.sale_id = format!("late-{}", &name[..16]); // the primary key: one per test run
    let _: () = redis
        .rpush(sale.keys().sales(), serde_json::to_string(&resold).unwrap())
        .await
        .unwrap();
    let pool = sqlx::MySqlPool::connect(&mysql_url).await.unwrap();
    sqlx::query(
        "INSERT INTO seckill_orders (sale_id, sale, buyer, instance, segment, stock_before, sold_at) \
         VALUES (?, ?, 'late', 'promoted', NULL, ?, NOW(3))",
    )
    .bind(&resold.sale_id)
    .bind(&name)
    .bind(first.stock_before)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let after = reconcile();
    let report = String::from_utf8_lossy(&after.stdout).into_owned();
    assert_eq!(after.status.code(), Some(3), "{report}");
    for line in [
        "orders in MySQL                 4",
        "orders missing                  0",
        "orders the stock does not know  1",
        "units with two orders           1",
        "units sold beyond the stock     1",
        "verdict: DISAGREE",
    ] {
        assert!(report.contains(line), "no `{line}` in:\n{report}");
    }
}

/// With `--stock-wait-replicas 1`, the order writer writes only orders whose stream entry
/// a replica has (src/orders/mod.rs, 5): one written before the replica is cut off; one
/// sold while it is cut off, whose buyer hears the outcome is unknown, stays unwritten
/// until the replica is back, then is written. An order written from an entry the
/// replica never got would outlive a failover that loses its sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_wait_an_order_is_written_only_once_a_replica_has_its_entry() {
    let _turn = testkit::take_turn().await;
    let master = testkit::PrivateRedis::start();
    let replica = testkit::PrivateRedis::start_replica_of(master.port);
    testkit::wait_until_a_replica_acknowledges(&master);
    let sale = testkit::TestSale::new();
    let mysql_url = testkit::mysql_url();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.redis_url = master.url();
        config.orders = true;
        config.mysql_url = mysql_url.clone();
        config.stock_wait_replicas = 1;
    })
    .await;
    testkit::reset_stock(&app.url, 5).await;
    let mut on_master = testkit::connection(&master.client()).await;
    let name: String = on_master.get(sale.keys().sale_name()).await.unwrap();
    let http = reqwest::Client::new();
    assert_eq!(testkit::buy(&http, &app.url).await, "sold");
    let orders_within = |count: usize, within: Duration| {
        let (mysql_url, name) = (mysql_url.clone(), name.clone());
        async move {
            let deadline = Instant::now() + within;
            loop {
                let orders = orders_of(&mysql_url, &name).await.len();
                if orders == count || Instant::now() >= deadline {
                    return orders;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(orders_within(1, Duration::from_secs(5)).await, 1);

    testkit::cut_replicas_off(&master, &[&replica]);
    assert_eq!(testkit::buy(&http, &app.url).await, "504 sale_outcome_unknown");
    // Longer than a few reads and waits of the writer: the entry is there, the replica is not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        orders_of(&mysql_url, &name).await.len(),
        1,
        "an order was written that no replica had"
    );

    replica.thaw();
    assert_eq!(
        orders_within(2, Duration::from_secs(15)).await,
        2,
        "the order is written once the replica has its entry"
    );
    app.stop().await.unwrap();
}
