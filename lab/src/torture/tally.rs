//! A run of rounds, counted: by configuration, by kind of fault, and each failure with
//! its seed. The same tables go to the terminal and to docs/results/torture.md.

use std::collections::BTreeMap;
use std::fmt::Write;

use loadtest::verdict::Verdict;

use super::plan::{is_a_baseline, kind_of, Expected};
use super::play::{word, Played};

/// Every round a run played, in order.
#[derive(Default)]
pub struct Tally {
    pub played: Vec<Played>,
    /// Rounds that could not be played (a server that did not start...), with why.
    pub unplayed: Vec<(u64, String)>,
    /// What the run was (its seed, its time, its strategies), said above the tables.
    pub header: String,
    /// Set when the rounds are kept ones played again (lab/regressions/): by seed, what
    /// each came to when it was found. Such a run is shown as their table alone.
    pub kept: Option<BTreeMap<u64, String>>,
}

impl Tally {
    /// Rounds on a configuration that must hold whose verdict was not held.
    pub fn holes(&self) -> Vec<&Played> {
        self.played.iter().filter(|played| played.is_a_hole()).collect()
    }

    /// Every round was played as asked: the lab took each of its faults, and its crowd was
    /// judged. A kept round that was not is no test of what it kept.
    pub fn played_as_asked(&self) -> bool {
        let refused = |played: &&Played| played.troubles.iter().any(|trouble| trouble.starts_with("refused"));
        self.unplayed.is_empty() && self.played.iter().all(|played| played.judged() && !refused(&played))
    }

    /// The tables, in Markdown.
    pub fn tables(&self) -> String {
        let mut page = self.header.clone();
        if let Some(found) = &self.kept {
            page.push_str(&self.kept_rounds(found));
            return page;
        }
        let operations: usize = self.played.iter().map(|played| played.operations).sum();
        let faults: usize = self.played.iter().map(|played| played.struck.len()).sum();
        let late: usize = self
            .played
            .iter()
            .map(|played| played.round.schedule.len() - played.struck.len())
            .sum();
        let _ = writeln!(
            page,
            "{} rounds played ({} could not be), {faults} faults struck ({late} more drawn struck nothing: \
             refused, or after the crowd's last answer), {operations} requests checked.\n",
            self.played.len(),
            self.unplayed.len()
        );
        page.push_str(&self.by_configuration());
        page.push_str(&self.by_fault());
        page.push_str(&self.failures());
        page
    }

    /// Per strategy and what its configuration must come to: rounds, and their verdicts.
    fn by_configuration(&self) -> String {
        let mut rows: BTreeMap<(Expected, &str), BTreeMap<&str, usize>> = BTreeMap::new();
        for played in &self.played {
            let row = rows.entry((played.expected, &played.round.setup.strategy)).or_default();
            *row.entry(played.verdict_word()).or_default() += 1;
        }
        let mut table = String::from(
            "| configuration | strategy | rounds | held | not held | verdicts |\n| --- | --- | ---: | ---: | ---: | --- |\n",
        );
        for ((expected, strategy), verdicts) in rows {
            let rounds: usize = verdicts.values().sum();
            let held = verdicts.get(Verdict::Held.word()).copied().unwrap_or(0);
            let listed: Vec<String> = verdicts
                .iter()
                .map(|(verdict, count)| format!("{verdict} {count}"))
                .collect();
            let _ = writeln!(
                table,
                "| {} | {strategy} | {rounds} | {held} | {} | {} |",
                expected.name(),
                rounds - held,
                listed.join(", ")
            );
        }
        table + "\n"
    }

    /// Per kind of fault: how often it struck, and how often a known-unsafe round it struck
    /// was caught. The detection rate counts the locks with their hole open (fencing off,
    /// or the stock's replica promoted) alone: the baselines oversell with any fault or
    /// none, so their rounds would flatter the generator; they have a column of their own.
    fn by_fault(&self) -> String {
        #[derive(Default)]
        struct Row {
            struck: usize,
            locks: Caught,
            baselines: Caught,
            holes: usize,
        }
        let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
        for played in &self.played {
            let mut kinds: Vec<&str> = played.struck.iter().map(|timed| kind_of(&timed.strike)).collect();
            for kind in &kinds {
                rows.entry(kind).or_default().struck += 1;
            }
            kinds.sort_unstable();
            kinds.dedup();
            for kind in kinds {
                let row = rows.entry(kind).or_default();
                if played.expected == Expected::KnownUnsafe {
                    match is_a_baseline(&played.round.setup) {
                        true => row.baselines.count(played),
                        false => row.locks.count(played),
                    }
                }
                row.holes += usize::from(played.is_a_hole());
            }
        }
        let mut table = String::from(
            "| fault | struck | known-unsafe lock rounds caught | detection rate | baseline rounds caught | holes where it must hold |\n\
             | --- | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for (kind, row) in rows {
            let _ = writeln!(
                table,
                "| {kind} | {} | {} of {} | {} | {} of {} | {} |",
                row.struck,
                row.locks.caught,
                row.locks.rounds,
                row.locks.rate(),
                row.baselines.caught,
                row.baselines.rounds,
                row.holes
            );
        }
        table + "\n"
    }

    /// Every round that was not held, with its seed. A round that must hold, may fail, was
    /// not judged or was shrunk has a row of its own; the other expected ones (a known
    /// hole, caught) are listed by their seeds, a line per strategy.
    fn failures(&self) -> String {
        let failed: Vec<&Played> = self
            .played
            .iter()
            .filter(|played| played.verdict != Some(Verdict::Held))
            .collect();
        if failed.is_empty() && self.unplayed.is_empty() {
            return "Every round was held.\n".to_owned();
        }
        let mut table =
            String::from("| seed | round | verdict | checks that failed | status |\n| --- | --- | --- | --- | --- |\n");
        let (one_by_one, expected_ones): (Vec<&Played>, Vec<&Played>) = failed.iter().partition(|played| {
            !played.judged() || played.expected != Expected::KnownUnsafe || played.shrunk_to.is_some()
        });
        for played in one_by_one {
            let status = match played.expected {
                _ if !played.judged() => "not judged (the load test stopped early)",
                Expected::MustHold => "open",
                Expected::MayFail => "may fail (no tokens)",
                Expected::KnownUnsafe => "expected",
            };
            let _ = writeln!(
                table,
                "| `{:#018x}` | {} | {} | {} | {status} |",
                played.round.seed,
                without_seed(played),
                played.verdict_word(),
                played.failed.join(", ")
            );
        }
        for (seed, why) in &self.unplayed {
            let _ = writeln!(table, "| `{seed:#018x}` | not played: {} | - | - | - |", cell(why));
        }
        let mut expected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for played in expected_ones {
            let seeds = expected.entry(&played.round.setup.strategy).or_default();
            seeds.push(format!("`{:#018x}`", played.round.seed));
        }
        for (strategy, seeds) in expected {
            let _ = writeln!(
                table,
                "| - | {strategy}, known unsafe, caught in {} round(s): {} | not held | - | expected |",
                seeds.len(),
                seeds.join(" ")
            );
        }
        table
    }

    /// The kept rounds played again, a row each: what it came to when it was found, and
    /// now. A round of a setup that must hold must be held now.
    fn kept_rounds(&self, found: &BTreeMap<u64, String>) -> String {
        let mut table = String::from(
            "| kept round | round | when found | now | checks that failed now |\n| --- | --- | --- | --- | --- |\n",
        );
        let found = |seed: &u64| found.get(seed).map_or("-", String::as_str);
        for played in &self.played {
            let _ = writeln!(
                table,
                "| `{:#018x}` | {} | {} | {} | {} |",
                played.round.seed,
                without_seed(played),
                found(&played.round.seed),
                played.verdict_word(),
                played.failed.join(", ")
            );
        }
        for (seed, why) in &self.unplayed {
            let _ = writeln!(
                table,
                "| `{seed:#018x}` | not played: {} | {} | - | - |",
                cell(why),
                found(seed)
            );
        }
        table
    }
}

/// Known-unsafe rounds of a kind, and how many the checks caught.
#[derive(Default)]
struct Caught {
    rounds: usize,
    caught: usize,
}

impl Caught {
    fn count(&mut self, played: &Played) {
        self.rounds += 1;
        self.caught += usize::from(played.caught());
    }

    fn rate(&self) -> String {
        match self.rounds {
            0 => "-".to_owned(),
            rounds => format!("{:.0}%", 100.0 * self.caught as f64 / rounds as f64),
        }
    }
}

/// `text` as one cell of a Markdown table: on one line, without the column bar.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "/")
}

/// The round as one line without its seed (the table has a column for it), and the
/// smallest round it was shrunk to, if it was.
fn without_seed(played: &Played) -> String {
    let after_seed = |described: String| {
        described
            .split_once(": ")
            .map_or(described.clone(), |(_, rest)| rest.to_owned())
    };
    let mut round = after_seed(played.round.describe());
    if let Some((smallest, verdict)) = &played.shrunk_to {
        round.push_str(&format!(
            "; shrunk to: {} ({})",
            after_seed(smallest.describe()),
            word(*verdict)
        ));
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crowd::Size;
    use crate::faults::Strike;
    use crate::setup::Setup;
    use crate::torture::plan::{Round, Timed};

    fn played(seed: u64, strategy: &str, fencing: bool, verdict: Verdict) -> Played {
        let round = Round {
            seed,
            setup: Setup {
                strategy: strategy.to_owned(),
                fencing,
                ..Setup::default()
            },
            crowd: Size::LESSONS,
            steady: None,
            schedule: vec![Timed {
                at_ms: 10,
                strike: Strike::Pause { instance: 0, ms: 900 },
            }],
        };
        Played {
            expected: round.expected(),
            struck: round.schedule.clone(),
            round,
            verdict: Some(verdict),
            failed: Vec::new(),
            operations: 500,
            troubles: Vec::new(),
            report: "crowd.json".into(),
            shrunk_to: None,
            seconds: 1.0,
        }
    }

    #[test]
    fn the_detection_rate_counts_the_locks_with_their_hole_open_and_not_the_baselines() {
        let tally = Tally {
            played: vec![
                played(1, "none", false, Verdict::Oversold),
                played(2, "local", false, Verdict::Oversold),
                played(3, "etcd", false, Verdict::Held),
                played(4, "redis", false, Verdict::Oversold),
                played(5, "etcd", true, Verdict::Held),
            ],
            ..Tally::default()
        };
        let tables = tally.tables();
        assert!(
            tables.contains("| pause an instance | 5 | 1 of 2 | 50% | 2 of 2 | 0 |"),
            "{tables}"
        );
        // The expected failures are one line per strategy, by their seeds.
        assert!(
            tables.contains("| - | none, known unsafe, caught in 1 round(s): `0x0000000000000001` |"),
            "{tables}"
        );
        assert!(!tables.contains("| `0x0000000000000001` |"), "{tables}");
        assert!(tally.holes().is_empty());
    }

    #[test]
    fn a_round_that_must_hold_and_did_not_has_a_row_of_its_own_marked_open() {
        let tally = Tally {
            played: vec![played(7, "etcd", true, Verdict::Oversold)],
            ..Tally::default()
        };
        assert_eq!(tally.holes().len(), 1);
        let tables = tally.tables();
        assert!(tables.contains("| `0x0000000000000007` | etcd (fencing on"), "{tables}");
        assert!(tables.contains("| oversold |  | open |"), "{tables}");
    }

    #[test]
    fn an_expected_round_that_was_shrunk_keeps_its_smallest_round_in_a_row_of_its_own() {
        let mut shrunk = played(8, "none", false, Verdict::Oversold);
        let mut smallest = shrunk.round.clone();
        smallest.crowd = Size { buyers: 20, units: 12 };
        shrunk.shrunk_to = Some((smallest, Some(Verdict::Oversold)));
        let tally = Tally {
            played: vec![shrunk, played(9, "none", false, Verdict::Oversold)],
            ..Tally::default()
        };
        let tables = tally.tables();
        assert!(
            tables.contains("shrunk to: none (fencing off, ttl 500 ms, linger 50 ms, 20 buyers at 12 units)"),
            "{tables}"
        );
        assert!(
            tables.contains("| - | none, known unsafe, caught in 1 round(s): `0x0000000000000009` |"),
            "{tables}"
        );
    }

    #[test]
    fn kept_rounds_played_again_are_a_row_each_with_what_they_came_to_when_found_and_now() {
        let mut again = played(10, "redis", true, Verdict::Oversold);
        again.failed = vec!["unique".to_owned()];
        let tally = Tally {
            played: vec![played(7, "etcd", true, Verdict::Held), again],
            unplayed: vec![(11, "a server\ndid not start".to_owned())],
            kept: Some(BTreeMap::from([
                (7, "oversold (unique, linearizable)".to_owned()),
                (10, "oversold (unique)".to_owned()),
                (11, "lost (lost)".to_owned()),
            ])),
            ..Tally::default()
        };
        let tables = tally.tables();
        let row = "| `0x0000000000000007` | etcd (fencing on, ttl 500 ms, linger 50 ms); at 10 ms: pause A for 900 ms \
                   | oversold (unique, linearizable) | held |  |";
        assert!(tables.contains(row), "{tables}");
        assert!(tables.contains("| oversold (unique) | oversold | unique |"), "{tables}");
        assert!(
            tables.contains("| `0x000000000000000b` | not played: a server did not start | lost (lost) | - | - |"),
            "{tables}"
        );
        assert!(
            !tables.contains("rounds played"),
            "the kept rounds' table alone: {tables}"
        );
        assert_eq!(
            tally.holes().len(),
            1,
            "the round of redis with fencing on that oversold"
        );
    }
}
