//! The orders check (`--orders true`, [`seckill::orders`]): once the stream has drained,
//! every unit sold has exactly one order in MySQL, and every order a unit sold.
//!
//! 1. **Drained**: the consumer group has read every entry and has none pending
//!    (`XINFO GROUPS`: `lag` and `pending` both 0), waited for up to [`DRAIN_TIMEOUT`].
//! 2. **Appended once**: the stream holds as many entries as `lucky` (the script that
//!    takes a unit appends one entry, in the same step).
//! 3. **Written once**: the orders of this sale (by its name, `stock:sale`) are the sale
//!    records, one for one, by sale id.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use seckill::orders::{ORDERS_GROUP, ORDERS_STREAM};
use seckill::stock::{SaleRecord, SALE_NAME_KEY};

/// How long the checker waits for the consumers to write every order.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at the group.
const POLL: Duration = Duration::from_millis(100);

/// The orders of one sale, once the stream drained (or the wait ran out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrdersState {
    /// Entries in the stream: one per unit sold.
    pub stream_entries: usize,
    /// Entries no consumer had read, and entries read but not acknowledged, when the
    /// wait ended: both 0 once drained.
    pub unread: usize,
    pub pending: usize,
    /// How long the orders took to drain after the crowd's last answer, in milliseconds.
    pub drained_after_ms: u64,
    /// The sale ids of this sale's rows in `seckill_orders`.
    #[serde(skip)]
    pub written: BTreeSet<String>,
    /// How many rows that is.
    pub rows: usize,
}

/// Waits until the orders of the sale in `redis_url` drained, then reads them from MySQL.
pub async fn read_orders(redis_url: &str, mysql_url: &str) -> anyhow::Result<OrdersState> {
    let client = redis::Client::open(redis_url).with_context(|| format!("`{redis_url}` is not a Redis URL"))?;
    let mut redis = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot reach Redis at {redis_url} to check the orders"))?;
    let started = Instant::now();
    let (mut unread, mut pending) = backlog(&mut redis).await?;
    while (unread, pending) != (0, 0) && started.elapsed() < DRAIN_TIMEOUT {
        tokio::time::sleep(POLL).await;
        (unread, pending) = backlog(&mut redis).await?;
    }
    let drained_after_ms = started.elapsed().as_millis() as u64;
    let (stream_entries, sale): (usize, Option<String>) = redis::pipe()
        .xlen(ORDERS_STREAM)
        .get(SALE_NAME_KEY)
        .query_async(&mut redis)
        .await?;
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
        stream_entries,
        unread,
        pending,
        drained_after_ms,
        rows: written.len(),
        written,
    })
}

/// The group's entries not yet read, and read but not acknowledged. A stream with no
/// group yet (no consumer has read it) counts every entry as unread.
async fn backlog(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<(usize, usize)> {
    let entries: usize = redis::cmd("XLEN").arg(ORDERS_STREAM).query_async(redis).await?;
    if entries == 0 {
        return Ok((0, 0));
    }
    let groups: redis::RedisResult<Vec<std::collections::HashMap<String, redis::Value>>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(ORDERS_STREAM)
        .query_async(redis)
        .await;
    let group = groups?.into_iter().find(
        |group| matches!(group.get("name"), Some(redis::Value::BulkString(name)) if name == ORDERS_GROUP.as_bytes()),
    );
    let Some(group) = group else {
        return Ok((entries, 0));
    };
    let number = |field: &str| match group.get(field) {
        Some(redis::Value::Int(n)) => usize::try_from(*n).unwrap_or(0),
        // `lag` is nil when Redis cannot tell (entries deleted): count every entry as unread.
        _ => entries,
    };
    Ok((number("lag"), number("pending")))
}

/// What is wrong with the orders: `(oversold, lost)` findings.
pub fn judge_orders(orders: &OrdersState, lucky: i64, records: &[SaleRecord]) -> (Vec<String>, Vec<String>) {
    let (mut oversold, mut lost) = (Vec::new(), Vec::new());
    if orders.unread + orders.pending > 0 {
        lost.push(format!(
            "the orders did not drain in {} s: {} entries unread and {} pending",
            DRAIN_TIMEOUT.as_secs(),
            orders.unread,
            orders.pending
        ));
    }
    let entries = orders.stream_entries as i64;
    if entries > lucky {
        oversold.push(format!(
            "{entries} orders appended to the stream for {lucky} units sold"
        ));
    } else if entries < lucky {
        lost.push(format!(
            "{entries} orders appended to the stream for {lucky} units sold"
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

    fn state(stream_entries: usize, written: &[&str], pending: usize) -> OrdersState {
        OrdersState {
            stream_entries,
            unread: 0,
            pending,
            drained_after_ms: 0,
            written: written.iter().map(|id| id.to_string()).collect(),
            rows: written.len(),
        }
    }

    #[test]
    fn the_orders_of_a_sale_are_its_sale_records_one_for_one() {
        let records = [record("a"), record("b")];
        assert_eq!(judge_orders(&state(2, &["a", "b"], 0), 2, &records), (vec![], vec![]));
        let (_, lost) = judge_orders(&state(2, &["a"], 0), 2, &records);
        assert_eq!(lost, ["1 units sold have no order in MySQL"]);
        let (oversold, _) = judge_orders(&state(2, &["a", "b", "c"], 0), 2, &records);
        assert_eq!(oversold, ["1 orders in MySQL are for no unit sold"]);
        let (oversold, _) = judge_orders(&state(3, &["a", "b"], 0), 2, &records);
        assert_eq!(oversold, ["3 orders appended to the stream for 2 units sold"]);
        let (_, lost) = judge_orders(&state(2, &["a", "b"], 1), 2, &records);
        assert!(lost[0].contains("did not drain"), "{lost:?}");
    }
}
