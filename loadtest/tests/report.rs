//! `bench report` from canned results, with no server: the tables, and one HTML page
//! that loads nothing and whose charts fit their column. The results in `tests/data/`
//! are made up in the shape `bench measure` writes.

use std::path::PathBuf;
use std::process::Command;

fn canned(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

#[test]
fn a_report_is_built_from_the_results_alone_and_loads_nothing() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let html = dir.path().join("report.html");
    let lockbench = dir.path().join("lockbench.json");
    std::fs::write(
        &lockbench,
        r#"[{"strategy": "redis", "contenders": 16, "keys": "one each", "pairs": 100, "errors": 0,
            "pairs_per_second": 4321.4, "median_pair_ms": 0.123, "p99_pair_ms": 1.5, "first_error": null}]"#,
    )
    .unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("report")
        .args([canned("bench-none.json"), canned("bench-redis.json")])
        .arg("--html")
        .arg(&html)
        .arg("--lockbench")
        .arg(&lockbench)
        .output()
        .expect("bench report runs");
    let tables = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{tables}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(tables.contains("| redis | 5/5 | 300 (270–330) |"), "{tables}");
    assert!(
        tables.contains("Ordering by sustained sales/s: redis (3240)"),
        "{tables}"
    );

    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches("<svg").count(),
        5,
        "units sold, rates, ratios, latency, lock waits"
    );
    assert_eq!(
        page.matches("<svg").count(),
        page.matches("viewBox=").count(),
        "every chart can shrink to the page"
    );
    assert!(
        page.contains("<td>redis</td><td>16</td><td class=\"text\">one each</td><td>4321</td>"),
        "{page}"
    );
    assert!(!page.contains("Chaos"), "no chaos section without its table");
    for outside in ["src=", "href=", "@import", "url("] {
        assert!(!page.contains(outside), "the report must not load anything ({outside})");
    }
}
