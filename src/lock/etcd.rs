//! A lock on etcd: keys under a lease, granted in revision order.
//!
//! etcd is a replicated key-value store (Raft). Every write gets a cluster-wide
//! *revision*, a number that only grows. This recipe is the one etcd's own Go
//! `concurrency.Mutex` uses.
//!
//! ## How it works
//! 1. **A session per instance.** At start the lock grants one lease and keeps it alive
//!    ([`super::keepalive`], every `ttl / 3`). Every key this instance creates is
//!    attached to it, so if the instance dies, the lease runs out and all its keys
//!    vanish together. etcd counts lease TTLs in whole seconds (and grants at least
//!    its minimum, about 2 s by default), so `--lock-ttl-ms` is rounded up to seconds.
//!    A session whose lease was lost is replaced by a new one at the next acquire.
//! 2. **Queue up.** An acquire puts `seckill/locks/<key>/<lease>-<random>` under the
//!    lease, in a transaction that creates it only if it is absent, and reads the
//!    revision at which it was created.
//! 3. **The holder is the oldest key.** Whoever's key has the lowest create revision
//!    under the prefix holds the lock: first come, first served.
//! 4. **Wait for the one before you.** A waiter watches only the key created just
//!    before its own (no thundering herd: one release wakes one waiter) and, when it is
//!    deleted, looks again. After the wait it re-reads its own key and fails if the key
//!    is gone: the session was lost while it waited (the fix etcd made after Jepsen
//!    found that a waiter could believe it held a lock its expired session had lost).
//! 5. **Release** deletes the own key; so does an acquire that timed out.
//! 6. **Fencing token**: the own key's create revision. It grows with every grant,
//!    across every key and instance, because etcd's revision does.
//!
//! ## Limitations
//! - **Pauses.** A holder paused longer than the lease loses its keys without knowing;
//!   the guard's lease turns lost when renewals stop succeeding, and the stock refuses
//!   its older fencing token.
//! - **Availability.** etcd needs a majority of its members; without one, acquires
//!   fail (503), they never grant.
//! - **Dropped guards.** A guard dropped without release deletes its key in the
//!   background: the session outlives the grant, so waiting for a lease would be forever.
//!
//! ## References
//! - etcd `client/v3/concurrency/mutex.go`: <https://github.com/etcd-io/etcd/blob/main/client/v3/concurrency/mutex.go>
//! - Jepsen, "etcd 3.4.3" (2020), on locks and lost sessions: <https://jepsen.io/analyses/etcd-3.4.3>
//! - etcd API guarantees (revisions): <https://etcd.io/docs/latest/learning/api_guarantees/>

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};

use super::keepalive::KeepAlive;
use super::{DistributedLock, FencingToken, Lease, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "etcd";
/// Every lock key lives under this prefix, then the lock's name.
const KEY_PREFIX: &str = "seckill/locks/";
/// How long opening a connection to etcd may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How an [`EtcdLock`] connects.
#[derive(Clone, Debug)]
pub struct EtcdLockOptions {
    pub endpoints: Vec<String>,
    /// The lease TTL; etcd takes whole seconds, so it is rounded up.
    pub ttl: Duration,
}

/// One lease, kept alive for as long as this value lives.
struct Session {
    lease_id: i64,
    lease: Lease,
    _keepalive: KeepAlive,
}

/// A lock whose queue is a set of etcd keys, ordered by revision.
pub struct EtcdLock {
    client: Client,
    ttl_seconds: i64,
    session: tokio::sync::Mutex<Arc<Session>>,
    shut_down: AtomicBool,
    /// How many times a waiter was woken by its predecessor's deletion.
    wakeups: Arc<AtomicU64>,
}

fn backend_error(error: etcd_client::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// Whole seconds, rounded up, at least 1.
fn lease_seconds(ttl: Duration) -> i64 {
    (ttl.as_millis().div_ceil(1000) as i64).max(1)
}

impl EtcdLock {
    /// Connects and starts this instance's session (its lease).
    pub async fn connect(options: EtcdLockOptions) -> Result<Self, LockError> {
        let connect = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT).with_timeout(REQUEST_TIMEOUT);
        let client = Client::connect(&options.endpoints, Some(connect)).await.map_err(backend_error)?;
        let ttl_seconds = lease_seconds(options.ttl);
        if Duration::from_secs(ttl_seconds as u64) != options.ttl {
            tracing::info!(
                requested_ms = options.ttl.as_millis() as u64,
                granted_s = ttl_seconds,
                "etcd leases are whole seconds: the lock TTL is rounded up"
            );
        }
        let session = Session::start(&client, ttl_seconds).await?;
        Ok(EtcdLock {
            client,
            ttl_seconds,
            session: tokio::sync::Mutex::new(Arc::new(session)),
            shut_down: AtomicBool::new(false),
            wakeups: Arc::default(),
        })
    }

    /// The lease of the current session (tests revoke it to play a lost session).
    pub async fn lease_id(&self) -> i64 {
        self.session.lock().await.lease_id
    }

    /// How many times a waiter of this handle was woken by a predecessor's release.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::SeqCst)
    }

    /// The current session, or a new one if the last lease was lost.
    async fn current_session(&self) -> Result<Arc<Session>, LockError> {
        if self.shut_down.load(Ordering::SeqCst) {
            return Err(LockError::ShutDown { backend: BACKEND });
        }
        let mut session = self.session.lock().await;
        if !session.lease.is_held() {
            tracing::warn!(lease = session.lease_id, "the etcd session was lost; starting a new one");
            *session = Arc::new(Session::start(&self.client, self.ttl_seconds).await?);
        }
        Ok(session.clone())
    }

    /// Steps 2 and 3: queues a key of ours under `key`'s prefix.
    async fn enqueue(&self, session: &Arc<Session>, key: &str, owner: &Owner) -> Result<Queued, LockError> {
        let prefix = format!("{KEY_PREFIX}{key}/");
        let own_key = format!("{prefix}{:016x}-{:016x}", session.lease_id, rand::random::<u64>());
        let oldest = || GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let put = PutOptions::new().with_lease(session.lease_id);
        let txn = Txn::new()
            .when([Compare::create_revision(own_key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(own_key.clone(), owner.as_str(), Some(put)),
                TxnOp::get(prefix.clone(), Some(oldest())),
            ])
            .or_else([TxnOp::get(own_key.clone(), None), TxnOp::get(prefix.clone(), Some(oldest()))]);
        let response = self.client.clone().txn(txn).await.map_err(backend_error)?;
        let responses = response.op_responses();
        let own_revision = match (response.succeeded(), responses.first()) {
            (true, _) => response.header().map_or(0, |header| header.revision()),
            (false, Some(TxnOpResponse::Get(get))) => get.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        };
        let holder_revision = match responses.get(1) {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map_or(0, |kv| kv.create_revision()),
            _ => 0,
        };
        Ok(Queued { prefix, own_key, own_revision, holder_revision })
    }

    /// Step 4: waits until no key older than ours is left under the prefix.
    async fn wait_for_predecessors(&self, queued: &Queued, session: &Session) -> Result<(), LockError> {
        let mut client = self.client.clone();
        loop {
            let just_before = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_max_create_revision(queued.own_revision - 1);
            let response = client.get(queued.prefix.clone(), Some(just_before)).await.map_err(backend_error)?;
            let Some(predecessor) = response.kvs().first() else { return Ok(()) };
            // Watch from the revision we read at, so a delete in between is not missed.
            let read_at = response.header().map_or(0, |header| header.revision());
            let watch = WatchOptions::new().with_start_revision(read_at + 1);
            let mut stream = client.watch(predecessor.key().to_vec(), Some(watch)).await.map_err(backend_error)?;
            let deleted = async {
                while let Some(message) = stream.message().await.map_err(backend_error)? {
                    if message.canceled() {
                        return Err(LockError::backend(BACKEND, std::io::Error::other("the watch was canceled")));
                    }
                    if message.events().iter().any(|event| event.event_type() == EventType::Delete) {
                        return Ok(());
                    }
                }
                Err(LockError::backend(BACKEND, std::io::Error::other("the watch stream ended")))
            };
            tokio::select! {
                deleted = deleted => deleted?,
                () = session.lease.lost() => return Ok(()), // the re-read below reports it
            }
            self.wakeups.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Deletes a key of ours; `Ok(false)` if it was already gone.
    async fn delete(&self, key: &str) -> Result<bool, LockError> {
        Ok(self.client.clone().delete(key, None).await.map_err(backend_error)?.deleted() > 0)
    }

    fn grant(&self, key: &str, queued: Queued, session: &Arc<Session>) -> LockGuard {
        let grant =
            EtcdGrant { client: self.client.clone(), own_key: Some(queued.own_key), session: Arc::downgrade(session) };
        LockGuard::new(key, grant)
            .with_fencing_token(FencingToken::new(BACKEND, 0, queued.own_revision as u64))
            .with_lease(session.lease.clone())
    }
}

impl Session {
    /// Grants a lease and keeps it alive every `ttl / 3`.
    async fn start(client: &Client, ttl_seconds: i64) -> Result<Session, LockError> {
        let mut client = client.clone();
        let sent = Instant::now();
        let granted = client.lease_grant(ttl_seconds, None).await.map_err(backend_error)?;
        let lease_id = granted.id();
        // etcd may grant more than asked (its minimum TTL); the lease is what it granted.
        let ttl = Duration::from_secs(granted.ttl().max(ttl_seconds) as u64);
        let (keeper, stream) = client.lease_keep_alive(lease_id).await.map_err(backend_error)?;
        let channel = Arc::new(tokio::sync::Mutex::new((keeper, stream)));
        let (keepalive, lease) = KeepAlive::spawn(BACKEND, &format!("lease {lease_id:x}"), ttl, sent, move || {
            let channel = channel.clone();
            async move {
                let mut channel = channel.lock().await;
                let (keeper, stream) = &mut *channel;
                keeper.keep_alive().await.map_err(backend_error)?;
                match stream.message().await.map_err(backend_error)? {
                    // A TTL of 0 means the lease is gone: expired or revoked.
                    Some(answer) => Ok(answer.ttl() > 0),
                    None => Err(LockError::backend(BACKEND, std::io::Error::other("keep-alive stream closed"))),
                }
            }
        });
        Ok(Session { lease_id, lease, _keepalive: keepalive })
    }
}

/// A key of ours in the queue.
struct Queued {
    prefix: String,
    own_key: String,
    own_revision: i64,
    holder_revision: i64,
}

impl Queued {
    fn holds(&self) -> bool {
        self.own_revision != 0 && self.own_revision == self.holder_revision
    }
}

/// One grant: the own key, deleted on release.
struct EtcdGrant {
    client: Client,
    own_key: Option<String>,
    /// Weak, so a grant does not keep its session alive: when the instance goes, its lease goes.
    session: Weak<Session>,
}

#[async_trait]
impl Release for EtcdGrant {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        let Some(own_key) = self.own_key.take() else { return Ok(()) };
        let session_held = self.session.upgrade().is_some_and(|session| session.lease.is_held());
        let deleted = self.client.delete(own_key.as_str(), None).await.map_err(backend_error)?.deleted() > 0;
        if deleted && session_held {
            Ok(())
        } else {
            Err(LockError::Lost { key: own_key })
        }
    }
}

impl Drop for EtcdGrant {
    /// Dropped without release: delete the key in the background (see the module notes).
    fn drop(&mut self) {
        if let Some(own_key) = self.own_key.take() {
            let mut client = self.client.clone();
            tokio::spawn(async move { client.delete(own_key, None).await });
        }
    }
}

#[async_trait]
impl DistributedLock for EtcdLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        let session = self.current_session().await?;
        let queued = self.enqueue(&session, key, owner).await?;
        if queued.holds() {
            return Ok(self.grant(key, queued, &session));
        }
        self.delete(&queued.own_key).await?;
        Err(LockError::Busy { key: key.to_owned() })
    }

    /// Queues, then waits for the key just before ours (step 4) instead of polling.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let session = self.current_session().await?;
        let queued = self.enqueue(&session, key, owner).await?;
        if !queued.holds() {
            match tokio::time::timeout(
                timeout.saturating_sub(started.elapsed()),
                self.wait_for_predecessors(&queued, &session),
            )
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    let _ = self.delete(&queued.own_key).await;
                    return Err(error);
                }
                Err(_) => {
                    self.delete(&queued.own_key).await?;
                    return Err(LockError::Timeout { key: key.to_owned(), waited: started.elapsed() });
                }
            }
            // The wait is over: is our key still there, or did the session die meanwhile?
            let own = self.client.clone().get(queued.own_key.as_str(), None).await.map_err(backend_error)?;
            if own.kvs().is_empty() || !session.lease.is_held() {
                return Err(LockError::Lost { key: key.to_owned() });
            }
        }
        Ok(self.grant(key, queued, &session))
    }

    /// Revokes the session's lease: every key of this instance goes at once.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.store(true, Ordering::SeqCst);
        let lease_id = self.session.lock().await.lease_id;
        self.client.clone().lease_revoke(lease_id).await.map_err(backend_error)?;
        Ok(())
    }
}
