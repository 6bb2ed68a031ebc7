//! `redis-degrade` under a sustained load across two instances while its lock Redis is
//! killed and brought back (and, in the second test, paused and resumed), ten times:
//! no unit sold twice, nothing lost, every buyer told 200 or a clear 503, and sales go
//! on while Redis is down. `cargo test -p loadtest --test it degrade_under_load:: -- --nocapture`
//! prints the answers per mode and the sales per second in each.
//! `SECKILL_DEGRADE_CYCLES` sets the number of outages (default 10).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seckill::lock::redis_degrade::{self, DegradeStats};
use seckill::server::Instance;
use seckill::strategy::Strategy;
use testkit::PrivateRedis;

/// Buyers sending one request after another, split between the two instances.
const BUYERS: usize = 32;
const STOCK: i64 = 1_000_000;
/// How long each outage lasts, and how long Redis then stays up.
const DOWN: Duration = Duration::from_secs(3);
const UP: Duration = Duration::from_secs(3);

enum Fault {
    /// SIGKILL, then a new empty server on the same port.
    Kill,
    /// SIGSTOP, then SIGCONT: a slow network, not a dead server.
    Pause,
}

/// What the buyers were told, by the mode instance 1 reported at the time.
#[derive(Default)]
struct Answers {
    by_mode: BTreeMap<String, BTreeMap<String, usize>>,
    sold: usize,
}

async fn start(sale: &testkit::TestSale, lock_redis: &PrivateRedis) -> Instance {
    testkit::redis_client().await;
    let mut config = testkit::config(Strategy::RedisDegrade, sale);
    config.redis.lock_redis_url = Some(lock_redis.url());
    config.lock_ttl_ms = 1000;
    config.degrade.degrade_recover_ms = 1000;
    config.mysql_url = testkit::mysql_url();
    Instance::start(config).await.expect("an instance starts")
}

async fn mode_of(http: &reqwest::Client, url: &str) -> String {
    let health: Option<serde_json::Value> = match http.get(format!("{url}/healthz")).send().await {
        Ok(response) => response.json().await.ok(),
        Err(_) => None,
    };
    health
        .and_then(|health| health["lock_stats"]["degrade"]["mode"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

async fn outages(fault: Fault) {
    let _turn = testkit::take_turn().await;
    let sale = testkit::TestSale::new();
    let cycles: usize = std::env::var("SECKILL_DEGRADE_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let mut lock_redis = Some(PrivateRedis::start());
    let port = lock_redis.as_ref().unwrap().port;
    let (first, second) = (
        start(&sale, lock_redis.as_ref().unwrap()).await,
        start(&sale, lock_redis.as_ref().unwrap()).await,
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let reset = http
        .post(format!("{}/stock/reset", first.url))
        .header("content-type", "application/json")
        .body(format!(r#"{{"stock": {STOCK}}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status().as_u16(), 200);

    let answers = Arc::new(Mutex::new(Answers::default()));
    let mode = Arc::new(Mutex::new(mode_of(&http, &first.url).await));
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut buyers = Vec::new();
    for buyer in 0..BUYERS {
        let url = if buyer % 2 == 0 {
            first.url.clone()
        } else {
            second.url.clone()
        };
        let (http, answers, mode, running) = (http.clone(), answers.clone(), mode.clone(), running.clone());
        buyers.push(tokio::spawn(async move {
            while running.load(std::sync::atomic::Ordering::SeqCst) {
                let answer = match http.get(format!("{url}/stock/reduce")).send().await {
                    Err(error) => format!("no answer: {error}"),
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body: serde_json::Value = response.json().await.unwrap_or_default();
                        match status {
                            200 if body["sold"] == true => "200 sold".to_owned(),
                            200 => "200 sold out".to_owned(),
                            _ => format!("{status} {}", body["error"].as_str().unwrap_or("?")),
                        }
                    }
                };
                let mode = mode.lock().unwrap().clone();
                let mut answers = answers.lock().unwrap();
                answers.sold += usize::from(answer == "200 sold");
                *answers.by_mode.entry(mode).or_default().entry(answer).or_default() += 1;
            }
        }));
    }
    let watcher = tokio::spawn({
        let (http, url, mode, running) = (http.clone(), first.url.clone(), mode.clone(), running.clone());
        async move {
            while running.load(std::sync::atomic::Ordering::SeqCst) {
                let now = mode_of(&http, &url).await;
                *mode.lock().unwrap() = now;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    tokio::time::sleep(UP).await;
    for _ in 0..cycles {
        match fault {
            Fault::Kill => drop(lock_redis.take()),
            Fault::Pause => lock_redis.as_ref().unwrap().freeze(),
        }
        tokio::time::sleep(DOWN).await;
        match fault {
            Fault::Kill => lock_redis = Some(PrivateRedis::start_on(port)),
            Fault::Pause => lock_redis.as_ref().unwrap().thaw(),
        }
        tokio::time::sleep(UP).await;
    }
    running.store(false, std::sync::atomic::Ordering::SeqCst);
    for buyer in buyers {
        buyer.await.unwrap();
    }
    watcher.await.unwrap();
    let health = testkit::healthz(&first.url).await;
    let degrade = health
        .lock_stats
        .and_then(|stats| stats.own_part::<DegradeStats>(redis_degrade::STATS_KEY))
        .expect("redis-degrade shows its modes in /healthz");
    first.stop().await.unwrap();
    second.stop().await.unwrap();

    // The verdict, from Redis.
    let sale = loadtest::verdict::sale_state::read_sale(&testkit::redis_url(), sale.keys())
        .await
        .unwrap();
    let answers = answers.lock().unwrap();
    let mut read: HashSet<i64> = HashSet::new();
    let sold_twice = sale
        .records
        .iter()
        .filter(|record| !read.insert(record.stock_before))
        .count();
    let seconds = |mode: &str| match mode {
        "redis" => degrade.seconds_in_redis,
        _ => degrade.seconds_in_mysql,
    };
    let sold_in = |mode: &str| {
        answers
            .by_mode
            .get(mode)
            .and_then(|told| told.get("200 sold"))
            .copied()
            .unwrap_or(0)
    };
    for (mode, told) in &answers.by_mode {
        println!("while instance 1 was on {mode}: {told:?}");
    }
    println!(
        "{cycles} outages; sales/s on redis {:.0}, on mysql {:.0}; switches seen by instance 1: {}",
        sold_in("redis") as f64 / seconds("redis"),
        sold_in("mysql") as f64 / seconds("mysql"),
        degrade.switches
    );

    assert_eq!(sold_twice, 0, "a unit was sold twice");
    assert_eq!(sale.stock + sale.lucky, STOCK, "stock + lucky");
    assert_eq!(
        sale.records.len() + sale.unreadable_records,
        sale.lucky as usize,
        "sale records = lucky"
    );
    assert_eq!(answers.sold, sale.lucky as usize, "buyers told sold = units sold");
    assert!(answers.sold >= 2000, "a sustained load: only {} sales", answers.sold);
    for (mode, told) in &answers.by_mode {
        for answer in told.keys() {
            assert!(
                answer.starts_with("200 ") || answer.starts_with("503 "),
                "on {mode}: {answer}"
            );
        }
    }
    assert!(sold_in("mysql") > 0, "no sale while the lock Redis was down");
    assert!(degrade.switches >= 2 * cycles as u64 - 1, "switches: {degrade:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_lock_redis_ten_times_under_load_sells_every_unit_once_and_keeps_selling() {
    outages(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_the_lock_redis_ten_times_under_load_sells_every_unit_once_and_keeps_selling() {
    outages(Fault::Pause).await;
}
