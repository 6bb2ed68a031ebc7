//! The one trait every lock strategy implements, and the guard it hands out.
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
//! | [`redlock`] | `SET NX PX` on a majority of independent Redis masters, with validity | yes, with no fencing token |
//! | [`etcd`] | keys under a kept-alive lease, granted in revision order | yes |
//! | [`zookeeper`] | ephemeral sequential nodes, each waiter watching its predecessor | yes |
//! | [`mysql`] | a table row per held lock, unique by name, with owner, hold count and expiry | yes |
//! | [`mysql_version`] | optimistic: a compare-and-set on a version column | yes |
//! | [`degrade`] | `redis`, switching to `mysql_version` while Redis is down, and back | yes |
//!
//! Beside them: [`keepalive`] renews a lease while it is held, [`reentrant`] lets
//! an owner take a key it already holds, and [`permits`] is the semaphore the database
//! locks put in front of the database; [`lock_mode`] keeps the mode `degrade` switches. Which strategy runs, and the `atomic` script
//! that needs no lock at all, are chosen in [`crate::strategy`].
//!
//! ## The contract a backend must meet
//! 1. [`DistributedLock::try_acquire`] makes one attempt: a [`LockGuard`] if the key was
//!    free, [`LockError::Busy`] if someone else holds it, never a wait.
//! 2. [`DistributedLock::acquire`] waits up to a timeout, then answers
//!    [`LockError::Timeout`]. The default polls `try_acquire` with a jittered backoff,
//!    cut short by [`DistributedLock::wait_for_release`]; a queue-based backend
//!    overrides `acquire` and waits for its predecessor instead.
//! 3. The guard carries what the backend needs to give the key back
//!    ([`LockGuard::release`], explicit and async, never hidden in `Drop`), the
//!    fencing token of this grant if the backend has one, the validity deadline if
//!    the backend has one, and a [`Lease`] that turns *lost* when the backend can no
//!    longer promise exclusion. The critical section checks it before it writes.
//! 4. A guard dropped without `release` never holds the key forever: a lease backend
//!    stops renewing and the key expires with its lease (like a crashed holder); a
//!    session backend, whose session outlives one grant, deletes the key in the background.
//! 5. An acquire that failed on the client side (a timeout, a broken connection) must
//!    not leave a key behind that nobody will release: clean up with the same token.
//! 6. [`DistributedLock::shutdown`] gives back everything this handle holds (revokes
//!    its lease, closes its session) and refuses later acquires with
//!    [`LockError::ShutDown`].
//! 7. Reentrancy (an owner taking a key it holds) is kept for every backend in one
//!    place, [`reentrant::Reentrant`], unless the backend keeps it itself and says so
//!    with [`DistributedLock::keeps_reentrancy`].
//!
//! ## The conformance suite
//! `tests/lock_conformance.rs` runs the same tests against every strategy; a new
//! backend joins by adding one line there. It checks: concurrent read-modify-writes
//! lose no update; `try_acquire` fails fast on a held key; `acquire` times out;
//! a waiter gets a released key quickly; different keys do not block each other;
//! an owner re-enters a key it holds and frees it only at the last release; fencing
//! tokens grow strictly with every grant (backends with tokens); a lost lease is seen
//! by the holder and its write is refused (backends with leases); a holder that
//! vanishes without release frees the key within its lease; shutdown frees what was
//! held and refuses new acquires. Queue-based backends also pass `tests/queue_locks.rs`
//! (one release wakes one waiter, grants in request order).

pub mod degrade;
pub mod etcd;
pub mod keepalive;
pub mod local;
pub mod lock_mode;
pub mod mysql;
pub mod mysql_version;
pub mod none;
pub mod permits;
pub mod redis;
pub mod redlock;
pub mod reentrant;
pub mod zookeeper;

use std::borrow::Cow;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The key every instance locks before it touches the stock.
pub const STOCK_LOCK_KEY: &str = "lock:stock";

/// First pause of a waiter that was not woken by a release notification.
const BACKOFF_START: Duration = Duration::from_millis(2);
/// Longest pause between two attempts: bounds how stale a waiter can be.
const BACKOFF_MAX: Duration = Duration::from_millis(50);

/// Why a lock could not be taken or given back.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the key right now (only from `try_acquire`).
    #[error("lock `{key}` is held by someone else")]
    Busy { key: String },
    /// The key stayed taken for the whole acquire timeout.
    #[error("gave up on lock `{key}` after waiting {waited:?}")]
    Timeout { key: String, waited: Duration },
    /// The lease ran out (or was taken over) before release:
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
    /// The lock was shut down: the process is stopping.
    #[error("the {backend} lock is shut down; no new locks are granted")]
    ShutDown { backend: &'static str },
}

impl LockError {
    pub fn backend(backend: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        LockError::Backend { backend, source: Box::new(source) }
    }
}

/// Who asks for a lock. An owner is one logical caller (one sale, one job) that takes
/// its locks one after another; asking again for a key it holds is granted at once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// A new owner, unique across every instance: `label` followed by 64 random bits.
    pub fn new(label: &str) -> Self {
        Owner(format!("{label}:{:016x}", rand::random::<u64>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A number that grows with every grant of one key, across everything that grants it.
///
/// A storage that remembers the highest token it has seen for a key can refuse a
/// holder whose lease already ran out: its token is older (Kleppmann's fencing token).
/// Tokens compare by `(epoch, counter)`: the counter comes from the backend; the epoch
/// grows whenever a strategy switches to another token source, so that a token from
/// the new source is newer than every token from the old one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencingToken {
    /// What issued the counter, for reports: `redis` for `INCR lock:stock:fence`.
    pub source: Cow<'static, str>,
    pub epoch: u64,
    pub counter: u64,
}

impl FencingToken {
    pub fn new(source: &'static str, epoch: u64, counter: u64) -> Self {
        FencingToken { source: Cow::Borrowed(source), epoch, counter }
    }

    /// The total order of tokens: epoch first, then counter.
    pub fn order(&self) -> (u64, u64) {
        (self.epoch, self.counter)
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}.{}", self.source, self.epoch, self.counter)
    }
}

/// What a lease looks like from the holder's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The backend promises exclusion until further notice (a connected session).
    Held,
    /// The backend promises exclusion until this instant (renewal moves it on).
    HeldUntil(Instant),
    /// The lease is gone: someone else may hold the key now.
    Lost,
}

/// The holder's view of its lease: is the lock still ours?
///
/// Fed by whatever the backend learns (a renewal, a session event). A lock without
/// a lease (in-process, none) is held until it is released.
#[derive(Clone, Debug)]
pub struct Lease(Option<watch::Receiver<LeaseState>>);

impl Lease {
    /// A lease that never ends by itself.
    pub fn unbounded() -> Self {
        Lease(None)
    }

    /// A lease whose state the backend publishes through `sender`.
    /// The backend dropping the sender counts as losing the lease.
    pub fn watched(state: LeaseState) -> (watch::Sender<LeaseState>, Self) {
        let (sender, receiver) = watch::channel(state);
        (sender, Lease(Some(receiver)))
    }

    /// True while the backend still promises exclusion, judged now.
    pub fn is_held(&self) -> bool {
        match &self.0 {
            None => true,
            Some(receiver) => match *receiver.borrow() {
                LeaseState::Held => receiver.has_changed().is_ok(),
                LeaseState::HeldUntil(until) => Instant::now() < until && receiver.has_changed().is_ok(),
                LeaseState::Lost => false,
            },
        }
    }

    /// Held only while both are, for a grant that rests on two leases (see [`degrade`]).
    /// A task follows both and ends when the combined lease is lost or nobody holds it.
    pub fn both(first: Lease, second: Lease) -> Lease {
        let (mut first, mut second) = match (first.0, second.0) {
            (None, second) => return Lease(second),
            (first, None) => return Lease(first),
            (Some(first), Some(second)) => (first, second),
        };
        fn state_of(receiver: &watch::Receiver<LeaseState>) -> LeaseState {
            if receiver.has_changed().is_err() {
                LeaseState::Lost // the backend dropped its side
            } else {
                *receiver.borrow()
            }
        }
        fn earliest(first: LeaseState, second: LeaseState) -> LeaseState {
            match (first, second) {
                (LeaseState::Lost, _) | (_, LeaseState::Lost) => LeaseState::Lost,
                (LeaseState::Held, other) | (other, LeaseState::Held) => other,
                (LeaseState::HeldUntil(a), LeaseState::HeldUntil(b)) => LeaseState::HeldUntil(a.min(b)),
            }
        }
        let (sender, combined) = Lease::watched(earliest(state_of(&first), state_of(&second)));
        tokio::spawn(async move {
            loop {
                let gone = tokio::select! {
                    changed = first.changed() => changed.is_err(),
                    changed = second.changed() => changed.is_err(),
                    () = sender.closed() => return,
                };
                let state = if gone { LeaseState::Lost } else { earliest(state_of(&first), state_of(&second)) };
                sender.send_replace(state);
                if state == LeaseState::Lost {
                    return;
                }
            }
        });
        combined
    }

    /// Completes when the lease is lost: for `tokio::select!` against a critical section.
    pub async fn lost(&self) {
        let Some(receiver) = &self.0 else { return std::future::pending().await };
        let mut receiver = receiver.clone();
        loop {
            let state = *receiver.borrow_and_update();
            match state {
                LeaseState::Lost => return,
                LeaseState::Held => {
                    if receiver.changed().await.is_err() {
                        return;
                    }
                }
                LeaseState::HeldUntil(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until.into()) => return,
                        changed = receiver.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}

/// How a backend gives one grant back. Each backend keeps in it what release needs
/// (a token, a connection, a session, a permit).
#[async_trait]
pub trait Release: Send + Sync {
    /// Gives the key back. [`LockError::Lost`] if it was no longer ours.
    async fn release(self: Box<Self>) -> Result<(), LockError>;
}

/// A wrapper's guard gives back the inner grant it was made from.
#[async_trait]
impl Release for Box<dyn Release> {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        (*self).release().await
    }
}

/// Nothing to give back: the grant ends when its guard goes away.
pub struct NothingToRelease;

#[async_trait]
impl Release for NothingToRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        Ok(())
    }
}

/// Proof that the caller holds a key. Give it back with [`LockGuard::release`].
///
/// Its fields are private: a caller can read the token but not forge a guard for
/// someone else's grant.
pub struct LockGuard {
    key: String,
    fencing_token: Option<FencingToken>,
    valid_until: Option<Instant>,
    lease: Lease,
    releaser: Box<dyn Release>,
}

impl LockGuard {
    /// A grant of `key` that `releaser` knows how to give back; no token, no lease.
    pub fn new(key: &str, releaser: impl Release + 'static) -> Self {
        LockGuard {
            key: key.to_owned(),
            fencing_token: None,
            valid_until: None,
            lease: Lease::unbounded(),
            releaser: Box::new(releaser),
        }
    }

    pub fn with_fencing_token(mut self, token: FencingToken) -> Self {
        self.fencing_token = Some(token);
        self
    }

    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = lease;
        self
    }

    /// The holder must not write after `deadline` (Redlock's remaining validity).
    pub fn with_validity(mut self, deadline: Instant) -> Self {
        self.valid_until = Some(deadline);
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn fencing_token(&self) -> Option<&FencingToken> {
        self.fencing_token.as_ref()
    }

    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// False once the lease is lost or the validity deadline passed. Checking it before
    /// a write narrows the window for a late writer; only a fencing token closes it.
    pub fn is_held(&self) -> bool {
        self.lease.is_held() && self.valid_until.is_none_or(|deadline| Instant::now() < deadline)
    }

    /// Gives the key back. [`LockError::Lost`] if the lease had already run out.
    pub async fn release(self) -> Result<(), LockError> {
        self.releaser.release().await
    }

    /// Splits the guard into its parts, for a wrapper that hands out guards of its own.
    pub(crate) fn into_parts(self) -> (GuardInfo, Box<dyn Release>) {
        let info = GuardInfo {
            key: self.key,
            fencing_token: self.fencing_token,
            valid_until: self.valid_until,
            lease: self.lease,
        };
        (info, self.releaser)
    }
}

/// Everything in a guard but the way to release it.
#[derive(Clone, Debug)]
pub(crate) struct GuardInfo {
    pub key: String,
    pub fencing_token: Option<FencingToken>,
    pub valid_until: Option<Instant>,
    pub lease: Lease,
}

impl GuardInfo {
    pub fn into_guard(self, releaser: impl Release + 'static) -> LockGuard {
        LockGuard {
            key: self.key,
            fencing_token: self.fencing_token,
            valid_until: self.valid_until,
            lease: self.lease,
            releaser: Box::new(releaser),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("valid_until", &self.valid_until)
            .finish_non_exhaustive()
    }
}

/// A mutual-exclusion lock on a string key, shared by every instance of the service.
#[async_trait]
pub trait DistributedLock: Send + Sync {
    /// One attempt: the guard if the key was free, [`LockError::Busy`] if not.
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError>;

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
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        poll_until_granted(key, timeout, || self.try_acquire(key, owner), |pause| self.wait_for_release(key, pause))
            .await
    }

    /// Whether the backend itself counts an owner's repeated grants of one key
    /// (a hold count in its own storage). If not, [`reentrant::Reentrant`] does it.
    fn keeps_reentrancy(&self) -> bool {
        false
    }

    /// Gives back everything this handle holds and refuses later acquires.
    /// The default has nothing to give back.
    async fn shutdown(&self) -> Result<(), LockError> {
        Ok(())
    }

    /// What the lock counted since it started, for backends that count (the database
    /// locks, whose cost per sale is the lesson).
    fn stats(&self) -> Option<LockStats> {
        None
    }
}

/// What a database lock counted since it started, as `/healthz` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockStats {
    /// Acquire attempts that reached the backend.
    pub attempts: u64,
    /// Grants, reentries not included.
    pub grants: u64,
    /// Optimistic locks: compare-and-sets that lost to another writer. 0 for the others.
    pub conflicts: u64,
    /// The semaphore in front of the backend.
    pub permits: permits::PermitStats,
    /// `redis-degrade` only: the mode, the switches, the time in each mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degrade: Option<degrade::DegradeStats>,
}

/// Locks a std mutex even if a task panicked while holding it: the maps the locks keep
/// behind one (held grants, waiters, hold counts) stay consistent between statements,
/// so there is nothing to repair, and a panic elsewhere must not stop every sale.
pub(crate) fn unpoisoned<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The polling loop behind the default [`DistributedLock::acquire`], for backends
/// that override `acquire` only to prepare something before they poll.
pub async fn poll_until_granted<Try, TryFut, Wait, WaitFut>(
    key: &str,
    timeout: Duration,
    mut attempt: Try,
    mut wait: Wait,
) -> Result<LockGuard, LockError>
where
    Try: FnMut() -> TryFut,
    TryFut: std::future::Future<Output = Result<LockGuard, LockError>>,
    Wait: FnMut(Duration) -> WaitFut,
    WaitFut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut pause = BACKOFF_START;
    loop {
        match attempt().await {
            Err(LockError::Busy { .. }) => {}
            granted_or_failed => return granted_or_failed,
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Timeout { key: key.to_owned(), waited: now - started });
        }
        let jittered = pause.mul_f64(rand::rng().random_range(0.5..1.5));
        wait(jittered.min(deadline - now)).await;
        pause = (pause * 2).min(BACKOFF_MAX);
    }
}
