//! The benchmark's report: one HTML file that tells the story without the terminal.
//! Self-contained: the charts are inline SVG drawn here, no script, no font, no
//! address outside the file, so it opens the same offline, attached to a mail, or years later.
//!
//! Sections: units sold against the stock line; sales per second against the bound;
//! the crowd's latencies; the lock-wait distributions; the bound ratios; the tables;
//! and, when those runs exist, the chaos table and the raw lock benchmark.

use std::fmt::Write;

use crate::bench::{StrategyBench, TARGET_RATIO};

const WIDTH: f64 = 760.0;
const LABEL_WIDTH: f64 = 170.0;
const ROW: f64 = 18.0;
const COLORS: [&str; 10] =
    ["#2f6fb0", "#e07b28", "#3a9a4a", "#c03a3a", "#7b55b0", "#8a5a44", "#d063a8", "#6f6f6f", "#a8a030", "#2aa8b8"];

/// What the report is made of, besides the benchmark itself.
pub struct Extras {
    /// When and where it ran, in words.
    pub headline: String,
    /// The chaos suite's table (Markdown), if `make chaos` ran.
    pub chaos_table: Option<String>,
    /// The raw lock benchmark's table (Markdown), if `make lockbench` ran.
    pub lockbench_table: Option<String>,
}

pub fn report(benches: &[StrategyBench], extras: &Extras) -> String {
    let mut page = String::new();
    page.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>seckill benchmark</title>\n<style>\n\
         body { font: 14px/1.45 system-ui, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; color: #222 }\n\
         table { border-collapse: collapse; margin: 1em 0; font-size: 12px }\n\
         th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right }\n\
         th:first-child, td:first-child { text-align: left }\n\
         svg { display: block; margin: 0.5em 0 1.5em }\n\
         .note { color: #555 }\n\
         </style></head><body>\n",
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
            run.local_queue = true; // the label already says when the line was off
            run.database = None;
            Some(run)
        })
        .collect();
    section(&mut page, "Units sold against the stock", "One crowd run per strategy: 500 buyers, 300 units, two instances. Red is oversold: units sold beyond the stock.");
    page.push_str("<div style=\"overflow-x: auto\">");
    page.push_str(&super::chart::comparison_svg(&crowd));
    page.push_str("</div>\n");

    section(&mut page, "Sales per second against the bound", "Serial: one client alone. Sustained: many keep-alive connections on both instances. Bound: one sale per critical path at the measured round-trip time.");
    let rows: Vec<(String, Vec<f64>)> = benches
        .iter()
        .map(|b| {
            (
                b.label.clone(),
                vec![b.serial.sales_per_second, b.sustained.sales_per_second, b.bound_sales_per_second.unwrap_or(0.0)],
            )
        })
        .collect();
    page.push_str(&bars(&rows, &["serial", "sustained", "bound"], "sales/s", Scale::Log, None));

    section(
        &mut page,
        "Fraction of the bound",
        "Sales per second divided by the bound; the line is the target of 0.7. The baselines have no bound.",
    );
    let rows: Vec<(String, Vec<f64>)> = benches
        .iter()
        .filter(|b| b.bound_sales_per_second.is_some())
        .map(|b| (b.label.clone(), vec![b.serial_ratio().unwrap_or(0.0), b.sustained_ratio().unwrap_or(0.0)]))
        .collect();
    page.push_str(&bars(&rows, &["serial / bound", "sustained / bound"], "", Scale::Linear, Some(TARGET_RATIO)));

    section(
        &mut page,
        "The crowd's latency",
        "Median over the runs of each percentile: how long a buyer waited for an answer.",
    );
    let rows: Vec<(String, Vec<f64>)> = benches
        .iter()
        .map(|b| (b.label.clone(), vec![b.crowd.p50_ms.median, b.crowd.p95_ms.median, b.crowd.p99_ms.median]))
        .collect();
    page.push_str(&bars(&rows, &["p50", "p95", "p99"], "ms", Scale::Log, None));

    section(&mut page, "How long buyers waited for the lock", "Every answer of every crowd run: the fraction of buyers (up) who waited at most that long (right). A fair queue rises steadily; a lock that lets the releaser win again leaves a long tail.");
    page.push_str(&lock_wait_curves(benches));

    section(&mut page, "The figures", "");
    page.push_str(&markdown_tables(&crate::bench::render_tables(benches)));

    if let Some(table) = &extras.chaos_table {
        section(&mut page, "Chaos: faults under load (make chaos)", "");
        page.push_str(&markdown_tables(table));
    }
    if let Some(table) = &extras.lockbench_table {
        section(&mut page, "The locks alone (make lockbench)", "Acquire+release pairs per second, without the sale.");
        page.push_str(&markdown_tables(table));
    }
    page.push_str("</body></html>\n");
    page
}

fn section(page: &mut String, title: &str, note: &str) {
    let _ = writeln!(page, "<h2>{}</h2>", escape(title));
    if !note.is_empty() {
        let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(note));
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    /// For figures that span several powers of ten (1 ms to 10 s, 100 to 50 000 sales/s).
    Log,
}

/// Horizontal grouped bars: one group per row, one bar per series, values written at the end.
fn bars(rows: &[(String, Vec<f64>)], series: &[&str], unit: &str, scale: Scale, line_at: Option<f64>) -> String {
    let max = rows.iter().flat_map(|(_, values)| values.iter().copied()).fold(0.0, f64::max).max(1e-9);
    let min_positive =
        rows.iter().flat_map(|(_, values)| values.iter().copied()).filter(|v| *v > 0.0).fold(max, f64::min);
    let plot = WIDTH - LABEL_WIDTH - 90.0;
    let floor = (min_positive / 2.0).log10().floor();
    let x = |value: f64| -> f64 {
        match scale {
            Scale::Linear => value / max * plot,
            Scale::Log if value <= 0.0 => 0.0,
            Scale::Log => ((value.log10() - floor) / (max.log10() - floor)).clamp(0.0, 1.0) * plot,
        }
    };
    let group = ROW * series.len() as f64 + 8.0;
    let height = 30.0 + group * rows.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n"
    );
    for (i, name) in series.iter().enumerate() {
        let left = LABEL_WIDTH + i as f64 * 150.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{left}\" y=\"4\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"13\">{}</text>",
            COLORS[i],
            left + 14.0,
            escape(name)
        );
    }
    if scale == Scale::Log {
        let _ = writeln!(svg, "<text x=\"{}\" y=\"13\" fill=\"#777\">log scale</text>", WIDTH - 70.0);
    }
    for (row, (label, values)) in rows.iter().enumerate() {
        let top = 24.0 + row as f64 * group;
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LABEL_WIDTH - 6.0,
            top + group / 2.0,
            escape(label)
        );
        for (i, value) in values.iter().enumerate() {
            let y = top + i as f64 * ROW;
            let width = x(*value);
            // No value (a baseline has no bound): a dash, without a unit.
            let shown = if *value == 0.0 {
                "—".to_owned()
            } else if *value >= 100.0 {
                format!("{value:.0} {unit}")
            } else {
                format!("{value:.2} {unit}")
            };
            let _ = writeln!(svg, "<rect x=\"{LABEL_WIDTH}\" y=\"{y}\" width=\"{width:.1}\" height=\"{}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{}</text>", ROW - 4.0, COLORS[i % COLORS.len()], LABEL_WIDTH + width + 4.0, y + ROW - 7.0, escape(shown.trim()));
        }
    }
    if let Some(at) = line_at {
        let left = LABEL_WIDTH + x(at);
        let _ = writeln!(svg, "<line x1=\"{left:.1}\" y1=\"20\" x2=\"{left:.1}\" y2=\"{height}\" stroke=\"#c03a3a\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{}\" fill=\"#c03a3a\">{at}</text>", left + 3.0, height - 4.0);
    }
    svg.push_str("</svg>\n");
    svg
}

/// One cumulative curve per strategy: waited at most x (log scale, 0.01 ms to the
/// longest wait) for the fraction y of answers.
fn lock_wait_curves(benches: &[StrategyBench]) -> String {
    let (left, top, plot_width, plot_height) = (60.0, 10.0, WIDTH - 230.0, 260.0);
    let longest = benches.iter().filter_map(|b| b.lock_waits_ms.last().copied()).fold(1.0, f64::max);
    let (low, high) = (-2.0, longest.log10().ceil());
    let x = |ms: f64| left + ((ms.max(0.01).log10() - low) / (high - low)).clamp(0.0, 1.0) * plot_width;
    let y = |fraction: f64| top + (1.0 - fraction) * plot_height;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        plot_height + 50.0
    );
    let _ = writeln!(svg, "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_width}\" height=\"{plot_height}\" fill=\"none\" stroke=\"#ccc\"/>");
    for power in (low as i32)..=(high as i32) {
        let ms = 10f64.powi(power);
        let at = x(ms);
        let _ = writeln!(svg, "<line x1=\"{at:.1}\" y1=\"{top}\" x2=\"{at:.1}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">{} ms</text>", top + plot_height, top + plot_height + 14.0, ms);
    }
    for fraction in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}%</text>",
            left - 4.0,
            y(fraction) + 4.0,
            fraction * 100.0
        );
    }
    let with_waits = benches.iter().filter(|b| !b.lock_waits_ms.is_empty() && b.critical_path.is_some());
    for (i, bench) in with_waits.enumerate() {
        let color = COLORS[i % COLORS.len()];
        let waits = &bench.lock_waits_ms;
        let step = (waits.len() / 200).max(1);
        let points: Vec<String> = waits
            .iter()
            .enumerate()
            .step_by(step)
            .chain(std::iter::once((waits.len() - 1, &waits[waits.len() - 1])))
            .map(|(n, ms)| format!("{:.1},{:.1}", x(*ms), y((n + 1) as f64 / waits.len() as f64)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>",
            points.join(" ")
        );
        let legend_y = top + 12.0 + i as f64 * 15.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            left + plot_width + 12.0,
            legend_y - 9.0,
            left + plot_width + 26.0,
            legend_y,
            escape(&bench.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Markdown tables (and the sentences between them) as HTML.
pub fn markdown_tables(markdown: &str) -> String {
    let mut html = String::new();
    let mut in_table = false;
    let mut header = true;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('|') {
            if !in_table {
                html.push_str("<table>\n");
                in_table = true;
                header = true;
            }
            let cells: Vec<&str> = trimmed.trim_matches('|').split('|').map(str::trim).collect();
            if cells.iter().all(|cell| cell.chars().all(|c| matches!(c, '-' | ':' | ' '))) {
                continue; // the alignment row
            }
            let tag = if header { "th" } else { "td" };
            html.push_str("<tr>");
            for cell in cells {
                let _ = write!(html, "<{tag}>{}</{tag}>", escape(cell).replace("**", ""));
            }
            html.push_str("</tr>\n");
            header = false;
        } else {
            if in_table {
                html.push_str("</table>\n");
                in_table = false;
            }
            if !trimmed.is_empty() {
                let _ = writeln!(html, "<p>{}</p>", escape(trimmed));
            }
        }
    }
    if in_table {
        html.push_str("</table>\n");
    }
    html
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_become_html_tables_without_the_alignment_row() {
        let html = markdown_tables("Some words.\n\n| a | b |\n| --- | ---: |\n| x <y> | 1 |\n");
        assert!(html.contains("<p>Some words.</p>"));
        assert!(html.contains("<tr><th>a</th><th>b</th></tr>"));
        assert!(html.contains("<tr><td>x &lt;y&gt;</td><td>1</td></tr>"));
        assert!(!html.contains("---"));
    }

    #[test]
    fn log_bars_keep_their_order_and_zero_draws_nothing() {
        let svg = bars(&[("a".into(), vec![100.0, 10_000.0, 0.0])], &["x", "y", "z"], "sales/s", Scale::Log, None);
        let widths: Vec<f64> = svg
            .lines()
            .filter_map(|line| line.split("width=\"").nth(1))
            .filter_map(|rest| rest.split('"').next()?.parse().ok())
            .collect();
        // The legend's three squares are 10 wide; then the bars.
        let bars = &widths[widths.len() - 3..];
        assert!(bars[0] < bars[1], "{svg}");
        assert_eq!(bars[2], 0.0, "{svg}");
    }
}
