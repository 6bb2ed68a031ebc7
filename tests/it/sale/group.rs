//! Group commit (`--group-commit`, `src/sale/group.rs`): one grant sells to every buyer
//! waiting in the instance's local queue. The group's write is fenced as one sale's is:
//! a write refused after a newer holder's read sells nothing to any buyer of the group,
//! at the script and through the service, where each of them hears `503 lock_lost`. And
//! a grouped crowd sells exactly the stock, each unit once.

use std::time::{Duration, Instant};

use seckill::lock::FencingToken;
use seckill::sale::group::{GroupScripts, GroupWrite, GroupWritten, MemberWritten};
use seckill::sale::segments::Segment;
use seckill::sale::stock::{SaleRecord, Seller, StockRead, StockStore};
use seckill::strategy::Strategy;

fn seller() -> Seller {
    Seller {
        instance: "group-test".to_owned(),
        port: 0,
        strategy: "redis",
    }
}

/// Three buyers' records in one group, under `token`.
fn records(group_id: &str, token: &FencingToken) -> Vec<SaleRecord> {
    (0..3)
        .map(|buyer| {
            SaleRecord::new(
                &seller(),
                &format!("{group_id}-{buyer}"),
                Segment::WHOLE,
                0,
                Some(token.clone()),
                0.0,
                0,
            )
            .in_group(group_id)
        })
        .collect()
}

async fn store() -> (StockStore, testkit::TestSale) {
    let client = testkit::redis_client().await;
    let sale = testkit::TestSale::new();
    let store = StockStore::new(testkit::master_connection(&client).await).with_keys(sale.keys().clone());
    (store, sale)
}

/// A group reads under token 33, a newer holder reads under 34, the group writes: the
/// whole group is refused and no unit moves. The same group, alone, sells all three.
#[tokio::test]
async fn a_group_write_after_a_newer_holders_read_sells_to_no_buyer_of_the_group() {
    let (store, _sale) = store().await;
    let scripts = GroupScripts::default();
    let (older, newer) = (FencingToken::new("redis", 0, 33), FencingToken::new("redis", 0, 34));
    for newer_reads_between in [false, true] {
        store.reset(10).await.unwrap();
        let group_id = format!("group-{newer_reads_between}");
        let StockRead::Stock { units, sale } = store.read(Segment::WHOLE, Some(&older), &group_id).await.unwrap()
        else {
            panic!("the group's read is allowed");
        };
        if newer_reads_between {
            let newer_read = store.read(Segment::WHOLE, Some(&newer), "newer").await.unwrap();
            assert!(matches!(newer_read, StockRead::Stock { .. }), "{newer_read:?}");
        }
        let records = records(&group_id, &older);
        let written = scripts
            .write(
                &store,
                &GroupWrite {
                    segment: Segment::WHOLE,
                    group_id: &group_id,
                    stock_read: units,
                    read_from: &sale,
                    token: Some(&older),
                    records: &records,
                },
            )
            .await
            .unwrap();
        let snapshot = store.snapshot().await.unwrap();
        if newer_reads_between {
            assert_eq!(written, GroupWritten::Fenced);
            assert_eq!(
                (snapshot.stock, snapshot.lucky, snapshot.sales),
                (10, 0, 0),
                "nothing of the group sold"
            );
        } else {
            let sold = |stock_after| MemberWritten::Sold { stock_after };
            assert_eq!(written, GroupWritten::Written(vec![sold(9), sold(8), sold(7)]));
            assert_eq!((snapshot.stock, snapshot.lucky, snapshot.sales), (7, 3, 3));
        }
    }
}

/// Past the stock, the group's last buyers are told "sold out" by the same read, and a
/// buyer who got a unit already is told so; each record holds the unit it sold.
#[tokio::test]
async fn a_group_larger_than_the_stock_sells_what_is_left_and_refuses_a_second_unit() {
    let (store, test_sale) = store().await;
    let store = store.with_one_per_buyer(true);
    let scripts = GroupScripts::default();
    store.reset(2).await.unwrap();
    let token = FencingToken::new("redis", 0, 7);
    let StockRead::Stock { units, sale } = store.read(Segment::WHOLE, Some(&token), "g").await.unwrap() else {
        panic!("the read is allowed");
    };
    let buyers = ["alice", "alice", "bob", "carol"];
    let records: Vec<SaleRecord> = buyers
        .iter()
        .enumerate()
        .map(|(at, buyer)| {
            let buyer = seckill::sale::buyers::BuyerId::parse(buyer).unwrap();
            SaleRecord::new(
                &seller(),
                &format!("g-{at}"),
                Segment::WHOLE,
                0,
                Some(token.clone()),
                0.0,
                0,
            )
            .with_buyer(Some(&buyer))
            .in_group("g")
        })
        .collect();
    let written = scripts
        .write(
            &store,
            &GroupWrite {
                segment: Segment::WHOLE,
                group_id: "g",
                stock_read: units,
                read_from: &sale,
                token: Some(&token),
                records: &records,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        written,
        GroupWritten::Written(vec![
            MemberWritten::Sold { stock_after: 1 },
            MemberWritten::AlreadyBought,
            MemberWritten::Sold { stock_after: 0 },
            MemberWritten::SoldOut,
        ])
    );
    let snapshot = store.snapshot().await.unwrap();
    assert_eq!((snapshot.stock, snapshot.lucky, snapshot.sales), (0, 2, 2));
    let sales = testkit::sale_records(&test_sale).await;
    let units: Vec<(i64, Option<&str>)> = sales.iter().map(|r| (r.stock_before, r.buyer.as_deref())).collect();
    assert_eq!(units, [(2, Some("alice")), (1, Some("bob"))]);
    assert!(sales.iter().all(|record| record.group.as_deref() == Some("g")));
}

/// Through the service: a first buyer holds the lock through a long pause before its
/// write, so five more queue behind it and become one group. While that group pauses
/// between its read and its write, a newer holder's read raises the fence: every buyer
/// of the group hears `503 lock_lost`, and only the first buyer's unit is sold.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_group_write_fails_every_buyer_of_the_group_through_the_service() {
    let sale = testkit::TestSale::new();
    let instance = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.group_commit = true;
        config.chaos_pause_before_write_ms = Some(400);
    })
    .await;
    testkit::reset_stock(&instance.url, 10).await;
    let client = testkit::redis_client().await;
    let mut redis = testkit::connection(&client).await;
    let fence = sale.keys().fence_of(Segment::WHOLE);
    // The sale id the fence's high-water mark names: the last group that read.
    let mark = || {
        let mut redis = redis.clone();
        let fence = fence.clone();
        async move {
            let mark: Option<String> = redis::cmd("HGET")
                .arg(&fence)
                .arg("sale")
                .query_async(&mut redis)
                .await
                .unwrap();
            mark
        }
    };
    let http = reqwest::Client::new();
    let buy = || buyer(&http, &instance.url);

    let first = buy();
    // The first buyer's group has read: the mark names it.
    let first_group = until(Duration::from_secs(5), mark).await;
    let group: Vec<_> = (0..5).map(|_| buy()).collect();
    // The second group has read: the mark names another sale id. A newer holder reads.
    until(Duration::from_secs(5), || async {
        mark().await.filter(|mark| *mark != first_group)
    })
    .await;
    let _: i64 = redis::cmd("HINCRBY")
        .arg(&fence)
        .arg("counter")
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();

    assert_eq!(first.await.unwrap(), "sold");
    for buyer in group {
        assert_eq!(
            buyer.await.unwrap(),
            "503 lock_lost",
            "every buyer of the refused group"
        );
    }
    let stock = testkit::stock(&instance.url).await;
    assert_eq!(
        (stock.stock, stock.lucky, stock.sales),
        (9, 1, 1),
        "only the first buyer's unit is sold"
    );
    assert_eq!(
        testkit::metric(&instance.url, "seckill_group_size_count").await,
        2.0,
        "two grants, two groups"
    );
    assert_eq!(
        testkit::metric(&instance.url, "seckill_group_size_sum").await,
        6.0,
        "of one buyer, then five"
    );
    instance.stop().await.unwrap();
}

/// One buyer in a task of its own; its answer as [`testkit::buy`] tells it.
fn buyer(http: &reqwest::Client, url: &str) -> tokio::task::JoinHandle<String> {
    let (http, url) = (http.clone(), url.to_owned());
    tokio::spawn(async move { testkit::buy(&http, &url).await })
}

/// Polls `probe` every 5 ms until it gives something, for at most `within`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(within: Duration, mut probe: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A switch the strategy cannot use is refused at start, naming the fix.
#[tokio::test]
async fn group_commit_without_a_local_queue_is_refused_with_the_fix() {
    let sale = testkit::TestSale::new();
    let refused = testkit::start_refused(Strategy::Atomic, &sale, |config| config.group_commit = true).await;
    assert!(refused.contains("--lock atomic` takes no lock"), "{refused}");
    let refused = testkit::start_refused(Strategy::None, &sale, |config| config.group_commit = true).await;
    assert!(
        refused.contains("Leave --group-commit off with the baselines"),
        "{refused}"
    );
    let refused = testkit::start_refused(Strategy::Redis, &sale, |config| {
        config.group_commit = true;
        config.local_queue = false;
    })
    .await;
    assert!(
        refused.contains("--local-queue false takes the queue away"),
        "{refused}"
    );
}

/// `seckill_lock_waiters` counts every buyer waiting for the lock, in a group or alone:
/// five buyers behind a lock someone else holds are five waiters, whether one of them
/// leads a group and four wait on its list, or all five wait in the local queue. Once
/// the lock is free and they are served, none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_buyer_waiting_for_the_lock_is_a_waiter_in_a_group_as_alone() {
    for group_commit in [true, false] {
        let sale = testkit::TestSale::new();
        let instance = testkit::instance_with(Strategy::Redis, &sale, |config| {
            config.group_commit = group_commit;
            config.acquire_timeout_ms = 10_000;
        })
        .await;
        testkit::reset_stock(&instance.url, 10).await;
        // Someone else holds the lock for a while.
        sale.hold_the_stock_lock(1500).await;
        let http = reqwest::Client::new();
        let buyers: Vec<_> = (0..5).map(|_| buyer(&http, &instance.url)).collect();
        let waiters = || testkit::metric(&instance.url, "seckill_lock_waiters");
        let started = Instant::now();
        let mut most = waiters().await;
        while most < 5.0 && started.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            most = most.max(waiters().await);
        }
        assert_eq!(most, 5.0, "group commit {group_commit}: five buyers wait for the lock");
        for buyer in buyers {
            assert_eq!(buyer.await.unwrap(), "sold", "group commit {group_commit}");
        }
        assert_eq!(waiters().await, 0.0, "group commit {group_commit}: nobody waits now");
        instance.stop().await.unwrap();
    }
}
