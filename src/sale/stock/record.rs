//! A sale record: who sold a unit, when, and under which lock grant. The fenced write
//! appends one to `sales` per unit sold; the load test reads them back to find a unit
//! sold twice.

use serde::{Deserialize, Serialize};

use crate::lock::FencingToken;
use crate::sale::buyers::BuyerId;
use crate::sale::segments::Segment;

use super::unix_ms;

/// Who sold a unit, when, and under which lock grant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SaleRecord {
    /// Unique per sale attempt; the key of its outcome in `stock:outcomes`.
    #[serde(default)]
    pub sale_id: String,
    /// The instance that sold it (`--instance`, by default `seckill-<port>`).
    pub instance: String,
    pub port: u16,
    pub strategy: String,
    /// The stock this sale read. Two records with the same value (and segment) sold
    /// the same unit.
    #[serde(default)]
    pub stock_before: i64,
    /// The segment it was sold from, when the stock is split ([`crate::sale::segments`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    /// The buyer, when the request named one (`?buyer=`, [`crate::sale::buyers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buyer: Option<String>,
    /// The lock grant's fencing token, when the strategy gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<FencingToken>,
    /// The group sold under one grant, by the group's sale id, with `--group-commit`
    /// ([`crate::sale::group`]): its records share one fencing token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Milliseconds the buyer waited for the lock.
    pub lock_wait_ms: f64,
    /// Unix time, in milliseconds, when the lock was granted and when the sale was written.
    pub locked_at_ms: u64,
    pub sold_at_ms: u64,
}

/// Who is selling: stamped on every sale record.
#[derive(Clone, Debug)]
pub struct Seller {
    pub instance: String,
    pub port: u16,
    pub strategy: &'static str,
}

impl SaleRecord {
    /// A record of a sale by `seller` of the unit it read as `stock_before` in `segment`.
    pub fn new(
        seller: &Seller,
        sale_id: &str,
        segment: Segment,
        stock_before: i64,
        fencing_token: Option<FencingToken>,
        lock_wait_ms: f64,
        locked_at_ms: u64,
    ) -> Self {
        SaleRecord {
            sale_id: sale_id.to_owned(),
            instance: seller.instance.clone(),
            port: seller.port,
            strategy: seller.strategy.to_owned(),
            stock_before,
            segment: segment.label(),
            buyer: None,
            fencing_token,
            group: None,
            lock_wait_ms,
            locked_at_ms,
            sold_at_ms: unix_ms(),
        }
    }

    /// The same record, naming the buyer the request named.
    pub fn with_buyer(mut self, buyer: Option<&BuyerId>) -> Self {
        self.buyer = buyer.map(|buyer| buyer.as_str().to_owned());
        self
    }

    /// The same record, sold in the group of this sale id ([`crate::sale::group`]).
    pub fn in_group(mut self, group_id: &str) -> Self {
        self.group = Some(group_id.to_owned());
        self
    }
}
