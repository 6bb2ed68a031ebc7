//! Redlock: one lock over N independent Redis masters, granted by a majority.
//!
//! A lock on one Redis ([`super::redis`]) is lost when that Redis fails over before its replica got the
//! key. Redlock, as the Redis docs specify it, asks N masters that know nothing of each other (no
//! replication between them) and believes a majority.
//!
//! ## How it works
//! 1. **N masters** (default 5, `--redlock-urls`), each asked with a small timeout of its own, far below
//!    the TTL ([`RedlockOptions::node_timeout`]). A late command still runs, in order (`Master::ask`).
//! 2. **Acquire** sends `SET key <random value> NX PX ttl`, with the same value, to all N at once, and
//!    notes when it started (`Masters::set_everywhere`).
//! 3. **Granted** as soon as a majority (N/2 + 1) said yes, if time is left: a validity above zero
//!    ([`Redlock::try_acquire`]).
//! 4. **On failure** it deletes its value on *every* master at once (`Masters::delete_everywhere`), and
//!    the waiter retries after a random delay ([`Redlock::acquire`]).
//! 5. **Renewal** every `ttl / 3` extends the key on every master (`Grants::lease_for`). **Release** runs
//!    the owner-checked delete everywhere, done when a majority answered (`Masters::release_everywhere`).
//! 6. **Direct hand-over.** A release whose local queue has a buyer waiting gives the key to that buyer on
//!    every master, in one round trip ([`Redlock::hands_over`]).
//!
//! ## Limitations
//! - **No fencing token.** A majority of independent counters is not a counter: `--lock redlock` runs the
//!   sale unfenced ([`DESCRIPTION`]).
//! - **Timing assumptions.** Safety rests on bounded clock drift, pauses and network delays, shorter than
//!   the TTL ([`Redlock::try_acquire`]).
//! - **A master that restarts empty** (no persistence) forgets the keys it granted (`Masters`).
//! - **Cost.** Every grant, renewal and release is N round trips (sent in parallel), and waiters poll, woken
//!   early by a notice on the stock Redis ([`Redlock::with_release_notices`]).
//!
//! ## References
//! - Redis docs, "Distributed Locks with Redis" (the Redlock algorithm):
//!   <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>
//! - Martin Kleppmann, "How to do distributed locking":
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>
//! - Salvatore Sanfilippo, "Is Redlock safe?": <http://antirez.com/news/101>

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use tokio::task::JoinHandle;

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::{trusted_until, LeaseKeeper};
use crate::lock::parts::release_notices::{poll_until_granted_or_noticed, ReleaseNotices};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::{DistributedLock, HandOver, Lease, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "redlock";

/// What this strategy is (see [`crate::lock::description`]). On the Redlock masters; its grants carry no
/// token. A majority of independent counters is not a counter: two grants can read different maxima on
/// different masters, so any number made from them can go backwards, and one master's `INCR` fails with
/// that master. This is Kleppmann's main objection, and this lock does not invent a token: `--lock redlock`
/// runs the sale unfenced (`/healthz` says `no_tokens`), and a holder that pauses past its validity can
/// still write once. The guard's validity check narrows that window; it cannot close it.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(RedlockMasters),
    tokens: false,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the release on every master,
/// answered, then its notice on the stock Redis wakes a waiter, which asks every master.
/// Every master is asked at once, and each step waits for a majority: it costs the round
/// trip of the slowest master in that majority. See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step(
        "release (DEL on every master), answered by a majority",
        RedlockMasters,
        Write,
        1.0,
    ),
    step("wake-up (notice on the stock Redis)", StockRedis, Read, 1.0),
    step("acquire (SET NX PX on every master)", RedlockMasters, Write, 1.0),
];

/// Extend the key only if it still holds our value.
/// Its keys and arguments head the script: `src/lock/redlock/extend.lua`.
const EXTEND_SCRIPT: &str = include_str!("redlock/extend.lua");

/// Delete the key only if it still holds our value.
/// Its keys and arguments head the script: `src/lock/redlock/delete.lua`.
const DELETE_SCRIPT: &str = include_str!("redlock/delete.lua");

/// Step 6: give the key to the next value if it still holds ours.
/// Its keys and arguments head the script: `src/lock/redlock/hand_over.lua`.
const HAND_OVER_SCRIPT: &str = include_str!("redlock/hand_over.lua");

/// How many acquire attempts in a row may hear from too few masters before the buyer
/// is told (see [`Redlock`]'s `acquire`).
pub const NO_MAJORITY_ATTEMPTS: u32 = 5;

/// How a [`Redlock`] behaves.
#[derive(Clone, Copy, Debug)]
pub struct RedlockOptions {
    /// The lease on every master.
    pub ttl: Duration,
    /// Renew every `ttl / 3` while held. Off only to demonstrate expiry.
    pub renew: bool,
    /// How long one master may take to answer one command (or to connect). Far below the TTL, so a dead
    /// master costs one short timeout, not the wait. A command past it is counted silent but still runs.
    pub node_timeout: Duration,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            ttl: Duration::from_secs(3),
            renew: true,
            node_timeout: Duration::from_millis(50),
        }
    }
}

/// One master: its address, and the one connection every command to it goes on. It is
/// opened when first needed and replaced only after it failed, never because an answer
/// was slow (see [`Master::ask`]).
struct Master {
    client: redis::Client,
    address: String,
    /// The connection, with its number: the number tells a failed connection from the
    /// one that replaced it.
    connection: tokio::sync::Mutex<Option<(u64, MultiplexedConnection)>>,
    /// How many connections were opened, to number them.
    opened: AtomicU64,
}

/// One master's answer to one command.
enum Vote {
    Yes,
    No,
    /// No answer within the node timeout, or an error.
    Silent,
}

impl Master {
    fn new(url: &str) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let address = client.get_connection_info().addr().to_string();
        Ok(Master {
            client,
            address,
            connection: tokio::sync::Mutex::new(None),
            opened: AtomicU64::new(0),
        })
    }

    /// Runs `command` within `timeout` (connecting first if needed); an integer 1 or
    /// `OK` is a yes.
    ///
    /// A command not answered in time still runs: the master may only be slow. So it is
    /// not dropped but left to finish in the background, and the connection is kept.
    /// A master runs one connection's commands in the order sent, so the clean-up delete
    /// that follows a silent set on the same connection runs after that set. On a new
    /// connection it could run first, and the late set would keep the key for a TTL.
    async fn ask(&self, timeout: Duration, command: &redis::Cmd) -> Vote {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut answered = self.ask_once(deadline, command).await;
        // The master restarted since we last spoke: one new connection, same deadline.
        if matches!(&answered, Some(Err(error)) if error.is_unrecoverable_error()) {
            answered = self.ask_once(deadline, command).await;
        }
        match answered {
            Some(Ok(redis::Value::Okay)) | Some(Ok(redis::Value::Int(1))) => Vote::Yes,
            Some(Ok(_)) => Vote::No,
            Some(Err(_)) | None => Vote::Silent,
        }
    }

    /// One try of [`Master::ask`]: the answer, or `None` if none came by `deadline`.
    async fn ask_once(
        &self,
        deadline: tokio::time::Instant,
        command: &redis::Cmd,
    ) -> Option<redis::RedisResult<redis::Value>> {
        let (number, mut connection) = match tokio::time::timeout_at(deadline, self.connection()).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(error)) => return Some(Err(error)),
            Err(_) => return None,
        };
        let command = command.clone();
        let mut answer = Box::pin(async move { command.query_async::<redis::Value>(&mut connection).await });
        match tokio::time::timeout_at(deadline, &mut answer).await {
            // Broken: replaced at the next command. (An error answer from the master
            // leaves the connection as good as it was.)
            Ok(Err(error))
                if error.is_unrecoverable_error() || !matches!(error.kind(), redis::ErrorKind::Server(_)) =>
            {
                self.forget(number).await;
                Some(Err(error))
            }
            Ok(answered) => Some(answered),
            Err(_) => {
                // The connection skips a command whose caller is gone, so someone must
                // wait for the answer, or a clean-up delete might never be sent.
                tokio::spawn(answer);
                None
            }
        }
    }

    /// Whether it answers a `PING` within `timeout`.
    async fn answers_ping(&self, timeout: Duration) -> bool {
        let ping = redis::cmd("PING");
        let pinged = tokio::time::timeout(timeout, async {
            let (_, mut connection) = self.connection().await?;
            ping.query_async::<String>(&mut connection).await
        })
        .await;
        matches!(pinged, Ok(Ok(_)))
    }

    /// The connection and its number, opened if there is none.
    async fn connection(&self) -> redis::RedisResult<(u64, MultiplexedConnection)> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        // No timeouts of the client's own: the node timeout is ours, and a request the
        // client timed out could be skipped unsent (see `ask_once`).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let number = self.opened.fetch_add(1, Ordering::SeqCst);
        *slot = Some((number, connection.clone()));
        Ok((number, connection))
    }

    /// Drops connection `number` after it failed, unless another replaced it already.
    async fn forget(&self, number: u64) {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|(current, _)| *current == number) {
            *slot = None;
        }
    }
}

/// How the masters voted on one request to all of them.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    yes: usize,
    no: usize,
    silent: usize,
}

impl Tally {
    fn count(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
            Vote::Silent => self.silent += 1,
        }
    }
}

/// The N masters, and the commands sent to all of them at once.
///
/// A master that restarts empty (no persistence) forgets the keys it granted. If the holder had exactly a
/// majority, that master and the ones that were down can form a new majority for somebody else. The spec's
/// cure is a *delayed restart*: a restarted master stays out for at least one TTL, or persistence with
/// `fsync` on every write. `make services` runs the masters with `appendonly yes` and `appendfsync always`,
/// so a restart keeps its keys (and their expiry, which Redis stores as an absolute time). A master wiped
/// by hand is not covered.
struct Masters {
    masters: Vec<Master>,
    node_timeout: Duration,
}

impl Masters {
    fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// Sends `command` to every master at once, each after that master's command in
    /// `after`, and counts every answer.
    async fn ask_all(self: &Arc<Self>, command: &redis::Cmd, after: Unanswered) -> Tally {
        let (tally, _) = self.ask_each_until(command, after, |_| false).await;
        tally
    }

    /// Sends `command` to every master at once, each after that master's earlier command
    /// in `after` (one still on its way), and counts the answers until `decided` says the
    /// tally is enough, or every master answered. The commands not answered by then go on
    /// in the background: they are returned, so a later command can follow them.
    async fn ask_each_until(
        self: &Arc<Self>,
        command: &redis::Cmd,
        after: Unanswered,
        decided: impl Fn(&Tally) -> bool,
    ) -> (Tally, Unanswered) {
        let (send_vote, mut votes) = tokio::sync::mpsc::unbounded_channel();
        let mut asked: Vec<Option<JoinHandle<()>>> = after
            .0
            .into_iter()
            .enumerate()
            .map(|(index, earlier)| {
                let (masters, command, send_vote) = (self.clone(), command.clone(), send_vote.clone());
                Some(tokio::spawn(async move {
                    if let Some(earlier) = earlier {
                        let _ = earlier.await;
                    }
                    let vote = masters.masters[index].ask(masters.node_timeout, &command).await;
                    let _ = send_vote.send((index, vote));
                }))
            })
            .collect();
        drop(send_vote);
        let mut tally = Tally::default();
        while let Some((index, vote)) = votes.recv().await {
            asked[index] = None;
            tally.count(vote);
            if decided(&tally) {
                break;
            }
        }
        (tally, Unanswered(asked))
    }

    /// Step 2: `SET NX` on every master at once, answered as soon as a majority has said
    /// yes: the grant need not wait for the slowest masters' disks. A refusal waits for
    /// every master. The sets still on their way when a majority granted are returned:
    /// the release sends each master its delete after that master's set, so a late set
    /// cannot land after the delete and keep the value there until its lease ends.
    async fn set_everywhere(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) -> (Tally, Unanswered) {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(value).arg("NX").arg("PX").arg(ttl.as_millis() as u64);
        let quorum = self.quorum();
        self.ask_each_until(&set, self.nothing_on_its_way(), |tally| tally.yes >= quorum)
            .await
    }

    /// Step 5's renewal.
    async fn extend_everywhere(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) -> Tally {
        let mut extend = eval(EXTEND_SCRIPT, key);
        extend.arg(value).arg(ttl.as_millis() as u64);
        self.ask_all(&extend, self.nothing_on_its_way()).await
    }

    /// Step 4, and the shutdown: the owner-checked delete, on every master, each after that master's
    /// command in `after`, waiting for every answer. The deletes are sent from tasks of their own: a caller
    /// that gives up meanwhile leaves no value behind. After a failed acquire, masters that did not answer
    /// yes get one too: a yes may have been lost on the way back. Each goes on the set's connection once
    /// the set has answered or timed out, so even a set still unread there (the master was paused) runs
    /// first.
    async fn delete_everywhere(self: &Arc<Self>, key: &str, value: &str, after: Unanswered) -> Tally {
        self.ask_all(&delete_if_ours(key, value), after).await
    }

    /// Step 5's release: the owner-checked delete on every master (after the grant's
    /// sets still on their way), answered as soon as a majority has deleted the value,
    /// or has said it was gone. From then on no majority holds it, so a newcomer can be
    /// granted, and the release notice need not wait for the slowest master's disk. The
    /// deletes still on their way go on in the background, so no master keeps the value
    /// until its lease ends.
    async fn release_everywhere(self: &Arc<Self>, key: &str, value: &str, sets: Unanswered) -> Tally {
        let (tally, _deletes_on_their_way) = self
            .ask_each_until(&delete_if_ours(key, value), sets, self.majority_either_way())
            .await;
        tally
    }

    /// Step 6: our value replaced by `next` on every master (each after that master's
    /// command in `after`), answered as soon as a majority said yes, or too many said no
    /// for a majority to be possible.
    async fn hand_over_everywhere(
        self: &Arc<Self>,
        key: &str,
        (value, next): (&str, &str),
        ttl: Duration,
        after: Unanswered,
    ) -> (Tally, Unanswered) {
        let mut hand_over = eval(HAND_OVER_SCRIPT, key);
        hand_over.arg(value).arg(next).arg(ttl.as_millis() as u64);
        self.ask_each_until(&hand_over, after, self.majority_either_way()).await
    }

    /// Enough answers to stop waiting for an owner-checked command: a majority said
    /// yes, or so many said no that a majority never can.
    fn majority_either_way(&self) -> impl Fn(&Tally) -> bool {
        let (quorum, total) = (self.quorum(), self.masters.len());
        move |tally: &Tally| tally.yes >= quorum || tally.no > total - quorum
    }

    /// No command on its way to any master.
    fn nothing_on_its_way(&self) -> Unanswered {
        Unanswered(self.masters.iter().map(|_| None).collect())
    }
}

/// The commands of one request to every master that had not answered when it was
/// decided: one slot per master, `None` for a master that answered.
struct Unanswered(Vec<Option<JoinHandle<()>>>);

/// The owner-checked delete of `key`, for one master.
fn delete_if_ours(key: &str, value: &str) -> redis::Cmd {
    let mut delete = eval(DELETE_SCRIPT, key);
    delete.arg(value);
    delete
}

/// `EVAL <script> 1 <key>`, arguments to follow: one plain command that every master
/// runs as it is (the scripts are a few lines, so sending them each time costs little).
fn eval(script: &str, key: &str) -> redis::Cmd {
    let mut command = redis::cmd("EVAL");
    command.arg(script).arg(1).arg(key);
    command
}

/// The flags of `--lock redlock` (flattened into the config).
#[derive(Clone, Debug, clap::Args)]
pub struct RedlockArgs {
    /// The independent Redis masters of `--lock redlock`, comma separated (at least 3).
    #[arg(
        long,
        env = "SECKILL_REDLOCK_URLS",
        value_delimiter = ',',
        default_value = "redis://127.0.0.1:6381,redis://127.0.0.1:6382,redis://127.0.0.1:6383,redis://127.0.0.1:6384,redis://127.0.0.1:6385"
    )]
    pub redlock_urls: Vec<String>,
    /// How long one Redlock master may take to answer, in milliseconds; far below the TTL,
    /// so that a dead master costs one short timeout.
    #[arg(long, env = "SECKILL_REDLOCK_NODE_TIMEOUT_MS", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub redlock_node_timeout_ms: u64,
}

/// Builds `--lock redlock` from its flags.
pub async fn build(args: &RedlockArgs, setup: &Setup) -> anyhow::Result<Redlock> {
    let node_timeout = Duration::from_millis(args.redlock_node_timeout_ms);
    if node_timeout * 10 > setup.ttl {
        anyhow::bail!(
            "--redlock-node-timeout-ms ({} ms) must be at most a tenth of --lock-ttl-ms ({} ms): \
             a master that does not answer must cost a small part of the lease, not most of it",
            args.redlock_node_timeout_ms,
            setup.ttl.as_millis()
        );
    }
    let options = RedlockOptions {
        ttl: setup.ttl,
        renew: true,
        node_timeout,
    };
    let lock = Redlock::connect(&args.redlock_urls, options).await.with_context(|| {
        format!(
            "cannot use the Redlock masters {}.\n  Start them with `make services` (ports 6381 to 6385), \
             or point --redlock-urls / SECKILL_REDLOCK_URLS at at least 3 running Redis masters",
            args.redlock_urls.join(",")
        )
    })?;
    Ok(lock.with_release_notices(setup.release_notices().await?))
}

/// A lock granted by a majority of independent Redis masters.
pub struct Redlock {
    masters: Arc<Masters>,
    grants: Grants,
    shut_down: ShutDownSwitch,
}

/// What making a grant and giving it back need, shared by the lock and its guards: a
/// hand-over (step 6) makes the next grant from the guard of the last.
#[derive(Clone)]
struct Grants {
    masters: Arc<Masters>,
    options: RedlockOptions,
    /// Grants this handle holds, value to key, so `shutdown` can give them back.
    held: HeldGrants<String, String>,
    /// Release notices on a Redis, when the wiring gives some: the masters are
    /// independent, and no one of them can speak for the lock.
    notices: Option<Arc<ReleaseNotices>>,
}

/// Why the masters could not be used at all.
#[derive(Debug, thiserror::Error)]
pub enum RedlockError {
    #[error("Redlock needs at least 3 masters (a majority of 1 or 2 is no better than one Redis), got {0}")]
    TooFewMasters(usize),
    #[error("`{url}` is not a Redis URL: {source}")]
    BadUrl { url: String, source: redis::RedisError },
    #[error("only {reachable} of {total} Redlock masters answer ({answering}); a grant needs {quorum}")]
    NoMajority {
        reachable: usize,
        total: usize,
        quorum: usize,
        answering: String,
    },
}

impl Redlock {
    /// Opens the masters and checks that a majority of them answers a `PING`.
    pub async fn connect(urls: &[String], options: RedlockOptions) -> Result<Self, RedlockError> {
        if urls.len() < 3 {
            return Err(RedlockError::TooFewMasters(urls.len()));
        }
        let masters = urls
            .iter()
            .map(|url| {
                Master::new(url).map_err(|source| RedlockError::BadUrl {
                    url: url.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let masters = Masters {
            masters,
            node_timeout: options.node_timeout,
        };
        // A first connection may take longer than one command: allow a few node timeouts.
        let answers = join_all(
            masters
                .masters
                .iter()
                .map(|master| master.answers_ping(options.node_timeout * 10)),
        )
        .await;
        let reachable = answers.iter().filter(|answered| **answered).count();
        if reachable < masters.quorum() {
            let answering: Vec<&str> = masters
                .masters
                .iter()
                .zip(&answers)
                .filter(|(_, answered)| **answered)
                .map(|(master, _)| master.address.as_str())
                .collect();
            return Err(RedlockError::NoMajority {
                reachable,
                total: masters.masters.len(),
                quorum: masters.quorum(),
                answering: if answering.is_empty() {
                    "none".to_owned()
                } else {
                    answering.join(", ")
                },
            });
        }
        if reachable < masters.masters.len() {
            tracing::warn!(
                reachable,
                total = masters.masters.len(),
                "some Redlock masters do not answer; a majority does"
            );
        }
        let masters = Arc::new(masters);
        Ok(Redlock {
            masters: masters.clone(),
            grants: Grants {
                masters,
                options,
                held: HeldGrants::default(),
                notices: None,
            },
            shut_down: ShutDownSwitch::new(BACKEND),
        })
    }

    /// Announces this handle's releases and wakes its waiters through `notices`
    /// ([`crate::lock::parts::release_notices`]): a waiter tries as soon as another
    /// instance released, instead of at its next poll. The masters still decide.
    /// `None` leaves the waiters polling (`--release-notices false`).
    pub fn with_release_notices(mut self, notices: Option<ReleaseNotices>) -> Self {
        self.grants.notices = notices.map(Arc::new);
        self
    }

    /// The number of masters a grant needs.
    pub fn quorum(&self) -> usize {
        self.masters.quorum()
    }
}

/// A value for one grant: the owner's name and 128 random bits.
fn new_value(owner: &Owner) -> String {
    format!("{}:{:032x}", owner.as_str(), rand::random::<u128>())
}

impl Grants {
    /// A grant of `key` to `value`, asked for at `sent`: held here until released, its
    /// lease renewed (step 5); `sets_on_their_way` are the masters still to answer.
    fn guard(&self, key: &str, value: String, sent: Instant, sets_on_their_way: Unanswered) -> LockGuard {
        self.held.insert(value.clone(), key.to_owned());
        let (keeper, lease) = self.lease_for(key, &value, sent);
        let grant = RedlockGrant {
            grants: self.clone(),
            key: key.to_owned(),
            value,
            lease: keeper,
            sets_on_their_way,
        };
        // The lease starts at the validity's end and moves on with each majority renewal.
        LockGuard::new(key, grant).with_lease(lease)
    }

    /// Step 5: a lease renewed on every master every `ttl / 3`, or a fixed one. Each renewal extends the
    /// key with an owner-checked script, and counts: a majority extended moves the validity on
    /// (`ttl - elapsed - drift`, counted from that renewal's start), a majority that no longer holds our
    /// value ends it.
    fn lease_for(&self, key: &str, value: &str, sent: Instant) -> (LeaseKeeper, Lease) {
        let ttl = self.options.ttl;
        let (masters, key_owned, value) = (self.masters.clone(), key.to_owned(), value.to_owned());
        LeaseKeeper::start(self.options.renew, BACKEND, key, ttl, sent, move || {
            let (masters, key, value) = (masters.clone(), key_owned.clone(), value.clone());
            async move {
                let tally = masters.extend_everywhere(&key, &value, ttl).await;
                if tally.yes >= masters.quorum() {
                    Ok(true)
                } else if tally.no > masters.masters.len() - masters.quorum() {
                    Ok(false) // a majority no longer holds our value: no renewal can bring it back
                } else {
                    Err(LockError::backend(
                        BACKEND,
                        too_few(tally, masters.masters.len(), masters.quorum(), "extended"),
                    ))
                }
            }
        })
    }
}

/// The error of a request that reached too few masters.
fn too_few(tally: Tally, total: usize, quorum: usize, what: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "only {} of {total} Redlock masters {what} ({} refused, {} did not answer); a majority is {quorum}",
        tally.yes, tally.no, tally.silent
    ))
}

/// One grant: what its release needs.
struct RedlockGrant {
    grants: Grants,
    key: String,
    value: String,
    /// The lease: renewed while the grant lives, when renewal is on.
    lease: LeaseKeeper,
    /// The acquire's sets to the masters that had not answered when it was granted.
    sets_on_their_way: Unanswered,
}

#[async_trait]
impl Release for RedlockGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before deleting
        grant.grants.held.remove(&grant.value);
        let masters = &grant.grants.masters;
        let tally = masters
            .release_everywhere(&grant.key, &grant.value, grant.sets_on_their_way)
            .await;
        // Lost when a majority answered that our value was gone already (expired, or
        // taken); masters that did not answer will expire the key on their own.
        if tally.no > masters.masters.len() - masters.quorum() {
            Err(LockError::Lost { key: grant.key })
        } else {
            if let Some(notices) = &grant.grants.notices {
                notices.announce(&grant.key);
            }
            Ok(())
        }
    }

    /// Step 6: the next owner's value in place of ours, on a majority, with time left
    /// (as step 3). Anything less is no grant: every master is asked to delete the next
    /// value, then ours. It ends as a release does: lost when a majority no longer had
    /// our value, else released (masters that did not answer expire the key on their own).
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the key changes hands
        grant.grants.held.remove(&grant.value);
        let (masters, ttl) = (grant.grants.masters.clone(), grant.grants.options.ttl);
        let next_value = new_value(next);
        let started = Instant::now();
        let (tally, hand_overs_on_their_way) = masters
            .hand_over_everywhere(&grant.key, (&grant.value, &next_value), ttl, grant.sets_on_their_way)
            .await;
        if tally.yes >= masters.quorum() && Instant::now() < trusted_until(started, ttl) {
            return Ok(HandOver::Granted(grant.grants.guard(
                &grant.key,
                next_value,
                started,
                hand_overs_on_their_way,
            )));
        }
        // No grant. Each master ends with neither value: the next one's is deleted after
        // that master's hand-over, then ours, where the hand-over did not run.
        masters
            .delete_everywhere(&grant.key, &next_value, hand_overs_on_their_way)
            .await;
        let nothing = masters.nothing_on_its_way();
        masters.delete_everywhere(&grant.key, &grant.value, nothing).await;
        if tally.no > masters.masters.len() - masters.quorum() {
            return Err(LockError::Lost { key: grant.key });
        }
        if let Some(notices) = &grant.grants.notices {
            notices.announce(&grant.key);
        }
        Ok(HandOver::Released)
    }
}

#[async_trait]
impl DistributedLock for Redlock {
    /// Steps 2 to 4. Granted when a majority said yes and time is left: `validity = ttl - elapsed - drift`,
    /// with `drift = ttl x 0.01 + 2 ms`, is above zero. The guard's lease ends at that deadline; the holder
    /// must not write after it (the sale checks [`LockGuard::is_held`] before its write).
    ///
    /// Safety rests on bounded clock drift, pauses and network delays, shorter than the TTL. A master whose
    /// clock jumps ahead expires keys early: if it was one of a bare majority, a second client gets a
    /// majority too, and with no token the first holder's late write goes through
    /// (`tests/it/chaos/clock_jumps.rs`, `make clock-jump`).
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let ttl = self.grants.options.ttl;
        let value = new_value(owner);
        let started = Instant::now();
        let (tally, sets_on_their_way) = self.masters.set_everywhere(key, &value, ttl).await;
        // Step 3: a majority, and time left after the round trip and the drift margin.
        if tally.yes >= self.quorum() && Instant::now() < trusted_until(started, ttl) {
            return Ok(self.grants.guard(key, value, started, sets_on_their_way));
        }
        // Step 4: give back whatever we may have got, everywhere, before anyone retries;
        // each master's delete after its set, so that no set lands after its delete.
        self.masters.delete_everywhere(key, &value, sets_on_their_way).await;
        let total = self.masters.masters.len();
        if tally.yes + tally.no < self.quorum() {
            // Not "held": too few masters answered to know.
            return Err(LockError::backend(
                BACKEND,
                std::io::Error::other(format!(
                    "only {} of {total} Redlock masters answered ({} did not within {:?}); a grant needs {}. \
                     Start them (`make services`) or fix --redlock-urls",
                    tally.yes + tally.no,
                    tally.silent,
                    self.masters.node_timeout,
                    self.quorum()
                )),
            ));
        }
        Err(LockError::Busy { key: key.to_owned() })
    }

    /// The trait's polling loop: after a failed attempt (step 4), a random delay, its jittered backoff. One
    /// difference: an attempt that heard from too few masters is retried like a refused one,
    /// [`NO_MAJORITY_ATTEMPTS`] times in a row, before the buyer gets the error. Under load a master's
    /// answer can miss the short node timeout (the connection's reader task did not run in time); that is a
    /// slow master, not a dead one. Masters that are really down fail every attempt at once, so the buyer
    /// still hears so within a few backoff pauses.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let unheard_in_a_row = AtomicU32::new(0);
        let attempt = || async {
            match self.try_acquire(key, owner).await {
                Err(LockError::Backend { .. })
                    if unheard_in_a_row.fetch_add(1, Ordering::SeqCst) + 1 < NO_MAJORITY_ATTEMPTS =>
                {
                    Err(LockError::Busy { key: key.to_owned() })
                }
                answered => {
                    if matches!(answered, Err(LockError::Busy { .. })) {
                        unheard_in_a_row.store(0, Ordering::SeqCst);
                    }
                    answered
                }
            }
        };
        poll_until_granted_or_noticed(self.grants.notices.as_deref(), key, timeout, attempt).await
    }

    /// Step 6: a release whose local queue has a buyer waiting ([`crate::sale::local_queue`]) runs an
    /// owner-checked script everywhere instead, which replaces our value with the next buyer's, with a full
    /// lease. On no master is the key free in between, so the next buyer is granted as an acquire would be:
    /// when a majority has answered yes, with its validity counted from the hand-over's start. One round
    /// trip to the masters where a release and the next acquire take two.
    fn hands_over(&self) -> bool {
        true
    }

    /// Deletes every key this handle still holds, on every master, and refuses later acquires.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        let held = self.grants.held.take_all();
        if !held.is_empty() {
            // A grant's sets to its slowest masters may still be on their way; each ends
            // within a node timeout, and the deletes must come after them.
            tokio::time::sleep(self.masters.node_timeout).await;
        }
        for (value, key) in held {
            self.masters
                .delete_everywhere(&key, &value, self.masters.nothing_on_its_way())
                .await;
        }
        Ok(())
    }
}
