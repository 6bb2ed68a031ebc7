//! `GET /metrics`: Prometheus's text format, whose counters move with the sales.

use seckill::strategy::Strategy;

/// The value of one sample, `name{labels} value`, as the text format prints it.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn scrape(url: &str) -> String {
    let response = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    response.text().await.unwrap()
}

#[tokio::test]
async fn the_counters_move_with_sales_sold_out_answers_and_refusals() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance(Strategy::Redis, &sale, 300).await;
    testkit::reset_stock(&app.url, 2).await;
    let before = scrape(&app.url).await;
    assert_eq!(sample(&before, "seckill_units_sold_total"), Some(0.0), "{before}");
    let info = format!(
        r#"seckill_info{{fencing="on",instance="seckill-{}",strategy="redis"}}"#,
        app.port
    );
    assert_eq!(sample(&before, &info), Some(1.0), "{before}");
    assert!(
        !before.contains("seckill_lock_mode"),
        "`redis` has no lock modes, so no mode metrics: {before}"
    );

    for _ in 0..3 {
        reqwest::get(format!("{}/stock/reduce", app.url)).await.unwrap();
    }
    // Someone else holds the lock for longer than the 300 ms acquire timeout.
    sale.hold_the_stock_lock(5000).await;
    let refused = reqwest::get(format!("{}/stock/reduce", app.url)).await.unwrap();
    assert_eq!(refused.status().as_u16(), 503);

    let after = scrape(&app.url).await;
    assert_eq!(sample(&after, "seckill_units_sold_total"), Some(2.0), "{after}");
    assert_eq!(sample(&after, "seckill_sold_out_answers_total"), Some(1.0), "{after}");
    assert_eq!(
        sample(&after, r#"seckill_reduce_failures_total{reason="lock_timeout"}"#),
        Some(1.0),
        "{after}"
    );
    // Three grants (two sales and the sold-out answer), each waited for.
    assert_eq!(sample(&after, "seckill_lock_wait_seconds_count"), Some(3.0), "{after}");
    assert_eq!(
        sample(&after, r#"seckill_lock_wait_seconds_bucket{le="+Inf"}"#),
        Some(3.0),
        "{after}"
    );
    assert_eq!(
        sample(&after, "seckill_lock_waiters"),
        Some(0.0),
        "nobody waits now: {after}"
    );
    // Each step of the three granted sales; the write only for the two that sold; the
    // refused buyer queued (and timed out in the lock, so its lock step is not counted).
    for (step, count) in [
        ("queued", 4.0),
        ("lock", 3.0),
        ("read", 3.0),
        ("write", 2.0),
        ("release", 3.0),
    ] {
        let counted = format!(r#"seckill_sale_step_seconds_count{{step="{step}"}}"#);
        assert_eq!(sample(&after, &counted), Some(count), "{step}: {after}");
        let took = sample(&after, &format!(r#"seckill_sale_step_seconds_sum{{step="{step}"}}"#)).unwrap();
        assert!(took > 0.0 && took < 5.0, "{step} took {took} s in all: {after}");
    }
    assert!(after.contains("# TYPE seckill_lock_wait_seconds histogram"), "{after}");
    assert!(after.contains("# TYPE seckill_units_sold_total counter"), "{after}");
    app.stop().await.unwrap();
}

/// `seckill_locks_held` is 1 while a sale holds its grant (here lingering 400 ms before
/// its write) and 0 once it released: the lab finds the holder by it.
#[tokio::test]
async fn the_locks_held_gauge_counts_a_grant_from_grant_to_release() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.chaos_pause_before_write_ms = Some(400);
    })
    .await;
    testkit::reset_stock(&app.url, 1).await;
    assert_eq!(sample(&scrape(&app.url).await, "seckill_locks_held"), Some(0.0));

    let buyer = tokio::spawn(reqwest::get(format!("{}/stock/reduce", app.url)));
    let started = std::time::Instant::now();
    let mut held = None;
    while held != Some(1.0) && started.elapsed() < std::time::Duration::from_millis(350) {
        held = sample(&scrape(&app.url).await, "seckill_locks_held");
    }
    assert_eq!(held, Some(1.0), "held during the sale's linger");
    let answer = buyer.await.unwrap().unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    // The buyer hears its answer before the release: the gauge falls just after.
    let answered = std::time::Instant::now();
    while held != Some(0.0) && answered.elapsed() < std::time::Duration::from_secs(1) {
        held = sample(&scrape(&app.url).await, "seckill_locks_held");
    }
    assert_eq!(held, Some(0.0), "released within 1 s of the answer");
    app.stop().await.unwrap();
}
