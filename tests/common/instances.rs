//! Instances of the service on free ports, selling from a test Redis database.

use super::test_redis::{redis_client, redis_url};

/// The service's defaults, selling from test Redis database `db`.
pub fn config(strategy: seckill::strategy::Strategy, db: u8) -> seckill::config::Config {
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    config.redis_url = redis_url(db);
    config
}

/// An instance on a free port, selling from test Redis database `db`.
pub async fn instance(
    strategy: seckill::strategy::Strategy,
    db: u8,
    acquire_timeout_ms: u64,
) -> seckill::server::Instance {
    instance_with(strategy, db, |config| config.acquire_timeout_ms = acquire_timeout_ms).await
}

/// The same, with the settings `adjust` changes.
pub async fn instance_with(
    strategy: seckill::strategy::Strategy,
    db: u8,
    adjust: impl FnOnce(&mut seckill::config::Config),
) -> seckill::server::Instance {
    redis_client(db).await; // fail loudly if the test Redis is missing or not ours
    let mut config = config(strategy, db);
    adjust(&mut config);
    seckill::server::Instance::start(config).await.expect("instance starts")
}

/// `POST /stock/reset` to `stock` on a running instance, which must answer 200.
pub async fn reset_stock(base_url: &str, stock: i64) {
    let answer = reqwest::Client::new()
        .post(format!("{base_url}/stock/reset"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"stock": {stock}}}"#))
        .send()
        .await
        .expect("the instance answers");
    assert_eq!(
        answer.status().as_u16(),
        200,
        "reset to {stock}: {}",
        answer.text().await.unwrap_or_default()
    );
}

/// `GET /healthz` of a running instance, as JSON.
pub async fn healthz(base_url: &str) -> serde_json::Value {
    reqwest::get(format!("{base_url}/healthz"))
        .await
        .expect("the instance answers")
        .json()
        .await
        .expect("/healthz answers JSON")
}
