//! Step 4: the wait for one's turn, until no key older than ours is left, and the
//! acquire's loop that queues and waits until it holds the lock or queues again.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use etcd_client::{Client, GetOptions};
use tokio::sync::broadcast;

use super::kept_watch::{wait_on_the_kept_watch, watch_deletes, Deletes, KeptWatch};
use super::queue::{cross_off, own_key_of, prefix_of, Enqueued, Queued, Wait};
use super::release::delete_in_background;
use super::retry::{backend_error, retry_transient, watch_canceled, watch_ended, RetryPauses, WatchFailure};
use super::session::Session;
use super::{Connection, EtcdLock};
use crate::lock::parts::unpoisoned;
use crate::lock::{LockError, Owner};

/// A key of ours that no key is ahead of: an acquire's grant, once the turn goes with it.
pub(super) struct First {
    pub(super) queued: Queued,
    pub(super) session: Arc<Session>,
    /// A watch event told us (a holder released), not the enqueue or a look.
    pub(super) woken: bool,
}

impl First {
    fn new(queued: Queued, session: Arc<Session>, woken: bool) -> Self {
        First { queued, session, woken }
    }
}

/// The key an acquire may have put, so the acquire can delete it if it ends without a grant.
pub(super) struct SentKey {
    pub(super) own_key: String,
    /// The revision our put created; `None` while its answer has not come.
    pub(super) revision: Option<i64>,
    pub(super) session: Weak<Session>,
}

impl EtcdLock {
    /// Steps 2 to 4 of an acquire. The caller cuts them off at `deadline`, wherever they are. `sent` names
    /// the key they may have put, for the caller's clean-up. (A session start cut off leaves a lease nobody
    /// renews: it runs out, with no key on it.) A waiter whose key went while it waited never held the
    /// lock, and queues again at the back. That is the check etcd added after Jepsen found that a waiter
    /// could believe it held a lock its expired session had lost. It takes a new session only if its lease
    /// is lost: someone else may have deleted the key, and the lease holds this instance's other grants
    /// too. If etcd ended the lease, the enqueue says so.
    pub(super) async fn queue_and_wait(
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
            let Some(queued) = self
                .enqueue_noting_the_key(&session, key, owner, deadline, sent)
                .await?
            else {
                dead_session = Some(session);
                continue;
            };
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
            if self.is_still_there(&queued, deadline).await? && session.lease.is_held() {
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

    /// Step 2 of a waiting acquire: the enqueue, with a note in `sent` of the key it may have put.
    /// `None` when etcd refused the put because the session's lease is gone: no key was made.
    async fn enqueue_noting_the_key(
        &self,
        session: &Arc<Session>,
        key: &str,
        owner: &Owner,
        deadline: Instant,
        sent: &mut Option<SentKey>,
    ) -> Result<Option<Queued>, LockError> {
        // The put may happen even if its answer is lost; its revision is then unknown.
        *sent = Some(SentKey {
            own_key: own_key_of(key, session),
            revision: None,
            session: Arc::downgrade(session),
        });
        let queued = match self.enqueue(session, key, owner, deadline).await? {
            Enqueued::Queued(queued) => queued,
            Enqueued::LeaseGone => {
                // etcd refused the put with its lease: no key was made.
                *sent = None;
                return Ok(None);
            }
        };
        sent.replace(SentKey {
            own_key: queued.own_key.clone(),
            revision: queued.known_revision(),
            session: Arc::downgrade(session),
        });
        Ok(Some(queued))
    }

    /// After a wait that ended without a grant: whether our key is still in the queue, as
    /// our put created it. Read once more, and again after transient failures.
    async fn is_still_there(&self, queued: &Queued, deadline: Instant) -> Result<bool, LockError> {
        let own = retry_transient(deadline, || {
            let (mut client, own_key) = (self.connection.client.clone(), queued.own_key.clone());
            self.connection.requests_while_waiting.fetch_add(1, Ordering::SeqCst);
            async move { client.get(own_key, None).await }
        })
        .await
        .map_err(backend_error)?;
        Ok(own
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == queued.own_revision))
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
    pub(super) async fn wait_until_first(
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
    pub(super) async fn news_of(&self, prefix: &str) -> Option<broadcast::Receiver<Deletes>> {
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
    pub(super) fn listen(&self, prefix: &str) -> Option<broadcast::Receiver<Deletes>> {
        unpoisoned(&self.kept_watches).get(prefix)?.listen()
    }
}

/// What one look at the queue saw.
enum Look {
    /// The look ends the wait: our key is gone, or none is ahead of it.
    Decided(Wait),
    /// The keys ahead of ours at `revision`.
    Ahead { revision: i64, keys: HashSet<Vec<u8>> },
}
