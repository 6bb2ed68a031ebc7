//! The benchmark's report: one HTML file that tells the story without the terminal.
//! Self-contained: the charts are inline SVG drawn here, no script, no font, no
//! address outside the file, so it opens the same offline, attached to a mail, or years later.
//!
//! The page is the template `loadtest/templates/report.html`, which holds the sections'
//! titles and notes. Askama escapes what it puts in, so a headline cannot break the page.
//! Each function below draws one section's chart or table, in the page's order:
//! units sold against the stock line; sales per second against the bound;
//! the bound ratios; where the time goes; the stock segments; the crowd's latencies;
//! the lock-wait distributions; the tables; and, when those runs exist, the chaos
//! table and the raw lock benchmark.

use askama::Template;

use crate::bench::breakdown::mean_ms;
use crate::bench::lockbench::Run;
use crate::bench::{runs_over_segments, StrategyBench, TARGET_RATIO};

use super::chart::{bars, comparison_svg, lock_wait_curves, stacked_bars, Scale};
use super::document::{self, Table};
use super::tables;

/// What the report is made of, besides the benchmark itself.
pub struct Extras {
    /// When and where it ran, in words.
    pub headline: String,
    /// The chaos suite's table, if `make chaos` ran.
    pub chaos_table: Option<Table>,
    /// The raw lock benchmark's runs, if `make lockbench` ran.
    pub lockbench: Option<Vec<Run>>,
    /// Each strategy's crowd runs' timelines (`redis.crowd-1.history.html`), as links
    /// from the report's folder, by the strategy's label.
    pub timelines: Vec<(String, Vec<(usize, String)>)>,
}

/// The page's values. Every chart and table is HTML drawn by `render`, already escaped;
/// a section that is `None` is left out.
#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    headline: &'a str,
    units_sold: String,
    rates: String,
    ratios: String,
    time_spent: Option<String>,
    segments: Option<String>,
    latency: String,
    lock_waits: String,
    figures: String,
    chaos: Option<String>,
    timelines: Vec<(String, Vec<(usize, String)>)>,
    lockbench: Option<String>,
    recipes: Option<String>,
}

/// A chart's rows: a label, then one value per series.
type Rows = Vec<(String, Vec<f64>)>;

pub fn report(benches: &[StrategyBench], extras: &Extras) -> String {
    let runs = extras.lockbench.as_deref();
    let page = Page {
        headline: &extras.headline,
        units_sold: units_sold(benches),
        rates: rates(benches),
        ratios: ratios(benches),
        time_spent: time_spent(benches),
        segments: segments(benches),
        latency: latency(benches),
        lock_waits: lock_wait_curves(benches),
        figures: document::html(&tables::bench(benches)),
        chaos: extras.chaos_table.as_ref().map(Table::html),
        timelines: extras.timelines.clone(),
        lockbench: runs.map(|runs| tables::lockbench(runs).html()),
        recipes: runs
            .filter(|runs| runs.iter().any(|run| run.recipe_of.is_some()))
            .map(|runs| tables::against_recipes(runs).html()),
    };
    page.render().expect("the template writes only to a String")
}

/// One crowd run per strategy, each under the name the benchmark gave its run
/// (the Python peer's instances say they run `redis`).
fn units_sold(benches: &[StrategyBench]) -> String {
    let crowd: Vec<_> = benches
        .iter()
        .filter_map(|bench| {
            let mut run = bench.crowd_runs.first().cloned()?;
            run.strategy = bench.label.clone();
            run.local_queue = true; // the label already says when the local queue was off
            run.database = None;
            Some(run)
        })
        .collect();
    comparison_svg(&crowd)
}

/// Serial and sustained sales per second beside the two bounds.
fn rates(benches: &[StrategyBench]) -> String {
    let rows: Rows = benches
        .iter()
        .map(|b| {
            (
                b.label.clone(),
                vec![
                    b.serial.sales_per_second,
                    b.sustained.sales_per_second,
                    b.bound_sales_per_second.unwrap_or(0.0),
                    b.backend_bound_sales_per_second.unwrap_or(0.0),
                ],
            )
        })
        .collect();
    bars(
        &rows,
        &["serial", "sustained", "protocol bound", "backend bound"],
        "sales/s",
        Scale::Log,
        None,
    )
}

/// The rates over their bounds, against the goal's dashed line; the baselines have no bound.
fn ratios(benches: &[StrategyBench]) -> String {
    let rows: Rows = benches
        .iter()
        .filter(|b| b.bound_sales_per_second.is_some())
        .map(|b| {
            (
                b.label.clone(),
                vec![
                    b.serial_ratio().unwrap_or(0.0),
                    b.sustained_backend_ratio().unwrap_or(0.0),
                    b.sustained_ratio().unwrap_or(0.0),
                ],
            )
        })
        .collect();
    bars(
        &rows,
        &[
            "serial / serial bound",
            "sustained / backend bound",
            "sustained / protocol bound",
        ],
        "",
        Scale::Linear,
        Some(TARGET_RATIO),
    )
}

/// One sale's mean time on the critical path, split into its steps and the hand-over gap.
/// `None` for results written before the service timed its steps.
fn time_spent(benches: &[StrategyBench]) -> Option<String> {
    let rows: Rows = benches
        .iter()
        .filter(|b| b.critical_path.is_some())
        .filter_map(|b| {
            let hand_over = b.sustained.hand_over.as_ref()?;
            let step = |name: &str| mean_ms(&b.sustained_steps, name).unwrap_or(0.0);
            let (read, write) = (step("read"), step("write"));
            let rest = (hand_over.mean_hold_ms - read - write).max(0.0);
            Some((b.label.clone(), vec![read, write, rest, hand_over.mean_gap_ms]))
        })
        .collect();
    (!rows.is_empty()).then(|| stacked_bars(&rows, &["read", "write", "rest of the hold", "hand-over gap"], "ms"))
}

/// One row per run of a strategy that was also run over several segments, by segments;
/// `None` if no strategy was.
fn segments(benches: &[StrategyBench]) -> Option<String> {
    let rows: Rows = runs_over_segments(benches)
        .into_iter()
        .map(|b| {
            (
                b.label.clone(),
                vec![
                    b.sustained.sales_per_second,
                    b.backend_bound_sales_per_second.unwrap_or(0.0),
                ],
            )
        })
        .collect();
    (!rows.is_empty()).then(|| {
        bars(
            &rows,
            &["sustained", "N x one lock's backend bound"],
            "sales/s",
            Scale::Log,
            None,
        )
    })
}

/// The crowd's percentiles, each the median over the runs.
fn latency(benches: &[StrategyBench]) -> String {
    let rows: Rows = benches
        .iter()
        .map(|b| {
            (
                b.label.clone(),
                vec![b.crowd.p50_ms.median, b.crowd.p95_ms.median, b.crowd.p99_ms.median],
            )
        })
        .collect();
    bars(&rows, &["p50", "p95", "p99"], "ms", Scale::Log, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: &str, recipe_of: Option<&str>) -> Run {
        Run {
            strategy: strategy.into(),
            contenders: 16,
            keys: "one".into(),
            pairs: 100,
            errors: 0,
            pairs_per_second: 50.0,
            median_pair_ms: 1.0,
            p99_pair_ms: 2.0,
            first_error: None,
            recipe_of: recipe_of.map(str::to_owned),
        }
    }

    #[test]
    fn the_report_escapes_what_it_is_given_and_holds_every_section() {
        let extras = Extras {
            headline: "run at <noon> & \"here\"".into(),
            chaos_table: Some({
                let mut table = Table::new(&[("fault", document::Align::Left), ("verdicts", document::Align::Left)]);
                table.push(vec!["a <b> & c".into(), "held".into()]);
                table
            }),
            lockbench: Some(vec![run("redis", None), run("redis-py", Some("redis"))]),
            timelines: vec![("red<is>".into(), vec![(1, "a\"b.html".into()), (3, "c.html".into())])],
        };
        let page = report(&[], &extras);
        assert!(
            page.contains("<p>red&#60;is&#62;: <a href=\"a&#34;b.html\">run 1</a> <a href=\"c.html\">run 3</a></p>"),
            "{page}"
        );
        assert!(
            page.contains("<p class=\"note\">run at &#60;noon&#62; &#38; &#34;here&#34;</p>"),
            "{page}"
        );
        assert!(page.contains("<td>a &lt;b&gt; &amp; c</td>"), "{page}");
        assert!(!page.contains("<noon>") && !page.contains("<b>"), "{page}");
        for section in [
            "Units sold against the stock",
            "Sales per second against the bounds",
            "Fraction of the bounds",
            "The crowd's latency",
            "How long buyers waited for the lock",
            "The figures",
            "Each crowd run's history",
            "Chaos: faults under load (make chaos)",
            "The locks alone (make lockbench)",
            "Ours against the recipes people use",
        ] {
            assert!(
                page.contains(&format!("<h2>{section}</h2>")),
                "no section {section}: {page}"
            );
        }
        assert!(
            page.starts_with("<!doctype html>") && page.ends_with("</body></html>\n"),
            "{page}"
        );
    }

    #[test]
    fn sections_without_their_runs_are_left_out() {
        let extras = Extras {
            headline: String::new(),
            chaos_table: None,
            lockbench: Some(vec![run("redis", None)]),
            timelines: Vec::new(),
        };
        let page = report(&[], &extras);
        assert!(page.contains("<h2>The locks alone (make lockbench)</h2>"), "{page}");
        for absent in [
            "Chaos",
            "Ours against the recipes",
            "Where the time goes",
            "Past one lock",
        ] {
            assert!(
                !page.contains(&format!("<h2>{absent}")),
                "{absent} without its runs: {page}"
            );
        }
    }
}
