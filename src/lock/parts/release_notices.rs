//! Release notices: a release tells the waiters of every instance to try now.
//!
//! A waiter that polls finds a release only at its next try, up to a backoff pause
//! ([`crate::lock::polling::BACKOFF_MAX`]) after it happened, and under contention that gap
//! is most of a sale. A notice closes it: a release is announced on a Redis channel
//! (`PUBLISH` the key), every instance listens (`SUBSCRIBE`), and the listener wakes
//! one local waiter of that key, which tries at once. One, not all: a release frees
//! the lock for one holder, and waking every waiter would only start a stampede.
//!
//! A notice is a hint, never a grant. The woken waiter still asks the lock, and may
//! lose to another; a notice that is lost (Redis down, the subscription being made
//! again) costs only the rest of a backoff pause. So a lock on any backend can take
//! notices from any Redis without weakening: the `redis` lock hears its own script's
//! `PUBLISH` on the lock Redis, and the locks whose backend cannot notify (the MySQL
//! locks, Redlock's independent masters) announce on the stock Redis after each
//! release is answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::unpoisoned;
use crate::lock::polling::poll_until_granted;
use crate::lock::{LockError, LockGuard};
use crate::store::redis_master::MasterConnection;

/// Where the locks announce releases (the payload is the key).
pub const RELEASE_CHANNEL: &str = "seckill:lock-released";
/// After the subscription broke, how long to wait before subscribing again.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);
/// How long connecting and subscribing may take.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Who wakes whom: one signal per key a local waiter waits on. Weak, so a key nobody
/// waits for any more is forgotten.
type Waiters = Arc<Mutex<HashMap<String, Weak<Notify>>>>;

/// One instance's end of the release channel: it wakes local waiters, and, when it has
/// a connection to publish on, announces this instance's releases.
pub struct ReleaseNotices {
    waiters: Waiters,
    /// `None` when releases announce themselves (the `redis` lock's release script).
    publisher: Option<MasterConnection>,
    listener: JoinHandle<()>,
}

impl ReleaseNotices {
    /// Listens on the Redis `subscribe_to` names (asked again at every resubscription,
    /// so a lock that follows a moving master listens to the master of the moment).
    /// Releases announce themselves.
    pub fn listen(subscribe_to: impl Fn() -> redis::Client + Send + 'static) -> Self {
        let waiters = Waiters::default();
        let listener = tokio::spawn(listen_for_releases(subscribe_to, waiters.clone()));
        ReleaseNotices {
            waiters,
            publisher: None,
            listener,
        }
    }

    /// Listens on `board` and announces this instance's releases there, for a lock whose
    /// own backend cannot notify.
    pub fn announce_on(board: MasterConnection) -> Self {
        let mut notices = Self::listen({
            let board = board.clone();
            move || board.client()
        });
        notices.publisher = Some(board);
        notices
    }

    /// Tells every instance that `key` was just released. Sent in the background: the
    /// releaser's buyer does not wait for it, and a failure only means a waiter finds
    /// the release at its next poll instead.
    pub fn announce(&self, key: &str) {
        let Some(mut publisher) = self.publisher.clone() else {
            return;
        };
        let key = key.to_owned();
        tokio::spawn(async move {
            let sent: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(RELEASE_CHANNEL)
                .arg(&key)
                .query_async(&mut publisher)
                .await;
            if let Err(error) = sent {
                tracing::debug!(%error, key, "could not announce a release; waiters will find it by polling");
            }
        });
    }

    /// The signal a release of `key` fires, created if no local waiter has it yet.
    /// Take it *before* the first attempt: a release that lands between a refused
    /// attempt and the wait then still wakes this waiter (the signal keeps a permit).
    pub fn signal(&self, key: &str) -> Arc<Notify> {
        let mut waiters = unpoisoned(&self.waiters);
        if let Some(signal) = waiters.get(key).and_then(Weak::upgrade) {
            return signal;
        }
        waiters.retain(|_, signal| signal.strong_count() > 0);
        let signal = Arc::new(Notify::new());
        waiters.insert(key.to_owned(), Arc::downgrade(&signal));
        signal
    }

    /// How many keys the waiter map remembers (for the test that it does not grow forever).
    pub fn remembered_keys(&self) -> usize {
        unpoisoned(&self.waiters).len()
    }

    /// Stops listening (at shutdown).
    pub fn stop(&self) {
        self.listener.abort();
    }
}

impl Drop for ReleaseNotices {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// The polling loop ([`poll_until_granted`]), each pause cut short by a notice that
/// `key` was released. Without notices, plain polling.
pub async fn poll_until_granted_or_noticed<Try, TryFut>(
    notices: Option<&ReleaseNotices>,
    key: &str,
    timeout: Duration,
    attempt: Try,
) -> Result<LockGuard, LockError>
where
    Try: FnMut() -> TryFut,
    TryFut: std::future::Future<Output = Result<LockGuard, LockError>>,
{
    let released = notices.map(|notices| notices.signal(key));
    poll_until_granted(key, timeout, attempt, |pause| {
        let released = released.clone();
        async move {
            pause_unless_released(released.as_deref(), pause).await;
        }
    })
    .await
}

/// One pause of a poll, cut short when `released` (a key's signal, see
/// [`ReleaseNotices::signal`]) fires: whether a release was announced. Without
/// notices, the whole pause.
pub async fn pause_unless_released(released: Option<&tokio::sync::Notify>, pause: Duration) -> bool {
    match released {
        Some(released) => tokio::time::timeout(pause, released.notified()).await.is_ok(),
        None => {
            tokio::time::sleep(pause).await;
            false
        }
    }
}

/// Wakes one local waiter for every release announced on [`RELEASE_CHANNEL`], for the
/// life of the lock; subscribes again when the connection breaks.
async fn listen_for_releases(subscribe_to: impl Fn() -> redis::Client, waiters: Waiters) {
    loop {
        let client = subscribe_to();
        match tokio::time::timeout(SUBSCRIBE_TIMEOUT, client.get_async_pubsub()).await {
            Ok(Ok(mut pubsub)) => {
                match tokio::time::timeout(SUBSCRIBE_TIMEOUT, pubsub.subscribe(RELEASE_CHANNEL)).await {
                    Ok(Ok(())) => {
                        let mut messages = pubsub.on_message();
                        while let Some(message) = messages.next().await {
                            let Ok(key) = message.get_payload::<String>() else {
                                continue;
                            };
                            let signal = unpoisoned(&waiters).get(&key).and_then(Weak::upgrade);
                            // `notify_one` keeps a permit if nobody waits yet, so a waiter
                            // that is just about to wait does not miss this release.
                            if let Some(signal) = signal {
                                signal.notify_one();
                            }
                        }
                        tracing::warn!("release channel closed; waiters fall back to backoff until it is back");
                    }
                    Ok(Err(error)) => tracing::warn!(%error, "cannot subscribe to lock releases"),
                    Err(_) => tracing::warn!(?SUBSCRIBE_TIMEOUT, "subscribing to lock releases timed out"),
                }
            }
            Ok(Err(error)) => tracing::debug!(%error, "cannot open the release subscription"),
            Err(_) => tracing::debug!(?SUBSCRIBE_TIMEOUT, "opening the release subscription timed out"),
        }
        tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
    }
}
