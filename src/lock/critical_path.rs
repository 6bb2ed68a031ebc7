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
//! A server that makes a release durable frees the lock only at its commit, and sends
//! the watch event then, as it sends the answer: the release and its event together
//! cost a whole write round trip (the request's way and the commit, then the event's
//! way, as long as the answer's). `tests/it/lock/critical_path.rs` times both on etcd and
//! ZooKeeper: the event arrives with the answer.
//! A release notice sent on another Redis (`parts::release_notices`) goes out once the
//! release is answered: the release's whole round trip, then the notice's.
//!
//! A lock's own path says what *it* does. [`Backend::minimal_path`] says what *any*
//! correct lock on that backend must do: the fewest round trips from one grant to the
//! next (and for one client alone), with a sentence on why no lock can do with fewer.
//! `make bench` divides by both: the protocol bound shows how close a lock runs to its
//! own design, the backend bound how good that design is. A lock whose path is longer
//! than its backend's minimal path pays for every extra step in both.
//!
//! Both paths are the chain between holders on two instances: a release, a wake-up, a
//! grant. Within one instance a release can grant the next buyer of the same local
//! queue in its own request ([`crate::sale::local_queue`], the direct hand-over): one write
//! where the chain has a release and a grant. The locks whose grant is a key or a row
//! of their own do, for most grants under load, so they can pass both bounds; `make bench`'s breakdown shows the gap
//! within an instance and across instances apart.

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
    /// All Redlock masters, asked at once: a step is done when a majority has answered.
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

    /// The flag of `seckill serve` that says where this server is. The scripts read it from
    /// `seckill strategies --json`, to put a nemesis in front of a strategy's lock.
    pub fn address_flag(self) -> &'static str {
        match self {
            Backend::StockRedis => "--redis-url",
            Backend::LockRedis => "--lock-redis-url",
            Backend::RedlockMasters => "--redlock-urls",
            Backend::Etcd => "--etcd-endpoints",
            Backend::Zookeeper => "--zk-connect",
            Backend::Mysql => "--mysql-url",
        }
    }
}

/// What a step asks of its backend. A write that a server must make durable first
/// (etcd's and ZooKeeper's logs, MySQL's commit, a Redlock master's append-only file)
/// costs far more than a read, so the two are timed apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Reads, or a message the server passes on at once (a pub/sub message).
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

/// The fewest round trips any correct lock on one backend needs, beside the sale's own
/// two (the fenced read and the write on the stock Redis, [`crate::sale::CRITICAL_PATH`]).
#[derive(Clone, Copy, Debug)]
pub struct MinimalPath {
    /// From one grant to the next, under contention: the release, the wake-up, and the
    /// grant (none for a queue lock, whose waiter wrote its entry while it waited).
    pub contended: &'static [Step],
    /// One client alone, nobody waiting: the acquire and the release, each answered.
    pub alone: &'static [Step],
    /// Why no correct lock on this backend can do with fewer.
    pub why: &'static str,
}

const LOCK_REDIS_MINIMAL: MinimalPath = MinimalPath {
    contended: &[
        step("release (one write)", Backend::LockRedis, Access::Write, 0.5),
        step("wake-up (pub/sub message)", Backend::LockRedis, Access::Read, 0.5),
        step(
            "grant (SET NX that also takes the token)",
            Backend::LockRedis,
            Access::Write,
            1.0,
        ),
    ],
    alone: &[
        step(
            "acquire (SET NX that also takes the token)",
            Backend::LockRedis,
            Access::Write,
            1.0,
        ),
        step("release (one write)", Backend::LockRedis, Access::Write, 1.0),
    ],
    why: "A waiter on another instance learns of a release only from a message the release \
          sends (half a trip each way), and the grant is the server's decision, so one \
          request answered; a script lets that request take the token too.",
};

const REDLOCK_MINIMAL: MinimalPath = MinimalPath {
    contended: &[
        step(
            "release (one write on every master)",
            Backend::RedlockMasters,
            Access::Write,
            0.5,
        ),
        step(
            "wake-up (a notice, or a poll at best)",
            Backend::RedlockMasters,
            Access::Read,
            0.5,
        ),
        step(
            "grant (SET NX on every master)",
            Backend::RedlockMasters,
            Access::Write,
            1.0,
        ),
    ],
    alone: &[
        step(
            "acquire (SET NX on every master)",
            Backend::RedlockMasters,
            Access::Write,
            1.0,
        ),
        step(
            "release (one write on every master)",
            Backend::RedlockMasters,
            Access::Write,
            1.0,
        ),
    ],
    why: "As for one Redis, but a grant is a majority's decision: every request goes to \
          all five masters at once and waits for the majority, so each trip costs the \
          slower masters' answer, a durable write on each.",
};

const ETCD_MINIMAL: MinimalPath = MinimalPath {
    contended: &[
        step(
            "release (delete own key), to its commit",
            Backend::Etcd,
            Access::Write,
            0.5,
        ),
        step(
            "wake-up (watch event, sent at the commit as the answer is)",
            Backend::Etcd,
            Access::Write,
            0.5,
        ),
    ],
    alone: &[
        step(
            "acquire (put own key and read the queue, one Txn)",
            Backend::Etcd,
            Access::Write,
            1.0,
        ),
        step("release (delete own key)", Backend::Etcd, Access::Write, 1.0),
    ],
    why: "A waiter queues its key and reads the queue while it waits, off the path, and \
          learns of a release only from the watch event, sent once the delete is \
          committed (a write's round trip from the delete sent to the event). Once the \
          keys older than its own are gone it is first, as revisions only grow, so the \
          event that reports the last of them is the grant: no trip after it.",
};

const ZOOKEEPER_MINIMAL: MinimalPath = MinimalPath {
    contended: &[
        step(
            "release (delete own node), to its commit",
            Backend::Zookeeper,
            Access::Write,
            0.5,
        ),
        step(
            "wake-up (watch event, sent at the commit as the answer is)",
            Backend::Zookeeper,
            Access::Write,
            0.5,
        ),
    ],
    alone: &[
        step(
            "acquire (create a sequential node)",
            Backend::Zookeeper,
            Access::Write,
            1.0,
        ),
        step("list the children", Backend::Zookeeper, Access::Read, 1.0),
        step("release (delete own node)", Backend::Zookeeper, Access::Write, 1.0),
    ],
    why: "As for etcd: the waiter's node is made and the children listed while it waits, \
          and the event that reports the last older node gone is the grant. A create \
          cannot list the children in the same request (a multi holds only writes), so one \
          client alone needs both.",
};

const MYSQL_MINIMAL: MinimalPath = MinimalPath {
    contended: &[
        step("release (one statement)", Backend::Mysql, Access::Write, 0.5),
        step(
            "wake-up (a notice, or a poll at best)",
            Backend::Mysql,
            Access::Read,
            0.5,
        ),
        step(
            "grant (one statement that also takes the token)",
            Backend::Mysql,
            Access::Write,
            1.0,
        ),
    ],
    alone: &[
        step(
            "acquire (one statement that also takes the token)",
            Backend::Mysql,
            Access::Write,
            1.0,
        ),
        step("release (one statement)", Backend::Mysql, Access::Write, 1.0),
    ],
    why: "MySQL sends no notifications, so a waiter learns of a release at best by a poll \
          that arrives just after it; the grant is one committed statement, which can number \
          itself (an AUTO_INCREMENT id, or LAST_INSERT_ID(version + 1) in the same UPDATE).",
};

impl Backend {
    /// The fewest round trips any correct lock on this backend needs; `None` for the
    /// stock Redis, which holds no lock.
    pub fn minimal_path(self) -> Option<MinimalPath> {
        match self {
            Backend::StockRedis => None,
            Backend::LockRedis => Some(LOCK_REDIS_MINIMAL),
            Backend::RedlockMasters => Some(REDLOCK_MINIMAL),
            Backend::Etcd => Some(ETCD_MINIMAL),
            Backend::Zookeeper => Some(ZOOKEEPER_MINIMAL),
            Backend::Mysql => Some(MYSQL_MINIMAL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK_BACKENDS: [Backend; 5] = [
        Backend::LockRedis,
        Backend::RedlockMasters,
        Backend::Etcd,
        Backend::Zookeeper,
        Backend::Mysql,
    ];

    #[test]
    fn every_minimal_path_stays_on_its_own_backend() {
        for backend in LOCK_BACKENDS {
            let path = backend.minimal_path().unwrap();
            for step in path.contended.iter().chain(path.alone) {
                assert_eq!(step.backend, backend, "{}: {}", backend.name(), step.name);
            }
        }
        assert!(Backend::StockRedis.minimal_path().is_none());
    }

    #[test]
    fn a_queue_locks_release_reaches_its_waiter_a_whole_write_round_trip_after_it_is_sent() {
        // etcd and ZooKeeper send the watch event at the delete's commit, with its answer
        // (tests/it/lock/critical_path.rs): half a write's way there, half a write's way back.
        for backend in [Backend::Etcd, Backend::Zookeeper] {
            let path = backend.minimal_path().unwrap();
            let writes: f64 = path
                .contended
                .iter()
                .filter(|step| step.access == Access::Write)
                .map(|step| step.round_trips)
                .sum();
            assert!(
                writes == 1.0 && path.contended.iter().all(|step| step.access == Access::Write),
                "{}: {:?}",
                backend.name(),
                path.contended
            );
        }
    }

    #[test]
    fn a_hand_over_is_a_release_and_a_wake_up_and_a_grant_unless_the_waiter_queued_already() {
        let trips = |steps: &[Step]| steps.iter().map(|step| step.round_trips).sum::<f64>();
        for backend in LOCK_BACKENDS {
            let path = backend.minimal_path().unwrap();
            // The queue locks' waiters wrote their entry while they waited.
            let grant = if matches!(backend, Backend::Etcd | Backend::Zookeeper) {
                0.0
            } else {
                1.0
            };
            assert_eq!(trips(path.contended), 1.0 + grant, "{}", backend.name());
            assert!(
                trips(path.alone) >= 2.0,
                "{}: an acquire and a release, each answered",
                backend.name()
            );
        }
    }
}
