//! The benchmark's report: one HTML file that tells the story without the terminal.
//! Self-contained: the charts are inline SVG drawn here, no script, no font, no
//! address outside the file, so it opens the same offline, attached to a mail, or years later.
//!
//! Sections: units sold against the stock line; sales per second against the bound;
//! the crowd's latencies; the lock-wait distributions; the bound ratios; the tables;
//! and, when those runs exist, the chaos table and the raw lock benchmark.

use std::fmt::Write;

use crate::bench::breakdown::mean_ms;
use crate::bench::lockbench::Run;
use crate::bench::{runs_over_segments, StrategyBench, TARGET_RATIO};

use super::chart::{bars, comparison_svg, lock_wait_curves, stacked_bars, Scale};
use super::document::{self, Table};
use super::{escape, tables};

/// The page's look. A chart wider than the column shrinks to fit it (each has a `viewBox`).
const STYLE: &str = "\
body { font: 14px/1.45 system-ui, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222 }
table { border-collapse: collapse; margin: 1em 0; font-size: 12px }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right }
th:first-child, td:first-child, td.text { text-align: left }
svg { display: block; margin: 0.5em 0 1.5em; max-width: 100%; height: auto }
.note { color: #555 }
";

/// What the report is made of, besides the benchmark itself.
pub struct Extras {
    /// When and where it ran, in words.
    pub headline: String,
    /// The chaos suite's table, if `make chaos` ran. Markdown: `scripts/chaos.sh` writes only that.
    pub chaos_table: Option<String>,
    /// The raw lock benchmark's runs, if `make lockbench` ran.
    pub lockbench: Option<Vec<Run>>,
}

pub fn report(benches: &[StrategyBench], extras: &Extras) -> String {
    let mut page = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>seckill benchmark</title>\n\
         <style>\n{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(
        page,
        "<h1>seckill: distributed locks guarding a flash sale</h1>\n<p class=\"note\">{}</p>",
        escape(&extras.headline)
    );

    // Each row under the name the benchmark gave its run (the Python peer's instances
    // say they run `redis`).
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
    section(&mut page, "Units sold against the stock", "One crowd run per strategy: 500 buyers, 300 units, two instances. Red is oversold: units sold beyond the stock.");
    page.push_str(&comparison_svg(&crowd));

    section(&mut page, "Sales per second against the bounds", "Serial: one client alone. Sustained: many keep-alive connections on both instances. Protocol bound: one sale per lock's own critical path at the measured round-trip times. Backend bound: one sale per the fewest round trips any correct lock on that backend needs.");
    let rows: Vec<(String, Vec<f64>)> = benches
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
    page.push_str(&bars(
        &rows,
        &["serial", "sustained", "protocol bound", "backend bound"],
        "sales/s",
        Scale::Log,
        None,
    ));

    section(
        &mut page,
        "Fraction of the bounds",
        "Serial over the serial bound (goal 0.8), sustained over the backend bound (goal 0.7: the dashed line) and over the lock's own protocol bound. The baselines have no bound.",
    );
    let rows: Vec<(String, Vec<f64>)> = benches
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
    page.push_str(&bars(
        &rows,
        &[
            "serial / serial bound",
            "sustained / backend bound",
            "sustained / protocol bound",
        ],
        "",
        Scale::Linear,
        Some(TARGET_RATIO),
    ));

    let rows: Vec<(String, Vec<f64>)> = benches
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
    // Results written before the service timed its steps have nothing to show here.
    if !rows.is_empty() {
        section(
            &mut page,
            "Where the time goes",
            "Under sustained load, the mean of one sale on the critical path, in ms: the stock's read and write and the rest of the hold (the service's own work between grant and release), then the hand-over gap from the release to the next grant, on either instance (the lock's share: the release's way to the backend, the wake-up, the next acquire).",
        );
        page.push_str(&stacked_bars(
            &rows,
            &["read", "write", "rest of the hold", "hand-over gap"],
            "ms",
        ));
    }

    let rows = segment_rows(benches);
    if !rows.is_empty() {
        section(
            &mut page,
            "Past one lock: stock segments",
            "The stock split into N segments, each behind a lock of its own: sustained sales per second against N times one lock's backend bound. The bars climb with N as long as nothing else (a server, the cores) runs out first.",
        );
        page.push_str(&bars(
            &rows,
            &["sustained", "N x one lock's backend bound"],
            "sales/s",
            Scale::Log,
            None,
        ));
    }

    section(
        &mut page,
        "The crowd's latency",
        "Median over the runs of each percentile: how long a buyer waited for an answer.",
    );
    let rows: Vec<(String, Vec<f64>)> = benches
        .iter()
        .map(|b| {
            (
                b.label.clone(),
                vec![b.crowd.p50_ms.median, b.crowd.p95_ms.median, b.crowd.p99_ms.median],
            )
        })
        .collect();
    page.push_str(&bars(&rows, &["p50", "p95", "p99"], "ms", Scale::Log, None));

    section(&mut page, "How long buyers waited for the lock", "Every answer of every crowd run: the fraction of buyers (up) who waited at most that long (right). A fair queue rises steadily; a lock that lets the releaser win again leaves a long tail.");
    page.push_str(&lock_wait_curves(benches));

    section(&mut page, "The figures", "");
    page.push_str(&document::html(&tables::bench(benches)));

    if let Some(table) = &extras.chaos_table {
        section(&mut page, "Chaos: faults under load (make chaos)", "");
        page.push_str(&document::html(&Table::parse_markdown(table)));
    }
    if let Some(runs) = &extras.lockbench {
        section(
            &mut page,
            "The locks alone (make lockbench)",
            "Acquire+release pairs per second, without the sale.",
        );
        page.push_str(&tables::lockbench(runs).html());
        if runs.iter().any(|run| run.recipe_of.is_some()) {
            section(
                &mut page,
                "Ours against the recipes people use",
                "Each canonical recipe (loadtest/peers/) beside our lock on the same backend, one key, the same contenders, measured in the same run.",
            );
            page.push_str(&tables::against_recipes(runs).html());
        }
    }
    page.push_str("</body></html>\n");
    page
}

/// One row per run of a strategy that was also run over several segments, by segments.
fn segment_rows(benches: &[StrategyBench]) -> Vec<(String, Vec<f64>)> {
    runs_over_segments(benches)
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
        .collect()
}

fn section(page: &mut String, title: &str, note: &str) {
    let _ = writeln!(page, "<h2>{}</h2>", escape(title));
    if !note.is_empty() {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(note));
    }
}
