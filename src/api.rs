//! The HTTP contract: every JSON body the service answers with, one type each.
//!
//! | route | answers with |
//! | --- | --- |
//! | `GET /stock/reduce` | [`ReduceAnswer`], or an [`ErrorBody`] |
//! | `GET /stock`, `POST /stock/reset` | [`StockSnapshot`] |
//! | `GET /healthz` | [`Health`] |
//! | `GET /readyz` | [`Ready`], or an [`ErrorBody`] |
//! | any failure, axum's own included | [`ErrorBody`] |
//!
//! The server builds these and nothing else. The load test (`loadtest/`) and the tests
//! read them back with the same types, so a field renamed here fails to compile there
//! instead of reading as missing. Three readers and a writer cannot share the types and
//! copy them by hand: the dashboard's script (`src/http/dashboard.html`, which reads the
//! stream of `GET /events`), the shell scripts that read `/healthz` with `jq`
//! (`scripts/demo-degrade.sh` reads `lock_stats.degrade`), and the Python peer of `make
//! bench` (`loadtest/peer/app.py`), whose `/healthz` answers a [`Health`] for the load test
//! to read. Change them with a field.
//!
//! The contract comes before the sale in the reading order because the sale describes
//! itself in it ([`Health`], from `Sale::health`).

use serde::{Deserialize, Serialize};

use crate::lock::{FencingToken, LockStats};
use crate::strategy::FencingStatus;

/// `GET /stock/reduce` that reached the stock: sold, or sold out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReduceAnswer {
    pub port: u16,
    pub instance: String,
    pub strategy: String,
    /// `true`: one unit is the buyer's. `false`: the sale is sold out.
    pub sold: bool,
    pub stock_after: i64,
    pub lock_wait_ms: f64,
    /// The grant's token, for the strategies that issue one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<FencingToken>,
    /// What was sold, on a sold answer: the unit a history checker judges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sold_unit: Option<SoldUnit>,
    pub message: String,
}

/// The unit a sale sold, named so that two sales of one unit can be told apart from
/// the answers alone: the unit is the stock the sale took, in its sale and segment.
/// With a stock of 300 in one segment, the first buyer gets unit 300 and the last unit 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoldUnit {
    /// The name the last reset gave the sale; empty for a sale no reset named.
    pub sale: String,
    /// The segment it was sold from (0 when the stock is in one piece).
    pub segment: u32,
    /// The stock this sale took: what its segment held before it.
    pub unit: i64,
    /// The sale's id: the key of its record and its outcome in Redis.
    pub sale_id: String,
}

/// The sale's counters, as `GET /stock` and a reset show them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StockSnapshot {
    pub stock: i64,
    pub lucky: i64,
    pub sales: i64,
    /// The stock of the last reset; `null` if the sale was never reset.
    pub initial: Option<i64>,
}

/// `GET /healthz`: the process is up, and how it sells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Always `ok`: an instance that answers is up.
    pub status: String,
    /// `--lock`, as the flag names it.
    pub strategy: String,
    pub fencing: FencingStatus,
    /// The buyers of an instance line up in process before the lock (`--local-queue`).
    pub local_queue: bool,
    /// A release hands the lock to the next buyer in line where the lock can (`--hand-over`).
    pub hand_over: bool,
    /// Into how many segments the stock is split (`--stock-segments`).
    pub stock_segments: u32,
    /// "Sold out" is answered from memory once every segment is known empty (`--sold-out-flag`).
    pub sold_out_flag: bool,
    /// The sale holds every buyer to one unit (`--one-per-buyer`).
    pub one_per_buyer: bool,
    /// Each unit sold becomes an order in MySQL (`--orders`).
    pub orders: bool,
    /// The replicas every sale waits for before its buyer is told (`--stock-wait-replicas`;
    /// 0: none). Absent from a peer that does not wait.
    #[serde(default)]
    pub stock_wait_replicas: u32,
    /// The most buyers one grant sells to (`--group-commit`, `--group-max`); 0: one unit
    /// per grant. Absent from a peer that does not group.
    #[serde(default)]
    pub group_max: u32,
    pub instance: String,
    pub port: u16,
    /// What every key of the sale starts with (`--key-prefix`).
    pub key_prefix: String,
    /// What the lock counted since it started, for the locks that count (the database locks).
    pub lock_stats: Option<LockStats>,
}

/// `GET /readyz` when the stock's Redis answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// Always `ready`.
    pub status: String,
}

/// Every error: a code to branch on, and a message that says what happened and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// `lock_timeout`, `already_bought`... (docs/reference/endpoints.md lists them).
    pub error: String,
    pub message: String,
}
