//! The safety matrix: which lock holds under which fault, fenced or not, on one page for
//! a teacher. It is read from the published table of `make chaos`
//! (docs/results/chaos.md), never typed: `loadtest safety-matrix` writes it, `make
//! chaos` publishes it beside its table, and a test checks that the page shows what the
//! command prints.
//!
//! A row is a fault, a column a strategy; a cell gives each fencing's verdicts over its
//! runs: `held`, `oversold`, or how many of the runs were which.

use std::collections::BTreeMap;

/// One row of the chaos table: a fault, a strategy, a fencing, and each run's verdict.
#[derive(Debug, PartialEq)]
pub struct Measured {
    pub fault: String,
    pub strategy: String,
    pub fencing: String,
    pub verdicts: Vec<String>,
}

/// Every row of every chaos table in `page` (a table whose header starts with `fault`,
/// `strategy`, `fencing` and has a `verdicts` column).
pub fn measured(page: &str) -> Vec<Measured> {
    let mut rows = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for line in page.lines() {
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect();
        if !line.starts_with('|') {
            header = None;
        } else if cells.starts_with(&["fault".into(), "strategy".into(), "fencing".into()]) {
            header = Some(cells);
        } else if let Some(columns) = header.as_ref().filter(|columns| columns.len() == cells.len()) {
            let Some(verdicts) = columns.iter().position(|column| column == "verdicts") else {
                continue;
            };
            if cells[0].starts_with("---") {
                continue;
            }
            rows.push(Measured {
                fault: cells[0].clone(),
                strategy: cells[1].clone(),
                fencing: cells[2].clone(),
                verdicts: cells[verdicts].split_whitespace().map(str::to_owned).collect(),
            });
        }
    }
    rows
}

/// What a cell says of one fencing's runs: the verdict when all agree, else each
/// verdict with how many runs gave it (`oversold 1 of 3`).
fn verdicts_in_words(verdicts: &[String]) -> String {
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for verdict in verdicts {
        *counted.entry(verdict).or_default() += 1;
    }
    match counted.len() {
        0 => "-".to_owned(),
        1 => counted.keys().next().copied().unwrap_or("-").to_owned(),
        _ => counted
            .iter()
            .map(|(verdict, runs)| format!("{verdict} {runs} of {}", verdicts.len()))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The matrix, in Markdown: a row per fault, a column per strategy (each in the order
/// the table first names it); a cell per fencing, `on`, `off` or `no_tokens`.
pub fn matrix(rows: &[Measured]) -> String {
    let mut faults: Vec<&str> = Vec::new();
    let mut strategies: Vec<&str> = Vec::new();
    for row in rows {
        if !faults.contains(&row.fault.as_str()) {
            faults.push(&row.fault);
        }
        if !strategies.contains(&row.strategy.as_str()) {
            strategies.push(&row.strategy);
        }
    }
    let mut text = format!("| fault | {} |\n", strategies.join(" | "));
    text.push_str(&format!("| --- |{}\n", " --- |".repeat(strategies.len())));
    for fault in &faults {
        let cells: Vec<String> = strategies
            .iter()
            .map(|strategy| {
                let said: Vec<String> = rows
                    .iter()
                    .filter(|row| row.fault == *fault && row.strategy == *strategy)
                    .map(|row| format!("{}: {}", row.fencing, verdicts_in_words(&row.verdicts)))
                    .collect();
                if said.is_empty() {
                    " ".to_owned()
                } else {
                    said.join("; ")
                }
            })
            .collect();
        text.push_str(&format!("| {fault} | {} |\n", cells.join(" | ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
Some prose | with a bar.

| fault | strategy | fencing | runs | verdicts |
| --- | --- | --- | ---: | --- |
| holder-paused | redis | on | 3 | held held held |
| holder-paused | redis | off | 3 | oversold held oversold |
| holder-paused | redlock | no_tokens | 3 | oversold oversold oversold |
| mysql-killed | mysql | on | 3 | held held held |

| other | table |
| --- | --- |
| a | b |
";

    #[test]
    fn the_rows_of_a_chaos_table_are_read_and_other_tables_left_out() {
        let rows = measured(PAGE);
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            Measured {
                fault: "holder-paused".into(),
                strategy: "redis".into(),
                fencing: "off".into(),
                verdicts: vec!["oversold".into(), "held".into(), "oversold".into()],
            }
        );
    }

    #[test]
    fn a_cell_gives_each_fencing_its_verdict_or_how_many_runs_gave_which() {
        let matrix = matrix(&measured(PAGE));
        assert_eq!(
            matrix,
            "| fault | redis | redlock | mysql |\n\
             | --- | --- | --- | --- |\n\
             | holder-paused | on: held; off: held 1 of 3, oversold 2 of 3 | no_tokens: oversold |   |\n\
             | mysql-killed |   |   | on: held |\n"
        );
    }
}
