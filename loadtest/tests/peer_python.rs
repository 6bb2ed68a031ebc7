//! The Python lock peers of `make lockbench` (loadtest/peers/python) keep the contract of
//! loadtest/peers/README.md: one JSON line per run, every pair counted, no errors.
//! Their lock Redis is the project's test Redis, database 0 (their keys, `bench:peer:*`,
//! are theirs alone); their Redlock masters are those of `make services`. The first
//! run installs their packages into .run/peers/python-venv.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output};
use std::sync::Mutex;

/// The shared database of DATABASES in tests/common/test_redis.rs.
const DB: u8 = 0;

/// One peer at a time: the first one installs the venv, and the machine has two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(args: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(common::project_root().join("loadtest/peers/python/run"))
        .args(args)
        .env("SECKILL_LOCK_REDIS_URL", common::redis_url(DB))
        .env("SECKILL_REDLOCK_URLS", common::redlock_urls().join(","))
        .output()
        .expect("loadtest/peers/python/run starts")
}

/// Runs `name` briefly with 1 and 4 contenders and checks each of its four lines.
async fn measures_every_run_without_errors(name: &str, strategy: &str) {
    common::redis_client(DB).await; // the project's test Redis, or a clear panic
    let output = run(&[name, "--contenders", "1,4", "--seconds", "0.5"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");

    let runs: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    assert_eq!(runs.len(), 4, "2 contender counts x 2 key layouts:\n{stdout}");
    let expected = [(1, "one"), (1, "one each"), (4, "one"), (4, "one each")];
    for (run, (contenders, keys)) in runs.iter().zip(expected) {
        assert_eq!(run["strategy"], strategy, "{run}");
        assert_eq!(run["contenders"], contenders, "{run}");
        assert_eq!(run["keys"], keys, "{run}");
        assert!(run["pairs"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        assert!(run["first_error"].is_null(), "{run}");
        assert!(run["pairs_per_second"].as_f64().unwrap() > 0.0, "{run}");
        let (median, p99) = (
            run["median_pair_ms"].as_f64().unwrap(),
            run["p99_pair_ms"].as_f64().unwrap(),
        );
        assert!(0.0 < median && median <= p99, "{run}");
    }
}

#[tokio::test]
async fn redis_py_lock_measures_every_run_without_errors() {
    measures_every_run_without_errors("redis-py", "redis-py Lock").await;
}

#[tokio::test]
async fn python_redis_lock_measures_every_run_without_errors() {
    measures_every_run_without_errors("python-redis-lock", "python-redis-lock").await;
}

#[tokio::test]
async fn pottery_redlock_measures_every_run_without_errors() {
    measures_every_run_without_errors("pottery-redlock", "pottery Redlock").await;
}

#[test]
fn an_unknown_peer_is_refused_with_the_names_of_the_three() {
    let output = run(&["nosuch", "--contenders", "1", "--seconds", "0.5"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("'nosuch'"), "{stderr}");
    for name in ["redis-py", "python-redis-lock", "pottery-redlock"] {
        assert!(stderr.contains(name), "the message names {name}: {stderr}");
    }
}
