//! The lock peers of `make lockbench` (loadtest/peers/) keep the contract of
//! loadtest/peers/README.md: a short run prints one JSON line per run and nothing else on
//! stdout, every run made pairs, and none failed. Against the servers of `make services`;
//! the Python peers' lock Redis is the project's test Redis, database 0 (their keys,
//! `bench:peer:*`, are theirs alone). The first run of each installs what it needs
//! (Curator and a JDK, Go and etcd's client from Debian; the Python packages into a venv)
//! and builds it: a minute or two, once.

use std::process::{Command, Output};

use loadtest::bench::lockbench::PEERS;

/// Runs the peer called `name` in lockbench's table, with `args` after its own.
fn run_peer(name: &str, args: &[&str]) -> Output {
    let peer = PEERS
        .iter()
        .find(|peer| peer.name == name)
        .expect("a peer of lockbench");
    let _turn = testkit::take_turn_blocking();
    Command::new(testkit::project_root().join(peer.program))
        .args(peer.args)
        .args(args)
        .env("SECKILL_LOCK_REDIS_URL", testkit::redis_url())
        .env("SECKILL_REDLOCK_URLS", testkit::redlock_urls().join(","))
        .output()
        .expect("the peer's run script starts")
}

/// Runs `name` briefly with 1 and 4 contenders and checks each of its four lines.
async fn keeps_the_contract(name: &str, strategy: &str) {
    testkit::redis_client().await; // the project's test Redis, or a clear panic
    let output = run_peer(name, &["--contenders", "1,4", "--seconds", "0.5"]);
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
async fn curator_keeps_the_contract() {
    keeps_the_contract("curator", "curator InterProcessMutex").await;
}

#[tokio::test]
async fn etcd_concurrency_keeps_the_contract() {
    keeps_the_contract("etcd-concurrency", "etcd concurrency.Mutex").await;
}

#[tokio::test]
async fn redis_py_keeps_the_contract() {
    keeps_the_contract("redis-py", "redis-py Lock").await;
}

#[tokio::test]
async fn python_redis_lock_keeps_the_contract() {
    keeps_the_contract("python-redis-lock", "python-redis-lock").await;
}

#[tokio::test]
async fn pottery_redlock_keeps_the_contract() {
    keeps_the_contract("pottery-redlock", "pottery Redlock").await;
}

#[test]
fn every_peer_refuses_bad_contenders_with_a_message_that_says_the_fix() {
    for peer in PEERS {
        let output = run_peer(peer.name, &["--contenders", "1,x", "--seconds", "0.5"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{}: {stderr}", peer.name);
        assert!(
            stderr.contains("--contenders"),
            "{}: the message names the flag: {stderr}",
            peer.name
        );
    }
}

#[test]
fn an_unknown_python_peer_is_refused_with_the_names_of_the_three() {
    let output = Command::new(testkit::project_root().join("loadtest/peers/python/run"))
        .args(["nosuch", "--contenders", "1", "--seconds", "0.5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("'nosuch'"), "{stderr}");
    for name in ["redis-py", "python-redis-lock", "pottery-redlock"] {
        assert!(stderr.contains(name), "the message names {name}: {stderr}");
    }
}
