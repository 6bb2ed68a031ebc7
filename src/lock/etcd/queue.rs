//! Steps 2 and 3: the queue. Each instance puts one key under the lock's prefix, and the
//! oldest key holds the lock. Here are the keys' names, the enqueue, and how a delete
//! crosses a key off those ahead of ours.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::retry::{backend_error, is_lease_gone, retry_transient};
use super::session::Session;
use super::EtcdLock;
use crate::lock::parts::unpoisoned;
use crate::lock::{LockError, Owner};

/// Every lock key lives under this prefix, then the lock's name.
const KEY_PREFIX: &str = "seckill/locks/";
/// Ends a session's second key in a queue (step 7).
const OTHER_KEY_SUFFIX: &str = ".1";

/// This instance's turn at one lock, held from the enqueue until its key is deleted.
pub(super) type Turn = tokio::sync::OwnedMutexGuard<()>;

impl EtcdLock {
    /// Step 2's turn: this instance's acquires of `key` share one queue key, so they take turns for it. A
    /// session has one key per lock, so etcd's history holds one key per instance, not one dead key per
    /// grant.
    pub(super) fn turns_of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        unpoisoned(&self.turns).entry(key.to_owned()).or_default().clone()
    }

    /// Steps 2 and 3: queues the session's key under `key`'s prefix, in a transaction that creates it only
    /// if it is absent, and lists the names in the queue with their create revisions in the same answer.
    /// Sent again after a transient failure. If the key is there already, it is ours: a try whose answer
    /// was lost created it, and we take it up instead of queueing twice.
    pub(super) async fn enqueue(
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
}

/// Where the queue of lock `key` lives: every key under this prefix.
pub(super) fn prefix_of(key: &str) -> String {
    format!("{KEY_PREFIX}{key}/")
}

/// The session's own key in the queue of lock `key`: named after its lease, in hex, as etcd's Go client
/// names it (step 2).
pub(super) fn own_key_of(key: &str, session: &Session) -> String {
    format!("{}{:x}", prefix_of(key), session.lease_id)
}

/// The session's other key in the same queue (step 7): a release that queues the next
/// owner puts this one as it deletes `own_key`, since a transaction may write a key once.
pub(super) fn other_key_of(own_key: &str) -> String {
    match own_key.strip_suffix(OTHER_KEY_SUFFIX) {
        Some(first) => first.to_owned(),
        None => format!("{own_key}{OTHER_KEY_SUFFIX}"),
    }
}

/// A transaction's read of the queue under `prefix`, for [`keys_ahead`]: names and
/// revisions only, since a queue of one key per instance is short.
pub(super) fn list_the_queue(prefix: &str) -> TxnOp {
    TxnOp::get(prefix, Some(GetOptions::new().with_prefix().with_keys_only()))
}

/// The keys a transaction's listing of the queue shows ahead of ours: those created
/// before `own_revision`. None for an unknown revision (0).
pub(super) fn keys_ahead(listing: Option<&TxnOpResponse>, own_revision: i64) -> HashSet<Vec<u8>> {
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
pub(super) enum Enqueued {
    Queued(Queued),
    LeaseGone,
}

/// A key of ours in the queue.
pub(super) struct Queued {
    pub(super) prefix: String,
    pub(super) own_key: String,
    pub(super) own_revision: i64,
    /// The keys with an older create revision than ours, at `revision`.
    pub(super) ahead: HashSet<Vec<u8>>,
    /// The revision at which the enqueue listed the queue.
    pub(super) revision: i64,
}

impl Queued {
    pub(super) fn holds(&self) -> bool {
        self.own_revision != 0 && self.ahead.is_empty()
    }

    /// The revision our put created, if the enqueue learned it.
    pub(super) fn known_revision(&self) -> Option<i64> {
        (self.own_revision != 0).then_some(self.own_revision)
    }
}

/// What one watch message of the queue's deletes means for a waiter. Each delete newer
/// than the revision at which the keys `ahead` were listed (`looked_at`: the enqueue's,
/// or a look's) crosses its key off them. Our own key among
/// them is a lost session, whatever else the message holds; none left ahead is the grant.
/// `None`: still waiting.
pub(super) fn cross_off<'a>(
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
pub(super) enum Wait {
    /// No key older than ours is left: we hold the lock. `woken` when a watch event told
    /// us (a holder released), not the look.
    First { woken: bool },
    /// Our key was deleted, or our lease lost, while we waited: no grant.
    Lost,
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
