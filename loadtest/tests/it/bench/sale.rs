//! `bench` as `make bench` runs it, briefly: two instances of the Redis lock, one crowd
//! run, a short serial and sustained load; then the report, on a sale of its own.

use std::process::Command;

use seckill::server::Instance;
use seckill::strategy::Strategy;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn a_short_bench_measures_the_redis_lock_against_its_bound_and_reports_it() {
    testkit::redis_client().await; // the project's test Redis, or a clear panic
    let _turn = testkit::take_turn().await; // it times the servers: no other timed test beside it
    let sale = testkit::TestSale::new();
    let start = || async {
        Instance::start(testkit::config(Strategy::Redis, &sale))
            .await
            .expect("an instance starts on the test Redis")
    };
    let (first, second) = (start().await, start().await);
    let dir = testkit::temp_dir("bench");
    let json = dir.path().join("redis.json");
    let bench = env!("CARGO_BIN_EXE_bench");

    let measured = tokio::task::spawn_blocking({
        let (json, hosts) = (json.clone(), format!("{},{}", first.url, second.url));
        let prefix = sale.prefix().to_owned();
        move || {
            Command::new(bench)
                .args([
                    "measure",
                    "--label",
                    "redis",
                    "--runs",
                    "1",
                    "--seconds",
                    "0.5",
                    "--serial-seconds",
                    "0.3",
                ])
                .args(["--connections", "8", "--hosts", &hosts, "--out"])
                .arg(&json)
                .arg(format!("--watch=this-test={}", std::process::id()))
                .env("SECKILL_REDIS_URL", testkit::redis_url())
                .env("SECKILL_KEY_PREFIX", prefix)
                .output()
                .expect("bench runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&measured.stdout);
    assert!(
        measured.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&measured.stderr)
    );
    first.stop().await.unwrap();
    second.stop().await.unwrap();

    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(result["crowd"]["runs_passed"], 1, "{result}");
    assert_eq!(result["crowd"]["units_sold"]["median"], 300.0);
    // The crowd run's history, beside the result: 500 invocations and their 500 answers.
    let history = json.with_file_name(format!(
        "{}.crowd-1.history.jsonl",
        json.file_stem().unwrap().to_string_lossy()
    ));
    let events = loadtest::history::read(&history).unwrap();
    assert_eq!(events.len(), 1000, "{}", history.display());
    assert!(history.with_extension("html").exists(), "its timeline beside it");
    for (load, seconds) in [("serial", 0.3), ("sustained", 0.5), ("probed_window", 0.5)] {
        assert_eq!(result[load]["verdict"], "held", "{load}: {}", result[load]);
        window_counts_agree(load, &result[load], seconds);
    }
    assert_eq!(result["serial"]["connections"], 1);
    assert_eq!(result["sustained"]["connections"], 8);
    // Against a sale with nothing left, every buyer is answered and none is sold a unit.
    let sold_out = &result["sold_out_window"];
    assert_eq!(
        (&sold_out["verdict"], &sold_out["sold"], &sold_out["errors"]),
        (&json!("held"), &json!(0), &json!(0)),
        "{sold_out}"
    );
    assert_eq!(sold_out["sales_per_second"], 0.0, "{sold_out}");
    assert!(sold_out["answers_per_second"].as_f64().unwrap() > 0.0, "{sold_out}");
    let round_trips = result["round_trips"].as_array().unwrap();
    assert!(round_trips
        .iter()
        .any(|rtt| rtt["backend"] == "stock-redis" && rtt["median_us"].as_f64().unwrap() > 0.0));
    let bound = result["bound_sales_per_second"]
        .as_f64()
        .expect("the Redis lock has a bound");
    let sustained = result["sustained"]["sales_per_second"].as_f64().unwrap();
    assert!(
        sustained < bound * 1.5,
        "a lock cannot beat its critical path by far: {sustained} sales/s, bound {bound}"
    );
    let backend_bound = result["backend_bound_sales_per_second"]
        .as_f64()
        .expect("the Redis lock has a backend bound");
    let serial_bound = result["serial_bound_sales_per_second"]
        .as_f64()
        .expect("and a serial bound");
    assert!(
        (backend_bound - bound).abs() < 1e-6 * bound,
        "the Redis lock's path is its backend's minimal path: {bound} vs {backend_bound}"
    );
    // Alone: acquire, read, write, release, each answered; four trips, as the hand-over's
    // half release, half wake-up, acquire, read and write: the same bound, give or take
    // a read's time against a write's.
    assert!(
        serial_bound > backend_bound / 1.5 && serial_bound < backend_bound * 1.5,
        "one client alone: {serial_bound} sales/s, under contention {backend_bound}"
    );
    // The same round trips timed under the sustained load, and the backend bound at them.
    let under_load = result["round_trips_under_load"].as_array().unwrap();
    for backend in ["stock-redis", "lock-redis"] {
        for access in ["read", "write"] {
            assert!(
                under_load.iter().any(|rtt| rtt["backend"] == backend
                    && rtt["access"] == access
                    && rtt["median_us"].as_f64().unwrap() > 0.0),
                "{backend} {access} under load: {under_load:?}"
            );
        }
    }
    let bound_under_load = result["backend_bound_under_load_sales_per_second"]
        .as_f64()
        .expect("a backend bound under load");
    // No ceiling here: the probe is one client that waits for each answer, and when the
    // tests beside this one take the cores, its waits (and so this bound) stretch more
    // than the eight connections' of the sale do. A CI run measured 671 sales/s under
    // load beside a sustained rate far above it. `make bench` runs alone and shows the ratio.
    assert!(
        bound_under_load.is_finite() && bound_under_load > 0.0,
        "{bound_under_load}"
    );
    assert!(
        stdout.contains("| that window / backend bound under load |"),
        "{stdout}"
    );
    // The probes' requests count in no figure of the sustained windows: a sale never asks
    // whether a key EXISTS, as the read probe does.
    let requests = result["sustained_requests"].as_array().unwrap();
    assert!(
        !requests.iter().any(|rate| rate["request"] == "exists"),
        "the probes' reads counted as the sale's requests: {requests:?}"
    );
    // Where the time goes: the service's own step timings, and the grant log's hand-overs.
    // Every sale of the sustained windows passes each step once, so the steps' counts
    // (the instances' /metrics) agree; the median window's sales are among them.
    let steps = result["sustained_steps"].as_array().unwrap();
    let queued = steps.iter().find(|step| step["step"] == "queued").expect("queued");
    let sales_in_windows = queued["count"].as_f64().unwrap();
    assert!(
        sales_in_windows >= result["sustained"]["sold"].as_f64().unwrap(),
        "the steps count fewer sales than the median window sold: {queued}, {}",
        result["sustained"]
    );
    for name in ["lock", "read", "write", "release"] {
        let step = steps.iter().find(|step| step["step"] == name).expect(name);
        assert_eq!(step["count"], sales_in_windows, "{name}: {steps:?}");
        assert!(step["mean_ms"].as_f64().unwrap() > 0.0, "{name}: {step}");
    }
    let hand_over = &result["sustained"]["hand_over"];
    assert!(hand_over["grants"].as_u64().unwrap() > 1, "{hand_over}");
    let per_sale_ms = 1000.0 / sustained;
    let hold_and_gap = hand_over["mean_hold_ms"].as_f64().unwrap() + hand_over["mean_gap_ms"].as_f64().unwrap();
    assert!(
        hold_and_gap > 0.0 && hold_and_gap < per_sale_ms * 2.0,
        "a lock serializes: hold + gap ({hold_and_gap} ms) is about one sale ({per_sale_ms} ms)"
    );
    // One client alone: its HTTP turnaround, and its sale split in the report.
    let turnaround_ms = result["serial_turnaround_ms"].as_f64().expect("a turnaround");
    assert!(turnaround_ms > 0.0, "{turnaround_ms}");
    assert!(
        stdout.contains("| strategy | per sale | HTTP turnaround | queued | lock | read | write | rest |"),
        "{stdout}"
    );
    assert!(result["sustained_cpu"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "this-test"));
    assert!(stdout.contains("| redis | 1/1 | 300 (300–300) |"), "{stdout}");

    let html = dir.path().join("report.html");
    let chaos = dir.path().join("runs.jsonl");
    let paused = crate::chaos_table::report("on", crate::chaos_table::PASSED, 0);
    let run = crate::chaos_table::run(dir.path(), "run-1", "holds", paused, crate::chaos_table::PAUSED_HISTORY);
    std::fs::write(&chaos, run).unwrap();
    let reported = Command::new(bench)
        .arg("report")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .arg("--chaos")
        .arg(&chaos)
        .arg("--lockbench")
        .arg(dir.path().join("no-lockbench-here.json"))
        .output()
        .expect("bench report runs");
    let tables = String::from_utf8_lossy(&reported.stdout);
    assert!(
        reported.status.success(),
        "{tables}\n{}",
        String::from_utf8_lossy(&reported.stderr)
    );
    assert!(tables.contains("Ordering by sustained sales/s: redis ("), "{tables}");
    assert!(
        tables.contains("| hold + gap / 1000 per sale |"),
        "the time table: {tables}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.matches("<svg").count() >= 6,
        "units sold, rates, ratios, where the time goes, latency, lock waits"
    );
    assert!(
        page.contains("<td>holder-paused</td><td class=\"text\">redis</td>"),
        "the chaos table is in the report"
    );
    assert!(
        !page.contains("The locks alone"),
        "no lockbench section without its results"
    );
    for outside in ["src=", "@import", "url("] {
        assert!(!page.contains(outside), "the report must not load anything ({outside})");
    }
    // Its only links go to the crowd run's timeline, beside it.
    let links: Vec<&str> = page
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert_eq!(links, ["redis.crowd-1.history.html"], "{page}");
    assert!(
        dir.path().join(links[0]).exists(),
        "the timeline the report links to is there"
    );
}

/// One window of endless stock under a lock that holds: every answer inside it is a
/// sale, its rate is that whole count over its `seconds`, and the grant log the
/// instances wrote has one grant for each unit the load was told it bought.
fn window_counts_agree(load: &str, window: &Value, seconds: f64) {
    assert_eq!(
        (&window["seconds"], &window["errors"]),
        (&json!(seconds), &json!(0)),
        "{load}: {window}"
    );
    let rate = window["sales_per_second"].as_f64().unwrap();
    assert_eq!(
        rate,
        window["answers_per_second"].as_f64().unwrap(),
        "{load}: an answer in the window that was no sale: {window}"
    );
    let (counted, sold) = (rate * seconds, window["sold"].as_u64().unwrap());
    assert!(
        (counted - counted.round()).abs() < 1e-6 && counted >= 1.0 && counted.round() as u64 <= sold,
        "{load}: {rate} sales/s over {seconds} s is not a whole count of sales, of the {sold} sold: {window}"
    );
    assert_eq!(
        (
            window["hand_over"]["grants"].as_u64(),
            window["hand_over"]["hand_overs"].as_u64()
        ),
        (Some(sold), Some(sold - 1)),
        "{load}: one grant per unit sold, handed over within one segment: {window}"
    );
}
