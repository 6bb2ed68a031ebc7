//! One unit per buyer (`--one-per-buyer`, `src/sale/buyers.rs`), against the project's test
//! Redis: one buyer's requests racing on two instances and four stock segments get one
//! unit between them; the atomic script holds the rule too; a request that names no
//! buyer, or a malformed one, is refused before any lock; a reset forgets the buyers;
//! without the option the buyer is only written down.
//! The 500-request runs with repeat buyers are in loadtest/tests/it/run.rs.

use seckill::server::Instance;
use seckill::strategy::Strategy;

async fn instance(strategy: Strategy, sale: &testkit::TestSale, one_per_buyer: bool, segments: u32) -> Instance {
    testkit::instance_with(strategy, sale, |config| {
        config.one_per_buyer = one_per_buyer;
        config.stock_segments = segments;
    })
    .await
}

/// Twenty requests of one buyer at once, ten through each instance, four segments
/// each behind a lock of its own: two of them can hold two segments' locks at the same
/// time, so only the script that takes the unit can tell them apart. Every other
/// buyer still gets a unit.
#[tokio::test]
async fn one_buyers_requests_racing_on_two_instances_and_four_segments_get_one_unit() {
    let sale = testkit::TestSale::new();
    let (first, second) = (
        instance(Strategy::Redis, &sale, true, 4).await,
        instance(Strategy::Redis, &sale, true, 4).await,
    );
    testkit::reset_stock(&first.url, 300).await;
    let http = reqwest::Client::new();
    let answers = futures_util::future::join_all((0..20).map(|request| {
        let url = if request % 2 == 0 { &first.url } else { &second.url };
        testkit::buy_as(&http, url, "alice")
    }))
    .await;
    let sold = answers.iter().filter(|answer| *answer == "sold").count();
    let refused = answers.iter().filter(|answer| *answer == "409 already_bought").count();
    assert_eq!((sold, refused), (1, 19), "{answers:?}");
    assert_eq!(testkit::buy_as(&http, &second.url, "bob").await, "sold");
    let buyers: Vec<Option<String>> = testkit::sale_records(&sale)
        .await
        .into_iter()
        .map(|record| record.buyer)
        .collect();
    assert_eq!(buyers, [Some("alice".to_owned()), Some("bob".to_owned())]);
    assert!(testkit::healthz(&first.url).await.one_per_buyer);
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test]
async fn the_atomic_script_holds_a_buyer_to_one_unit_and_a_reset_forgets_the_buyers() {
    let sale = testkit::TestSale::new();
    let app = instance(Strategy::Atomic, &sale, true, 1).await;
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, 10).await;
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "sold");
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "409 already_bought");
    assert_eq!(testkit::buy_as(&http, &app.url, "bob").await, "sold");
    testkit::reset_stock(&app.url, 10).await;
    assert_eq!(
        testkit::buy_as(&http, &app.url, "alice").await,
        "sold",
        "a new sale: alice may buy again"
    );
    app.stop().await.unwrap();
}

/// The refusals come before any lock or stock step: nothing is sold, and the message
/// says what to send.
#[tokio::test]
async fn a_request_without_a_buyer_or_with_a_malformed_one_is_refused_and_sells_nothing() {
    let sale = testkit::TestSale::new();
    let app = instance(Strategy::Redis, &sale, true, 1).await;
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, 10).await;
    let answer = http.get(format!("{}/stock/reduce", app.url)).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "buyer_required", "{body}");
    assert!(body["message"].as_str().unwrap().contains("?buyer="), "{body}");
    assert_eq!(testkit::buy_as(&http, &app.url, "two%20words").await, "400 bad_request");
    assert_eq!(testkit::buy_as(&http, &app.url, "").await, "400 bad_request");
    assert!(testkit::sale_records(&sale).await.is_empty(), "nothing was sold");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn without_the_option_a_buyer_may_buy_twice_and_the_records_say_who_bought() {
    let sale = testkit::TestSale::new();
    let app = instance(Strategy::Redis, &sale, false, 1).await;
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, 10).await;
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "sold");
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "sold");
    assert_eq!(testkit::buy(&http, &app.url).await, "sold", "no buyer needed");
    let buyers: Vec<Option<String>> = testkit::sale_records(&sale)
        .await
        .into_iter()
        .map(|record| record.buyer)
        .collect();
    assert_eq!(buyers, [Some("alice".to_owned()), Some("alice".to_owned()), None]);
    assert!(!testkit::healthz(&app.url).await.one_per_buyer);
    app.stop().await.unwrap();
}

/// On a Redis Cluster each segment keeps its own buyers (`src/sale/buyers.rs`): a buyer
/// whose segment sold out after their purchase must be refused there, not sold a unit of
/// the next segment. Two segments of one unit each; alice buys the unit of her home
/// segment, then asks again: her walk passes that empty segment first, and it knows
/// her. With the sold-out flag the empty segment is skipped without a lock, and asked
/// whether she bought there. With group commit her group's read finds it empty, and the
/// group asks it whether its buyers bought there.
async fn a_buyer_whose_segment_sold_out_is_refused_there_on_a_cluster(sold_out_flag: bool, group_commit: bool) {
    let _turn = testkit::take_turn().await;
    let cluster = testkit::PrivateRedisCluster::start(3);
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        cluster.holds_the_stock_of(config);
        config.one_per_buyer = true;
        config.stock_segments = 2;
        config.sold_out_flag = sold_out_flag;
        config.group_commit = group_commit;
    })
    .await;
    testkit::reset_stock(&app.url, 2).await;
    let http = reqwest::Client::new();
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "sold");
    assert_eq!(testkit::buy_as(&http, &app.url, "alice").await, "409 already_bought");
    assert_eq!(testkit::buy_as(&http, &app.url, "bob").await, "sold");
    assert_eq!(testkit::buy_as(&http, &app.url, "carol").await, "sold out");
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_buyer_whose_segment_sold_out_is_refused_there() {
    a_buyer_whose_segment_sold_out_is_refused_there_on_a_cluster(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_buyer_in_a_group_whose_segment_sold_out_is_refused_there() {
    a_buyer_whose_segment_sold_out_is_refused_there_on_a_cluster(false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_buyer_whose_segment_the_sold_out_flag_skips_is_refused_there() {
    a_buyer_whose_segment_sold_out_is_refused_there_on_a_cluster(true, false).await;
}
