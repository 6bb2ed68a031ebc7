//! A new sale: a reset puts the stock on sale and forgets every earlier sale (on one
//! Redis in one transaction, on a cluster one per slot), and a snapshot reads the counts
//! back.

use crate::api::StockSnapshot;
use crate::sale::keys::Keys;
use crate::sale::segments::{Segment, Segments};

use super::answers::StockError;
use super::{number, StockStore};

/// What `queue_snapshot_reads` reads: stock, lucky, sales, initial.
pub type RawSnapshot = (Option<String>, Option<String>, i64, Option<String>);

/// Adds the reads of a [`StockSnapshot`] to `pipe`; [`snapshot_from`] reads their answers.
fn queue_snapshot_reads(pipe: &mut redis::Pipeline, keys: &Keys) {
    pipe.get(keys.stock())
        .get(keys.lucky())
        .llen(keys.sales())
        .get(keys.initial_stock());
}

/// The snapshot in the answers to [`queue_snapshot_reads`].
fn snapshot_from((stock, lucky, sales, initial): RawSnapshot, keys: &Keys) -> Result<StockSnapshot, StockError> {
    Ok(StockSnapshot {
        stock: number(&keys.stock(), stock.as_deref())?.unwrap_or(0),
        lucky: number(&keys.lucky(), lucky.as_deref())?.unwrap_or(0),
        sales,
        initial: number(&keys.initial_stock(), initial.as_deref())?,
    })
}

impl StockStore {
    /// Puts `stock` units on sale, split into this store's segments, and forgets every
    /// earlier sale, its outcomes and the fencing high-water marks: a new sale begins.
    pub async fn reset(&self, stock: i64) -> Result<(), StockError> {
        let name = format!("{:032x}", rand::random::<u128>());
        if self.keys.is_on_cluster() {
            return self.reset_on_cluster(stock, &name).await;
        }
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(self.keys.every_possible_segment_key())
            .set(self.keys.stock(), stock)
            .set(self.keys.lucky(), 0)
            .set(self.keys.initial_stock(), stock)
            .set(self.keys.segment_count(), self.segments.count())
            .del(self.keys.sales())
            .del(self.keys.outcomes())
            .del(self.keys.fence_of(Segment::WHOLE))
            .del(self.keys.fence_refusals())
            .del(self.keys.buyers())
            .del(self.keys.grants())
            .del(self.keys.refusals())
            .incr(self.keys.generation(), 1)
            .set(self.keys.sale_name(), name);
        if self.segments != Segments::ONE {
            for (segment, units) in self.segments.all().zip(self.segments.split(stock)) {
                pipe.set(self.keys.stock_of(segment), units);
            }
        }
        pipe.query_async::<()>(&mut self.connection.clone()).await?;
        Ok(())
    }

    /// [`StockStore::reset`] on a Redis Cluster, where a transaction stays in one slot:
    /// one for the sale as a whole, which names the new sale, then one per segment,
    /// which puts its units on sale under a copy of that name. A seller that reads a
    /// segment not yet reset still sells in the old sale, which that segment's reset
    /// then forgets, as a reset forgets every sale before it. The orders stream stays,
    /// as it does on one Redis: its entries are orders of buyers told `sold`.
    async fn reset_on_cluster(&self, stock: i64, name: &str) -> Result<(), StockError> {
        let mut connection = self.connection.clone();
        let count = self.segments.count();
        redis::pipe()
            .atomic()
            .set(self.keys.initial_stock(), stock)
            .set(self.keys.segment_count(), count)
            .del(self.keys.grants())
            .del(self.keys.refusals())
            .incr(self.keys.generation(), 1)
            .set(self.keys.sale_name(), name)
            .query_async::<()>(&mut connection)
            .await?;
        for (segment, units) in self.segments.all().zip(self.segments.split(stock)) {
            redis::pipe()
                .atomic()
                .del(self.keys.every_key_a_reset_deletes(segment))
                .set(self.keys.stock_of(segment), units)
                .set(self.keys.lucky_of(segment), 0)
                .set(self.keys.sale_name_of(segment), name)
                .set(self.keys.segment_count_of(segment), count)
                .query_async::<()>(&mut connection)
                .await?;
        }
        Ok(())
    }

    /// Seeds `stock` units unless a sale already exists, so a fresh server starts ready.
    pub async fn seed_if_missing(&self, stock: i64) -> Result<(), StockError> {
        let created: bool = redis::cmd("SET")
            .arg(self.keys.stock())
            .arg(stock)
            .arg("NX")
            .query_async::<Option<String>>(&mut self.connection.clone())
            .await?
            .is_some();
        if created {
            self.reset(stock).await?;
        }
        Ok(())
    }

    pub async fn snapshot(&self) -> Result<StockSnapshot, StockError> {
        if !self.keys.is_on_cluster() {
            let mut pipe = redis::pipe();
            queue_snapshot_reads(&mut pipe, &self.keys);
            return snapshot_from(pipe.query_async(&mut self.connection.clone()).await?, &self.keys);
        }
        // One round trip per slot: the segments' counts, added up.
        let mut connection = self.connection.clone();
        let initial: Option<String> = redis::cmd("GET")
            .arg(self.keys.initial_stock())
            .query_async(&mut connection)
            .await?;
        let mut total = StockSnapshot {
            stock: 0,
            lucky: 0,
            sales: 0,
            initial: number(&self.keys.initial_stock(), initial.as_deref())?,
        };
        for segment in self.keys.groups(self.segments) {
            let (stock, lucky, sales): (Option<String>, Option<String>, i64) = redis::pipe()
                .get(self.keys.stock_of(segment))
                .get(self.keys.lucky_of(segment))
                .llen(self.keys.sales_of(segment))
                .query_async(&mut connection)
                .await?;
            total.stock += number(&self.keys.stock_of(segment), stock.as_deref())?.unwrap_or(0);
            total.lucky += number(&self.keys.lucky_of(segment), lucky.as_deref())?.unwrap_or(0);
            total.sales += sales;
        }
        Ok(total)
    }
}
