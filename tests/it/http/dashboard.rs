//! The live dashboard in a real headless browser (Debian's chromium, driven by
//! playwright-core from `tests/browser/`): two instances sell, the page on the first
//! follows every sale of both, without a console error. The screenshot it takes is
//! left in `.run/results/dashboard.png` (the README's picture comes from it).

use std::path::Path;

use seckill::strategy::Strategy;

#[tokio::test(flavor = "multi_thread")]
async fn the_page_follows_the_sales_of_both_instances_in_a_real_browser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit::browser::installed();
    let sale = testkit::TestSale::new();
    let first = testkit::instance(Strategy::Redis, &sale, 10_000).await;
    let second = testkit::instance(Strategy::Redis, &sale, 10_000).await;
    testkit::reset_stock(&first.url, 150).await;

    // A crowd first, so the page opens on a sale already under way across both instances.
    let http = reqwest::Client::new();
    let buyers: Vec<_> = (0..120)
        .map(|buyer| {
            let url = format!("{}/stock/reduce", if buyer % 2 == 0 { &first.url } else { &second.url });
            let http = http.clone();
            tokio::spawn(async move { http.get(url).send().await.map(|answer| answer.status()) })
        })
        .collect();
    for buyer in buyers {
        assert!(buyer.await.unwrap().expect("the instance answers").is_success());
    }

    let screenshot = root.join(".run/results/dashboard.png");
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let page = format!("{}/", first.url);
    let buy_urls = format!("{},{}", first.url, second.url);
    let seen = tokio::task::spawn_blocking(move || {
        testkit::browser::run_script("dashboard.mjs", [page, buy_urls, screenshot.display().to_string()])
    })
    .await
    .unwrap();
    assert_eq!(
        seen["before"]["stock"], 30,
        "the page opened on the sale as Redis holds it: {seen}"
    );
    assert_eq!(
        seen["after"]["stock"], 18,
        "12 more units sold while it watched: {seen}"
    );
    assert_eq!(seen["after"]["lucky"], 132);
    assert_eq!(seen["after"]["strategy"], "redis");
    // The crowd bought 60 units through each instance, the script 6 more through each:
    // one mark per unit on the timeline, and each counted for the instance that sold it.
    let sold_by = |on_first: u32, on_second: u32| {
        serde_json::json!({
            format!("seckill-{}", first.port): on_first,
            format!("seckill-{}", second.port): on_second,
        })
    };
    assert_eq!(
        (&seen["before"]["marks"], &seen["before"]["soldBy"]),
        (&serde_json::json!(120), &sold_by(60, 60)),
        "the page opened on the crowd's units: {seen}"
    );
    assert_eq!(
        (&seen["after"]["marks"], &seen["after"]["soldBy"]),
        (&serde_json::json!(132), &sold_by(66, 66)),
        "the page drew and counted each unit once: {seen}"
    );
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}

#[tokio::test]
async fn the_page_and_its_event_stream_are_served_by_the_binary_itself() {
    let instance = testkit::instance(Strategy::Redis, &testkit::TestSale::new(), 10_000).await;
    let http = reqwest::Client::new();
    let page = http.get(format!("{}/", instance.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("new EventSource(\"/events\")"),
        "the page listens to its own instance"
    );
    for outside in ["src=\"http", "href=\"http", "@import"] {
        assert!(
            !html.contains(outside),
            "the page must not load anything from elsewhere ({outside})"
        );
    }
    let mut events = http.get(format!("{}/events", instance.url)).send().await.unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let first_chunk = String::from_utf8_lossy(&events.chunk().await.unwrap().unwrap()).into_owned();
    assert!(first_chunk.starts_with("event: tick\ndata: {"), "{first_chunk}");
    assert!(first_chunk.contains("\"strategy\":\"redis\""), "{first_chunk}");
    instance.stop().await.unwrap();
}

/// Each stream holds one of `--max-event-streams` places for as long as it is open (its
/// headers are long gone by then): past them `/events` is refused, and the sale goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_stream_limit_an_event_stream_is_refused_and_the_sale_still_answers() {
    let sale = testkit::TestSale::new();
    let app = testkit::instance_with(Strategy::Redis, &sale, |config| config.max_event_streams = 2).await;
    testkit::reset_stock(&app.url, 5).await;
    let http = reqwest::Client::new();
    let open_stream = || http.get(format!("{}/events", app.url)).send();
    let mut first = open_stream().await.unwrap();
    let mut second = open_stream().await.unwrap();
    for stream in [&mut first, &mut second] {
        assert_eq!(stream.status(), 200);
        let chunk = stream.chunk().await.unwrap().expect("a first event");
        assert!(chunk.starts_with(b"event: tick"), "{chunk:?}");
    }

    let third = open_stream().await.unwrap();
    assert_eq!(third.status().as_u16(), 503, "a third stream was let in");
    let body: serde_json::Value = third.json().await.unwrap();
    assert_eq!(body["error"], "overloaded", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("--max-event-streams"),
        "the message names the flag: {message}"
    );

    let bought = http.get(format!("{}/stock/reduce", app.url)).send().await.unwrap();
    assert_eq!(
        bought.status().as_u16(),
        200,
        "a sale is answered while two streams run"
    );
    let bought: serde_json::Value = bought.json().await.unwrap();
    assert_eq!(
        (bought["sold"].as_bool(), bought["stock_after"].as_i64()),
        (Some(true), Some(4)),
        "{bought}"
    );

    // A stream whose client went away gives its place back.
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = open_stream().await.unwrap().status().as_u16();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            std::time::Instant::now() < deadline,
            "a closed stream kept its place for 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(second);
    app.stop().await.unwrap();
}
