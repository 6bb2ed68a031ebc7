//! The crowd: resets the sale through the service, then fires goose users, each sending
//! exactly one `GET /stock/reduce?buyer=<id>`, alternating between the hosts, and
//! tallies what each buyer was told. A share of the users buy again as an earlier buyer
//! ([`Buyers`]), through another host.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use goose::config::GooseConfiguration;
use goose::prelude::*;
use tokio::sync::Mutex;

use seckill::api::ReduceAnswer;

use super::Options;
use crate::history::{self, Process, Recorder, What};
use crate::latency::Latencies;

/// Launch rate, users per second: high enough that all 500 are in flight at once.
const LAUNCH_RATE: &str = "5000";
/// How long a host may take to say what it runs, or to reset the sale.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request timeout, seconds: longer than the service's own request timeout.
const REQUEST_TIMEOUT_SECS: &str = "90";
/// Answers after which the buyer cannot know whether a unit was sold: the service said
/// so (504 `sale_outcome_unknown` or `request_timeout`), or no answer arrived at all.
const UNKNOWN_OUTCOME_ANSWERS: [&str; 5] = [
    "504 sale_outcome_unknown",
    "504 request_timeout",
    "timeout",
    "connection failed",
    "unreadable answer",
];

fn outcome_unknown(kind: &str) -> bool {
    UNKNOWN_OUTCOME_ANSWERS.contains(&kind)
}

/// What the instances said about themselves before the attack: their `GET /healthz`.
pub type Target = seckill::api::Health;

/// The largest share of repeat requests a crowd may have: every other user.
pub const MAX_REPEAT_BUYERS: f64 = 0.5;

/// Who each goose user is. Users go to the hosts in turn (user `i` to host `i mod
/// hosts`), and every `stride`-th user buys again as the user just before it: the two
/// requests leave together for two instances and race there, where a check in one
/// instance's memory would not see the other. The repeats are spread through the whole
/// crowd, so that some come while units are left.
#[derive(Clone, Copy, Debug)]
pub struct Buyers {
    repeats: usize,
    /// One user in `stride` is a repeat (while `repeats` last); 0 when none is.
    stride: usize,
}

impl Buyers {
    /// `users` requests, a share `repeat` of them (rounded down, at most
    /// [`MAX_REPEAT_BUYERS`]) from buyers who sent one already.
    pub fn new(users: usize, repeat: f64) -> Self {
        // Rounded down, so that one user in `stride` (2 at least) is a repeat.
        let repeats = (users as f64 * repeat.clamp(0.0, MAX_REPEAT_BUYERS)).floor() as usize;
        Buyers {
            repeats,
            stride: users.checked_div(repeats).unwrap_or(0),
        }
    }

    fn is_repeat(&self, user: usize) -> bool {
        self.stride > 1 && user % self.stride == self.stride - 1 && user / self.stride < self.repeats
    }

    /// The buyer id user `user` sends.
    pub fn buyer(&self, user: usize) -> String {
        let buyer = if self.is_repeat(user) { user - 1 } else { user };
        format!("buyer-{buyer}")
    }

    /// Requests sent by a buyer who had sent one already.
    pub fn repeats(&self) -> usize {
        self.repeats
    }
}

pub(crate) fn one_segment() -> u32 {
    1
}

/// What the buyers were told, gathered from every goose user.
#[derive(Default)]
pub struct Tally {
    pub sold: usize,
    pub sold_out: usize,
    /// Answers that do not say whether a unit was sold (also counted in `errors`).
    pub outcome_unknown: usize,
    /// The buyers refused a second unit (409 `already_bought`), one entry per refusal.
    pub refused_as_repeat: Vec<String>,
    /// Every error, by kind. All but the `outcome_unknown` ones sold nothing.
    pub errors: BTreeMap<String, usize>,
    /// How long each buyer waited for an answer.
    pub latencies: Latencies,
    /// The lock wait of every answered sale or sold-out answer, as the service reported it.
    pub lock_waits_ms: Vec<f64>,
    pub first_sent: Option<Instant>,
    pub last_answered: Option<Instant>,
}

/// One buyer's answer.
pub enum Answer {
    /// A unit, as the service's answer names it.
    Sold(Box<ReduceAnswer>),
    SoldOut(Box<ReduceAnswer>),
    /// 409 `already_bought`: the buyer got a unit before (`--one-per-buyer`).
    AlreadyBought,
    /// The error's kind: `503 lock_timeout`, `timeout`, `connection failed`, ...
    Error(String),
}

impl Answer {
    /// How the answer ends its request in the history.
    pub fn in_history(&self) -> What {
        match self {
            Answer::Sold(answer) => match &answer.sold_unit {
                Some(unit) => What::Ok {
                    instance: answer.instance.clone(),
                    sold_unit: unit.clone(),
                    fencing_token: answer.fencing_token.clone(),
                },
                // A seller that does not name its unit: the sale records settle it.
                None => What::Info {
                    answer: history::SOLD_UNNAMED.into(),
                },
            },
            Answer::SoldOut(_) => What::Fail {
                answer: history::SOLD_OUT.into(),
            },
            Answer::AlreadyBought => What::Fail {
                answer: "409 already_bought".into(),
            },
            Answer::Error(kind) if outcome_unknown(kind) => What::Info { answer: kind.clone() },
            Answer::Error(kind) => What::Fail { answer: kind.clone() },
        }
    }
}

impl Tally {
    /// One answer to a request that named `buyer` (the benchmark's name none).
    pub fn record(&mut self, buyer: Option<&str>, answer: Answer, sent: Instant, answered: Instant) {
        match answer {
            Answer::Sold(answer) => {
                self.sold += 1;
                self.lock_waits_ms.push(answer.lock_wait_ms);
            }
            Answer::SoldOut(answer) => {
                self.sold_out += 1;
                self.lock_waits_ms.push(answer.lock_wait_ms);
            }
            Answer::AlreadyBought => self.refused_as_repeat.push(buyer.unwrap_or_default().to_owned()),
            Answer::Error(kind) if outcome_unknown(&kind) => {
                self.outcome_unknown += 1;
                *self.errors.entry(kind).or_default() += 1;
            }
            Answer::Error(kind) => *self.errors.entry(kind).or_default() += 1,
        }
        self.latencies.record(answered - sent);
        self.first_sent = Some(self.first_sent.map_or(sent, |first| first.min(sent)));
        self.last_answered = Some(self.last_answered.map_or(answered, |last| last.max(answered)));
    }

    /// From the first request sent to the last answer received.
    pub fn seconds(&self) -> f64 {
        match (self.first_sent, self.last_answered) {
            (Some(first), Some(last)) => (last - first).as_secs_f64(),
            _ => 0.0,
        }
    }
}

/// Asks every host what it runs (they must agree, and sell where the load test reads),
/// then resets the sale through the first.
pub async fn prepare(options: &Options) -> anyhow::Result<Target> {
    let target = target_of(&options.hosts).await?;
    if target.key_prefix != options.keys.prefix() {
        bail!(
            "the instances sell under --key-prefix {:?}, but the load test would read the sale under {:?}: \
             give the load test the same --key-prefix (or SECKILL_KEY_PREFIX)",
            target.key_prefix,
            options.keys.prefix()
        );
    }
    let http = reqwest::Client::builder().timeout(HEALTH_TIMEOUT).build()?;
    let host = &options.hosts[0];
    let mut reset = http
        .post(format!("{host}/stock/reset"))
        .json(&serde_json::json!({ "stock": options.initial_stock }));
    if let Some(token) = &options.admin_token {
        reset = reset.bearer_auth(token);
    }
    reset
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .with_context(|| format!("cannot reset the stock through {host}/stock/reset"))?;
    Ok(target)
}

/// `GET /healthz` of a host that may still be starting: the lessons start the instances
/// in the background and the load test right after them, as a reader types it, so a
/// refused connection is asked again until [`HEALTH_TIMEOUT`] has passed.
async fn health_of_starting(http: &reqwest::Client, host: &str) -> reqwest::Result<reqwest::Response> {
    let started = Instant::now();
    loop {
        match http.get(format!("{host}/healthz")).send().await {
            Err(error) if error.is_connect() && started.elapsed() < HEALTH_TIMEOUT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answer => return answer,
        }
    }
}

/// What every host runs; they must agree. Reads only, changes nothing.
pub async fn target_of(hosts: &[String]) -> anyhow::Result<Target> {
    let http = reqwest::Client::builder().timeout(HEALTH_TIMEOUT).build()?;
    let mut targets: Vec<Target> = Vec::new();
    for host in hosts {
        let target: Target = health_of_starting(&http, host)
            .await
            .and_then(|response| response.error_for_status())
            .with_context(|| {
                format!("no seckill answers at {host}. Start one with `seckill serve --port <port> --lock <strategy>` (or `make demo`), or fix --hosts")
            })?
            .json()
            .await
            .with_context(|| format!("{host}/healthz did not answer like seckill"))?;
        targets.push(target);
    }
    let first = targets[0].clone();
    if targets.iter().any(|t| {
        t.strategy != first.strategy
            || t.fencing != first.fencing
            || t.local_queue != first.local_queue
            || t.stock_segments != first.stock_segments
            || t.one_per_buyer != first.one_per_buyer
            || t.orders != first.orders
            || t.key_prefix != first.key_prefix
    }) {
        let pairs: Vec<String> = hosts
            .iter()
            .zip(&targets)
            .map(|(h, t)| {
                format!(
                    "{h} runs `{}` with fencing {:?}, local queue {}, {} stock segment(s), one per buyer {}, orders {}, key prefix {:?}",
                    t.strategy, t.fencing, t.local_queue, t.stock_segments, t.one_per_buyer, t.orders, t.key_prefix
                )
            })
            .collect();
        bail!(
            "the instances run different strategies ({}); start them with the same --lock, --fencing, --local-queue, --stock-segments, --one-per-buyer, --orders and --key-prefix",
            pairs.join(", ")
        );
    }
    Ok(first)
}

/// Runs goose: `users` users, one iteration each, launched at once. Each request and
/// its answer go into `history`.
pub async fn attack(options: &Options, history: &Recorder) -> anyhow::Result<Tally> {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let crowd = Arc::new(Crowd {
        hosts: options.hosts.clone(),
        buyers: Buyers::new(options.users, options.repeat_buyers),
        tally: tally.clone(),
        history: history.clone(),
    });
    let buy: TransactionFunction = Arc::new(move |user| Box::pin(buy_one(user, crowd.clone())));
    GooseAttack::initialize_with_config(GooseConfiguration::default())?
        .register_scenario(scenario!("FlashSale").register_transaction(Transaction::new(buy).set_name("reduce")))
        .set_default(GooseDefault::Host, options.hosts[0].as_str())?
        .set_default(GooseDefault::Users, options.users)?
        .set_default(GooseDefault::IncreaseRate, LAUNCH_RATE)?
        .set_default(GooseDefault::Iterations, 1)?
        .set_default(GooseDefault::Timeout, REQUEST_TIMEOUT_SECS)?
        .set_default(GooseDefault::NoPrintMetrics, !options.goose_metrics)?
        .set_default(GooseDefault::NoTelnet, true)?
        .set_default(GooseDefault::Quiet, 1)?
        .execute()
        .await
        .context("goose could not run the attack")?;
    let tally = std::mem::take(&mut *tally.lock().await);
    Ok(tally)
}

/// What every goose user shares: where to buy, as whom, and where the answers go.
struct Crowd {
    hosts: Vec<String>,
    buyers: Buyers,
    tally: Arc<Mutex<Tally>>,
    history: Recorder,
}

/// One user: one request as its buyer to its host, and what the answer meant. The
/// user's index is its process in the history.
async fn buy_one(user: &mut GooseUser, crowd: Arc<Crowd>) -> TransactionResult {
    let index = user.weighted_users_index;
    let (buyer, host) = (crowd.buyers.buyer(index), &crowd.hosts[index % crowd.hosts.len()]);
    let process = Process::Buyer(index as u64);
    crowd.history.record(
        process,
        What::Invoke {
            buyer: Some(buyer.clone()),
            host: host.clone(),
        },
    );
    let sent = Instant::now();
    let goose = user
        .get_named(&format!("{host}/stock/reduce?buyer={buyer}"), "reduce")
        .await?;
    let answer = answer_of(goose.response).await;
    let answered = Instant::now();
    crowd.history.record(process, answer.in_history());
    crowd.tally.lock().await.record(Some(&buyer), answer, sent, answered);
    Ok(())
}

/// What an answer to `/stock/reduce` (or its absence) means for the buyer.
pub async fn answer_of(response: Result<reqwest::Response, reqwest::Error>) -> Answer {
    match response {
        Err(error) => Answer::Error(if error.is_timeout() {
            "timeout".into()
        } else {
            "connection failed".into()
        }),
        Ok(response) if response.status().is_success() => match response.json::<ReduceAnswer>().await {
            Ok(body) if body.sold => Answer::Sold(Box::new(body)),
            Ok(body) => Answer::SoldOut(Box::new(body)),
            Err(_) => Answer::Error("unreadable answer".into()),
        },
        Ok(response) if response.status() == reqwest::StatusCode::CONFLICT => Answer::AlreadyBought,
        Ok(response) => {
            let status = response.status().as_u16();
            let code = response
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|body| body.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_else(|| "http".to_owned());
            Answer::Error(format!("{status} {code}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{outcome_unknown, Buyers};

    #[test]
    fn every_stride_th_user_buys_again_as_the_user_before_it() {
        let buyers = Buyers::new(10, 0.2);
        assert_eq!(buyers.repeats(), 2);
        let ids: Vec<String> = (0..10).map(|user| buyers.buyer(user)).collect();
        let numbers = [0, 1, 2, 3, 3, 5, 6, 7, 8, 8];
        assert_eq!(
            ids,
            numbers.map(|n| format!("buyer-{n}")),
            "every fifth user repeats the one before"
        );
        let none = Buyers::new(500, 0.0);
        assert_eq!((none.repeats(), none.buyer(499).as_str()), (0, "buyer-499"));
        let most = Buyers::new(10, 0.9);
        assert_eq!(most.repeats(), 5, "at most every other user");
        assert_eq!((most.buyer(0), most.buyer(1)), ("buyer-0".into(), "buyer-0".into()));
        let odd = Buyers::new(5, 0.5);
        assert_eq!(odd.repeats(), 2, "2.5 rounded down: users 1 and 3");
        assert_eq!((odd.buyer(3), odd.buyer(4)), ("buyer-2".into(), "buyer-4".into()));
    }

    #[test]
    fn only_answers_that_leave_the_sale_open_count_as_unknown() {
        assert!(outcome_unknown("504 sale_outcome_unknown"));
        assert!(outcome_unknown("timeout"), "no answer at all");
        assert!(!outcome_unknown("503 lock_timeout"), "a 503 means nothing was sold");
        assert!(!outcome_unknown("503 stock_backend_unavailable"));
    }
}
