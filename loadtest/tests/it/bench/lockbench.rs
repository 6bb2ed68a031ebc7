//! `lockbench` as a reader runs it: a short run against real locks prints one row per
//! strategy, contender count and key layout, with no errors.

use std::process::Command;

#[tokio::test]
async fn a_short_lockbench_prints_a_row_per_run_and_writes_them_as_json() {
    testkit::redis_client().await; // the project's test Redis, or a clear panic
    let dir = testkit::temp_dir("lockbench");
    let json = dir.path().join("lockbench.json");
    let output = Command::new(env!("CARGO_BIN_EXE_lockbench"))
        .args([
            "--strategies",
            "local,redis",
            "--peers",
            "none",
            "--contenders",
            "1,4",
            "--seconds",
            "0.3",
        ])
        .arg("--json")
        .arg(&json)
        .env("SECKILL_REDIS_URL", testkit::redis_url())
        .output()
        .expect("lockbench runs");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<&str> = table
        .lines()
        .filter(|line| line.starts_with("| local") || line.starts_with("| redis"))
        .collect();
    assert_eq!(
        rows.len(),
        8,
        "2 strategies x 2 contender counts x 2 key layouts:\n{table}"
    );
    let runs: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(runs.len(), 8);
    for run in &runs {
        assert!(run["pairs"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
    }
}

#[test]
fn an_unknown_peer_is_refused_with_the_list_of_peers() {
    let output = Command::new(env!("CARGO_BIN_EXE_lockbench"))
        .args([
            "--strategies",
            "local",
            "--peers",
            "jedis",
            "--contenders",
            "1",
            "--seconds",
            "0.1",
        ])
        .output()
        .expect("lockbench runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no peer `jedis`") && stderr.contains("curator") && stderr.contains("pottery-redlock"),
        "{stderr}"
    );
}
