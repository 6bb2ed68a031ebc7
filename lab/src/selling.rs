//! Keep selling: a steady load instead of the crowd, for faults that need time to show
//! (a partition that outlives a lease, a clock that jumps mid-sale). Buyers arrive at a
//! steady rate, one request each, on the two instances in turn, until the teacher stops
//! them; then the run is judged as a crowd is, from its history: every request as it
//! was sent and as it ended, the faults among them, and the sale read back from Redis.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use loadtest::history::checks::Check;
use loadtest::history::{Process, Recorder, What};
use loadtest::verdict::{self, crowd as lessons_crowd, orders, sale_state, Options, Verdict};
use seckill::sale::keys::Keys;
use tokio::sync::watch;

/// The stock a steady load sells from: more than any class will wait for.
pub const STOCK: i64 = 100_000;
/// Buyers waiting for an answer at most: past it, a new buyer is not sent (a paused
/// instance would otherwise gather them without a bound).
const MOST_IN_FLIGHT: usize = 500;
/// How long a buyer waits for its answer, as the crowd's do.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// What a steady load needs.
pub struct Load {
    pub hosts: Vec<String>,
    pub redis_url: String,
    /// The MariaDB of the orders, when the instances write them: each unit sold must be
    /// one order once the stream drained.
    pub orders_mysql_url: Option<String>,
    /// Buyers a second.
    pub rate: u32,
    /// The history, written as it happens, then whole with the faults and its timeline.
    pub live: PathBuf,
    pub faults: PathBuf,
    pub history: PathBuf,
}

/// Sells until `stop` turns true, then judges: the verdict and the checks, as JSON.
pub async fn sell(load: Load, mut stop: watch::Receiver<bool>) -> anyhow::Result<(Verdict, serde_json::Value)> {
    let keys = Keys::for_stock_at("", &load.redis_url);
    let options = Options {
        hosts: load.hosts.clone(),
        users: 1,
        repeat_buyers: 0.0,
        initial_stock: STOCK,
        redis_url: load.redis_url.clone(),
        keys: keys.clone(),
        mysql_url: load.orders_mysql_url.clone().unwrap_or_default(),
        admin_token: None,
        goose_metrics: false,
        live_history: None,
    };
    let target = lessons_crowd::prepare(&options).await?; // resets the stock to STOCK
    let recorder = Recorder::live_to(&load.live)?;
    let http = reqwest::Client::builder().timeout(ANSWER_WITHIN).build()?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut buyers = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(load.rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next: u64 = 0;
    while !*stop.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        if in_flight.load(Ordering::SeqCst) >= MOST_IN_FLIGHT {
            continue;
        }
        let host = load.hosts[next as usize % load.hosts.len()].clone();
        let (http, recorder, in_flight) = (http.clone(), recorder.clone(), in_flight.clone());
        in_flight.fetch_add(1, Ordering::SeqCst);
        buyers.spawn(buy(http, recorder, host, next, in_flight));
        next += 1;
    }
    while buyers.join_next().await.is_some() {} // each ends within ANSWER_WITHIN
    let sale = sale_state::read_sale(&load.redis_url, &keys).await?;
    let mut events = recorder.events();
    loadtest::history::merge_faults(&mut events, &load.faults)?;
    let mut checks = verdict::check_history(&events, &sale, STOCK, target.one_per_buyer);
    let orders = orders::read_if_on(&target, &options.redis_url, &keys, &options.mysql_url).await?;
    let counted = match orders {
        Some(orders) => {
            let (counted, check) = orders_check(&orders, &sale.records);
            checks.push(check);
            counted
        }
        None => Verdict::Held,
    };
    let title = format!("{}, fencing {}: a steady load", target.strategy, target.fencing.name());
    loadtest::render::timeline::write_with_page(&load.history, &title, &events, &checks)?;
    let verdict = verdict::verdict_of(counted, &checks);
    Ok((verdict, serde_json::to_value(&checks)?))
}

/// The orders against the units sold, as the crowd's verdict counts them (oversold when
/// an order is for no unit sold, lost when a unit sold has none or the stream did not
/// drain), and as a check of their own for the page.
fn orders_check(orders: &orders::OrdersState, records: &[seckill::sale::stock::SaleRecord]) -> (Verdict, Check) {
    let (oversold, lost) = orders::judge_orders(orders, records);
    let counted = Verdict::of_findings(&oversold, &lost);
    (
        counted,
        Check::of_problems("orders", oversold.into_iter().chain(lost).collect()),
    )
}

/// One buyer: one request, its sending and its answer in the history.
async fn buy(http: reqwest::Client, recorder: Recorder, host: String, index: u64, in_flight: Arc<AtomicUsize>) {
    let buyer = format!("buyer-{index}");
    let process = Process::Buyer(index);
    recorder.record(
        process,
        What::Invoke {
            buyer: Some(buyer.clone()),
            host: host.clone(),
        },
    );
    let response = http.get(format!("{host}/stock/reduce?buyer={buyer}")).send().await;
    let answer = lessons_crowd::answer_of(response).await;
    recorder.record(process, answer.in_history());
    in_flight.fetch_sub(1, Ordering::SeqCst);
}
