//! When this instance counts the lock Redis as down: step 2 of the degrade protocol,
//! downwards, judged from the instance's own acquire attempts.
//!
//! Two signs, whichever comes first:
//! - **Failures in a row**: `--degrade-after-failures` attempts failed (errors or
//!   timeouts) with no answer between them. Quick when many attempts are out at once.
//! - **Failing for a while**: every attempt has failed for `--degrade-after-ms`, counted
//!   from the send of the first failed one (or from the last answer, if that came later).
//!   Behind the local queue an instance has one attempt out at a time (per stock
//!   segment), and against a frozen Redis each fails only at the client's response
//!   timeout ([`crate::store::redis`]): by count, three timeouts in a row; by time, the first.
//!
//! Any answer (a grant, or "busy") ends the run of failures: Redis is up.

use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use crate::lock::parts::unpoisoned;

/// What counts as an outage: the two flags.
#[derive(Clone, Copy, Debug)]
pub struct OutageRule {
    /// `--degrade-after-failures`: failed attempts in a row.
    pub after_failures: u32,
    /// `--degrade-after-ms`: how long every attempt has failed. Its default (1 s) is shorter than
    /// the Redis client's response timeout (2 s), so one timeout is an outage: a Redis that does not
    /// answer one attempt in 2 s costs a switch. That is about one TTL without grants, and
    /// `--degrade-recover-ms` before the way back.
    pub after: Duration,
}

/// The outage this instance saw, for the log line that announces the switch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outage {
    /// Failed attempts in this run.
    pub failures: u32,
    /// From the run's start to the failure that completed it.
    pub lasted: Duration,
}

/// What the judge remembers between attempts.
#[derive(Default)]
struct Seen {
    /// The failed attempts of the current run.
    failures: u32,
    /// When the current run started: the first failed attempt's send.
    since: Option<Instant>,
    /// When Redis last answered. An attempt sent before it may fail after it, but
    /// Redis was up in between: the run starts no earlier.
    last_answer: Option<Instant>,
}

/// Judges the lock Redis from the attempts one instance makes.
pub struct OutageJudge {
    rule: OutageRule,
    seen: StdMutex<Seen>,
}

impl OutageJudge {
    pub fn new(rule: OutageRule) -> Self {
        OutageJudge {
            rule,
            seen: StdMutex::default(),
        }
    }

    /// Redis answered an attempt at `now`: no outage.
    pub fn answered(&self, now: Instant) {
        *unpoisoned(&self.seen) = Seen {
            last_answer: Some(now),
            ..Seen::default()
        };
    }

    /// An attempt sent at `sent` failed at `now`. Returns the outage if this failure
    /// completes one. The next run starts from nothing: the switch that follows is what
    /// this instance does about this outage.
    pub fn failed(&self, sent: Instant, now: Instant) -> Option<Outage> {
        let mut seen = unpoisoned(&self.seen);
        seen.failures += 1;
        let start = seen.last_answer.map_or(sent, |answer| answer.max(sent));
        let since = *seen.since.get_or_insert(start);
        let outage = Outage {
            failures: seen.failures,
            lasted: now.saturating_duration_since(since),
        };
        if outage.failures < self.rule.after_failures && outage.lasted < self.rule.after {
            return None;
        }
        *seen = Seen {
            last_answer: seen.last_answer,
            ..Seen::default()
        };
        Some(outage)
    }

    /// Redis is known to be unfit although it answers (it restarted empty): the next
    /// failure switches at once. An answer before it clears this, as it clears any run.
    pub fn declare_down(&self) {
        unpoisoned(&self.seen).failures = self.rule.after_failures;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: OutageRule = OutageRule {
        after_failures: 3,
        after: Duration::from_millis(1000),
    };

    fn ms(from: Instant, ms: u64) -> Instant {
        from + Duration::from_millis(ms)
    }

    #[test]
    fn three_quick_failures_in_a_row_are_an_outage() {
        let (judge, t) = (OutageJudge::new(RULE), Instant::now());
        assert_eq!(judge.failed(t, ms(t, 10)), None);
        assert_eq!(judge.failed(ms(t, 10), ms(t, 20)), None);
        let outage = judge.failed(ms(t, 20), ms(t, 30)).expect("the third failure in a row");
        assert_eq!(outage.failures, 3);
        assert_eq!(
            judge.failed(ms(t, 30), ms(t, 40)),
            None,
            "the count starts again after an outage"
        );
    }

    #[test]
    fn one_failure_that_took_as_long_as_the_rule_is_an_outage() {
        // The local queue's case: one attempt out, failed at the response timeout.
        let (judge, t) = (OutageJudge::new(RULE), Instant::now());
        assert_eq!(judge.failed(t, ms(t, 999)), None, "1 ms short");
        let judge = OutageJudge::new(RULE);
        let outage = judge.failed(t, ms(t, 1000)).expect("failing for 1 s");
        assert_eq!(
            outage,
            Outage {
                failures: 1,
                lasted: Duration::from_millis(1000)
            }
        );
    }

    #[test]
    fn the_clock_runs_from_the_first_failure_of_the_run() {
        let judge = OutageJudge::new(OutageRule {
            after_failures: 100,
            ..RULE
        });
        let t = Instant::now();
        assert_eq!(judge.failed(t, ms(t, 600)), None);
        // Sent 1000 ms after the first failure's send, failed at once.
        let outage = judge.failed(ms(t, 1000), ms(t, 1001)).expect("the run began at t");
        assert_eq!(outage.lasted, Duration::from_millis(1001));
    }

    #[test]
    fn an_answer_ends_the_run_and_restarts_its_clock() {
        let (judge, t) = (OutageJudge::new(RULE), Instant::now());
        assert_eq!(judge.failed(t, ms(t, 900)), None);
        assert_eq!(judge.failed(ms(t, 900), ms(t, 950)), None);
        judge.answered(ms(t, 960));
        assert_eq!(
            judge.failed(ms(t, 960), ms(t, 1500)),
            None,
            "one failure, 540 ms after the answer"
        );
        assert_eq!(
            judge.failed(ms(t, 1500), ms(t, 1900)),
            None,
            "two, 940 ms after the answer"
        );
    }

    #[test]
    fn a_failure_sent_before_an_answer_counts_from_the_answer() {
        // Two attempts out at once (no local queue, or two stock segments): one is
        // answered at 1900 ms, the other, sent at 0, times out at 2000 ms.
        let (judge, t) = (OutageJudge::new(RULE), Instant::now());
        judge.answered(ms(t, 1900));
        assert_eq!(judge.failed(t, ms(t, 2000)), None, "Redis answered 100 ms ago");
        let outage = judge
            .failed(ms(t, 2000), ms(t, 2900))
            .expect("failing since the answer, 1 s");
        assert_eq!(outage.lasted, Duration::from_millis(1000));
    }

    #[test]
    fn declared_down_the_next_failure_switches() {
        let (judge, t) = (OutageJudge::new(RULE), Instant::now());
        judge.declare_down();
        assert!(judge.failed(t, ms(t, 1)).is_some());
    }
}
