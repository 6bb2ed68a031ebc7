//! The servers of one setup, each of the lab's own on free loopback ports (started by
//! the project's launcher, `scripts/lib/exec-server.sh`, as the tests' private servers
//! are), killed when the setup ends or the lab stops. No root is needed: only the
//! server's program on the machine.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use testkit::{PrivateRedis, PrivateRedisCluster, PrivateServer, WallClock};

use crate::failover::Failover;
use crate::setup::{Needs, Setup, REDLOCK_MASTERS};

/// The stock's Redis, and the lock's servers.
pub struct Servers {
    /// The stock's Redis, unless it is `stock_failover`'s or `stock_cluster`'s.
    pub stock: Option<PrivateRedis>,
    /// The stock on a Redis Cluster, which the instances reach directly.
    pub stock_cluster: Option<PrivateRedisCluster>,
    /// The stock's Redis master with a replica and a Sentinel, which can fail over.
    pub stock_failover: Option<Failover>,
    /// The lock's Redis servers: one, or the Redlock masters.
    pub lock_redis: Vec<PrivateRedis>,
    /// The wall clock of the lock's Redis, which a fault can make jump: Redis expires a
    /// lease by it. `None` where the lock is in no one Redis of the lab's, or where no gcc
    /// compiles the preload that moves it.
    pub lock_clock: Option<WallClock>,
    /// The lock's Redis master with a replica and a Sentinel, which can fail over.
    pub lock_failover: Option<Failover>,
    /// etcd, ZooKeeper or MariaDB, where the lock (or `redis-degrade`'s fallback) lives.
    pub lock_server: Option<PrivateServer>,
    /// The MariaDB of the orders, when the lock has none of its own to share.
    pub orders_db: Option<PrivateServer>,
    /// The URL of the MariaDB the orders go to, kept apart from the server: a restart
    /// takes the server out of its slot for a while, and the URL stays the same.
    orders_url: Option<String>,
}

impl Servers {
    /// Starts what `needs` asks for, and the stock's Redis as `setup` keeps it (alone, with
    /// a replica and a Sentinel, or a cluster), and a MariaDB for its orders if the lock has
    /// none; says what is missing and how to get it.
    pub async fn start(needs: Needs, setup: &Setup) -> anyhow::Result<Servers> {
        let (stock_fails_over, on_a_cluster, orders) = (setup.stock_failover, setup.stock_cluster, setup.orders);
        if let Some(missing) = needs.missing() {
            bail!("{missing}");
        }
        // The launchers assert as a test would; here a panic becomes the lab's error.
        tokio::task::spawn_blocking(move || {
            let stock = (!stock_fails_over && !on_a_cluster).then(PrivateRedis::start);
            let stock_cluster = on_a_cluster.then(|| PrivateRedisCluster::start(3));
            let stock_failover = stock_fails_over.then(|| Failover::start("lab-stock"));
            let lock_clock = needs.lock_in_one_redis().then(redis_clock).flatten();
            let lock_redis = match needs {
                Needs::LockRedis | Needs::LockRedisAndMariaDb => vec![lock_redis_following(lock_clock.as_ref())],
                Needs::RedlockMasters => (0..REDLOCK_MASTERS).map(|_| PrivateRedis::start()).collect(),
                _ => Vec::new(),
            };
            let lock_server = match needs {
                Needs::Etcd => Some(PrivateServer::etcd()),
                Needs::ZooKeeper => Some(PrivateServer::zookeeper()),
                Needs::MariaDb | Needs::LockRedisAndMariaDb => Some(PrivateServer::mariadb()),
                _ => None,
            };
            let lock_failover = (needs == Needs::LockSentinel).then(|| Failover::start("lab-lock"));
            let orders_db = (orders && !needs.mariadb()).then(PrivateServer::mariadb);
            let orders_url = match orders {
                true => orders_db
                    .as_ref()
                    .or(lock_server.as_ref())
                    .map(PrivateServer::mysql_url),
                false => None,
            };
            Servers {
                stock,
                stock_cluster,
                stock_failover,
                lock_redis,
                lock_clock,
                lock_failover,
                lock_server,
                orders_db,
                orders_url,
            }
        })
        .await
        .map_err(|failed| anyhow::anyhow!(panic_text(failed)))
        .context("a server of the lab did not start")
    }

    /// Where the instances reach the stock, through their stock link: its Redis, or
    /// the Sentinel that names its master.
    pub fn stock_address(&self) -> SocketAddr {
        let redis = self.stock.iter().map(|server| server.port);
        let sentinel = self.stock_failover.iter().map(|failover| failover.sentinel.port);
        let cluster = self.stock_cluster.iter().map(|cluster| cluster.nodes[0].port);
        loopback(redis.chain(sentinel).chain(cluster).next().unwrap_or_default())
    }

    /// The stock's URL for an instance that reaches it at `address`; a cluster's own,
    /// whose clients are sent from node to node and so cannot go through one link.
    pub fn stock_url_via(&self, address: SocketAddr) -> String {
        match (&self.stock_failover, &self.stock_cluster) {
            (_, Some(cluster)) => cluster.url(),
            (Some(failover), None) => failover.url_via(address),
            (None, None) => format!("redis://{address}"),
        }
    }

    /// The stock's URL for the crowd's checker, which reaches it directly.
    pub fn stock_url(&self) -> String {
        self.stock_url_via(self.stock_address())
    }

    /// Where the instances reach their lock, each through its lock link: the lock's
    /// Redis servers, the Sentinel that names its master, or the server it lives in.
    pub fn lock_addresses(&self) -> Vec<SocketAddr> {
        let redis = self.lock_redis.iter().map(|server| loopback(server.port));
        let sentinel = self
            .lock_failover
            .iter()
            .map(|failover| loopback(failover.sentinel.port));
        let server = self.lock_server.iter().map(|server| loopback(server.port));
        redis.chain(sentinel).chain(server).collect()
    }

    /// Where the MariaDB of a setup that `needs` this and keeps `orders` or not is kept
    /// (the lock's, or the orders'), for a fault to take it out and put it back; `None`
    /// when the setup has none.
    pub fn mariadb_slot(&mut self, needs: Needs, orders: bool) -> Option<&mut Option<PrivateServer>> {
        match (needs.mariadb(), orders) {
            (true, _) => Some(&mut self.lock_server),
            (false, true) => Some(&mut self.orders_db),
            (false, false) => None,
        }
    }

    /// The MariaDB the orders are written into, reached directly (the lock's, or the
    /// orders' own); `None` when the setup keeps no orders.
    pub fn orders_mysql_url(&self) -> Option<String> {
        self.orders_url.clone()
    }

    /// Every server's process id, for the page (and the test that checks none outlives the lab).
    pub fn pids(&self) -> Vec<u32> {
        let cluster = self.stock_cluster.iter().flat_map(|cluster| &cluster.nodes);
        let redis = self
            .stock
            .iter()
            .chain(&self.lock_redis)
            .chain(cluster)
            .map(PrivateRedis::pid);
        let failovers = self.stock_failover.iter().chain(&self.lock_failover);
        let failover = failovers.flat_map(Failover::pids);
        let server = self.lock_server.iter().chain(&self.orders_db).map(PrivateServer::pid);
        redis.chain(failover).chain(server).collect()
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Whether `program` is an executable file in a folder of the PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|folder| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(folder.join(program))
                .is_ok_and(|file| file.is_file() && file.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The message of a task that panicked.
pub fn panic_text(failed: tokio::task::JoinError) -> String {
    match failed.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_else(|| "it panicked".to_owned()),
        Err(cancelled) => cancelled.to_string(),
    }
}

/// A wall clock for a Redis, if this machine's gcc compiles its preload
/// (`scripts/lib/clock-shift.c`); without it the lab runs on, the lock's clock fixed.
fn redis_clock() -> Option<WallClock> {
    WallClock::try_for_redis().ok()
}

/// A lock's Redis, its wall clock following `clock` when there is one.
fn lock_redis_following(clock: Option<&WallClock>) -> PrivateRedis {
    clock.map_or_else(PrivateRedis::start, PrivateRedis::start_with_clock)
}
