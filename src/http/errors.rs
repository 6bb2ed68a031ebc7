//! How a failed request is answered: each [`AppError`] with its HTTP status and message,
//! in the one JSON shape, [`ErrorBody`], `{"error": "<code>", "message": "<text>"}`; also
//! the errors axum itself produces (unknown route, wrong method, body too large): see
//! [`errors_as_json`]. 4xx answers say exactly what was wrong with the request. 5xx
//! answers say what kind of failure it was and hide the details, which are logged once, here.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::ErrorBody;
use crate::sale::error::AppError;
use crate::sale::stock::StockError;

/// The status each error answers with: 4xx the request's fault, 503 nothing sold and worth
/// a retry, 504 an outcome not known, 500 a bug or a corrupt stock.
fn status_of(error: &AppError) -> StatusCode {
    match error {
        AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
        AppError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        AppError::Forbidden(_) => StatusCode::FORBIDDEN,
        AppError::BuyerRequired => StatusCode::BAD_REQUEST,
        AppError::AlreadyBought => StatusCode::CONFLICT,
        AppError::LockTimeout(_) => StatusCode::SERVICE_UNAVAILABLE,
        AppError::LockLost => StatusCode::SERVICE_UNAVAILABLE,
        AppError::LockBackend(_) => StatusCode::SERVICE_UNAVAILABLE,
        AppError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        AppError::Stock(StockError::NotANumber { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
        AppError::Stock(StockError::Redis(_)) | AppError::SaleNotWritten => StatusCode::SERVICE_UNAVAILABLE,
        AppError::SegmentsDisagree { .. } => StatusCode::SERVICE_UNAVAILABLE,
        AppError::SaleReset => StatusCode::SERVICE_UNAVAILABLE,
        AppError::SaleOutcomeUnknown { .. }
        | AppError::SaleOutcomeLostInReset { .. }
        | AppError::Stock(StockError::NotReplicated { .. }) => StatusCode::GATEWAY_TIMEOUT,
        AppError::Overloaded | AppError::TooManyEventStreams { .. } => StatusCode::SERVICE_UNAVAILABLE,
        AppError::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
        AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = (status_of(&self), self.code());
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
