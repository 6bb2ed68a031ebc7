//! Instances of the service on free ports, each selling a test's own sale.

use super::test_redis::{redis_client, redis_url, TestSale};
use crate::server_control::Signal;

/// The service's defaults, selling `sale` from the test Redis.
pub fn config(strategy: seckill::strategy::Strategy, sale: &TestSale) -> seckill::config::Config {
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    config.redis_url = redis_url();
    config.key_prefix = sale.prefix().to_owned();
    config
}

/// An instance on a free port, selling `sale` from the test Redis.
pub async fn instance(
    strategy: seckill::strategy::Strategy,
    sale: &TestSale,
    acquire_timeout_ms: u64,
) -> seckill::server::Instance {
    instance_with(strategy, sale, |config| config.acquire_timeout_ms = acquire_timeout_ms).await
}

/// The same, with the settings `adjust` changes.
pub async fn instance_with(
    strategy: seckill::strategy::Strategy,
    sale: &TestSale,
    adjust: impl FnOnce(&mut seckill::config::Config),
) -> seckill::server::Instance {
    redis_client().await; // fail loudly if the test Redis is missing or not ours
    let mut config = config(strategy, sale);
    adjust(&mut config);
    seckill::server::Instance::start(config).await.expect("instance starts")
}

/// Why an instance of `strategy`, with the settings `adjust` changes, refuses to start
/// (the error with its causes); panics if it starts.
pub async fn start_refused(
    strategy: seckill::strategy::Strategy,
    sale: &TestSale,
    adjust: impl FnOnce(&mut seckill::config::Config),
) -> String {
    let mut config = config(strategy, sale);
    adjust(&mut config);
    match seckill::server::Instance::start(config).await {
        Ok(_) => panic!("`{strategy}` started with settings it should refuse"),
        Err(error) => format!("{error:#}"),
    }
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

/// `GET /healthz` of a running instance.
pub async fn healthz(base_url: &str) -> seckill::api::Health {
    get_json(base_url, "/healthz").await
}

/// `GET /stock` of a running instance: stock, lucky, sales, initial.
pub async fn stock(base_url: &str) -> seckill::api::StockSnapshot {
    get_json(base_url, "/stock").await
}

async fn get_json<T: serde::de::DeserializeOwned>(base_url: &str, path: &str) -> T {
    reqwest::get(format!("{base_url}{path}"))
        .await
        .expect("the instance answers")
        .json()
        .await
        .unwrap_or_else(|error| panic!("{path} answers JSON: {error}"))
}

/// `seckill serve` as a process of its own, for tests that stop it, kill it, or move its
/// clock; killed (even if stopped) when dropped.
pub struct ServeProcess {
    child: std::process::Child,
    pub port: u16,
}

impl ServeProcess {
    /// `binary serve --port <a free port> ARGS...` with `envs` added, once its port answers.
    /// `binary` is `env!("CARGO_BIN_EXE_seckill")`, a name only the root crate's tests have.
    pub fn start<'a>(binary: &str, args: &[&str], envs: impl IntoIterator<Item = (&'a str, String)>) -> Self {
        let port = super::free_port();
        let child = std::process::Command::new(binary)
            .args(["serve", "--port", &port.to_string()])
            .args(args)
            .envs(envs)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the seckill binary runs");
        super::wait_for_port(port, std::time::Duration::from_secs(20), "seckill");
        ServeProcess { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Sends `signal` to the process (a pause is [`Signal::Stop`], then [`Signal::Cont`]).
    pub fn signal(&self, signal: Signal) {
        crate::server_control::send(self.child.id(), signal).expect("the seckill process takes the signal");
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        super::kill_even_if_frozen(&mut self.child);
    }
}

/// The records of `sale`, in the order they were written.
pub async fn sale_records(sale: &TestSale) -> Vec<seckill::sale::stock::SaleRecord> {
    use redis::AsyncCommands;
    let mut redis = super::connection(&super::redis_client().await).await;
    let lines: Vec<String> = redis.lrange(sale.keys().sales(), 0, -1).await.unwrap();
    lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("a sale record"))
        .collect()
}

/// A counter or a histogram's count from the instance's `/metrics`.
pub async fn metric(base_url: &str, name: &str) -> f64 {
    let page = reqwest::get(format!("{base_url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{page}"))
}

/// One `GET /stock/reduce`, told as a word: `sold`, `sold out`, the status and error
/// code (`503 lock_lost`), or `no answer: ...`.
pub async fn buy(http: &reqwest::Client, base_url: &str) -> String {
    answer_to(http, &format!("{base_url}/stock/reduce")).await
}

/// [`buy`] as `buyer` (`?buyer=`).
pub async fn buy_as(http: &reqwest::Client, base_url: &str, buyer: &str) -> String {
    answer_to(http, &format!("{base_url}/stock/reduce?buyer={buyer}")).await
}

async fn answer_to(http: &reqwest::Client, url: &str) -> String {
    match http.get(url).send().await {
        Err(error) => format!("no answer: {error}"),
        Ok(response) => {
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            match (status, &body["sold"]) {
                (200, serde_json::Value::Bool(true)) => "sold".to_owned(),
                (200, _) => "sold out".to_owned(),
                _ => format!("{status} {}", body["error"].as_str().unwrap_or("?")),
            }
        }
    }
}
