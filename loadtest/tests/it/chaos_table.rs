//! `loadtest chaos-table`, from made-up runs with no server: the runs of a row added up,
//! a column per check, the times read from the history, and the exit code that fails
//! `make chaos` when a row that must hold did not. `bench::sale` borrows its made-up runs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

/// A report as the load test writes it, with the checks given as `(name, status)`.
pub fn report(fencing: &str, checks: &[(&str, &str)], units_sold_twice: u64) -> Value {
    let checks: Vec<Value> = checks
        .iter()
        .map(|(name, status)| json!({"name": name, "status": status}))
        .collect();
    json!({
        "strategy": "redis", "fencing": fencing, "hosts": [], "users": 200, "initial_stock": 100,
        "stock_left": 0, "lucky": 100 + units_sold_twice, "sale_records": 100 + units_sold_twice,
        "units_sold_twice": units_sold_twice, "fencing_regressions": 0, "holders_overlapped": 1,
        "fence_refused": {"reads": 0, "writes": 1}, "told_sold": 100 + units_sold_twice,
        "told_sold_out": 100, "told_unknown": 0, "errors": {"503 fenced_out": 1},
        "seconds": 1.0, "requests_per_second": 200.0, "p50_ms": 1.0, "p95_ms": 1.0, "p99_ms": 1.0,
        "verdict": if units_sold_twice > 0 { "oversold" } else { "held" },
        "expected_to_oversell": false, "findings": [], "checks": checks
    })
}

pub const PASSED: &[(&str, &str)] = &[("unique", "pass"), ("fence-order", "pass")];
const SOLD_TWICE: &[(&str, &str)] = &[("unique", "fail"), ("fence-order", "fail")];

/// A history: the holder paused at 10 ms and resumed at 500 ms; sales at 30 and 600 ms.
pub const PAUSED_HISTORY: &str = r#"{"at_us":10000,"process":"nemesis","type":"fault","fault":"pause","target":"seckill-8080"}
{"at_us":29000,"process":1,"type":"invoke","host":"h"}
{"at_us":30000,"process":1,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"s","segment":0,"unit":100,"sale_id":"a"}}
{"at_us":500000,"process":"nemesis","type":"fault","fault":"resume","target":"seckill-8080"}
{"at_us":599000,"process":2,"type":"invoke","host":"h"}
{"at_us":600000,"process":2,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"s","segment":0,"unit":99,"sale_id":"b"}}
"#;

/// Writes a run's report and history into `dir`, and returns its line of the runs file.
pub fn run(dir: &Path, name: &str, expect: &str, report: Value, history: &str) -> String {
    run_with(dir, name, json!({"expect": expect}), report, history)
}

/// The same, with the fields of `spec` in its line (`expect` among them).
fn run_with(dir: &Path, name: &str, spec: Value, report: Value, history: &str) -> String {
    std::fs::write(dir.join(format!("{name}.json")), report.to_string()).unwrap();
    std::fs::write(dir.join(format!("{name}.history.jsonl")), history).unwrap();
    let mut line = json!({"fault": "holder-paused", "strategy": "redis", "run": 1, "report": format!("{name}.json")});
    line.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    line.to_string()
}

fn chaos_table(dir: &Path, runs: &[String]) -> Output {
    let runs_file = dir.join("runs.jsonl");
    std::fs::write(&runs_file, runs.join("\n")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("chaos-table")
        .arg(&runs_file)
        .arg("--markdown")
        .arg(dir.join("table.md"))
        .output()
        .expect("loadtest chaos-table runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_row_adds_up_its_runs_with_a_column_per_check_and_its_times_from_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [
        run(dir.path(), "on-1", "holds", report("on", PASSED, 0), PAUSED_HISTORY),
        run(dir.path(), "on-2", "holds", report("on", PASSED, 0), PAUSED_HISTORY),
        run(
            dir.path(),
            "off-1",
            "fails",
            report("off", SOLD_TWICE, 3),
            PAUSED_HISTORY,
        ),
        run(dir.path(), "off-2", "fails", report("off", PASSED, 0), PAUSED_HISTORY),
    ];
    let output = chaos_table(dir.path(), &runs);
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    let table = std::fs::read_to_string(dir.path().join("table.md")).unwrap();
    assert!(
        table.starts_with(
            "| fault | strategy | fencing | runs | expected | unique | fence-order | holders that overlapped |"
        ),
        "{table}"
    );
    // Columns: checks 0 and 0; overlapped 2, refused 2, twice 0, sold 200, beyond 0, orders -,
    // 503s 2, unknown 0, no quorum -, stall 570 ms (30 to 600), first sale 100 ms after the resume.
    assert!(
        table.contains("| holder-paused | redis | on | 2 | holds | 0 | 0 | 2 | 2 | 0 | 200 | 0 | - | 2 | 0 | - | 570 ms | 100 ms | held held |"),
        "{table}"
    );
    assert!(
        table.contains("| holder-paused | redis | off | 2 | fails | 1 | 1 | 2 | 2 | 3 | 203 | 3 | - |"),
        "{table}"
    );
    assert!(
        printed.contains(
            "note: holder-paused/redis fencing off: no check failed in 1 of 2 runs (the fault missed its moment)"
        ),
        "{printed}"
    );
}

#[test]
fn a_row_that_must_hold_and_fails_a_check_fails_the_suite_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [run(
        dir.path(),
        "on-1",
        "holds",
        report("on", SOLD_TWICE, 1),
        PAUSED_HISTORY,
    )];
    let output = chaos_table(dir.path(), &runs);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("unsafe: holder-paused/redis fencing on: check `unique` failed in 1 of 1 runs"),
        "{printed}"
    );
    assert!(
        printed.contains("unsafe: holder-paused/redis fencing on: 1 units sold that did not exist"),
        "{printed}"
    );
}

#[test]
fn a_run_whose_fault_never_struck_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let no_fault = PAUSED_HISTORY
        .lines()
        .filter(|line| !line.contains("nemesis"))
        .collect::<Vec<_>>()
        .join("\n");
    let runs = [run(dir.path(), "on-1", "holds", report("on", PASSED, 0), &no_fault)];
    let output = chaos_table(dir.path(), &runs);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(2), "{printed}");
    assert!(
        printed.contains("holder-paused, run 1: its history has no fault"),
        "{printed}"
    );
}

#[test]
fn no_row_sells_without_a_quorum_whatever_it_expects() {
    let dir = tempfile::tempdir().unwrap();
    // Two masters killed at 10 ms, started again at 3 s; a sale answered at 1.5 s.
    let history = r#"{"at_us":10000,"process":"nemesis","type":"fault","fault":"kill","target":"redlock-6481"}
{"at_us":1400000,"process":1,"type":"invoke","host":"h"}
{"at_us":1500000,"process":1,"type":"ok","instance":"seckill-8090","sold_unit":{"sale":"s","segment":0,"unit":100,"sale_id":"a"}}
{"at_us":3000000,"process":"nemesis","type":"fault","fault":"start","target":"redlock-6481"}
"#;
    let spec =
        json!({"fault": "redlock-3-of-5-killed", "strategy": "redlock", "expect": "may_fail", "quorum_lost": true});
    let runs = [run_with(
        dir.path(),
        "q-1",
        spec,
        report("no_tokens", PASSED, 0),
        history,
    )];
    let output = chaos_table(dir.path(), &runs);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("unsafe: redlock-3-of-5-killed/redlock fencing no_tokens: 1 buyers sold to without a quorum"),
        "{printed}"
    );
}

#[test]
fn a_row_that_must_hold_fails_on_its_verdict_an_undecided_check_or_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut oversold_by_the_counts = report("on", PASSED, 0);
    oversold_by_the_counts["verdict"] = json!("oversold");
    let undecided = report(
        "on",
        &[("unique", "pass"), ("fence-order", "pass"), ("linearizable", "unknown")],
        0,
    );
    let runs = [
        run(dir.path(), "on-1", "holds", oversold_by_the_counts, PAUSED_HISTORY),
        run(dir.path(), "on-2", "holds", undecided, PAUSED_HISTORY),
    ];
    let output = chaos_table(dir.path(), &runs);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    for why in [
        "run 1 ended OVERSOLD",
        "check `linearizable` could not decide in 1 of 2 runs",
        "check `linearizable` is missing in 1 of 2 runs",
    ] {
        assert!(
            printed.contains(&format!("unsafe: holder-paused/redis fencing on: {why}")),
            "{why}: {printed}"
        );
    }
}

#[test]
fn a_heal_recorded_after_the_load_test_ended_still_ends_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let paused_only: String = PAUSED_HISTORY
        .lines()
        .filter(|line| !line.contains("resume"))
        .map(|line| format!("{line}\n"))
        .collect();
    let resume = PAUSED_HISTORY.lines().find(|line| line.contains("resume")).unwrap();
    std::fs::write(dir.path().join("on-1.faults.jsonl"), format!("{resume}\n")).unwrap();
    let runs = [run(dir.path(), "on-1", "holds", report("on", PASSED, 0), &paused_only)];
    let output = chaos_table(dir.path(), &runs);
    let table = std::fs::read_to_string(dir.path().join("table.md")).unwrap_or_default();
    assert!(
        table.contains("| 570 ms | 100 ms | held |"),
        "the resume at 500 ms, from the faults file: {}{table}",
        text(&output)
    );
}
