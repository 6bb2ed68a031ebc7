//! The report of one run: what was measured, the verdict, and whether the strategy
//! kept its promise. [`crate::render::text`] writes it for the terminal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use seckill::strategy::{FencingStatus, Strategy};

use super::checker::{Judgement, Verdict};
use super::crowd::{Buyers, Tally, Target};
use super::database::DatabaseCost;
use super::orders::OrdersState;
use super::sale_state::{FenceRefusals, SaleState};
use super::Options;
use crate::history::checks::Check;
use crate::history::Event;
use crate::latency::Latencies;

/// Everything measured in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub strategy: String,
    pub fencing: FencingStatus,
    /// Whether the instances queued their buyers in process before the lock.
    #[serde(default)]
    pub local_queue: bool,
    /// Into how many segments the stock was split, each behind a lock of its own.
    #[serde(default = "super::crowd::one_segment")]
    pub stock_segments: u32,
    /// Whether the sale held every buyer to one unit (`--one-per-buyer`).
    #[serde(default)]
    pub one_per_buyer: bool,
    pub hosts: Vec<String>,
    pub users: usize,
    /// Of those requests, how many came from a buyer who had sent one already.
    #[serde(default)]
    pub repeat_requests: usize,
    pub initial_stock: i64,
    // What Redis says.
    pub stock_left: i64,
    pub lucky: i64,
    pub sale_records: usize,
    /// Units whose `stock_before` appears in more than one sale record.
    pub units_sold_twice: usize,
    /// Places where the fencing token did not grow along the sales list;
    /// `None` when the sale records carry no tokens.
    pub fencing_regressions: Option<usize>,
    /// Grants that began while another was still held (the grant log).
    #[serde(default)]
    pub holders_overlapped: usize,
    /// Reads and writes the fence refused.
    #[serde(default)]
    pub fence_refused: FenceRefusals,
    /// Buyers named in more than one sale record.
    #[serde(default)]
    pub buyers_served_twice: usize,
    // What the buyers were told.
    pub told_sold: usize,
    pub told_sold_out: usize,
    /// Buyers who got no clear answer (also counted in `errors`).
    pub told_unknown: usize,
    /// Requests refused because their buyer got a unit already (409 `already_bought`).
    #[serde(default)]
    pub told_already_bought: usize,
    pub errors: BTreeMap<String, usize>,
    // How fast.
    pub seconds: f64,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    /// The lock wait the service reported with each answer (sold or sold out).
    #[serde(default)]
    pub lock_wait_p50_ms: f64,
    #[serde(default)]
    pub lock_wait_p99_ms: f64,
    /// Every such wait, for the benchmark's distribution; not kept in a demo report.
    #[serde(default, skip_serializing)]
    pub lock_waits_ms: Vec<f64>,
    pub verdict: Verdict,
    /// Whether this strategy is expected to oversell across two instances.
    pub expected_to_oversell: bool,
    /// Human-readable reasons behind the verdict.
    pub findings: Vec<String>,
    /// The MySQL strategies: what the sale cost the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseCost>,
    /// With `--orders`: the orders in MySQL, once the stream drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orders: Option<OrdersState>,
    /// The history's checks, each by name (see [`crate::history::checks`]).
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Every request and answer of the run; written to its own file, not the report's.
    #[serde(skip)]
    pub history: Vec<Event>,
}

impl Report {
    pub fn new(options: &Options, target: Target, sale: &SaleState, tally: Tally, judgement: Judgement) -> Self {
        let seconds = tally.seconds();
        let answered = tally.latencies.len();
        let mut lock_waits = tally.lock_waits_ms;
        lock_waits.sort_by(f64::total_cmp);
        let waits = Latencies::of_ms(lock_waits.iter().copied());
        // The service's own word on which strategies cannot guard two instances.
        let expected_to_oversell =
            <Strategy as clap::ValueEnum>::from_str(&target.strategy, true).is_ok_and(Strategy::expected_to_oversell);
        Report {
            strategy: target.strategy,
            fencing: target.fencing,
            local_queue: target.local_queue,
            stock_segments: target.stock_segments,
            one_per_buyer: target.one_per_buyer,
            hosts: options.hosts.clone(),
            users: options.users,
            repeat_requests: Buyers::new(options.users, options.repeat_buyers).repeats(),
            initial_stock: options.initial_stock,
            stock_left: sale.stock,
            lucky: sale.lucky,
            sale_records: sale.records.len() + sale.unreadable_records,
            units_sold_twice: judgement.units_sold_twice,
            fencing_regressions: judgement.fencing_regressions,
            holders_overlapped: judgement.holders_overlapped,
            fence_refused: sale.fence_refusals,
            buyers_served_twice: judgement.buyers_served_twice,
            told_sold: tally.sold,
            told_sold_out: tally.sold_out,
            told_unknown: tally.outcome_unknown,
            told_already_bought: tally.refused_as_repeat.len(),
            errors: tally.errors,
            seconds,
            requests_per_second: if seconds > 0.0 { answered as f64 / seconds } else { 0.0 },
            p50_ms: tally.latencies.percentile_ms(0.50),
            p95_ms: tally.latencies.percentile_ms(0.95),
            p99_ms: tally.latencies.percentile_ms(0.99),
            lock_wait_p50_ms: waits.percentile_ms(0.50),
            lock_wait_p99_ms: waits.percentile_ms(0.99),
            lock_waits_ms: lock_waits,
            verdict: judgement.verdict,
            expected_to_oversell,
            findings: judgement.findings,
            database: None,
            orders: None,
            checks: Vec::new(),
            history: Vec::new(),
        }
    }

    pub fn with_orders(mut self, orders: Option<OrdersState>) -> Self {
        self.orders = orders;
        self
    }

    pub fn with_database_cost(mut self, cost: Option<DatabaseCost>) -> Self {
        self.database = cost;
        self
    }

    /// The strategy, and how it ran when that matters for the comparison.
    pub fn label(&self) -> String {
        let mut how = Vec::new();
        if self.stock_segments > 1 {
            how.push(format!("{} stock segments", self.stock_segments));
        }
        if self.one_per_buyer {
            how.push("one per buyer".to_owned());
        }
        if self.orders.is_some() {
            how.push("orders".to_owned());
        }
        let takes_a_local_queue = <Strategy as clap::ValueEnum>::from_str(&self.strategy, true)
            .is_ok_and(|strategy| strategy.takes_a_local_queue() && strategy != Strategy::Atomic);
        if !self.local_queue && takes_a_local_queue {
            how.push("no local queue".to_owned());
        }
        if self.database.as_ref().is_some_and(|cost| cost.permits.is_none()) {
            how.push("no semaphore".to_owned());
        }
        match how.is_empty() {
            true => self.strategy.clone(),
            false => format!("{} ({})", self.strategy, how.join(", ")),
        }
    }

    pub fn error_count(&self) -> usize {
        self.errors.values().sum()
    }

    /// Whether the strategy did what it promises: a safe strategy held; a baseline
    /// oversold, which is the lesson it exists to show. A lost sale never passes.
    pub fn passed(&self) -> bool {
        match self.verdict {
            Verdict::Held => !self.expected_to_oversell,
            Verdict::Oversold => self.expected_to_oversell,
            Verdict::Lost | Verdict::WrongAnswer => false,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small held or oversold run, for the tests of what reads a report.
    pub(crate) fn report(strategy: &str, verdict: Verdict) -> Report {
        let expected_to_oversell = strategy == "none" || strategy == "local";
        Report {
            strategy: strategy.into(),
            fencing: FencingStatus::NoTokens,
            local_queue: true,
            stock_segments: 1,
            one_per_buyer: false,
            hosts: vec!["h".into()],
            users: 5,
            repeat_requests: 0,
            initial_stock: 3,
            stock_left: 0,
            lucky: 3,
            sale_records: 3,
            units_sold_twice: 0,
            fencing_regressions: None,
            holders_overlapped: 0,
            fence_refused: FenceRefusals::default(),
            buyers_served_twice: 0,
            told_sold: 3,
            told_sold_out: 2,
            told_unknown: 0,
            told_already_bought: 0,
            errors: BTreeMap::new(),
            seconds: 1.0,
            requests_per_second: 5.0,
            p50_ms: 1.0,
            p95_ms: 1.0,
            p99_ms: 1.0,
            lock_wait_p50_ms: 0.0,
            lock_wait_p99_ms: 0.0,
            lock_waits_ms: vec![],
            verdict,
            expected_to_oversell,
            findings: vec![],
            database: None,
            orders: None,
            checks: Vec::new(),
            history: Vec::new(),
        }
    }

    #[test]
    fn a_safe_strategy_passes_only_when_it_held() {
        assert!(report("redis", Verdict::Held).passed());
        assert!(!report("redis", Verdict::Oversold).passed());
        assert!(!report("redis", Verdict::Lost).passed());
    }

    #[test]
    fn a_baseline_passes_only_when_it_showed_the_oversell() {
        assert!(report("none", Verdict::Oversold).passed());
        assert!(
            !report("local", Verdict::Held).passed(),
            "a baseline that did not oversell did not show its lesson"
        );
        assert!(!report("none", Verdict::Lost).passed(), "a lost sale never passes");
    }
}
