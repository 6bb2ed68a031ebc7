//! The nemesis's control port: the faults as HTTP calls, for scripts and `curl`.
//!
//! | call | fault |
//! | --- | --- |
//! | `POST /partition` | nothing passes either way |
//! | `POST /delay?ms=800&jitter_ms=200&direction=to-client` | bytes late (`direction`: `both`, `to-server`, `to-client`) |
//! | `POST /reset` | every connection reset, new ones too |
//! | `POST /hold-answers` | requests pass and run, answers wait for the heal |
//! | `POST /blackhole` | nothing passes, what is read is lost, no connection closes |
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
        .route("/hold-answers", post(hold_answers))
        .route("/blackhole", post(blackhole))
        .route("/heal", post(heal))
        .route("/status", get(status))
        .with_state(nemesis)
}

async fn partition(State(nemesis): State<Nemesis>) -> Json<Status> {
    strike(&nemesis, Fault::Partition)
}

async fn delay(State(nemesis): State<Nemesis>, Query(delay): Query<Delay>) -> Json<Status> {
    strike(&nemesis, Fault::Delay(delay))
}

async fn reset(State(nemesis): State<Nemesis>) -> Json<Status> {
    strike(&nemesis, Fault::Reset)
}

async fn hold_answers(State(nemesis): State<Nemesis>) -> Json<Status> {
    strike(&nemesis, Fault::HoldAnswers)
}

async fn blackhole(State(nemesis): State<Nemesis>) -> Json<Status> {
    strike(&nemesis, Fault::Blackhole)
}

async fn heal(State(nemesis): State<Nemesis>) -> Json<Status> {
    strike(&nemesis, Fault::Healed)
}

/// Strikes `fault`, and says so on standard output with the time, to read beside the
/// instances' logs.
fn strike(nemesis: &Nemesis, fault: Fault) -> Json<Status> {
    nemesis.strike(fault);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    println!("[nemesis] at {} ms (unix): {fault:?}", now.as_millis());
    Json(nemesis.status())
}

async fn status(State(nemesis): State<Nemesis>) -> Json<Status> {
    Json(nemesis.status())
}
