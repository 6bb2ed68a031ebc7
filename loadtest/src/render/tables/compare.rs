//! Several verdict runs side by side, one row each: what `loadtest --compare` prints.
//! Apart from the benchmark's tables, because it reads reports, not benchmarks.

use crate::render::document::{Align, Table};
use crate::render::per_sale_label;
use crate::verdict::Report;

use super::verdict_word;

use Align::{Left, Right};

/// Several verdict runs, one row each.
pub fn comparison(reports: &[Report]) -> Table {
    let mut table = Table::new(&[
        ("strategy", Left),
        ("verdict", Left),
        ("expected", Left),
        ("sold", Right),
        ("stock left", Right),
        ("units sold twice", Right),
        ("errors", Right),
        ("req/s", Right),
        ("p50 ms", Right),
        ("p99 ms", Right),
        ("stmts/sale", Right),
        ("conflicts/sale", Right),
    ]);
    for r in reports {
        let expected = if r.expected_to_oversell { "oversells" } else { "holds" };
        let (statements, conflicts) = match &r.database {
            Some(cost) => (
                per_sale_label(cost.statements_per_sale()),
                per_sale_label(cost.conflicts_per_sale()),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        table.push(vec![
            r.label(),
            verdict_word(r.verdict).to_owned(),
            expected.to_owned(),
            r.lucky.to_string(),
            r.stock_left.to_string(),
            r.units_sold_twice.to_string(),
            r.error_count().to_string(),
            format!("{:.0}", r.requests_per_second),
            format!("{:.1}", r.p50_ms),
            format!("{:.1}", r.p99_ms),
            statements,
            conflicts,
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::report::tests::report;
    use crate::verdict::Verdict;

    #[test]
    fn the_comparison_has_a_row_per_run_under_its_header() {
        let table = comparison(&[report("none", Verdict::Oversold), report("redis", Verdict::Held)]).markdown();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[0].starts_with("| strategy | verdict | expected | sold |"),
            "{table}"
        );
        assert!(lines[1].starts_with("| --- | --- | --- | ---: |"), "{table}");
        assert_eq!(
            lines[2],
            "| none | OVERSOLD | oversells | 3 | 0 | 0 | 0 | 5 | 1.0 | 1.0 | - | - |"
        );
    }
}
