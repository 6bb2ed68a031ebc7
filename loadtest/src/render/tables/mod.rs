//! The tables that compare: several verdict runs (`loadtest --compare`), the strategies
//! of a benchmark (`bench report`, the README), and the locks alone (`lockbench`).
//! Each is built once as a [`Table`](super::document::Table) and written as Markdown or HTML by the caller.
//!
//! Each reader has a file of its own:
//! 1. [`compare`]: several verdict runs, one row each (`loadtest --compare`).
//! 2. [`one_lock`]: the benchmark's runs as one lock guarding one stock.
//! 3. [`past_one_lock`]: the runs that go past one lock (segments, groups, the cluster).
//! 4. [`lockbench`]: the locks alone, without the sale.
//!
//! This module keeps what they share: the verdict's word, the missing figure, and how
//! a rate, a ratio and a spread are written.

mod compare;
mod one_lock;
mod past_one_lock;
mod lockbench;

pub use compare::comparison;
pub use lockbench::{against_recipes, lockbench, lockbench_row, lockbench_table};
pub use one_lock::ordering;

use crate::bench::{Spread, StrategyBench};
use crate::verdict::Verdict;

use super::document::Block;

/// What a missing figure reads as (a baseline has no bound).
const MISSING: &str = "—";

/// A run's verdict in a table or a chart: the bad ones in capitals.
pub fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Held => "held",
        Verdict::Oversold => "OVERSOLD",
        Verdict::Lost => "LOST",
        Verdict::WrongAnswer => "WRONG ANSWER",
    }
}

/// The README's tables of a benchmark: the crowd runs, then the rates against the
/// bounds, then the ordering found and what each strategy ran out of; then what the
/// runs past one lock add, when there are some.
pub fn bench(benches: &[StrategyBench]) -> Vec<Block> {
    let mut blocks = one_lock::one_lock(benches);
    blocks.extend(past_one_lock::past_one_lock(benches));
    blocks
}

/// A spread as "median (min–max)", with `digits` decimals.
fn spread(s: &Spread, digits: usize) -> String {
    format!("{:.digits$} ({:.digits$}–{:.digits$})", s.median, s.min, s.max)
}

/// A rate in whole sales per second, or [`MISSING`].
fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| MISSING.to_owned(), |rate| format!("{rate:.0}"))
}

/// A ratio, said against its goal when it has one, or [`MISSING`].
fn ratio(ratio: Option<f64>, goal: Option<f64>) -> String {
    ratio.map_or_else(|| MISSING.to_owned(), |ratio| ratio_against_goal(ratio, goal))
}

/// A ratio to its goal, as the bench table shows it: two decimals, and "below" when it
/// misses. A miss that two decimals would round up to the goal (0.695 against 0.7) gets a
/// third decimal, so the table never says "0.70 (below 0.7)".
fn ratio_against_goal(ratio: f64, goal: Option<f64>) -> String {
    match goal {
        Some(goal) if ratio < goal => {
            let shown = format!("{ratio:.2}");
            let shown = if shown.parse::<f64>().is_ok_and(|rounded| rounded >= goal) {
                format!("{ratio:.3}")
            } else {
                shown
            };
            format!("{shown} (below {goal})")
        }
        _ => format!("{ratio:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_that_misses_its_goal_never_reads_as_the_goal() {
        assert_eq!(ratio_against_goal(0.6951, Some(0.7)), "0.695 (below 0.7)");
        assert_eq!(ratio_against_goal(0.699, Some(0.7)), "0.699 (below 0.7)");
        assert_eq!(ratio_against_goal(0.57, Some(0.7)), "0.57 (below 0.7)");
        assert_eq!(ratio_against_goal(0.84, Some(0.7)), "0.84");
        assert_eq!(ratio_against_goal(0.7, Some(0.7)), "0.70");
        assert_eq!(ratio_against_goal(0.42, None), "0.42");
    }
}
