//! A round played on the lab: its setup started, the crowd sent, each fault struck at its
//! time, and the history's checks read once the crowd has its answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde::Serialize;

use super::plan::{Expected, Round, Timed};
use crate::lab::Lab;

/// The longest a round's crowd may take to get its answers: a buyer waits at most 30 s
/// for the lock, and a fault lasts at most a few seconds.
pub const LONGEST_ROUND: Duration = Duration::from_secs(120);

/// What a round came to.
#[derive(Clone, Debug, Serialize)]
pub struct Played {
    pub round: Round,
    pub expected: Expected,
    /// `held`, `oversold`, `lost`, `wrong answer`, or `none` when the run could not be judged.
    pub verdict: String,
    /// The checks that failed, or could not decide.
    pub failed: Vec<String>,
    /// How many buyers' requests the checks judged.
    pub operations: usize,
    /// The faults struck while the crowd was buying; those of the schedule that came after
    /// its last answer struck nothing and are not here.
    pub struck: Vec<Timed>,
    /// Faults the lab refused or could not finish, said as it said them.
    pub troubles: Vec<String>,
    /// The crowd's report; its history, faults and timeline are beside it.
    pub report: PathBuf,
    pub seconds: f64,
}

impl Played {
    /// A verdict other than held, on a configuration that must hold: a hole.
    pub fn is_a_hole(&self) -> bool {
        self.expected == Expected::MustHold && self.verdict != "held"
    }

    /// The checks found what a known hole does.
    pub fn caught(&self) -> bool {
        self.verdict != "held" && self.verdict != "none"
    }
}

/// Plays `round` on `lab`, whose crowds' files go into `dir`.
pub async fn play(lab: &Arc<Lab>, round: &Round, dir: &std::path::Path) -> anyhow::Result<Played> {
    let began = Instant::now();
    lab.start(round.setup.clone()).await.map_err(|error| anyhow!(error))?;
    let crowd = lab.send_crowd_of(round.crowd).await.map_err(|error| anyhow!(error))?;
    let sent = tokio::time::Instant::now();
    let (mut troubles, mut struck) = (Vec::new(), Vec::new());
    for timed in &round.schedule {
        tokio::time::sleep_until(sent + Duration::from_millis(timed.at_ms)).await;
        let buying = lab.state().await.crowd.is_some_and(|crowd| crowd.running);
        if !buying {
            break; // the crowd has every answer: what comes later strikes nothing
        }
        match lab.strike(timed.strike.clone()).await {
            Ok(_) => struck.push(timed.clone()),
            Err(refused) => troubles.push(format!("{}: {refused}", timed.strike.describe())),
        }
    }
    let outcome = loop {
        let state = lab.state().await;
        if let Some(outcome) = state.crowd.and_then(|crowd| crowd.outcome) {
            troubles.extend(state.log.into_iter().filter(|line| line.contains("the fault stopped")));
            break outcome;
        }
        if began.elapsed() > LONGEST_ROUND {
            bail!(
                "the crowd had no verdict within {LONGEST_ROUND:?}: {}",
                round.describe()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let checks = outcome.checks.as_array().cloned().unwrap_or_default();
    let failed = checks
        .iter()
        .filter(|check| !matches!(check["status"].as_str(), Some("pass" | "skipped")))
        .filter_map(|check| check["name"].as_str().map(str::to_owned))
        .collect();
    let report = dir.join(format!("crowd-{crowd}.json"));
    // A fault drawn for after the last answer struck nothing, and changes no expectation.
    let as_struck = Round {
        schedule: struck.clone(),
        ..round.clone()
    };
    Ok(Played {
        round: round.clone(),
        expected: as_struck.expected(),
        verdict: outcome.verdict,
        failed,
        operations: operations_in(&report),
        struck,
        troubles,
        report,
        seconds: began.elapsed().as_secs_f64(),
    })
}

/// How many requests the crowd's history holds (its `.history.jsonl`, one event a line:
/// a request is its invocation).
fn operations_in(report: &std::path::Path) -> usize {
    use loadtest::history::{Event, What};
    let history = loadtest::history::beside_report(report, "history.jsonl");
    let text = std::fs::read_to_string(history).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .filter(|event| matches!(event.what, What::Invoke { .. }))
        .count()
}
