//! The HTTP error: one enum, one status mapping, one JSON shape.
//!
//! Every error the service sends is an [`ErrorBody`], `{"error": "<code>", "message": "<text>"}`, also
//! those axum itself produces (unknown route, wrong method, body too large): see
//! [`errors_as_json`]. 4xx answers say exactly what was wrong with the request. 5xx
//! answers say what kind of failure it was and hide the details, which are logged once, here.
//!
//! What a buyer's error means for the sale:
//! - every **503** means nothing was sold by that request (`sale_reset` included: a
//!   reset began a new sale between its read and its write), and so do **400**
//!   `buyer_required` and **409** `already_bought` (`--one-per-buyer`);
//! - **504** `sale_outcome_unknown` and `request_timeout` mean the outcome is not known;
//! - **500** `stock_corrupt` means the stored stock is not a number: nothing was sold.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ErrorBody;
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
        self.status_and_code().1
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            AppError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            AppError::BuyerRequired => (StatusCode::BAD_REQUEST, "buyer_required"),
            AppError::AlreadyBought => (StatusCode::CONFLICT, "already_bought"),
            AppError::LockTimeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_timeout"),
            AppError::LockLost => (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
            AppError::LockBackend(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_backend_unavailable"),
            AppError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            AppError::Stock(StockError::NotANumber { .. }) => (StatusCode::INTERNAL_SERVER_ERROR, "stock_corrupt"),
            AppError::Stock(StockError::Redis(_)) | AppError::SaleNotWritten => {
                (StatusCode::SERVICE_UNAVAILABLE, "stock_backend_unavailable")
            }
            AppError::SegmentsDisagree { .. } => (StatusCode::SERVICE_UNAVAILABLE, "segments_disagree"),
            AppError::SaleReset => (StatusCode::SERVICE_UNAVAILABLE, "sale_reset"),
            AppError::SaleOutcomeUnknown { .. }
            | AppError::SaleOutcomeLostInReset { .. }
            | AppError::Stock(StockError::NotReplicated { .. }) => {
                (StatusCode::GATEWAY_TIMEOUT, "sale_outcome_unknown")
            }
            AppError::Overloaded | AppError::TooManyEventStreams { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "overloaded")
            }
            AppError::RequestTimeout => (StatusCode::GATEWAY_TIMEOUT, "request_timeout"),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
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

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            AppError::LockBackend(_) | AppError::Stock(StockError::Redis(_)) => {
                tracing::error!(error = %self, "backend failure");
                "a backend is unavailable; nothing was sold. Check that the servers run (`make services`) and retry"
                    .to_owned()
            }
            AppError::Stock(StockError::NotANumber { key, value }) => {
                tracing::error!(error = %self, "corrupt stock");
                format!(
                    "the stored `{key}` is not a number ({value:?}); nothing was sold. \
                     Put a sale on with `POST /stock/reset`"
                )
            }
            AppError::SaleOutcomeUnknown { .. } | AppError::SaleOutcomeLostInReset { .. } => {
                tracing::error!(error = %self, "sale outcome unknown");
                self.to_string()
            }
            AppError::Internal(_) => {
                tracing::error!(error = %self, "internal error");
                "internal error".to_owned()
            }
            _ => self.to_string(),
        };
        json_error(status, code, &message)
    }
}

/// The one error shape: `{"error": code, "message": message}`.
pub fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ErrorBody {
        error: code.to_owned(),
        message: message.to_owned(),
    };
    (status, Json(body)).into_response()
}

/// Middleware: turns an error response that is not JSON (axum's own 404, 405, 413, or
/// a rejected extractor's plain text) into the service's JSON shape, keeping its text.
pub async fn errors_as_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let code = match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        status if status.is_client_error() => "bad_request",
        _ => "internal",
    };
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = match (status, text.trim()) {
        (StatusCode::NOT_FOUND, _) => "no such route; every route is in docs/reference/endpoints.md".to_owned(),
        (StatusCode::METHOD_NOT_ALLOWED, _) => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            format!("this route does not take that method; it takes {allowed}")
        }
        (_, "") => status.canonical_reason().unwrap_or("error").to_owned(),
        (_, text) => text.to_owned(),
    };
    let mut json = json_error(status, code, &message);
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&name) {
            json.headers_mut().insert(name, value.clone());
        }
    }
    json
}
