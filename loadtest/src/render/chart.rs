//! A picture of the comparison: one bar per strategy, units sold against the stock.
//!
//! The bar is green up to the stock and red beyond it, so an oversell is a red tail
//! past the dashed "stock" line. Plain SVG, no dependencies: it opens in any browser
//! and renders on GitHub.

use crate::verdict::{Report, Verdict};

const WIDTH: f64 = 1120.0;
const LABEL_WIDTH: f64 = 230.0;
const BAR_AREA: f64 = 400.0;
const ROW_HEIGHT: f64 = 46.0;
const TOP: f64 = 64.0;
const GREEN: &str = "#2e9e5b";
const RED: &str = "#d64545";

/// The comparison of `reports` as an SVG document.
pub fn comparison_svg(reports: &[Report]) -> String {
    let initial = reports.iter().map(|r| r.initial_stock).max().unwrap_or(0).max(1) as f64;
    let longest = reports.iter().map(|r| r.lucky as f64).fold(initial, f64::max);
    let scale = BAR_AREA / (longest * 1.05);
    let height = TOP + ROW_HEIGHT * reports.len() as f64 + 40.0;
    let users = reports.first().map_or(0, |r| r.users);
    let hosts = reports.first().map_or(0, |r| r.hosts.len());

    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="14">
<rect width="100%" height="100%" fill="white"/>
<text x="16" y="28" font-size="18" font-weight="bold">{users} buyers, {initial} units, {hosts} instances: units sold per lock strategy</text>
<text x="16" y="48" fill="#555">green: sold within the stock · red: sold beyond it (oversold)</text>
"##
    );
    for (row, report) in reports.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * row as f64;
        let within = (report.lucky as f64).min(initial).max(0.0);
        let beyond = (report.lucky as f64 - initial).max(0.0);
        let verdict = match report.verdict {
            Verdict::Held => "held",
            Verdict::Oversold => "OVERSOLD",
            Verdict::Lost => "LOST",
        };
        svg.push_str(&format!(
            r#"<text x="16" y="{ty}" font-weight="bold">{name}</text>
<rect x="{LABEL_WIDTH}" y="{y}" width="{w1:.1}" height="26" fill="{GREEN}"/>
<rect x="{x2:.1}" y="{y}" width="{w2:.1}" height="26" fill="{RED}"/>
<text x="{tx:.1}" y="{ty}">{sold} sold · {verdict} · {twice} sold twice · {rps:.0} req/s · p99 {p99:.0} ms</text>
"#,
            ty = y + 18.0,
            name = escape(&report.label()),
            w1 = within * scale,
            x2 = LABEL_WIDTH + within * scale,
            w2 = beyond * scale,
            tx = LABEL_WIDTH + BAR_AREA + 12.0,
            sold = report.lucky,
            twice = report.units_sold_twice,
            rps = report.requests_per_second,
            p99 = report.p99_ms,
        ));
    }
    let stock_x = LABEL_WIDTH + initial * scale;
    let bottom = TOP + ROW_HEIGHT * reports.len() as f64;
    svg.push_str(&format!(
        r##"<line x1="{stock_x:.1}" y1="{top:.1}" x2="{stock_x:.1}" y2="{bottom:.1}" stroke="#222" stroke-dasharray="5,4"/>
<text x="{stock_x:.1}" y="{label_y:.1}" text-anchor="middle" fill="#222">stock: {initial}</text>
</svg>
"##,
        top = TOP - 6.0,
        label_y = bottom + 18.0,
    ));
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(strategy: &str, lucky: i64, verdict: Verdict) -> Report {
        let json = serde_json::json!({
            "strategy": strategy, "hosts": ["a", "b"], "users": 500, "initial_stock": 300,
            "stock_left": 0, "lucky": lucky, "sale_records": lucky, "units_sold_twice": 0,
            "fencing": "on", "fencing_regressions": 0, "told_sold": lucky, "told_sold_out": 0, "told_unknown": 0, "errors": {},
            "seconds": 1.0, "requests_per_second": 500.0, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0,
            "verdict": verdict, "expected_to_oversell": false, "findings": []
        });
        serde_json::from_value(json).unwrap()
    }

    /// Widths of the red (oversold) bars, in drawing order.
    fn red_widths(svg: &str) -> Vec<f64> {
        svg.lines()
            .filter(|line| line.contains(&format!("fill=\"{RED}\"")))
            .map(|line| line.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn only_units_sold_beyond_the_stock_are_drawn_red() {
        let svg = comparison_svg(&[report("none", 450, Verdict::Oversold), report("redis", 300, Verdict::Held)]);
        let red = red_widths(&svg);
        assert_eq!(red.len(), 2);
        assert!(red[0] > 0.0, "the oversold bar has a red tail: {svg}");
        assert_eq!(red[1], 0.0, "a held sale has no red: {svg}");
        assert!(svg.contains("stock: 300"));
        assert!(svg.contains("450 sold · OVERSOLD"));
    }
}
