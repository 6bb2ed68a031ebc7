//! A lock on etcd: keys under a lease, granted in revision order.
//!
//! etcd is a replicated key-value store (Raft). Every write gets a cluster-wide *revision*, a number that
//! only grows. Steps 1 to 3, 5 and 6 are the recipe of etcd's own Go `concurrency.Mutex`; step 4 waits
//! without its read after every event. Each step has a file of its own: the session (`session.rs`),
//! the queue (`queue.rs`), the wait (`wait.rs`, and its kept watch in `kept_watch.rs`), the release
//! (`release.rs`) and the release that queues the next buyer (`hand_over.rs`). This file is the lock.
//!
//! ## How it works
//! 1. **A session per instance.** One lease, kept alive every `ttl / 3`, holds every key this instance
//!    creates (`Session`). A lost one is replaced at the next acquire (`EtcdLock::current_session`).
//! 2. **Queue up.** An acquire puts `seckill/locks/<key>/<lease>` under the lease if it is absent, and lists
//!    the queue in the same transaction (`EtcdLock::enqueue`). The instance's acquires take turns for it.
//! 3. **The holder is the oldest key.** Whoever's key has the lowest create revision under the prefix holds
//!    the lock: first come, first served.
//! 4. **Wait until no key is older than yours.** A watch of the queue's deletes, kept open per lock, crosses
//!    off the keys ahead of ours; the last one's delete is the grant (`Connection::wait_until_first`). A
//!    waiter whose own key is deleted never held the lock, and queues again (`EtcdLock::queue_and_wait`).
//! 5. **Release** deletes the own key; so does an acquire that failed at any step after sending its key
//!    (a timeout, an error, a lost answer). The delete is *guaranteed*, as Curator's (`delete_in_background`).
//! 6. **Fencing token**: the own key's create revision. It grows with every grant, across every key and
//!    instance, because etcd's revision does.
//! 7. **Release and queue again, in one write.** When a buyer of this instance waits, the release deletes
//!    our key and queues the session's other key for that buyer ([`EtcdLock::hands_over`]).
//!
//! ## Limitations
//! - **Pauses.** A holder paused longer than the lease loses its keys without knowing; the guard's lease
//!   turns lost when renewals stop succeeding, and the stock refuses its older fencing token.
//! - **Availability.** etcd needs a majority of its members; without one, acquires fail (503), they never
//!   grant. A step that failed on the way is tried again on a member that answers (`retry_transient`, in `retry.rs`).
//! - **Dropped guards.** A guard dropped without release deletes its key in the background (guaranteed, as
//!   in step 5): the session outlives the grant, so waiting for a lease would be forever.
//! - **One acquire per instance at a time.** Concurrent acquires of one lock on one instance wait in the
//!   process for their turn; etcd sees one key per instance.
//!
//! ## References
//! - etcd `client/v3/concurrency/mutex.go`: <https://github.com/etcd-io/etcd/blob/main/client/v3/concurrency/mutex.go>
//! - Jepsen, "etcd 3.4.3" (2020), on locks and lost sessions: <https://jepsen.io/analyses/etcd-3.4.3>
//! - etcd API guarantees (revisions): <https://etcd.io/docs/latest/learning/api_guarantees/>

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::{DistributedLock, HandOver, LockError, LockGuard, Owner, Release};

mod retry;
mod session;
mod queue;
mod kept_watch;
mod release;
mod wait;
mod hand_over;

use kept_watch::KeptWatch;
use queue::{own_key_of, Enqueued, Queued, Turn};
use release::{delete_in_background, EtcdGrant};
use retry::{backend_error, RETRY_BUDGET};
use session::{lease_seconds, Session};
use wait::{First, SentKey};

const BACKEND: &str = "etcd";

/// What this strategy is (see [`crate::lock::description`]).
/// On etcd, with the key's revision as the token.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(Etcd),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the holder deletes its key, and the
/// waiter's watch on the queue reports it; with no older key left, that event is the
/// grant. See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (delete own key), to its commit", Etcd, Write, 0.5),
    step(
        "wake-up (watch event, sent at the commit as the answer is)",
        Etcd,
        Write,
        0.5,
    ),
];
/// How long opening a connection to etcd may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take. Short, because a request sent to a member that
/// died or is electing a leader may hang: another try goes to a member that answers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// How an [`EtcdLock`] connects.
#[derive(Clone, Debug)]
pub struct EtcdLockOptions {
    pub endpoints: Vec<String>,
    /// The lease TTL; etcd takes whole seconds, so it is rounded up.
    pub ttl: Duration,
}

/// The flags of `--lock etcd` (flattened into the config).
#[derive(Clone, Debug, clap::Args)]
pub struct EtcdArgs {
    /// etcd endpoints for `--lock etcd`, comma separated.
    #[arg(
        long,
        env = "SECKILL_ETCD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoints: Vec<String>,
}

/// Builds `--lock etcd` from its flags.
pub async fn build(args: &EtcdArgs, setup: &Setup) -> anyhow::Result<EtcdLock> {
    let options = EtcdLockOptions {
        endpoints: args.etcd_endpoints.clone(),
        ttl: setup.ttl,
    };
    EtcdLock::connect(options).await.with_context(|| {
        format!(
            "cannot reach etcd at {}.\n  Start it with `make services` (or `etcd`), or point \
             --etcd-endpoints / SECKILL_ETCD_ENDPOINTS at a running server",
            args.etcd_endpoints.join(",")
        )
    })
}

/// A lock whose queue is a set of etcd keys, ordered by revision.
pub struct EtcdLock {
    connection: Arc<Connection>,
    ttl_seconds: i64,
    session: tokio::sync::Mutex<Arc<Session>>,
    /// One mutex per lock: this instance's acquires of it take turns (step 2).
    turns: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    shut_down: ShutDownSwitch,
}

/// This instance's connection to etcd: its two clients, its kept watches and its
/// waiters' counts. The lock shares it with its grants, which queue the next owner as
/// they release (step 7).
struct Connection {
    client: Client,
    /// The kept watches' own client: it asks etcd to end a watch whose member has no
    /// leader (`hasleader`, as etcd's Go client does for its sessions), so a member cut
    /// off from the cluster cannot keep a watch open that never hears another delete.
    watch_client: Client,
    /// Step 4's kept watch of each lock's queue, by prefix, opened at the lock's first
    /// `acquire`. The service locks one key per stock segment, so there are few.
    kept_watches: StdMutex<HashMap<String, Arc<KeptWatch>>>,
    /// How many times a waiter was granted by a watch event (a holder's release).
    wakeups: AtomicU64,
    /// How many requests waiters sent while they waited: looks, watches and re-reads.
    requests_while_waiting: Arc<AtomicU64>,
}

impl EtcdLock {
    /// Connects and starts this instance's session (its lease).
    pub async fn connect(options: EtcdLockOptions) -> Result<Self, LockError> {
        let connect = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        let client = Client::connect(&options.endpoints, Some(connect.clone()))
            .await
            .map_err(backend_error)?;
        let watch_client = Client::connect(&options.endpoints, Some(connect.with_require_leader(true)))
            .await
            .map_err(backend_error)?;
        let ttl_seconds = lease_seconds(options.ttl);
        if Duration::from_secs(ttl_seconds as u64) != options.ttl {
            tracing::info!(
                requested_ms = options.ttl.as_millis() as u64,
                granted_s = ttl_seconds,
                "etcd leases are whole seconds: the lock TTL is rounded up"
            );
        }
        let session = Session::start(&client, ttl_seconds, Instant::now() + RETRY_BUDGET).await?;
        Ok(EtcdLock {
            connection: Arc::new(Connection {
                client,
                watch_client,
                kept_watches: StdMutex::default(),
                wakeups: AtomicU64::default(),
                requests_while_waiting: Arc::default(),
            }),
            ttl_seconds,
            session: tokio::sync::Mutex::new(Arc::new(session)),
            turns: StdMutex::default(),
            shut_down: ShutDownSwitch::new(BACKEND),
        })
    }

    /// The lease of the current session (tests revoke it to play a lost session).
    pub async fn lease_id(&self) -> i64 {
        self.session.lock().await.lease_id
    }

    /// How many times a waiter of this handle was granted by a holder's release (its event).
    pub fn wakeups(&self) -> u64 {
        self.connection.wakeups.load(Ordering::SeqCst)
    }

    /// How many requests the waiters of this handle sent while they waited.
    pub fn requests_while_waiting(&self) -> u64 {
        self.connection.requests_while_waiting.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl DistributedLock for EtcdLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        let deadline = Instant::now() + RETRY_BUDGET;
        let turn = self
            .turns_of(key)
            .try_lock_owned()
            .map_err(|_| LockError::Busy { key: key.to_owned() })?;
        let mut session = self.current_session(None, deadline).await?;
        let mut enqueued = self.enqueue(&session, key, owner, deadline).await;
        if let Ok(Enqueued::LeaseGone) = enqueued {
            session = self.current_session(Some(&session), deadline).await?;
            enqueued = self.enqueue(&session, key, owner, deadline).await;
        }
        let queued = match enqueued {
            Ok(Enqueued::Queued(queued)) => queued,
            Ok(Enqueued::LeaseGone) => {
                return Err(LockError::backend(
                    BACKEND,
                    std::io::Error::other("a new etcd lease vanished at once"),
                ))
            }
            Err(error) => {
                self.delete_in_background(own_key_of(key, &session), None, &session, turn);
                return Err(error);
            }
        };
        if queued.holds() {
            return Ok(self.grant(key, queued, &session, turn));
        }
        let revision = queued.known_revision();
        self.delete_in_background(queued.own_key, revision, &session, turn);
        Err(LockError::Busy { key: key.to_owned() })
    }

    /// Queues, then waits until no key older than ours is left (step 4) instead of polling.
    /// Every step runs within the deadline: an acquire answers by then, and a grant that
    /// came later is given back. Every way out but a grant deletes our key (step 5).
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let timed_out = || LockError::Timeout {
            key: key.to_owned(),
            waited: started.elapsed(),
        };
        let turn = tokio::time::timeout_at(deadline.into(), self.turns_of(key).lock_owned())
            .await
            .map_err(|_| timed_out())?;
        // The key this acquire may have put, for the clean-up of every way out but a grant.
        let mut sent = None;
        let waited =
            tokio::time::timeout_at(deadline.into(), self.queue_and_wait(key, owner, deadline, &mut sent)).await;
        let answer = match waited {
            Ok(Ok(first)) if Instant::now() <= deadline => return Ok(self.grant_first(key, first, turn)),
            Ok(Ok(_)) | Err(_) => Err(timed_out()),
            Ok(Err(error)) => Err(error),
        };
        if let Some(SentKey {
            own_key,
            revision,
            session,
        }) = sent
        {
            delete_in_background(self.connection.client.clone(), own_key, revision, session, Some(turn));
        }
        answer
    }

    /// Step 7: a release queues the next local buyer. When a buyer of this instance waits for the lock (the
    /// local queue asks, [`crate::sale::local_queue`]), the release is one transaction: if our key is still
    /// ours, delete it and put the session's other key (`<lease>.1`, or back to `<lease>`: a transaction
    /// may write a key once) for the next buyer, and list the queue. The delete grants the oldest waiter,
    /// as a release does. The new key is the newest, so it waits behind every entry already there, on the
    /// kept watch, as an acquire's key does ([`HandOver::Queued`]). Under load nearly every release has a
    /// local buyer behind it, so etcd commits one write per grant instead of two (the delete, and the next
    /// acquire's put). The instance's turn passes to the new key, and a place nobody claims is deleted.
    fn hands_over(&self) -> bool {
        true
    }

    /// Revokes the session's lease: every key of this instance goes at once.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        let lease_id = self.session.lock().await.lease_id;
        self.connection
            .client
            .clone()
            .lease_revoke(lease_id)
            .await
            .map_err(backend_error)?;
        Ok(())
    }
}

// The steps live in the files declared above. What is left here joins them to the contract.
// The grant's `Release` is here, not in `release.rs`: its hand-over is `hand_over.rs`, which
// builds on `release.rs`, and a file uses only the files declared before it.

impl EtcdLock {
    /// The grant of an acquire's key that is first in its queue.
    fn grant_first(&self, key: &str, first: First, turn: Turn) -> LockGuard {
        if first.woken {
            self.connection.wakeups.fetch_add(1, Ordering::SeqCst);
        }
        self.grant(key, first.queued, &first.session, turn)
    }

    fn grant(&self, key: &str, queued: Queued, session: &Arc<Session>, turn: Turn) -> LockGuard {
        self.connection.grant(key, queued, session, turn)
    }
}

#[async_trait]
impl Release for EtcdGrant {
    /// Step 5: deletes our key (`release.rs`).
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.delete_own_key().await
    }

    /// Step 7: deletes our key and queues `next` at the back, in one transaction.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        hand_over::queue_the_next_owner(self, next).await
    }
}
