//! Step 7: a release that queues the next local buyer in the same transaction, and the
//! place that buyer waits on.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::sync::broadcast;

use super::kept_watch::Deletes;
use super::queue::{keys_ahead, list_the_queue, other_key_of, prefix_of, Queued, Turn, Wait};
use super::release::{delete_in_background, delete_once, send_until_done, EtcdGrant};
use super::retry::backend_error;
use super::session::Session;
use super::{Connection, BACKEND};
use crate::lock::{AwaitGrant, HandOver, LockError, LockGuard, Owner, QueuedPlace, Release};

/// How long a release that queues the next owner waits for its answer before it
/// deletes both keys instead. Until the answer comes, the next owner's key is in the
/// queue but nobody here knows it: once it is first, every instance waits for it.
/// Under `make bench`'s load the answer takes about a millisecond.
const HAND_OVER_TIMEOUT: Duration = Duration::from_millis(100);

/// Step 7 for `grant`: deletes its key and queues `next` at the back, in one transaction.
pub(super) async fn queue_the_next_owner(mut grant: Box<EtcdGrant>, next: &Owner) -> Result<HandOver, LockError> {
    let Some(session) = grant.session.upgrade().filter(|session| session.lease.is_held()) else {
        return grant.release().await.map(|()| HandOver::Released);
    };
    let Some((own_key, turn)) = grant.own_key.take() else {
        return Ok(HandOver::Released);
    };
    let (prefix, next_key) = (prefix_of(&grant.key), other_key_of(&own_key));
    // Listen before queueing, as an acquire does, but open no watch: the lock is
    // still held. Without a kept watch the place looks at the queue instead.
    let news = grant.connection.listen(&prefix);
    let txn = hand_over_txn(
        (&own_key, grant.own_revision),
        &next_key,
        next,
        session.lease_id,
        &prefix,
    );
    let (client, weak) = (grant.connection.client.clone(), grant.session.clone());
    let answer = tokio::time::timeout(HAND_OVER_TIMEOUT, client.clone().txn(txn)).await;
    let response = match answer {
        Ok(Ok(response)) => response,
        failed => {
            // It may have happened, or may yet: neither key may stay behind.
            delete_both_in_background(client, (own_key, grant.own_revision), next_key, weak, turn);
            return Err(match failed {
                Ok(Err(error)) => backend_error(error),
                _ => LockError::backend(
                    BACKEND,
                    std::io::Error::other("etcd did not answer a release that queued the next buyer in time"),
                ),
            });
        }
    };
    if !response.succeeded() {
        // Our key went with our lease (or the other key was left over): nothing was
        // deleted, nothing queued. Neither key may stay behind.
        let key = own_key.clone();
        delete_both_in_background(client, (own_key, grant.own_revision), next_key, weak, turn);
        return Err(LockError::Lost { key });
    }
    let revision = response.header().map_or(0, |header| header.revision());
    let ahead = keys_ahead(response.op_responses().get(2), revision);
    let queued = Queued {
        prefix,
        own_key: next_key,
        own_revision: revision,
        ahead,
        revision,
    };
    let place = EtcdPlace {
        connection: grant.connection.clone(),
        key: grant.key.clone(),
        waiting: Some((queued, turn)),
        news,
        session: Arc::downgrade(&session),
    };
    Ok(HandOver::Queued(QueuedPlace::new(&grant.key, place)))
}

/// The hand-over's one transaction: while our key is the one granted at `own_revision`
/// and the other key is free, delete ours, put `next` under the other key with our
/// lease, and list the queue.
fn hand_over_txn(
    (own_key, own_revision): (&str, i64),
    next_key: &str,
    next: &Owner,
    lease_id: i64,
    prefix: &str,
) -> Txn {
    let put = PutOptions::new().with_lease(lease_id);
    Txn::new()
        .when([
            Compare::create_revision(own_key, CompareOp::Equal, own_revision),
            Compare::create_revision(next_key, CompareOp::Equal, 0),
        ])
        .and_then([
            TxnOp::delete(own_key, None),
            TxnOp::put(next_key, next.as_str(), Some(put)),
            list_the_queue(prefix),
        ])
}

/// The place a release queued for the next owner (step 7): a key at the back of the
/// queue, waiting as an acquire's does. Dropped before its grant, the key is deleted.
struct EtcdPlace {
    connection: Arc<Connection>,
    /// The lock's name.
    key: String,
    waiting: Option<(Queued, Turn)>,
    news: Option<broadcast::Receiver<Deletes>>,
    session: Weak<Session>,
}

#[async_trait]
impl AwaitGrant for EtcdPlace {
    async fn granted(mut self: Box<Self>, deadline: Instant) -> Result<LockGuard, LockError> {
        let Some(session) = self.session.upgrade() else {
            return Err(LockError::Lost { key: self.key.clone() });
        };
        let (news, started) = (self.news.take(), Instant::now());
        // The key stays in `self` while it waits: a wait cut short drops the place, and
        // its `Drop` deletes the key.
        let (queued, _) = self.waiting.as_ref().expect("a place is granted once");
        let waited = match queued.holds() {
            true => Ok(Ok(Wait::First { woken: false })),
            false => {
                tokio::time::timeout_at(
                    deadline.into(),
                    self.connection.wait_until_first(queued, news, &session),
                )
                .await
            }
        };
        match waited {
            Ok(Ok(Wait::First { woken })) if session.lease.is_held() => {
                if woken {
                    self.connection.wakeups.fetch_add(1, Ordering::SeqCst);
                }
                let (queued, turn) = self.waiting.take().expect("a place is granted once");
                Ok(self.connection.grant(&self.key, queued, &session, turn))
            }
            // The place is dropped on the way out, and its key deleted.
            Ok(Err(error)) => Err(error),
            Err(_) => Err(LockError::Timeout {
                key: self.key.clone(),
                waited: started.elapsed(),
            }),
            Ok(Ok(_)) => Err(LockError::Lost { key: self.key.clone() }),
        }
    }
}

impl Drop for EtcdPlace {
    /// Never granted: the key leaves the queue, guaranteed, as a failed acquire's does.
    fn drop(&mut self) {
        if let Some((queued, turn)) = self.waiting.take() {
            delete_in_background(
                self.connection.client.clone(),
                queued.own_key,
                Some(queued.own_revision),
                self.session.clone(),
                Some(turn),
            );
        }
    }
}

/// Deletes both keys of a hand-over that failed or may still happen (step 7), each sent
/// again until it is done or the session's lease is lost. Our key goes first, guarded by
/// its revision: once that is done, a hand-over still in flight can no longer commit, as
/// it needs our key. Then the next owner's key, whatever its revision: the turn is held,
/// so only the hand-over can have put it. Both deletes are guarded ([`delete_once`]).
fn delete_both_in_background(
    client: Client,
    (own_key, own_revision): (String, i64),
    next_key: String,
    session: Weak<Session>,
    turn: Turn,
) {
    tokio::spawn(async move {
        let _turn = turn;
        let ours = || delete_once(client.clone(), own_key.clone(), Some(own_revision));
        send_until_done(&session, &own_key, ours).await;
        let next = || delete_once(client.clone(), next_key.clone(), None);
        send_until_done(&session, &next_key, next).await;
    });
}
