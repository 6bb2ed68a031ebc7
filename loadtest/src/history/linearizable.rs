//! Is there one order of the requests, each taking effect at a single moment between its
//! invocation and its answer, in which every answer is what the stock would have said?
//! That is linearizability, checked by Wing and Gong's search with Lowe's memo (the
//! algorithm of Porcupine and Knossos's `wgl`), one segment at a time: a segment is its
//! own stock, and a history split by segment stays cheap to search.
//!
//! ## The model
//! A segment holds `n` units and counts down. A sale of unit `u` is legal when the
//! segment holds `u`, and leaves `u - 1`; "sold out" is legal when it holds none. A
//! request whose outcome is unknown answers at infinity: it may take effect at any
//! moment after it was sent. It takes a unit if one is left: one that took nothing can
//! always be placed last, after every answer, where taking a unit changes no answer.
//!
//! ## Two prunings that make it fast
//! Plain WGL tries every order of requests with the same answer, and lets each unknown
//! request take a unit anywhere: with a few timeouts in a crowd of 500 it runs for
//! minutes (measured: six timeouts, past 60 s). Two rules, both sound, bring it to
//! milliseconds:
//! - **the earliest deadline of a kind**: of the requests that could go next with the
//!   same answer ("sold out", unknown, or the same unit), only the one answered first
//!   is tried. Swapping two such requests keeps every answer and every real-time order.
//! - **the stock only goes down**: while a request not yet placed says it sold unit `u`,
//!   the segment may not drop below `u` without it.
//!
//! "Sold out" says every segment is empty, so it is checked in each: a necessary
//! condition (each segment's history must be linearizable), not the whole of it. So is a
//! request of unknown outcome, which each segment's search may let take a unit of its
//! own, where it could take one in all. The crowd names every buyer, and the patch
//! settles or drops its unknown requests before they get here.
//!
//! The search may take exponential time on a history of many overlapping requests. It
//! stops at a time limit and then says [`Linearizability::Unknown`], never that the
//! history passed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::operations::{Operation, Outcome};

/// The stock of one sale: its name, and the units each segment began with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StockModel {
    pub sale: String,
    pub units_per_segment: Vec<i64>,
}

/// The check's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Linearizability {
    Linearizable,
    /// No order explains the answers of `segment`. After `linearized` requests in the
    /// longest order the search found, request `stuck` (an index into the operations)
    /// could not take effect anywhere: the segment then held `units`.
    Not {
        segment: u32,
        stuck: usize,
        linearized: usize,
        units: i64,
    },
    /// The search of `segment` ran out of time: nothing is known.
    Unknown {
        segment: u32,
        after: Duration,
    },
}

/// What one request does to a segment, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Sell(i64),
    SoldOut,
    /// Sold a unit of this segment, or did nothing.
    Maybe,
}

impl Step {
    /// The units the segment holds after this step from `units`, if it is legal there.
    fn apply(self, units: i64) -> Option<i64> {
        match self {
            Step::Sell(unit) => (units == unit).then_some(unit - 1),
            Step::SoldOut => (units == 0).then_some(0),
            Step::Maybe => Some((units - 1).max(0)),
        }
    }
}

/// Checks `operations` against `model`, each segment within `limit`: the first segment
/// that fails, else the first that ran out of time, else linearizable.
pub fn check(operations: &[Operation], model: &StockModel, limit: Duration) -> Linearizability {
    let mut unknown = None;
    for (segment, &units) in (0u32..).zip(&model.units_per_segment) {
        let steps = steps_in(operations, &model.sale, segment);
        match search(&steps, units, limit) {
            Searched::Linearizable => {}
            Searched::Stuck {
                request,
                linearized,
                units,
            } => {
                return Linearizability::Not {
                    segment,
                    stuck: steps[request].0,
                    linearized,
                    units,
                }
            }
            Searched::OutOfTime => {
                unknown.get_or_insert(Linearizability::Unknown { segment, after: limit });
            }
        }
    }
    unknown.unwrap_or(Linearizability::Linearizable)
}

/// One request of a segment's history: its index among the operations, its step, when
/// it was sent and when it was answered (`u64::MAX`: never).
type Request = (usize, Step, u64, u64);

/// The requests that concern `segment` of `sale`: its sales, every "sold out", and every
/// request whose outcome is unknown. Refusals did nothing and are left out.
fn steps_in(operations: &[Operation], sale: &str, segment: u32) -> Vec<Request> {
    operations
        .iter()
        .enumerate()
        .filter_map(|(index, operation)| {
            let step = match &operation.outcome {
                Outcome::Sold { unit, .. } if unit.sale == sale && unit.segment == segment => Step::Sell(unit.unit),
                Outcome::Sold { .. } | Outcome::Refused(_) => return None,
                Outcome::SoldOut => Step::SoldOut,
                Outcome::Unknown(_) => Step::Maybe,
            };
            let returns = operation.returns_at().unwrap_or(u64::MAX);
            Some((index, step, operation.invoked_us, returns))
        })
        .collect()
}

enum Searched {
    Linearizable,
    Stuck {
        request: usize,
        linearized: usize,
        units: i64,
    },
    OutOfTime,
}

/// The history as one list of entries, invocations and answers in time order, that the
/// search lifts requests out of as it places them (a doubly linked list over a vector:
/// slot 0 is the head).
struct Entries {
    /// Per slot: the request, and whether this is its invocation.
    entry: Vec<(usize, bool)>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Per request: the slots of its invocation and its answer.
    slots: Vec<(usize, usize)>,
}

const END: usize = usize::MAX;

impl Entries {
    fn new(requests: &[Request]) -> Self {
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(requests.len() * 2);
        for (request, &(_, _, invoked, returns)) in requests.iter().enumerate() {
            // At the same instant an invocation comes first: the two requests overlap.
            order.push((invoked, false, request));
            order.push((returns, true, request));
        }
        order.sort_unstable();
        let count = order.len() + 1;
        let mut entries = Entries {
            entry: vec![(usize::MAX, false); count],
            next: (1..=count).map(|slot| if slot == count { END } else { slot }).collect(),
            prev: (0..count).map(|slot| slot.wrapping_sub(1)).collect(),
            slots: vec![(0, 0); requests.len()],
        };
        for (slot, &(_, is_answer, request)) in (1..).zip(&order) {
            entries.entry[slot] = (request, !is_answer);
            let slots = &mut entries.slots[request];
            if is_answer {
                slots.1 = slot;
            } else {
                slots.0 = slot;
            }
        }
        entries
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = (self.prev[slot], self.next[slot]);
        self.next[prev] = next;
        if next != END {
            self.prev[next] = prev;
        }
    }

    fn relink(&mut self, slot: usize) {
        let (prev, next) = (self.prev[slot], self.next[slot]);
        self.next[prev] = slot;
        if next != END {
            self.prev[next] = slot;
        }
    }

    /// Takes a placed request out of the list: its invocation and its answer.
    fn lift(&mut self, request: usize) {
        let (invocation, answer) = self.slots[request];
        self.unlink(invocation);
        self.unlink(answer);
    }

    /// The invocations that may go next (those before the first answer still in the
    /// list), keeping of each kind of step only the one answered first.
    fn earliest_of_each_kind(&self, requests: &[Request]) -> HashSet<usize> {
        let mut first: HashMap<Step, (u64, usize)> = HashMap::new();
        let mut slot = self.next[0];
        while slot != END && self.entry[slot].1 {
            let (request, _) = self.entry[slot];
            let (_, step, _, returns) = requests[request];
            let candidate = (returns, slot);
            first
                .entry(step)
                .and_modify(|best| *best = (*best).min(candidate))
                .or_insert(candidate);
            slot = self.next[slot];
        }
        first.into_values().map(|(_, slot)| slot).collect()
    }

    /// Puts it back, in the reverse order of [`Entries::lift`].
    fn unlift(&mut self, request: usize) {
        let (invocation, answer) = self.slots[request];
        self.relink(answer);
        self.relink(invocation);
    }
}

/// Wing-Gong-Lowe over one segment's requests, from `units` units, with the two
/// prunings of the module's notes.
fn search(requests: &[Request], units: i64, limit: Duration) -> Searched {
    let started = Instant::now();
    if let Some(request) =
        (0..requests.len()).find(|&request| sells(requests, request).is_some_and(|unit| unit > units))
    {
        return Searched::Stuck {
            request,
            linearized: 0,
            units,
        };
    }
    let mut search = Search::new(requests, units);
    let mut steps: u64 = 0;
    while search.entries.next[0] != END {
        // The clock is read at the first step, then every 4096.
        if steps.is_multiple_of(4096) && started.elapsed() > limit {
            return Searched::OutOfTime;
        }
        steps += 1;
        let (request, is_invocation) = search.entries.entry[search.slot];
        if !is_invocation {
            // An answer came before its request could be placed: undo the last placement.
            if let Err(stuck) = search.undo_the_last(request) {
                return stuck;
            }
        } else if !search.place(request) {
            search.slot = search.entries.next[search.slot];
        }
    }
    Searched::Linearizable
}

/// The unit request `request` says it sold, if it says it sold one.
fn sells(requests: &[Request], request: usize) -> Option<i64> {
    match requests[request].1 {
        Step::Sell(unit) => Some(unit),
        _ => None,
    }
}

/// The state of one search: the order built so far, and what it leaves.
struct Search<'a> {
    requests: &'a [Request],
    entries: Entries,
    /// Per unit, the requests not yet placed that say they sold it.
    claims: HashMap<i64, usize>,
    /// The requests placed so far, as bits, and every (placed, stock) pair tried (Lowe's memo).
    placed: Vec<u64>,
    seen: HashSet<(Vec<u64>, i64)>,
    stock: i64,
    /// The requests placed so far, each with the units before it.
    stack: Vec<(usize, i64)>,
    /// The longest order found: its length, the request it stuck at, the units left.
    deepest: Option<(usize, usize, i64)>,
    /// The invocations worth trying next ([`Entries::earliest_of_each_kind`]).
    earliest: HashSet<usize>,
    /// The entry looked at.
    slot: usize,
}

impl<'a> Search<'a> {
    fn new(requests: &'a [Request], units: i64) -> Self {
        let mut claims = HashMap::new();
        for unit in (0..requests.len()).filter_map(|request| sells(requests, request)) {
            *claims.entry(unit).or_default() += 1;
        }
        let entries = Entries::new(requests);
        let earliest = entries.earliest_of_each_kind(requests);
        let slot = entries.next[0];
        Search {
            requests,
            entries,
            claims,
            placed: vec![0u64; requests.len().div_ceil(64)],
            seen: HashSet::new(),
            stock: units,
            stack: Vec::new(),
            deepest: None,
            earliest,
            slot,
        }
    }

    /// Places `request` next if it is worth trying there, its step is legal and the memo
    /// has not seen the state it leads to; says whether it did.
    fn place(&mut self, request: usize) -> bool {
        let stock = self.stock;
        let Some(after) = self.requests[request]
            .1
            .apply(stock)
            .filter(|_| self.earliest.contains(&self.slot))
            // The stock only goes down: it may not leave `stock` while another request
            // not yet placed says it sold unit `stock`.
            .filter(|&after| {
                let claimed = self.claims.get(&stock).copied().unwrap_or(0);
                let others = claimed - usize::from(sells(self.requests, request) == Some(stock));
                after == stock || others == 0
            })
        else {
            return false;
        };
        self.placed[request / 64] |= 1 << (request % 64);
        if !self.seen.insert((self.placed.clone(), after)) {
            self.placed[request / 64] &= !(1 << (request % 64));
            return false;
        }
        self.stack.push((request, std::mem::replace(&mut self.stock, after)));
        if let Some(unit) = sells(self.requests, request) {
            *self.claims.entry(unit).or_default() -= 1;
        }
        self.entries.lift(request);
        self.earliest = self.entries.earliest_of_each_kind(self.requests);
        self.slot = self.entries.next[0];
        true
    }

    /// Takes the last placed request back, as `request`'s answer came before it could
    /// be placed; with nothing left to take back, the search is stuck.
    fn undo_the_last(&mut self, request: usize) -> Result<(), Searched> {
        if self.deepest.is_none_or(|(depth, ..)| self.stack.len() > depth) {
            self.deepest = Some((self.stack.len(), request, self.stock));
        }
        let Some((last, before)) = self.stack.pop() else {
            let (linearized, request, units) = self.deepest.unwrap_or((0, request, self.stock));
            return Err(Searched::Stuck {
                request,
                linearized,
                units,
            });
        };
        self.placed[last / 64] &= !(1 << (last % 64));
        self.stock = before;
        if let Some(unit) = sells(self.requests, last) {
            *self.claims.entry(unit).or_default() += 1;
        }
        self.entries.unlift(last);
        self.earliest = self.entries.earliest_of_each_kind(self.requests);
        self.slot = self.entries.next[self.entries.slots[last].0];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::operations::{pair, tests::*};
    use crate::history::What;

    fn model(units: i64) -> StockModel {
        StockModel {
            sale: "s".into(),
            units_per_segment: vec![units],
        }
    }

    const LIMIT: Duration = Duration::from_secs(5);

    #[test]
    fn overlapping_sales_in_any_order_of_their_units_pass() {
        // Three buyers at once; they took units 2, 1 and then heard "sold out".
        let events = [
            invoke(0, 1),
            invoke(0, 2),
            invoke(0, 3),
            sold(5, 2, 1),
            sold(6, 1, 2),
            told_sold_out(7, 3),
        ];
        assert_eq!(check(&pair(&events), &model(2), LIMIT), Linearizability::Linearizable);
    }

    #[test]
    fn one_unit_sold_twice_fails() {
        let events = [invoke(0, 1), invoke(0, 2), sold(5, 1, 2), sold(6, 2, 2)];
        let verdict = check(&pair(&events), &model(2), LIMIT);
        assert_eq!(
            verdict,
            Linearizability::Not {
                segment: 0,
                stuck: 0,
                linearized: 0,
                units: 2
            },
            "neither sale of unit 2 can go first while the other says it sold unit 2 too"
        );
    }

    #[test]
    fn sold_out_while_a_unit_is_left_fails() {
        // Unit 2 sold, then "sold out" answered before the sale of unit 1 was even sent.
        let events = stale_sold_out();
        let verdict = check(&pair(&events), &model(2), LIMIT);
        assert!(
            matches!(verdict, Linearizability::Not { stuck: 1, units: 1, .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_sale_that_returned_before_another_began_must_take_the_higher_unit() {
        // Sequential: the first answered unit 1, then a later one took unit 2.
        let events = [invoke(0, 1), sold(1, 1, 1), invoke(2, 2), sold(3, 2, 2)];
        assert!(matches!(
            check(&pair(&events), &model(2), LIMIT),
            Linearizability::Not { .. }
        ));
    }

    #[test]
    fn an_unknown_outcome_may_be_a_sale_or_nothing() {
        let info = |at, process| {
            ended(
                at,
                process,
                What::Info {
                    answer: "timeout".into(),
                },
            )
        };
        // Process 1's outcome is unknown: units 2 and 1 sold after it explain only if it sold nothing ...
        let nothing = [
            invoke(0, 1),
            info(1, 1),
            invoke(2, 2),
            sold(3, 2, 2),
            invoke(4, 3),
            sold(5, 3, 1),
        ];
        assert_eq!(check(&pair(&nothing), &model(2), LIMIT), Linearizability::Linearizable);
        // ... and "sold out" after unit 2 alone explains only if it sold unit 1, late.
        let a_sale = [
            invoke(0, 1),
            info(1, 1),
            invoke(2, 2),
            sold(3, 2, 2),
            invoke(4, 3),
            told_sold_out(5, 3),
        ];
        assert_eq!(check(&pair(&a_sale), &model(2), LIMIT), Linearizability::Linearizable);
        // But not two more units than the stock had.
        let too_many = [
            invoke(0, 1),
            info(1, 1),
            invoke(2, 2),
            sold(3, 2, 1),
            invoke(4, 3),
            told_sold_out(5, 3),
        ];
        assert!(matches!(
            check(&pair(&too_many), &model(3), LIMIT),
            Linearizability::Not { .. }
        ));
    }

    #[test]
    fn a_search_out_of_time_says_unknown_never_linearizable() {
        // Thirty requests of unknown outcome, all at once, then "sold out" of a stock of
        // 100: no order explains it, but a search given no time cannot say so.
        let info = |process| {
            ended(
                1,
                process,
                What::Info {
                    answer: "timeout".into(),
                },
            )
        };
        let mut events: Vec<_> = (0..30)
            .flat_map(|process| [invoke(0, process), info(process)])
            .collect();
        events.extend([invoke(2, 99), told_sold_out(3, 99)]);
        let verdict = check(&pair(&events), &model(100), Duration::ZERO);
        assert_eq!(
            verdict,
            Linearizability::Unknown {
                segment: 0,
                after: Duration::ZERO
            }
        );
    }
}
