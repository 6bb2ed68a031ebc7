//! The stock refuses a holder whose lock is gone: two guards with tokens 33 and 34,
//! their reads and writes interleaved in every order, never sell one unit twice, and
//! each sale comes to exactly what the fence must make of it (a table per interleaving).
//! Without tokens (the baselines, `--fencing off`) the same interleavings do.

use seckill::lock::FencingToken;
use seckill::sale::segments::Segment;
use seckill::sale::stock::{SaleName, SaleRecord, Seller, StockRead, StockStore, WriteOutcome};
use seckill::strategy::Strategy;

const INITIAL: i64 = 10;

#[derive(Clone, Copy, Debug)]
enum Step {
    Read(usize),
    Write(usize),
}

/// Every order of two holders' read-then-write: the 6 ways to interleave them.
fn interleavings() -> Vec<[Step; 4]> {
    use Step::*;
    vec![
        [Read(0), Write(0), Read(1), Write(1)],
        [Read(0), Read(1), Write(0), Write(1)],
        [Read(0), Read(1), Write(1), Write(0)],
        [Read(1), Read(0), Write(0), Write(1)],
        [Read(1), Read(0), Write(1), Write(0)],
        [Read(1), Write(1), Read(0), Write(0)],
    ]
}

/// The stock of a sale of the test's own.
async fn store() -> StockStore {
    let client = testkit::redis_client().await;
    StockStore::new(testkit::master_connection(&client).await).with_keys(testkit::TestSale::new().keys().clone())
}

/// What one holder's sale came to: refused at its read (the fence had seen a newer
/// token, or another sale with this one), or what its write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Came {
    RefusedAtRead,
    Written(WriteOutcome),
}

/// What each holder's sale came to, and the store's counts after them.
#[derive(Debug)]
struct Played {
    came: [Came; 2],
    sold_twice: usize,
    lucky: i64,
}

/// Plays one interleaving: each holder writes `read - 1` if its read was allowed and
/// found stock.
async fn play(store: &StockStore, order: &[Step; 4], tokens: [Option<FencingToken>; 2]) -> Played {
    store.reset(INITIAL).await.unwrap();
    let seller = seller("fencing-test", "test");
    let mut read: [Option<(i64, SaleName)>; 2] = [None, None];
    let mut came = [Came::RefusedAtRead; 2];
    for step in order {
        match *step {
            Step::Read(holder) => {
                let sale_id = format!("{order:?}-{holder}");
                if let StockRead::Stock { units, sale } = store
                    .read(Segment::WHOLE, tokens[holder].as_ref(), &sale_id)
                    .await
                    .unwrap()
                {
                    read[holder] = Some((units, sale));
                }
            }
            Step::Write(holder) => {
                let Some((stock, sale)) = read[holder].clone() else {
                    continue;
                }; // refused at the read: no write
                let record = SaleRecord::new(
                    &seller,
                    &format!("{order:?}-{holder}"),
                    Segment::WHOLE,
                    stock,
                    tokens[holder].clone(),
                    0.0,
                    0,
                );
                let written = store
                    .write(Segment::WHOLE, &record, stock - 1, &sale, tokens[holder].as_ref())
                    .await
                    .unwrap();
                came[holder] = Came::Written(written);
            }
        }
    }
    let snapshot = store.snapshot().await.unwrap();
    Played {
        came,
        sold_twice: (snapshot.stock + snapshot.lucky - INITIAL) as usize,
        lucky: snapshot.lucky,
    }
}

/// Plays every interleaving with `tokens` and checks each against what the fence must
/// make of it: `expected[i]` is what each holder's sale comes to in `interleavings()[i]`.
/// No unit is sold twice, and `lucky` counts exactly the sales that say `Sold`.
async fn every_interleaving_comes_to(tokens: [Option<FencingToken>; 2], expected: [[Came; 2]; 6]) {
    let store = store().await;
    for (order, expected) in interleavings().iter().zip(expected) {
        let played = play(&store, order, tokens.clone()).await;
        assert_eq!(played.came, expected, "{order:?}");
        assert_eq!(played.sold_twice, 0, "{order:?} sold a unit twice: {played:?}");
        let sold = expected.iter().filter(|came| **came == SOLD).count() as i64;
        assert_eq!(played.lucky, sold, "{order:?}: {played:?}");
    }
}

const SOLD: Came = Came::Written(WriteOutcome::Sold);
const FENCED: Came = Came::Written(WriteOutcome::Fenced);
const REFUSED: Came = Came::RefusedAtRead;

/// A seller on no port, for sale records written straight to the store.
fn seller(instance: &str, strategy: &'static str) -> Seller {
    Seller {
        instance: instance.into(),
        port: 0,
        strategy,
    }
}

/// The name of the sale on now, as a read sees it.
async fn current_sale(store: &StockStore) -> SaleName {
    SaleName(store.sale_name().await.unwrap().unwrap_or_default())
}

fn token(counter: u64) -> Option<FencingToken> {
    Some(FencingToken::new("test", 0, counter))
}

/// Holder 0 has token 33, holder 1 the newer 34. A read raises the fence's mark, so
/// the older holder is refused once the newer one has read: at its write if it read
/// first, at its read if it reads second. One after the other, both sell.
#[tokio::test]
async fn two_fenced_holders_never_sell_one_unit_twice_in_any_order() {
    every_interleaving_comes_to(
        [token(33), token(34)],
        [
            [SOLD, SOLD],    // R0 W0 R1 W1
            [FENCED, SOLD],  // R0 R1 W0 W1
            [FENCED, SOLD],  // R0 R1 W1 W0
            [REFUSED, SOLD], // R1 R0 W0 W1
            [REFUSED, SOLD], // R1 R0 W1 W0
            [REFUSED, SOLD], // R1 W1 R0 W0
        ],
    )
    .await;
}

/// Two grants can carry one token: a lock Redis restarted empty counts from 1 again, a
/// failover loses the last INCR, a reentry reads the row's token. The fence must let
/// only one of them sell.
/// The mark remembers the one sale that read with its token: whoever reads second with
/// the same token is refused at its read, even after the first one sold.
#[tokio::test]
async fn two_grants_with_the_same_token_never_sell_one_unit_twice_in_any_order() {
    every_interleaving_comes_to(
        [token(7), token(7)],
        [
            [SOLD, REFUSED], // R0 W0 R1 W1
            [SOLD, REFUSED], // R0 R1 W0 W1
            [SOLD, REFUSED], // R0 R1 W1 W0
            [REFUSED, SOLD], // R1 R0 W0 W1
            [REFUSED, SOLD], // R1 R0 W1 W0
            [REFUSED, SOLD], // R1 W1 R0 W0
        ],
    )
    .await;
}

#[tokio::test]
async fn an_older_token_is_refused_once_a_newer_one_has_read() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    assert!(matches!(
        store.read(Segment::WHOLE, token(34).as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock { units: INITIAL, .. }
    ));
    assert!(matches!(
        store.read(Segment::WHOLE, token(33).as_ref(), "a-sale").await.unwrap(),
        StockRead::Fenced { .. }
    ));
}

#[tokio::test]
async fn a_newer_epoch_beats_any_counter_of_an_older_one() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    let switched = Some(FencingToken::new("mysql", 1, 2));
    assert!(matches!(
        store.read(Segment::WHOLE, switched.as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock { units: INITIAL, .. }
    ));
    let old_source = Some(FencingToken::new("redis", 0, 1_000));
    assert!(matches!(
        store.read(Segment::WHOLE, old_source.as_ref(), "a-sale").await.unwrap(),
        StockRead::Fenced { .. }
    ));
}

#[tokio::test]
async fn a_reset_clears_the_high_water_mark_for_a_new_sale() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    store.read(Segment::WHOLE, token(34).as_ref(), "a-sale").await.unwrap();
    store.reset(INITIAL).await.unwrap();
    assert!(matches!(
        store.read(Segment::WHOLE, token(1).as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock { units: INITIAL, .. }
    ));
}

#[tokio::test]
async fn without_tokens_the_same_interleavings_sell_a_unit_twice() {
    let store = store().await;
    let mut orders_that_oversold = 0;
    for order in interleavings() {
        if play(&store, &order, [None, None]).await.sold_twice > 0 {
            orders_that_oversold += 1;
        }
    }
    // Both reads before both writes: 4 of the 6 orders.
    assert_eq!(
        orders_that_oversold, 4,
        "the unfenced race should show in every read-read order"
    );
}

#[tokio::test]
async fn a_sale_settled_as_aborted_cannot_be_written_later() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    let seller = seller("settle-test", "test");
    let record = SaleRecord::new(&seller, "late-write", Segment::WHOLE, INITIAL, None, 0.0, 0);
    let sale = current_sale(&store).await;
    assert_eq!(
        store.settle(Segment::WHOLE, "late-write", &sale).await.unwrap(),
        seckill::sale::stock::Settled::NotSold
    );
    assert_eq!(
        store
            .write(Segment::WHOLE, &record, INITIAL - 1, &sale, None)
            .await
            .unwrap(),
        WriteOutcome::Aborted
    );
    assert_eq!(store.snapshot().await.unwrap().lucky, 0);
}

#[tokio::test]
async fn a_sale_written_before_it_is_settled_settles_as_sold() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    let seller = seller("settle-test", "test");
    let record = SaleRecord::new(&seller, "early-write", Segment::WHOLE, INITIAL, None, 0.0, 0);
    let sale = current_sale(&store).await;
    assert_eq!(
        store
            .write(Segment::WHOLE, &record, INITIAL - 1, &sale, None)
            .await
            .unwrap(),
        WriteOutcome::Sold
    );
    assert_eq!(
        store.settle(Segment::WHOLE, "early-write", &sale).await.unwrap(),
        seckill::sale::stock::Settled::Sold {
            stock_after: INITIAL - 1
        }
    );
}

/// The lock lives in a Redis of its own (`--lock-redis-url`) that restarts empty mid-sale.
/// Its fencing counter starts again from 1 while the stock remembers the last sale's
/// token: unless the tokens of the new server outrank the old ones, every lawful holder
/// after the restart is refused as one whose lock is gone (`lock_lost`), until the
/// counter passes the mark. A restart may cost a failed request while the connection
/// comes back, and then the sale goes on.
#[tokio::test]
async fn a_lock_redis_restarted_empty_costs_a_moment_not_the_sale() {
    const SOLD_BEFORE: usize = 20;
    let lock_redis = testkit::PrivateRedis::start();
    let instance = testkit::instance_with(Strategy::Redis, &testkit::TestSale::new(), |config| {
        config.redis.lock_redis_url = Some(lock_redis.url());
    })
    .await;
    testkit::reset_stock(&instance.url, 100).await;
    let http = reqwest::Client::new();
    let buy = || testkit::buy(&http, &instance.url);
    for _ in 0..SOLD_BEFORE {
        assert_eq!(buy().await, "sold", "the sales before the restart");
    }

    let (port, _old_data) = lock_redis.crash();
    let _restarted = testkit::PrivateRedis::start_on(port);
    let restarted_at = std::time::Instant::now();
    let mut answers = Vec::new();
    while answers.iter().filter(|answer| *answer == "sold").count() < 3 {
        assert!(
            restarted_at.elapsed() < std::time::Duration::from_secs(3),
            "3 s after the restart, still not 3 sales: {answers:?}"
        );
        answers.push(buy().await);
    }
    assert!(
        !answers.iter().any(|answer| answer == "503 lock_lost"),
        "the fence refused lawful holders after the restart: {answers:?}"
    );
}

/// A sale without a token (`redlock`, `--fencing off`) read 5 when a reset put 100 units
/// on sale. Its write must not become the new sale's stock, records or orders.
#[tokio::test]
async fn an_unfenced_write_whose_sale_was_reset_commits_nothing_in_the_new_sale() {
    let store = store().await.with_orders(true);
    let orders_queued = || async {
        redis::cmd("XLEN")
            .arg(store.keys().orders())
            .query_async::<i64>(&mut store.connection())
            .await
            .unwrap()
    };
    // A reset leaves the orders stream alone: count what this sale adds to it.
    let orders_before = orders_queued().await;
    store.reset(5).await.unwrap();
    let StockRead::Stock { units: 5, sale } = store.read(Segment::WHOLE, None, "before-reset").await.unwrap() else {
        panic!("the read should find the 5 units");
    };
    store.reset(100).await.unwrap();
    let seller = seller("reset-test", "test");
    let record = SaleRecord::new(&seller, "before-reset", Segment::WHOLE, 5, None, 0.0, 0);
    assert_eq!(
        store.write(Segment::WHOLE, &record, 4, &sale, None).await.unwrap(),
        WriteOutcome::SaleReset
    );
    let snapshot = store.snapshot().await.unwrap();
    assert_eq!(
        (snapshot.stock, snapshot.lucky, snapshot.sales),
        (100, 0, 0),
        "the old read reached the new sale"
    );
    assert_eq!(orders_queued().await, orders_before, "a phantom order was queued");
}

/// The write committed, its answer was lost, and a reset deleted the outcomes before
/// the seller asked. "Not sold" would be a lie: the unit was sold (and its order queued).
#[tokio::test]
async fn a_write_that_committed_before_a_reset_never_settles_as_not_sold() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    let StockRead::Stock { units, sale } = store.read(Segment::WHOLE, None, "answer-lost").await.unwrap() else {
        panic!("the read should find the stock");
    };
    let seller = seller("settle-test", "test");
    let record = SaleRecord::new(&seller, "answer-lost", Segment::WHOLE, units, None, 0.0, 0);
    assert_eq!(
        store
            .write(Segment::WHOLE, &record, units - 1, &sale, None)
            .await
            .unwrap(),
        WriteOutcome::Sold
    );
    store.reset(INITIAL).await.unwrap();
    assert_eq!(
        store.settle(Segment::WHOLE, "answer-lost", &sale).await.unwrap(),
        seckill::sale::stock::Settled::Unknown
    );
}

/// The case through the service: a `redlock` sale pauses between its read and
/// its write (`--chaos-pause-before-write-ms 300`), and a reset to 100 lands in the pause.
#[tokio::test]
async fn a_redlock_sale_paused_across_a_reset_sells_nothing_in_the_new_sale() {
    let instance = testkit::instance_with(Strategy::Redlock, &testkit::TestSale::new(), |config| {
        config.chaos_pause_before_write_ms = Some(300);
    })
    .await;
    testkit::reset_stock(&instance.url, 5).await;
    let url = instance.url.clone();
    let buyer = tokio::spawn(async move { testkit::buy(&reqwest::Client::new(), &url).await });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    testkit::reset_stock(&instance.url, 100).await;
    assert_eq!(buyer.await.unwrap(), "503 sale_reset");
    let stock = testkit::stock(&instance.url).await;
    assert_eq!(
        (stock.stock, stock.lucky, stock.sales),
        (100, 0, 0),
        "the new sale must start whole: {stock:?}"
    );
    instance.stop().await.unwrap();
}

/// The atomic script's answer was lost, and a reset came before the settle. The script
/// read nothing before it sold, so it carries the sale's name its store last saw.
#[tokio::test]
async fn an_atomic_sale_that_committed_before_a_reset_never_settles_as_not_sold() {
    let store = store().await;
    store.reset(INITIAL).await.unwrap();
    let seller = seller("atomic-settle-test", "atomic");
    let first = SaleRecord::new(&seller, "atomic-first", Segment::WHOLE, 0, None, 0.0, 0);
    store.sell_atomically(&first).await.unwrap();
    // The next sale takes the name before it sends the script, as the service does.
    let sent_to = store.sale_seen_by_atomic();
    let lost = SaleRecord::new(&seller, "atomic-answer-lost", Segment::WHOLE, 0, None, 0.0, 0);
    assert!(matches!(
        store.sell_atomically(&lost).await.unwrap(),
        seckill::sale::stock::AtomicOutcome::Sold { .. }
    ));
    store.reset(INITIAL).await.unwrap();
    assert_eq!(
        store
            .settle(Segment::WHOLE, "atomic-answer-lost", &sent_to)
            .await
            .unwrap(),
        seckill::sale::stock::Settled::Unknown
    );
    // Once an answer told the store the new name, an id that never reached Redis, with
    // no reset since, is settled as not sold.
    let after_reset = SaleRecord::new(&seller, "atomic-after-reset", Segment::WHOLE, 0, None, 0.0, 0);
    store.sell_atomically(&after_reset).await.unwrap();
    let sent_to = store.sale_seen_by_atomic();
    assert_eq!(
        store
            .settle(Segment::WHOLE, "atomic-never-sent", &sent_to)
            .await
            .unwrap(),
        seckill::sale::stock::Settled::NotSold
    );
}
