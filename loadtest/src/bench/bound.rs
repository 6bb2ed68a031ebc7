//! The bound each lock is judged against: how fast could it possibly sell, given the
//! round trips that cannot overlap?
//!
//! Under contention a lock serializes the sales, and one sale's steps run one after
//! another: the holder reads and writes the stock, releases, the next waiter learns of
//! it and takes the lock. That chain, from one grant to the next, is the lock's
//! **critical path**. Everything else (HTTP, parsing, the buyers still waiting) can
//! overlap with it. So the fastest a lock can sell is one sale per critical path:
//!
//! ```text
//! bound (sales/s) = 1 / sum over the steps of (round trips x that backend's round-trip time)
//! ```
//!
//! Each lock declares its path beside its code (`seckill::lock::critical_path` says how
//! a step is counted). The round-trip times are measured in the same run ([`measure_round_trips`]),
//! on a quiet machine, one request at a time, and for the kind of request the step is:
//! a write that a server must make durable first (etcd's and ZooKeeper's logs, MySQL's
//! commit, a Redlock master's append-only file) costs far more than a read, so each
//! backend is timed twice, reading and writing, and each step uses its own kind.
//!
//! That is the **protocol bound**: it judges a lock against its own design, so a lock that
//! adds a round trip lowers its own bound too. The **backend bound** judges the design:
//! the same sum over the fewest round trips *any* correct lock on that backend needs
//! ([`seckill::lock::critical_path::Backend::minimal_path`]), and the **serial bound** is
//! that for one client alone (acquire, the sale, release, each answered).
//!
//! The baselines have no such path: `none` and `local` do not serialize two instances,
//! and `atomic` runs the whole sale in one script, so Redis's own speed bounds it.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use seckill::config::Config;
pub use seckill::lock::critical_path::{Access, Backend, Step};
use seckill::store::redis_master::{MasterAddress, MasterConnection, ReplicaWait};
use seckill::strategy::Strategy;

use crate::latency::Latencies;

/// Round trips timed per backend (after a few to warm the connection up).
const PROBES: usize = 500;
const WARM_UP_PROBES: usize = 50;

/// The chain from one grant to the next: the sale's own steps (`seckill::sale`), then
/// the lock's, as its file in `src/lock/` declares them. `None` for the baselines,
/// which serialize nothing across instances.
pub fn critical_path(strategy: Strategy) -> Option<Vec<Step>> {
    let lock_steps = strategy.critical_path()?;
    Some(seckill::sale::CRITICAL_PATH.iter().chain(lock_steps).cloned().collect())
}

/// The fewest round trips from one grant to the next that any correct lock on the
/// strategy's backend needs: the sale's steps, then the backend's minimal hand-over.
pub fn backend_path(strategy: Strategy) -> Option<Vec<Step>> {
    let minimal = strategy.lock_backend()?.minimal_path()?;
    Some(
        seckill::sale::CRITICAL_PATH
            .iter()
            .chain(minimal.contended)
            .cloned()
            .collect(),
    )
}

/// The fewest round trips of one sale with nobody else buying: acquire, the sale's
/// steps, release, each answered.
pub fn serial_path(strategy: Strategy) -> Option<Vec<Step>> {
    let minimal = strategy.lock_backend()?.minimal_path()?;
    let (acquire, release) = minimal.alone.split_at(minimal.alone.len() - 1);
    Some(
        acquire
            .iter()
            .chain(seckill::sale::CRITICAL_PATH)
            .chain(release)
            .cloned()
            .collect(),
    )
}

/// One backend's measured round-trip time, for one kind of request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundTrip {
    pub backend: Backend,
    pub access: Access,
    pub median_us: f64,
    pub p99_us: f64,
}

/// The bound in sales per second, from the path and the measured round trips.
pub fn bound_sales_per_second(path: &[Step], round_trips: &[RoundTrip]) -> Option<f64> {
    let mut seconds = 0.0;
    for step in path {
        let rtt = round_trips
            .iter()
            .find(|rtt| rtt.backend == step.backend && rtt.access == step.access)?;
        seconds += step.round_trips * rtt.median_us / 1e6;
    }
    (seconds > 0.0).then(|| 1.0 / seconds)
}

/// Times the round trips to every backend on the strategy's path (and the stock Redis),
/// reading and writing, as the service is configured (`SECKILL_*` settings or their
/// defaults), one request at a time on a quiet machine.
pub async fn measure_round_trips(strategy: Strategy, config: &Config) -> anyhow::Result<Vec<RoundTrip>> {
    let mut measured = Vec::new();
    for backend in backends_of(strategy) {
        let mut probe = Probe::connect(backend, config).await?;
        for access in [Access::Read, Access::Write] {
            let mut samples = Vec::with_capacity(PROBES);
            for sent in 0..WARM_UP_PROBES + PROBES {
                let took = probe.once(access).await?;
                if sent >= WARM_UP_PROBES {
                    samples.push(took);
                }
            }
            measured.push(summarize(backend, access, samples));
        }
    }
    Ok(measured)
}

/// The pause after each round of probes under load (one request of each kind to each
/// backend): a few hundred requests a second in all, beside the load's thousands.
pub const PAUSE_UNDER_LOAD: Duration = Duration::from_millis(10);

/// One probe's round trip, and when it was sent.
pub struct ProbeSample {
    backend: Backend,
    access: Access,
    sent: Instant,
    took: Duration,
}

/// The same round trips as [`measure_round_trips`], timed while a sustained window
/// runs, until `stop` is sent (or dropped): a round of one request of each kind to each
/// backend, then [`PAUSE_UNDER_LOAD`]. A write waits behind the lock's own writes (one
/// log, one fsync at a time) and every process shares the machine's cores, so a server
/// under load answers slower than the quiet probe says. Run it on a thread of its own
/// (see `bench::probed_window`), so that its figures hold no wait for the load
/// generator's own tasks, and keep the samples sent while the window counted
/// ([`summarize_between`]).
pub async fn probe_under_load(
    strategy: Strategy,
    config: Config,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<Vec<ProbeSample>> {
    let mut probes = Vec::new();
    for backend in backends_of(strategy) {
        let mut probe = Probe::connect(backend, &config).await?;
        for access in [Access::Read, Access::Write] {
            probe.once(access).await?; // the connection is warm before the load starts
        }
        probes.push(probe);
    }
    let mut samples = Vec::new();
    loop {
        let round = async {
            for probe in &mut probes {
                for access in [Access::Read, Access::Write] {
                    let sent = Instant::now();
                    let took = probe.once(access).await?;
                    samples.push(ProbeSample {
                        backend: probe.backend,
                        access,
                        sent,
                        took,
                    });
                }
            }
            tokio::time::sleep(PAUSE_UNDER_LOAD).await;
            anyhow::Ok(())
        };
        tokio::select! {
            _ = &mut stop => break,
            round = round => round?,
        }
    }
    Ok(samples)
}

/// The median and p99 of each backend and kind, over the samples sent within `counted`
/// (a window's timed part: not while the sale was reset before it or judged after it).
pub fn summarize_between(samples: &[ProbeSample], counted: std::ops::Range<Instant>) -> Vec<RoundTrip> {
    let mut kinds: Vec<((Backend, Access), Vec<Duration>)> = Vec::new();
    for sample in samples.iter().filter(|sample| counted.contains(&sample.sent)) {
        let kind = (sample.backend, sample.access);
        match kinds.iter_mut().find(|(seen, _)| *seen == kind) {
            Some((_, took)) => took.push(sample.took),
            None => kinds.push((kind, vec![sample.took])),
        }
    }
    kinds
        .into_iter()
        .map(|((backend, access), took)| summarize(backend, access, took))
        .collect()
}

/// The stock Redis, then every other backend on the strategy's path.
fn backends_of(strategy: Strategy) -> Vec<Backend> {
    let mut backends = vec![Backend::StockRedis];
    for step in critical_path(strategy).unwrap_or_default() {
        if !backends.contains(&step.backend) {
            backends.push(step.backend);
        }
    }
    backends
}

/// Keeps, for each backend and kind of request, the quicker median of `earlier` and `later`.
pub fn keep_quickest(earlier: &mut [RoundTrip], later: Vec<RoundTrip>) {
    for measured in earlier.iter_mut() {
        let again = later
            .iter()
            .find(|rtt| rtt.backend == measured.backend && rtt.access == measured.access);
        if let Some(again) = again.filter(|again| again.median_us < measured.median_us) {
            *measured = again.clone();
        }
    }
}

fn summarize(backend: Backend, access: Access, samples: Vec<Duration>) -> RoundTrip {
    let samples = Latencies::of(samples);
    RoundTrip {
        backend,
        access,
        median_us: samples.percentile_us(0.5),
        p99_us: samples.percentile_us(0.99),
    }
}

/// A probe that waits longer than this stops the benchmark with an error instead of hanging.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the write probes write: keys and rows of their own, never the sale's or a lock's.
const PROBE_KEY: &str = "seckill:bench:round-trip";
/// The ZooKeeper node the write probe sets.
const PROBE_NODE: &str = "/seckill-bench-round-trip";

/// A connection to one backend that times its cheapest request of each kind.
struct Probe {
    backend: Backend,
    server: ProbedServer,
    /// The `WAIT` the sale sends with each write of the stock (`--stock-wait-replicas`):
    /// the stock's write probe sends it too, in one pipeline, as the sale does.
    replica_wait: Option<ReplicaWait>,
}

enum ProbedServer {
    /// One Redis (a server, the master the Sentinels name, or a cluster, which sends the
    /// probe's key to its slot's master), or every Redlock master at once.
    Redis(Vec<MasterConnection>),
    Etcd(Box<etcd_client::Client>),
    Zookeeper(zookeeper_client::Client),
    Mysql(sqlx::MySqlConnection),
}

impl Probe {
    async fn connect(backend: Backend, config: &Config) -> anyhow::Result<Probe> {
        Self::open(backend, config)
            .await
            .with_context(|| format!("connecting to the {} to time its round trips", backend.name()))
    }

    async fn open(backend: Backend, config: &Config) -> anyhow::Result<Probe> {
        let redis = |urls: Vec<String>| async move {
            let mut connections = Vec::new();
            for url in urls {
                let address = MasterAddress::parse(&url).map_err(anyhow::Error::msg)?;
                connections.push(MasterConnection::connect(&address).await?);
            }
            anyhow::Ok(ProbedServer::Redis(connections))
        };
        let server = match backend {
            Backend::StockRedis => redis(vec![config.redis_url.clone()]).await?,
            Backend::LockRedis => redis(vec![config.lock_redis_url().to_owned()]).await?,
            Backend::RedlockMasters => redis(config.redlock.redlock_urls.clone()).await?,
            Backend::Etcd => ProbedServer::Etcd(Box::new(
                etcd_client::Client::connect(&config.etcd.etcd_endpoints, None).await?,
            )),
            Backend::Zookeeper => {
                use zookeeper_client::{Acls, CreateMode, Error};
                let client = zookeeper_client::Client::connect(&config.zookeeper.zk_connect).await?;
                match client
                    .create(PROBE_NODE, b"1", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
                    .await
                {
                    Ok(_) | Err(Error::NodeExists) => {}
                    Err(error) => return Err(error.into()),
                }
                ProbedServer::Zookeeper(client)
            }
            Backend::Mysql => {
                use sqlx::Connection;
                ProbedServer::Mysql(sqlx::MySqlConnection::connect(&config.mysql_url).await?)
            }
        };
        let replica_wait = match backend {
            Backend::StockRedis => seckill::wiring::stock_replica_wait(config),
            _ => None,
        };
        Ok(Probe {
            backend,
            server,
            replica_wait,
        })
    }

    /// One request of the kind, answered: how long it took.
    async fn once(&mut self, access: Access) -> anyhow::Result<Duration> {
        let backend = self.backend;
        let context = || format!("timing {} round trips to the {}", access.name(), backend.name());
        tokio::time::timeout(PROBE_TIMEOUT, self.ask(access))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {PROBE_TIMEOUT:?}: is the server running?"))
            .with_context(context)?
            .with_context(context)
    }

    async fn ask(&mut self, access: Access) -> anyhow::Result<Duration> {
        let sent = Instant::now();
        match &mut self.server {
            ProbedServer::Redis(connections) if access == Access::Write && self.replica_wait.is_some() => {
                let wait = self.replica_wait.expect("matched above");
                redis::pipe()
                    .cmd("SET")
                    .arg(PROBE_KEY)
                    .arg("1")
                    .arg("PX")
                    .arg(60_000)
                    .ignore()
                    .cmd("WAIT")
                    .arg(wait.replicas)
                    .arg(wait.timeout.as_millis() as u64)
                    .query_async::<Vec<redis::Value>>(&mut connections[0].clone())
                    .await?;
            }
            ProbedServer::Redis(connections) => {
                let command = match access {
                    // A read of one key, not a PING: a cluster sends a PING to every node.
                    Access::Read => redis::cmd("EXISTS").arg(PROBE_KEY).to_owned(),
                    Access::Write => redis::cmd("SET")
                        .arg(PROBE_KEY)
                        .arg("1")
                        .arg("PX")
                        .arg(60_000)
                        .to_owned(),
                };
                until_a_majority_answered(connections, command).await?;
            }
            ProbedServer::Etcd(client) => match access {
                Access::Read => client.get(PROBE_KEY, None).await.map(drop)?,
                Access::Write => client.put(PROBE_KEY, "1", None).await.map(drop)?,
            },
            ProbedServer::Zookeeper(client) => match access {
                Access::Read => client.check_stat(PROBE_NODE).await.map(drop)?,
                Access::Write => client.set_data(PROBE_NODE, b"1", None).await.map(drop)?,
            },
            ProbedServer::Mysql(connection) => match access {
                Access::Read => sqlx::query("SELECT 1").execute(&mut *connection).await.map(drop)?,
                // One autocommitted write on a row of its own, as each lock statement is.
                Access::Write => sqlx::query(
                    "INSERT INTO seckill_lock_fences (name, counter) VALUES (?, 1) \
                     ON DUPLICATE KEY UPDATE counter = counter + 1",
                )
                .bind(PROBE_KEY)
                .execute(&mut *connection)
                .await
                .map(drop)?,
            },
        }
        Ok(sent.elapsed())
    }
}

/// `command` on every connection at once, until a majority has answered, as a Redlock
/// grant and release wait for no more (the others' answers are left to come). One
/// connection is asked directly, without a task per request to skew the figure.
async fn until_a_majority_answered(connections: &[MasterConnection], command: redis::Cmd) -> redis::RedisResult<()> {
    if let [connection] = connections {
        return command
            .query_async::<redis::Value>(&mut connection.clone())
            .await
            .map(drop);
    }
    let mut asks = tokio::task::JoinSet::new();
    for connection in connections {
        let (mut connection, command) = (connection.clone(), command.clone());
        asks.spawn(async move { command.query_async::<redis::Value>(&mut connection).await });
    }
    let (mut answered, majority) = (0, asks.len() / 2 + 1);
    while let Some(answer) = asks.join_next().await {
        answer.expect("a probe task does not panic")?;
        answered += 1;
        if answered == majority {
            asks.detach_all();
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measured round trip of `median_us`.
    fn rtt(backend: Backend, access: Access, median_us: f64) -> RoundTrip {
        RoundTrip {
            backend,
            access,
            median_us,
            p99_us: 0.0,
        }
    }

    /// Every strategy that takes a lock: all but the baselines.
    fn locks() -> impl Iterator<Item = Strategy> {
        <Strategy as clap::ValueEnum>::value_variants()
            .iter()
            .copied()
            .filter(|strategy| strategy.lock_backend().is_some())
    }

    #[test]
    fn the_bound_is_one_sale_per_critical_path() {
        let path = critical_path(Strategy::Redis).unwrap();
        let trips: f64 = path.iter().map(|step| step.round_trips).sum();
        assert_eq!(trips, 4.0, "read, write, half a release, half a wake-up, an acquire");
        let rtts = [
            rtt(Backend::StockRedis, Access::Write, 50.0),
            rtt(Backend::LockRedis, Access::Read, 50.0),
            rtt(Backend::LockRedis, Access::Write, 50.0),
        ];
        let bound = bound_sales_per_second(&path, &rtts).unwrap();
        assert!(
            (bound - 5000.0).abs() < 1e-6,
            "4 trips of 50 us: 5000 sales/s, got {bound}"
        );
    }

    #[test]
    fn the_backend_bound_never_exceeds_the_protocol_bound_by_design() {
        // No lock can beat its backend's minimum: each protocol path is at least as long.
        assert_eq!(locks().count(), 7);
        for strategy in locks() {
            let backend = strategy.lock_backend().unwrap();
            let rtts: Vec<RoundTrip> = [Backend::StockRedis, backend]
                .into_iter()
                .flat_map(|b| [rtt(b, Access::Read, 100.0), rtt(b, Access::Write, 300.0)])
                .collect();
            let protocol = bound_sales_per_second(&critical_path(strategy).unwrap(), &rtts).unwrap();
            let backend_bound = bound_sales_per_second(&backend_path(strategy).unwrap(), &rtts).unwrap();
            let serial = bound_sales_per_second(&serial_path(strategy).unwrap(), &rtts).unwrap();
            assert!(
                protocol <= backend_bound + 1e-9,
                "{strategy}: {protocol} > {backend_bound}"
            );
            assert!(
                serial <= backend_bound,
                "{strategy}: one client alone waits for every answer"
            );
        }
    }

    #[test]
    fn one_client_alone_waits_for_the_acquire_the_sale_and_the_release() {
        let names: Vec<_> = serial_path(Strategy::Mysql)
            .unwrap()
            .iter()
            .map(|step| step.name.to_string())
            .collect();
        assert!(names.first().unwrap().starts_with("acquire"), "{names:?}");
        assert!(names.last().unwrap().starts_with("release"), "{names:?}");
        assert_eq!(names.len(), 4, "{names:?}");
    }

    #[test]
    fn baselines_have_no_bound_and_every_lock_has_one() {
        for strategy in [Strategy::None, Strategy::Local, Strategy::Atomic] {
            assert!(critical_path(strategy).is_none(), "{strategy}");
            assert!(
                backend_path(strategy).is_none() && serial_path(strategy).is_none(),
                "{strategy}"
            );
        }
        assert_eq!(locks().count(), 7);
        for strategy in locks() {
            assert!(
                critical_path(strategy).is_some_and(|path| path.len() >= 4),
                "{strategy}"
            );
        }
    }

    #[test]
    fn a_write_costs_what_a_write_costs() {
        let path = backend_path(Strategy::Mysql).unwrap();
        let fast_writes = [
            rtt(Backend::StockRedis, Access::Write, 0.0),
            rtt(Backend::Mysql, Access::Read, 100.0),
            rtt(Backend::Mysql, Access::Write, 100.0),
        ];
        let slow_writes = [
            rtt(Backend::StockRedis, Access::Write, 0.0),
            rtt(Backend::Mysql, Access::Read, 100.0),
            rtt(Backend::Mysql, Access::Write, 1000.0),
        ];
        let (fast, slow) = (
            bound_sales_per_second(&path, &fast_writes).unwrap(),
            bound_sales_per_second(&path, &slow_writes).unwrap(),
        );
        // MySQL's minimal path: a half and a whole write round trip, and half a read.
        assert!((fast - 1e6 / 200.0).abs() < 1e-6, "{fast}");
        assert!((slow - 1e6 / 1550.0).abs() < 1e-6, "{slow}");
    }

    #[test]
    fn of_several_probes_the_quickest_median_is_kept() {
        let etcd_write = |median_us| rtt(Backend::Etcd, Access::Write, median_us);
        let mut kept = vec![etcd_write(900.0)];
        keep_quickest(&mut kept, vec![etcd_write(5000.0)]);
        assert_eq!(
            kept[0].median_us, 900.0,
            "a stalled probe does not replace a quicker one"
        );
        keep_quickest(&mut kept, vec![etcd_write(700.0)]);
        assert_eq!(kept[0].median_us, 700.0);
    }

    #[test]
    fn a_missing_round_trip_time_gives_no_bound() {
        let path = critical_path(Strategy::Etcd).unwrap();
        let only_redis = [rtt(Backend::StockRedis, Access::Write, 50.0)];
        assert!(bound_sales_per_second(&path, &only_redis).is_none());
    }
}
