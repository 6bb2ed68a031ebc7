//! Time: a clock that jumps.
//!
//! Redlock assumes that the masters' clocks run at about the same rate (bounded drift).
//! Kleppmann's objection: a master whose clock jumps forward expires its keys early,
//! and with a holder that had a bare majority, a second client then gets one too. The
//! first two tests make that happen, with a Redis whose wall clock jumps past the TTL
//! (the clock-shift preload, see testkit/src/wall_clock.rs):
//! - under `redlock`, both clients hold the lock at once, and the late write sells a
//!   unit twice: Redlock has no fencing token for the stock to check;
//! - under `redis`, the same jump also makes two holders, but the stock refuses the
//!   late write, because the second grant's token is newer.
//!
//! The third makes the wall clock of a `seckill serve` process jump (libfaketime) an
//! hour forward and back in the middle of a sale: no lease notices, because the
//! service measures its leases on the monotonic clock.

use std::time::{Duration, Instant};

use seckill::lock::redis::{RedisLock, RedisLockOptions};
use seckill::lock::redlock::{Redlock, RedlockOptions};
use seckill::lock::{DistributedLock, FencingToken};
use seckill::sale::segments::Segment;
use seckill::sale::stock::{SaleName, SaleRecord, Seller, StockRead, StockStore, WriteOutcome};
use testkit::{PrivateRedis, ServeProcess, WallClock};

/// Long enough that no renewal (every `TTL / 3`) runs during a test: the holder keeps
/// believing in its lease, as a holder between two renewals does.
const TTL: Duration = Duration::from_secs(30);
/// Past the TTL: the jump that expires every key on the jumping server.
const JUMP_PAST_TTL_MS: i64 = TTL.as_millis() as i64 + 1_000;
const INITIAL: i64 = 10;

/// The stock of a sale of the test's own, put on sale.
async fn stock() -> StockStore {
    let client = testkit::redis_client().await;
    let store =
        StockStore::new(testkit::master_connection(&client).await).with_keys(testkit::TestSale::new().keys().clone());
    store.reset(INITIAL).await.unwrap();
    store
}

/// One holder of a grant, playing the sale's two steps by hand.
struct Holder<'a> {
    name: &'static str,
    store: &'a StockStore,
    token: Option<FencingToken>,
    read: Option<(i64, SaleName)>,
}

impl<'a> Holder<'a> {
    fn new(name: &'static str, store: &'a StockStore, token: Option<&FencingToken>) -> Self {
        Holder {
            name,
            store,
            token: token.cloned(),
            read: None,
        }
    }

    /// Step 1: read the stock, under the token if there is one.
    async fn read(&mut self) -> StockRead {
        let read = self
            .store
            .read(Segment::WHOLE, self.token.as_ref(), self.name)
            .await
            .unwrap();
        if let StockRead::Stock { units, sale } = &read {
            self.read = Some((*units, sale.clone()));
        }
        read
    }

    /// Step 2: write one unit less than it read.
    async fn write(&self) -> WriteOutcome {
        let (stock, sale) = self.read.clone().expect("read before it writes");
        let seller = Seller {
            instance: self.name.to_owned(),
            port: 0,
            strategy: "test",
        };
        let record = SaleRecord::new(&seller, self.name, Segment::WHOLE, stock, self.token.clone(), 0.0, 0);
        self.store
            .write(Segment::WHOLE, &record, stock - 1, &sale, self.token.as_ref())
            .await
            .unwrap()
    }
}

/// Units sold more than once: stock and lucky buyers add up to more than was put on sale.
async fn units_sold_twice(store: &StockStore) -> i64 {
    let snapshot = store.snapshot().await.unwrap();
    snapshot.stock + snapshot.lucky - INITIAL
}

/// The `stock_before` of every sale record, oldest first.
async fn stock_read_by_each_sale(store: &StockStore) -> Vec<i64> {
    let records: Vec<String> = redis::cmd("LRANGE")
        .arg(store.keys().sales())
        .arg(0)
        .arg(-1)
        .query_async(&mut store.connection())
        .await
        .unwrap();
    records
        .iter()
        .map(|record| serde_json::from_str::<SaleRecord>(record).unwrap().stock_before)
        .collect()
}

/// Whether `key` exists on `redis`.
async fn exists(redis: &PrivateRedis, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<bool>(&mut testkit::connection(&redis.client()).await)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_redlock_a_master_whose_clock_jumps_past_the_ttl_lets_a_second_holder_in_and_a_unit_sells_twice() {
    let options = RedlockOptions {
        ttl: TTL,
        renew: true,
        node_timeout: Duration::from_millis(50),
    };
    // Five masters: two are down when A acquires, so A gets a bare majority, three of
    // five. One of A's three has a wall clock that will jump.
    let clock = WallClock::for_redis();
    let jumping = PrivateRedis::start_with_clock(&clock);
    let steady = [PrivateRedis::start(), PrivateRedis::start()];
    let down_ports = testkit::free_ports(2);
    let mut urls: Vec<String> = steady.iter().map(PrivateRedis::url).collect();
    urls.push(jumping.url());
    urls.extend(down_ports.iter().map(|port| format!("redis://127.0.0.1:{port}")));
    let key = testkit::unique_key("redlock-clock-jump");

    let client_a = Redlock::connect(&urls, options).await.unwrap();
    let a = client_a
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("three of five is a majority");

    // The jumping master's clock leaps past the TTL: A's key there expires at once.
    clock.jump_to(JUMP_PAST_TTL_MS);
    let key_left_on_jumping = exists(&jumping, &key).await;
    // The two that were down come back, empty (or a partition heals).
    let _back: Vec<PrivateRedis> = down_ports.into_iter().map(PrivateRedis::start_on).collect();

    // B asks all five: the jumping master and the two empty ones say yes.
    let client_b = Redlock::connect(&urls, options).await.unwrap();
    let b = client_b
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("a second majority: the jumping master and the two that came back");
    let both_held = (a.is_held(), b.is_held());

    // The sale's steps, unfenced since Redlock has no token: A reads, B sells, A writes late.
    let store = stock().await;
    let (mut seller_a, mut seller_b) = (Holder::new("A", &store, None), Holder::new("B", &store, None));
    seller_a.read().await;
    seller_b.read().await;
    let b_wrote = seller_b.write().await;
    let a_wrote = seller_a.write().await;
    let (sold_twice, stock_read) = (units_sold_twice(&store).await, stock_read_by_each_sale(&store).await);
    println!(
        "redlock: A granted by 3 of 5; the jumping master's clock +{JUMP_PAST_TTL_MS} ms, A's key there: {}; \
         B granted by 3 of 5; held at once (A, B): {both_held:?}; B wrote {b_wrote:?}, A wrote late {a_wrote:?}; \
         stock read by each sale {stock_read:?}; {sold_twice} unit(s) sold twice",
        if key_left_on_jumping { "still there" } else { "expired" },
    );

    assert!(
        !key_left_on_jumping,
        "the jump past the TTL should have expired A's key on that master"
    );
    assert_eq!(both_held, (true, true), "two holders at once");
    assert_eq!((b_wrote, a_wrote), (WriteOutcome::Sold, WriteOutcome::Sold));
    assert_eq!(
        stock_read,
        vec![INITIAL, INITIAL],
        "both sales sold the unit they read as {INITIAL}"
    );
    assert_eq!(sold_twice, 1, "one unit sold twice");
    let _ = b.release().await;
    let _ = a.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_redis_lock_the_same_jump_lets_a_second_holder_in_but_the_fence_refuses_the_late_write() {
    let options = RedisLockOptions {
        ttl: TTL,
        ..RedisLockOptions::default()
    };
    let clock = WallClock::for_redis();
    let lock_redis = PrivateRedis::start_with_clock(&clock);
    let store = stock().await;
    let stock_client = testkit::redis_client().await;
    // Two instances' locks, their tokens checked by the stock.
    let (client_a, client_b) = (
        RedisLock::connect_fenced_by(&lock_redis.client(), &stock_client, options)
            .await
            .unwrap(),
        RedisLock::connect_fenced_by(&lock_redis.client(), &stock_client, options)
            .await
            .unwrap(),
    );
    let key = testkit::unique_key("redis-clock-jump");

    let a = client_a.try_acquire(&key, &testkit::owner()).await.expect("granted");
    let mut seller_a = Holder::new("A", &store, a.fencing_token());
    let a_read = seller_a.read().await;

    // The lock Redis's clock leaps past the TTL: A's key expires, B is granted.
    clock.jump_to(JUMP_PAST_TTL_MS);
    let b = client_b
        .try_acquire(&key, &testkit::owner())
        .await
        .expect("A's key expired, so B is granted");
    let both_held = (a.is_held(), b.is_held());
    let mut seller_b = Holder::new("B", &store, b.fencing_token());
    seller_b.read().await;
    let b_wrote = seller_b.write().await;
    let a_wrote = seller_a.write().await;
    let sold_twice = units_sold_twice(&store).await;
    let order = |guard: &seckill::lock::LockGuard| guard.fencing_token().map(FencingToken::order);
    println!(
        "redis: A granted with token {:?}, read {a_read:?}; the lock Redis's clock +{JUMP_PAST_TTL_MS} ms; \
         B granted with token {:?}; held at once (A, B): {both_held:?}; B wrote {b_wrote:?}, \
         A wrote late {a_wrote:?}; {sold_twice} unit(s) sold twice",
        order(&a),
        order(&b),
    );

    assert_eq!(both_held, (true, true), "the jump makes two holders here too");
    assert!(order(&b) > order(&a), "B's token outranks A's");
    assert_eq!(b_wrote, WriteOutcome::Sold);
    assert_eq!(
        a_wrote,
        WriteOutcome::Fenced,
        "the stock refuses the older token's late write"
    );
    assert_eq!(sold_twice, 0);
    let _ = b.release().await;
    let _ = a.release().await;
}

/// One `seckill serve --lock redis` process whose wall clock follows `clock`. Leases of
/// 500 ms, and every sale lingers 20 ms between its lease check and its write, so a jump
/// lands while a lease is held.
fn start_instance(sale: &testkit::TestSale, clock: &WallClock) -> ServeProcess {
    let redis_url = testkit::redis_url();
    let args = [
        "--lock",
        "redis",
        "--redis-url",
        &redis_url,
        "--key-prefix",
        sale.prefix(),
        "--lock-ttl-ms",
        "500",
        "--chaos-pause-before-write-ms",
        "20",
    ];
    ServeProcess::start(env!("CARGO_BIN_EXE_seckill"), &args, clock.env())
}

/// How long the buyers may take to sell the whole stock, the three jumps included. The
/// sale takes seconds; two minutes leave room for a loaded machine, and a sale that never
/// sells out fails the test instead of hanging it.
const SOLD_OUT_WITHIN: Duration = Duration::from_secs(120);

/// Buys until sold out; returns every answer ("sold", "sold out", or the error). Panics
/// when not told "sold out" within [`SOLD_OUT_WITHIN`].
async fn buy_until_sold_out(url: String) -> Vec<String> {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + SOLD_OUT_WITHIN;
    let mut answers = Vec::new();
    loop {
        let Ok(answer) = tokio::time::timeout_at(deadline, testkit::buy(&http, &url)).await else {
            panic!(
                "after {SOLD_OUT_WITHIN:?}, {url} never answered \"sold out\": {} answers, the last {:?}",
                answers.len(),
                answers.last()
            );
        };
        answers.push(answer.clone());
        if answer == "sold out" {
            return answers;
        }
        // An instance that answers at once (an error, say) is not asked in a spin.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_wall_clock_jumps_an_hour_forward_and_back_keeps_every_lease_because_leases_use_the_monotonic_clock(
) {
    const STOCK: i64 = 60;
    const HOUR_MS: i64 = 3_600_000;
    let (sale, redis) = (testkit::TestSale::new(), testkit::redis_client().await);
    let clock = WallClock::for_seckill();
    let instance = start_instance(&sale, &clock);
    testkit::reset_stock(&instance.url(), STOCK).await;
    let buyers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(buy_until_sold_out(instance.url())))
        .collect();

    // An hour forward, back to the real time, an hour behind it: each jump once a
    // quarter more of the stock is sold, while a sale holds the lock.
    let mut connection = testkit::connection(&redis).await;
    for (quarter, offset_ms) in [(1, HOUR_MS), (2, 0), (3, -HOUR_MS)] {
        // The moment of the jump; a sale that stalls fails the test instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (lucky, holder): (Option<i64>, Option<String>) = redis::pipe()
                .get(sale.keys().lucky())
                .get(sale.keys().lock_of(seckill::sale::segments::Segment::WHOLE))
                .query_async(&mut connection)
                .await
                .unwrap();
            if lucky.unwrap_or(0) >= STOCK * quarter / 4 && holder.is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after 30 s, no moment with {} of {STOCK} units sold and the lock held: last read {lucky:?} sold, holder {holder:?}",
                STOCK * quarter / 4
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        clock.jump_to(offset_ms);
    }

    let mut answers = Vec::new();
    for buyer in buyers {
        match buyer.await {
            Ok(theirs) => answers.extend(theirs),
            Err(stopped) => std::panic::resume_unwind(stopped.into_panic()), // the buyer's own message
        }
    }
    let snapshot: (i64, i64, Vec<String>) = redis::pipe()
        .get(sale.keys().stock())
        .get(sale.keys().lucky())
        .lrange(sale.keys().sales(), 0, -1)
        .query_async(&mut connection)
        .await
        .unwrap();
    let (stock, lucky, records) = snapshot;
    let sold_at: Vec<i64> = records
        .iter()
        .map(|record| serde_json::from_str::<SaleRecord>(record).unwrap().sold_at_ms as i64)
        .collect();
    let now_ms = seckill::sale::stock::unix_ms() as i64;
    let hours_off = |record_ms: &i64| ((record_ms - now_ms) as f64 / HOUR_MS as f64).round() as i64;
    let mut clocks_seen: Vec<i64> = sold_at.iter().map(hours_off).collect();
    clocks_seen.dedup();
    let errors: Vec<&String> = answers
        .iter()
        .filter(|answer| !["sold", "sold out"].contains(&answer.as_str()))
        .collect();
    let sold = answers.iter().filter(|answer| *answer == "sold").count();
    println!(
        "instance clock jumps: the sales' clock, in hours from now, oldest first: {clocks_seen:?}; \
         {sold} sold, stock {stock}, lucky {lucky}, {} records; errors (lock_lost would be here): {errors:?}",
        records.len()
    );

    assert_eq!(
        clocks_seen,
        vec![0, 1, 0, -1],
        "the instance's wall clock should have jumped forward an hour, back, and back again"
    );
    assert!(errors.is_empty(), "a lease ended by the wall clock's jump: {errors:?}");
    assert_eq!(
        (stock, lucky, records.len(), sold),
        (0, STOCK, STOCK as usize, STOCK as usize)
    );
}
