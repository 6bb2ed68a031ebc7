//! The lab's HTTP face: one page, and the calls it makes.
//!
//! | call | what |
//! | --- | --- |
//! | `GET /` | the page (compiled in, nothing fetched from elsewhere) |
//! | `GET /state` | the setup, the instances and their links, the crowd and its verdict, what happened |
//! | `POST /start` | a [`Setup`] as JSON: stop what runs, start its servers and two instances |
//! | `POST /crowd` | the lessons' crowd at both instances |
//! | `POST /sell?rate=20` | keep selling: a steady load of `rate` buyers a second, until stopped |
//! | `POST /sell/stop` | no more buyers; the verdict once the last ones have their answers |
//! | `POST /strike` | a [`Strike`] as JSON: a fault, ended by the lab after its time |
//! | `GET /scenarios` | the guided scenarios, in both languages |
//! | `POST /scenarios/{id}` | one run: its setup started, the crowd sent, its faults struck |
//! | `POST /replay?upto=N` | a history.jsonl as the body: the timeline of its first N events, with their checks |
//! | `GET /timeline` | the last crowd's timeline: as it grows, then with its checks |
//!
//! Every call passes [`crate::guard::loopback_only`] first.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::faults::Strike;
use crate::lab::Lab;
use crate::setup::Setup;

pub fn app(lab: Arc<Lab>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/state", get(state))
        .route("/start", post(start))
        .route("/crowd", post(crowd))
        .route("/sell", post(keep_selling))
        .route("/sell/stop", post(stop_selling))
        .route("/strike", post(strike))
        .route("/scenarios", get(scenarios))
        .route("/scenarios/{id}", post(run_scenario))
        .route("/timeline", get(timeline))
        .route("/replay", post(replay))
        .layer(axum::middleware::from_fn(crate::guard::loopback_only))
        .with_state(lab)
}

async fn page() -> Html<&'static str> {
    Html(include_str!("lab.html"))
}

async fn state(State(lab): State<Arc<Lab>>) -> Response {
    Json(lab.state().await).into_response()
}

async fn start(State(lab): State<Arc<Lab>>, Json(setup): Json<Setup>) -> Response {
    answer(lab.start(setup).await.map(|()| "started".to_owned()))
}

async fn crowd(State(lab): State<Arc<Lab>>) -> Response {
    answer(lab.send_crowd().await.map(|number| format!("crowd {number} sent")))
}

#[derive(serde::Deserialize)]
struct Rate {
    rate: u32,
}

async fn keep_selling(State(lab): State<Arc<Lab>>, Query(rate): Query<Rate>) -> Response {
    answer(
        lab.keep_selling(rate.rate)
            .await
            .map(|number| format!("crowd {number} selling")),
    )
}

async fn stop_selling(State(lab): State<Arc<Lab>>) -> Response {
    answer(
        lab.stop_selling()
            .await
            .map(|number| format!("crowd {number} stopping")),
    )
}

async fn strike(State(lab): State<Arc<Lab>>, Json(strike): Json<Strike>) -> Response {
    answer(lab.strike(strike).await)
}

async fn scenarios() -> Response {
    Json(crate::scenarios::all()).into_response()
}

async fn run_scenario(State(lab): State<Arc<Lab>>, Path(id): Path<String>) -> Response {
    answer(lab.run_scenario(&id).await.map(|number| format!("crowd {number} sent")))
}

#[derive(serde::Deserialize)]
struct Step {
    upto: Option<usize>,
}

async fn replay(Query(step): Query<Step>, history: String) -> Response {
    match crate::replay::page(&history, step.upto) {
        Ok(page) => Html(page).into_response(),
        Err(why) => (StatusCode::BAD_REQUEST, why).into_response(),
    }
}

async fn timeline(State(lab): State<Arc<Lab>>) -> Response {
    match lab.timeline().await {
        Some(page) => Html(page).into_response(),
        None => Html("<p style=\"font-family:sans-serif\">No crowd yet: send one.</p>".to_owned()).into_response(),
    }
}

/// 200 with what was done, or 409 with why not (a sentence for the page).
fn answer(result: Result<String, String>) -> Response {
    match result {
        Ok(done) => (StatusCode::OK, done).into_response(),
        Err(why) => (StatusCode::CONFLICT, why).into_response(),
    }
}
