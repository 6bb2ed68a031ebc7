//! The servers of one setup, each of the lab's own on free loopback ports (started by
//! the project's launcher, `scripts/lib/exec-server.sh`, as the tests' private servers
//! are), killed when the setup ends or the lab stops. No root is needed: only the
//! server's program on the machine.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use testkit::{PrivateRedis, PrivateServer};

use crate::failover::Failover;
use crate::setup::{Needs, REDLOCK_MASTERS};

/// The stock's Redis, and the lock's servers.
pub struct Servers {
    pub stock: PrivateRedis,
    /// The lock's Redis servers: one, or the Redlock masters.
    pub lock_redis: Vec<PrivateRedis>,
    /// The lock's Redis master with a replica and a Sentinel, which can fail over.
    pub failover: Option<Failover>,
    /// etcd, ZooKeeper or MariaDB, where the lock (or `redis-degrade`'s fallback) lives.
    pub lock_server: Option<PrivateServer>,
}

impl Servers {
    /// Starts what `needs` asks for; says what is missing and how to get it.
    pub async fn start(needs: Needs) -> anyhow::Result<Servers> {
        if let Some(missing) = needs.missing() {
            bail!("{missing}");
        }
        // The launchers assert as a test would; here a panic becomes the lab's error.
        tokio::task::spawn_blocking(move || {
            let stock = PrivateRedis::start();
            let lock_redis = match needs {
                Needs::LockRedis | Needs::LockRedisAndMariaDb => vec![PrivateRedis::start()],
                Needs::RedlockMasters => (0..REDLOCK_MASTERS).map(|_| PrivateRedis::start()).collect(),
                _ => Vec::new(),
            };
            let lock_server = match needs {
                Needs::Etcd => Some(PrivateServer::etcd()),
                Needs::ZooKeeper => Some(PrivateServer::zookeeper()),
                Needs::MariaDb | Needs::LockRedisAndMariaDb => Some(PrivateServer::mariadb()),
                _ => None,
            };
            let failover = (needs == Needs::LockSentinel).then(Failover::start);
            Servers {
                stock,
                lock_redis,
                failover,
                lock_server,
            }
        })
        .await
        .map_err(|failed| anyhow::anyhow!(panic_text(failed)))
        .context("a server of the lab did not start")
    }

    pub fn stock_address(&self) -> SocketAddr {
        loopback(self.stock.port)
    }

    /// Where the instances reach their lock, each through its lock link: the lock's
    /// Redis servers, the Sentinel that names its master, or the server it lives in.
    pub fn lock_addresses(&self) -> Vec<SocketAddr> {
        let redis = self.lock_redis.iter().map(|server| loopback(server.port));
        let sentinel = self.failover.iter().map(|failover| loopback(failover.sentinel.port));
        let server = self.lock_server.iter().map(|server| loopback(server.port));
        redis.chain(sentinel).chain(server).collect()
    }

    /// Every server's process id, for the page (and the test that checks none outlives the lab).
    pub fn pids(&self) -> Vec<u32> {
        let redis = std::iter::once(&self.stock)
            .chain(&self.lock_redis)
            .map(PrivateRedis::pid);
        let failover = self.failover.iter().flat_map(Failover::pids);
        let server = self.lock_server.iter().map(PrivateServer::pid);
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
