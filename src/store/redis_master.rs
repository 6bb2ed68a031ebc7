//! A connection to the Redis master, wherever it is now: one fixed server, or the
//! server that the Sentinels name master.
//!
//! With Sentinel, the master moves under a running lock. When the master stops
//! answering, the Sentinels promote its replica; when the old master comes back, they
//! make it a replica, which refuses every write (`READONLY`). A connection that kept
//! its first address would talk to a dead server, then to a read-only one.
//!
//! ## How it works
//! 1. **The address.** `redis://host:port/db` names one server, as everywhere in
//!    seckill. `redis-sentinel://host:port,host:port/db#name` (the form Lettuce and
//!    Spring Boot read) names the Sentinels and the master's name: the connection asks
//!    them where master `name` is, and checks that the server it finds says it is one.
//! 2. **Following.** A command that fails because the server is gone, does not answer,
//!    or is read-only (an error *reply*, `-READONLY`, which the connection hands over as a
//!    value: it is looked at here too) may mean the master moved. The connection then asks the
//!    Sentinels again (one caller at a time, at most every [`LOOKUP_PAUSE`]); when
//!    they name another server, it connects there, and every clone follows.
//! 3. **The failed command still fails.** Whether it ran before the server went away
//!    is unknown, so only its caller can decide what to do: the lock sends its
//!    owner-checked clean-up, then tries again; a sale settles its write, or tells its
//!    buyer the outcome is unknown.
//! 4. **A cluster.** `redis-cluster://host:port,...` names nodes of a Redis Cluster
//!    ([`super::redis_cluster`]): the cluster's own client sends each command to the
//!    master of its key's slot, and follows the cluster when it promotes a replica or
//!    moves a slot, so no Sentinel is asked.
//! 5. **Waiting for replicas.** [`ReplicaWait`] sends `WAIT` after a write, on the
//!    connection that wrote it: the lock after a grant (`--lock-redis-wait-replicas`),
//!    which counts none if the connection moved in between
//!    ([`ReplicaWait::acknowledged_since`]); the sale after a sale
//!    (`--stock-wait-replicas`), in one pipeline with it.
//!
//! ## Limitations
//! - While the Sentinels have not yet promoted anyone (about a second after the
//!   master's death, with `down-after-milliseconds 1000`), they still name the dead
//!   master, and every command fails.
//! - What the old master acknowledged but had not yet sent to its replica is gone:
//!   replication is asynchronous. That is the lesson of `make chaos`'s failover row,
//!   and `WAIT` (step 5) is the answer to it, for the lock and for the stock.
//!
//! ## References
//! - Redis docs, "Sentinel client spec":
//!   <https://redis.io/docs/latest/develop/reference/sentinel-clients/>
//! - Lettuce's URI form, `redis-sentinel://`:
//!   <https://github.com/redis/lettuce/wiki/Redis-URI-and-connection-details>

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::redis_cluster::{is_host_and_port, ClusterAddress};

/// The URL scheme that names Sentinels instead of a server.
pub const SENTINEL_SCHEME: &str = "redis-sentinel://";
/// Between two questions to the Sentinels: a burst of failed commands asks once.
pub const LOOKUP_PAUSE: Duration = Duration::from_millis(100);
/// How long asking the Sentinels, and connecting to the master they name, may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the master is: a server, what the Sentinels say, or, for a cluster, the master
/// of each key's slot.
#[derive(Clone, Debug)]
pub enum MasterAddress {
    Server(redis::Client),
    Sentinels(SentinelAddress),
    Cluster(ClusterAddress),
}

/// The Sentinels of a master, and its name: `redis-sentinel://host:port,...[/db]#name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelAddress {
    pub sentinels: Vec<String>,
    pub master_name: String,
    pub db: i64,
}

impl MasterAddress {
    /// Reads `redis://...`, `redis-sentinel://...` or `redis-cluster://...`, naming what is
    /// wrong with a bad one.
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(cluster) = ClusterAddress::parse(url) {
            return cluster.map(MasterAddress::Cluster);
        }
        let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) else {
            return redis::Client::open(url)
                .map(MasterAddress::Server)
                .map_err(|error| format!("`{url}` is not a Redis URL ({error})"));
        };
        let example = "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380#mymaster";
        let (hosts_and_db, master_name) =
            rest.split_once('#')
                .filter(|(_, name)| !name.is_empty())
                .ok_or_else(|| {
                    format!("`{url}` names no master: end it with `#` and the master's name, as in {example}")
                })?;
        let (hosts, db) = match hosts_and_db.split_once('/') {
            None | Some((_, "")) => (hosts_and_db.trim_end_matches('/'), 0),
            Some((hosts, db)) => (
                hosts,
                db.parse()
                    .map_err(|_| format!("`{db}` in `{url}` is not a database number"))?,
            ),
        };
        let sentinels: Vec<String> = hosts.split(',').map(str::trim).map(str::to_owned).collect();
        if let Some(bad) = sentinels.iter().find(|host| !is_host_and_port(host)) {
            return Err(format!(
                "`{bad}` in `{url}` is not a Sentinel's host:port, as in {example}"
            ));
        }
        Ok(MasterAddress::Sentinels(SentinelAddress {
            sentinels,
            master_name: master_name.to_owned(),
            db,
        }))
    }

    /// Whether the master may move under us (it is found through Sentinels).
    pub fn moves(&self) -> bool {
        matches!(self, MasterAddress::Sentinels(_))
    }

    /// Whether the keys spread over the masters of a cluster, by hash slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self, MasterAddress::Cluster(_))
    }
}

/// `WAIT replicas timeout` after a write, before it counts: asynchronous replication
/// loses what the master acknowledged and no replica had when the Sentinels promote one.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaWait {
    pub replicas: u32,
    pub timeout: Duration,
}

impl ReplicaWait {
    /// Sends `WAIT` on `connection`, after the write it follows there: blocks until
    /// `replicas` replicas have every write this connection sent, or the timeout passes.
    /// Answers how many did. The write must go on the same connection: `WAIT` counts the
    /// writes of the client it is sent by.
    pub async fn acknowledged(&self, connection: &mut MasterConnection) -> RedisResult<u32> {
        redis::cmd("WAIT")
            .arg(self.replicas)
            .arg(self.timeout.as_millis() as u64)
            .query_async(connection)
            .await
    }

    /// [`ReplicaWait::acknowledged`] for a write sent when the connection had made
    /// `moves_before` moves ([`MasterConnection::moves`]). If it followed the Sentinels to
    /// another master since, the `WAIT` went to a server where it wrote nothing, which
    /// counts its replicas at once: the write is then acknowledged by none. (The stock's
    /// sales avoid the question by sending their `WAIT` in one pipeline with the write.)
    pub async fn acknowledged_since(&self, connection: &mut MasterConnection, moves_before: u64) -> RedisResult<u32> {
        let acknowledged = self.acknowledged(connection).await?;
        if connection.moves() != moves_before {
            tracing::warn!(
                acknowledged,
                "the master moved between a write and its WAIT; the write counts as acknowledged by none"
            );
            return Ok(0);
        }
        Ok(acknowledged)
    }
}

/// Connects to the master `url` names (`redis://` or `redis-sentinel://`) and pings it,
/// or explains how to get one running. `role` says what the Redis is for, and `flag`
/// which option sets it, as the errors name them.
pub async fn connect_checked(url: &str, role: &str, flag: &str) -> anyhow::Result<(MasterAddress, MasterConnection)> {
    let address = MasterAddress::parse(url).map_err(|problem| {
        anyhow::anyhow!(
            "{problem}; set {flag} to a server, as in redis://127.0.0.1:6379, or to Sentinels and a master name, \
             as in redis-sentinel://127.0.0.1:26379,127.0.0.1:26380#mymaster"
        )
    })?;
    let unreachable = |error: redis::RedisError| {
        let start = match &address {
            MasterAddress::Sentinels(_) => "Start the Sentinels and their master with `make cluster`",
            MasterAddress::Cluster(_) => "Start the Redis Cluster with `make cluster`",
            MasterAddress::Server(_) => "Start one with `make services` (or `redis-server --port 6379`)",
        };
        anyhow::anyhow!("cannot reach the {role} at {url}: {error}.\n  {start}, or point {flag} at a running server.")
    };
    let mut connection = MasterConnection::connect(&address).await.map_err(unreachable)?;
    let _: String = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .map_err(unreachable)?;
    Ok((address, connection))
}

impl From<&redis::Client> for MasterAddress {
    fn from(client: &redis::Client) -> Self {
        MasterAddress::Server(client.clone())
    }
}

/// The server we talk to now. `generation` counts the moves, so that a caller whose
/// command failed on an older server does not move us again.
struct Current {
    client: redis::Client,
    connection: Link,
    generation: u64,
}

/// One server's connection, or a cluster's, which holds one per master and routes.
#[derive(Clone)]
enum Link {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How the connection finds the master again: the Sentinels, and when it last asked.
struct Follower {
    sentinels: SentinelClient,
    last_lookup: Instant,
}

/// A connection to the master that follows it when the Sentinels move it. Clones
/// share the connection, and all follow together.
#[derive(Clone)]
pub struct MasterConnection {
    current: Arc<StdMutex<Current>>,
    follower: Option<Arc<tokio::sync::Mutex<Follower>>>,
}

impl MasterConnection {
    /// Connects to the server, or to the master the Sentinels name now.
    pub async fn connect(address: &MasterAddress) -> RedisResult<Self> {
        match address {
            MasterAddress::Server(client) => Ok(MasterConnection {
                current: Arc::new(StdMutex::new(Current::open(client.clone()).await?)),
                follower: None,
            }),
            MasterAddress::Cluster(address) => Ok(MasterConnection {
                current: Arc::new(StdMutex::new(Current {
                    client: address.first_node()?,
                    connection: Link::Cluster(address.connect().await?),
                    generation: 0,
                })),
                follower: None,
            }),
            MasterAddress::Sentinels(address) => {
                let node = SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(redis::RedisConnectionInfo::default().set_db(address.db));
                let urls: Vec<String> = address.sentinels.iter().map(|host| format!("redis://{host}")).collect();
                let mut sentinels = SentinelClient::build(
                    urls,
                    address.master_name.clone(),
                    Some(node),
                    SentinelServerType::Master,
                )?;
                let client = ask(&mut sentinels).await?;
                Ok(MasterConnection {
                    current: Arc::new(StdMutex::new(Current::open(client).await?)),
                    follower: Some(Arc::new(tokio::sync::Mutex::new(Follower {
                        sentinels,
                        last_lookup: Instant::now(),
                    }))),
                })
            }
        }
    }

    /// The client of the server we talk to now (for a subscription of its own); for a
    /// cluster, of its first node.
    pub fn client(&self) -> redis::Client {
        self.current().client.clone()
    }

    /// Whether the master may move under us (it is found through Sentinels).
    pub fn follows_sentinels(&self) -> bool {
        self.follower.is_some()
    }

    /// How many times the connection moved to another master: 0 on the first one.
    pub fn moves(&self) -> u64 {
        self.current().generation
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> (Link, u64) {
        let current = self.current();
        (current.connection.clone(), current.generation)
    }

    /// Step 2: after `error` on the server of `generation`, ask the Sentinels where the
    /// master is, and move there if it is elsewhere.
    async fn follow_after(&self, error: &redis::RedisError, generation: u64) {
        let Some(follower) = &self.follower else { return };
        if !may_mean_the_master_moved(error) {
            return;
        }
        // Somebody else is asking already: their answer will do for us too.
        let Ok(mut follower) = follower.try_lock() else {
            return tracing::debug!(%error, "the Sentinels are being asked already");
        };
        let asked_lately = follower.last_lookup.elapsed() < LOOKUP_PAUSE;
        if asked_lately || self.current().generation != generation {
            return;
        }
        follower.last_lookup = Instant::now();
        let was = self.current().client.get_connection_info().addr().to_string();
        let moved = async {
            let client = ask(&mut follower.sentinels).await?;
            if client.get_connection_info().addr().to_string() == was {
                return Ok(None); // not promoted yet, or the master came back
            }
            Current::open(client).await.map(Some)
        };
        match tokio::time::timeout(LOOKUP_TIMEOUT, moved).await {
            Ok(Ok(Some(mut next))) => {
                let now = next.client.get_connection_info().addr().to_string();
                let mut current = self.current();
                next.generation = current.generation + 1;
                *current = next;
                tracing::warn!(was, now, "the Sentinels name a new master; the lock follows it");
            }
            Ok(Ok(None)) => tracing::debug!(was, %error, "the Sentinels still name the same master"),
            Ok(Err(error)) => tracing::debug!(%error, "asking the Sentinels where the master is failed"),
            Err(_) => tracing::debug!(?LOOKUP_TIMEOUT, "asking the Sentinels where the master is timed out"),
        }
    }
}

impl Current {
    async fn open(client: redis::Client) -> RedisResult<Self> {
        let connection = crate::store::redis::connection_manager(&client).await?;
        Ok(Current {
            client,
            connection: Link::Server(connection),
            generation: 0,
        })
    }
}

/// The master's client, as the Sentinels name it (and it confirms).
async fn ask(sentinels: &mut SentinelClient) -> RedisResult<redis::Client> {
    match tokio::time::timeout(LOOKUP_TIMEOUT, sentinels.async_get_client()).await {
        Ok(answer) => answer,
        Err(_) => Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no Sentinel answered where the master is",
            format!("within {LOOKUP_TIMEOUT:?}"),
        ))),
    }
}

/// The errors after which the master may be elsewhere: the server is gone or silent,
/// or it is a replica now and refuses writes.
pub fn may_mean_the_master_moved(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// The error in an answer: a failed exchange, or an error reply (`-READONLY ...`), which
/// reaches the caller as a value and becomes an error only when it is read.
fn error_in(answer: &RedisResult<Value>) -> Option<redis::RedisError> {
    match answer {
        Err(error) => Some(error.clone()),
        Ok(value) => error_reply(value),
    }
}

fn error_reply(value: &Value) -> Option<redis::RedisError> {
    match value {
        Value::ServerError(reply) => Some(reply.clone().into()),
        _ => None,
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Server(connection) => connection.req_packed_command(cmd),
            Link::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Server(connection) => connection.req_packed_commands(pipeline, offset, count),
            Link::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Server(connection) => connection.get_db(),
            Link::Cluster(connection) => connection.get_db(),
        }
    }
}

impl ConnectionLike for MasterConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (mut connection, generation) = self.now();
            let answer = connection.req_packed_command(cmd).await;
            if let Some(error) = error_in(&answer) {
                self.follow_after(&error, generation).await;
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (mut connection, generation) = self.now();
            let answer = connection.req_packed_commands(pipeline, offset, count).await;
            let first_error = match &answer {
                Err(error) => Some(error.clone()),
                Ok(values) => values.iter().find_map(error_reply),
            };
            if let Some(error) = first_error {
                self.follow_after(&error, generation).await;
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.current().connection.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinels(url: &str) -> SentinelAddress {
        match MasterAddress::parse(url) {
            Ok(MasterAddress::Sentinels(address)) => address,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_database_and_the_master() {
        assert_eq!(
            sentinels("redis-sentinel://127.0.0.1:26486,localhost:26487/3#seckill-lock"),
            SentinelAddress {
                sentinels: vec!["127.0.0.1:26486".into(), "localhost:26487".into()],
                master_name: "seckill-lock".into(),
                db: 3,
            }
        );
        assert_eq!(sentinels("redis-sentinel://h:1#m").db, 0);
    }

    #[test]
    fn a_bad_sentinel_url_says_what_is_missing() {
        let error = |url| MasterAddress::parse(url).unwrap_err();
        assert!(error("redis-sentinel://127.0.0.1:26486").contains("names no master"));
        assert!(error("redis-sentinel://127.0.0.1#m").contains("not a Sentinel's host:port"));
        assert!(error("redis-sentinel://127.0.0.1:1/x#m").contains("not a database number"));
        assert!(error("http://127.0.0.1:6379").contains("not a Redis URL"));
    }

    #[test]
    fn a_cluster_url_names_a_cluster() {
        let address = MasterAddress::parse("redis-cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap();
        assert!(address.is_cluster() && !address.moves());
        assert!(MasterAddress::parse("redis-cluster://127.0.0.1")
            .unwrap_err()
            .contains("host:port"));
    }

    #[test]
    fn a_redis_url_names_one_server_that_does_not_move() {
        let address = MasterAddress::parse("redis://127.0.0.1:6379/2").unwrap();
        assert!(matches!(address, MasterAddress::Server(_)) && !address.moves());
    }
}
