//! The round-trip probes of `bench` (`loadtest/src/bench/bound.rs`) against a Redis of the
//! test's own: with `--stock-wait-replicas`, the stock's write is timed with the `WAIT` the
//! sale sends beside it, so that the bounds of a run that waits include that wait.

use loadtest::bench::bound::{measure_round_trips, Access, Backend, RoundTrip};
use seckill::config::Config;
use seckill::strategy::Strategy;

fn stock_write_us(round_trips: &[RoundTrip]) -> f64 {
    round_trips
        .iter()
        .find(|rtt| rtt.backend == Backend::StockRedis && rtt.access == Access::Write)
        .expect("the stock's write is timed")
        .median_us
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stock_that_waits_for_a_replica_has_its_write_timed_with_the_wait() {
    // No replica: every WAIT runs to its timeout, so a write timed with it takes that long.
    let redis = testkit::PrivateRedis::start();
    // A blocked client's timeout is checked when the server wakes, 10 times a second by
    // default: at 500 a second, 550 waits of 5 ms take about 3 s, not 55.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hz")
        .arg(500)
        .query(&mut redis.client().get_connection().unwrap())
        .unwrap();
    let config = Config {
        redis_url: redis.url(),
        stock_wait_timeout_ms: 5,
        ..Config::defaults()
    };
    let plain = measure_round_trips(Strategy::Atomic, &config).await.unwrap();
    let waited = Config {
        stock_wait_replicas: 1,
        ..config
    };
    let waited = measure_round_trips(Strategy::Atomic, &waited).await.unwrap();
    assert!(
        stock_write_us(&waited) >= 5_000.0,
        "the write is timed with its WAIT 1 5: {waited:?}"
    );
    assert!(
        stock_write_us(&plain) < 5_000.0,
        "without the wait, a write on loopback: {plain:?}"
    );
}
