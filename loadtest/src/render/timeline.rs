//! The timeline of one run: its history drawn as one self-contained HTML page (inline
//! SVG, no script, nothing fetched), as Porcupine draws its histories.
//!
//! - a lane per instance the requests went to; each request is a bar from its
//!   invocation to its answer, coloured by what the buyer heard; a request whose answer
//!   never came runs to the right edge;
//! - the faults the nemesis injected are shaded bands across every lane, from the fault
//!   to what ended it;
//! - the requests that fail a check are red; the page opens with the checks and a link to
//!   the first of those requests (`#first-violation`);
//! - hovering a bar shows the request, its answer and what it sold.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::Context;

use super::escape;
use crate::history::checks::{Check, Status};
use crate::history::operations::{pair, Operation, Outcome};
use crate::history::{Event, Fault, What};

/// The plot's width, in pixels, and the height of one row of bars.
const WIDTH: f64 = 1200.0;
const ROW: f64 = 4.0;
/// Room on the left for the lanes' names, and between lanes.
const MARGIN: f64 = 150.0;
const LANE_GAP: f64 = 24.0;
/// The height of the time axis above the lanes.
const AXIS: f64 = 20.0;

const SOLD: &str = "#2e7d32";
const SOLD_OUT: &str = "#90a4ae";
const REFUSED: &str = "#ef6c00";
const UNKNOWN: &str = "#7b1fa2";
const VIOLATION: &str = "#d50000";

/// Writes `history` to `path` (see [`crate::history::write`]) and its page beside it:
/// `run.history.jsonl` gets `run.history.html`.
pub fn write_with_page(path: &Path, title: &str, history: &[Event], checks: &[Check]) -> anyhow::Result<()> {
    crate::history::write(path, history)?;
    let timeline = path.with_extension("html");
    std::fs::write(&timeline, page(title, history, checks))
        .with_context(|| format!("cannot write the timeline to {}", timeline.display()))
}

/// The page of a run's `history`, judged by `checks`, under the heading `title`.
pub fn page(title: &str, history: &[Event], checks: &[Check]) -> String {
    page_over(title, history, checks, Clock::of(history))
}

/// The same for the first events of a longer history, on the axis of the whole, from
/// `start_us` to `end_us`: a replay steps through it without the plot stretching.
pub fn page_of_part(title: &str, part: &[Event], checks: &[Check], start_us: u64, end_us: u64) -> String {
    let clock = Clock {
        start: start_us,
        end: end_us.max(start_us + 1),
    };
    page_over(title, part, checks, clock)
}

fn page_over(title: &str, history: &[Event], checks: &[Check], clock: Clock) -> String {
    let operations = pair(history);
    let culprits: Vec<u64> = checks
        .iter()
        .filter(|check| check.status == Status::Fail)
        .flat_map(|check| check.culprits.iter().copied())
        .collect();
    let first = culprits.first().copied();
    let (lanes, height) = lanes(&operations);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
        MARGIN + WIDTH + 10.0
    );
    for band in bands(history) {
        svg.push_str(&band.svg(&clock, height));
    }
    svg.push_str(&axis(&clock, height));
    for lane in &lanes {
        let _ = write!(
            svg,
            r#"<text x="4" y="{}">{}</text>"#,
            lane.top + 12.0,
            escape(&lane.host)
        );
        for (row, operation) in &lane.bars {
            let y = lane.top + 18.0 + *row as f64 * ROW;
            let culprit = culprits.contains(&operation.process);
            let id = (first == Some(operation.process)).then_some("first-violation");
            svg.push_str(&bar(operation, y, &clock, culprit, id));
        }
    }
    svg.push_str("</svg>");
    html(title, checks, first.is_some(), &clock, &svg)
}

/// Microseconds of the history's clock, as pixels of the plot.
struct Clock {
    start: u64,
    end: u64,
}

impl Clock {
    fn of(history: &[Event]) -> Clock {
        let start = history.iter().map(|event| event.at_us).min().unwrap_or(0);
        let end = history.iter().map(|event| event.at_us).max().unwrap_or(start);
        Clock {
            start,
            end: end.max(start + 1),
        }
    }

    fn x(&self, at_us: u64) -> f64 {
        let at = at_us.clamp(self.start, self.end) - self.start;
        MARGIN + WIDTH * at as f64 / (self.end - self.start) as f64
    }

    fn ms(&self, at_us: u64) -> f64 {
        at_us.saturating_sub(self.start) as f64 / 1000.0
    }
}

/// The time axis: a tick and its milliseconds every 1, 2 or 5 times a power of ten,
/// about ten of them, with a faint line down through the lanes.
fn axis(clock: &Clock, height: f64) -> String {
    let span_ms = clock.ms(clock.end).max(0.001);
    let rough = span_ms / 10.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * power)
        .find(|step| *step >= rough)
        .unwrap_or(power * 10.0);
    // As many decimals as the step needs: 0.5 ms, 20 ms.
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let mut svg = String::new();
    for tick in 0.. {
        let at_ms = f64::from(tick) * step;
        if at_ms > span_ms {
            break;
        }
        let x = clock.x(clock.start + (at_ms * 1000.0) as u64);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="14" x2="{x:.1}" y2="{height}" stroke="#eee"/><text x="{x:.1}" y="11" font-size="10">{at_ms:.decimals$} ms</text>"##
        );
    }
    svg
}

/// One instance's requests, each in the first row free when it was sent.
struct Lane<'a> {
    host: String,
    top: f64,
    bars: Vec<(usize, &'a Operation)>,
}

fn lanes(operations: &[Operation]) -> (Vec<Lane<'_>>, f64) {
    let mut by_host: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in operations {
        by_host.entry(operation.host.as_str()).or_default().push(operation);
    }
    let mut top = AXIS;
    let mut lanes = Vec::new();
    for (host, requests) in by_host {
        // Each row holds when its last bar ends; a request takes the first row free.
        let mut rows: Vec<u64> = Vec::new();
        let mut bars = Vec::new();
        for operation in requests {
            let ends = operation.answered_us.unwrap_or(u64::MAX);
            let row = match rows.iter().position(|&free_at| free_at < operation.invoked_us) {
                Some(row) => row,
                None => {
                    rows.push(0);
                    rows.len() - 1
                }
            };
            rows[row] = ends;
            bars.push((row, operation));
        }
        let lane_height = 18.0 + rows.len() as f64 * ROW + LANE_GAP;
        lanes.push(Lane {
            host: host.to_owned(),
            top,
            bars,
        });
        top += lane_height;
    }
    (lanes, top.max(40.0))
}

/// One request's bar, with what a hover shows.
fn bar(operation: &Operation, y: f64, clock: &Clock, culprit: bool, id: Option<&str>) -> String {
    let (colour, heard) = match &operation.outcome {
        Outcome::Sold { unit, instance, .. } => (
            SOLD,
            format!(
                "sold unit {} of segment {} ({instance}, sale {})",
                unit.unit, unit.segment, unit.sale_id
            ),
        ),
        Outcome::SoldOut => (SOLD_OUT, "sold out".to_owned()),
        Outcome::Refused(answer) => (REFUSED, format!("refused: {answer}")),
        Outcome::Unknown(answer) => (UNKNOWN, format!("unknown: {answer}")),
    };
    let colour = if culprit { VIOLATION } else { colour };
    let (from, to) = (
        clock.x(operation.invoked_us),
        clock.x(operation.answered_us.unwrap_or(clock.end)),
    );
    let answered = operation.answered_us.map_or("never answered".to_owned(), |at| {
        format!("answered at {:.1} ms", clock.ms(at))
    });
    let hover = format!(
        "{}: sent at {:.1} ms, {answered}: {heard}{}",
        operation.name(),
        clock.ms(operation.invoked_us),
        if culprit { " (fails a check)" } else { "" }
    );
    let id = id.map_or(String::new(), |id| format!(r#" id="{id}""#));
    format!(
        r#"<rect{id} class="{}" x="{from:.1}" y="{y:.1}" width="{:.1}" height="{}" fill="{colour}"><title>{}</title></rect>"#,
        if culprit { "request violation" } else { "request" },
        (to - from).max(1.0),
        ROW - 1.0,
        escape(&hover)
    )
}

/// A fault, from when it struck to what ended it (or the end of the history).
struct Band {
    fault: Fault,
    target: String,
    detail: Option<String>,
    from: u64,
    to: Option<u64>,
}

fn bands(history: &[Event]) -> Vec<Band> {
    let mut bands: Vec<Band> = Vec::new();
    for event in history {
        let What::Fault { fault, target, detail } = &event.what else {
            continue;
        };
        let open = bands
            .iter_mut()
            .find(|band| band.to.is_none() && band.target == *target && band.fault.ended_by() == Some(*fault));
        match open {
            Some(band) => band.to = Some(event.at_us),
            None => bands.push(Band {
                fault: *fault,
                target: target.clone(),
                detail: detail.clone(),
                from: event.at_us,
                // A fault that does not last is a line.
                to: fault.ended_by().is_none().then_some(event.at_us),
            }),
        }
    }
    bands
}

impl Band {
    fn svg(&self, clock: &Clock, height: f64) -> String {
        let (from, to) = (clock.x(self.from), clock.x(self.to.unwrap_or(clock.end)));
        let detail = self
            .detail
            .as_deref()
            .map_or(String::new(), |detail| format!(" {detail}"));
        let what = format!("{:?} {}{detail}", self.fault, self.target).to_lowercase();
        format!(
            r##"<rect class="fault" x="{from:.1}" y="0" width="{:.1}" height="{height}" fill="#fbc02d" fill-opacity="0.25"><title>{}</title></rect><text x="{:.1}" y="{}" fill="#8d6e00">{}</text>"##,
            (to - from).max(2.0),
            escape(&what),
            from + 2.0,
            height - 4.0,
            escape(&what)
        )
    }
}

/// The page around the plot: the checks, the legend, the link to the first violation.
fn html(title: &str, checks: &[Check], violated: bool, clock: &Clock, svg: &str) -> String {
    let mut rows = String::new();
    for check in checks {
        let status = format!("{:?}", check.status).to_lowercase();
        let _ = write!(
            rows,
            r#"<tr class="{status}"><td>{}</td><td>{status}</td><td>{}</td></tr>"#,
            escape(&check.name),
            check
                .findings
                .iter()
                .map(|finding| escape(finding))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    let jump = match violated {
        true => r##"<p><a href="#first-violation">Jump to the first request that fails a check</a> (red).</p>"##,
        false => "<p>No request fails a check.</p>",
    };
    let legend = [
        (SOLD, "sold"),
        (SOLD_OUT, "sold out"),
        (REFUSED, "refused"),
        (UNKNOWN, "unknown"),
        (VIOLATION, "fails a check"),
        ("#fbc02d", "a fault"),
    ]
    .map(|(colour, name)| format!(r#"<span><i style="background:{colour}"></i>{name}</span>"#))
    .join(" ");
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
td {{ border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; }}
tr.fail td {{ color: {VIOLATION}; }}
.legend i {{ display: inline-block; width: 12px; height: 8px; margin: 0 4px 0 10px; }}
</style></head><body>
<h1>{title}</h1>
<p>{:.1} ms of history; each bar is a request, from when it was sent to its answer. Hover a bar for what it heard.</p>
<table>{rows}</table>
{jump}
<p class="legend">{legend}</p>
{svg}
</body></html>
"#,
        clock.ms(clock.end),
        title = escape(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::operations::tests::{ended, fault, invoke, sold};

    #[test]
    fn each_request_is_a_bar_and_the_culprits_are_red_with_a_link_to_the_first() {
        let history = [
            invoke(0, 1),
            invoke(0, 2),
            fault(1, Fault::Pause),
            sold(5, 1, 2),
            fault(6, Fault::Resume),
            sold(7, 2, 2),
            invoke(8, 3),
            ended(
                9,
                3,
                What::Fail {
                    answer: "sold_out".into(),
                },
            ),
        ];
        let unique = Check {
            name: "unique".into(),
            status: Status::Fail,
            findings: vec!["unit 2 of segment 0 was sold to <two> buyers".into()],
            culprits: vec![1, 2],
        };
        let page = page("redis, fencing off", &history, &[unique]);
        assert_eq!(page.matches(r#"class="request violation""#).count(), 2, "{page}");
        assert_eq!(
            page.matches(r#"class="request""#).count(),
            1,
            "the sold-out request is not red"
        );
        assert_eq!(page.matches(r#"id="first-violation""#).count(), 1);
        assert!(page.contains(r##"href="#first-violation""##));
        assert_eq!(
            page.matches(r#"class="fault""#).count(),
            1,
            "pause to resume is one band"
        );
        assert!(page.contains("sold to &lt;two&gt; buyers"), "findings are escaped");
        assert!(
            !page.contains("src=") && !page.contains("href=\"http") && !page.contains("<script"),
            "nothing to fetch, nothing to run"
        );
    }

    #[test]
    fn a_history_without_a_failure_has_no_red_and_says_so() {
        let history = [invoke(0, 1), sold(5, 1, 1)];
        let page = page("redis", &history, &[]);
        assert!(!page.contains("violation\""), "{page}");
        assert!(page.contains("No request fails a check."));
    }
}
