//! End to end: two real instances of the service (in this process, on two ports, each
//! with its own lock handle and Redis connections, as two processes would have), 500
//! one-shot buyers from goose, and the verdict read back from Redis.
//!
//! Needs the project's test Redis (`make test` starts it). Each test sells a sale of its
//! own (`TestSale`, a key prefix of its own); the attacks run one at a time because
//! goose keeps global state.

use std::time::Duration;

use loadtest::history::checks::Status;
use loadtest::{run, Options, Report, Verdict};
use seckill::sale::segments::Segments;
use seckill::server::Instance;
use seckill::strategy::Strategy;
use testkit::TestSale;

/// How the instances of one run are started, and how the crowd buys.
#[derive(Clone, Copy)]
struct Run {
    stock_segments: u32,
    one_per_buyer: bool,
    repeat_buyers: f64,
    orders: bool,
    /// `--group-commit`: one grant sells to every buyer waiting in its instance's queue.
    group_commit: bool,
}

/// One stock, no buyer held to one unit, no buyer buying twice.
const PLAIN: Run = Run {
    stock_segments: 1,
    one_per_buyer: false,
    repeat_buyers: 0.0,
    orders: false,
    group_commit: false,
};

async fn start(strategy: Strategy, sale: &TestSale) -> Instance {
    start_for(strategy, sale, PLAIN).await
}

/// An instance of `strategy` selling `sale` as `run` says: its options, and a buyer's patience.
fn config_for(strategy: Strategy, sale: &TestSale, run: Run) -> seckill::config::Config {
    let mut config = testkit::config(strategy, sale);
    config.acquire_timeout_ms = 30_000;
    config.stock_segments = run.stock_segments;
    config.one_per_buyer = run.one_per_buyer;
    config.orders = run.orders;
    config.group_commit = run.group_commit;
    config
}

async fn start_for(strategy: Strategy, sale: &TestSale, run: Run) -> Instance {
    testkit::redis_client().await; // the project's test Redis, or a clear panic
    Instance::start(config_for(strategy, sale, run))
        .await
        .unwrap_or_else(|error| panic!("cannot start an instance (is Redis running? `make test` starts it): {error:#}"))
}

fn options(hosts: Vec<String>, sale: &TestSale) -> Options {
    options_for(hosts, sale, PLAIN)
}

fn options_for(hosts: Vec<String>, sale: &TestSale, run: Run) -> Options {
    Options {
        hosts,
        users: 500,
        initial_stock: 300,
        redis_url: testkit::redis_url(),
        keys: sale.keys().clone(),
        mysql_url: testkit::mysql_url(),
        admin_token: None,
        goose_metrics: false,
        live_history: None,
        repeat_buyers: run.repeat_buyers,
    }
}

/// The status of the history's check `name` in the report.
fn check(report: &Report, name: &str) -> Status {
    let found = report.checks.iter().find(|check| check.name == name);
    found
        .unwrap_or_else(|| panic!("no check `{name}` in {:?}", report.checks))
        .status
}

/// Every check of the history ran, and none failed or could not decide.
fn assert_every_check_passed(report: &Report) {
    let names: Vec<&str> = report.checks.iter().map(|check| check.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "unique",
            "lost",
            "phantom",
            "sold-out",
            "real-time",
            "one-per-buyer",
            "fence-order",
            "linearizable"
        ]
    );
    let not_passed: Vec<_> = report
        .checks
        .iter()
        .filter(|check| !matches!(check.status, Status::Pass | Status::Skipped))
        .collect();
    assert!(not_passed.is_empty(), "{not_passed:?}");
    assert_eq!(check(report, "linearizable"), Status::Pass, "never skipped");
}

/// A run with every option of the sale: held, exactly 300 units sold, each with its order.
fn assert_every_option_held(report: &Report) {
    assert_eq!(report.verdict, Verdict::Held, "{}", report.render());
    assert_every_check_passed(report);
    assert_eq!((report.stock_left, report.lucky, report.told_sold), (0, 300, 300));
    assert_eq!((report.units_sold_twice, report.buyers_served_twice), (0, 0));
    assert_eq!(report.error_count(), 0, "{}", report.render());
    let orders = report.orders.clone().expect("the orders were checked");
    assert_eq!(
        (orders.rows, orders.unread, orders.pending),
        (300, 0, 0),
        "{}",
        report.render()
    );
}

/// Two instances of `strategy` selling a sale of their own, the crowd, the report.
async fn flash_sale(strategy: Strategy) -> Report {
    flash_sale_for(strategy, &TestSale::new(), PLAIN).await
}

/// The same, run as `how` says, selling `sale`.
async fn flash_sale_for(strategy: Strategy, sale: &TestSale, how: Run) -> Report {
    let _turn = testkit::take_turn().await;
    let (first, second) = (
        start_for(strategy, sale, how).await,
        start_for(strategy, sale, how).await,
    );
    let report = run(&options_for(vec![first.url.clone(), second.url.clone()], sale, how))
        .await
        .expect("the load test runs");
    println!("{}", report.render());
    first.stop().await.unwrap();
    second.stop().await.unwrap();
    report
}

fn assert_held(report: &Report) {
    assert_eq!(report.verdict, Verdict::Held, "{}", report.render());
    assert_every_check_passed(report);
    assert_eq!((report.stock_left, report.lucky), (0, 300), "{}", report.render());
    assert_eq!(report.told_sold, 300);
    assert_eq!(report.told_sold_out, 200);
    assert_eq!(report.error_count(), 0, "{}", report.render());
    assert_eq!(report.units_sold_twice, 0);
    assert_eq!(
        (
            report.holders_overlapped,
            report.fence_refused.reads + report.fence_refused.writes
        ),
        (0, 0),
        "a lock that holds has no two holders at once, so the fence has nothing to refuse: {}",
        report.render()
    );
    assert!(report.passed());
}

/// A baseline must show its lesson in every run, not most.
fn assert_oversold_as_expected(report: &Report) {
    assert_eq!(report.verdict, Verdict::Oversold, "{}", report.render());
    assert_eq!(
        check(report, "unique"),
        Status::Fail,
        "the history names the buyers of a unit sold twice"
    );
    assert!(report.units_sold_twice > 0, "{}", report.render());
    assert!(
        report.holders_overlapped >= report.units_sold_twice,
        "every unit sold twice had two holders at once: {}",
        report.render()
    );
    assert_eq!(
        report.fencing_regressions,
        None,
        "no tokens, so nothing to check: {}",
        report.render()
    );
    assert!(report.render().contains("n/a"), "{}", report.render());
    assert!(report.passed(), "{}", report.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::Redis).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_that_degrades_to_mysql_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::RedisDegrade).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
    let cost = report
        .database
        .clone()
        .unwrap_or_else(|| panic!("no lock stats: {}", report.render()));
    assert_eq!(
        cost.degrade.len(),
        2,
        "both instances report their mode: {}",
        report.render()
    );
    assert!(report.render().contains("lock mode, instance 1"), "{}", report.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_five_masters_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::Redlock).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, None, "Redlock issues no fencing tokens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_lock_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::Etcd).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zookeeper_lock_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::Zookeeper).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_lock_table_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::Mysql).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
    let cost = assert_database_cost_measured(&report);
    assert_eq!(cost.conflicts, 0, "a lock table has no version conflicts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_version_lock_sells_exactly_300_to_500_buyers_across_two_instances() {
    let report = flash_sale(Strategy::MysqlVersion).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0));
    assert_database_cost_measured(&report);
}

/// Four segments of 75 units, each behind its own lock key: the two instances hold up to
/// four grants at once, one per segment, and the verdict still finds every unit sold
/// once. Each segment's tokens and grants are judged on their own (a token of segment 0
/// may be older than one of segment 1 written before it), so these runs also show the
/// checker does not take two segments' holders for an overlap.
async fn assert_four_segments_held(strategy: Strategy) {
    let sale = TestSale::new();
    let four_segments = Run {
        stock_segments: 4,
        ..PLAIN
    };
    let report = flash_sale_for(strategy, &sale, four_segments).await;
    assert_held(&report);
    assert_eq!(report.fencing_regressions, Some(0), "{}", report.render());
    assert_eq!(report.stock_segments, 4);
    assert!(report.label().contains("4 stock segments"), "{}", report.label());
    let mut redis = testkit::connection(&testkit::redis_client().await).await;
    let records: Vec<String> = redis::AsyncCommands::lrange(&mut redis, sale.keys().sales(), 0, -1)
        .await
        .unwrap();
    let mut per_segment = [0; 4];
    for record in &records {
        let record: serde_json::Value = serde_json::from_str(record).unwrap();
        per_segment[record["segment"].as_u64().expect("a record names its segment") as usize] += 1;
    }
    assert_eq!(per_segment, [75; 4], "every segment sold its 75 units");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_over_four_stock_segments_sells_exactly_300_to_500_buyers() {
    assert_four_segments_held(Strategy::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_lock_over_four_stock_segments_sells_exactly_300_to_500_buyers() {
    assert_four_segments_held(Strategy::Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_lock_table_over_four_stock_segments_sells_exactly_300_to_500_buyers() {
    assert_four_segments_held(Strategy::Mysql).await;
}

/// With `--group-commit` one grant sells to every buyer then waiting in its instance's
/// local queue: the crowd still gets exactly 300 units, each once, and fewer grants than
/// units sold them. A group's units share its grant's token, which the checker accepts
/// within one group's records only: a fenced lock shows no regression.
async fn assert_grouped_held(strategy: Strategy) {
    let sale = TestSale::new();
    let grouped = Run {
        group_commit: true,
        ..PLAIN
    };
    let report = flash_sale_for(strategy, &sale, grouped).await;
    assert_held(&report);
    if strategy.issues_fencing_tokens() {
        assert_eq!(report.fencing_regressions, Some(0), "{}", report.render());
    }
    let records = testkit::sale_records(&sale).await;
    let groups: std::collections::BTreeSet<String> = records
        .iter()
        .map(|record| record.group.clone().expect("a grouped sale's record names its group"))
        .collect();
    assert!(
        groups.len() < records.len(),
        "some grant sold more than one unit: {} groups for {} units",
        groups.len(),
        records.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_that_degrades_to_mysql_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::RedisDegrade).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::Redlock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_lock_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zookeeper_lock_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::Zookeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_lock_table_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_version_lock_in_groups_sells_exactly_300_to_500_buyers() {
    assert_grouped_held(Strategy::MysqlVersion).await;
}

/// Groups with every other option of the sale: four segments (a group per segment), the
/// sold-out flag, one unit per buyer (50 buyers ask twice, and a group may hold both of
/// a buyer's requests) and orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_in_groups_sells_exactly_300_with_every_option_of_the_sale() {
    let sale = TestSale::new();
    let every_option = Run {
        stock_segments: 4,
        one_per_buyer: true,
        repeat_buyers: 0.1,
        orders: true,
        group_commit: true,
    };
    let _turn = testkit::take_turn().await;
    let start = || async {
        let mut config = config_for(Strategy::Redis, &sale, every_option);
        config.sold_out_flag = true;
        Instance::start(config)
            .await
            .unwrap_or_else(|error| panic!("cannot start an instance: {error:#}"))
    };
    let (first, second) = (start().await, start().await);
    let report = run(&options_for(
        vec![first.url.clone(), second.url.clone()],
        &sale,
        every_option,
    ))
    .await
    .expect("the load test runs");
    println!("{}", report.render());
    first.stop().await.unwrap();
    second.stop().await.unwrap();
    assert_every_option_held(&report);
    assert_eq!(report.fencing_regressions, Some(0), "{}", report.render());
}

/// 500 requests from 450 buyers: 50 buy twice at once, through both instances. With `--one-per-buyer` none gets two units, and every
/// buyer refused a second one holds a first (the checker judges both).
async fn assert_one_per_buyer_held(strategy: Strategy) {
    let one_per_buyer = Run {
        one_per_buyer: true,
        repeat_buyers: 0.1,
        ..PLAIN
    };
    let report = flash_sale_for(strategy, &TestSale::new(), one_per_buyer).await;
    assert_eq!(report.verdict, Verdict::Held, "{}", report.render());
    assert_every_check_passed(&report);
    assert_eq!(check(&report, "one-per-buyer"), Status::Pass);
    assert_eq!((report.stock_left, report.lucky, report.told_sold), (0, 300, 300));
    assert_eq!((report.repeat_requests, report.buyers_served_twice), (50, 0));
    // 50 repeat buyers, each of whose first requests had a unit with odds near 300 in
    // 500: a run with no refusal at all would come once in about 10^20.
    assert!(report.told_already_bought > 0, "{}", report.render());
    assert_eq!(
        report.told_sold + report.told_sold_out + report.told_already_bought,
        500,
        "{}",
        report.render()
    );
    assert_eq!(report.error_count(), 0, "{}", report.render());
    assert!(report.label().contains("one per buyer"), "{}", report.label());
    assert!(report.passed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_sells_one_unit_per_buyer_to_500_requests_with_50_repeat_buyers() {
    assert_one_per_buyer_held(Strategy::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_atomic_script_sells_one_unit_per_buyer_to_500_requests_with_50_repeat_buyers() {
    assert_one_per_buyer_held(Strategy::Atomic).await;
}

/// Without the option the repeat buyers buy again: still held (every unit sold once),
/// and the report counts the buyers who got two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_one_per_buyer_repeat_buyers_get_two_units_and_the_report_counts_them() {
    let repeats = Run {
        repeat_buyers: 0.1,
        ..PLAIN
    };
    let report = flash_sale_for(Strategy::Redis, &TestSale::new(), repeats).await;
    assert_held(&report);
    // Of 50 buyers who ask twice, each gets two units with odds near (300/500)^2.
    assert!(report.buyers_served_twice > 0, "{}", report.render());
    assert!(
        report
            .findings
            .iter()
            .any(|finding| finding.contains("--one-per-buyer")),
        "{:?}",
        report.findings
    );
}

/// With `--orders` every unit sold is one order row in MySQL once the stream drained:
/// the checker waits for the drain, then matches the rows with the sale records.
async fn assert_orders_held(strategy: Strategy) {
    let with_orders = Run { orders: true, ..PLAIN };
    let report = flash_sale_for(strategy, &TestSale::new(), with_orders).await;
    assert_held(&report);
    let orders = report
        .orders
        .clone()
        .unwrap_or_else(|| panic!("no orders: {}", report.render()));
    assert_eq!(
        (orders.rows, orders.unread, orders.pending),
        (300, 0, 0),
        "{}",
        report.render()
    );
    assert!(report.render().contains("orders in MySQL"), "{}", report.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_lock_with_orders_writes_one_order_per_unit_sold_to_500_buyers() {
    assert_orders_held(Strategy::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_atomic_script_with_orders_writes_one_order_per_unit_sold_to_500_buyers() {
    assert_orders_held(Strategy::Atomic).await;
}

/// The MySQL strategies' report says what the sale cost the database.
fn assert_database_cost_measured(report: &Report) -> loadtest::verdict::database::DatabaseCost {
    let cost = report
        .database
        .clone()
        .unwrap_or_else(|| panic!("no database cost: {}", report.render()));
    assert_eq!(cost.units_sold, 300);
    assert!(cost.grants >= 300, "every sale was a grant: {cost:?}");
    // Every sale is at least one grant and one release, each at least one statement.
    let statements = cost
        .statements_per_sale()
        .unwrap_or_else(|| panic!("{}", report.render()));
    assert!(
        statements >= 2.0,
        "{statements} statements per sale: {}",
        report.render()
    );
    assert!(
        cost.peak_in_flight <= 10,
        "the default semaphore has 10 permits: {cost:?}"
    );
    assert!(report.render().contains("per sale"), "{}", report.render());
    cost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_atomic_script_sells_exactly_300_to_500_buyers_across_two_instances() {
    assert_held(&flash_sale(Strategy::Atomic).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lock_across_two_instances_is_caught_overselling() {
    assert_oversold_as_expected(&flash_sale(Strategy::None).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_locks_in_two_instances_are_caught_overselling() {
    assert_oversold_as_expected(&flash_sale(Strategy::Local).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_running_different_strategies_are_refused() {
    let _turn = testkit::take_turn().await;
    let sale = TestSale::new();
    let (first, second) = (
        start(Strategy::Redis, &sale).await,
        start(Strategy::Atomic, &sale).await,
    );
    let error = run(&options(vec![first.url.clone(), second.url.clone()], &sale))
        .await
        .unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("different strategies") && message.contains("--lock"),
        "{message}"
    );
}

#[tokio::test]
async fn a_host_with_no_service_is_named_with_how_to_start_one() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let started = std::time::Instant::now();
    let error = run(&options(vec![url.clone()], &TestSale::new())).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(message.contains(&format!("no seckill answers at {url}")), "{message}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// A load test told another `--key-prefix` than the instances sell under would read an
/// empty sale back and judge the wrong thing: it refuses before the crowd, with the fix.
#[tokio::test]
async fn a_load_test_reading_another_key_prefix_than_the_instances_is_refused_with_the_fix() {
    let instance = start(Strategy::Atomic, &TestSale::new()).await;
    let elsewhere = TestSale::new();
    let error = run(&options(vec![instance.url.clone()], &elsewhere)).await.unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("--key-prefix") && message.contains(elsewhere.prefix()),
        "{message}"
    );
    instance.stop().await.unwrap();
}

/// The lessons start both instances in the background and the load test right after
/// them, as a reader types it: a host that is not listening yet is asked again.
#[tokio::test]
async fn a_host_that_starts_listening_a_moment_late_is_waited_for() {
    let instance = start(Strategy::Atomic, &TestSale::new()).await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let late_port = free.local_addr().unwrap().port();
    drop(free);
    // A port that starts listening 700 ms from now, and forwards to the instance.
    let forwarder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", late_port)).await.unwrap();
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let mut server = tokio::net::TcpStream::connect(("127.0.0.1", instance.port))
                .await
                .unwrap();
            tokio::spawn(async move { tokio::io::copy_bidirectional(&mut client, &mut server).await });
        }
    });
    let target = loadtest::verdict::crowd::target_of(&[format!("http://127.0.0.1:{late_port}")]).await;
    forwarder.abort();
    let target = target.unwrap_or_else(|error| panic!("the late host was not waited for: {error:#}"));
    assert_eq!(target.strategy, "atomic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_reset_while_the_crowd_buys_is_an_invalid_run_not_an_oversell() {
    let _turn = testkit::take_turn().await;
    let sale = TestSale::new();
    let (first, second) = (start(Strategy::Redis, &sale).await, start(Strategy::Redis, &sale).await);
    let crowd = {
        let options = options(vec![first.url.clone(), second.url.clone()], &sale);
        tokio::spawn(async move { run(&options).await })
    };
    // Someone else resets the sale while the 500 buyers are queueing for the lock.
    let client = testkit::redis_client().await;
    let store =
        seckill::sale::stock::StockStore::new(testkit::master_connection(&client).await).with_keys(sale.keys().clone());
    tokio::time::sleep(Duration::from_millis(150)).await;
    store.reset(300).await.unwrap();
    let error = crowd
        .await
        .unwrap()
        .expect_err("a run whose sale was reset under it is not judged");
    assert!(error.downcast_ref::<loadtest::InvalidRun>().is_some(), "{error:#}");
    assert!(
        format!("{error:#}").contains("reset while the crowd was buying"),
        "{error:#}"
    );
}

/// The stock on a master that a Sentinel names (`--redis-url redis-sentinel://...`), as a
/// shop keeps it, with every option of the sale at once: four segments, the sold-out
/// flag, one unit per buyer (50 buyers ask twice) and orders. The instances, the
/// `redis` lock (in the stock's Redis, so behind the same Sentinel) and the checker all
/// find the master through the Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_whose_master_a_sentinel_names_sells_exactly_300_with_every_option_of_the_sale() {
    let _turn = testkit::take_turn().await;
    let master = testkit::PrivateRedis::start();
    let _replica = testkit::PrivateRedis::start_replica_of(master.port);
    let sentinel = testkit::PrivateSentinel::watch("seckill-stock", master.port);
    let sale = TestSale::new();
    let every_option = Run {
        stock_segments: 4,
        one_per_buyer: true,
        repeat_buyers: 0.1,
        orders: true,
        group_commit: false,
    };
    let start = || async {
        let mut config = config_for(Strategy::Redis, &sale, every_option);
        config.redis_url = sentinel.url();
        config.sold_out_flag = true;
        Instance::start(config)
            .await
            .unwrap_or_else(|error| panic!("cannot start an instance behind the Sentinel: {error:#}"))
    };
    let (first, second) = (start().await, start().await);
    let options = Options {
        redis_url: sentinel.url(),
        ..options_for(vec![first.url.clone(), second.url.clone()], &sale, every_option)
    };
    let report = run(&options).await.expect("the load test runs");
    println!("{}", report.render());
    first.stop().await.unwrap();
    second.stop().await.unwrap();

    assert_every_option_held(&report);
    // Everything was written to the master the Sentinel names, and nothing elsewhere.
    let mut on_master = testkit::connection(&master.client()).await;
    let lucky: i64 = redis::cmd("GET")
        .arg(sale.keys().lucky())
        .query_async(&mut on_master)
        .await
        .unwrap();
    assert_eq!(lucky, 300);
}

/// The stock on a Redis Cluster of three masters, each with a replica, with every option
/// of the sale at once: six segments, which their hash tags spread over the masters, the
/// sold-out flag, one unit per buyer (50 buyers ask twice) and orders, one stream per
/// segment. The `redis` lock cannot live on a cluster (its scripts keep a grant and its
/// waiters together), so it is on the test Redis. The instances and the checker read
/// each segment from whichever master holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_on_a_redis_cluster_sells_exactly_300_with_every_option_of_the_sale() {
    let _turn = testkit::take_turn().await;
    let cluster = testkit::PrivateRedisCluster::start(3);
    let sale = TestSale::new();
    let every_option = Run {
        stock_segments: 6,
        one_per_buyer: true,
        repeat_buyers: 0.1,
        orders: true,
        group_commit: false,
    };
    let start = || async {
        let mut config = config_for(Strategy::Redis, &sale, every_option);
        config.redis_url = cluster.url();
        config.redis.lock_redis_url = Some(testkit::redis_url());
        config.sold_out_flag = true;
        Instance::start(config)
            .await
            .unwrap_or_else(|error| panic!("cannot start an instance on the cluster: {error:#}"))
    };
    let (first, second) = (start().await, start().await);
    let keys = sale.keys().clone().on_cluster(true);
    let options = Options {
        redis_url: cluster.url(),
        keys: keys.clone(),
        ..options_for(vec![first.url.clone(), second.url.clone()], &sale, every_option)
    };
    let report = run(&options).await.expect("the load test runs");
    println!("{}", report.render());
    first.stop().await.unwrap();
    second.stop().await.unwrap();

    assert_every_option_held(&report);
    // Every master sold some: each holds the lucky count of the segments whose slots it owns.
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let mut sold_by_master = Vec::new();
    for master in &masters {
        let mut connection = testkit::connection(&master.client()).await;
        let mut sold = 0;
        for segment in Segments::new(6).unwrap().all() {
            let lucky: Option<i64> = redis::cmd("GET")
                .arg(keys.lucky_of(segment))
                .query_async(&mut connection)
                .await
                .unwrap_or(None); // MOVED: another master's segment
            sold += lucky.unwrap_or(0);
        }
        sold_by_master.push(sold);
    }
    assert_eq!(sold_by_master.iter().sum::<i64>(), 300, "{sold_by_master:?}");
    assert!(sold_by_master.iter().all(|&sold| sold > 0), "{sold_by_master:?}");
}
