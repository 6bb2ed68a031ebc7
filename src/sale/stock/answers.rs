//! What the stock's scripts answer: a fenced read, a fenced write, a settle, the atomic
//! script, and why any of them failed.

use std::time::Duration;

/// What a fenced read found.
#[derive(Debug, PartialEq, Eq)]
pub enum StockRead {
    /// The stock, read under the holder's token (or unfenced), in the sale named `sale`.
    Stock { units: i64, sale: SaleName },
    /// A newer token was seen already: this holder's lock is gone. Holds the newest seen.
    Fenced { newest: String },
    /// The sale was last reset into another number of segments than this seller's.
    OtherSegments { reset_with: String },
    /// The buyer got a unit of this segment already (checked on a cluster only).
    AlreadyBought,
}

/// The name a reset gave the sale ([`Keys::sale_name`](crate::sale::keys::Keys::sale_name)); empty for a sale no reset named.
/// A write carries the name its read saw, so it commits only in that sale.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaleName(pub String);

/// What a fenced write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Sold,
    /// A reset began a new sale since the read: nothing was written.
    SaleReset,
    /// A newer holder read since this holder's read: nothing was written.
    Fenced,
    /// The seller had already settled this sale id as aborted: nothing was written.
    Aborted,
    /// The buyer already got a unit of this sale (`--one-per-buyer`): nothing was written.
    AlreadyBought,
}

/// How a sale whose answer was lost ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    Sold {
        stock_after: i64,
    },
    NotSold,
    /// A reset began a new sale and deleted the outcomes before the settle: whether the
    /// write ran before the reset is unknown.
    Unknown,
}

/// What the atomic script did.
#[derive(Debug, PartialEq, Eq)]
pub enum AtomicOutcome {
    /// Sold the unit `stock_before`, in the sale named `sale`.
    Sold {
        stock_before: i64,
        sale: SaleName,
    },
    SoldOut,
    /// The seller had already settled this sale id as aborted: nothing was written.
    Aborted,
    /// The buyer already got a unit of this sale (`--one-per-buyer`): nothing was written.
    AlreadyBought,
    /// The sale was last reset into segments, which the script does not sell from.
    OtherSegments {
        reset_with: String,
    },
}

/// Why a stock operation failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StockError {
    /// Redis did not answer, or answered an error.
    #[error("redis (stock) failed: {0}")]
    Redis(#[from] redis::RedisError),
    /// A key holds something that is not a number.
    #[error("the stored `{key}` is not a number: {value:?}")]
    NotANumber { key: String, value: String },
    /// The sale was written on the master, but fewer replicas than `--stock-wait-replicas`
    /// acknowledged it in time: a failover now would lose it, so it is not yet sold.
    #[error(
        "{acknowledged} of the {wanted} replica(s) the stock waits for (--stock-wait-replicas) acknowledged the \
         sale within {timeout:?}; is the replica up and in sync (INFO replication)?"
    )]
    NotReplicated {
        acknowledged: u32,
        wanted: u32,
        timeout: Duration,
    },
}
