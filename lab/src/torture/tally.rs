//! A run of rounds, counted: by configuration, by kind of fault, and each failure with
//! its seed. The same tables go to the terminal and to docs/results/torture.md.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::plan::{kind_of, Expected};
use super::play::Played;

/// Every round a run played, in order.
#[derive(Default)]
pub struct Tally {
    pub played: Vec<Played>,
    /// Rounds that could not be played (a server that did not start...), with why.
    pub unplayed: Vec<(u64, String)>,
    /// What the run was (its seed, its time, its strategies), said above the tables.
    pub header: String,
}

impl Tally {
    /// Rounds on a configuration that must hold whose verdict was not held.
    pub fn holes(&self) -> Vec<&Played> {
        self.played.iter().filter(|played| played.is_a_hole()).collect()
    }

    /// The tables, in Markdown.
    pub fn tables(&self) -> String {
        let mut page = self.header.clone();
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
            *row.entry(played.verdict.as_str()).or_default() += 1;
        }
        let mut table = String::from(
            "| configuration | strategy | rounds | held | not held | verdicts |\n| --- | --- | ---: | ---: | ---: | --- |\n",
        );
        for ((expected, strategy), verdicts) in rows {
            let rounds: usize = verdicts.values().sum();
            let held = verdicts.get("held").copied().unwrap_or(0);
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

    /// Per kind of fault: how often it struck, and on the known-unsafe configurations how
    /// often the round it struck was caught (the detection rate).
    fn by_fault(&self) -> String {
        #[derive(Default)]
        struct Row {
            struck: usize,
            unsafe_rounds: usize,
            caught: usize,
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
                    row.unsafe_rounds += 1;
                    row.caught += usize::from(played.caught());
                }
                row.holes += usize::from(played.is_a_hole());
            }
        }
        let mut table = String::from(
            "| fault | struck | rounds on known-unsafe setups | of them caught | detection rate | holes where it must hold |\n\
             | --- | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for (kind, row) in rows {
            let rate = match row.unsafe_rounds {
                0 => "-".to_owned(),
                rounds => format!("{:.0}%", 100.0 * row.caught as f64 / rounds as f64),
            };
            let _ = writeln!(
                table,
                "| {kind} | {} | {} | {} | {rate} | {} |",
                row.struck, row.unsafe_rounds, row.caught, row.holes
            );
        }
        table + "\n"
    }

    /// Each round that was not held, with its seed: a hole where the setup must hold, or
    /// what a known hole does.
    fn failures(&self) -> String {
        let failed: Vec<&Played> = self.played.iter().filter(|played| played.verdict != "held").collect();
        if failed.is_empty() && self.unplayed.is_empty() {
            return "Every round was held.\n".to_owned();
        }
        let mut table =
            String::from("| seed | round | verdict | checks that failed | status |\n| --- | --- | --- | --- | --- |\n");
        for played in failed {
            let status = match played.expected {
                _ if !played.judged() => "not judged (the load test stopped early)",
                Expected::MustHold => "open",
                Expected::MayFail => "may fail (no tokens)",
                Expected::KnownUnsafe => "expected",
            };
            let described = played.round.describe();
            let mut round = described
                .split_once(": ")
                .map_or(described.clone(), |(_, rest)| rest.to_owned());
            if let Some((smallest, verdict)) = &played.shrunk_to {
                let small = smallest.describe();
                let small = small.split_once(": ").map_or(small.as_str(), |(_, rest)| rest);
                round.push_str(&format!("; shrunk to: {small} ({verdict})"));
            }
            let _ = writeln!(
                table,
                "| `{:#018x}` | {round} | {} | {} | {status} |",
                played.round.seed,
                played.verdict,
                played.failed.join(", ")
            );
        }
        for (seed, why) in &self.unplayed {
            let why = why.replace('\n', " ").replace('|', "/");
            let _ = writeln!(table, "| `{seed:#018x}` | not played: {why} | - | - | - |");
        }
        table
    }
}
