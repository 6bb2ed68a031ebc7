//! Every way a request fails, one enum, each with the code a buyer reads in its answer's
//! `{"error": code}`; [`crate::http::errors`] gives each its HTTP status and message.
//!
//! What a buyer's error means for the sale:
//! - every **503** means nothing was sold by that request (`sale_reset` included: a
//!   reset began a new sale between its read and its write), and so do **400**
//!   `buyer_required` and **409** `already_bought` (`--one-per-buyer`);
//! - **504** `sale_outcome_unknown` and `request_timeout` mean the outcome is not known;
//! - **500** `stock_corrupt` means the stored stock is not a number: nothing was sold.

use crate::lock::LockError;
use crate::sale::stock::StockError;

/// Clone, so that every buyer of a group (`crate::sale::group`) hears why it failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum AppError {
    /// The request itself is wrong; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// A reset without the admin token, or with a wrong one.
    #[error("{0}")]
    Unauthorized(String),
    /// A reset on a service that listens beyond loopback and has no admin token, or
    /// one that names a host that is not this machine and has no token to show.
    #[error("{0}")]
    Forbidden(String),
    /// The request's body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// `--one-per-buyer`, and the request named no buyer. Nothing was sold.
    #[error(
        "this sale sells one unit per buyer (--one-per-buyer): name the buyer, as in GET /stock/reduce?buyer=alice"
    )]
    BuyerRequired,
    /// `--one-per-buyer`, and this buyer already got a unit of this sale. Nothing was sold.
    #[error("this buyer already got a unit of this sale, and the sale sells one per buyer (--one-per-buyer); nothing was sold")]
    AlreadyBought,
    /// The lock stayed taken for the whole acquire timeout. Nothing was sold.
    #[error("{0}")]
    LockTimeout(LockError),
    /// The lease ran out, or the stock saw a newer holder, before the write. Nothing was sold.
    #[error("the lock was lost before the sale was written (its lease ran out or a newer holder took over); nothing was sold")]
    LockLost,
    /// The lock's backend failed. Nothing was sold.
    #[error(transparent)]
    LockBackend(LockError),
    /// The service is stopping and grants no more locks. Nothing was sold.
    #[error("this instance is shutting down; nothing was sold. Retry on another instance")]
    ShuttingDown,
    /// Redis, which holds the stock, failed before anything was written.
    #[error("{0}")]
    Stock(StockError),
    /// This instance splits the stock into another number of segments than the last
    /// reset did. Nothing was sold.
    #[error("this instance sells from {this_instance} stock segment(s), but the sale in Redis was reset into {reset_with}; \
             nothing was sold. Start every instance with the same --stock-segments, then `POST /stock/reset` through one of them")]
    SegmentsDisagree { this_instance: u32, reset_with: String },
    /// The write's answer was lost, and Redis confirmed it never committed.
    #[error("the stock's Redis did not confirm the write, and the sale was cancelled; nothing was sold")]
    SaleNotWritten,
    /// A reset began a new sale between this sale's read and its write. Nothing was sold.
    #[error("the sale was reset while this purchase was under way; nothing was sold. Buy again: the new sale is on")]
    SaleReset,
    /// The write's answer was lost, and a reset erased the sale's outcomes before Redis
    /// was asked: the write may have run before the reset.
    #[error("the write's answer was lost and the sale was reset before its outcome was read: sale {sale_id} may or may not have been sold. \
             With --orders, an order of that id in MySQL means it was")]
    SaleOutcomeLostInReset { sale_id: String },
    /// The write's answer was lost, and Redis did not answer long enough to find out.
    #[error("the stock's Redis stopped answering during sale {sale_id}: it may or may not have been sold. `GET /stock` shows the counts once Redis is back")]
    SaleOutcomeUnknown { sale_id: String },
    /// More requests are in flight than `--max-in-flight` allows. Nothing was sold.
    #[error("too many requests in flight; nothing was sold. Retry later, or raise --max-in-flight")]
    Overloaded,
    /// `--max-event-streams` dashboard event streams are open already.
    #[error("{open} dashboard event streams are open, the most --max-event-streams allows; close a dashboard page, or raise --max-event-streams")]
    TooManyEventStreams { open: u32 },
    /// The request ran longer than the service's own request timeout.
    #[error("the request took too long and was cut off; if it was a purchase, its outcome is unknown: `GET /stock` shows the counts")]
    RequestTimeout,
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    pub fn internal(error: impl std::fmt::Display) -> Self {
        AppError::Internal(error.to_string())
    }

    /// The code a buyer gets in `{"error": code}`, and `/metrics` counts by.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "bad_request",
            AppError::UnsupportedMediaType(_) => "unsupported_media_type",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::Forbidden(_) => "forbidden",
            AppError::BuyerRequired => "buyer_required",
            AppError::AlreadyBought => "already_bought",
            AppError::LockTimeout(_) => "lock_timeout",
            AppError::LockLost => "lock_lost",
            AppError::LockBackend(_) => "lock_backend_unavailable",
            AppError::ShuttingDown => "shutting_down",
            AppError::Stock(StockError::NotANumber { .. }) => "stock_corrupt",
            AppError::Stock(StockError::Redis(_)) | AppError::SaleNotWritten => "stock_backend_unavailable",
            AppError::SegmentsDisagree { .. } => "segments_disagree",
            AppError::SaleReset => "sale_reset",
            AppError::SaleOutcomeUnknown { .. }
            | AppError::SaleOutcomeLostInReset { .. }
            | AppError::Stock(StockError::NotReplicated { .. }) => "sale_outcome_unknown",
            AppError::Overloaded | AppError::TooManyEventStreams { .. } => "overloaded",
            AppError::RequestTimeout => "request_timeout",
            AppError::Internal(_) => "internal",
        }
    }
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        match error {
            LockError::Busy { .. } | LockError::Timeout { .. } => AppError::LockTimeout(error),
            LockError::Lost { .. } => AppError::LockLost,
            LockError::Backend { .. } => AppError::LockBackend(error),
            LockError::ShutDown { .. } => AppError::ShuttingDown,
        }
    }
}

impl From<StockError> for AppError {
    fn from(error: StockError) -> Self {
        AppError::Stock(error)
    }
}
