//! The HTTP surface: routes, handlers and the shared state behind them.
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET` or `POST /stock/reduce` | try to buy one unit; `?buyer=<id>` names the buyer (required with `--one-per-buyer`) |
//! | `GET /stock` | `{stock, lucky, sales, initial}` |
//! | `POST /stock/reset` | `Content-Type: application/json`, body `{"stock": 300}` (optional): a new sale |
//! | `GET /healthz` | the process is up, which strategy it runs, whether the sale is fenced and queued locally, and what a database lock counted |
//! | `GET /readyz` | Redis answers a `PING` |
//! | `GET /metrics` | Prometheus's text format ([`crate::metrics`]) |
//! | `GET /` and `GET /events` | the live dashboard and its event stream ([`crate::http::dashboard`]) |
//!
//! In front of every route, as axum's examples do it: a bound on requests in flight
//! (more are shed at once with 503 `overloaded`), a request timeout (504), and the
//! middleware that gives every error the same JSON shape. Both let go of a request
//! once its headers are sent, so an event stream has a bound of its own, held for its
//! whole life (`--max-event-streams`, [`crate::http::dashboard`]).
//!
//! `POST /stock/reset` wants `Content-Type: application/json`. A web page on another
//! site can make a browser send a plain form post anywhere, but not a JSON one without
//! the server's consent (CORS), and this service gives none. DNS rebinding gets a page
//! past that: it makes the page's own name point at this machine, so its posts are
//! same-origin. Without a token, a reset must then also name this machine in its `Host`
//! ([`crate::http::admin`]). `/stock/reduce` stays open to a plain `GET` and to any `Host`:
//! it is the public route, which the demo's `curl` and the load test fire from anywhere.

pub mod errors;
pub mod admin;
pub mod dashboard;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, BoxError, Json, Router};
use serde::Deserialize;
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

use crate::api::{Health, Ready, ReduceAnswer, StockSnapshot};
use crate::config::MAX_STOCK;
use crate::http::admin::{Denied, ResetAccess};
use crate::http::dashboard::{Banner, EventStreams};
use crate::http::errors::{errors_as_json, json_error};
use crate::orders::RunningWriter;
use crate::sale::buyers::BuyerId;
use crate::sale::error::AppError;
use crate::sale::{Sale, SaleOutcome};

/// The largest body `POST /stock/reset` reads; `{"stock": 1000000000}` needs 22 bytes.
const RESET_BODY_LIMIT: usize = 1024;

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

struct Shared {
    sale: Arc<Sale>,
    reset_access: ResetAccess,
    initial_stock: i64,
    limits: Limits,
    event_streams: EventStreams,
    /// With `--orders`, this instance's order writer ([`crate::orders`]).
    order_writer: Option<RunningWriter>,
}

/// How much the service takes on at once, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_in_flight: usize,
    pub request_timeout: Duration,
}

impl AppState {
    pub fn new(
        sale: Sale,
        initial_stock: i64,
        limits: Limits,
        reset_access: ResetAccess,
        event_streams: EventStreams,
        order_writer: Option<RunningWriter>,
    ) -> Self {
        AppState(Arc::new(Shared {
            sale: Arc::new(sale),
            reset_access,
            initial_stock,
            limits,
            event_streams,
            order_writer,
        }))
    }

    /// Lets the sales under way finish, then gives back every lock still held, then
    /// stops the order writer: the last step of a shutdown.
    pub async fn shutdown(&self) {
        self.0.sale.shut_down().await;
        if let Some(writer) = &self.0.order_writer {
            writer.stop().await;
        }
    }
}

/// The service's routes, ready to serve or to test.
pub fn app(state: AppState) -> Router {
    let limits = state.0.limits;
    Router::new()
        .route("/stock/reduce", get(reduce).post(reduce))
        .route("/stock", get(stock))
        // A body declared larger than the limit is refused from its Content-Length, before
        // a byte of it is read (and before a client that asked `Expect: 100-continue`
        // is told to send it); one that turns out larger is cut off at the limit.
        .route(
            "/stock/reset",
            post(reset).layer(RequestBodyLimitLayer::new(RESET_BODY_LIMIT)),
        )
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .route("/", get(dashboard::page))
        .route("/events", get(events))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(middleware::map_response(errors_as_json))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|error: BoxError| async move {
                    overloaded_or_timed_out(error)
                }))
                .load_shed()
                // One bound shared by every route (a plain concurrency limit would be per route).
                .layer(tower::limit::GlobalConcurrencyLimitLayer::new(limits.max_in_flight))
                .timeout(limits.request_timeout),
        )
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

fn overloaded_or_timed_out(error: BoxError) -> AppError {
    if error.is::<tower::load_shed::error::Overloaded>() {
        AppError::Overloaded
    } else if error.is::<tower::timeout::error::Elapsed>() {
        AppError::RequestTimeout
    } else {
        AppError::internal(error)
    }
}

/// The query of `/stock/reduce`.
#[derive(Deserialize)]
struct ReduceQuery {
    buyer: Option<String>,
}

async fn reduce(
    State(state): State<AppState>,
    Query(query): Query<ReduceQuery>,
) -> Result<Json<ReduceAnswer>, AppError> {
    let shared = &state.0;
    let buyer = query
        .buyer
        .as_deref()
        .map(BuyerId::parse)
        .transpose()
        .map_err(AppError::BadRequest)?;
    let sold_or_refused = shared.sale.sell_one(buyer).await;
    shared.sale.metrics().record_answer(
        sold_or_refused
            .as_ref()
            .map(|outcome| outcome.sold)
            .map_err(AppError::code),
    );
    if let Err(error) = &sold_or_refused {
        // For the dashboard, after the answer and in the background: never on a sale's path.
        let (store, instance, code) = (
            shared.sale.store().clone(),
            shared.sale.seller().instance.clone(),
            error.code(),
        );
        tokio::spawn(async move { dashboard::count_refusal(&store, &instance, code).await });
    }
    let SaleOutcome {
        sold,
        stock_after,
        lock_wait_ms,
        fencing_token,
        sold_unit,
    } = sold_or_refused?;
    let seller = shared.sale.seller();
    Ok(Json(ReduceAnswer {
        port: seller.port,
        instance: seller.instance.clone(),
        strategy: seller.strategy.to_owned(),
        sold,
        stock_after,
        lock_wait_ms,
        fencing_token,
        sold_unit,
        message: format!("{} reduce stock end!", seller.port),
    }))
}

async fn stock(State(state): State<AppState>) -> Result<Json<StockSnapshot>, AppError> {
    Ok(Json(state.0.sale.store().snapshot().await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetRequest {
    stock: Option<i64>,
}

/// `POST /stock/reset`, JSON only, with an optional body `{"stock": N}`.
async fn reset(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<StockSnapshot>, AppError> {
    let header_text = |name: header::HeaderName| headers.get(name).and_then(|value| value.to_str().ok());
    state
        .0
        .reset_access
        .check(header_text(header::AUTHORIZATION), header_text(header::HOST))
        .map_err(refused_reset)?;
    let stock = stock_to_reset_to(header_text(header::CONTENT_TYPE), &body, state.0.initial_stock)?;
    let store = state.0.sale.store();
    store.reset(stock).await?;
    tracing::info!(stock, "sale reset");
    Ok(Json(store.snapshot().await?))
}

/// The answer to a reset [`ResetAccess`] refused, with the way to be let in.
fn refused_reset(denied: Denied) -> AppError {
    match denied {
        Denied::BadToken => AppError::Unauthorized(
            "a reset wipes every sale: send `Authorization: Bearer <token>` with the token of --admin-token / \
             SECKILL_ADMIN_TOKEN"
                .to_owned(),
        ),
        Denied::NoTokenConfigured => AppError::Forbidden(
            "this service listens beyond loopback and has no admin token, so resets are refused: start it with \
             --admin-token / SECKILL_ADMIN_TOKEN (or --bind 127.0.0.1)"
                .to_owned(),
        ),
        Denied::ForeignHost(host) => AppError::Forbidden(format!(
            "without an admin token a reset must name this machine in its Host header (localhost, 127.x.x.x or \
             [::1]), so that a web page whose name was rebound to this machine cannot reset; this one names {}. \
             Reach the service by one of those names, start it with --allowed-host NAME for a name of yours, or \
             with --admin-token / SECKILL_ADMIN_TOKEN and send the token",
            host.map_or("no host".to_owned(), |host| format!("`{host}`"))
        )),
    }
}

/// The stock a reset asks for: the body's `{"stock": N}`, or `default` for an empty
/// body. Only JSON is taken, so that a plain form on another web page cannot reset.
fn stock_to_reset_to(content_type: Option<&str>, body: &[u8], default: i64) -> Result<i64, AppError> {
    let is_json = content_type
        .and_then(|value| value.split(';').next())
        .is_some_and(|media_type| media_type.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(AppError::UnsupportedMediaType(
            "send `Content-Type: application/json` (a reset is refused from plain forms, so other web pages cannot \
             trigger it): curl -X POST -H 'content-type: application/json' -d '{\"stock\": 300}' …/stock/reset"
                .to_owned(),
        ));
    }
    let requested = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let request: ResetRequest = serde_json::from_slice(body)
            .map_err(|error| AppError::BadRequest(format!("body must be JSON like {{\"stock\": 300}}: {error}")))?;
        request.stock
    };
    let stock = requested.unwrap_or(default);
    if !(0..=MAX_STOCK).contains(&stock) {
        return Err(AppError::BadRequest(format!(
            "stock must be between 0 and {MAX_STOCK}, got {stock}"
        )));
    }
    Ok(stock)
}

async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(state.0.sale.health())
}

/// `GET /events`: the dashboard's stream of server-sent events, while a place is left.
async fn events(State(state): State<AppState>) -> Result<impl IntoResponse, AppError> {
    let shared = &state.0;
    let banner = Banner {
        strategy: shared.sale.seller().strategy,
        fencing: shared.sale.fencing().name(),
        instance: shared.sale.seller().instance.clone(),
    };
    shared.event_streams.open(banner)
}

/// `GET /metrics`: Prometheus's text format (see [`crate::metrics`]).
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = state.0.sale.metrics().render(state.0.sale.own_metrics());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.0.sale.store().ping().await {
        Ok(()) => Json(Ready {
            status: "ready".to_owned(),
        })
        .into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready: redis does not answer");
            json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the stock's Redis does not answer a PING; check that the servers run (`make services`)",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Option<&str> = Some("application/json; charset=utf-8");

    #[test]
    fn an_empty_reset_body_puts_the_initial_stock_back() {
        assert_eq!(stock_to_reset_to(JSON, b"  \n", 300).unwrap(), 300);
    }

    #[test]
    fn a_reset_body_names_the_stock() {
        assert_eq!(stock_to_reset_to(JSON, br#"{"stock": 42}"#, 300).unwrap(), 42);
        assert_eq!(stock_to_reset_to(JSON, br#"{}"#, 300).unwrap(), 300);
    }

    #[test]
    fn a_reset_refuses_anything_but_json_with_a_known_field_and_a_stock_in_range() {
        let code = |result: Result<i64, AppError>| result.unwrap_err().code();
        assert_eq!(
            code(stock_to_reset_to(
                Some("application/x-www-form-urlencoded"),
                b"stock=1",
                300
            )),
            "unsupported_media_type"
        );
        assert_eq!(code(stock_to_reset_to(None, b"", 300)), "unsupported_media_type");
        assert_eq!(code(stock_to_reset_to(JSON, br#"{"stok": 1}"#, 300)), "bad_request");
        assert_eq!(code(stock_to_reset_to(JSON, br#"{"stock": -1}"#, 300)), "bad_request");
        assert_eq!(
            code(stock_to_reset_to(JSON, br#"{"stock": 1000000001}"#, 300)),
            "bad_request"
        );
    }
}
