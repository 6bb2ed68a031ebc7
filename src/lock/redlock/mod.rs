//! Redlock: one lock over N independent Redis masters, granted by a majority.
//!
//! A lock on one Redis ([`super::redis`]) is lost when that Redis fails over before its replica got the
//! key. Redlock, as the Redis docs specify it, asks N masters that know nothing of each other (no
//! replication between them) and believes a majority. The masters have files of their own: one master
//! (`master.rs`), all of them asked at once (`masters.rs`), and a grant with its release (`grants.rs`).
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

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::trusted_until;
use crate::lock::parts::release_notices::{poll_until_granted_or_noticed, ReleaseNotices};
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::{DistributedLock, LockError, LockGuard, Owner};

mod master;
mod masters;
mod grants;

use grants::{new_value, Grants};
use masters::Masters;

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
        let masters = Masters::open(urls, options.node_timeout)?;
        // A first connection may take longer than one command: allow a few node timeouts.
        masters.check_a_majority_answers(options.node_timeout * 10).await?;
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
