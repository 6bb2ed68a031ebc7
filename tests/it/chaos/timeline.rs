//! The history's timeline of a double sale, in a real headless browser: the load test
//! (`target/debug/loadtest`) sends its crowd at two `seckill` processes selling without
//! fencing; the test stops the one holding the lock past its lease, as
//! `chaos::pauses` does, and writes the pause into the run's faults file as `make
//! chaos` does. The run's `history.html` must then show, in chromium
//! (`tests/browser/timeline.mjs`), a red bar for every request the failed checks name,
//! the pause as one band, and a link that brings the first red bar into view.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use testkit::server_control::Signal;

use super::pauses::{start_instance, wait_until_holds_mid_sale, PAUSE, STOCK};

/// The load test built beside the service by `cargo test --workspace` (make test).
fn loadtest() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_seckill")).with_file_name("loadtest");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --workspace --all-targets` (make test does)",
        binary.display()
    );
    binary
}

fn record_fault(faults: &Path, kind: &str, target: &str) {
    let status = Command::new(loadtest())
        .args(["record-fault", "--to"])
        .arg(faults)
        .args([kind, target])
        .status()
        .unwrap();
    assert!(status.success(), "loadtest record-fault {kind} {target}: {status}");
}

/// One run of the crowd with instance A stopped mid-sale: the report, as JSON.
async fn a_paused_run(dir: &Path) -> Value {
    let (sale, client) = (testkit::TestSale::new(), testkit::redis_client().await);
    let (a, b) = (
        start_instance(&testkit::redis_url(), &sale, "off", &[]),
        start_instance(&testkit::redis_url(), &sale, "off", &[]),
    );
    let (report, faults) = (dir.join("run.json"), dir.join("faults.jsonl"));
    let _ = std::fs::remove_file(&faults);
    let mut crowd = tokio::process::Command::new(loadtest())
        .args(["--users", "200", "--stock", &STOCK.to_string()])
        .args(["--hosts", &format!("{},{}", a.url(), b.url())])
        .args(["--key-prefix", sale.prefix(), "--redis-url", &testkit::redis_url()])
        .arg("--report-file")
        .arg(&report)
        .arg("--faults-file")
        .arg(&faults)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut redis = testkit::connection(&client).await;
    let mut lock_redis = redis.clone();
    wait_until_holds_mid_sale(&a, &sale, &mut redis, &mut lock_redis).await;
    let target = format!("seckill-{}", a.port);
    record_fault(&faults, "pause", &target);
    a.signal(Signal::Stop);
    tokio::time::sleep(PAUSE).await;
    a.signal(Signal::Cont);
    record_fault(&faults, "resume", &target);
    let status = crowd.wait().await.unwrap();
    assert!(
        status.code().is_some_and(|code| code <= 1),
        "the load test could not run: {status}"
    );
    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
}

/// Every request a failed check names, by its process.
fn culprits(report: &Value) -> BTreeSet<u64> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|check| check["status"] == "fail")
        .flat_map(|check| check["culprits"].as_array().cloned().unwrap_or_default())
        .map(|process| process.as_u64().unwrap())
        .collect()
}

/// A run where A had just written when it stopped sells nothing twice; up to five runs.
const RUNS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_of_a_paused_holder_without_fencing_shows_the_double_sale_in_red() {
    testkit::browser::installed();
    let _turn = testkit::take_turn().await;
    let dir = tempfile::tempdir().unwrap();
    for run in 1..=RUNS {
        let report = a_paused_run(dir.path()).await;
        let unique = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["name"] == "unique");
        if unique.is_none_or(|unique| unique["status"] != "fail") {
            println!("run {run}: no unit sold twice; {}", report["checks"]);
            continue;
        }
        assert_eq!(report["verdict"], "oversold");
        let page = dir.path().join("run.history.html");
        let seen = testkit::browser::run_script("timeline.mjs", [&page]);
        assert_eq!(
            seen["violations"].as_u64().unwrap() as usize,
            culprits(&report).len(),
            "a red bar for each request the failed checks name: {seen}"
        );
        assert_eq!(
            seen["faults"], 1,
            "the pause, from SIGSTOP to SIGCONT, is one band: {seen}"
        );
        assert_eq!(seen["fill"], "#d50000", "{seen}");
        assert_eq!(
            (&seen["in_view_before"], &seen["hash"], &seen["in_view"]),
            (
                &Value::from(false),
                &Value::from("#first-violation"),
                &Value::from(true)
            ),
            "below the fold, the link brings the first red bar into view: {seen}"
        );
        assert!(seen["hover"].as_str().unwrap().contains("fails a check"), "{seen}");
        assert_eq!(
            seen["errors"],
            Value::Array(vec![]),
            "nothing fetched, nothing failed: {seen}"
        );
        return;
    }
    panic!("{RUNS} runs, and the paused holder never sold a unit twice: the scenario did not happen");
}
