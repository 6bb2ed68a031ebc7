//! The lock peer curator keeps the contract of loadtest/peers/README.md: a short run
//! against the ZooKeeper of `make services` prints one JSON line per run, nothing else on
//! stdout, and every run made pairs without errors. The first run installs Curator from
//! Debian and compiles the peer, which takes a minute.

use std::path::PathBuf;
use std::process::Command;

/// The peer's script, found from this crate's folder (loadtest/) one level below the root.
fn peer_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/curator/run")
}

#[test]
fn a_short_run_prints_one_json_line_per_run_with_pairs_and_no_errors() {
    let output = Command::new(peer_script())
        .args(["--contenders", "1,4", "--seconds", "0.5"])
        .output()
        .expect("the peer's run script starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    let runs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    assert_eq!(runs.len(), 4, "2 contender counts x 2 key layouts:\n{stdout}");

    let expected = [(1, "one"), (1, "one each"), (4, "one"), (4, "one each")];
    for (run, (contenders, keys)) in runs.iter().zip(expected) {
        assert_eq!(run["strategy"], "curator InterProcessMutex", "{run}");
        assert_eq!(run["contenders"], contenders, "{run}");
        assert_eq!(run["keys"], keys, "{run}");
        assert!(run["pairs"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        assert!(run["first_error"].is_null(), "{run}");
        assert!(run["pairs_per_second"].as_f64().unwrap() > 0.0, "{run}");
        let median = run["median_pair_ms"].as_f64().unwrap();
        let p99 = run["p99_pair_ms"].as_f64().unwrap();
        assert!(median <= p99, "the median is not above the p99: {run}");
    }
}
