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

/// A lock run over several stock segments gets a table and a chart of its own: its rate
/// against N times one lock's bound, and its speed-up over the stock in one piece; and a
/// run measured after the sell-out, a row in that table.
#[test]
fn runs_over_stock_segments_are_set_against_n_locks_and_the_stock_in_one_piece() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut split: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(canned("bench-redis.json")).unwrap()).unwrap();
    split["label"] = "redis+segments-4".into();
    split["stock_segments"] = 4.into();
    split["sustained"]["sales_per_second"] = 6480.into();
    split["sustained_spread"] = serde_json::json!({"median": 6480, "min": 6000, "max": 7000});
    split["backend_bound_sales_per_second"] = 16000.into();
    let mut tail = split["sustained"].clone();
    tail["answers_per_second"] = 9876.into();
    split["sold_out_window"] = tail;
    let split_file = dir.path().join("bench-redis-segments-4.json");
    std::fs::write(&split_file, split.to_string()).unwrap();
    let mut flagged = split.clone();
    flagged["label"] = "redis+segments-4+sold-out-flag".into();
    flagged["sold_out_flag"] = true.into();
    flagged["sold_out_window"]["answers_per_second"] = 54321.into();
    let flagged_file = dir.path().join("bench-redis-segments-4-flag.json");
    std::fs::write(&flagged_file, flagged.to_string()).unwrap();
    let html = dir.path().join("report.html");

    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("report")
        .args([canned("bench-redis.json"), split_file, flagged_file])
        .arg("--html")
        .arg(&html)
        .output()
        .expect("bench report runs");
    let tables = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(tables.contains("Past one lock"), "{tables}");
    assert!(
        tables.contains("| redis+segments-4 | 4 | 6480 (6000–7000) | 2.00x | 16000 | 0.41 |"),
        "{tables}"
    );
    assert!(tables.contains("| redis | 1 | 3240 (2916–3564) | 1.00x |"), "{tables}");
    assert!(tables.contains("After the sell-out"), "{tables}");
    assert!(tables.contains("| redis+segments-4 | 9876 |"), "{tables}");
    assert!(
        tables.contains("| redis+segments-4+sold-out-flag | 54321 |"),
        "{tables}"
    );
    assert!(
        !tables.contains("| redis+segments-4+sold-out-flag | 4 |"),
        "the flag changes only the tail: no second row in \"Past one lock\": {tables}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Past one lock: stock segments"), "the chart's section");
    assert!(page.contains("redis+segments-4"), "the chart's row");
}

/// A run with its stock on the Redis Cluster is set beside its twin on one Redis (the same
/// label without `+stock-cluster`), and the twin's figures feed the model of the scale:
/// one segment's bound, the stock's and the lock server's CPU per sale.
#[test]
fn a_run_on_the_stock_cluster_is_set_beside_its_twin_on_one_redis_and_modelled() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let canned_run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(canned("bench-redis.json")).unwrap()).unwrap();
    let run = |label: &str, sales: u32, processes: serde_json::Value| {
        let mut run = canned_run.clone();
        run["label"] = label.into();
        run["stock_segments"] = 6.into();
        run["sustained"]["sales_per_second"] = sales.into();
        run["sustained_spread"] = serde_json::json!({"median": sales, "min": sales - 200, "max": sales + 200});
        run["backend_bound_sales_per_second"] = 12000.into();
        run["sustained_cpu"]["processes"] = processes;
        run
    };
    // One Redis: 0.4 cores for 4000 sales/s is 100 µs a sale; the lock Redis, 50.
    let one_redis = run(
        "redis+segments-6+lock-redis",
        4000,
        serde_json::json!([{"name": "redis", "cores": 0.4}, {"name": "lock-redis", "cores": 0.2}]),
    );
    // The cluster: every node counts, replicas too: 0.9 cores for 3000 sales/s is 300 µs.
    let mut cluster = run(
        "redis+segments-6+lock-redis+stock-cluster",
        3000,
        serde_json::json!([
            {"name": "stock-cluster-1", "cores": 0.3}, {"name": "stock-cluster-2", "cores": 0.3},
            {"name": "stock-cluster-3", "cores": 0.2}, {"name": "stock-cluster-4", "cores": 0.1},
            {"name": "lock-redis", "cores": 0.2}
        ]),
    );
    cluster["stock_shards"] = 3.into();
    let files: Vec<PathBuf> = [("one-redis", one_redis), ("cluster", cluster)]
        .into_iter()
        .map(|(name, run)| {
            let file = dir.path().join(format!("{name}.json"));
            std::fs::write(&file, run.to_string()).unwrap();
            file
        })
        .collect();

    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("report")
        .args(&files)
        .output()
        .expect("bench report runs");
    let tables = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(tables.contains("Past one machine: "), "{tables}");
    assert!(
        tables.contains(
            "| redis+segments-6+lock-redis+stock-cluster | 3 | 6 | 4000 (3800–4200) | 3000 (2800–3200) | 0.75 | 100 | 300 |"
        ),
        "{tables}"
    );
    // Two segments a shard; one segment's bound 12000 / 6; a shard sells 10,000/s on its
    // core, the one lock Redis 20,000/s: the locks stop it first, then the lock's server.
    assert!(
        tables.contains(
            "| redis+segments-6+lock-redis | 2 | 2000 | 100 | 50 | 4000 (the locks) | 12000 (the locks) \
             | 20000 (the lock's server) | 20000 (the lock's server) |"
        ),
        "{tables}"
    );
    assert!(
        !tables.contains("Past one lock"),
        "a run with its lock or its stock elsewhere is no run over segments: {tables}"
    );
}

/// A run with `+group-commit` is set beside the same run without groups: its speed-up,
/// its units per grant, and the one-unit bound re-stated per grant.
#[test]
fn a_grouped_run_is_set_beside_the_same_lock_without_groups_and_its_bound_per_grant() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let plain: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(canned("bench-redis.json")).unwrap()).unwrap();
    let mut grouped = plain.clone();
    grouped["label"] = "redis+group-commit".into();
    grouped["sustained"]["sales_per_second"] = 9720.into();
    grouped["sustained_spread"] = serde_json::json!({"median": 9720, "min": 9000, "max": 10000});
    grouped["backend_bound_sales_per_second"] = 2000.into();
    grouped["sustained_groups"] =
        serde_json::json!({"grants": 100.0, "mean": 6.0, "median_at_most": 6.0, "p99_at_most": 16.0});
    let files: Vec<PathBuf> = [("plain", plain), ("grouped", grouped)]
        .into_iter()
        .map(|(name, run)| {
            let file = dir.path().join(format!("{name}.json"));
            std::fs::write(&file, run.to_string()).unwrap();
            file
        })
        .collect();
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("report")
        .args(&files)
        .output()
        .expect("bench report runs");
    let tables = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(tables.contains("Past one sale per grant: "), "{tables}");
    // 9720 against the plain run's 3240; six units a grant at 2000 grants a second.
    assert!(
        tables.contains("| redis+group-commit | 9720 (9000–10000) | 3240 (2916–3564) | 3.00x | 6.0 | 6 | 16 | 2000 | 12000 | 0.81 |"),
        "{tables}"
    );
}
