//! When this instance counts the lock Redis as down: step 2 of the degrade protocol,
//! downwards, judged from the instance's own acquire attempts.
//!
//! Two signs, whichever comes first:
//! - **Failures in a row**: `--degrade-after-failures` attempts failed (errors or
//!   timeouts) with no answer between them. Quick when many attempts are out at once.
//! - **Failing for a while**: every attempt has failed for `--degrade-after-ms`, counted
//!   from the moment the first of them was sent. Behind the local queue an instance has
//!   one attempt out at a time, and against a frozen Redis each fails only at the
//!   response timeout (2 s): by count, three timeouts in a row, 6 s; by time, the first.
//!
//! Any answer (a grant, or "busy") ends the run of failures: Redis is up.

use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use crate::lock::parts::unpoisoned;

/// What counts as an outage.
#[derive(Clone, Copy, Debug)]
pub struct OutageRule {
    /// Failed attempts in a row.
    pub failures_in_a_row: u32,
    /// Or: how long every attempt has failed, from the first failed one's send.
    pub failing_for: Duration,
}

/// The outage this instance saw, for the log line that announces the switch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outage {
    pub failures_in_a_row: u32,
    pub failing_for: Duration,
}

/// The run of failed attempts so far.
#[derive(Default)]
struct Failing {
    in_a_row: u32,
    /// When the first failed attempt of the run was sent.
    since: Option<Instant>,
}

/// Judges the lock Redis from the attempts one instance makes.
pub struct OutageJudge {
    rule: OutageRule,
    failing: StdMutex<Failing>,
}

impl OutageJudge {
    pub fn new(rule: OutageRule) -> Self {
        OutageJudge {
            rule,
            failing: StdMutex::default(),
        }
    }

    /// Redis answered an attempt: no outage.
    pub fn answered(&self) {
        *unpoisoned(&self.failing) = Failing::default();
    }

    /// An attempt sent at `sent` failed. The outage, if this failure completes one;
    /// the count starts again after it (the switch that follows is the answer).
    pub fn failed(&self, sent: Instant) -> Option<Outage> {
        let mut failing = unpoisoned(&self.failing);
        failing.in_a_row += 1;
        let since = *failing.since.get_or_insert(sent);
        let outage = Outage {
            failures_in_a_row: failing.in_a_row,
            failing_for: since.elapsed(),
        };
        let down =
            outage.failures_in_a_row >= self.rule.failures_in_a_row || outage.failing_for >= self.rule.failing_for;
        if !down {
            return None;
        }
        *failing = Failing::default();
        Some(outage)
    }

    /// Redis is known to be unfit without a failed attempt (it restarted empty): the
    /// next failure switches at once.
    pub fn declare_down(&self) {
        let mut failing = unpoisoned(&self.failing);
        failing.in_a_row = self.rule.failures_in_a_row;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: OutageRule = OutageRule {
        failures_in_a_row: 3,
        failing_for: Duration::from_millis(1000),
    };

    #[test]
    fn three_quick_failures_in_a_row_are_an_outage() {
        let judge = OutageJudge::new(RULE);
        assert_eq!(judge.failed(Instant::now()), None);
        assert_eq!(judge.failed(Instant::now()), None);
        let outage = judge.failed(Instant::now()).expect("the third failure in a row");
        assert_eq!(outage.failures_in_a_row, 3);
        assert_eq!(
            judge.failed(Instant::now()),
            None,
            "the count starts again after an outage"
        );
    }

    #[test]
    fn one_timeout_as_long_as_the_rule_is_an_outage() {
        // The local queue's case: one attempt out, sent 2 s ago, failed at the response timeout.
        let judge = OutageJudge::new(RULE);
        let sent = Instant::now() - Duration::from_secs(2);
        let outage = judge.failed(sent).expect("failing for 2 s");
        assert_eq!(outage.failures_in_a_row, 1);
        assert!(outage.failing_for >= Duration::from_secs(2), "{outage:?}");
    }

    #[test]
    fn the_clock_runs_from_the_first_failure_of_the_run() {
        let judge = OutageJudge::new(OutageRule {
            failures_in_a_row: 100,
            ..RULE
        });
        assert_eq!(judge.failed(Instant::now() - Duration::from_millis(600)), None);
        assert_eq!(judge.failed(Instant::now()), None, "failing for 600 ms");
        std::thread::sleep(Duration::from_millis(450));
        // Sent just now, but the run began over 1 s ago.
        let outage = judge.failed(Instant::now()).expect("failing for over 1 s");
        assert_eq!(outage.failures_in_a_row, 3);
    }

    #[test]
    fn an_answer_ends_the_run() {
        let judge = OutageJudge::new(RULE);
        judge.failed(Instant::now() - Duration::from_millis(900));
        judge.failed(Instant::now());
        judge.answered();
        assert_eq!(judge.failed(Instant::now()), None, "one failure after an answer");
        assert_eq!(judge.failed(Instant::now()), None, "two");
    }

    #[test]
    fn declared_down_the_next_failure_switches() {
        let judge = OutageJudge::new(RULE);
        judge.declare_down();
        assert!(judge.failed(Instant::now()).is_some());
    }
}
