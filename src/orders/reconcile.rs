//! `seckill reconcile`: the orders in MySQL against the stock in Redis, after a failure.
//!
//! A shop runs it after every failover of the stock's Redis. Redis holds the stock, a
//! sale record per unit sold, and the orders streams; MySQL holds the orders once the
//! writers took them out of the streams ([`crate::orders`]). A failover can take back
//! sales whose orders already reached MySQL: the promoted replica never saw them, has
//! their units still, and sells them again. Then Redis agrees with itself (its stock and
//! its records add up), and MySQL too (one row per sale id). Only the two side by side
//! show what happened:
//!
//! 1. **Orders the stock does not know**: rows whose sale id no sale record in Redis
//!    carries. The stock forgot those sales, and their units went back on sale.
//! 2. **Units with two orders**: two rows of the sale for one unit (its segment and the
//!    stock its sale read, kept since migration 0007). Each is a unit sold twice.
//! 3. **Units sold beyond the stock**: rows beyond the initial stock.
//! 4. **Orders missing**: sale records with no row once the streams drained: a sale
//!    the buyer was told of, and nobody will ship.
//!
//! It first waits (up to `--wait-ms`) for the streams to drain: an order still in a
//! stream is on its way, not missing. It reads, and changes nothing: what to do about
//! a unit sold twice (refund, apologise, ship from elsewhere) is the shop's decision.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;

pub use crate::config::ReconcileArgs;

use crate::sale::keys::Keys;
use crate::sale::segments::Segments;
use crate::sale::stock::SaleRecord;
use crate::store::redis_master::{connect_checked, MasterConnection};

/// The sale in Redis and its orders in MySQL, side by side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// The sale's name (`stock:sale`), whose orders were read.
    pub sale: String,
    pub initial_stock: i64,
    /// Sale records in Redis: the units the stock says it sold.
    pub sold_in_redis: usize,
    /// Entries still in the orders streams when the wait ended.
    pub still_in_streams: usize,
    /// Rows of this sale in `seckill_orders`.
    pub orders: usize,
    /// Sale ids with a record in Redis and no row (see the module's docs, 4).
    pub missing: BTreeSet<String>,
    /// Sale ids with a row and no record in Redis (1).
    pub unknown_to_the_stock: BTreeSet<String>,
    /// Units with more than one row (2).
    pub units_with_two_orders: usize,
}

impl Reconciliation {
    /// Rows beyond the initial stock (3).
    pub fn beyond_the_stock(&self) -> usize {
        self.orders.saturating_sub(self.initial_stock.max(0) as usize)
    }

    /// Whether Redis and MySQL tell the same story.
    pub fn agrees(&self) -> bool {
        self.missing.is_empty()
            && self.unknown_to_the_stock.is_empty()
            && self.units_with_two_orders == 0
            && self.still_in_streams == 0
    }

    /// The report, one figure a line, each with what it means.
    pub fn render(&self) -> String {
        let lines = [
            format!("== seckill reconcile: sale {} ==", self.sale),
            format!("  initial stock                   {}", self.initial_stock),
            format!("  sold, as Redis records it       {}", self.sold_in_redis),
            format!("  orders in MySQL                 {}", self.orders),
            format!("  orders still in the streams     {}", self.still_in_streams),
            format!(
                "  orders missing                  {}   (a sale record with no order)",
                self.missing.len()
            ),
            format!(
                "  orders the stock does not know  {}   (an order whose sale the stock lost: its unit was sold again)",
                self.unknown_to_the_stock.len()
            ),
            format!(
                "  units with two orders           {}   (one unit of one segment, ordered twice)",
                self.units_with_two_orders
            ),
            format!(
                "  units sold beyond the stock     {}   (orders - initial stock)",
                self.beyond_the_stock()
            ),
            match self.agrees() {
                true => "verdict: AGREE: every unit sold has one order, and every order a unit".to_owned(),
                false => "verdict: DISAGREE: the lines above that are not 0 need a person".to_owned(),
            },
        ];
        lines.join("\n")
    }
}

/// Reads the sale the args name from Redis, waits for its orders, and compares.
pub async fn reconcile(args: &ReconcileArgs) -> anyhow::Result<Reconciliation> {
    let (address, mut redis) =
        connect_checked(&args.redis_url, "stock Redis", "--redis-url / SECKILL_REDIS_URL").await?;
    let keys = Keys::with_prefix(&args.key_prefix).on_cluster(address.is_cluster());
    // What a Redis that stopped answering midway is told to check.
    let unanswered = |what: &str| {
        let cluster = match address.is_cluster() {
            true => ", and every node of the cluster says cluster_state:ok (`redis-cli -p PORT cluster info`)",
            false => "",
        };
        format!(
            "{what} from the stock's Redis at {}: check that it is up{cluster}, then run seckill reconcile again",
            args.redis_url
        )
    };
    let (sale, initial, count): (Option<String>, Option<i64>, Option<u32>) = redis::pipe()
        .get(keys.sale_name())
        .get(keys.initial_stock())
        .get(keys.segment_count())
        .query_async(&mut redis)
        .await
        .with_context(|| unanswered("reading the sale"))?;
    let sale = sale.with_context(|| {
        format!(
            "Redis at {} holds no sale under the prefix {:?}: reset one (POST /stock/reset), or give the prefix \
             its instances sell under (--key-prefix)",
            args.redis_url, args.key_prefix
        )
    })?;
    let segments = Segments::as_stored(count);
    let groups = keys.groups(segments);
    let still_in_streams = wait_for_the_streams(&mut redis, &keys, &groups, Duration::from_millis(args.wait_ms))
        .await
        .with_context(|| unanswered("reading the orders streams"))?;
    let mut records = Vec::new();
    for group in &groups {
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(keys.sales_of(*group))
            .arg(0)
            .arg(-1)
            .query_async(&mut redis)
            .await
            .with_context(|| unanswered("reading the sale records"))?;
        records.extend(
            raw.iter()
                .filter_map(|line| serde_json::from_str::<SaleRecord>(line).ok()),
        );
    }
    let mysql = crate::store::mysql::connect_checked(&args.mysql_url, 1).await?;
    let rows: Vec<(String, Option<i32>, Option<i64>)> =
        sqlx::query_as("SELECT sale_id, segment, stock_before FROM seckill_orders WHERE sale = ?")
            .bind(&sale)
            .fetch_all(&mysql)
            .await
            .context("reading the orders from MySQL")?;
    Ok(compare(sale, initial.unwrap_or(0), &records, &rows, still_in_streams))
}

/// The comparison itself, on what was read.
pub fn compare(
    sale: String,
    initial_stock: i64,
    records: &[SaleRecord],
    rows: &[(String, Option<i32>, Option<i64>)],
    still_in_streams: usize,
) -> Reconciliation {
    let recorded: BTreeSet<&str> = records.iter().map(|record| record.sale_id.as_str()).collect();
    let ordered: BTreeSet<&str> = rows.iter().map(|(sale_id, _, _)| sale_id.as_str()).collect();
    let mut per_unit: BTreeMap<(Option<i32>, i64), usize> = BTreeMap::new();
    for (_, segment, stock_before) in rows {
        if let Some(stock_before) = stock_before {
            *per_unit.entry((*segment, *stock_before)).or_default() += 1;
        }
    }
    Reconciliation {
        sale,
        initial_stock,
        sold_in_redis: records.len(),
        still_in_streams,
        orders: rows.len(),
        missing: recorded.difference(&ordered).map(|id| id.to_string()).collect(),
        unknown_to_the_stock: ordered.difference(&recorded).map(|id| id.to_string()).collect(),
        units_with_two_orders: per_unit.values().filter(|&&orders| orders > 1).count(),
    }
}

/// Waits until every orders stream is empty (the writers delete what they wrote), or
/// `patience` passed; answers the entries left.
async fn wait_for_the_streams(
    redis: &mut MasterConnection,
    keys: &Keys,
    groups: &[crate::sale::segments::Segment],
    patience: Duration,
) -> anyhow::Result<usize> {
    let started = Instant::now();
    loop {
        let mut left = 0;
        for group in groups {
            let entries: usize = redis::cmd("XLEN")
                .arg(keys.orders_of(*group))
                .query_async(redis)
                .await?;
            left += entries;
        }
        if left == 0 || started.elapsed() >= patience {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sale_id: &str, stock_before: i64) -> SaleRecord {
        serde_json::from_value(serde_json::json!({
            "sale_id": sale_id, "instance": "i", "port": 1, "strategy": "redis",
            "stock_before": stock_before, "lock_wait_ms": 0.0, "locked_at_ms": 0, "sold_at_ms": 0,
        }))
        .unwrap()
    }

    fn row(sale_id: &str, stock_before: i64) -> (String, Option<i32>, Option<i64>) {
        (sale_id.to_owned(), None, Some(stock_before))
    }

    #[test]
    fn a_sale_whose_every_unit_has_one_order_agrees() {
        let records = [record("a", 2), record("b", 1)];
        let found = compare("s".into(), 2, &records, &[row("a", 2), row("b", 1)], 0);
        assert!(found.agrees(), "{}", found.render());
        assert_eq!(found.beyond_the_stock(), 0);
    }

    #[test]
    fn a_failover_that_lost_a_sale_shows_an_order_the_stock_does_not_know_and_a_unit_ordered_twice() {
        // "a" sold unit 2 on the old master; the new one never saw it and sold unit 2 to "c".
        let records = [record("c", 2), record("b", 1)];
        let rows = [row("a", 2), row("b", 1), row("c", 2)];
        let found = compare("s".into(), 2, &records, &rows, 0);
        assert!(!found.agrees());
        assert_eq!(found.unknown_to_the_stock, BTreeSet::from(["a".to_owned()]));
        assert_eq!((found.units_with_two_orders, found.beyond_the_stock()), (1, 1));
        assert!(found.missing.is_empty());
    }

    #[test]
    fn a_record_without_an_order_is_missing_once_the_streams_drained() {
        let found = compare("s".into(), 2, &[record("a", 2)], &[], 0);
        assert_eq!(found.missing, BTreeSet::from(["a".to_owned()]));
        let waiting = compare("s".into(), 2, &[record("a", 2)], &[], 1);
        assert!(!waiting.agrees(), "an order still in a stream is not written yet");
    }
}
