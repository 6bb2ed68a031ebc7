//! Step 4's kept watch: one watch per lock, opened at the lock's first acquire and kept
//! for the instance's life, whose deletes reach whichever waiter of this instance
//! listens; and the wait on it.

use std::sync::{Arc, Mutex as StdMutex};

use etcd_client::{Client, WatchFilterType, WatchOptions, WatchStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::queue::{cross_off, Queued, Wait};
use super::retry::{watch_canceled, watch_ended, RetryPauses, WatchFailure};
use super::session::Session;
use crate::lock::parts::unpoisoned;

/// How many watch messages a kept watch holds for a waiter that has not read them yet.
/// One waiter per instance and lock reads them as they come; one that falls this far
/// behind has missed some, and looks at the queue instead.
const KEPT_WATCH_BACKLOG: usize = 1024;

/// Step 4's watch of one lock's queue, kept open for the instance's life: the deletes
/// under the prefix, passed on to whichever waiter of this instance listens. A watch
/// per wait would cost etcd a watch and a look on every hand-over.
pub(super) struct KeptWatch {
    /// Where the deletes are passed on while the watch is open; `None` while it is
    /// opened again after a break.
    news: Arc<StdMutex<Option<broadcast::Sender<Deletes>>>>,
    passing_on: JoinHandle<()>,
}

/// The deletes of one watch message: each key with the revision that deleted it.
pub(super) type Deletes = Arc<Vec<(Vec<u8>, i64)>>;

impl KeptWatch {
    /// Opens the watch of the deletes under `prefix`, and passes them on from then on.
    pub(super) async fn open(mut client: Client, prefix: &str) -> Result<KeptWatch, WatchFailure> {
        let stream = watch_deletes(&mut client, prefix).await?;
        let (sender, _) = broadcast::channel(KEPT_WATCH_BACKLOG);
        let news = Arc::new(StdMutex::new(Some(sender.clone())));
        let passing_on = tokio::spawn(pass_on(client, prefix.to_owned(), (stream, sender), news.clone()));
        Ok(KeptWatch { news, passing_on })
    }

    /// A receiver of every delete from now on, or `None` while the watch is broken.
    pub(super) fn listen(&self) -> Option<broadcast::Receiver<Deletes>> {
        unpoisoned(&self.news).as_ref().map(broadcast::Sender::subscribe)
    }
}

impl Drop for KeptWatch {
    fn drop(&mut self) {
        self.passing_on.abort();
    }
}

/// Passes each message of the kept watch on, for ever. When the stream breaks, its
/// sender goes: every receiver of it hears that it is closed (its waiter looks at the
/// queue instead, as it may have missed a delete), and the watch is opened again.
async fn pass_on(
    mut client: Client,
    prefix: String,
    (mut stream, mut sender): (WatchStream, broadcast::Sender<Deletes>),
    news: Arc<StdMutex<Option<broadcast::Sender<Deletes>>>>,
) {
    let mut pauses = RetryPauses::default();
    loop {
        let broke = loop {
            match stream.message().await {
                Ok(Some(message)) if !message.canceled() => {
                    // A watch that delivers is a success: a watch that breaks as soon as
                    // it opens is opened again after the pauses, not in a spin.
                    pauses.reset();
                    let deletes: Vec<(Vec<u8>, i64)> = message
                        .events()
                        .iter()
                        .filter_map(|event| event.kv())
                        .map(|deleted| (deleted.key().to_vec(), deleted.mod_revision()))
                        .collect();
                    // No receiver: no waiter of this instance at the moment.
                    let _ = sender.send(Arc::new(deletes));
                }
                Ok(Some(_)) => break watch_canceled().source,
                Ok(None) => break watch_ended().source,
                Err(error) => break error,
            }
        };
        *unpoisoned(&news) = None;
        drop(sender);
        tracing::debug!(prefix, error = %broke, "the kept etcd watch broke; opening it again");
        stream = loop {
            pauses.after_a_failure().await;
            match watch_deletes(&mut client, &prefix).await {
                Ok(stream) => break stream,
                Err(error) => {
                    tracing::debug!(prefix, error = %error.source, "could not open the kept etcd watch again")
                }
            }
        };
        sender = broadcast::channel(KEPT_WATCH_BACKLOG).0;
        *unpoisoned(&news) = Some(sender.clone());
    }
}

/// A watch of the deletes under `prefix`, from the current revision, once etcd says it
/// is set up. Only deletes: a key put after ours queues behind it.
pub(super) async fn watch_deletes(client: &mut Client, prefix: &str) -> Result<WatchStream, WatchFailure> {
    let deletes_under_the_prefix = WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoPut]);
    let mut stream = client.watch(prefix, Some(deletes_under_the_prefix)).await?;
    loop {
        match stream.message().await? {
            Some(message) if message.canceled() => return Err(watch_canceled()),
            Some(message) if message.created() => return Ok(stream),
            Some(_) => continue,
            None => return Err(watch_ended()),
        }
    }
}

/// Step 4 on the kept watch: crosses off the keys the enqueue saw ahead of ours as
/// their deletes come. `None` when the kept watch broke or this waiter fell behind it:
/// a delete may have been missed, so the caller looks instead.
pub(super) async fn wait_on_the_kept_watch(
    queued: &Queued,
    mut news: broadcast::Receiver<Deletes>,
    session: &Session,
) -> Option<Wait> {
    let mut ahead = queued.ahead.clone();
    let first = async {
        loop {
            let deletes = news.recv().await.ok()?;
            let deletes = deletes.iter().map(|(key, revision)| (key.as_slice(), *revision));
            if let Some(waited) = cross_off(&mut ahead, queued.own_key.as_bytes(), queued.revision, deletes) {
                return Some(waited);
            }
        }
    };
    tokio::select! {
        first = first => first,
        () = session.lease.lost() => Some(Wait::Lost),
    }
}
