//! The nemesis's control port: the faults as HTTP calls, for scripts and `curl`.
//!
//! | call | fault |
//! | --- | --- |
//! | `POST /partition` | nothing passes either way |
//! | `POST /delay?ms=800&jitter_ms=200&direction=to-client` | bytes late (`direction`: `both`, `to-server`, `to-client`) |
//! | `POST /reset` | every connection reset, new ones too |
//! | `POST /heal` | back to forwarding |
//! | `GET /status` | the fault in force, the links, the connections open |
//!
//! Every call answers with the status after it.

use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::fault::{Delay, Fault};
use super::{Nemesis, Status};

pub fn app(nemesis: Nemesis) -> Router {
    Router::new()
        .route("/partition", post(partition))
        .route("/delay", post(delay))
        .route("/reset", post(reset))
        .route("/heal", post(heal))
        .route("/status", get(status))
        .with_state(nemesis)
}

async fn partition(State(nemesis): State<Nemesis>) -> Json<Status> {
    nemesis.strike(Fault::Partition);
    Json(nemesis.status())
}

async fn delay(State(nemesis): State<Nemesis>, Query(delay): Query<Delay>) -> Json<Status> {
    nemesis.strike(Fault::Delay(delay));
    Json(nemesis.status())
}

async fn reset(State(nemesis): State<Nemesis>) -> Json<Status> {
    nemesis.strike(Fault::Reset);
    Json(nemesis.status())
}

async fn heal(State(nemesis): State<Nemesis>) -> Json<Status> {
    nemesis.strike(Fault::Healed);
    Json(nemesis.status())
}

async fn status(State(nemesis): State<Nemesis>) -> Json<Status> {
    Json(nemesis.status())
}
