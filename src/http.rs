//! The HTTP surface: routes, handlers and the shared state behind them.
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET` or `POST /stock/reduce` | try to buy one unit |
//! | `GET /stock` | `{stock, lucky, sales, initial}` |
//! | `POST /stock/reset` | body `{"stock": 300}` (optional): put stock on sale, forget old sales |
//! | `GET /healthz` | the process is up (and which strategy it runs) |
//! | `GET /readyz` | Redis answers a `PING` |

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tower_http::trace::TraceLayer;

use crate::error::AppError;
use crate::lock::{Guarding, Strategy};
use crate::stock::{SaleOutcome, Seller, StockSnapshot, StockStore};

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

struct Shared {
    store: StockStore,
    guarding: Guarding,
    seller: Seller,
    strategy: Strategy,
    acquire_timeout: Duration,
    initial_stock: i64,
}

impl AppState {
    pub fn new(
        store: StockStore,
        guarding: Guarding,
        strategy: Strategy,
        seller: Seller,
        acquire_timeout: Duration,
        initial_stock: i64,
    ) -> Self {
        AppState(Arc::new(Shared { store, guarding, seller, strategy, acquire_timeout, initial_stock }))
    }
}

/// The service's routes, ready to serve or to test.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/stock/reduce", get(reduce).post(reduce))
        .route("/stock", get(stock))
        .route("/stock/reset", post(reset))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// The answer to `/stock/reduce`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReduceResponse {
    pub port: u16,
    pub instance: String,
    pub strategy: String,
    pub sold: bool,
    pub stock_after: i64,
    pub lock_wait_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    pub message: String,
}

async fn reduce(State(state): State<AppState>) -> Result<Json<ReduceResponse>, AppError> {
    let shared = &state.0;
    let SaleOutcome { sold, stock_after, lock_wait_ms, fencing_token } =
        shared.store.sell_one(&shared.guarding, &shared.seller, shared.acquire_timeout).await?;
    Ok(Json(ReduceResponse {
        port: shared.seller.port,
        instance: shared.seller.instance.clone(),
        strategy: shared.strategy.name().to_owned(),
        sold,
        stock_after,
        lock_wait_ms,
        fencing_token,
        message: format!("{} reduce stock end!", shared.seller.port),
    }))
}

async fn stock(State(state): State<AppState>) -> Result<Json<StockSnapshot>, AppError> {
    Ok(Json(state.0.store.snapshot().await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetRequest {
    stock: Option<i64>,
}

/// `POST /stock/reset`, with an optional JSON body `{"stock": N}`.
async fn reset(State(state): State<AppState>, body: Bytes) -> Result<Json<StockSnapshot>, AppError> {
    let requested = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let request: ResetRequest = serde_json::from_slice(&body)
            .map_err(|error| AppError::BadRequest(format!("body must be JSON like {{\"stock\": 300}}: {error}")))?;
        request.stock
    };
    let stock = requested.unwrap_or(state.0.initial_stock);
    if stock < 0 {
        return Err(AppError::BadRequest(format!("stock must be 0 or more, got {stock}")));
    }
    state.0.store.reset(stock).await?;
    tracing::info!(stock, "sale reset");
    Ok(Json(state.0.store.snapshot().await?))
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let shared = &state.0;
    Json(json!({
        "status": "ok",
        "strategy": shared.strategy,
        "instance": shared.seller.instance,
        "port": shared.seller.port,
    }))
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.0.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(error) => {
            tracing::warn!(%error, "not ready: redis does not answer");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "redis unavailable" })))
        }
    }
}
