//! What the service sells per second, measured on the service and not on the load
//! generator: keep-alive connections that send the next request the moment the last
//! answer arrives, for a few seconds, against a stock that does not run out.
//!
//! The 500-buyer crowd cannot measure this: its 500 requests are launched in about
//! 0.1 s, so the fast strategies finish before the last buyer is even sent, and its
//! requests per second is goose's launch rate. Here the connections are busy the whole
//! window, so sales per second is the service's pace (or the machine's, when the load
//! generator shares its cores: [`super::cpu`] tells which).
//!
//! - **Sustained**: `connections` connections, split between the instances.
//! - **Serial**: one connection to one instance; no contention, so one sale's whole
//!   path (HTTP, acquire, read, write, release) end to end.
//! - **After the sell-out** ([`measure_sold_out`]): the same connections against a sale
//!   with nothing left, the tail of a flash sale, where every answer is "sold out".
//!
//! Each window ends with the same check as the crowd's: the sale is read back from Redis
//! and judged, so a strategy that oversells under sustained load is caught too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::breakdown::HandOver;
use crate::latency::Latencies;
use crate::verdict::checker::{self, Verdict};
use crate::verdict::crowd::{self, answer_of, Answer, Tally};
use crate::verdict::sale_state;
use crate::verdict::Options;

/// Enough units that no window sells out: 64 connections at 100k sales/s for 10 s.
pub const ENDLESS_STOCK: i64 = 100_000_000;
/// Answers in the first moments are not counted: connections are still opening.
const WARM_UP: Duration = Duration::from_millis(300);

/// How hard, and for how long.
#[derive(Clone, Debug)]
pub struct Load {
    pub connections: usize,
    pub seconds: f64,
}

/// What one window measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Throughput {
    pub connections: usize,
    pub seconds: f64,
    pub sales_per_second: f64,
    /// Every answer, sold or not.
    pub answers_per_second: f64,
    pub sold: usize,
    pub errors: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The sale read back from Redis after the window: held, oversold or lost.
    pub verdict: Verdict,
    /// The window's hand-overs, from the grant log; `None` without a lock, or from
    /// results written before it existed.
    #[serde(default)]
    pub hand_over: Option<HandOver>,
    /// When the window's timed part began and ended (not kept in the JSON).
    #[serde(skip)]
    pub counted: Option<std::ops::Range<Instant>>,
}

/// The answers that fell inside the timed window.
#[derive(Default)]
struct Window {
    sold: usize,
    latencies: Latencies,
}

/// Resets the sale to [`ENDLESS_STOCK`], then keeps `load.connections` connections busy.
pub async fn measure(options: &Options, load: &Load) -> anyhow::Result<Throughput> {
    measure_from(ENDLESS_STOCK, options, load).await
}

/// Resets the sale to nothing, then keeps `load.connections` connections busy: how fast
/// the buyers who come after the last unit are told so.
pub async fn measure_sold_out(options: &Options, load: &Load) -> anyhow::Result<Throughput> {
    measure_from(0, options, load).await
}

async fn measure_from(initial_stock: i64, options: &Options, load: &Load) -> anyhow::Result<Throughput> {
    let options = Options {
        initial_stock,
        ..options.clone()
    };
    let target = crowd::prepare(&options).await?;
    if target.one_per_buyer {
        // The sustained load names no buyers, and such a sale refuses every request.
        bail!("the sustained load sends no buyer ids, so a sale with --one-per-buyer would refuse every request; bench it without +one-per-buyer");
    }
    // Grants logged before this window (a peer that keeps no grant log resets none) are not its hand-overs.
    let window_opened_us = seckill::sale::grant_log::unix_us();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let window = Arc::new(Mutex::new(Window::default()));
    let counted_from = Instant::now() + WARM_UP;
    let deadline = counted_from + Duration::from_secs_f64(load.seconds);
    let connections: Vec<_> = (0..load.connections)
        .map(|index| {
            let host = options.hosts[index % options.hosts.len()].clone();
            let (tally, window) = (tally.clone(), window.clone());
            tokio::spawn(async move { keep_buying(&host, counted_from, deadline, &tally, &window).await })
        })
        .collect();
    for connection in connections {
        connection.await.context("a load connection panicked")??;
    }
    let tally = std::mem::take(&mut *tally.lock().await);
    let window = std::mem::take(&mut *window.lock().await);
    let sale = sale_state::read_sale(&options.redis_url, &options.keys).await?;
    // With --orders, the verdict waits for the orders to drain, and judges them too.
    let orders =
        crate::verdict::orders::read_if_on(&target, &options.redis_url, &options.keys, &options.mysql_url).await?;
    let judgement = checker::judge(initial_stock, &target, &sale, &tally, orders.as_ref());
    let seconds = load.seconds;
    Ok(Throughput {
        connections: load.connections,
        seconds,
        sales_per_second: window.sold as f64 / seconds,
        answers_per_second: window.latencies.len() as f64 / seconds,
        sold: tally.sold,
        errors: tally.errors.values().sum(),
        p50_ms: window.latencies.percentile_ms(0.50),
        p99_ms: window.latencies.percentile_ms(0.99),
        verdict: judgement.verdict,
        hand_over: HandOver::of(
            sale.grants
                .iter()
                .filter(|grant| grant.granted_at_us >= window_opened_us),
        ),
        counted: Some(counted_from..deadline),
    })
}

/// The HTTP client of one load connection: it keeps one connection open and reuses it.
pub fn one_connection_client(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(timeout)
        .build()
        .context("cannot build an HTTP client")
}

/// One keep-alive connection: the next request as soon as the last answer is in.
/// Every answer goes to the tally the verdict is judged on; only those sent and
/// answered inside the window are timed, so the rate covers exactly the window.
async fn keep_buying(
    host: &str,
    counted_from: Instant,
    deadline: Instant,
    tally: &Mutex<Tally>,
    window: &Mutex<Window>,
) -> anyhow::Result<()> {
    let http = one_connection_client(Duration::from_secs(90))?;
    let url = format!("{host}/stock/reduce");
    while Instant::now() < deadline {
        let sent = Instant::now();
        let answer = answer_of(http.get(&url).send().await).await;
        let answered = Instant::now();
        if sent >= counted_from && answered <= deadline {
            let mut window = window.lock().await;
            window.sold += usize::from(matches!(answer, Answer::Sold { .. }));
            window.latencies.record(answered - sent);
        }
        tally.lock().await.record(None, answer, sent, answered);
    }
    Ok(())
}
