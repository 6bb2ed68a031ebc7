//! A lock on ZooKeeper: ephemeral sequential nodes, each waiter watching the one before it.
//!
//! ZooKeeper keeps a tree of small nodes, replicated by a majority (ZAB). A client holds a *session*, kept
//! alive by heartbeats; an *ephemeral* node lives only as long as the session that created it, and a
//! *sequential* node gets a number that grows under its parent. This is the recipe from ZooKeeper's own
//! docs, as Curator's `InterProcessMutex` builds it; it is written out here because it is the lesson.
//!
//! ## How it works
//! 1. **Queue up.** Create an ephemeral sequential node `/seckill/locks/<key>/_c_<uuid>-lock-<sequence>`,
//!    found by its `<uuid>` if the create's answer is lost (`ZooKeeperLock::enqueue`).
//! 2. **The lowest sequence holds the lock.** List the children and sort them by sequence: first come,
//!    first served.
//! 3. **Watch only the one before you**, and look again when it goes; if it was the only one before ours,
//!    its deletion is the grant (`ZooKeeperLock::wait_for_turn`).
//! 4. **Release** deletes the own node; so does an acquire that ended without a grant (`Queued`). The
//!    delete is *guaranteed*, as Curator's `guaranteed()` (`delete_own_node`).
//! 5. **Session loss is lock loss.** The guard's lease ends once the server may have expired the session
//!    (`Session::start`); a waiter whose session ends queues again on a new one ([`ZooKeeperLock::acquire`]).
//! 6. **Fencing token**: the own node's `czxid`, the transaction id that created it. It grows with every
//!    write to the ensemble, so with every grant.
//! 7. **Shutdown closes the session**, after the waiters still queued gave up ([`ZooKeeperLock::shutdown`]).
//!
//! ## Limitations
//! - **Session timeout.** The server bounds it, so `--lock-ttl-ms` is only a request; the lease uses the
//!   timeout the server granted ([`ZooKeeperLockOptions::session_timeout`]).
//! - **Pauses.** A holder paused past its session timeout loses its node without knowing; the stock then
//!   refuses its older token.
//! - **Dropped guards.** A guard dropped without release deletes its node in the background (guaranteed, as
//!   in step 4): the session outlives the grant.
//! - **Trust costs a read.** Step 5 sends one small read every third of the session timeout, besides the
//!   client's own pings, whose answers the client does not show.
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

use anyhow::Context;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Acls, Client, CreateMode, EventType};

use crate::lock::critical_path::{step, Access::*, Backend::*, Step};
use crate::lock::description::Description;
use crate::lock::parts::keepalive::KeepAlive;
use crate::lock::parts::setup::Setup;
use crate::lock::parts::shutdown::ShutDownSwitch;
use crate::lock::parts::unpoisoned;
use crate::lock::{DistributedLock, FencingToken, Lease, LeaseState, LockError, LockGuard, Owner, Release};

const BACKEND: &str = "zookeeper";

/// What this strategy is (see [`crate::lock::description`]).
/// On ZooKeeper, with a token per grant.
pub const DESCRIPTION: Description = Description {
    name: BACKEND,
    backend: Some(Zookeeper),
    tokens: true,
    oversells: false,
    critical_path: Some(CRITICAL_PATH),
};

/// The critical path from one grant to the next: the holder deletes its node and the
/// waiter's watch on it fires. The waiter listed the children while it waited; when the
/// deleted node was the only one before its own, the event is the grant (step 3).
/// See [`crate::lock::critical_path`].
pub const CRITICAL_PATH: &[Step] = &[
    step("release (delete own node), to its commit", Zookeeper, Write, 0.5),
    step(
        "wake-up (watch event, sent at the commit as the answer is)",
        Zookeeper,
        Write,
        0.5,
    ),
];
/// Every lock is a parent node under this path.
const LOCKS_ROOT: &str = "/seckill/locks";
/// Marks the protected part of a node's name: `_c_<uuid>-lock-`.
const LOCK_NAME: &str = "-lock-";
/// After a request whose answer was lost, how long to wait before sending it again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// The read that tells us the server still hears us (step 5): any node will do.
const PROBED_PATH: &str = "/";
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the shutdown waits for the server to close the session.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`ZooKeeperLock`] connects.
#[derive(Clone, Debug)]
pub struct ZooKeeperLockOptions {
    /// `host:port,host:port`.
    pub connect: String,
    /// The session timeout asked for; the server may grant another. It bounds it between 2 and 20 ticks
    /// (with the 2 s tick of `make services`, 4 s to 40 s), and the lease uses the timeout it granted.
    pub session_timeout: Duration,
}

/// One ZooKeeper session and what the holder should believe about it.
struct Session {
    client: Client,
    lease: Lease,
    /// The reads that move the lease on (step 5); they stop when the session is dropped.
    _heard_from: KeepAlive,
}

/// What one look at the queue found before our node.
struct Before {
    /// The node just before ours: the one to watch.
    predecessor: String,
    /// Whether it is the only one before ours.
    alone: bool,
}

/// The flags of `--lock zookeeper` (flattened into the config).
#[derive(Clone, Debug, clap::Args)]
pub struct ZooKeeperArgs {
    /// ZooKeeper connect string for `--lock zookeeper` (`host:port,host:port`).
    #[arg(long, env = "SECKILL_ZK_CONNECT", default_value = "127.0.0.1:2181")]
    pub zk_connect: String,
}

/// Builds `--lock zookeeper` from its flags.
pub async fn build(args: &ZooKeeperArgs, setup: &Setup) -> anyhow::Result<ZooKeeperLock> {
    let options = ZooKeeperLockOptions {
        connect: args.zk_connect.clone(),
        session_timeout: setup.ttl,
    };
    ZooKeeperLock::connect(options).await.with_context(|| {
        format!(
            "cannot reach ZooKeeper at {}.\n  Start it with `make services`, or point \
             --zk-connect / SECKILL_ZK_CONNECT at a running server",
            args.zk_connect
        )
    })
}

/// A lock whose queue is a parent node's ephemeral sequential children.
pub struct ZooKeeperLock {
    options: ZooKeeperLockOptions,
    /// The session; `None` once the shutdown closed it.
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Parent nodes already created.
    parents: StdMutex<HashSet<String>>,
    shut_down: ShutDownSwitch,
    /// Cancelled at shutdown: the acquires still waiting give up (step 7).
    closing: CancellationToken,
    /// How many times a waiter was woken by its predecessor's deletion.
    wakeups: AtomicU64,
    /// How many times a waiter listed the queue to find the node before its own.
    looks: AtomicU64,
}

fn backend_error(error: zookeeper_client::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// Failures after which another try may work: the connection broke, so the request
/// may or may not have run (its answer was lost), or the server asked us to wait.
fn is_transient(error: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error::*;
    matches!(error, ConnectionLoss | Timeout | Throttled | Custom(_))
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
            session: tokio::sync::Mutex::new(Some(Arc::new(session))),
            parents: StdMutex::default(),
            shut_down: ShutDownSwitch::new(BACKEND),
            closing: CancellationToken::new(),
            wakeups: AtomicU64::new(0),
            looks: AtomicU64::new(0),
        })
    }

    /// The current session's client (tests use its session to expire it from outside),
    /// `None` once the lock is shut down. A client kept keeps the session open.
    pub async fn client(&self) -> Option<Client> {
        let session = self.session.lock().await;
        session.as_ref().map(|session| session.client.clone())
    }

    /// How many times a waiter of this handle was woken by a predecessor's release.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::SeqCst)
    }

    /// How many times a waiter of this handle read the queue (step 3's look).
    pub fn looks(&self) -> u64 {
        self.looks.load(Ordering::SeqCst)
    }

    /// The current session, or a new one if the last one ended, or its lease ran out, or
    /// it is `dead` (its lease ran out while a waiter used it). Dropping a session closes
    /// it, and its nodes go with it.
    async fn current_session(&self, dead: Option<&Arc<Session>>) -> Result<Arc<Session>, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let mut slot = self.session.lock().await;
        let Some(session) = slot.as_mut() else {
            return Err(self.shut_down.refusal()); // closed at shutdown
        };
        if session.client.state().is_terminated()
            || !session.lease.is_held()
            || dead.is_some_and(|dead| Arc::ptr_eq(dead, session))
        {
            tracing::warn!("the ZooKeeper session ended; starting a new one");
            *session = Arc::new(Session::start(&self.options).await?);
        }
        Ok(session.clone())
    }

    /// Creates the lock's parent node, once per handle.
    async fn make_parent(&self, client: &Client, parent: &str) -> Result<(), LockError> {
        if !unpoisoned(&self.parents).contains(parent) {
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            client.mkdir(parent, &persistent).await.map_err(backend_error)?;
            unpoisoned(&self.parents).insert(parent.to_owned());
        }
        Ok(())
    }

    /// Step 1: creates our node, protected against a lost answer. Returns its name and czxid.
    ///
    /// The node is `/seckill/locks/<key>/_c_<uuid>-lock-<sequence>`, with a new `<uuid>` for each acquire.
    /// If the create's answer is lost (the connection dropped), the node may exist anyway. The unique
    /// `_c_<uuid>` part lets us find it among the children instead of queueing twice (Curator's *protected
    /// mode*). We create again only once a listing has answered that it is not there.
    async fn enqueue(
        &self,
        client: &Client,
        key: &str,
        parent: &str,
        protected: &str,
        owner: &Owner,
    ) -> Result<(String, i64), LockError> {
        let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        loop {
            match client
                .create(&format!("{parent}/{protected}"), owner.as_str().as_bytes(), &ephemeral)
                .await
            {
                Ok((stat, sequence)) => return Ok((format!("{protected}{sequence}"), stat.czxid)),
                Err(error) if is_transient(&error) => {
                    tracing::debug!(%error, "the create of our node may have happened; looking for it");
                    let found = find_own_node(client, parent, protected)
                        .await
                        .map_err(|error| waiting_error(error, key))?;
                    if let Some(found) = found {
                        return Ok(found);
                    }
                }
                Err(error) => return Err(waiting_error(error, key)),
            }
        }
    }

    /// Steps 2 and 3, until we hold the lock: look, and if a node is before ours, wait for it to go. We
    /// watch only the immediate predecessor (no thundering herd: one release wakes one waiter), and look
    /// again when it goes. Unless it was the *only* node before ours: sequence numbers only grow, so no
    /// older node can appear later, and its deletion alone means we are first. With one waiter per instance
    /// (the local queue) and two instances, that is every hand-over: the event is the grant, with no
    /// listing after it.
    async fn wait_for_turn(&self, session: &Session, key: &str, parent: &str, own: &str) -> Result<(), LockError> {
        let client = &session.client;
        loop {
            let Some(Before { predecessor, alone }) = self.look(client, parent, own).await? else {
                return Ok(());
            };
            let (stat, watcher) = client
                .check_and_watch_stat(&format!("{parent}/{predecessor}"))
                .await
                .map_err(|error| waiting_error(error, key))?;
            if stat.is_none() {
                continue; // gone between the listing and the watch: look again
            }
            let event = tokio::select! {
                event = watcher.changed() => event,
                () = session.lease.lost() => return Err(LockError::Lost { key: key.to_owned() }),
            };
            self.wakeups.fetch_add(1, Ordering::SeqCst);
            // The only node before ours is gone, and none older can appear: ours is first.
            if alone && event.event_type == EventType::NodeDeleted && session.lease.is_held() {
                return Ok(());
            }
        }
    }

    /// Steps 2 and 3 for one look: `Ok(None)` if we hold it, or the node to wait for.
    async fn look(&self, client: &Client, parent: &str, own: &str) -> Result<Option<Before>, LockError> {
        self.looks.fetch_add(1, Ordering::SeqCst);
        let mut children = client
            .list_children(parent)
            .await
            .map_err(|error| waiting_error(error, parent))?;
        children.sort_by_key(|child| sequence_of(child));
        match children.iter().position(|child| child == own) {
            Some(0) => Ok(None),
            Some(mine) => Ok(Some(Before {
                predecessor: children[mine - 1].clone(),
                alone: mine == 1,
            })),
            // Our node is gone: the session that owned it expired.
            None => Err(LockError::Lost { key: parent.to_owned() }),
        }
    }

    fn grant(&self, key: &str, session: &Arc<Session>, path: String, czxid: i64) -> LockGuard {
        let grant = ZooKeeperGrant {
            path: Some(path),
            session: Arc::downgrade(session),
        };
        LockGuard::new(key, grant)
            .with_fencing_token(FencingToken::new(BACKEND, 0, czxid as u64))
            .with_lease(session.lease.clone())
    }
}

impl Session {
    /// Connects, and starts the lease the holder trusts (step 5). If the session expires (the server
    /// stopped hearing from this client for a whole session timeout), every ephemeral node of it is gone.
    /// So the guard's lease is counted from the last time the server heard from us: a small read every
    /// third of the timeout, and each answer means the server heard us after the read was sent. The lease
    /// ends a session timeout after the last read that was answered, even while the client still believes
    /// it is connected, and at once when the session expires. A new session is started at the next acquire.
    async fn start(options: &ZooKeeperLockOptions) -> Result<Session, LockError> {
        let connecting = Instant::now();
        let client = Client::connector()
            .with_session_timeout(options.session_timeout)
            .with_connection_timeout(CONNECT_TIMEOUT)
            .connect(&options.connect)
            .await
            .map_err(backend_error)?;
        let timeout = client.session_timeout();
        // Heard from: the server expires the session a timeout after it last heard from
        // us, and it heard a read that it answered after that read was sent. Counting from
        // the moment the client notices a disconnect would trust the session for as long
        // again after the server may have expired it.
        let prober = client.clone();
        let label = format!("session {}", client.session().id());
        let (heard_from, heard) = KeepAlive::spawn(BACKEND, &label, timeout, connecting, move || {
            let answered = prober.check_stat(PROBED_PATH);
            async move {
                match answered.await {
                    Ok(_) => Ok(true),
                    Err(zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed) => Ok(false),
                    Err(error) => Err(backend_error(error)),
                }
            }
        });
        // Ended: an expired or closed session is lost at once, without waiting for a read.
        let (state, ended) = Lease::watched(LeaseState::Held);
        let mut watcher = client.state_watcher();
        tokio::spawn(async move {
            while !watcher.changed().await.is_terminated() {}
            state.send_replace(LeaseState::Lost);
        });
        Ok(Session {
            client,
            lease: Lease::both(heard, ended),
            _heard_from: heard_from,
        })
    }
}

/// A new protected name for one acquire's node (step 1): `_c_<uuid>-lock-`.
fn protected_name() -> String {
    format!("_c_{:032x}{LOCK_NAME}", rand::random::<u128>())
}

/// Step 1's look after a lost answer: our node among the children, by its protected
/// name, with its czxid. Looks again after transient failures: creating again before a
/// look has answered could queue us twice.
async fn find_own_node(
    client: &Client,
    parent: &str,
    protected: &str,
) -> Result<Option<(String, i64)>, zookeeper_client::Error> {
    loop {
        let look = async {
            let children = client.list_children(parent).await?;
            let Some(name) = children.into_iter().find(|child| child.starts_with(protected)) else {
                return Ok(None);
            };
            let stat = client.check_stat(&format!("{parent}/{name}")).await?;
            Ok(stat.map(|stat| (name, stat.czxid)))
        };
        match look.await {
            Err(error) if is_transient(&error) && !client.state().is_terminated() => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            found => return found,
        }
    }
}

/// One acquire's node until it is granted. Dropped before that, it deletes the node
/// (step 4): whether the acquire failed, timed out, or was itself dropped by its caller
/// (a buyer turned away at shutdown), since a dropped future runs no clean-up after it.
struct Queued {
    client: Client,
    parent: String,
    protected: String,
    /// The node's name, once the create has answered.
    name: Option<String>,
    granted: bool,
}

impl Queued {
    fn new(client: &Client, parent: &str) -> Self {
        Queued {
            client: client.clone(),
            parent: parent.to_owned(),
            protected: protected_name(),
            name: None,
            granted: false,
        }
    }
}

impl Drop for Queued {
    /// Step 4 for an acquire that ended without a grant: our node goes, guaranteed, in
    /// the background. If its name is unknown (the create's answer was lost, or had not
    /// come yet), it is found by its protected name: the listing goes out after the
    /// create, and the server runs one session's requests in order.
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let (client, parent, protected, name) = (
            self.client.clone(),
            self.parent.clone(),
            self.protected.clone(),
            self.name.take(),
        );
        spawn_if_running(async move {
            let name = match name {
                Some(name) => name,
                None => match find_own_node(&client, &parent, &protected).await {
                    Ok(Some((name, _))) => name,
                    Ok(None) | Err(_) => return, // never created, or gone with the session
                },
            };
            let _ = delete_own_node(&client, &format!("{parent}/{name}")).await;
        });
    }
}

/// Spawns `task` if a runtime runs: a drop outside one has nobody to send it, and the
/// session's end takes the node instead.
fn spawn_if_running(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// The parent node of lock `key`: its queue.
fn parent_of(key: &str) -> String {
    format!("{LOCKS_ROOT}/{key}")
}

/// The sequence number at the end of a node's name.
fn sequence_of(name: &str) -> i64 {
    name.rsplit(LOCK_NAME)
        .next()
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(i64::MAX)
}

/// One grant: the own node, deleted on release. It does not keep the session open: a
/// session the lock dropped (replaced, or closed at shutdown) took the node with it.
struct ZooKeeperGrant {
    path: Option<String>,
    session: Weak<Session>,
}

#[async_trait]
impl Release for ZooKeeperGrant {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        let Some(path) = self.path.take() else { return Ok(()) };
        let Some(session) = self.session.upgrade() else {
            return Err(LockError::Lost { key: path });
        };
        let session_held = session.lease.is_held();
        match delete_own_node(&session.client, &path).await {
            Ok(()) if session_held => Ok(()),
            Ok(()) | Err(zookeeper_client::Error::NoNode | zookeeper_client::Error::SessionExpired) => {
                Err(LockError::Lost { key: path })
            }
            Err(error) => Err(backend_error(error)),
        }
    }
}

/// Step 4, guaranteed (as Curator's `guaranteed()` delete): while our node exists the whole queue behind it
/// waits. A node left behind would move up the queue and block every instance for as long as our session
/// lives. And a delete whose connection broke (the server we talked to died) may not have happened. So send
/// it again until it is done, the node is gone, or the session ended (its nodes go with it).
async fn delete_own_node(client: &Client, path: &str) -> Result<(), zookeeper_client::Error> {
    loop {
        match client.delete(path, None).await {
            Err(error) if is_transient(&error) && !client.state().is_terminated() => {
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
        if let (Some(path), Some(session)) = (self.path.take(), self.session.upgrade()) {
            let client = session.client.clone();
            spawn_if_running(async move {
                let _ = delete_own_node(&client, &path).await;
            });
        }
    }
}

#[async_trait]
impl DistributedLock for ZooKeeperLock {
    async fn try_acquire(&self, key: &str, owner: &Owner) -> Result<LockGuard, LockError> {
        let session = self.current_session(None).await?;
        let client = &session.client;
        let parent = parent_of(key);
        self.make_parent(client, &parent).await?;
        let mut queued = Queued::new(client, &parent);
        let (own, czxid) = self.enqueue(client, key, &parent, &queued.protected, owner).await?;
        queued.name = Some(own.clone());
        match self.look(client, &parent, &own).await? {
            None => {
                queued.granted = true;
                Ok(self.grant(key, &session, format!("{parent}/{own}"), czxid))
            }
            Some(_) => Err(LockError::Busy { key: key.to_owned() }),
        }
    }

    /// Queues, then waits for the predecessor's deletion (step 3) instead of polling. Every way out but a
    /// grant deletes our node (step 4), even this future's drop. A waiter whose session ends never held the
    /// lock (step 5): it queues again on a new session, at the back, until its deadline.
    async fn acquire(&self, key: &str, owner: &Owner, timeout: Duration) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut dead_session = None;
        loop {
            let session = self.current_session(dead_session.as_ref()).await?;
            let client = &session.client;
            let parent = parent_of(key);
            let mut queued = Queued::new(client, &parent);
            let attempt = async {
                self.make_parent(client, &parent).await?;
                let (name, czxid) = self.enqueue(client, key, &parent, &queued.protected, owner).await?;
                queued.name = Some(name.clone());
                self.wait_for_turn(&session, key, &parent, &name).await?;
                Ok::<_, LockError>((name, czxid))
            };
            let outcome = tokio::select! {
                outcome = tokio::time::timeout_at(deadline.into(), attempt) => outcome,
                () = self.closing.cancelled() => Ok(Err(self.shut_down.refusal())),
            };
            let error = match outcome {
                Ok(Ok((name, czxid))) => {
                    queued.granted = true;
                    return Ok(self.grant(key, &session, format!("{parent}/{name}"), czxid));
                }
                Ok(Err(error)) => error,
                Err(_) => LockError::Timeout {
                    key: key.to_owned(),
                    waited: started.elapsed(),
                },
            };
            drop(queued); // deletes our node (step 4)
            match error {
                // Our session ended while we waited, so our node is gone or going: queue again.
                LockError::Lost { .. } if Instant::now() < deadline => {
                    tracing::info!(
                        key,
                        "the ZooKeeper session ended while waiting; queueing again on a new session"
                    );
                    dead_session = Some(session.clone());
                }
                error => return Err(error),
            }
        }
    }

    /// Step 7: closes the session, after the waiters still queued gave up. The server then deletes every
    /// node of it at once, held or queued; later acquires are refused. A process that exits without closing
    /// leaves its session to expire, a whole session timeout later, and every instance waits behind its
    /// nodes until then.
    async fn shutdown(&self) -> Result<(), LockError> {
        self.shut_down.turn();
        self.closing.cancel();
        let Some(session) = self.session.lock().await.take() else {
            return Ok(()); // closed by an earlier shutdown
        };
        let mut state = session.client.state_watcher();
        drop(session);
        let closed = tokio::time::timeout(CLOSE_TIMEOUT, async {
            while !state.state().is_terminated() {
                state.changed().await;
            }
        })
        .await;
        closed.map_err(|_| {
            LockError::backend(
                BACKEND,
                std::io::Error::other(format!(
                    "the ZooKeeper session did not close within {CLOSE_TIMEOUT:?}; its nodes go when it expires"
                )),
            )
        })
    }
}
