//! The nemesis itself, in front of the project's test Redis: what a client sees under
//! each fault, spoken in raw RESP over a plain TCP stream, so that no client library's
//! timeouts or reconnections blur it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use testkit::nemesis::{AnswerTrap, Delay, Direction, Fault, LinkSpec, Nemesis};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Long enough to be sure an answer is not coming; short enough for a quick test.
const SILENCE: Duration = Duration::from_millis(600);
/// An answer that is coming arrives within this.
const PROMPTLY: Duration = Duration::from_secs(2);

/// A nemesis with one link, from a free port to the test Redis.
async fn nemesis_before_redis() -> (Nemesis, SocketAddr) {
    testkit::redis_client().await; // the project's test Redis, or a clear panic
    let url = testkit::redis_url();
    let host_port = url.trim_start_matches("redis://").split('/').next().unwrap();
    let redis = host_port.to_socket_addrs().unwrap().next().unwrap();
    let nemesis = Nemesis::new();
    let listen = nemesis
        .link(LinkSpec {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: redis,
        })
        .await
        .unwrap();
    (nemesis, listen)
}

/// `ECHO word` in RESP, and the answer Redis gives to it.
fn echo(word: &str) -> (Vec<u8>, Vec<u8>) {
    let request = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{word}\r\n", word.len());
    let answer = format!("${}\r\n{word}\r\n", word.len());
    (request.into_bytes(), answer.into_bytes())
}

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

/// Reads exactly `expected.len()` bytes and checks they are `expected`.
async fn expect_answer(stream: &mut TcpStream, expected: &[u8]) {
    let mut answer = vec![0u8; expected.len()];
    stream.read_exact(&mut answer).await.expect("an answer");
    assert_eq!(String::from_utf8_lossy(&answer), String::from_utf8_lossy(expected));
}

/// Sends PING and waits for PONG, at most `within`: the time it took, or None.
async fn ping(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let sent = Instant::now();
    stream.write_all(PING).await.ok()?;
    let mut answer = [0u8; PONG.len()];
    match tokio::time::timeout(within, stream.read_exact(&mut answer)).await {
        Ok(Ok(_)) if answer == PONG => Some(sent.elapsed()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_sent_during_a_partition_is_answered_only_after_the_heal() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut stream = TcpStream::connect(listen).await.unwrap();
    assert!(
        ping(&mut stream, PROMPTLY).await.is_some(),
        "healed, a PING is answered"
    );

    nemesis.strike(Fault::Partition);
    stream.write_all(PING).await.unwrap();
    let mut answer = [0u8; PONG.len()];
    let silent = tokio::time::timeout(SILENCE, stream.read_exact(&mut answer)).await;
    assert!(silent.is_err(), "no answer may cross a partition: {silent:?}");

    nemesis.strike(Fault::Healed);
    tokio::time::timeout(PROMPTLY, expect_answer(&mut stream, PONG))
        .await
        .expect("the PING kept by the partition is answered at the heal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_opened_during_a_partition_reaches_the_server_at_the_heal() {
    let (nemesis, listen) = nemesis_before_redis().await;
    nemesis.strike(Fault::Partition);
    let mut stream = TcpStream::connect(listen)
        .await
        .expect("a partition accepts connections");
    assert_eq!(
        ping(&mut stream, SILENCE).await,
        None,
        "nothing answers before the heal"
    );
    assert_eq!(nemesis.status().fault, Fault::Partition);

    nemesis.strike(Fault::Healed);
    // The first PING waited in the partition; its PONG comes first, then this one's.
    tokio::time::timeout(PROMPTLY, expect_answer(&mut stream, PONG))
        .await
        .expect("the kept PING is answered at the heal");
    assert!(ping(&mut stream, PROMPTLY).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_answers_come_after_the_heal_and_their_requests_ran_before_it() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut stream = TcpStream::connect(listen).await.unwrap();
    let key = format!("nemesis:held:{}", rand::random::<u64>());
    let mut redis = testkit::connection(&testkit::redis_client().await).await;

    nemesis.strike(Fault::HoldAnswers);
    let set = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$3\r\nran\r\n", key.len());
    stream.write_all(set.as_bytes()).await.unwrap();
    let mut answer = [0u8; 5];
    let silent = tokio::time::timeout(SILENCE, stream.read_exact(&mut answer)).await;
    assert!(silent.is_err(), "an answer passed while answers were held: {silent:?}");
    let value: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut redis).await.unwrap();
    assert_eq!(value.as_deref(), Some("ran"), "the request did not reach Redis");

    nemesis.strike(Fault::Healed);
    tokio::time::timeout(PROMPTLY, expect_answer(&mut stream, b"+OK\r\n"))
        .await
        .expect("the held answer arrives at the heal");
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut redis).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_loses_what_it_reads_and_closes_no_connection() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut stream = TcpStream::connect(listen).await.unwrap();
    nemesis.strike(Fault::Blackhole);
    assert_eq!(ping(&mut stream, SILENCE).await, None, "a PING crossed a blackhole");

    nemesis.strike(Fault::Healed);
    // The PING sent into the blackhole is gone: the next PONG is this PING's, and the
    // one after it never comes.
    assert!(
        ping(&mut stream, PROMPTLY).await.is_some(),
        "the connection stayed open"
    );
    let mut extra = [0u8; 1];
    let nothing_more = tokio::time::timeout(SILENCE, stream.read_exact(&mut extra)).await;
    assert!(
        nothing_more.is_err(),
        "the lost PING was answered after all: {nothing_more:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_trap_holds_the_answers_of_the_one_connection_whose_request_mentions_the_marker() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let (mut trapped, mut other) = (
        TcpStream::connect(listen).await.unwrap(),
        TcpStream::connect(listen).await.unwrap(),
    );
    let hold = Duration::from_millis(1500);
    nemesis.set_trap(AnswerTrap {
        marker: b"springs-the-trap".to_vec(),
        hold,
    });
    let (request, answer) = echo("springs-the-trap");
    let sent = Instant::now();
    trapped.write_all(&request).await.unwrap();
    assert!(
        ping(&mut other, PROMPTLY).await.is_some(),
        "another connection's answers were held too"
    );
    tokio::time::timeout(hold + PROMPTLY, expect_answer(&mut trapped, &answer))
        .await
        .expect("the held answer arrives after the hold");
    assert!(
        sent.elapsed() >= hold,
        "the answer came after {:?}, before the hold ended",
        sent.elapsed()
    );

    // The trap springs once: the next request on the same connection is answered at once.
    let (request, answer) = echo("springs-the-trap");
    trapped.write_all(&request).await.unwrap();
    tokio::time::timeout(SILENCE, expect_answer(&mut trapped, &answer))
        .await
        .expect("the trap sprang twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_of_the_answers_makes_each_at_least_that_late_and_keeps_their_order() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut stream = TcpStream::connect(listen).await.unwrap();
    let delay = Delay {
        ms: 300,
        jitter_ms: 100,
        direction: Direction::ToClient,
    };
    nemesis.strike(Fault::Delay(delay));

    let took = ping(&mut stream, PROMPTLY).await.expect("a delayed PING is answered");
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}, under the 300 ms delay"
    );
    assert!(
        took < Duration::from_millis(900),
        "answered after {took:?}, far over 300 + 100 ms"
    );

    // Twenty requests, each its own chunk with its own jitter: the answers stay in order.
    let words: Vec<String> = (0..20).map(|n| format!("word-{n}")).collect();
    for word in &words {
        stream.write_all(&echo(word).0).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for word in &words {
        tokio::time::timeout(PROMPTLY, expect_answer(&mut stream, &echo(word).1))
            .await
            .expect("every answer arrives");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_both_ways_delays_the_request_and_the_answer() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut stream = TcpStream::connect(listen).await.unwrap();
    nemesis.strike(Fault::Delay(Delay {
        ms: 200,
        jitter_ms: 0,
        direction: Direction::Both,
    }));
    let took = ping(&mut stream, PROMPTLY).await.expect("a delayed PING is answered");
    assert!(
        took >= Duration::from_millis(400),
        "a round trip of {took:?}, under 2 x 200 ms"
    );

    nemesis.strike(Fault::Healed);
    let took = ping(&mut stream, PROMPTLY).await.expect("answered once healed");
    // A delay still in force on either way would add its 200 ms: anything under that is
    // healed, however slow the loaded machine made the round trip.
    assert!(took < Duration::from_millis(200), "healed, yet {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_breaks_every_open_connection_and_refuses_new_ones_until_the_heal() {
    let (nemesis, listen) = nemesis_before_redis().await;
    let mut open = TcpStream::connect(listen).await.unwrap();
    assert!(ping(&mut open, PROMPTLY).await.is_some());

    nemesis.strike(Fault::Reset);
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(PROMPTLY, open.read(&mut buffer))
        .await
        .expect("the reset is seen at once");
    assert_eq!(
        read.map_err(|error| error.kind()),
        Err(std::io::ErrorKind::ConnectionReset),
        "an RST, not a clean end of stream"
    );

    // A new connection is reset as soon as it is accepted: the connect fails, or if it
    // completed before the RST came, the first exchange does.
    if let Ok(mut refused) = TcpStream::connect(listen).await {
        assert_eq!(ping(&mut refused, PROMPTLY).await, None, "no PING passes a reset");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(nemesis.status().open_connections, 0, "every connection was closed");

    nemesis.strike(Fault::Healed);
    let mut healed = TcpStream::connect(listen).await.unwrap();
    assert!(
        ping(&mut healed, PROMPTLY).await.is_some(),
        "healed, connections pass again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_port_strikes_the_fault_it_is_asked_for_and_reports_it() {
    let (nemesis, _) = nemesis_before_redis().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = format!("http://{}", listener.local_addr().unwrap());
    let app = testkit::nemesis::control::app(nemesis.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let post = |path: &str| http.post(format!("{control}{path}")).send();

    let status: serde_json::Value = post("/delay?ms=800&jitter_ms=200&direction=to-client")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["fault"], "delay", "{status}");
    assert_eq!(
        (status["ms"].as_u64(), status["jitter_ms"].as_u64()),
        (Some(800), Some(200))
    );
    assert_eq!(
        nemesis.status().fault,
        Fault::Delay(Delay {
            ms: 800,
            jitter_ms: 200,
            direction: Direction::ToClient
        })
    );
    for (path, fault) in [
        ("/partition", Fault::Partition),
        ("/reset", Fault::Reset),
        ("/hold-answers", Fault::HoldAnswers),
        ("/blackhole", Fault::Blackhole),
        ("/heal", Fault::Healed),
    ] {
        assert!(post(path).await.unwrap().status().is_success(), "{path}");
        assert_eq!(nemesis.status().fault, fault, "{path}");
    }
    let status: serde_json::Value = http
        .get(format!("{control}/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["fault"], "healed", "{status}");
    assert_eq!(status["links"].as_array().map(Vec::len), Some(1), "{status}");
    let refused = post("/delay?ms=soon").await.unwrap();
    assert_eq!(refused.status().as_u16(), 400, "a delay must be a number of ms");
}

#[test]
fn a_link_must_stay_on_loopback() {
    let link: LinkSpec = "16480=127.0.0.1:6480".parse().unwrap();
    assert_eq!(
        (link.listen.to_string(), link.upstream.to_string()),
        ("127.0.0.1:16480".to_owned(), "127.0.0.1:6480".to_owned())
    );
    assert!("16480=10.0.0.1:6480".parse::<LinkSpec>().is_err(), "not loopback");
    assert!("16480".parse::<LinkSpec>().is_err(), "no upstream");
    assert!("port=127.0.0.1:6480".parse::<LinkSpec>().is_err(), "no listen port");
}
