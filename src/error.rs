//! The HTTP error: one enum, one status mapping.
//!
//! 4xx answers say exactly what was wrong with the request. 5xx answers say what kind
//! of failure it was and hide the details, which are logged once, here.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::lock::LockError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request itself is wrong; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// The lock stayed taken for the whole acquire timeout. Nothing was sold.
    #[error("{0}")]
    LockTimeout(LockError),
    /// The lease ran out before the write. Nothing was sold.
    #[error("the lock's lease ran out before the sale was written; nothing was sold")]
    LockLost,
    /// The lock's backend failed.
    #[error(transparent)]
    LockBackend(LockError),
    /// Redis, which holds the stock, failed.
    #[error("redis (stock) failed: {0}")]
    Stock(#[from] redis::RedisError),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    pub fn internal(error: impl std::fmt::Display) -> Self {
        AppError::Internal(error.to_string())
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::LockTimeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_timeout"),
            AppError::LockLost => (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
            AppError::LockBackend(_) => (StatusCode::SERVICE_UNAVAILABLE, "lock_backend_unavailable"),
            AppError::Stock(_) => (StatusCode::SERVICE_UNAVAILABLE, "stock_backend_unavailable"),
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
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            AppError::BadRequest(_) | AppError::LockTimeout(_) | AppError::LockLost => self.to_string(),
            AppError::LockBackend(_) | AppError::Stock(_) => {
                tracing::error!(error = %self, "backend failure");
                "a backend is unavailable; nothing was sold. Check that the servers run (`make services`) and retry"
                    .to_owned()
            }
            AppError::Internal(_) => {
                tracing::error!(error = %self, "internal error");
                "internal error; nothing was sold".to_owned()
            }
        };
        (status, Json(json!({ "error": code, "message": message }))).into_response()
    }
}
