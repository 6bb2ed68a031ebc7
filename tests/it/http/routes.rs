//! The HTTP surface, against a real Redis. Each test sells a sale of its own
//! (`TestSale`, a key prefix of its own); tests that stop or freeze Redis start a private one.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use seckill::sale::segments::Segment;
use seckill::strategy::Strategy;

async fn get(url: String) -> (u16, Value) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// A POST with a JSON body (or an empty one), as the README's `curl` sends it.
async fn post(url: String, body: Option<&str>) -> (u16, Value) {
    let request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.unwrap_or("").to_owned());
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn redis_set(key: &str, value: &str) {
    let client = testkit::redis_client().await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap();
}

fn assert_error_shape(body: &Value, code: &str) {
    assert_eq!(body["error"], code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

#[tokio::test]
async fn reduce_sells_one_unit_per_request_until_sold_out() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 5000).await;
    let (status, _) = post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 2}"#)).await;
    assert_eq!(status, 200);

    let (status, first) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 200);
    assert_eq!(first["sold"], true);
    assert_eq!(first["stock_after"], 1);
    assert_eq!(first["strategy"], "redis");
    assert_eq!(first["port"], app.port);
    assert_eq!(first["message"], format!("{} reduce stock end!", app.port));
    assert_eq!(
        first["fencing_token"]["source"], "redis",
        "redis grants carry a fencing token: {first}"
    );
    assert!(first["fencing_token"]["counter"].as_u64().is_some(), "{first}");

    let (status, second) = post(format!("{}/stock/reduce", app.url), None).await;
    assert_eq!(
        (status, second["sold"].clone(), second["stock_after"].clone()),
        (200, json!(true), json!(0))
    );

    let (status, third) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 200, "sold out is an answer, not an error");
    assert_eq!(third["sold"], false);

    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!(stock, json!({"stock": 0, "lucky": 2, "sales": 2, "initial": 2}));
    app.stop().await.unwrap();
}

/// A sold answer names the unit it sold (sale, segment, unit, sale id: `SoldUnit`), and
/// that is the unit its sale record in Redis took: what a history checker judges from
/// the answers alone. Checked for one sale at a time, for a group's (two segments), and
/// for the atomic script.
#[tokio::test]
async fn every_sold_answer_names_the_unit_its_sale_record_took() {
    type Named = (String, u32, i64);
    let setups: [(&str, Strategy, bool, u32); 3] = [
        ("one sale per grant", Strategy::Redis, false, 1),
        ("groups in two segments", Strategy::Redis, true, 2),
        ("the atomic script", Strategy::Atomic, false, 1),
    ];
    for (setup, strategy, group_commit, segments) in setups {
        let sale = testkit::TestSale::new();
        let app = testkit::instance_with(strategy, &sale, |config| {
            config.group_commit = group_commit;
            config.stock_segments = segments;
        })
        .await;
        post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 6}"#)).await;
        let http = reqwest::Client::new();
        let buyers: Vec<_> = (0..10)
            .map(|_| tokio::spawn(http.get(format!("{}/stock/reduce", app.url)).send()))
            .collect();
        let mut answers = Vec::new();
        for buyer in buyers {
            let answer: seckill::api::ReduceAnswer = buyer.await.unwrap().unwrap().json().await.unwrap();
            answers.push(answer);
        }
        let client = testkit::redis_client().await;
        let mut redis = testkit::connection(&client).await;
        let sale_name: String = redis::cmd("GET")
            .arg(sale.keys().sale_name())
            .query_async(&mut redis)
            .await
            .unwrap();
        let mut recorded: Vec<Named> = Vec::new();
        // On one Redis, every segment records its sales in one list.
        let mut lists: Vec<String> = seckill::sale::segments::Segments::new(segments)
            .unwrap()
            .all()
            .map(|segment| sale.keys().sales_of(segment))
            .collect();
        lists.dedup();
        for list in lists {
            let records: Vec<String> = redis::cmd("LRANGE")
                .arg(list)
                .arg(0)
                .arg(-1)
                .query_async(&mut redis)
                .await
                .unwrap();
            for record in records {
                let record: seckill::sale::stock::SaleRecord = serde_json::from_str(&record).unwrap();
                let segment = record.segment.unwrap_or(0);
                recorded.push((record.sale_id, segment, record.stock_before));
            }
        }
        let mut named: Vec<Named> = Vec::new();
        for answer in &answers {
            match (&answer.sold_unit, answer.sold) {
                (Some(unit), true) => {
                    assert_eq!(unit.sale, sale_name, "{setup}: the sale the reset named: {answer:?}");
                    named.push((unit.sale_id.clone(), unit.segment, unit.unit));
                }
                (None, false) => {}
                _ => panic!("{setup}: a sold answer names its unit, a sold-out one none: {answer:?}"),
            }
        }
        named.sort();
        recorded.sort();
        assert_eq!(named.len(), 6, "{setup}: the whole stock sold: {answers:?}");
        assert_eq!(named, recorded, "{setup}: each answer names its own record's unit");
        app.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_atomic_script_sells_and_records_like_the_locked_path() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Atomic, &sale, 5000).await;
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 1}"#)).await;
    let (_, sold) = get(format!("{}/stock/reduce", app.url)).await;
    let (_, sold_out) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(
        (sold["sold"].clone(), sold["stock_after"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(sold_out["sold"], false);

    let client = testkit::redis_client().await;
    let records: Vec<String> = redis::cmd("LRANGE")
        .arg(sale.keys().sales())
        .arg(0)
        .arg(-1)
        .query_async(&mut testkit::connection(&client).await)
        .await
        .unwrap();
    assert_eq!(records.len(), 1);
    let record: Value = serde_json::from_str(&records[0]).unwrap();
    assert_eq!(
        record["stock_before"], 1,
        "the script fills in the stock it read: {record}"
    );
    assert_eq!(record["port"], app.port);
}

#[tokio::test]
async fn reset_refuses_a_stock_out_of_bounds_and_a_body_that_is_not_json() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 5000).await;
    let (status, body) = post(format!("{}/stock/reset", app.url), Some(r#"{"stock": -5}"#)).await;
    assert_eq!(status, 400);
    assert_error_shape(&body, "bad_request");
    assert!(body["message"].as_str().unwrap().contains("-5"), "{body}");

    let (status, body) = post(
        format!("{}/stock/reset", app.url),
        Some(r#"{"stock": 9223372036854775807}"#),
    )
    .await;
    assert_eq!(status, 400, "the same bound as --initial-stock: {body}");
    assert!(body["message"].as_str().unwrap().contains("1000000000"), "{body}");

    let (status, body) = post(format!("{}/stock/reset", app.url), Some("three hundred")).await;
    assert_eq!(status, 400);
    assert!(
        body["message"].as_str().unwrap().contains(r#"{"stock": 300}"#),
        "{body}"
    );

    let (status, body) = post(format!("{}/stock/reset", app.url), None).await;
    assert_eq!(status, 200, "an empty JSON body means the configured initial stock");
    assert_eq!(body, json!({"stock": 300, "lucky": 0, "sales": 0, "initial": 300}));
}

#[tokio::test]
async fn reset_refuses_a_plain_form_post_as_another_web_page_would_send_it() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 5000).await;
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 7}"#)).await;
    let client = reqwest::Client::new();
    for content_type in [Some("application/x-www-form-urlencoded"), Some("text/plain"), None] {
        let mut request = client.post(format!("{}/stock/reset", app.url)).body("stock=300");
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 415, "{content_type:?}");
        assert_error_shape(&response.json().await.unwrap(), "unsupported_media_type");
    }
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!(stock["stock"], 7, "a refused reset changed the stock");
}

#[tokio::test]
async fn a_buyer_who_cannot_get_the_lock_in_time_gets_503_and_nothing_is_sold() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 200).await;
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 10}"#)).await;
    // Another holder sits on the stock lock.
    sale.hold_the_stock_lock(10_000).await;
    let client = testkit::redis_client().await;

    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 503);
    assert_error_shape(&body, "lock_timeout");
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!((stock["stock"].clone(), stock["lucky"].clone()), (json!(10), json!(0)));
    testkit::delete_key(&client, &sale.keys().lock_of(Segment::WHOLE)).await;
}

#[tokio::test]
async fn health_names_the_strategy_and_its_fencing_and_readiness_checks_redis() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Local, &sale, 5000).await;
    let (status, health) = get(format!("{}/healthz", app.url)).await;
    assert_eq!(status, 200);
    assert_eq!(health["strategy"], "local");
    assert_eq!(
        health["fencing"], "no_tokens",
        "a baseline says it runs unfenced: {health}"
    );
    let (status, ready) = get(format!("{}/readyz", app.url)).await;
    assert_eq!((status, ready["status"].clone()), (200, json!("ready")));

    let fenced = testkit::instance(Strategy::Redis, &sale, 5000).await;
    let health = get(format!("{}/healthz", fenced.url)).await.1;
    assert_eq!(health["fencing"], "on");
    assert_eq!(health["hand_over"], true, "the Redis lock hands over: {health}");
}

#[tokio::test]
async fn health_says_a_lock_that_cannot_hand_over_does_not_whatever_the_flag() {
    // `--hand-over` is on by default, but a Redis lock that waits for replicas cannot
    // grant the next local buyer in its release: only an acquire waits for them.
    let app = testkit::instance_with(Strategy::Redis, &testkit::TestSale::new(), |config| {
        config.redis.lock_redis_wait_replicas = 1
    })
    .await;
    let (_, health) = get(format!("{}/healthz", app.url)).await;
    assert_eq!(health["hand_over"], false, "{health}");
}

#[tokio::test]
async fn every_error_is_the_same_json_shape_even_those_axum_makes() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 5000).await;
    let client = reqwest::Client::new();

    let response = client.get(format!("{}/no/such/route", app.url)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert_error_shape(&response.json().await.unwrap(), "not_found");

    let response = client.delete(format!("{}/stock", app.url)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
    assert!(response.headers().contains_key("allow"));
    assert_error_shape(&response.json().await.unwrap(), "method_not_allowed");

    let ten_megabytes = vec![b' '; 10 * 1024 * 1024];
    let response = client
        .post(format!("{}/stock/reset", app.url))
        .header("content-type", "application/json")
        .body(ten_megabytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    assert_error_shape(&response.json().await.unwrap(), "payload_too_large");
}

#[tokio::test]
async fn a_stock_that_is_not_a_number_is_named_and_nothing_is_sold() {
    for strategy in [Strategy::Redis, Strategy::Atomic] {
        let sale = testkit::TestSale::new();
        let app = testkit::instance(strategy, &sale, 5000).await;
        post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 5}"#)).await;
        redis_set(&sale.keys().stock(), "abc").await;
        let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
        assert_eq!(status, 500, "{strategy}: {body}");
        assert_error_shape(&body, "stock_corrupt");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{}`", sale.keys().stock())) && message.contains("abc"),
            "{strategy}: {message}"
        );
        assert!(
            !message.contains("make services"),
            "this is not a server that is down: {message}"
        );
        let client = testkit::redis_client().await;
        let lucky: i64 = redis::cmd("GET")
            .arg(sale.keys().lucky())
            .query_async(&mut testkit::connection(&client).await)
            .await
            .unwrap();
        assert_eq!(lucky, 0, "{strategy} sold something");
    }
}

/// A sale under a prefix, with every option that adds keys (segments, one unit per
/// buyer, orders, the sold-out flag, the grant log, the refusals count), on a Redis of
/// its own: every key in it must start with the prefix, the lock's too, and the keys are
/// exactly the 22 the sale is known to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_a_sale_under_a_prefix_writes_starts_with_the_prefix() {
    let redis = testkit::PrivateRedis::start();
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = redis.url();
    config.key_prefix = "shop-7:".to_owned();
    config.stock_segments = 2;
    config.one_per_buyer = true;
    config.orders = true;
    config.sold_out_flag = true;
    config.mysql_url = testkit::mysql_url();
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 3}"#)).await;
    for buyer in ["ann", "ann", "bob", "cy", "dee", "eve"] {
        get(format!("{}/stock/reduce?buyer={buyer}", app.url)).await;
    }
    let (status, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!((status, stock["lucky"].clone()), (200, json!(3)), "{stock}");
    app.stop().await.unwrap();

    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut testkit::connection(&redis.client()).await)
        .await
        .unwrap();
    let strays: Vec<&String> = keys.iter().filter(|key| !key.starts_with("shop-7:")).collect();
    assert!(strays.is_empty(), "keys outside the prefix: {strays:?} (all: {keys:?})");
    // Every key this sale leaves, exactly: a key added later must be named here.
    keys.sort();
    let expected: Vec<String> = [
        "lock:stock:0:fence",
        "lock:stock:0:fence:epoch",
        "lock:stock:0:fence:epochs",
        "lock:stock:1:fence",
        "lock:stock:1:fence:epoch",
        "lock:stock:1:fence:epochs",
        "lucky",
        "sales",
        "stock",
        "stock:buyers",
        "stock:fence:0",
        "stock:fence:1",
        "stock:generation",
        "stock:grants",
        "stock:initial",
        "stock:orders",
        "stock:outcomes",
        "stock:refusals",
        "stock:sale",
        "stock:segment:0",
        "stock:segment:1",
        "stock:segments",
    ]
    .iter()
    .map(|key| format!("shop-7:{key}"))
    .collect();
    assert_eq!(keys, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_goes_down_buyers_get_a_clear_503_and_service_resumes_when_it_is_back() {
    let redis = testkit::PrivateRedis::start();
    let port = redis.port;
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = redis.url();
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 5}"#)).await;
    assert_eq!(get(format!("{}/stock/reduce", app.url)).await.1["sold"], true);

    drop(redis);
    let started = Instant::now();
    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 503, "{body}");
    let code = body["error"].as_str().unwrap();
    assert!(
        code == "lock_backend_unavailable" || code == "stock_backend_unavailable",
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().contains("make services"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the failure took {:?}",
        started.elapsed()
    );
    let (status, body) = get(format!("{}/readyz", app.url)).await;
    assert_eq!(status, 503);
    assert_error_shape(&body, "not_ready");

    // The same port again, empty: reset and sell once more.
    let _redis = testkit::PrivateRedis::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 1}"#)).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the service did not reconnect to Redis");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(format!("{}/stock/reduce", app.url)).await.1["sold"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_who_hangs_up_mid_sale_does_not_hold_up_the_next_buyer_for_a_lease() {
    let redis = testkit::PrivateRedis::start();
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = redis.url();
    config.lock_ttl_ms = 6000;
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 5}"#)).await;

    // The first buyer's sale is stuck in a frozen Redis for 1 s; the buyer hangs up
    // after 300 ms, and axum drops its handler. Redis then runs the lock's SET NX.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    redis.freeze();
    let hung_up = impatient.get(format!("{}/stock/reduce", app.url)).send().await;
    assert!(hung_up.is_err(), "the impatient buyer should have hung up");
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.thaw();

    let started = Instant::now();
    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!((status, body["sold"].clone()), (200, json!(true)), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the next buyer waited {:?}: a stranded lock",
        started.elapsed()
    );
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!(
        (stock["stock"].clone(), stock["lucky"].clone()),
        (json!(3), json!(2)),
        "the hung-up sale still completes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_whose_write_ran_but_whose_answer_was_lost_is_answered_as_sold() {
    let redis = testkit::PrivateRedis::start();
    let proxy = testkit::nemesis::Proxy::start(redis.port).await;
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = proxy.url();
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 5}"#)).await;
    // A first sale loads the scripts, so the next write is one EVALSHA that runs.
    assert_eq!(get(format!("{}/stock/reduce", app.url)).await.1["sold"], true);

    // Only the write carries the `sales` key: it runs, and its answer comes 2.5 s late,
    // after the service's 2 s response timeout.
    proxy.hold_the_answer_to(b"$5\r\nsales\r\n", Duration::from_millis(2500));
    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!(stock["lucky"], 2, "the write ran");
    assert_eq!(
        (status, body["sold"].clone()),
        (200, json!(true)),
        "the buyer of a sold unit heard: {body}"
    );
    assert_eq!(body["stock_after"], 3, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_are_told_the_truth_when_redis_freezes_mid_sale() {
    let redis = testkit::PrivateRedis::start();
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = redis.url();
    config.lock_ttl_ms = 8000; // the lease outlives the freezes; the point here is the answers
    config.acquire_timeout_ms = 30_000;
    // Every buyer's sale in flight when Redis freezes, not one: with the local queue, a
    // freeze catches a single sale, often in a step that is retried, and nobody is refused.
    config.local_queue = false;
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 100000}"#)).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut buyers = Vec::new();
    for _ in 0..32 {
        let (url, stop) = (format!("{}/stock/reduce", app.url), stop.clone());
        buyers.push(tokio::spawn(async move {
            let (mut sold, mut unknown, mut refused) = (0, 0, 0);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let response = reqwest::get(&url).await.unwrap();
                match response.status().as_u16() {
                    200 => sold += 1,
                    504 => unknown += 1,
                    _ => refused += 1,
                }
            }
            (sold, unknown, refused)
        }));
    }
    // Freeze Redis longer than its response timeout (2 s), twice, while the sale runs.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        redis.freeze();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        redis.thaw();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut sold, mut unknown, mut refused) = (0, 0, 0);
    for buyer in buyers {
        let (s, u, r) = buyer.await.unwrap();
        (sold, unknown, refused) = (sold + s, unknown + u, refused + r);
    }
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    let lucky = stock["lucky"].as_i64().unwrap();
    println!("told sold {sold}, unknown {unknown}, refused {refused}; Redis counts {lucky} lucky");
    assert!(refused > 0, "the freezes should have refused some buyers");
    assert!(lucky >= sold, "{sold} buyers were told sold, Redis counts {lucky}");
    assert!(
        lucky <= sold + unknown,
        "{} units were sold to buyers told \"nothing was sold\"",
        lucky - sold - unknown
    );
    assert_eq!(stock["sales"], stock["lucky"]);
    assert_eq!(stock["stock"].as_i64().unwrap() + lucky, 100000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_bound_are_shed_at_once_with_a_json_503() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.acquire_timeout_ms = 3_000;
        config.max_in_flight = 1;
    })
    .await;
    sale.hold_the_stock_lock(2_000).await;
    let waiting = tokio::spawn(reqwest::get(format!("{}/stock/reduce", app.url)));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let (status, body) = get(format!("{}/stock", app.url)).await;
    assert_eq!(status, 503, "{body}");
    assert_error_shape(&body, "overloaded");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "shedding took {:?}",
        started.elapsed()
    );
    assert!(!waiting.is_finished());
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_an_instance_waits_for_requests_in_flight_only_as_long_as_the_grace_period() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.acquire_timeout_ms = 30_000;
        config.shutdown_grace_ms = 300;
    })
    .await;
    sale.hold_the_stock_lock(20_000).await;
    let client = testkit::redis_client().await;
    let stuck = tokio::spawn(reqwest::get(format!("{}/stock/reduce", app.url)));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    app.stop().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stopping took {:?}",
        started.elapsed()
    );
    stuck.abort();
    testkit::delete_key(&client, &sale.keys().lock_of(Segment::WHOLE)).await;
}
