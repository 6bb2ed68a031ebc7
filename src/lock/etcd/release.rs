//! Step 5: a grant, and its release. The release deletes the own key, and so does an
//! acquire that failed after sending it: the delete is guaranteed, as Curator's, since a
//! key left behind would block every instance.

use std::future::Future;
use std::sync::{Arc, Weak};

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use tokio::task::JoinHandle;

use super::queue::{Queued, Turn};
use super::retry::{send_again_while, RETRY_BUDGET};
use super::session::Session;
use super::{Connection, EtcdLock, BACKEND};
use crate::lock::{FencingToken, LockError, LockGuard};

/// One grant: the own key, deleted on release, and the turn that goes with it.
pub(super) struct EtcdGrant {
    pub(super) connection: Arc<Connection>,
    /// The lock's name.
    pub(super) key: String,
    pub(super) own_key: Option<(String, Turn)>,
    /// The own key's create revision: the grant's fencing token.
    pub(super) own_revision: i64,
    /// Weak, so a grant does not keep its session alive: when the instance goes, its lease goes.
    pub(super) session: Weak<Session>,
}

impl Connection {
    /// The grant of the key `queued` holds, first in the queue of lock `key`.
    pub(super) fn grant(self: &Arc<Self>, key: &str, queued: Queued, session: &Arc<Session>, turn: Turn) -> LockGuard {
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

impl EtcdGrant {
    /// Step 5, the release (`Release::release`): deletes our key. Waits for the delete up to
    /// [`RETRY_BUDGET`]; after that it goes on in the background, and the release reports the failure.
    pub(super) async fn delete_own_key(mut self: Box<Self>) -> Result<(), LockError> {
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

impl EtcdLock {
    /// Step 5 for an acquire that failed: our key goes, guaranteed, in the background.
    /// `revision` is the one our put created, `None` if its answer was lost.
    pub(super) fn delete_in_background(
        &self,
        own_key: String,
        revision: Option<i64>,
        session: &Arc<Session>,
        turn: Turn,
    ) {
        delete_in_background(
            self.connection.client.clone(),
            own_key,
            revision,
            Arc::downgrade(session),
            Some(turn),
        );
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
pub(super) fn delete_in_background(
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
pub(super) async fn delete_once(
    mut client: Client,
    own_key: String,
    revision: Option<i64>,
) -> Result<bool, etcd_client::Error> {
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
pub(super) async fn send_until_done<T, F, Fut>(
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
