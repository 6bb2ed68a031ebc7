//! The HTTP surface, against a real Redis. Each test owns one Redis database,
//! because the stock keys have fixed names.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use seckill::lock::Strategy;

async fn get(url: String) -> (u16, Value) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn post(url: String, body: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(url);
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_owned());
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn reduce_sells_one_unit_per_request_until_sold_out() {
    let app = common::instance(Strategy::Redis, 1, 5000).await;
    let (status, _) = post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 2}"#)).await;
    assert_eq!(status, 200);

    let (status, first) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 200);
    assert_eq!(first["sold"], true);
    assert_eq!(first["stock_after"], 1);
    assert_eq!(first["strategy"], "redis");
    assert_eq!(first["port"], app.port);
    assert_eq!(first["message"], format!("{} reduce stock end!", app.port));
    assert!(first["fencing_token"].as_u64().is_some(), "redis grants carry a fencing token: {first}");

    let (status, second) = post(format!("{}/stock/reduce", app.url), None).await;
    assert_eq!((status, second["sold"].clone(), second["stock_after"].clone()), (200, json!(true), json!(0)));

    let (status, third) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 200, "sold out is an answer, not an error");
    assert_eq!(third["sold"], false);

    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!(stock, json!({"stock": 0, "lucky": 2, "sales": 2, "initial": 2}));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_atomic_script_sells_and_records_like_the_locked_path() {
    let app = common::instance(Strategy::Atomic, 2, 5000).await;
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 1}"#)).await;
    let (_, sold) = get(format!("{}/stock/reduce", app.url)).await;
    let (_, sold_out) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!((sold["sold"].clone(), sold["stock_after"].clone()), (json!(true), json!(0)));
    assert_eq!(sold_out["sold"], false);

    let client = common::redis_client(2).await;
    let records: Vec<String> = redis::cmd("LRANGE")
        .arg("sales")
        .arg(0)
        .arg(-1)
        .query_async(&mut common::connection(&client).await)
        .await
        .unwrap();
    assert_eq!(records.len(), 1);
    let record: Value = serde_json::from_str(&records[0]).unwrap();
    assert_eq!(record["stock_before"], 1, "the script fills in the stock it read: {record}");
    assert_eq!(record["port"], app.port);
}

#[tokio::test]
async fn reset_refuses_a_negative_stock_and_a_body_that_is_not_json() {
    let app = common::instance(Strategy::Redis, 3, 5000).await;
    let (status, body) = post(format!("{}/stock/reset", app.url), Some(r#"{"stock": -5}"#)).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "bad_request");
    assert!(body["message"].as_str().unwrap().contains("-5"), "{body}");

    let (status, body) = post(format!("{}/stock/reset", app.url), Some("three hundred")).await;
    assert_eq!(status, 400);
    assert!(body["message"].as_str().unwrap().contains(r#"{"stock": 300}"#), "{body}");

    let (status, body) = post(format!("{}/stock/reset", app.url), None).await;
    assert_eq!(status, 200, "no body means the configured initial stock");
    assert_eq!(body, json!({"stock": 300, "lucky": 0, "sales": 0, "initial": 300}));
}

#[tokio::test]
async fn a_buyer_who_cannot_get_the_lock_in_time_gets_503_and_nothing_is_sold() {
    let app = common::instance(Strategy::Redis, 4, 200).await;
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 10}"#)).await;
    // Another holder sits on the stock lock.
    let client = common::redis_client(4).await;
    let _: () = redis::cmd("SET")
        .arg("lock:stock")
        .arg("someone-else")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut common::connection(&client).await)
        .await
        .unwrap();

    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"], "lock_timeout");
    let (_, stock) = get(format!("{}/stock", app.url)).await;
    assert_eq!((stock["stock"].clone(), stock["lucky"].clone()), (json!(10), json!(0)));
    let _: () = redis::cmd("DEL").arg("lock:stock").query_async(&mut common::connection(&client).await).await.unwrap();
}

#[tokio::test]
async fn health_names_the_strategy_and_readiness_checks_redis() {
    let app = common::instance(Strategy::Local, 5, 5000).await;
    let (status, health) = get(format!("{}/healthz", app.url)).await;
    assert_eq!(status, 200);
    assert_eq!(health["strategy"], "local");
    let (status, ready) = get(format!("{}/readyz", app.url)).await;
    assert_eq!((status, ready["status"].clone()), (200, json!("ready")));
}

/// A private redis-server on its own port, so this test can kill it.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for this test: `make test` installs it");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        PrivateRedis { child, port }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn when_redis_goes_down_buyers_get_a_clear_503_and_service_resumes_when_it_is_back() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let redis = PrivateRedis::start(port);
    let mut config = seckill::config::Config::defaults();
    config.lock = Strategy::Redis;
    config.redis_url = format!("redis://127.0.0.1:{}", redis.port);
    let app = seckill::server::Instance::start(config).await.expect("instance starts");
    post(format!("{}/stock/reset", app.url), Some(r#"{"stock": 5}"#)).await;
    assert_eq!(get(format!("{}/stock/reduce", app.url)).await.1["sold"], true);

    drop(redis);
    let started = Instant::now();
    let (status, body) = get(format!("{}/stock/reduce", app.url)).await;
    assert_eq!(status, 503, "{body}");
    let code = body["error"].as_str().unwrap();
    assert!(code == "lock_backend_unavailable" || code == "stock_backend_unavailable", "{body}");
    assert!(body["message"].as_str().unwrap().contains("make services"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(10), "the failure took {:?}", started.elapsed());
    assert_eq!(get(format!("{}/readyz", app.url)).await.0, 503);

    // The same port again, empty: reset and sell once more.
    let _redis = PrivateRedis::start(port);
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
