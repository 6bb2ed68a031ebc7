//! The sold-out flag (`--sold-out-flag`, `src/sale/sold_out.rs`), against the project's test
//! Redis: a buyer after the sell-out asks no lock with it and walks every segment
//! without it; a reset through another instance ends the flag for the very next buyer;
//! `atomic` refuses it at start; on a Redis Cluster, a segment read before its reset
//! teaches the flag nothing about the new sale.

use redis::AsyncCommands;
use seckill::sale::segments::Segment;
use seckill::server::Instance;
use seckill::strategy::Strategy;

const SEGMENTS: u32 = 4;

async fn instance(sale: &testkit::TestSale, sold_out_flag: bool) -> Instance {
    testkit::instance_with(Strategy::Redis, sale, |config| {
        config.stock_segments = SEGMENTS;
        config.sold_out_flag = sold_out_flag;
    })
    .await
}

const LOCK_GRANTS: &str = "seckill_sale_step_seconds_count{step=\"lock\"}";
const FROM_MEMORY: &str = "seckill_sold_out_from_memory_total";

/// Sells one unit in each of four segments, then sends twenty buyers after the sell-out:
/// the lock grants those twenty took, and how many the flag answered.
async fn grants_after_the_sell_out(app: &Instance) -> (f64, f64) {
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, i64::from(SEGMENTS)).await;
    for _ in 0..SEGMENTS {
        assert_eq!(testkit::buy(&http, &app.url).await, "sold");
    }
    let grants_before = testkit::metric(&app.url, LOCK_GRANTS).await;
    for _ in 0..20 {
        assert_eq!(testkit::buy(&http, &app.url).await, "sold out");
    }
    (
        testkit::metric(&app.url, LOCK_GRANTS).await - grants_before,
        testkit::metric(&app.url, FROM_MEMORY).await,
    )
}

#[tokio::test]
async fn with_the_flag_a_buyer_after_the_sell_out_asks_no_lock_and_without_it_walks_every_segment() {
    let (flagged, plain) = (
        instance(&testkit::TestSale::new(), true).await,
        instance(&testkit::TestSale::new(), false).await,
    );
    // Each sale that took a segment's last unit taught the flag that segment.
    assert_eq!(grants_after_the_sell_out(&flagged).await, (0.0, 20.0));
    assert_eq!(
        grants_after_the_sell_out(&plain).await,
        (80.0, 0.0),
        "without the flag each of the 20 reads all four segments under their locks"
    );
    assert!(testkit::healthz(&flagged.url).await.sold_out_flag);
    flagged.stop().await.unwrap();
    plain.stop().await.unwrap();
}

/// The flagged instance hears of the reset from no one: the sale's name it reads before
/// trusting its memory is what tells it.
#[tokio::test]
async fn a_reset_through_another_instance_ends_the_flag_for_the_very_next_buyer() {
    let sale = testkit::TestSale::new();
    let (flagged, other) = (instance(&sale, true).await, instance(&sale, true).await);
    let http = reqwest::Client::new();
    testkit::reset_stock(&flagged.url, 1).await;
    assert_eq!(testkit::buy(&http, &flagged.url).await, "sold");
    // The first buyer after the sell-out reads the segments the flag does not know yet
    // (if the one who bought read them all on the way, the flag answers this one too).
    assert_eq!(testkit::buy(&http, &flagged.url).await, "sold out");
    let answered_before = testkit::metric(&flagged.url, FROM_MEMORY).await;
    assert_eq!(testkit::buy(&http, &flagged.url).await, "sold out");
    assert_eq!(
        testkit::metric(&flagged.url, FROM_MEMORY).await,
        answered_before + 1.0,
        "the flag answered the second"
    );

    testkit::reset_stock(&other.url, 1).await;
    assert_eq!(
        testkit::buy(&http, &flagged.url).await,
        "sold",
        "the sale was reset with a unit: \"sold out\" would be a lie"
    );
    flagged.stop().await.unwrap();
    other.stop().await.unwrap();
}

/// A Redis that lost its data counts generations from 1 again; the sale's name is drawn
/// anew. An instance that remembered a sold-out sale of generation 1 must not take the
/// next generation 1 for it.
#[tokio::test]
async fn a_sale_reset_after_redis_lost_its_data_is_not_taken_for_the_old_one() {
    let sale = testkit::TestSale::new();
    let flush = || sale.lose_every_key();
    let flagged = instance(&sale, true).await; // seeds the sale: generation 1
    let http = reqwest::Client::new();
    testkit::reset_stock(&flagged.url, 1).await; // generation 2
    testkit::buy(&http, &flagged.url).await;
    for _ in 0..2 {
        assert_eq!(testkit::buy(&http, &flagged.url).await, "sold out");
    }
    flush().await;
    // Two resets: generation 1, then 2, the generation the sold-out sale had.
    testkit::reset_stock(&flagged.url, 1).await;
    testkit::reset_stock(&flagged.url, 1).await;
    assert_eq!(
        testkit::buy(&http, &flagged.url).await,
        "sold",
        "a new sale with a unit, under a generation the old one had"
    );
    flagged.stop().await.unwrap();
}

#[tokio::test]
async fn the_flag_is_refused_where_a_late_write_could_put_a_unit_back() {
    let error = testkit::start_refused(Strategy::None, &testkit::TestSale::new(), |config| {
        config.sold_out_flag = true
    })
    .await;
    assert!(error.contains("--lock none") && error.contains("late write"), "{error}");
}

#[tokio::test]
async fn the_atomic_script_refuses_the_flag_at_start_and_says_why() {
    let error = testkit::start_refused(Strategy::Atomic, &testkit::TestSale::new(), |config| {
        config.sold_out_flag = true
    })
    .await;
    assert!(
        error.contains("--sold-out-flag") && error.contains("`--lock atomic` takes no lock"),
        "{error}"
    );
}

/// Without the flag every buyer after the sell-out takes a grant and reads an empty
/// stock. Those grants could sell nothing, so the grant log (`stock:grants`) keeps none
/// of them: it would otherwise grow by one record per answer for as long as traffic lasts.
#[tokio::test]
async fn the_grant_log_keeps_no_grant_that_read_the_stock_empty() {
    const STOCK: i64 = 10;
    const ANSWERS_AFTER_THE_SELL_OUT: usize = 20_000;
    const BUYERS_AT_ONCE: usize = 32;
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Local, &sale, |_| {}).await;
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, STOCK).await;
    for _ in 0..STOCK {
        assert_eq!(testkit::buy(&http, &app.url).await, "sold");
    }
    let buyers: Vec<_> = (0..BUYERS_AT_ONCE)
        .map(|_| {
            let (http, url) = (http.clone(), app.url.clone());
            tokio::spawn(async move {
                for _ in 0..ANSWERS_AFTER_THE_SELL_OUT / BUYERS_AT_ONCE {
                    assert_eq!(testkit::buy(&http, &url).await, "sold out");
                }
            })
        })
        .collect();
    for buyer in buyers {
        buyer.await.unwrap();
    }
    let mut redis = testkit::redis_client()
        .await
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let logged: i64 = redis::cmd("LLEN")
        .arg(sale.keys().grants())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(logged, STOCK, "one grant per unit sold, none per sold-out answer");
    app.stop().await.unwrap();
}

/// On a Redis Cluster a reset names the new sale first, then puts each segment on sale
/// in a transaction of its own. A buyer who reads the new name, then a segment not reset
/// yet (empty, still in the old sale), learned nothing about the new sale: filed under
/// the new name, the flag would answer "sold out" for the segment once it is refilled.
/// One segment, so that memory would answer every buyer of the new sale. The reset is
/// played by hand, one transaction at a time, to stop between the two.
async fn a_segment_read_before_its_reset_teaches_the_new_sale_nothing(group_commit: bool) {
    let _turn = testkit::take_turn().await;
    let cluster = testkit::PrivateRedisCluster::start(3);
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        cluster.holds_the_stock_of(config);
        config.sold_out_flag = true;
        config.group_commit = group_commit;
    })
    .await;
    let http = reqwest::Client::new();
    testkit::reset_stock(&app.url, 1).await;
    assert_eq!(testkit::buy(&http, &app.url).await, "sold");

    let keys = sale.keys().clone().on_cluster(true);
    let whole = Segment::WHOLE;
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}", node.port))
        .collect();
    let mut redis = redis::cluster::ClusterClient::new(nodes)
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // The reset's first transaction: the sale has a new name, its segment not yet.
    let _: () = redis.set(keys.sale_name(), "the-new-sale").await.unwrap();
    assert_eq!(
        testkit::buy(&http, &app.url).await,
        "sold out",
        "the segment is still the old sale's, empty"
    );
    // The segment's own transaction: a unit on sale under the new name.
    let _: () = redis::pipe()
        .atomic()
        .set(keys.stock_of(whole), 1)
        .set(keys.sale_name_of(whole), "the-new-sale")
        .query_async(&mut redis)
        .await
        .unwrap();
    let from_memory = testkit::metric(&app.url, FROM_MEMORY).await;
    assert_eq!(
        testkit::buy(&http, &app.url).await,
        "sold",
        "the new sale's unit: \"sold out\" from memory would be a lie"
    );
    assert_eq!(testkit::metric(&app.url, FROM_MEMORY).await, from_memory);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_segment_read_before_its_reset_teaches_the_flag_nothing_about_the_new_sale() {
    a_segment_read_before_its_reset_teaches_the_new_sale_nothing(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_group_that_read_a_segment_before_its_reset_teaches_the_flag_nothing() {
    a_segment_read_before_its_reset_teaches_the_new_sale_nothing(true).await;
}
