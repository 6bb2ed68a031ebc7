//! A lock's critical path: the round trips from one grant to the next.
//!
//! Under contention a lock serializes the sales, and one sale's steps run one after
//! another: the holder reads and writes the stock, releases, the next waiter learns of
//! it and takes the lock. That chain is the lock's **critical path**. Everything else
//! (HTTP, parsing, the buyers still waiting) can overlap with it, so the fastest a lock
//! can sell is one sale per critical path. `make bench` turns each path into a bound by
//! timing the round trips in the same run.
//!
//! Each strategy declares its own path as a `CRITICAL_PATH` constant beside its code,
//! so a protocol change moves its bound in the same diff. A step counts a full round
//! trip when the chain waits for its answer, and half of one when only one direction
//! is on the path: a release frees the lock when its request arrives, and a wake-up (a
//! pub/sub message, a watch event) travels one way. A polling lock's wake-up counts as
//! half a round trip too: its best case, a retry that arrives just after the release.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// A server the sale talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The Redis that holds the stock (`--redis-url`).
    StockRedis,
    /// The Redis that holds the lock (`--lock-redis-url`, by default the stock's).
    LockRedis,
    /// All Redlock masters, asked at once: the answer of the slowest counts.
    RedlockMasters,
    Etcd,
    Zookeeper,
    Mysql,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::StockRedis => "stock Redis",
            Backend::LockRedis => "lock Redis",
            Backend::RedlockMasters => "5 Redlock masters",
            Backend::Etcd => "etcd",
            Backend::Zookeeper => "ZooKeeper",
            Backend::Mysql => "MySQL",
        }
    }
}

/// What a step asks of its backend. A write that a server must make durable first
/// (etcd's and ZooKeeper's logs, MySQL's commit, a Redlock master's append-only file)
/// costs far more than a read, so the two are timed apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Reads, or a message the server passes on (a watch event, a pub/sub message).
    Read,
    /// Changes data: the server makes it durable (if it persists at all) before answering.
    Write,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// One step of the critical path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub name: Cow<'static, str>,
    pub backend: Backend,
    pub access: Access,
    pub round_trips: f64,
}

/// A step, for the `CRITICAL_PATH` constants.
pub const fn step(name: &'static str, backend: Backend, access: Access, round_trips: f64) -> Step {
    Step {
        name: Cow::Borrowed(name),
        backend,
        access,
        round_trips,
    }
}
