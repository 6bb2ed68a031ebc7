//! The Redis servers of one setup, each a redis-server of the lab's own on a free
//! loopback port (started by the project's launcher, `scripts/lib/exec-server.sh`, as
//! the tests' private servers are), killed when the setup ends or the lab stops. No root
//! is needed: only `redis-server` on the PATH.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use testkit::PrivateRedis;

use crate::setup::{Needs, REDLOCK_MASTERS};

/// The stock's Redis, and the lock's servers (none, one Redis, or the Redlock masters).
pub struct Servers {
    pub stock: PrivateRedis,
    pub lock: Vec<PrivateRedis>,
}

impl Servers {
    /// Starts what `needs` asks for; says what is missing and how to get it.
    pub async fn start(needs: Needs) -> anyhow::Result<Servers> {
        if !on_path("redis-server") {
            bail!(
                "the lab needs redis-server on the PATH: `sudo apt-get install redis-server` \
                 (or `make services`, as root, installs every server of the project)"
            );
        }
        let lock_servers = match needs {
            Needs::StockOnly => 0,
            Needs::LockRedis => 1,
            Needs::RedlockMasters => REDLOCK_MASTERS,
            Needs::NotYet(server) => bail!("the lab does not start {server} yet"),
        };
        // The launcher asserts as a test would; here its panic becomes the lab's error.
        tokio::task::spawn_blocking(move || Servers {
            stock: PrivateRedis::start(),
            lock: (0..lock_servers).map(|_| PrivateRedis::start()).collect(),
        })
        .await
        .map_err(|failed| anyhow::anyhow!(panic_text(failed)))
        .context("a redis-server of the lab did not start")
    }

    pub fn stock_address(&self) -> SocketAddr {
        address(&self.stock)
    }

    pub fn lock_addresses(&self) -> Vec<SocketAddr> {
        self.lock.iter().map(address).collect()
    }

    /// Every server's process id, for the page (and the test that checks none outlives the lab).
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(&self.stock)
            .chain(&self.lock)
            .map(PrivateRedis::pid)
            .collect()
    }
}

fn address(server: &PrivateRedis) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port))
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
