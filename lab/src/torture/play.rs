//! A round played on the lab: its setup started, the crowd sent, each fault struck at its
//! time after the first sale, and the history's checks read once the crowd is judged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use loadtest::history::{now_us, Event, What};
use loadtest::verdict::Verdict;
use serde::Serialize;

use super::plan::{Expected, Round, Timed};
use crate::crowd::Outcome;
use crate::lab::Lab;

/// The longest a crowd may take, from its first sale (a steady load: from its stop) to its
/// verdict: a buyer waits at most 60 s for its answer, the orders up to 30 s more to
/// drain, and the checks take seconds.
pub const LONGEST_ROUND: Duration = Duration::from_secs(120);

/// What a round came to.
#[derive(Clone, Debug, Serialize)]
pub struct Played {
    pub round: Round,
    /// What its setup and the faults that struck must come to.
    pub expected: Expected,
    /// What the checks said; `None` when the run could not be judged (the load test
    /// stopped early: its reset failed, say).
    pub verdict: Option<Verdict>,
    /// The checks that failed, or could not decide.
    pub failed: Vec<String>,
    /// How many buyers' requests the checks judged.
    pub operations: usize,
    /// The faults struck before the crowd's last answer. Those of the schedule that came
    /// later, or that the lab refused, struck nothing and are not here.
    pub struck: Vec<Timed>,
    /// Faults the lab refused or could not finish, said as it said them.
    pub troubles: Vec<String>,
    /// The crowd's report; its history, faults and timeline are beside it.
    pub report: PathBuf,
    /// The smallest round that still failed, when this one was shrunk, and its verdict.
    pub shrunk_to: Option<(Round, Option<Verdict>)>,
    pub seconds: f64,
}

impl Played {
    /// The checks judged the run.
    pub fn judged(&self) -> bool {
        self.verdict.is_some()
    }

    /// Judged, and not held.
    pub fn caught(&self) -> bool {
        self.verdict.is_some_and(|verdict| verdict != Verdict::Held)
    }

    /// The verdict as the tables say it.
    pub fn verdict_word(&self) -> &'static str {
        word(self.verdict)
    }

    /// Caught on a configuration that must hold: a hole to mend.
    pub fn is_a_hole(&self) -> bool {
        self.expected == Expected::MustHold && self.caught()
    }
}

/// A verdict as the tables say it; `not judged` for none.
pub fn word(verdict: Option<Verdict>) -> &'static str {
    verdict.map_or("not judged", Verdict::word)
}

/// Plays `round` on `lab`, whose crowds' files go into `dir`.
pub async fn play(lab: &Arc<Lab>, round: &Round, dir: &Path) -> anyhow::Result<Played> {
    let began = std::time::Instant::now();
    let log_before = lab.state().await.log.len();
    lab.start(round.setup.clone()).await.map_err(|error| anyhow!(error))?;
    let crowd = match round.steady {
        Some(steady) => lab.keep_selling(steady.rate).await,
        None => lab.send_crowd_of(round.crowd).await,
    };
    let crowd = crowd.map_err(|error| anyhow!(error))?;
    // The schedule's clock starts at the first sale: the load test resets the sale first,
    // and a fault before that would stop the run unjudged, not test the lock.
    lab.first_sale().await?;
    let first_sale = tokio::time::Instant::now();
    let (struck_at, mut troubles) = strike_on_schedule(lab, round, first_sale).await;
    let mut sold_until = first_sale;
    if let Some(steady) = round.steady {
        tokio::time::sleep_until(first_sale + Duration::from_millis(steady.ms)).await;
        // A steady load that ended by itself has its outcome, which says why.
        let _ = lab.stop_selling().await;
        sold_until = tokio::time::Instant::now();
    }
    let outcome = crowd_outcome(lab, round, sold_until, log_before, &mut troubles).await?;
    let report = dir.join(format!("crowd-{crowd}.json"));
    let history = read_history(&report);
    // A fault struck after the last answer, while the checks ran, changed nothing.
    let last_answer = history
        .iter()
        .filter(|event| is_an_answer(event))
        .map(|event| event.at_us)
        .max();
    let struck: Vec<Timed> = struck_at
        .into_iter()
        .filter(|(_, at_us)| last_answer.is_some_and(|last| *at_us < last))
        .map(|(timed, _)| timed)
        .collect();
    let as_struck = Round {
        schedule: struck.clone(),
        ..round.clone()
    };
    Ok(Played {
        round: round.clone(),
        expected: as_struck.expected(),
        failed: failed_checks(&outcome.checks),
        verdict: outcome.judged,
        operations: history
            .iter()
            .filter(|event| matches!(event.what, What::Invoke { .. }))
            .count(),
        struck,
        troubles,
        report,
        shrunk_to: None,
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// Waits for the crowd's outcome, for [`LONGEST_ROUND`] after `sold_until` at most (its
/// first sale; a steady load's stop).
/// Adds to `troubles` the faults the lab stopped since `log_before` (its log's length when
/// the round began) and, when the crowd could not be judged, why.
async fn crowd_outcome(
    lab: &Arc<Lab>,
    round: &Round,
    sold_until: tokio::time::Instant,
    log_before: usize,
    troubles: &mut Vec<String>,
) -> anyhow::Result<Outcome> {
    loop {
        let state = lab.state().await;
        if let Some(outcome) = state.crowd.and_then(|crowd| crowd.outcome) {
            let new_lines = state.log.into_iter().skip(log_before);
            troubles.extend(new_lines.filter(|line| line.contains("the fault stopped")));
            if outcome.judged.is_none() {
                troubles.push(format!("not judged: {}", outcome.error.trim()));
            }
            return Ok(outcome);
        }
        if sold_until.elapsed() > LONGEST_ROUND {
            bail!(
                "the crowd had no verdict within {LONGEST_ROUND:?} of its first sale (or its stop): {}",
                round.describe()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Strikes each fault of `round` at its time after `first_sale`, while the crowd is not
/// judged: the faults struck, each with the moment it was (on the histories' clock), and
/// the lab's refusals.
async fn strike_on_schedule(
    lab: &Arc<Lab>,
    round: &Round,
    first_sale: tokio::time::Instant,
) -> (Vec<(Timed, u64)>, Vec<String>) {
    let (mut struck_at, mut refusals) = (Vec::new(), Vec::new());
    for timed in &round.schedule {
        tokio::time::sleep_until(first_sale + Duration::from_millis(timed.at_ms)).await;
        if !lab.state().await.crowd.is_some_and(|crowd| crowd.running) {
            break; // judged already: later faults strike nothing
        }
        match lab.strike(timed.strike.clone()).await {
            Ok(_) => struck_at.push((timed.clone(), now_us())),
            Err(refused) => refusals.push(format!("refused: {}: {refused}", timed.strike.describe())),
        }
    }
    (struck_at, refusals)
}

/// The names of the checks that failed or could not decide, from the report's list.
fn failed_checks(checks: &serde_json::Value) -> Vec<String> {
    let checks = checks.as_array().map(Vec::as_slice).unwrap_or_default();
    checks
        .iter()
        .filter(|check| !matches!(check["status"].as_str(), Some("pass" | "skipped")))
        .filter_map(|check| check["name"].as_str().map(str::to_owned))
        .collect()
}

fn is_an_answer(event: &Event) -> bool {
    matches!(event.what, What::Ok { .. } | What::Fail { .. } | What::Info { .. })
}

/// The crowd's history (its `.history.jsonl` beside the report, one event a line); empty
/// when the load test wrote none.
fn read_history(report: &Path) -> Vec<Event> {
    let history = loadtest::history::beside_report(report, "history.jsonl");
    let text = std::fs::read_to_string(history).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
