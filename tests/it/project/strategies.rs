//! A strategy is its file and one line in `src/strategy.rs`: every other list of
//! strategies is made from that one, or checked against it here. No server needed.
//!
//! The scripts ask the binary (`seckill strategies --json`, through
//! scripts/lib/strategies.sh); with `DRY_RUN=1` they print what they would run, and this
//! test reads that. The pages and the conformance suite are read as text.

use std::collections::BTreeSet;
use std::process::Command;

use clap::ValueEnum;
use seckill::strategy::Strategy;

/// `seckill strategies --json`, parsed: every strategy as its file describes it.
fn strategies_the_binary_lists() -> Vec<serde_json::Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["strategies", "--json"])
        .output()
        .expect("the seckill binary runs");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("seckill strategies --json prints JSON")
}

fn every_strategy() -> impl Iterator<Item = Strategy> {
    Strategy::value_variants().iter().copied()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(testkit::project_root().join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// What `DRY_RUN=1 scripts/SCRIPT` prints, one run (or row) a line, asking this build's binary.
fn dry_run(script: &str) -> Vec<String> {
    let output = Command::new("bash")
        .arg(testkit::project_root().join("scripts").join(script))
        .env("DRY_RUN", "1")
        .env("SECKILL_BIN", env!("CARGO_BIN_EXE_seckill"))
        .env_remove("CHAOS_FAULTS")
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "DRY_RUN=1 scripts/{script} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn seckill_strategies_lists_what_the_lock_flag_takes_and_the_baselines_oversell() {
    let listed = strategies_the_binary_lists();
    let names: Vec<&str> = listed.iter().filter_map(|each| each["name"].as_str()).collect();
    let variants: Vec<&str> = every_strategy().map(Strategy::name).collect();
    assert_eq!(
        names, variants,
        "seckill strategies must list what --lock takes, in its order"
    );
    let baselines: Vec<&str> = listed
        .iter()
        .filter(|each| each["oversells"] == true)
        .filter_map(|each| each["name"].as_str())
        .collect();
    assert_eq!(
        baselines,
        ["none", "local"],
        "the baselines are the strategies expected to oversell"
    );
    for each in &listed {
        let has_a_server = each["backend"] != "none";
        assert_eq!(
            each["lock_flag"].is_string(),
            has_a_server,
            "a strategy names the flag of its lock's server exactly when it has one: {each}"
        );
    }
}

#[test]
fn every_strategy_has_its_rows_in_both_readmes_and_the_lock_table_and_its_section() {
    let readme = read("README.md");
    let chinese_readme = read("docs/zh-CN/README.md");
    let reference = read("docs/reference/strategies.md");
    let lock_tour = read("src/lock/mod.rs");
    for strategy in every_strategy() {
        let name = strategy.name();
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "README.md's table of strategies has no row for `{name}`"
        );
        assert!(
            chinese_readme.contains(&format!("| `{name}` |")),
            "docs/zh-CN/README.md's table of strategies has no row for `{name}`"
        );
        assert!(
            reference.contains(&format!("## `{name}` —")),
            "docs/reference/strategies.md has no section `## `{name}` — ...`"
        );
        if strategy.takes_a_lock() {
            assert!(
                lock_tour.contains(&format!("//! | `{name}` |")),
                "src/lock/mod.rs's table of locks has no row for `{name}`"
            );
        }
    }
}

/// The `conformance_suite!` blocks of tests/it/lock/conformance.rs, by the name each opens with.
fn conformance_suites() -> Vec<String> {
    let suite = read("tests/it/lock/conformance.rs");
    suite
        .split("\nconformance_suite!(\n")
        .skip(1)
        .filter_map(|block| block.trim_start().split(',').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_lock_runs_the_conformance_suite() {
    let suites = conformance_suites();
    assert!(
        suites.len() >= 8,
        "found only {suites:?} in tests/it/lock/conformance.rs"
    );
    // `none`'s lock excludes nothing; tests/it/lock/baselines.rs shows that instead.
    for strategy in every_strategy().filter(|&s| s.takes_a_lock() && s != Strategy::None) {
        let module = strategy.name().replace('-', "_");
        let modes = format!("{module}_in_");
        assert!(
            suites.iter().any(|suite| *suite == module || suite.starts_with(&modes)),
            "`{}` has no `conformance_suite!({module}, ...)` (or `{modes}...`) in \
             tests/it/lock/conformance.rs; the suites are {suites:?}",
            strategy.name()
        );
    }
}

#[test]
fn the_demo_and_the_bench_run_every_strategy() {
    for script in ["demo.sh", "bench.sh"] {
        let runs: BTreeSet<String> = dry_run(script).into_iter().collect();
        for strategy in every_strategy() {
            assert!(
                runs.contains(strategy.name()),
                "scripts/{script} does not run `{}` by default; it runs {runs:?}",
                strategy.name()
            );
        }
    }
}

/// The faults that any lock can meet: the chaos suite strikes every lock on a server with each.
const FAULTS_OF_ANY_LOCK: [&str; 6] = [
    "holder-paused",
    "holder-killed",
    "holder-partitioned",
    "waiters-partitioned",
    "answers-delayed",
    "connections-reset",
];

#[test]
fn the_chaos_suite_strikes_every_lock_that_lives_on_a_server_with_every_fault_of_any_lock() {
    let rows = dry_run("chaos.sh");
    for fault in FAULTS_OF_ANY_LOCK {
        let struck: BTreeSet<&str> = rows
            .iter()
            .filter_map(|row| row.strip_prefix(fault)?.strip_prefix(' ')?.split(' ').next())
            .collect();
        for strategy in every_strategy().filter(|s| s.lock_backend().is_some()) {
            assert!(
                struck.contains(strategy.name()),
                "scripts/chaos.sh has no row `{fault}` for `{}`; that fault strikes {struck:?}",
                strategy.name()
            );
        }
    }
    assert!(
        rows.iter().any(|row| row == "holder-paused redis off"),
        "a paused holder runs with fencing off too: {rows:?}"
    );
}
