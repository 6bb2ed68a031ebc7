//! The one trait every lock strategy implements, and the one `match` that builds them.
//!
//! A flash sale is a read-modify-write on a shared counter: read `stock`, check it is
//! positive, write `stock - 1`. Two buyers who read the same value both sell the same
//! unit. A *lock* makes the three steps happen one buyer at a time, across every
//! instance of the service. Each file in this folder is one way to build such a lock:
//!
//! | file | strategy | holds across two instances? |
//! | --- | --- | --- |
//! | [`none`] | no lock at all | no: the baseline that oversells |
//! | [`local`] | an in-process mutex | no: each process has its own mutex |
//! | [`redis`] | `SET key token NX PX ttl`, owner-checked release, renewal | yes |
//!
//! The `atomic` strategy is not a lock: it moves the whole check-and-decrement into one
//! Redis script (see [`crate::stock`]), which is why it is the speed ceiling.
//!
//! ## The contract
//! 1. [`DistributedLock::acquire`] waits, up to a timeout, until this caller holds the key.
//! 2. The caller does its critical section while it holds the returned [`LockGuard`].
//! 3. [`DistributedLock::release`] gives the key back. Release is explicit and async,
//!    never hidden in `Drop`: a network call in `Drop` would block or be lost silently.
//!    A guard dropped without `release` behaves like a crashed holder: its renewal
//!    stops and the backend frees the key when the lease runs out.

pub mod keepalive;
pub mod local;
pub mod none;
pub mod redis;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rand::Rng;

use crate::config::Config;
pub use keepalive::KeepAlive;

/// The key every instance locks before it touches the stock.
pub const STOCK_LOCK_KEY: &str = "lock:stock";

/// First pause of a waiter that was not woken by a release notification.
const BACKOFF_START: Duration = Duration::from_millis(2);
/// Longest pause between two attempts: bounds how stale a waiter can be.
const BACKOFF_MAX: Duration = Duration::from_millis(50);

/// Every strategy the service can run with; `--lock <strategy>` picks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// No lock: the read-check-write races and the sale oversells.
    None,
    /// An in-process mutex: correct inside one instance, oversells across two.
    Local,
    /// Redis `SET NX PX` with an owner token, owner-checked release and renewal.
    Redis,
    /// No lock: one Lua script does the whole check-and-decrement inside Redis.
    Atomic,
}

impl Strategy {
    /// The name used on the command line, in responses and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Local => "local",
            Strategy::Redis => "redis",
            Strategy::Atomic => "atomic",
        }
    }

    /// Whether two instances running this strategy are expected to oversell.
    pub fn expected_to_oversell(self) -> bool {
        matches!(self, Strategy::None | Strategy::Local)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a lock could not be taken or given back.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the key right now (only from `try_acquire`).
    #[error("lock `{key}` is held by someone else")]
    Busy { key: String },
    /// The key stayed taken for the whole acquire timeout.
    #[error("gave up on lock `{key}` after waiting {waited:?}")]
    Timeout { key: String, waited: Duration },
    /// The lease ran out (or was renewed by someone else) before release:
    /// another holder may have run its critical section at the same time.
    #[error("lock `{key}` was lost before release: its lease expired or another owner took it")]
    Lost { key: String },
    /// The backend itself failed: down, unreachable, or answered nonsense.
    #[error("{backend} failed: {source}")]
    Backend {
        backend: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl LockError {
    pub fn backend(backend: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        LockError::Backend { backend, source: Box::new(source) }
    }
}

/// Proof that the caller holds a key. Give it back with [`DistributedLock::release`].
pub struct LockGuard {
    /// The locked key.
    pub key: String,
    /// Unique per acquisition: the backend releases only for the token it granted.
    pub token: String,
    /// A number that grows with every acquisition, when the backend can give one.
    /// A storage that remembers the highest token it saw can refuse a late writer
    /// whose lease already ran out (Kleppmann's fencing token).
    pub fencing_token: Option<u64>,
    /// When the lock was granted.
    pub acquired_at: Instant,
    /// Background renewal, for backends whose lease would otherwise expire.
    pub(crate) keepalive: Option<KeepAlive>,
    /// Whatever else the backend must keep alive while the lock is held
    /// (the in-process mutex guard, for instance). Dropped on release.
    pub(crate) held: Option<Box<dyn Any + Send + Sync>>,
}

impl LockGuard {
    pub(crate) fn new(key: &str, token: String) -> Self {
        LockGuard {
            key: key.to_owned(),
            token,
            fencing_token: None,
            acquired_at: Instant::now(),
            keepalive: None,
            held: None,
        }
    }

    /// False once renewal found that the lease is gone. Checking this before a write
    /// narrows the window for a late writer; only a fencing token closes it.
    pub fn is_held(&self) -> bool {
        self.keepalive.as_ref().is_none_or(|k| !k.is_lost())
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

/// A mutual-exclusion lock on a string key, shared by every instance of the service.
#[async_trait]
pub trait DistributedLock: Send + Sync {
    /// The strategy's name, as on the command line.
    fn name(&self) -> &'static str;

    /// One attempt: the guard if the key was free, [`LockError::Busy`] if not.
    async fn try_acquire(&self, key: &str) -> Result<LockGuard, LockError>;

    /// Gives the key back. [`LockError::Lost`] if the lease had already run out.
    async fn release(&self, guard: LockGuard) -> Result<(), LockError>;

    /// Waits until the key may be free again, or `pause` has passed.
    /// The default just sleeps; backends that can announce a release override it.
    async fn wait_for_release(&self, _key: &str, pause: Duration) {
        tokio::time::sleep(pause).await;
    }

    /// Retries [`try_acquire`](Self::try_acquire) until it succeeds or `timeout` passes.
    ///
    /// Between attempts the waiter sleeps a jittered, doubling pause (2 ms up to 50 ms),
    /// cut short when the backend announces a release. The jitter keeps a crowd of
    /// waiters from retrying in lockstep.
    async fn acquire(&self, key: &str, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut pause = BACKOFF_START;
        loop {
            match self.try_acquire(key).await {
                Err(LockError::Busy { .. }) => {}
                granted_or_failed => return granted_or_failed,
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::Timeout { key: key.to_owned(), waited: now - started });
            }
            let jittered = pause.mul_f64(rand::rng().random_range(0.5..1.5));
            self.wait_for_release(key, jittered.min(deadline - now)).await;
            pause = (pause * 2).min(BACKOFF_MAX);
        }
    }
}

/// What guards the stock: a lock around a read-modify-write, or one atomic script.
#[derive(Clone)]
pub enum Guarding {
    Lock(Arc<dyn DistributedLock>),
    AtomicScript,
}

/// Builds what `config.lock` names. The one place that knows every strategy.
pub async fn build(config: &Config, redis: &::redis::Client) -> anyhow::Result<Guarding> {
    let lock: Arc<dyn DistributedLock> = match config.lock {
        Strategy::None => Arc::new(none::NoLock),
        Strategy::Local => Arc::new(local::LocalLock::default()),
        Strategy::Redis => Arc::new(redis::RedisLock::connect(redis, config.redis_lock_options()).await?),
        Strategy::Atomic => return Ok(Guarding::AtomicScript),
    };
    Ok(Guarding::Lock(lock))
}
