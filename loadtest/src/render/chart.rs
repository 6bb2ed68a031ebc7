//! The charts, as plain SVG written by hand.
//!
//! No charting crate: each chart is a few rectangles, lines and labels, and written
//! out they stay short, exact (the tests read the bars back) and self-contained. They
//! open in any browser, render on GitHub, and load no font and no script.
//!
//! Every chart sizes itself to its labels, so no text runs past its right edge, and
//! carries a `viewBox`, so a page can shrink it to its column.
//!
//! - [`comparison_svg`]: units sold against the stock, one bar per strategy.
//! - [`bars`]: grouped horizontal bars, linear or log scale.
//! - [`lock_wait_curves`]: how long buyers waited for the lock, one curve per strategy.

use std::fmt::Write;

use crate::bench::StrategyBench;
use crate::verdict::Report;

use super::escape;

const GREEN: &str = "#2e9e5b";
const RED: &str = "#d64545";
const COLORS: [&str; 10] = [
    "#2f6fb0", "#e07b28", "#3a9a4a", "#c03a3a", "#7b55b0", "#8a5a44", "#d063a8", "#6f6f6f", "#a8a030", "#2aa8b8",
];
/// The widest a sans-serif character runs, as a fraction of the font size. SVG cannot
/// measure text before a browser draws it, so each chart reserves this much per character.
const CHARACTER_WIDTH: f64 = 0.62;

/// How wide `text` may be drawn at `font_size` pixels.
fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars().count() as f64 * font_size * CHARACTER_WIDTH
}

/// The opening tag: the size in pixels, and the same as a `viewBox` so it can scale.
fn svg_open(width: f64, height: f64, font_size: u32) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"{font_size}\">\n"
    )
}

/// Units sold against the stock, one bar per report.
///
/// The bar is green up to the stock and red beyond it, so an oversell is a red tail
/// past the dashed "stock" line.
pub fn comparison_svg(reports: &[Report]) -> String {
    const FONT: f64 = 14.0;
    const BAR_AREA: f64 = 400.0;
    const ROW_HEIGHT: f64 = 46.0;
    const TOP: f64 = 64.0;
    let initial = reports.iter().map(|r| r.initial_stock).max().unwrap_or(0).max(1) as f64;
    let longest = reports.iter().map(|r| r.lucky as f64).fold(initial, f64::max);
    let scale = BAR_AREA / (longest * 1.05);
    let height = TOP + ROW_HEIGHT * reports.len() as f64 + 40.0;
    let users = reports.first().map_or(0, |r| r.users);
    let hosts = reports.first().map_or(0, |r| r.hosts.len());
    let title = format!("{users} buyers, {initial} units, {hosts} instances: units sold per lock strategy");

    let names: Vec<String> = reports.iter().map(Report::label).collect();
    let figures: Vec<String> = reports.iter().map(figures_of).collect();
    let label_width = names
        .iter()
        .map(|name| 16.0 + text_width(name, FONT) + 16.0)
        .fold(230.0, f64::max);
    let figures_x = label_width + BAR_AREA + 12.0;
    let width = figures
        .iter()
        .map(|figures| figures_x + text_width(figures, FONT) + 16.0)
        .fold(16.0 + text_width(&title, 18.0) + 16.0, f64::max);

    let mut svg = svg_open(width, height, FONT as u32);
    let _ = write!(
        svg,
        r##"<rect width="100%" height="100%" fill="white"/>
<text x="16" y="28" font-size="18" font-weight="bold">{title}</text>
<text x="16" y="48" fill="#555">green: sold within the stock · red: sold beyond it (oversold)</text>
"##,
        title = escape(&title)
    );
    for (row, report) in reports.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * row as f64;
        let within = (report.lucky as f64).min(initial).max(0.0);
        let beyond = (report.lucky as f64 - initial).max(0.0);
        let _ = write!(
            svg,
            r#"<text x="16" y="{ty}" font-weight="bold">{name}</text>
<rect x="{label_width:.1}" y="{y}" width="{w1:.1}" height="26" fill="{GREEN}"/>
<rect x="{x2:.1}" y="{y}" width="{w2:.1}" height="26" fill="{RED}"/>
<text x="{figures_x:.1}" y="{ty}">{figures}</text>
"#,
            ty = y + 18.0,
            name = escape(&names[row]),
            w1 = within * scale,
            x2 = label_width + within * scale,
            w2 = beyond * scale,
            figures = escape(&figures[row]),
        );
    }
    let (stock_x, bottom) = (label_width + initial * scale, TOP + ROW_HEIGHT * reports.len() as f64);
    stock_line(&mut svg, stock_x, TOP - 6.0, bottom, initial);
    svg.push_str("</svg>\n");
    svg
}

/// What a row of the comparison says beside its bar.
fn figures_of(report: &Report) -> String {
    let verdict = super::tables::verdict_word(report.verdict);
    format!(
        "{} sold · {verdict} · {} sold twice · {:.0} req/s · p99 {:.0} ms",
        report.lucky, report.units_sold_twice, report.requests_per_second, report.p99_ms
    )
}

/// The dashed line at the stock, from `top` to `bottom`, labelled under it.
fn stock_line(svg: &mut String, stock_x: f64, top: f64, bottom: f64, initial: f64) {
    let _ = write!(
        svg,
        r##"<line x1="{stock_x:.1}" y1="{top:.1}" x2="{stock_x:.1}" y2="{bottom:.1}" stroke="#222" stroke-dasharray="5,4"/>
<text x="{stock_x:.1}" y="{label_y:.1}" text-anchor="middle" fill="#222">stock: {initial}</text>
"##,
        label_y = bottom + 18.0,
    );
}

#[derive(Clone, Copy, PartialEq)]
pub enum Scale {
    Linear,
    /// For figures that span several powers of ten (1 ms to 10 s, 100 to 50 000 sales/s).
    Log,
}

/// The distance between two entries of a chart's legend.
const LEGEND_STEP: f64 = 150.0;

/// How wide the column of row labels must be (at least 80 px).
fn label_column(rows: &[(String, Vec<f64>)], font: f64) -> f64 {
    rows.iter()
        .map(|(label, _)| text_width(label, font) + 12.0)
        .fold(80.0, f64::max)
}

/// How far the legend of `series` reaches, from the plot's left edge.
fn legend_width(series: &[&str], font: f64) -> f64 {
    series.len().saturating_sub(1) as f64 * LEGEND_STEP
        + series.last().map_or(0.0, |name| 14.0 + text_width(name, font))
}

/// One colour swatch and name per series, in a line above the plot.
fn legend(svg: &mut String, series: &[&str], left_edge: f64) {
    for (i, name) in series.iter().enumerate() {
        let left = left_edge + i as f64 * LEGEND_STEP;
        let _ = writeln!(
            svg,
            "<rect x=\"{left:.1}\" y=\"4\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"13\">{}</text>",
            COLORS[i % COLORS.len()],
            left + 14.0,
            escape(name)
        );
    }
}

/// The height of one bar of a bar chart, its gap included.
const BAR_ROW: f64 = 18.0;

/// Horizontal grouped bars: one group per row, one bar per series, values written at the end.
pub fn bars(rows: &[(String, Vec<f64>)], series: &[&str], unit: &str, scale: Scale, line_at: Option<f64>) -> String {
    const FONT: f64 = 11.0;
    const PLOT: f64 = 500.0;
    let axis = Axis::of(rows, scale, PLOT);
    let label_width = label_column(rows, FONT);
    let right_edge = rows
        .iter()
        .flat_map(|(_, values)| {
            values
                .iter()
                .map(|value| axis.x(*value) + 4.0 + text_width(&bar_value(*value, unit), FONT))
        })
        .fold(PLOT, f64::max);
    let legend_edge = legend_width(series, FONT) + if scale == Scale::Log { 80.0 } else { 0.0 };
    let width = label_width + right_edge.max(legend_edge) + 8.0;
    let group = BAR_ROW * series.len() as f64 + 8.0;
    let height = 30.0 + group * rows.len() as f64;

    let mut svg = svg_open(width, height, FONT as u32);
    legend(&mut svg, series, label_width);
    if scale == Scale::Log {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"13\" fill=\"#777\" text-anchor=\"end\">log scale</text>",
            width - 8.0
        );
    }
    let layout = BarLayout {
        label_width,
        group,
        axis: &axis,
        unit,
    };
    for (row, (label, values)) in rows.iter().enumerate() {
        layout.draw_row(&mut svg, 24.0 + row as f64 * group, label, values);
    }
    if let Some(at) = line_at {
        let left = label_width + axis.x(at);
        let _ = writeln!(
            svg,
            "<line x1=\"{left:.1}\" y1=\"20\" x2=\"{left:.1}\" y2=\"{height}\" stroke=\"#c03a3a\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{}\" fill=\"#c03a3a\">{at}</text>",
            left + 3.0,
            height - 4.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Where a bar chart's rows go: the labels' column, each row's height, the value axis.
struct BarLayout<'a> {
    label_width: f64,
    group: f64,
    axis: &'a Axis,
    unit: &'a str,
}

impl BarLayout<'_> {
    /// One row at `top`: its label, then a bar and its value per series.
    fn draw_row(&self, svg: &mut String, top: f64, label: &str, values: &[f64]) {
        let label_width = self.label_width;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            label_width - 6.0,
            top + self.group / 2.0,
            escape(label)
        );
        for (i, value) in values.iter().enumerate() {
            let y = top + i as f64 * BAR_ROW;
            let bar = self.axis.x(*value);
            let _ = writeln!(
                svg,
                "<rect x=\"{label_width:.1}\" y=\"{y}\" width=\"{bar:.1}\" height=\"{}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                BAR_ROW - 4.0,
                COLORS[i % COLORS.len()],
                label_width + bar + 4.0,
                y + BAR_ROW - 7.0,
                escape(&bar_value(*value, self.unit))
            );
        }
    }
}

/// A bar chart's value axis: where a value ends, from 0 to `length`.
struct Axis {
    scale: Scale,
    max: f64,
    /// The log axis starts at the power of ten below half the smallest value, so it shows.
    floor: f64,
    length: f64,
}

impl Axis {
    fn of(rows: &[(String, Vec<f64>)], scale: Scale, length: f64) -> Self {
        let values = || rows.iter().flat_map(|(_, values)| values.iter().copied());
        let max = values().fold(0.0, f64::max).max(1e-9);
        let min_positive = values().filter(|v| *v > 0.0).fold(max, f64::min);
        Axis {
            scale,
            max,
            floor: (min_positive / 2.0).log10().floor(),
            length,
        }
    }

    fn x(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Linear => value / self.max * self.length,
            Scale::Log if value <= 0.0 => 0.0,
            Scale::Log => {
                ((value.log10() - self.floor) / (self.max.log10() - self.floor)).clamp(0.0, 1.0) * self.length
            }
        }
    }
}

/// The figure written at a bar's end. No value (a baseline has no bound): a dash, without a unit.
fn bar_value(value: f64, unit: &str) -> String {
    let text = if value == 0.0 {
        "—".to_owned()
    } else if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.2} {unit}")
    };
    text.trim().to_owned()
}

/// Horizontal stacked bars: one bar per row, one segment per series, the total at the end.
pub fn stacked_bars(rows: &[(String, Vec<f64>)], series: &[&str], unit: &str) -> String {
    const FONT: f64 = 11.0;
    const ROW: f64 = 20.0;
    const PLOT: f64 = 500.0;
    let total = |values: &[f64]| values.iter().copied().filter(|v| *v > 0.0).sum::<f64>();
    let max = rows.iter().map(|(_, values)| total(values)).fold(1e-9, f64::max);
    let label_width = label_column(rows, FONT);
    let width = label_width + (PLOT + 90.0).max(legend_width(series, FONT)) + 8.0;
    let height = 30.0 + ROW * rows.len() as f64;
    let mut svg = svg_open(width, height, FONT as u32);
    legend(&mut svg, series, label_width);
    for (row, (label, values)) in rows.iter().enumerate() {
        let y = 24.0 + row as f64 * ROW;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            label_width - 6.0,
            y + ROW - 7.0,
            escape(label)
        );
        let mut left = label_width;
        for (i, value) in values.iter().enumerate().filter(|(_, value)| **value > 0.0) {
            let bar = value / max * PLOT;
            let _ = writeln!(
                svg,
                "<rect x=\"{left:.1}\" y=\"{y}\" width=\"{bar:.1}\" height=\"{}\" fill=\"{}\"><title>{}: {value:.2} {unit}</title></rect>",
                ROW - 4.0,
                COLORS[i % COLORS.len()],
                escape(series.get(i).copied().unwrap_or(""))
            );
            left += bar;
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\">{:.2} {unit}</text>",
            left + 4.0,
            y + ROW - 7.0,
            total(values)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// One cumulative curve per strategy: waited at most x (log scale, 0.01 ms to the
/// longest wait) for the fraction y of answers.
pub fn lock_wait_curves(benches: &[StrategyBench]) -> String {
    const FONT: f64 = 11.0;
    let with_waits: Vec<&StrategyBench> = benches
        .iter()
        .filter(|b| !b.lock_waits_ms.is_empty() && b.critical_path.is_some())
        .collect();
    let longest = benches
        .iter()
        .filter_map(|b| b.lock_waits_ms.last().copied())
        .fold(1.0, f64::max);
    let plot = WaitPlot {
        left: 60.0,
        top: 10.0,
        width: 530.0,
        height: 260.0,
        low: -2.0,
        high: longest.log10().ceil(),
    };
    let legend_x = plot.left + plot.width + 12.0;
    let width = with_waits
        .iter()
        .map(|b| legend_x + 14.0 + text_width(&b.label, FONT) + 8.0)
        .fold(760.0, f64::max);

    let mut svg = svg_open(width, plot.height + 50.0, FONT as u32);
    plot.draw_axes(&mut svg);
    for (i, bench) in with_waits.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>",
            plot.curve_points(&bench.lock_waits_ms)
        );
        let legend_y = plot.top + 12.0 + i as f64 * 15.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{legend_x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            legend_y - 9.0,
            legend_x + 14.0,
            legend_y,
            escape(&bench.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The plot of the lock waits: where it sits, and its x axis in powers of ten of a
/// millisecond, from `low` to `high`.
struct WaitPlot {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    low: f64,
    high: f64,
}

impl WaitPlot {
    /// Where a wait of `ms` sits (log scale; 0.01 ms at the least).
    fn x(&self, ms: f64) -> f64 {
        self.left + ((ms.max(0.01).log10() - self.low) / (self.high - self.low)).clamp(0.0, 1.0) * self.width
    }

    /// Where the fraction of answers sits, 0 at the bottom.
    fn y(&self, fraction: f64) -> f64 {
        self.top + (1.0 - fraction) * self.height
    }

    /// The frame, a line and a label at each power of ten, and 0, 50 and 100%.
    fn draw_axes(&self, svg: &mut String) {
        let (left, top, plot_width, plot_height) = (self.left, self.top, self.width, self.height);
        let _ = writeln!(
            svg,
            "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_width}\" height=\"{plot_height}\" fill=\"none\" stroke=\"#ccc\"/>"
        );
        for power in (self.low as i32)..=(self.high as i32) {
            let ms = 10f64.powi(power);
            let at = self.x(ms);
            let _ = writeln!(
                svg,
                "<line x1=\"{at:.1}\" y1=\"{top}\" x2=\"{at:.1}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">{} ms</text>",
                top + plot_height,
                top + plot_height + 14.0,
                ms
            );
        }
        for fraction in [0.0, 0.5, 1.0] {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.0}%</text>",
                left - 4.0,
                self.y(fraction) + 4.0,
                fraction * 100.0
            );
        }
    }

    /// The cumulative curve of `waits` (sorted): at most 200 points, and the last.
    fn curve_points(&self, waits: &[f64]) -> String {
        let step = (waits.len() / 200).max(1);
        let points: Vec<String> = waits
            .iter()
            .enumerate()
            .step_by(step)
            .chain(std::iter::once((waits.len() - 1, &waits[waits.len() - 1])))
            .map(|(n, ms)| format!("{:.1},{:.1}", self.x(*ms), self.y((n + 1) as f64 / waits.len() as f64)))
            .collect();
        points.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::report::tests::report;
    use crate::verdict::Verdict;

    fn sold(strategy: &str, lucky: i64, verdict: Verdict) -> Report {
        Report {
            initial_stock: 300,
            lucky,
            ..report(strategy, verdict)
        }
    }

    /// The value of `attribute` on each line that has it and contains `filter`.
    fn numbers(svg: &str, filter: &str, attribute: &str) -> Vec<f64> {
        svg.lines()
            .filter(|line| line.contains(filter))
            .filter_map(|line| line.split(&format!("{attribute}=\"")).nth(1))
            .filter_map(|rest| rest.split('"').next()?.parse().ok())
            .collect()
    }

    #[test]
    fn only_units_sold_beyond_the_stock_are_drawn_red() {
        let svg = comparison_svg(&[sold("none", 450, Verdict::Oversold), sold("redis", 300, Verdict::Held)]);
        let red = numbers(&svg, &format!("fill=\"{RED}\""), "width");
        assert_eq!(red.len(), 2);
        assert!(red[0] > 0.0, "the oversold bar has a red tail: {svg}");
        assert_eq!(red[1], 0.0, "a held sale has no red: {svg}");
        assert!(svg.contains("stock: 300"));
        assert!(svg.contains("450 sold · OVERSOLD"));
    }

    #[test]
    fn log_bars_keep_their_order_and_zero_draws_nothing() {
        let svg = bars(
            &[("a".into(), vec![100.0, 10_000.0, 0.0])],
            &["x", "y", "z"],
            "sales/s",
            Scale::Log,
            None,
        );
        let widths = numbers(&svg, "<rect", "width");
        // The legend's three squares are 10 wide; then the bars.
        let bars = &widths[widths.len() - 3..];
        assert!(bars[0] < bars[1], "{svg}");
        assert_eq!(bars[2], 0.0, "{svg}");
    }

    #[test]
    fn the_longest_label_fits_inside_the_chart() {
        let figures = "12345 ms";
        let svg = bars(&[("a".into(), vec![12345.0])], &["p99"], "ms", Scale::Linear, None);
        let width = numbers(&svg, "<svg", "width")[0];
        let text_x = numbers(&svg, "12345 ms", "x").last().copied().unwrap();
        assert!(text_x + text_width(figures, 11.0) <= width, "{svg}");

        let svg = comparison_svg(&[sold(
            "a label that is long (no local queue, no semaphore)",
            450,
            Verdict::Oversold,
        )]);
        let width = numbers(&svg, "<svg", "width")[0];
        let line = svg.lines().find(|line| line.contains("req/s")).unwrap();
        let text = line.split('>').nth(1).unwrap().trim_end_matches("</text");
        let text_x = numbers(line, "req/s", "x")[0];
        assert!(text_x + text_width(text, 14.0) <= width, "{svg}");
        assert!(
            svg.contains(&format!("viewBox=\"0 0 {width:.0}")),
            "a page may shrink it: {svg}"
        );
    }
}
