//! A lock on etcd: keys under a lease, granted in revision order.
//!
//! etcd is a replicated key-value store (Raft). Every write gets a cluster-wide *revision*, a number that
//! only grows. Steps 1 to 3, 5 and 6 are the recipe of etcd's own Go `concurrency.Mutex`; step 4 waits
//! without its read after every event. Two steps have files of their own: step 4's kept watch
//! (`kept_watch.rs`) and step 7, the release that queues the next buyer (`hand_over.rs`).
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
//!   grant. A step that failed on the way is tried again on a member that answers (`retry_transient`).
//! - **Dropped guards.** A guard dropped without release deletes its key in the background (guaranteed, as
//!   in step 5): the session outlives the grant, so waiting for a lease would be forever.
//! - **One acquire per instance at a time.** Concurrent acquires of one lock on one instance wait in the
//!   process for their turn; etcd sees one key per instance.
//!
//! ## References
//! - etcd `client/v3/concurrency/mutex.go`: <https://github.com/etcd-io/etcd/blob/main/client/v3/concurrency/mutex.go>
//! - Jepsen, "etcd 3.4.3" (2020), on locks and lost sessions: <https://jepsen.io/analyses/etcd-3.4.3>
//! - etcd API guarantees (revisions): <https://etcd.io/docs/latest/learning/api_guarantees/>

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::keepalive::KeepAlive;
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::parts::unpoisoned;
use crate::lock::{DistributedLock, FencingToken, HandOver, Lease, LockError, LockGuard, Owner, Release};

mod kept_watch;
mod hand_over;

use kept_watch::{wait_on_the_kept_watch, watch_deletes, Deletes, KeptWatch};

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
/// Every lock key lives under this prefix, then the lock's name.
const KEY_PREFIX: &str = "seckill/locks/";
/// Ends a session's second key in a queue (step 7).
const OTHER_KEY_SUFFIX: &str = ".1";
/// How long opening a connection to etcd may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take. Short, because a request sent to a member that
/// died or is electing a leader may hang: another try goes to a member that answers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a step outside an acquire's own deadline (connect, release, a try-acquire)
/// keeps trying after transient failures: longer than an election.
const RETRY_BUDGET: Duration = Duration::from_secs(3);
/// After a second transient failure in a row, how long to wait before trying again.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The pause before each try again after transient failures. The first try again goes
/// at once: the client spreads requests over the members, so it most likely reaches one
/// that answers (a dead member's refusal takes no time). Later ones wait
/// [`RETRY_PAUSE`], so a cluster that is down is not asked in a spin.
#[derive(Default)]
struct RetryPauses {
    failures_in_a_row: u32,
}

impl RetryPauses {
    /// After a failure: waits before the next try.
    async fn after_a_failure(&mut self) {
        self.failures_in_a_row += 1;
        if self.failures_in_a_row > 1 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// After a success: the next failure is a first one again.
    fn reset(&mut self) {
        self.failures_in_a_row = 0;
    }
}

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

/// This instance's turn at one lock, held from the enqueue until its key is deleted.
type Turn = tokio::sync::OwnedMutexGuard<()>;

/// A keep-alive stream: where renewals are sent, and where their answers come back.
type KeepAliveStream = (LeaseKeeper, LeaseKeepAliveStream);

/// One lease, kept alive for as long as this value lives (step 1). At start the lock grants one and keeps
/// it alive ([`crate::lock::parts::keepalive`], every `ttl / 3`). Every key this instance creates is
/// attached to it, so if the instance dies, the lease runs out and all its keys vanish together.
struct Session {
    lease_id: i64,
    lease: Lease,
    _keepalive: KeepAlive,
}

/// One grant: the own key, deleted on release, and the turn that goes with it.
struct EtcdGrant {
    connection: Arc<Connection>,
    /// The lock's name.
    key: String,
    own_key: Option<(String, Turn)>,
    /// The own key's create revision: the grant's fencing token.
    own_revision: i64,
    /// Weak, so a grant does not keep its session alive: when the instance goes, its lease goes.
    session: Weak<Session>,
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

// The steps, in the order the protocol runs them.

impl Session {
    /// Grants a lease and keeps it alive every `ttl / 3`.
    /// Tries again after transient failures until `deadline` (an election may be on).
    async fn start(client: &Client, ttl_seconds: i64, deadline: Instant) -> Result<Session, LockError> {
        let client = client.clone();
        let (granted, sent) = retry_transient(deadline, || {
            let mut client = client.clone();
            async move {
                let sent = Instant::now();
                client
                    .lease_grant(ttl_seconds, None)
                    .await
                    .map(|granted| (granted, sent))
            }
        })
        .await
        .map_err(backend_error)?;
        let lease_id = granted.id();
        // etcd may grant more than asked (its minimum TTL); the lease is what it granted.
        let ttl = Duration::from_secs(granted.ttl().max(ttl_seconds) as u64);
        let opened = retry_transient(deadline, || {
            let mut client = client.clone();
            async move { client.lease_keep_alive(lease_id).await }
        })
        .await
        .map_err(backend_error)?;
        // The keep-alive stream, or None after a renewal failed or timed out: the next
        // renewal opens a new one, on whichever member answers (the lease lives in the
        // cluster, not in the stream).
        let slot: Arc<StdMutex<Option<KeepAliveStream>>> = Arc::new(StdMutex::new(Some(opened)));
        let (keepalive, lease) = KeepAlive::spawn(BACKEND, &format!("lease {lease_id:x}"), ttl, sent, move || {
            renew(client.clone(), lease_id, slot.clone())
        });
        Ok(Session {
            lease_id,
            lease,
            _keepalive: keepalive,
        })
    }
}

/// One renewal of the session's lease: `Ok(true)` when etcd renewed it, `Ok(false)` when
/// the lease is gone. The stream leaves its slot for the renewal and comes back only with
/// the answer to it. A renewal that times out is dropped with its stream: a stream kept
/// would hand the late answer to the next renewal, which would count a renewal that may
/// never have reached etcd.
async fn renew(
    mut client: Client,
    lease_id: i64,
    slot: Arc<StdMutex<Option<KeepAliveStream>>>,
) -> Result<bool, LockError> {
    let taken = unpoisoned(&slot).take();
    let Some((mut keeper, mut stream)) = taken else {
        // Opening a stream sends a renewal and reads its answer: this renewal.
        let opened = client.lease_keep_alive(lease_id).await.map_err(backend_error)?;
        *unpoisoned(&slot) = Some(opened);
        return Ok(true);
    };
    keeper.keep_alive().await.map_err(backend_error)?;
    match stream.message().await.map_err(backend_error)? {
        Some(answer) => {
            *unpoisoned(&slot) = Some((keeper, stream));
            // A TTL of 0 means the lease is gone: expired or revoked.
            Ok(answer.ttl() > 0)
        }
        None => Err(LockError::backend(
            BACKEND,
            std::io::Error::other("keep-alive stream closed"),
        )),
    }
}

impl EtcdLock {
    /// The current session, or a new one if the last lease was lost, or if it is `dead`: a session whose
    /// lease the server no longer has. The lost lease is revoked ([`revoke_in_background`]).
    async fn current_session(&self, dead: Option<&Arc<Session>>, deadline: Instant) -> Result<Arc<Session>, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let mut session = self.session.lock().await;
        if !session.lease.is_held() || dead.is_some_and(|dead| Arc::ptr_eq(dead, &session)) {
            tracing::warn!(
                lease = session.lease_id,
                "the etcd session was lost; starting a new one"
            );
            let new_session = Arc::new(Session::start(&self.connection.client, self.ttl_seconds, deadline).await?);
            let lost = std::mem::replace(&mut *session, new_session);
            revoke_in_background(
                self.connection.client.clone(),
                lost.lease_id,
                Duration::from_secs(2 * self.ttl_seconds as u64),
            );
        }
        Ok(session.clone())
    }

    /// Step 2's turn: this instance's acquires of `key` share one queue key, so they take turns for it. A
    /// session has one key per lock, so etcd's history holds one key per instance, not one dead key per
    /// grant.
    fn turns_of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        unpoisoned(&self.turns).entry(key.to_owned()).or_default().clone()
    }

    /// Steps 2 and 3: queues the session's key under `key`'s prefix, in a transaction that creates it only
    /// if it is absent, and lists the names in the queue with their create revisions in the same answer.
    /// Sent again after a transient failure. If the key is there already, it is ours: a try whose answer
    /// was lost created it, and we take it up instead of queueing twice.
    async fn enqueue(
        &self,
        session: &Arc<Session>,
        key: &str,
        owner: &Owner,
        deadline: Instant,
    ) -> Result<Enqueued, LockError> {
        let prefix = prefix_of(key);
        let own_key = own_key_of(key, session);
        let put = PutOptions::new().with_lease(session.lease_id);
        let txn = Txn::new()
            .when([Compare::create_revision(own_key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(own_key.clone(), owner.as_str(), Some(put)),
                list_the_queue(&prefix),
            ])
            .or_else([TxnOp::get(own_key.clone(), None), list_the_queue(&prefix)]);
        let response = match retry_transient(deadline, || {
            let (mut client, txn) = (self.connection.client.clone(), txn.clone());
            async move { client.txn(txn).await }
        })
        .await
        {
            Ok(response) => response,
            Err(error) if is_lease_gone(&error) => return Ok(Enqueued::LeaseGone),
            Err(error) => return Err(backend_error(error)),
        };
        let revision = response.header().map_or(0, |header| header.revision());
        let responses = response.op_responses();
        let own_revision = match (response.succeeded(), responses.first()) {
            (true, _) => revision,
            (false, Some(TxnOpResponse::Get(get))) => get.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        };
        let ahead = keys_ahead(responses.get(1), own_revision);
        Ok(Enqueued::Queued(Queued {
            prefix,
            own_key,
            own_revision,
            ahead,
            revision,
        }))
    }

    /// Steps 2 to 4 of an acquire. The caller cuts them off at `deadline`, wherever they are. `sent` names
    /// the key they may have put, for the caller's clean-up. (A session start cut off leaves a lease nobody
    /// renews: it runs out, with no key on it.) A waiter whose key went while it waited never held the
    /// lock, and queues again at the back. That is the check etcd added after Jepsen found that a waiter
    /// could believe it held a lock its expired session had lost. It takes a new session only if its lease
    /// is lost: someone else may have deleted the key, and the lease holds this instance's other grants
    /// too. If etcd ended the lease, the enqueue says so.
    async fn queue_and_wait(
        &self,
        key: &str,
        owner: &Owner,
        deadline: Instant,
        sent: &mut Option<SentKey>,
    ) -> Result<First, LockError> {
        let mut dead_session: Option<Arc<Session>> = None;
        loop {
            let session = self.current_session(dead_session.take().as_ref(), deadline).await?;
            // Listen before queueing: every delete after the enqueue's revision is heard.
            let news = self.connection.news_of(&prefix_of(key)).await;
            // The put may happen even if its answer is lost; its revision is then unknown.
            *sent = Some(SentKey {
                own_key: own_key_of(key, &session),
                revision: None,
                session: Arc::downgrade(&session),
            });
            let queued = match self.enqueue(&session, key, owner, deadline).await? {
                Enqueued::Queued(queued) => queued,
                Enqueued::LeaseGone => {
                    // etcd refused the put with its lease: no key was made.
                    *sent = None;
                    dead_session = Some(session);
                    continue;
                }
            };
            sent.replace(SentKey {
                own_key: queued.own_key.clone(),
                revision: queued.known_revision(),
                session: Arc::downgrade(&session),
            });
            if queued.holds() {
                return Ok(First::new(queued, session, false));
            }
            let waited = self.connection.wait_until_first(&queued, news, &session).await?;
            if let Wait::First { woken } = waited {
                if session.lease.is_held() {
                    return Ok(First::new(queued, session, woken));
                }
            }
            // The wait ended otherwise: is our key still there, and our session alive?
            // (Jepsen's finding: a key that vanished with its session is not a grant.)
            let own = retry_transient(deadline, || {
                let (mut client, own_key) = (self.connection.client.clone(), queued.own_key.clone());
                self.connection.requests_while_waiting.fetch_add(1, Ordering::SeqCst);
                async move { client.get(own_key, None).await }
            })
            .await
            .map_err(backend_error)?;
            let ours = own
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == queued.own_revision);
            if ours && session.lease.is_held() {
                return Ok(First::new(queued, session, false));
            }
            *sent = None;
            if session.lease.is_held() {
                // Someone deleted our key, or etcd ended our lease and we have not heard
                // yet. The next enqueue on this session tells which (`LeaseGone`).
                tracing::info!(key, "our etcd key was deleted while we waited; queueing again");
                continue;
            }
            // In case the lease outlived our view of it. The delete is guarded by our
            // key's revision, so it needs no turn: it cannot touch a later key of that name.
            delete_in_background(
                self.connection.client.clone(),
                queued.own_key,
                Some(queued.own_revision),
                Arc::downgrade(&session),
                None,
            );
            dead_session = Some(session);
            tracing::info!(
                key,
                "the etcd session ended while waiting; queueing again on a new session"
            );
        }
    }

    /// Step 5 for an acquire that failed: our key goes, guaranteed, in the background.
    /// `revision` is the one our put created, `None` if its answer was lost.
    fn delete_in_background(&self, own_key: String, revision: Option<i64>, session: &Arc<Session>, turn: Turn) {
        delete_in_background(
            self.connection.client.clone(),
            own_key,
            revision,
            Arc::downgrade(session),
            Some(turn),
        );
    }

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

impl Connection {
    /// Step 4: waits until no key older than ours is left under the prefix, or our session
    /// is lost: on the kept watch (`news`) while it lasts, then on looks and a watch of
    /// our own. A watch that breaks (its member died) is opened again, so the caller
    /// bounds this wait.
    ///
    /// The kept watch ([`KeptWatch`]) is one per lock, on the queue's deletes only, opened at the lock's
    /// first `acquire` and kept for the instance's life. A waiter listens to it from before its enqueue, so
    /// every delete after the enqueue's revision reaches it, and crosses those keys off as they are
    /// deleted, in revision order ([`cross_off`]). The event that crosses off the last one is the grant,
    /// with no read after it: no key can join ahead of ours, as revisions only grow. A waiter sends etcd
    /// nothing while it waits. Every waiter hears every delete under the prefix; etcd pushes them. Only the
    /// one whose list empties acts: a release costs one request, the holder's delete. (etcd's Go client
    /// opens a watch per wait, reads after every event to find the next key to watch, and once more at the
    /// end for the check on its own key.)
    ///
    /// The kept watch breaks when its member died, or has had no leader for three election timeouts: etcd
    /// then ends a watch that sent its `hasleader` flag, as this one does. Its waiter then looks at the
    /// queue, opens a watch of its own and looks again, while the kept watch is opened again for the next
    /// waits. Every watch starts at the current revision: a watch from a past revision is caught up by a
    /// loop that etcd runs every 100 ms, which would stall a hand-over that races the watch.
    async fn wait_until_first(
        &self,
        queued: &Queued,
        news: Option<broadcast::Receiver<Deletes>>,
        session: &Session,
    ) -> Result<Wait, LockError> {
        if let Some(news) = news.filter(|_| !queued.ahead.is_empty()) {
            match wait_on_the_kept_watch(queued, news, session).await {
                Some(waited) => return Ok(waited),
                None => tracing::debug!("the kept etcd watch broke during a wait; looking at the queue"),
            }
        }
        let mut pauses = RetryPauses::default();
        loop {
            match self.watch_the_queue(queued, session, &mut pauses).await {
                Ok(waited) => return Ok(waited),
                Err(error) if error.transient => {
                    tracing::debug!(error = %error.source, "an etcd watch broke; watching again");
                    pauses.after_a_failure().await;
                }
                Err(error) => return Err(backend_error(error.source)),
            }
        }
    }

    /// The wait without the kept watch: a look at the queue, then one watch on the whole
    /// of it, then a second look. The watch's delete events cross off the keys the
    /// second look saw ahead of ours ([`cross_off`]); the event that crosses off the
    /// last one is the grant.
    async fn watch_the_queue(
        &self,
        queued: &Queued,
        session: &Session,
        pauses: &mut RetryPauses,
    ) -> Result<Wait, WatchFailure> {
        let mut client = self.client.clone();
        // The first look saves the watch when the holder left while we queued.
        if let Look::Decided(waited) = self.look(&mut client, queued).await? {
            return Ok(waited);
        }
        // Watch from now on, then look again: a delete before the second look is in it,
        // one after it on the watch. (A watch that starts at a past revision would see
        // both, but etcd catches such a watcher up in a loop that runs every 100 ms: every
        // hand-over would wait for it.)
        self.requests_while_waiting.fetch_add(1, Ordering::SeqCst);
        let mut stream = watch_deletes(&mut client, &queued.prefix).await?;
        pauses.reset();
        let (looked_at, mut ahead) = match self.look(&mut client, queued).await? {
            Look::Decided(waited) => return Ok(waited),
            Look::Ahead { revision, keys } => (revision, keys),
        };
        let first = async {
            while let Some(message) = stream.message().await? {
                if message.canceled() {
                    return Err(watch_canceled());
                }
                let deletes = message
                    .events()
                    .iter()
                    .filter_map(|event| event.kv())
                    .map(|deleted| (deleted.key(), deleted.mod_revision()));
                if let Some(waited) = cross_off(&mut ahead, queued.own_key.as_bytes(), looked_at, deletes) {
                    return Ok(waited);
                }
            }
            Err(watch_ended())
        };
        tokio::select! {
            first = first => first,
            () = session.lease.lost() => Ok(Wait::Lost),
        }
    }

    /// One range read of every key up to ours, names only: the keys ahead of us, unless
    /// that decides the wait (ours is gone, or none is ahead). A key is known by its name
    /// from here on: a name seen here is deleted before it can be created again, and then
    /// it queues behind us.
    async fn look(&self, client: &mut Client, queued: &Queued) -> Result<Look, WatchFailure> {
        let up_to_ours = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_max_create_revision(queued.own_revision);
        self.requests_while_waiting.fetch_add(1, Ordering::SeqCst);
        let response = client.get(queued.prefix.clone(), Some(up_to_ours)).await?;
        let mut keys: HashSet<Vec<u8>> = response.kvs().iter().map(|kv| kv.key().to_vec()).collect();
        if !keys.remove(queued.own_key.as_bytes()) {
            return Ok(Look::Decided(Wait::Lost));
        }
        if keys.is_empty() {
            return Ok(Look::Decided(Wait::First { woken: false }));
        }
        let revision = response.header().map_or(0, |header| header.revision());
        Ok(Look::Ahead { revision, keys })
    }

    /// A receiver of the kept watch of the queue under `prefix`, which is opened now if
    /// this is its first wait; `None` while it cannot be open (the wait looks instead).
    /// Called with the lock's turn held, so one call at a time opens a prefix's watch.
    async fn news_of(&self, prefix: &str) -> Option<broadcast::Receiver<Deletes>> {
        let kept = unpoisoned(&self.kept_watches).get(prefix).cloned();
        let kept = match kept {
            Some(kept) => kept,
            None => {
                self.requests_while_waiting.fetch_add(1, Ordering::SeqCst);
                let opened = KeptWatch::open(self.watch_client.clone(), prefix);
                match opened.await {
                    Ok(kept) => {
                        let kept = Arc::new(kept);
                        unpoisoned(&self.kept_watches).insert(prefix.to_owned(), kept.clone());
                        kept
                    }
                    Err(error) => {
                        tracing::debug!(error = %error.source, "could not open the kept etcd watch; looking instead");
                        return None;
                    }
                }
            }
        };
        kept.listen()
    }

    /// A receiver of the kept watch under `prefix` if it is open now; never opens one.
    fn listen(&self, prefix: &str) -> Option<broadcast::Receiver<Deletes>> {
        unpoisoned(&self.kept_watches).get(prefix)?.listen()
    }

    /// The grant of the key `queued` holds, first in the queue of lock `key`.
    fn grant(self: &Arc<Self>, key: &str, queued: Queued, session: &Arc<Session>, turn: Turn) -> LockGuard {
        let grant = EtcdGrant {
            connection: self.clone(),
            key: key.to_owned(),
            own_key: Some((queued.own_key, turn)),
            own_revision: queued.own_revision,
            session: Arc::downgrade(session),
        };
        LockGuard::new(key, grant)
            .with_fencing_token(FencingToken::new(BACKEND, 0, queued.own_revision as u64))
            .with_lease(session.lease.clone())
    }
}

/// Where the queue of lock `key` lives: every key under this prefix.
fn prefix_of(key: &str) -> String {
    format!("{KEY_PREFIX}{key}/")
}

/// The session's own key in the queue of lock `key`: named after its lease, in hex, as etcd's Go client
/// names it (step 2).
fn own_key_of(key: &str, session: &Session) -> String {
    format!("{}{:x}", prefix_of(key), session.lease_id)
}

/// The session's other key in the same queue (step 7): a release that queues the next
/// owner puts this one as it deletes `own_key`, since a transaction may write a key once.
fn other_key_of(own_key: &str) -> String {
    match own_key.strip_suffix(OTHER_KEY_SUFFIX) {
        Some(first) => first.to_owned(),
        None => format!("{own_key}{OTHER_KEY_SUFFIX}"),
    }
}

/// A transaction's read of the queue under `prefix`, for [`keys_ahead`]: names and
/// revisions only, since a queue of one key per instance is short.
fn list_the_queue(prefix: &str) -> TxnOp {
    TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_keys_only()))
}

/// The keys a transaction's listing of the queue shows ahead of ours: those created
/// before `own_revision`. None for an unknown revision (0).
fn keys_ahead(listing: Option<&TxnOpResponse>, own_revision: i64) -> HashSet<Vec<u8>> {
    match listing {
        Some(TxnOpResponse::Get(get)) if own_revision != 0 => get
            .kvs()
            .iter()
            .filter(|kv| kv.create_revision() < own_revision)
            .map(|kv| kv.key().to_vec())
            .collect(),
        _ => HashSet::new(),
    }
}

/// A queue key, or none because the session's lease is gone on the server.
enum Enqueued {
    Queued(Queued),
    LeaseGone,
}

/// A key of ours in the queue.
struct Queued {
    prefix: String,
    own_key: String,
    own_revision: i64,
    /// The keys with an older create revision than ours, at `revision`.
    ahead: HashSet<Vec<u8>>,
    /// The revision at which the enqueue listed the queue.
    revision: i64,
}

impl Queued {
    fn holds(&self) -> bool {
        self.own_revision != 0 && self.ahead.is_empty()
    }

    /// The revision our put created, if the enqueue learned it.
    fn known_revision(&self) -> Option<i64> {
        (self.own_revision != 0).then_some(self.own_revision)
    }
}

/// A key of ours that no key is ahead of: an acquire's grant, once the turn goes with it.
struct First {
    queued: Queued,
    session: Arc<Session>,
    /// A watch event told us (a holder released), not the enqueue or a look.
    woken: bool,
}

impl First {
    fn new(queued: Queued, session: Arc<Session>, woken: bool) -> Self {
        First { queued, session, woken }
    }
}

/// The key an acquire may have put, so the acquire can delete it if it ends without a grant.
struct SentKey {
    own_key: String,
    /// The revision our put created; `None` while its answer has not come.
    revision: Option<i64>,
    session: Weak<Session>,
}

/// What one look at the queue saw.
enum Look {
    /// The look ends the wait: our key is gone, or none is ahead of it.
    Decided(Wait),
    /// The keys ahead of ours at `revision`.
    Ahead { revision: i64, keys: HashSet<Vec<u8>> },
}

/// What one watch message of the queue's deletes means for a waiter. Each delete newer
/// than the revision at which the keys `ahead` were listed (`looked_at`: the enqueue's,
/// or a look's) crosses its key off them. Our own key among
/// them is a lost session, whatever else the message holds; none left ahead is the grant.
/// `None`: still waiting.
fn cross_off<'a>(
    ahead: &mut HashSet<Vec<u8>>,
    own_key: &[u8],
    looked_at: i64,
    deletes: impl IntoIterator<Item = (&'a [u8], i64)>,
) -> Option<Wait> {
    let mut own_key_deleted = false;
    for (key, revision) in deletes {
        if revision <= looked_at {
            continue; // the look saw this one already
        }
        own_key_deleted |= key == own_key;
        ahead.remove(key);
    }
    if own_key_deleted {
        Some(Wait::Lost)
    } else if ahead.is_empty() {
        Some(Wait::First { woken: true })
    } else {
        None
    }
}

/// How a wait in the queue ended.
#[derive(Debug, PartialEq)]
enum Wait {
    /// No key older than ours is left: we hold the lock. `woken` when a watch event told
    /// us (a holder released), not the look.
    First { woken: bool },
    /// Our key was deleted, or our lease lost, while we waited: no grant.
    Lost,
}

#[async_trait]
impl Release for EtcdGrant {
    /// Step 5. Waits for the delete up to [`RETRY_BUDGET`]; after that it goes on in the
    /// background, and the release reports the failure.
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        let Some((own_key, turn)) = self.own_key.take() else {
            return Ok(());
        };
        let session_held = self.session.upgrade().is_some_and(|session| session.lease.is_held());
        let deleting = delete_in_background(
            self.connection.client.clone(),
            own_key.clone(),
            Some(self.own_revision),
            self.session.clone(),
            Some(turn),
        );
        match tokio::time::timeout(RETRY_BUDGET, deleting).await {
            Ok(Ok(true)) if session_held => Ok(()),
            Ok(Ok(_)) => Err(LockError::Lost { key: own_key }),
            Ok(Err(panicked)) => Err(LockError::backend(BACKEND, panicked)),
            Err(_) => Err(LockError::backend(
                BACKEND,
                std::io::Error::other(
                    "etcd did not confirm the delete of our key in time; it is sent again in the background",
                ),
            )),
        }
    }

    /// Step 7: deletes our key and queues `next` at the back, in one transaction.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        hand_over::queue_the_next_owner(self, next).await
    }
}

impl Drop for EtcdGrant {
    /// Dropped without release: delete the key in the background (see the module notes).
    fn drop(&mut self) {
        if let Some((own_key, turn)) = self.own_key.take() {
            delete_in_background(
                self.connection.client.clone(),
                own_key,
                Some(self.own_revision),
                self.session.clone(),
                Some(turn),
            );
        }
    }
}

/// Deletes a queue key of ours in the background, guaranteed (as Curator's `guaranteed()`
/// delete): sent again after every failure, until it is done or the session's lease is
/// lost (the key goes with it). A key left behind would move up the queue and block
/// every instance for as long as our session lives. The task keeps the instance's
/// `turn` until then, so its next acquire cannot reuse a key that is about to go.
/// Answers whether it deleted the key (not: it was gone already, or went with its lease).
/// Every try is guarded by `revision` ([`delete_once`]): a try that lands late cannot
/// delete a later key of the same name.
fn delete_in_background(
    client: Client,
    own_key: String,
    revision: Option<i64>,
    session: Weak<Session>,
    turn: Option<Turn>,
) -> JoinHandle<bool> {
    tokio::spawn(async move {
        let _turn = turn;
        let delete = || delete_once(client.clone(), own_key.clone(), revision);
        send_until_done(&session, &own_key, delete).await.unwrap_or(false)
    })
}

/// One try at deleting our key `own_key`: the one our put created at `revision`, in a
/// transaction that compares its create revision. A session reuses its keys' names, so
/// a plain delete sent again could land after the next acquire put the name anew, and
/// delete that key. When `revision` is unknown (the put's answer was lost) it is read
/// first. The turn is then held, so the key found is this acquire's.
/// Answers whether it deleted the key.
async fn delete_once(mut client: Client, own_key: String, revision: Option<i64>) -> Result<bool, etcd_client::Error> {
    let revision = match revision {
        Some(revision) => revision,
        None => match client.get(own_key.clone(), None).await?.kvs().first() {
            Some(found) => found.create_revision(),
            None => return Ok(false),
        },
    };
    let ours = Compare::create_revision(own_key.clone(), CompareOp::Equal, revision);
    let delete = Txn::new().when([ours]).and_then([TxnOp::delete(own_key, None)]);
    Ok(client.txn(delete).await?.succeeded())
}

/// Sends a clean-up of our `keys` again after every failure, until etcd has done it
/// (its answer) or the session's lease is lost (`None`: the keys went with it).
async fn send_until_done<T, F, Fut>(
    session: &Weak<Session>,
    keys: &(impl std::fmt::Debug + ?Sized),
    request: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let lease_held = |error: &etcd_client::Error| {
        let held = session.upgrade().is_some_and(|session| session.lease.is_held());
        if held {
            tracing::debug!(?keys, %error, "the delete of our etcd keys failed; sending it again");
        }
        held
    };
    send_again_while(request, lease_held).await.ok()
}

/// Revokes a lease we count as lost, in the background, so that its keys leave the
/// queue now. A lease we could not renew may still live on the server: a new leader
/// extends every lease, and our last renewal may have reached it after all. Until it
/// ends there, its keys stay in the queue before the new session's and block every
/// instance, ours included (the chaos test with a dead leader stalled 3.7 s on them).
/// Nothing depends on the lease any more: its holders were told it is lost. Sent again
/// after transient failures, for `for_at_most` (longer than the server can keep it).
fn revoke_in_background(client: Client, lease_id: i64, for_at_most: Duration) {
    tokio::spawn(async move {
        let revoked = retry_transient(Instant::now() + for_at_most, || {
            let mut client = client.clone();
            async move { client.lease_revoke(lease_id).await }
        })
        .await;
        match revoked {
            Ok(_) => tracing::info!(lease = lease_id, "revoked the lost etcd lease: its keys are gone"),
            Err(error) if is_lease_gone(&error) => {}
            Err(error) => {
                tracing::warn!(lease = lease_id, %error, "could not revoke the lost etcd lease; it expires on its own")
            }
        }
    });
}

// Hardening: transient failures, lost leases, broken watches.

fn backend_error(error: etcd_client::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// Failures that another try may cure: the member we talked to went away, or the
/// cluster is electing a leader. Not: a lease that is gone, or a bad request.
fn is_transient(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Cancelled
            )
        }
        _ => false,
    }
}

/// Sends a request, and again after each transient failure, until `deadline`. When the member this client
/// talks to dies, or an election is on, a request fails with a transport error: every step is tried again
/// until the acquire's deadline, and the keep-alive stream is opened again ([`renew`]), on whichever member
/// answers. Every step may be repeated safely: the queue key is created only if absent, and reads and
/// watches change nothing.
async fn retry_transient<T, F, Fut>(deadline: Instant, request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let transient = |error: &etcd_client::Error| {
        let again = is_transient(error) && Instant::now() + RETRY_PAUSE < deadline;
        if again {
            tracing::debug!(%error, "etcd request failed; trying again, another member may answer");
        }
        again
    };
    send_again_while(request, transient).await
}

/// Sends a request, and again, after a pause, after each failure `again` accepts.
async fn send_again_while<T, F, Fut>(
    mut request: F,
    mut again: impl FnMut(&etcd_client::Error) -> bool,
) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pauses = RetryPauses::default();
    loop {
        match request().await {
            Err(error) if again(&error) => pauses.after_a_failure().await,
            answer => return answer,
        }
    }
}

/// The lease named in a request no longer exists on the server (expired or revoked),
/// even if our keep-alive has not heard yet.
fn is_lease_gone(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::NotFound)
}

/// Whole seconds, rounded up, at least 1: etcd counts lease TTLs in whole seconds (and grants at least its
/// minimum, about 2 s by default), so `--lock-ttl-ms` is rounded up to seconds.
fn lease_seconds(ttl: Duration) -> i64 {
    (ttl.as_millis().div_ceil(1000) as i64).max(1)
}

/// etcd canceled the watch. Not transient: the wait ends with this error, as it always has.
fn watch_canceled() -> WatchFailure {
    etcd_client::Error::WatchError("the watch was canceled".into()).into()
}

/// The stream ended without a cancel: its member went away. Watch again.
fn watch_ended() -> WatchFailure {
    WatchFailure {
        source: etcd_client::Error::WatchError("the watch stream ended".into()),
        transient: true,
    }
}

/// A read or watch that failed, and whether watching again may cure it.
struct WatchFailure {
    source: etcd_client::Error,
    transient: bool,
}

impl From<etcd_client::Error> for WatchFailure {
    fn from(source: etcd_client::Error) -> Self {
        WatchFailure {
            transient: is_transient(&source),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> HashSet<Vec<u8>> {
        names.iter().map(|name| name.as_bytes().to_vec()).collect()
    }

    const OURS: &[u8] = b"q/ours";

    #[test]
    fn the_delete_of_the_last_key_ahead_is_the_grant() {
        let mut ahead = keys(&["q/a", "q/b"]);
        assert_eq!(cross_off(&mut ahead, OURS, 10, [(&b"q/a"[..], 11)]), None);
        assert_eq!(
            cross_off(&mut ahead, OURS, 10, [(&b"q/b"[..], 12)]),
            Some(Wait::First { woken: true })
        );
    }

    #[test]
    fn a_delete_the_look_already_saw_crosses_nothing_off() {
        // On a watch member that lags, q/a may be deleted and created again, still ahead
        // of us, before the look: the look sees the new q/a, the watch the old delete.
        let mut ahead = keys(&["q/a"]);
        assert_eq!(cross_off(&mut ahead, OURS, 10, [(&b"q/a"[..], 9)]), None);
        assert_eq!(cross_off(&mut ahead, OURS, 10, [(&b"q/a"[..], 10)]), None);
        assert_eq!(ahead, keys(&["q/a"]));
    }

    #[test]
    fn a_delete_behind_us_changes_nothing() {
        let mut ahead = keys(&["q/a"]);
        assert_eq!(cross_off(&mut ahead, OURS, 10, [(&b"q/later"[..], 11)]), None);
        assert_eq!(ahead, keys(&["q/a"]));
    }

    #[test]
    fn our_own_keys_delete_outweighs_a_grant_in_the_same_message() {
        // A lease that ends deletes every key of its session in one revision.
        let mut ahead = keys(&["q/a"]);
        let deletes = [(&b"q/a"[..], 11), (OURS, 11)];
        assert_eq!(cross_off(&mut ahead, OURS, 10, deletes), Some(Wait::Lost));
    }
}
