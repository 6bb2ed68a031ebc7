//! The stock split into segments (`--stock-segments`, `src/sale/segments.rs`), against the
//! project's test Redis: how a reset shares the units out, that a buyer is told "sold
//! out" only after every segment was read empty, and that an instance that splits the
//! stock otherwise is refused instead of selling from keys nobody else guards.
//! The 500-buyer runs over segments are in loadtest/tests/it/run.rs.

use redis::AsyncCommands;
use seckill::sale::segments::Segments;
use seckill::server::Instance;
use seckill::strategy::Strategy;

async fn instance(strategy: Strategy, sale: &testkit::TestSale, segments: u32) -> Instance {
    testkit::instance_with(strategy, sale, |config| config.stock_segments = segments).await
}

/// One buy at `base_url`, which must be refused with `503 segments_disagree`: its message.
async fn refused_as_segments_disagree(base_url: &str) -> String {
    let answer = reqwest::get(format!("{base_url}/stock/reduce")).await.unwrap();
    assert_eq!(answer.status().as_u16(), 503);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["error"], "segments_disagree", "{body}");
    body["message"].as_str().unwrap().to_owned()
}

/// Each segment's units, `stock`, `lucky` and the count a reset wrote.
async fn stored(sale: &testkit::TestSale, segments: u32) -> (Vec<i64>, i64, i64, Option<u32>) {
    let (keys, mut redis) = (sale.keys(), testkit::connection(&testkit::redis_client().await).await);
    let mut units = Vec::new();
    for segment in Segments::new(segments).unwrap().all() {
        units.push(
            redis
                .get::<_, Option<i64>>(keys.stock_of(segment))
                .await
                .unwrap()
                .unwrap_or(-1),
        );
    }
    let stock: i64 = redis.get(keys.stock()).await.unwrap();
    let lucky: i64 = redis.get(keys.lucky()).await.unwrap();
    let count: Option<u32> = redis.get(keys.segment_count()).await.unwrap();
    (units, stock, lucky, count)
}

#[tokio::test]
async fn a_reset_shares_the_units_out_between_the_segments_and_stock_counts_them_all() {
    let sale = testkit::TestSale::new();
    let app = instance(Strategy::Redis, &sale, 4).await;
    testkit::reset_stock(&app.url, 7).await;
    assert_eq!(stored(&sale, 4).await, (vec![2, 2, 2, 1], 7, 0, Some(4)));
    assert_eq!(testkit::healthz(&app.url).await.stock_segments, 4);
    app.stop().await.unwrap();
}

/// One unit in four segments: three are empty. A buyer who starts at an empty one must
/// go on to the others, or it would be told "sold out" while a unit is left. Where it
/// starts is random, so the sale runs eight times: a buyer that did not go on would
/// pass all eight only once in 65,536 runs.
#[tokio::test]
async fn a_buyer_is_told_sold_out_only_after_every_segment_was_read_empty() {
    let sale = testkit::TestSale::new();
    let app = instance(Strategy::Redis, &sale, 4).await;
    let http = reqwest::Client::new();
    for run in 0..8 {
        testkit::reset_stock(&app.url, 1).await;
        assert_eq!(
            testkit::buy(&http, &app.url).await,
            "sold",
            "run {run}: one unit was left, in one of four segments"
        );
        assert_eq!(testkit::buy(&http, &app.url).await, "sold out", "run {run}");
        let (units, stock, lucky, _) = stored(&sale, 4).await;
        assert_eq!((units, stock, lucky), (vec![0, 0, 0, 0], 0, 1), "run {run}");
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_instance_that_splits_the_stock_otherwise_than_the_reset_is_refused_with_the_fix() {
    let sale = testkit::TestSale::new();
    let whole = instance(Strategy::Redis, &sale, 1).await;
    testkit::reset_stock(&whole.url, 10).await;
    let split = instance(Strategy::Redis, &sale, 4).await;
    let message = refused_as_segments_disagree(&split.url).await;
    assert!(
        message.contains("4 stock segment") && message.contains("reset into 1") && message.contains("--stock-segments"),
        "the message names both counts and the flag: {message}"
    );
    let (_, stock, lucky, count) = stored(&sale, 1).await;
    assert_eq!((stock, lucky, count), (10, 0, Some(1)), "nothing was sold");
    whole.stop().await.unwrap();
    split.stop().await.unwrap();
}

/// The atomic script takes its unit from `stock`, which a split sale only counts: the
/// segments' locks would sell the same units again.
#[tokio::test]
async fn the_atomic_script_refuses_a_sale_reset_into_segments() {
    let sale = testkit::TestSale::new();
    let split = instance(Strategy::Redis, &sale, 4).await;
    testkit::reset_stock(&split.url, 8).await;
    let atomic = instance(Strategy::Atomic, &sale, 1).await;
    refused_as_segments_disagree(&atomic.url).await;
    assert_eq!(
        stored(&sale, 4).await,
        (vec![2, 2, 2, 2], 8, 0, Some(4)),
        "nothing was sold"
    );
    split.stop().await.unwrap();
    atomic.stop().await.unwrap();
}

#[tokio::test]
async fn the_atomic_script_refuses_segments_at_start_and_says_why() {
    let error = testkit::start_refused(Strategy::Atomic, &testkit::TestSale::new(), |config| {
        config.stock_segments = 2
    })
    .await;
    assert!(
        error.contains("--stock-segments 2") && error.contains("`--lock atomic` takes none"),
        "{error}"
    );
}
