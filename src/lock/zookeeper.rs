//! A lock on ZooKeeper: ephemeral sequential nodes, each waiter watching the one before it.
//!
//! ZooKeeper keeps a tree of small nodes, replicated by a majority (ZAB). A client holds
//! a *session*, kept alive by heartbeats; an *ephemeral* node lives only as long as the
//! session that created it, and a *sequential* node gets a number that grows under its
//! parent. This is the recipe from ZooKeeper's own docs, as Curator's `InterProcessMutex`
//! builds it; it is written out here because it is the lesson.
//!
//! ## How it works
//! 1. **Queue up.** Create an ephemeral sequential node
//!    `/seckill/locks/<key>/_c_<uuid>-lock-<sequence>`. If the create's answer is lost
//!    (the connection dropped), the node may exist anyway; the unique `_c_<uuid>` part
//!    lets the retry find it among the children instead of queueing twice (Curator's
//!    *protected mode*).
//! 2. **The lowest sequence holds the lock.** List the children and sort them by sequence:
//!    first come, first served.
//! 3. **Watch only the one before you.** Otherwise set a watch on the immediate
//!    predecessor (no thundering herd: one release wakes one waiter), and look again
//!    when it goes.
//! 4. **Release** deletes the own node.
//! 5. **Session loss is lock loss.** If the session expires (the server stopped hearing
//!    from this client for a whole session timeout), every ephemeral node of it is gone.
//!    The session's state feeds the guard's lease: disconnected means "held only until
//!    the session timeout runs out", expired means lost. A new session is started at the
//!    next acquire. A *waiter* whose session ends never held the lock: it queues again
//!    on a new session, at the back, until its deadline.
//! 6. **Fencing token**: the own node's `czxid`, the transaction id that created it. It
//!    grows with every write to the ensemble, so with every grant.
//!
//! ## Limitations
//! - **Session timeout.** The server bounds it between 2 and 20 ticks (with the 2 s tick
//!   of `make services`, 4 s to 40 s), so `--lock-ttl-ms` is only a request; the lease
//!   uses the timeout the server granted.
//! - **Pauses.** A holder paused past its session timeout loses its node without
//!   knowing; the stock then refuses its older token.
//! - **Dropped guards.** A guard dropped without release deletes its node in the
//!   background: the session outlives the grant.
//!
//! ## References
//! - ZooKeeper recipes, "Locks": <https://zookeeper.apache.org/doc/current/recipes.html#sc_recipes_Locks>
//! - Apache Curator, `InterProcessMutex` and protected mode:
//!   <https://curator.apache.org/docs/recipes-shared-reentrant-lock>
//! - Curator tech note 10 (session loss and locks): <https://cwiki.apache.org/confluence/display/CURATOR/TN10>

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::parts::keepalive::drift;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::parts::unpoisoned;
use crate::lock::{DistributedLock, FencingToken, Lease, LeaseState, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "zookeeper";

/// The critical path from one grant to the next: the holder deletes its node, the
/// waiter's watch on it fires, and the waiter lists the children to see it is first.
/// See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (delete own node)", Zookeeper, Write, 0.5),
    step("wake-up (watch event)", Zookeeper, Read, 0.5),
    step("list the children", Zookeeper, Read, 1.0),
];
/// Every lock is a parent node under this path.
const LOCKS_ROOT: &str = "/seckill/locks";
/// Marks the protected part of a node's name: `_c_<uuid>-lock-`.
const LOCK_NAME: &str = "-lock-";
/// After a delete whose answer was lost, how long to wait before sending it again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`ZooKeeperLock`] connects.
#[derive(Clone, Debug)]
pub struct ZooKeeperLockOptions {
    /// `host:port,host:port`.
    pub connect: String,
    /// The session timeout asked for; the server may grant another.
    pub session_timeout: Duration,
}

/// One ZooKeeper session and what the holder should believe about it.
struct Session {
    client: Client,
    lease: Lease,
}

/// A lock whose queue is a parent node's ephemeral sequential children.
pub struct ZooKeeperLock {
    options: ZooKeeperLockOptions,
    session: tokio::sync::Mutex<Arc<Session>>,
    /// Parent nodes already created.
    parents: StdMutex<HashSet<String>>,
    /// Nodes of grants still held, so `shutdown` can delete them.
    held: Arc<StdMutex<HashSet<String>>>,
    shut_down: ShutDownSwitch,
    /// How many times a waiter was woken by its predecessor's deletion.
    wakeups: AtomicU64,
}

fn backend_error(error: zookeeper_client::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// An error while waiting: a session that expired (or was closed) means our node is
/// gone, which is a lost place in the queue, not a broken backend.
fn waiting_error(error: zookeeper_client::Error, key: &str) -> LockError {
    match error {
        zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed => {
            LockError::Lost { key: key.to_owned() }
        }
        error => backend_error(error),
    }
}

impl ZooKeeperLock {
    /// Connects and starts a session.
    pub async fn connect(options: ZooKeeperLockOptions) -> Result<Self, LockError> {
        let session = Session::start(&options).await?;
        if session.client.session_timeout() != options.session_timeout {
            tracing::info!(
                requested_ms = options.session_timeout.as_millis() as u64,
                granted_ms = session.client.session_timeout().as_millis() as u64,
                "ZooKeeper granted another session timeout than the lock TTL asked for"
            );
        }
        Ok(ZooKeeperLock {
            options,
            session: tokio::sync::Mutex::new(Arc::new(session)),
            parents: StdMutex::default(),
            held: Arc::default(),
            shut_down: ShutDownSwitch::new(BACKEND),
            wakeups: AtomicU64::new(0),
        })
    }

    /// The current session's client (tests use its session to expire it from outside).
    pub async fn client(&self) -> Client {
        self.session.lock().await.client.clone()
    }

    /// How many times a waiter of this handle was woken by a predecessor's release.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::SeqCst)
    }

    /// The current session, or a new one if the last one ended or is `dead` (its lease
    /// ran out while a waiter used it; dropping it closes it, and its nodes go with it).
    async fn current_session(&self, dead: Option<&Arc<Session>>) -> Result<Arc<Session>, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let mut session = self.session.lock().await;
        if session.client.state().is_terminated() || dead.is_some_and(|dead| Arc::ptr_eq(dead, &session)) {
            tracing::warn!("the ZooKeeper session ended; starting a new one");
            *session = Arc::new(Session::start(&self.options).await?);
        }
        Ok(session.clone())
    }

    async fn parent(&self, client: &Client, key: &str) -> Result<String, LockError> {
        let parent = format!("{LOCKS_ROOT}/{key}");
        if !unpoisoned(&self.parents).contains(&parent) {
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            client.mkdir(&parent, &persistent).await.map_err(backend_error)?;
            unpoisoned(&self.parents).insert(parent.clone());
        }
        Ok(parent)
    }

    /// Step 1: creates our node, protected against a lost answer. Returns its name and czxid.
    async fn enqueue(&self, client: &Client, parent: &str, owner: &Owner) -> Result<(String, i64), LockError> {
        let protected = format!("_c_{:032x}{LOCK_NAME}", rand::random::<u128>());
        let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        for _ in 0..3 {
            match client
                .create(&format!("{parent}/{protected}"), owner.as_str().as_bytes(), &ephemeral)
                .await
            {
                Ok((stat, sequence)) => return Ok((format!("{protected}{sequence}"), stat.czxid)),
                Err(zookeeper_client::Error::ConnectionLoss) => {
                    // The node may have been created: look for our unique prefix.
                    let children = client.list_children(parent).await.map_err(backend_error)?;
                    if let Some(name) = children.into_iter().find(|child| child.starts_with(&protected)) {
                        let stat = client
                            .check_stat(&format!("{parent}/{name}"))
                            .await
                            .map_err(backend_error)?;
                        return Ok((name, stat.map_or(0, |stat| stat.czxid)));
                    }
                }
                Err(error) => return Err(backend_error(error)),
            }
        }
        Err(backend_error(zookeeper_client::Error::ConnectionLoss))
    }

    /// Steps 2 and 3 for one look: `Ok(None)` if we hold it, or the predecessor to wait for.
    async fn predecessor(&self, client: &Client, parent: &str, own: &str) -> Result<Option<String>, LockError> {
        let mut children = client
            .list_children(parent)
            .await
            .map_err(|error| waiting_error(error, parent))?;
        children.sort_by_key(|child| sequence_of(child));
        match children.iter().position(|child| child == own) {
            Some(0) => Ok(None),
            Some(mine) => Ok(Some(children[mine - 1].clone())),
            // Our node is gone: the session that owned it expired.
            None => Err(LockError::Lost { key: parent.to_owned() }),
        }
    }

    fn grant(&self, key: &str, session: &Arc<Session>, path: String, czxid: i64) -> LockGuard {
        unpoisoned(&self.held).insert(path.clone());
        let grant = ZooKeeperGrant {
            client: session.client.clone(),
            path: Some(path),
            session: Arc::downgrade(session),
            held: self.held.clone(),
        };
        LockGuard::new(key, grant)
            .with_fencing_token(FencingToken::new(BACKEND, 0, czxid as u64))
            .with_lease(session.lease.clone())
    }
}

impl Session {
    async fn start(options: &ZooKeeperLockOptions) -> Result<Session, LockError> {
        let client = Client::connector()
            .with_session_timeout(options.session_timeout)
            .with_connection_timeout(CONNECT_TIMEOUT)
            .connect(&options.connect)
            .await
            .map_err(backend_error)?;
        let (state, lease) = Lease::watched(LeaseState::Held);
        let timeout = client.session_timeout();
        let mut watcher = client.state_watcher();
        // Step 5: the session's state is the lease. The task ends with the session.
        tokio::spawn(async move {
            loop {
                match watcher.changed().await {
                    SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                        state.send_replace(LeaseState::Held);
                    }
                    // The server expires the session a timeout after it last heard from us.
                    SessionState::Disconnected => {
                        let until = Instant::now() + timeout.saturating_sub(drift(timeout));
                        state.send_replace(LeaseState::HeldUntil(until));
                    }
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                        state.send_replace(LeaseState::Lost);
                        return;
                    }
                }
            }
        });
        Ok(Session { client, lease })
    }
}

/// The sequence number at the end of a node's name.
fn sequence_of(name: &str) -> i64 {
    name.rsplit(LOCK_NAME)
        .next()
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(i64::MAX)
}

/// One grant: the own node, deleted on release.
struct ZooKeeperGrant {
    client: Client,
    path: Option<String>,
    session: Weak<Session>,
    held: Arc<StdMutex<HashSet<String>>>,
}

#[async_trait]
impl Release for ZooKeeperGrant {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        let Some(path) = self.path.take() else { return Ok(()) };
        unpoisoned(&self.held).remove(&path);
        let session_held = self.session.upgrade().is_some_and(|session| session.lease.is_held());
        match delete_own_node(&self.client, &path).await {
            Ok(()) if session_held => Ok(()),
            Ok(()) | Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::SessionExpired) => {
                Err(LockError::Lost { key: path })
            }
            Err(error) => Err(backend_error(error)),
        }
    }
}

/// Step 4, guaranteed (as Curator's `guaranteed()` delete): while our node exists the
/// whole queue behind it waits, and a delete whose connection broke (the server we
/// talked to died) may not have happened. So send it again until it is done, the node
/// is gone, or the session ended (its nodes go with it).
async fn delete_own_node(client: &Client, path: &str) -> Result<(), zookeeper_client::Error> {
    loop {
        match client.delete(path, None).await {
            Err(error @ (zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Timeout))
                if !client.state().is_terminated() =>
            {
                tracing::debug!(path, %error, "the delete of our node may not have happened; sending it again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            done => return done,
        }
    }
}

impl Drop for ZooKeeperGrant {
    /// Dropped without release: delete the node in the background (see the module notes).
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            unpoisoned(&self.held).remove(&path);
            let client = self.client.clone();
            tokio::spawn(async move { delete_own_node(&client, &path).await });
        }
    }
}

#[async_trait]
impl DistributedLock for ZooKeeperLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        let session = self.current_session(None).await?;
        let client = &session.client;
        let parent = self.parent(client, key).await?;
        let (own, czxid) = self.enqueue(client, &parent, owner).await?;
        let path = format!("{parent}/{own}");
        match self.predecessor(client, &parent, &own).await {
            Ok(None) => Ok(self.grant(key, &session, path, czxid)),
            Ok(Some(_)) => {
                client.delete(&path, None).await.map_err(backend_error)?;
                Err(LockError::Busy { key: key.to_owned() })
            }
            Err(error) => Err(error),
        }
    }

    /// Queues, then waits for the predecessor's deletion (step 3) instead of polling.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut dead_session = None;
        loop {
            let session = self.current_session(dead_session.as_ref()).await?;
            let client = &session.client;
            let parent = self.parent(client, key).await?;
            let (own, czxid) = self.enqueue(client, &parent, owner).await?;
            let path = format!("{parent}/{own}");
            let wait = async {
                loop {
                    let Some(predecessor) = self.predecessor(client, &parent, &own).await? else {
                        return Ok(());
                    };
                    let (stat, watcher) = client
                        .check_and_watch_stat(&format!("{parent}/{predecessor}"))
                        .await
                        .map_err(|error| waiting_error(error, key))?;
                    if stat.is_none() {
                        continue; // gone between the listing and the watch: look again
                    }
                    tokio::select! {
                        _ = watcher.changed() => { self.wakeups.fetch_add(1, Ordering::SeqCst); }
                        () = session.lease.lost() => return Err(LockError::Lost { key: key.to_owned() }),
                    }
                }
            };
            match tokio::time::timeout_at(deadline.into(), wait).await {
                Ok(Ok(())) => return Ok(self.grant(key, &session, path, czxid)),
                // Our session ended while we waited, so our node is gone or going: queue again.
                Ok(Err(LockError::Lost { .. })) if Instant::now() < deadline => {
                    let _ = client.delete(&path, None).await;
                    tracing::info!(
                        key,
                        "the ZooKeeper session ended while waiting; queueing again on a new session"
                    );
                    dead_session = Some(session.clone());
                }
                Ok(Err(error)) => {
                    let _ = client.delete(&path, None).await;
                    return Err(error);
                }
                Err(_) => {
                    client.delete(&path, None).await.map_err(backend_error)?;
                    return Err(LockError::Timeout {
                        key: key.to_owned(),
                        waited: started.elapsed(),
                    });
                }
            }
        }
    }

    /// Deletes every node this handle still holds and refuses later acquires.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        let client = self.session.lock().await.client.clone();
        let held: Vec<String> = unpoisoned(&self.held).drain().collect();
        for path in held {
            match client.delete(&path, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                Err(error) => return Err(backend_error(error)),
            }
        }
        Ok(())
    }
}
