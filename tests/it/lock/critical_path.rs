//! When a queue lock's waiter learns of a release: the premise of the etcd and ZooKeeper
//! paths in `src/lock/critical_path.rs`. Both servers send a watch event only once the
//! delete is committed (written to their log and fsynced), as they send its answer. So the
//! event reaches the waiter about a whole write round trip after the delete was sent,
//! not half of one: the request's way and the commit, then the event's way, as long as
//! the answer's. Needs `make services`.

use std::time::{Duration, Instant};

use testkit::backends::{etcd_endpoints, zookeeper_connect};

/// Deletes timed per server; the medians are compared. Enough that a few deletes slowed
/// by the other core do not move a median of sub-millisecond times.
const DELETES: usize = 200;
/// The event's median against the answer's: about 1 when the event leaves with the
/// answer, after the commit; about 0.5 or less if it left before the commit, and well
/// over 1 if it waited for more than the commit.
const WITH_THE_ANSWER: std::ops::Range<f64> = 0.75..1.5;

/// When the delete's answer and the watcher's event arrived, since the delete was sent.
struct Timing {
    answer: Duration,
    event: Duration,
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median event against the median answer, printed for the note beside the paths,
/// must say the event came with the answer.
fn assert_the_event_came_with_the_answer(server: &str, timings: Vec<Timing>) {
    let answer = median(timings.iter().map(|timing| timing.answer).collect());
    let event = median(timings.iter().map(|timing| timing.event).collect());
    let ratio = event.as_secs_f64() / answer.as_secs_f64();
    println!("{server}: the delete answered in {answer:?}, the event arrived after {event:?} ({ratio:.2})");
    assert!(
        WITH_THE_ANSWER.contains(&ratio),
        "{server}'s event did not arrive with the delete's answer: {ratio:.2} of its time"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_watch_event_arrives_a_whole_write_round_trip_after_the_delete_is_sent() {
    let _turn = testkit::take_turn().await; // a ratio of sub-millisecond medians: measured alone
    let connect = || async {
        etcd_client::Client::connect(etcd_endpoints(), None)
            .await
            .expect("etcd runs (`make services`)")
    };
    let (mut holder, mut waiter) = (connect().await, connect().await);
    let key = testkit::unique_key("seckill/tests/watch-events");
    let mut timings = Vec::new();
    for _ in 0..DELETES {
        holder.put(key.as_str(), "held", None).await.unwrap();
        let mut stream = waiter.watch(key.as_str(), None).await.unwrap();
        let created = stream.message().await.unwrap().expect("the watch starts");
        assert!(created.created(), "the first message says the watch exists");
        let sent = Instant::now();
        let answered = async {
            holder.delete(key.as_str(), None).await.unwrap();
            sent.elapsed()
        };
        let evented = async {
            loop {
                let message = stream.message().await.unwrap().expect("the watch goes on");
                if message
                    .events()
                    .iter()
                    .any(|event| event.event_type() == etcd_client::EventType::Delete)
                {
                    return sent.elapsed();
                }
            }
        };
        let (answer, event) = tokio::join!(answered, evented);
        timings.push(Timing { answer, event });
    }
    assert_the_event_came_with_the_answer("etcd", timings);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zookeeper_watch_event_arrives_a_whole_write_round_trip_after_the_delete_is_sent() {
    let _turn = testkit::take_turn().await; // a ratio of sub-millisecond medians: measured alone
    use zookeeper_client::{Acls, CreateMode};
    let connect = || async {
        zookeeper_client::Client::connect(&zookeeper_connect())
            .await
            .expect("ZooKeeper runs (`make services`)")
    };
    let (holder, waiter) = (connect().await, connect().await);
    let node = format!("/{}", testkit::unique_key("seckill-tests-watch-events"));
    let mut timings = Vec::new();
    for _ in 0..DELETES {
        holder
            .create(&node, b"held", &CreateMode::Ephemeral.with_acls(Acls::anyone_all()))
            .await
            .unwrap();
        let (stat, watcher) = waiter.check_and_watch_stat(&node).await.unwrap();
        assert!(stat.is_some(), "the node exists while it is watched");
        let sent = Instant::now();
        let answered = async {
            holder.delete(&node, None).await.unwrap();
            sent.elapsed()
        };
        let evented = async {
            watcher.changed().await;
            sent.elapsed()
        };
        let (answer, event) = tokio::join!(answered, evented);
        timings.push(Timing { answer, event });
    }
    assert_the_event_came_with_the_answer("ZooKeeper", timings);
}
