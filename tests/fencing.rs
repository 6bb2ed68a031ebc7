//! The stock refuses a holder whose lock is gone: two guards with tokens 33 and 34,
//! their reads and writes interleaved in every order, never sell one unit twice.
//! Without tokens (the baselines, `--fencing off`) the same interleavings do.

mod common;

use seckill::lock::FencingToken;
use seckill::segments::Segment;
use seckill::stock::{SaleRecord, Seller, StockRead, StockStore, WriteOutcome};

// One test Redis database per test, because the stock keys have fixed names (`DATABASES` in tests/common/test_redis.rs).
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

async fn store(db: u8) -> StockStore {
    let client = common::redis_client(db).await;
    StockStore::new(redis::aio::ConnectionManager::new(client).await.unwrap())
}

/// Plays one interleaving: each holder writes `read - 1` if its read was allowed and
/// found stock. Returns the units sold twice and what each write did.
async fn play(store: &StockStore, order: &[Step; 4], tokens: [Option<FencingToken>; 2]) -> (usize, Vec<WriteOutcome>) {
    store.reset(INITIAL).await.unwrap();
    let seller = Seller {
        instance: "fencing-test".into(),
        port: 0,
        strategy: "test",
    };
    let mut read: [Option<i64>; 2] = [None, None];
    let mut outcomes = Vec::new();
    for step in order {
        match *step {
            Step::Read(holder) => {
                let sale_id = format!("{order:?}-{holder}");
                if let StockRead::Stock(stock) = store
                    .read(Segment::WHOLE, tokens[holder].as_ref(), &sale_id)
                    .await
                    .unwrap()
                {
                    read[holder] = Some(stock);
                }
            }
            Step::Write(holder) => {
                let Some(stock) = read[holder] else { continue }; // refused at the read: no write
                let record = SaleRecord::new(
                    &seller,
                    &format!("{order:?}-{holder}"),
                    Segment::WHOLE,
                    stock,
                    tokens[holder].clone(),
                    0.0,
                    0,
                );
                outcomes.push(
                    store
                        .write(Segment::WHOLE, &record, stock - 1, tokens[holder].as_ref())
                        .await
                        .unwrap(),
                );
            }
        }
    }
    let snapshot = store.snapshot().await.unwrap();
    let sold_twice = (snapshot.stock + snapshot.lucky - INITIAL) as usize;
    (sold_twice, outcomes)
}

fn token(counter: u64) -> Option<FencingToken> {
    Some(FencingToken::new("test", 0, counter))
}

#[tokio::test]
async fn two_fenced_holders_never_sell_one_unit_twice_in_any_order() {
    let store = store(30).await;
    for order in interleavings() {
        let (sold_twice, outcomes) = play(&store, &order, [token(33), token(34)]).await;
        assert_eq!(sold_twice, 0, "{order:?} sold a unit twice: {outcomes:?}");
        assert!(
            outcomes.contains(&WriteOutcome::Sold),
            "{order:?}: someone should have sold: {outcomes:?}"
        );
    }
}

/// Two grants can carry one token: a lock Redis restarted empty counts from 1 again, a
/// failover loses the last INCR, a reentry reads the row's token. The fence must let
/// only one of them sell.
#[tokio::test]
async fn two_grants_with_the_same_token_never_sell_one_unit_twice_in_any_order() {
    let store = store(37).await;
    for order in interleavings() {
        let (sold_twice, outcomes) = play(&store, &order, [token(7), token(7)]).await;
        assert_eq!(
            sold_twice, 0,
            "{order:?} sold a unit twice under one token: {outcomes:?}"
        );
        assert!(
            outcomes.contains(&WriteOutcome::Sold),
            "{order:?}: someone should have sold: {outcomes:?}"
        );
    }
}

#[tokio::test]
async fn an_older_token_is_refused_once_a_newer_one_has_read() {
    let store = store(31).await;
    store.reset(INITIAL).await.unwrap();
    assert_eq!(
        store.read(Segment::WHOLE, token(34).as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock(INITIAL)
    );
    assert!(matches!(
        store.read(Segment::WHOLE, token(33).as_ref(), "a-sale").await.unwrap(),
        StockRead::Fenced { .. }
    ));
}

#[tokio::test]
async fn a_newer_epoch_beats_any_counter_of_an_older_one() {
    let store = store(32).await;
    store.reset(INITIAL).await.unwrap();
    let switched = Some(FencingToken::new("mysql", 1, 2));
    assert_eq!(
        store.read(Segment::WHOLE, switched.as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock(INITIAL)
    );
    let old_source = Some(FencingToken::new("redis", 0, 1_000));
    assert!(matches!(
        store.read(Segment::WHOLE, old_source.as_ref(), "a-sale").await.unwrap(),
        StockRead::Fenced { .. }
    ));
}

#[tokio::test]
async fn a_reset_clears_the_high_water_mark_for_a_new_sale() {
    let store = store(33).await;
    store.reset(INITIAL).await.unwrap();
    store.read(Segment::WHOLE, token(34).as_ref(), "a-sale").await.unwrap();
    store.reset(INITIAL).await.unwrap();
    assert_eq!(
        store.read(Segment::WHOLE, token(1).as_ref(), "a-sale").await.unwrap(),
        StockRead::Stock(INITIAL)
    );
}

#[tokio::test]
async fn without_tokens_the_same_interleavings_sell_a_unit_twice() {
    let store = store(34).await;
    let mut orders_that_oversold = 0;
    for order in interleavings() {
        let (sold_twice, _) = play(&store, &order, [None, None]).await;
        if sold_twice > 0 {
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
    let store = store(35).await;
    store.reset(INITIAL).await.unwrap();
    let seller = Seller {
        instance: "settle-test".into(),
        port: 0,
        strategy: "test",
    };
    let record = SaleRecord::new(&seller, "late-write", Segment::WHOLE, INITIAL, None, 0.0, 0);
    assert_eq!(
        store.settle("late-write").await.unwrap(),
        seckill::stock::Settled::NotSold
    );
    assert_eq!(
        store.write(Segment::WHOLE, &record, INITIAL - 1, None).await.unwrap(),
        WriteOutcome::Aborted
    );
    assert_eq!(store.snapshot().await.unwrap().lucky, 0);
}

#[tokio::test]
async fn a_sale_written_before_it_is_settled_settles_as_sold() {
    let store = store(36).await;
    store.reset(INITIAL).await.unwrap();
    let seller = Seller {
        instance: "settle-test".into(),
        port: 0,
        strategy: "test",
    };
    let record = SaleRecord::new(&seller, "early-write", Segment::WHOLE, INITIAL, None, 0.0, 0);
    assert_eq!(
        store.write(Segment::WHOLE, &record, INITIAL - 1, None).await.unwrap(),
        WriteOutcome::Sold
    );
    assert_eq!(
        store.settle("early-write").await.unwrap(),
        seckill::stock::Settled::Sold {
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
    use seckill::strategy::Strategy;
    const SOLD_BEFORE: usize = 20;
    let lock_redis = common::PrivateRedis::start();
    let instance = common::instance_with(Strategy::Redis, 38, |config| {
        config.lock_redis_url = Some(lock_redis.url());
    })
    .await;
    common::reset_stock(&instance.url, 100).await;
    let http = reqwest::Client::new();
    let buy = || common::buy(&http, &instance.url);
    for _ in 0..SOLD_BEFORE {
        assert_eq!(buy().await, "sold", "the sales before the restart");
    }

    let (port, _old_data) = lock_redis.crash();
    let _restarted = common::PrivateRedis::start_on(port);
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
