//! Step 0 of a sale (`src/sale.rs`): the buyers of one instance line up in process, and
//! only the head of the queue asks the distributed lock. Seen from the backend: at most
//! one acquire attempt of an instance is ever in flight, where without the local queue the
//! crowd fills the semaphore in front of MySQL. Its Redis database is in
//! `DATABASES` in tests/common/test_redis.rs.

mod common;

use seckill::strategy::Strategy;

const DB: u8 = 61;
const BUYERS: usize = 60;

/// The most acquire attempts one instance had at MySQL at once while `BUYERS` bought.
async fn peak_attempts_at_mysql(local_queue: bool) -> u64 {
    let instance = common::instance_with(Strategy::MysqlVersion, DB, |config| {
        config.local_queue = local_queue;
        config.acquire_timeout_ms = 30_000;
    })
    .await;
    common::reset_stock(&instance.url, 1_000).await;
    let http = reqwest::Client::new();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|_| {
            let (http, url) = (http.clone(), format!("{}/stock/reduce", instance.url));
            tokio::spawn(async move {
                http.get(url)
                    .send()
                    .await
                    .unwrap()
                    .json::<serde_json::Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    for buyer in buyers {
        let answer = buyer.await.unwrap();
        assert_eq!(answer["sold"], true, "{answer}");
    }
    let health = common::healthz(&instance.url).await;
    instance.stop().await.unwrap();
    health["lock_stats"]["permits"]["peak_in_flight"]
        .as_u64()
        .expect("a MySQL lock counts its attempts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_head_of_an_instances_line_asks_the_lock() {
    assert_eq!(
        peak_attempts_at_mysql(true).await,
        1,
        "with the local queue, one attempt at a time reaches MySQL"
    );
    let without = peak_attempts_at_mysql(false).await;
    assert!(
        without > 1,
        "without the local queue, the crowd reaches MySQL several at a time (peak {without})"
    );
}
