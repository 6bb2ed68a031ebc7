//! The orders check (`--orders true`, [`seckill::orders`]): once the stream has drained,
//! every unit sold has exactly one order in MySQL, and every order a unit sold.
//!
//! 1. **Drained**: the stream is empty. A writer deletes an entry once its row is in
//!    MySQL, so an entry left is an order not written yet (unread, or read and pending).
//!    The checker waits for that for up to [`DRAIN_TIMEOUT`].
//! 2. **Written once**: the orders of this sale (by its name, `stock:sale`) are the sale
//!    records, one for one, by sale id.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use seckill::orders::ORDERS_GROUP;
use seckill::stock::{SaleRecord, ORDERS_STREAM, SALE_NAME_KEY};

use super::crowd::Target;

/// How long the checker waits for the writers to write every order.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at the stream.
const POLL: Duration = Duration::from_millis(100);

/// The orders of one sale, once the stream drained (or the wait ran out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrdersState {
    /// Entries still in the stream when the wait ended (0 once drained), and how many of
    /// them a writer had read but not acknowledged.
    pub left_in_stream: usize,
    pub pending: usize,
    /// How long the checker waited for the stream to drain, in milliseconds.
    pub waited_ms: u64,
    /// The sale ids of this sale's rows in `seckill_orders`.
    #[serde(skip)]
    pub written: BTreeSet<String>,
    /// How many rows that is.
    pub rows: usize,
}

/// With `--orders` (`target.orders`), the orders of the sale in `redis_url`, once drained.
pub async fn read_if_on(target: &Target, redis_url: &str, mysql_url: &str) -> anyhow::Result<Option<OrdersState>> {
    if !target.orders {
        return Ok(None);
    }
    Ok(Some(read_orders(redis_url, mysql_url).await?))
}

/// Waits until the orders stream in `redis_url` drained, then reads this sale's orders from MySQL.
pub async fn read_orders(redis_url: &str, mysql_url: &str) -> anyhow::Result<OrdersState> {
    let client = redis::Client::open(redis_url).with_context(|| format!("`{redis_url}` is not a Redis URL"))?;
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot reach Redis at {redis_url} to check the orders"))?;
    let started = Instant::now();
    let (mut left_in_stream, mut pending) = backlog(&mut redis).await?;
    while left_in_stream > 0 && started.elapsed() < DRAIN_TIMEOUT {
        tokio::time::sleep(POLL).await;
        (left_in_stream, pending) = backlog(&mut redis).await?;
    }
    let waited_ms = started.elapsed().as_millis() as u64;
    let sale: Option<String> = redis::cmd("GET").arg(SALE_NAME_KEY).query_async(&mut redis).await?;
    let mut mysql = tokio::time::timeout(Duration::from_secs(5), sqlx::MySqlConnection::connect(mysql_url))
        .await
        .context("timed out")
        .and_then(|connected| connected.context("cannot connect"))
        .with_context(|| format!("cannot reach MySQL at {mysql_url} to check the orders; fix --mysql-url"))?;
    let rows: Vec<(String,)> = sqlx::query_as("SELECT sale_id FROM seckill_orders WHERE sale = ?")
        .bind(sale.unwrap_or_default())
        .fetch_all(&mut mysql)
        .await
        .context("reading the orders from MySQL")?;
    mysql.close().await.ok();
    let written: BTreeSet<String> = rows.into_iter().map(|(sale_id,)| sale_id).collect();
    Ok(OrdersState {
        left_in_stream,
        pending,
        waited_ms,
        rows: written.len(),
        written,
    })
}

/// The entries in the stream, and how many of them are pending in the group (0 before
/// any writer created the group).
async fn backlog(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<(usize, usize)> {
    let entries: usize = redis::cmd("XLEN").arg(ORDERS_STREAM).query_async(redis).await?;
    let summary: redis::RedisResult<redis::Value> = redis::cmd("XPENDING")
        .arg(ORDERS_STREAM)
        .arg(ORDERS_GROUP)
        .query_async(redis)
        .await;
    let pending = match summary {
        Ok(redis::Value::Array(summary)) => match summary.first() {
            Some(redis::Value::Int(count)) => usize::try_from(*count).unwrap_or(0),
            _ => 0,
        },
        Ok(_) => 0,
        Err(error) if error.code() == Some("NOGROUP") => 0,
        Err(error) => return Err(error.into()),
    };
    Ok((entries, pending))
}

/// What is wrong with the orders: `(oversold, lost)` findings.
pub fn judge_orders(orders: &OrdersState, records: &[SaleRecord]) -> (Vec<String>, Vec<String>) {
    let (mut oversold, mut lost) = (Vec::new(), Vec::new());
    if orders.left_in_stream > 0 {
        lost.push(format!(
            "the orders did not drain in {} s: {} entries left in the stream, {} of them pending",
            DRAIN_TIMEOUT.as_secs(),
            orders.left_in_stream,
            orders.pending
        ));
    }
    let sold: BTreeSet<&str> = records.iter().map(|record| record.sale_id.as_str()).collect();
    let missing = sold
        .iter()
        .filter(|sale_id| !orders.written.contains(**sale_id))
        .count();
    let unsold = orders
        .written
        .iter()
        .filter(|sale_id| !sold.contains(sale_id.as_str()))
        .count();
    if missing > 0 {
        lost.push(format!("{missing} units sold have no order in MySQL"));
    }
    if unsold > 0 {
        oversold.push(format!("{unsold} orders in MySQL are for no unit sold"));
    }
    (oversold, lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sale_id: &str) -> SaleRecord {
        serde_json::from_value(serde_json::json!({
            "sale_id": sale_id, "instance": "i", "port": 1, "strategy": "redis",
            "lock_wait_ms": 0.0, "locked_at_ms": 0, "sold_at_ms": 0,
        }))
        .unwrap()
    }

    fn state(written: &[&str], left_in_stream: usize) -> OrdersState {
        OrdersState {
            left_in_stream,
            pending: left_in_stream,
            waited_ms: 0,
            written: written.iter().map(|id| id.to_string()).collect(),
            rows: written.len(),
        }
    }

    #[test]
    fn the_orders_of_a_sale_are_its_sale_records_one_for_one_once_drained() {
        let records = [record("a"), record("b")];
        assert_eq!(judge_orders(&state(&["a", "b"], 0), &records), (vec![], vec![]));
        let (_, lost) = judge_orders(&state(&["a"], 0), &records);
        assert_eq!(lost, ["1 units sold have no order in MySQL"]);
        let (oversold, _) = judge_orders(&state(&["a", "b", "c"], 0), &records);
        assert_eq!(oversold, ["1 orders in MySQL are for no unit sold"]);
        let (_, lost) = judge_orders(&state(&["a", "b"], 1), &records);
        assert!(lost[0].contains("did not drain"), "{lost:?}");
    }
}
