//! The test oracle: compares the sale as Redis holds it after the attack
//! ([`super::sale_state`]) with what the buyers were told.
//!
//! ## What is checked
//! - **oversold**: `lucky > initial`, `stock + lucky != initial`, `sales != lucky`,
//!   a negative stock, two sale records that read the same `stock_before` of the same
//!   segment (one unit sold twice), or fencing tokens of one source and one segment
//!   that go backwards along the sales list (two holders of one lock overlapped);
//!   With `--one-per-buyer`, also a buyer named in two sale records;
//! - **lost**: `lucky` is not what the buyers were told: fewer than the buyers told
//!   "sold", or more than those plus the buyers whose outcome is unknown (504); or a
//!   buyer refused a second unit (409 `already_bought`) who has no sale record.
//!
//! And what explains a verdict, without deciding it: the holders that overlapped (from
//! the grant log, [`seckill::sale::grant_log`]) and the reads and writes the fence refused.
//! With fencing on, overlaps may happen and the fence refuses them; with it off, they
//! are the units sold twice.
//!
//! A run during which the sale was reset (by another load test, say) is not judged at
//! all: [`super::run`] refuses it as invalid.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use seckill::sale::grant_log::overlapping_holders;
use seckill::sale::stock::SaleRecord;
use seckill::strategy::FencingStatus;

use super::crowd::{Tally, Target};
use super::orders::{judge_orders, OrdersState};
use super::sale_state::{FenceRefusals, SaleState};

/// The verdict of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every unit sold at most once, every sale accounted for.
    Held,
    /// At least one unit was sold twice, or the counters disagree.
    Oversold,
    /// No oversell, but buyers were told something the records do not show.
    Lost,
    /// No oversell and nothing lost, but an answer no order of the sale explains: a
    /// "sold out" while units were left, a "sold" after a "sold out" (the history's
    /// `sold-out`, `real-time` or `linearizable` check).
    WrongAnswer,
}

impl Verdict {
    /// The verdict as people read it: `held`, `oversold`, `lost`, `wrong answer`.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Oversold => "oversold",
            Verdict::Lost => "lost",
            Verdict::WrongAnswer => "wrong answer",
        }
    }

    /// What the counts found comes to: oversold if anything was sold twice, else lost if
    /// anything is missing, else held.
    pub fn of_findings(oversold: &[String], lost: &[String]) -> Verdict {
        match (oversold.is_empty(), lost.is_empty()) {
            (false, _) => Verdict::Oversold,
            (true, false) => Verdict::Lost,
            (true, true) => Verdict::Held,
        }
    }
}

/// What the checker found.
pub struct Judgement {
    pub verdict: Verdict,
    pub units_sold_twice: usize,
    /// `None` when no sale record carries a fencing token: nothing to check.
    pub fencing_regressions: Option<usize>,
    /// Grants that began while another was still held.
    pub holders_overlapped: usize,
    /// Buyers named in more than one sale record.
    pub buyers_served_twice: usize,
    pub findings: Vec<String>,
}

/// Compares what Redis holds with what the buyers were told. An oversell outranks a
/// lost sale; the notes explain a run without changing its verdict.
pub fn judge(
    initial: i64,
    target: &Target,
    sale: &SaleState,
    tally: &Tally,
    orders: Option<&OrdersState>,
) -> Judgement {
    let counts = Counts::of(sale);
    let (mut oversold, mut lost) = orders.map_or_else(Default::default, |orders| judge_orders(orders, &sale.records));
    oversold.extend(oversold_findings(initial, target, sale, &counts));
    lost.extend(lost_findings(sale, tally));
    let verdict = Verdict::of_findings(&oversold, &lost);
    let mut findings: Vec<String> = oversold.into_iter().chain(lost).collect();
    findings.extend(notes(target, sale, tally, &counts));
    Judgement {
        verdict,
        units_sold_twice: counts.units_sold_twice,
        fencing_regressions: counts.fencing_regressions,
        holders_overlapped: counts.holders_overlapped,
        buyers_served_twice: counts.buyers_served_twice,
        findings,
    }
}

/// What the sale records and the grant log count, as [`Judgement`] reports them.
struct Counts {
    units_sold_twice: usize,
    fencing_regressions: Option<usize>,
    holders_overlapped: usize,
    buyers_served_twice: usize,
}

impl Counts {
    fn of(sale: &SaleState) -> Self {
        Counts {
            units_sold_twice: units_sold_twice(&sale.records),
            fencing_regressions: fencing_regressions(&sale.records),
            holders_overlapped: overlapping_holders(&sale.grants),
            buyers_served_twice: buyers_served_twice(&sale.records),
        }
    }
}

/// What says more units were sold than there were: the counts disagree with the
/// initial stock, or the records show a unit, a token or a buyer twice.
fn oversold_findings(initial: i64, target: &Target, sale: &SaleState, counts: &Counts) -> Vec<String> {
    let mut oversold = Vec::new();
    if sale.lucky > initial {
        oversold.push(format!("{} buyers got a unit out of {initial}", sale.lucky));
    }
    if sale.stock < 0 {
        oversold.push(format!("stock went negative ({})", sale.stock));
    }
    if sale.stock + sale.lucky != initial {
        oversold.push(format!("stock + lucky = {} + {} != {initial}", sale.stock, sale.lucky));
    }
    // With segments, `stock` is kept by the same writes: the segments must add up to it.
    let in_segments: i64 = sale.segment_stocks.iter().sum();
    if !sale.segment_stocks.is_empty() && in_segments != sale.stock {
        oversold.push(format!(
            "the segments hold {in_segments} units ({:?}) but stock counts {}",
            sale.segment_stocks, sale.stock
        ));
    }
    if sale.segment_stocks.iter().any(|&units| units < 0) {
        oversold.push(format!("a segment went negative ({:?})", sale.segment_stocks));
    }
    let sale_records = sale.records.len() + sale.unreadable_records;
    if sale_records as i64 != sale.lucky {
        oversold.push(format!("{sale_records} sale records for {} lucky buyers", sale.lucky));
    }
    if counts.units_sold_twice > 0 {
        oversold.push(format!(
            "{} units appear in more than one sale record",
            counts.units_sold_twice
        ));
    }
    if let Some(regressions @ 1..) = counts.fencing_regressions {
        oversold.push(format!(
            "fencing tokens went backwards {regressions} times: two holders overlapped"
        ));
    }
    if target.one_per_buyer && counts.buyers_served_twice > 0 {
        oversold.push(format!(
            "{} buyers got more than one unit, though the sale sells one per buyer",
            counts.buyers_served_twice
        ));
    }
    oversold
}

/// What says a buyer was told something the stock does not show: a "sold" Redis did
/// not count, a unit counted that nobody may have been sold, a repeat refused wrongly.
fn lost_findings(sale: &SaleState, tally: &Tally) -> Vec<String> {
    let mut lost = Vec::new();
    let told_sold = tally.sold as i64;
    let might_have_sold = told_sold + tally.outcome_unknown as i64;
    if sale.lucky < told_sold {
        lost.push(format!(
            "{told_sold} buyers were told \"sold\" but Redis counts only {} lucky",
            sale.lucky
        ));
    } else if sale.lucky > might_have_sold {
        lost.push(format!(
            "Redis counts {} lucky, but only {told_sold} buyers were told \"sold\" and {} got no clear answer",
            sale.lucky, tally.outcome_unknown
        ));
    }
    let served: HashSet<&str> = sale
        .records
        .iter()
        .filter_map(|record| record.buyer.as_deref())
        .collect();
    let refused_wrongly = tally
        .refused_as_repeat
        .iter()
        .filter(|buyer| !served.contains(buyer.as_str()))
        .count();
    if refused_wrongly > 0 {
        lost.push(format!(
            "{refused_wrongly} buyers were refused a second unit but hold no first one"
        ));
    }
    lost
}

/// What explains a run without judging it: repeat buyers of a sale that allows them,
/// overlaps the fence caught, units left by failed requests, unclear answers, no fence.
fn notes(target: &Target, sale: &SaleState, tally: &Tally, counts: &Counts) -> Vec<String> {
    let mut notes = Vec::new();
    if !target.one_per_buyer && counts.buyers_served_twice > 0 {
        notes.push(format!(
            "{} buyers got more than one unit: the sale does not hold buyers to one (--one-per-buyer)",
            counts.buyers_served_twice
        ));
    }
    let FenceRefusals { reads, writes } = sale.fence_refusals;
    if counts.holders_overlapped > 0 || reads + writes > 0 {
        notes.push(format!(
            "{} holders overlapped another; the fence refused {reads} reads and {writes} writes; \
             {} units were sold twice",
            counts.holders_overlapped, counts.units_sold_twice
        ));
    }
    let errors: usize = tally.errors.values().sum();
    if errors > 0 && sale.stock > 0 {
        notes.push(format!(
            "{} units stayed unsold because {errors} requests failed (see errors): not an oversell",
            sale.stock
        ));
    }
    if tally.outcome_unknown > 0 {
        notes.push(format!(
            "{} buyers got no clear answer; Redis says {} of them were sold",
            tally.outcome_unknown,
            (sale.lucky - tally.sold as i64).max(0)
        ));
    }
    match target.fencing {
        FencingStatus::Off => notes.push("the sale ran unfenced: --fencing off".to_owned()),
        FencingStatus::NoTokens => notes.push(format!(
            "the sale ran unfenced: `{}` issues no fencing tokens",
            target.strategy
        )),
        FencingStatus::On | FencingStatus::NotNeeded => {}
    }
    notes
}

/// How many buyers are named in more than one sale record.
pub fn buyers_served_twice(records: &[SaleRecord]) -> usize {
    let mut units_per_buyer: BTreeMap<&str, usize> = BTreeMap::new();
    for buyer in records.iter().filter_map(|record| record.buyer.as_deref()) {
        *units_per_buyer.entry(buyer).or_default() += 1;
    }
    units_per_buyer.values().filter(|&&units| units > 1).count()
}

/// How many units were sold more than once: each sale records the stock it read (in
/// its segment), and under a working lock every value from a segment's initial stock
/// down to 1 is read once.
pub fn units_sold_twice(records: &[SaleRecord]) -> usize {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for record in records {
        let unit = (record.segment, record.stock_before);
        if !seen.insert(unit) {
            twice.insert(unit);
        }
    }
    twice.len()
}

/// How often a fencing token fails to grow from one sale record to the next of the
/// same token source and the same lock. Records are appended while the lock is held, so
/// under a working lock a later record carries a later grant. Each source (a strategy
/// that switches backends has two) and each segment's lock is checked on its own: the
/// holders of two segments sell at once. The records of one group (`--group-commit`,
/// one grant for many units) share their token: an equal token is a regression unless
/// both records name the same group. `None` when no record has a token.
pub fn fencing_regressions(records: &[SaleRecord]) -> Option<usize> {
    crate::history::checks::fence_regressions(records).map(|found| found.len())
}

#[cfg(test)]
mod tests {
    use seckill::lock::FencingToken;
    use seckill::sale::segments::Segments;

    use super::*;

    fn record(stock_before: i64, token: Option<(&'static str, u64)>) -> SaleRecord {
        SaleRecord {
            sale_id: format!("sale-{stock_before}"),
            instance: "test".into(),
            port: 8080,
            strategy: "redis".into(),
            stock_before,
            segment: None,
            buyer: None,
            fencing_token: token.map(|(source, counter)| FencingToken::new(source, 0, counter)),
            group: None,
            lock_wait_ms: 0.0,
            locked_at_ms: 0,
            sold_at_ms: 0,
        }
    }

    fn judged(stock: i64, lucky: i64, records: Vec<SaleRecord>, told_sold: usize, unknown: usize) -> Judgement {
        judged_in_segments(stock, lucky, records, told_sold, unknown, Vec::new())
    }

    fn judged_in_segments(
        stock: i64,
        lucky: i64,
        records: Vec<SaleRecord>,
        told_sold: usize,
        unknown: usize,
        segment_stocks: Vec<i64>,
    ) -> Judgement {
        let tally = Tally {
            sold: told_sold,
            outcome_unknown: unknown,
            ..Tally::default()
        };
        let sale = sale(stock, lucky, records, segment_stocks);
        judge(3, &fenced_redis(false), &sale, &tally, None)
    }

    /// The sale as Redis would hold it, of one generation, with no grant logged or refused.
    fn sale(stock: i64, lucky: i64, records: Vec<SaleRecord>, segment_stocks: Vec<i64>) -> SaleState {
        SaleState {
            stock,
            lucky,
            generation: 1,
            sale_name: "s".into(),
            segments: Segments::ONE,
            records,
            unreadable_records: 0,
            segment_stocks,
            grants: Vec::new(),
            fence_refusals: FenceRefusals::default(),
        }
    }

    /// Instances of `redis`, fenced, one stock segment.
    fn fenced_redis(one_per_buyer: bool) -> Target {
        Target {
            status: "ok".into(),
            strategy: "redis".into(),
            fencing: FencingStatus::On,
            local_queue: true,
            hand_over: true,
            stock_segments: 1,
            sold_out_flag: false,
            one_per_buyer,
            orders: false,
            stock_wait_replicas: 0,
            group_max: 0,
            instance: "seckill-8080".into(),
            port: 8080,
            key_prefix: String::new(),
            lock_stats: None,
        }
    }

    /// Three units sold to `sold_to`, and 409 `already_bought` answered to `refused`.
    fn judged_with_buyers(one_per_buyer: bool, sold_to: [&str; 3], refused: &[&str]) -> Judgement {
        let records = (1..=3)
            .zip(sold_to)
            .map(|(stock_before, buyer)| SaleRecord {
                buyer: Some(buyer.to_owned()),
                ..record(stock_before, None)
            })
            .collect();
        let tally = Tally {
            sold: 3,
            refused_as_repeat: refused.iter().map(|buyer| buyer.to_string()).collect(),
            ..Tally::default()
        };
        judge(
            3,
            &fenced_redis(one_per_buyer),
            &sale(0, 3, records, Vec::new()),
            &tally,
            None,
        )
    }

    #[test]
    fn a_buyer_with_two_units_breaks_one_per_buyer_and_is_only_counted_without_it() {
        let twice = judged_with_buyers(true, ["a", "b", "a"], &[]);
        assert_eq!((twice.verdict, twice.buyers_served_twice), (Verdict::Oversold, 1));
        assert!(
            twice.findings[0].contains("1 buyers got more than one unit"),
            "{:?}",
            twice.findings
        );
        let allowed = judged_with_buyers(false, ["a", "b", "a"], &[]);
        assert_eq!((allowed.verdict, allowed.buyers_served_twice), (Verdict::Held, 1));
        assert!(
            allowed.findings[0].contains("--one-per-buyer"),
            "{:?}",
            allowed.findings
        );
        let once_each = judged_with_buyers(true, ["a", "b", "c"], &["a", "c"]);
        assert_eq!(once_each.verdict, Verdict::Held, "{:?}", once_each.findings);
    }

    #[test]
    fn a_buyer_refused_a_second_unit_without_a_first_one_is_a_lost_sale() {
        let judgement = judged_with_buyers(true, ["a", "b", "c"], &["a", "d"]);
        assert_eq!(judgement.verdict, Verdict::Lost);
        assert!(
            judgement.findings[0].contains("1 buyers were refused a second unit but hold no first one"),
            "{:?}",
            judgement.findings
        );
    }

    #[test]
    fn segments_that_do_not_add_up_to_the_stock_are_an_oversell() {
        let sold = |n: i64| {
            (1..=n)
                .map(|stock_before| record(stock_before, None))
                .collect::<Vec<_>>()
        };
        // 3 units in two segments, one sold: the segments hold 2, and stock says 2.
        let held = judged_in_segments(2, 1, sold(1), 1, 0, vec![1, 1]);
        assert_eq!(held.verdict, Verdict::Held, "{:?}", held.findings);
        // A write that took the unit from stock but left it in its segment (or the reverse).
        let apart = judged_in_segments(2, 1, sold(1), 1, 0, vec![2, 1]);
        assert_eq!(apart.verdict, Verdict::Oversold);
        assert!(
            apart.findings[0].contains("the segments hold 3 units"),
            "{:?}",
            apart.findings
        );
    }

    #[test]
    fn a_stock_value_read_by_two_sales_counts_as_a_unit_sold_twice() {
        let records = [
            record(3, None),
            record(2, None),
            record(2, None),
            record(2, None),
            record(1, None),
        ];
        assert_eq!(units_sold_twice(&records), 1);
        assert_eq!(units_sold_twice(&records[..2]), 0);
    }

    #[test]
    fn a_fencing_token_that_does_not_grow_is_a_regression() {
        let records = [
            record(3, Some(("redis", 1))),
            record(2, Some(("redis", 5))),
            record(1, Some(("redis", 4))),
        ];
        assert_eq!(fencing_regressions(&records), Some(1));
        assert_eq!(fencing_regressions(&records[..2]), Some(0));
    }

    #[test]
    fn each_segment_sells_its_own_units_under_its_own_tokens() {
        let in_segment = |segment, stock_before, counter| SaleRecord {
            segment: Some(segment),
            ..record(stock_before, Some(("redis", counter)))
        };
        // Two segments of 2 units, sold at once: their stock values and tokens interleave.
        let records = [
            in_segment(0, 2, 10),
            in_segment(1, 2, 3),
            in_segment(1, 1, 4),
            in_segment(0, 1, 11),
        ];
        assert_eq!(units_sold_twice(&records), 0);
        assert_eq!(fencing_regressions(&records), Some(0));
        // The same unit of one segment, twice; a token of segment 0 that went back.
        let twice = [in_segment(0, 2, 10), in_segment(1, 2, 3), in_segment(0, 2, 9)];
        assert_eq!(units_sold_twice(&twice), 1);
        assert_eq!(fencing_regressions(&twice), Some(1));
    }

    #[test]
    fn a_token_may_repeat_within_one_group_and_nowhere_else() {
        let in_group = |stock_before, counter, group: Option<&str>| SaleRecord {
            group: group.map(str::to_owned),
            ..record(stock_before, Some(("redis", counter)))
        };
        // Group g1 sold three units under token 7, then g2 two under token 8.
        let grouped = [
            in_group(5, 7, Some("g1")),
            in_group(4, 7, Some("g1")),
            in_group(3, 7, Some("g1")),
            in_group(2, 8, Some("g2")),
            in_group(1, 8, Some("g2")),
        ];
        assert_eq!(fencing_regressions(&grouped), Some(0));
        // Token 8 again in another group: two grants that carried one token.
        let two_groups = [in_group(2, 8, Some("g2")), in_group(1, 8, Some("g3"))];
        assert_eq!(fencing_regressions(&two_groups), Some(1));
        // And outside any group, as before.
        let ungrouped = [in_group(2, 8, None), in_group(1, 8, None)];
        assert_eq!(fencing_regressions(&ungrouped), Some(1));
        // A group's token that goes back is a regression, group or not.
        let back = [in_group(2, 8, Some("g2")), in_group(1, 7, Some("g2"))];
        assert_eq!(fencing_regressions(&back), Some(1));
    }

    #[test]
    fn without_tokens_there_is_no_fencing_check_at_all() {
        assert_eq!(fencing_regressions(&[record(2, None), record(1, None)]), None);
    }

    #[test]
    fn tokens_of_two_sources_are_each_checked_on_their_own() {
        // A degrade run: redis tokens 40, 41, then mysql versions 3, 4, then redis 42.
        let records = [
            record(5, Some(("redis", 40))),
            record(4, Some(("redis", 41))),
            record(3, Some(("mysql", 3))),
            record(2, Some(("mysql", 4))),
            record(1, Some(("redis", 42))),
        ];
        assert_eq!(fencing_regressions(&records), Some(0));
        let mut swapped = records.clone();
        swapped.swap(2, 3);
        assert_eq!(fencing_regressions(&swapped), Some(1));
    }

    #[test]
    fn counters_that_do_not_add_up_are_an_oversell() {
        let judgement = judged(
            0,
            4,
            vec![record(3, None), record(2, None), record(2, None), record(1, None)],
            4,
            0,
        );
        assert_eq!(judgement.verdict, Verdict::Oversold);
        assert_eq!(judgement.units_sold_twice, 1);
    }

    #[test]
    fn a_sale_the_buyer_was_not_told_about_is_lost() {
        let judgement = judged(0, 3, vec![record(3, None), record(2, None), record(1, None)], 2, 0);
        assert_eq!(judgement.verdict, Verdict::Lost);
    }

    #[test]
    fn a_buyer_told_sold_for_a_unit_redis_does_not_count_is_lost() {
        let judgement = judged(1, 2, vec![record(3, None), record(2, None)], 3, 0);
        assert_eq!(judgement.verdict, Verdict::Lost);
    }

    #[test]
    fn a_sale_whose_buyer_got_no_clear_answer_is_not_lost() {
        let judgement = judged(0, 3, vec![record(3, None), record(2, None), record(1, None)], 2, 1);
        assert_eq!(judgement.verdict, Verdict::Held, "{:?}", judgement.findings);
        assert!(
            judgement.findings.iter().any(|f| f.contains("no clear answer")),
            "{:?}",
            judgement.findings
        );
    }

    #[test]
    fn an_exact_sale_holds() {
        let records = vec![
            record(3, Some(("redis", 1))),
            record(2, Some(("redis", 2))),
            record(1, Some(("redis", 3))),
        ];
        let judgement = judged(0, 3, records, 3, 0);
        assert_eq!(judgement.verdict, Verdict::Held, "{:?}", judgement.findings);
        assert_eq!(judgement.fencing_regressions, Some(0));
    }
}
