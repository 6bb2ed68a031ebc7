//! Malformed and hostile requests: each gets a clear error, the service stays up, and
//! the sale is untouched. And what guards `POST /stock/reset`: the admin token, or
//! without one, a `Host` that names this machine.

use std::time::{Duration, Instant};

use serde_json::Value;

use seckill::strategy::Strategy;

async fn snapshot(url: &str) -> Value {
    reqwest::get(format!("{url}/stock"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Sends a request, and checks the answer is `status` with the JSON error `code`.
async fn assert_refused(request: reqwest::RequestBuilder, status: u16, code: &str) {
    let response = request.send().await.expect("the service answers");
    let got = response.status().as_u16();
    let body: Value = response
        .json()
        .await
        .unwrap_or_else(|error| panic!("{got}: not a JSON answer ({error})"));
    assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{body}");
    assert!(
        body["message"].as_str().is_some_and(|message| !message.is_empty()),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_hostile_requests_get_clear_errors_and_change_nothing() {
    let app = testkit::instance(Strategy::Redis, &testkit::TestSale::new(), 1000).await;
    let http = reqwest::Client::new();
    let reset = || {
        http.post(format!("{}/stock/reset", app.url))
            .header("content-type", "application/json")
    };
    assert_eq!(
        reset().body(r#"{"stock": 7}"#).send().await.unwrap().status().as_u16(),
        200
    );
    let before = snapshot(&app.url).await;

    assert_refused(reset().body("stock=7"), 400, "bad_request").await;
    assert_refused(reset().body(r#"{"stock": -1}"#), 400, "bad_request").await;
    assert_refused(reset().body(r#"{"stock": 1000000000000}"#), 400, "bad_request").await;
    assert_refused(
        reset().body(r#"{"stock": 99999999999999999999999}"#),
        400,
        "bad_request",
    )
    .await;
    assert_refused(reset().body(r#"{"stock": "many"}"#), 400, "bad_request").await;
    assert_refused(reset().body(r#"{"stock": 7, "lucky": 1000}"#), 400, "bad_request").await;
    // A 10 MB body is refused from its Content-Length, before it is sent (as curl sends
    // large bodies: `Expect: 100-continue`, then the body only if the server asks).
    let (status, body) = raw_request(
        app.port,
        "POST /stock/reset HTTP/1.1\r\nHost: seckill\r\nContent-Type: application/json\r\n\
         Content-Length: 10485760\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    assert_refused(
        http.post(format!("{}/stock/reset", app.url)).body("{}"),
        415,
        "unsupported_media_type",
    )
    .await;
    assert_refused(
        http.delete(format!("{}/stock/reduce", app.url)),
        405,
        "method_not_allowed",
    )
    .await;
    let brew = reqwest::Method::from_bytes(b"BREW").unwrap();
    assert_refused(
        http.request(brew, format!("{}/stock", app.url)),
        405,
        "method_not_allowed",
    )
    .await;
    assert_refused(
        http.get(format!("{}/admin/../../etc/passwd", app.url)),
        404,
        "not_found",
    )
    .await;
    assert_refused(
        http.get(format!("{}/stock/reduce/{}", app.url, "x".repeat(10_000))),
        404,
        "not_found",
    )
    .await;

    // A long query string on a read is ignored; one longer than the server reads at all
    // is cut off by hyper itself, before any route (a 4xx without a JSON body).
    let long = http
        .get(format!("{}/stock?{}", app.url, "q=1&".repeat(5_000)))
        .send()
        .await
        .unwrap();
    assert_eq!(long.status().as_u16(), 200);
    let huge = http
        .get(format!("{}/stock?{}", app.url, "q".repeat(2 * 1024 * 1024)))
        .send()
        .await;
    if let Ok(huge) = huge {
        assert!(
            huge.status().is_client_error(),
            "a 2 MB request line was answered {}",
            huge.status()
        );
    } // or the server closed the connection on it: refused either way

    let health = http.get(format!("{}/healthz", app.url)).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200, "the service is still up");
    assert_eq!(snapshot(&app.url).await, before, "a refused request changed the sale");
    app.stop().await.unwrap();
}

/// Sends `head` as it is and reads the answer to the end: its status and JSON body.
async fn raw_request(port: u16, head: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    // Read until the head and as many body bytes as its Content-Length says have come.
    let mut answer = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|n| n.trim().to_owned())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
                return (status, serde_json::from_str(body).unwrap_or(Value::Null));
            }
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk)).await;
        match read
            .expect("an answer within 5 s")
            .expect("the connection stays readable")
        {
            0 => panic!("the connection closed before a whole answer: {text}"),
            n => answer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Lets this process hold `files` descriptors (both ends of every connection are here).
fn allow_open_files(files: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = files.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_do_not_stop_a_buyer() {
    const IDLE: usize = 3000;
    allow_open_files(4 * IDLE as u64 + 1024);
    let app = testkit::instance(Strategy::Redis, &testkit::TestSale::new(), 1000).await;
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", app.port))
                .await
                .expect("a connection is accepted"),
        );
    }
    let asked = Instant::now();
    let bought = reqwest::get(format!("{}/stock/reduce", app.url)).await.unwrap();
    let answered_in = asked.elapsed();
    println!("{IDLE} idle connections open: a buyer was answered in {answered_in:?}");
    assert_eq!(bought.status().as_u16(), 200);
    assert!(answered_in < Duration::from_secs(2), "answered in {answered_in:?}");
    drop(idle);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_a_reset_needs_the_admin_token() {
    let reset = |url: &str| {
        reqwest::Client::new()
            .post(format!("{url}/stock/reset"))
            .header("content-type", "application/json")
            .body(r#"{"stock": 5}"#)
    };
    // Configured for every address, no token: resets are refused outright.
    let sale = testkit::TestSale::new();
    let open = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.bind = "0.0.0.0".parse().unwrap()
    })
    .await;
    let before = snapshot(&open.url).await;
    assert_refused(reset(&open.url), 403, "forbidden").await;
    assert_refused(reset(&open.url).bearer_auth("a-guess-of-sixteen"), 403, "forbidden").await;
    assert_eq!(snapshot(&open.url).await, before);
    open.stop().await.unwrap();

    // With a token: only the token resets.
    let token = "0123456789abcdef-admin";
    let guarded = testkit::instance_with(Strategy::Redis, &sale, |config| {
        config.bind = "0.0.0.0".parse().unwrap();
        config.admin_token = Some(token.to_owned());
    })
    .await;
    assert_refused(reset(&guarded.url), 401, "unauthorized").await;
    assert_refused(
        reset(&guarded.url).bearer_auth("0123456789abcdef-admiN"),
        401,
        "unauthorized",
    )
    .await;
    assert_eq!(snapshot(&guarded.url).await, before, "a refused reset changed the sale");
    assert_eq!(
        reset(&guarded.url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(snapshot(&guarded.url).await["stock"], 5);
    guarded.stop().await.unwrap();
}

/// `POST /stock/reset` with a JSON body, as a browser sends it to the host it names.
fn reset_naming(host: &str) -> String {
    let body = r#"{"stock": 5}"#;
    format!(
        "POST /stock/reset HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// DNS rebinding: once `evil.example` resolves to 127.0.0.1, its page is same-origin with
/// the service, and its JSON post needs no preflight. Only its `Host` gives it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_loopback_without_a_token_a_reset_naming_another_host_is_refused() {
    let app = testkit::instance(Strategy::Redis, &testkit::TestSale::new(), 1000).await;
    let before = snapshot(&app.url).await;
    let (status, body) = raw_request(app.port, &reset_naming(&format!("evil.example:{}", app.port))).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("evil.example") && message.contains("--allowed-host") && message.contains("--admin-token"),
        "the message names the host and both fixes: {message}"
    );
    assert_eq!(snapshot(&app.url).await, before, "a refused reset changed the sale");

    for host in ["localhost", "127.0.0.1", "127.1.2.3", "[::1]"] {
        let (status, body) = raw_request(app.port, &reset_naming(&format!("{host}:{}", app.port))).await;
        assert_eq!((status, body["stock"].as_i64()), (200, Some(5)), "{host}: {body}");
    }
    // Buying is open to any host, as it is to any page (see docs/reference/endpoints.md).
    let (status, bought) = raw_request(
        app.port,
        &format!(
            "GET /stock/reduce HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n",
            app.port
        ),
    )
    .await;
    assert_eq!((status, bought["sold"].as_bool()), (200, Some(true)), "{bought}");
    app.stop().await.unwrap();

    // A name of one's own, given by --allowed-host, is let in; other names still are not.
    let named = testkit::instance_with(Strategy::Redis, &testkit::TestSale::new(), |config| {
        config.allowed_hosts = vec!["seckill.lan".to_owned()];
    })
    .await;
    let (status, body) = raw_request(named.port, &reset_naming(&format!("seckill.lan:{}", named.port))).await;
    assert_eq!((status, body["stock"].as_i64()), (200, Some(5)), "{body}");
    let (status, body) = raw_request(named.port, &reset_naming("evil.example")).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "{body}");
    named.stop().await.unwrap();
}
