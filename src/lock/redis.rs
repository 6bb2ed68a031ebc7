//! A lock on one Redis server: `SET key token NX PX ttl`.
//!
//! ## How it works
//! 1. **Acquire.** `SET lock:stock <token> NX PX <ttl>` creates the key only if it is
//!    absent (`NX`) and lets it expire after `ttl` milliseconds (`PX`). The token is a
//!    random value unique to this acquisition: it says *who* holds the lock. In the same
//!    script, `INCR lock:stock:fence` hands out a fencing token that grows with every grant.
//! 2. **Renew.** While the lock is held, a background task runs every `ttl / 3`:
//!    "if the key still holds my token, `PEXPIRE` it". A slow critical section keeps
//!    its lock; a crashed holder stops renewing and the key expires.
//! 3. **Release.** "If the key still holds my token, `DEL` it" — as one Lua script,
//!    because a separate `GET` then `DEL` could delete a lock that expired in between
//!    and was granted to somebody else. The script then `PUBLISH`es on a channel.
//! 4. **Wait.** A waiter sleeps a short jittered backoff, woken early by that
//!    publication. Each instance subscribes once and wakes one local waiter per
//!    release, so a release does not start a stampede of retries.
//!
//! ## Limitations
//! - **One server.** If the Redis master fails over before its replica got the key,
//!   two clients can hold the lock. Redlock answers that with several masters.
//! - **Expiry vs pauses.** A holder paused longer than the TTL (GC, swap, a stalled
//!   VM) loses the lock without knowing and may still write. Renewal narrows the
//!   window; the guard's `is_held()` narrows it more; only a storage that checks the
//!   fencing token closes it.
//! - **Clocks.** Expiry is measured by the Redis server's clock; a jump in that clock
//!   can end a lease early.
//!
//! ## References
//! - Redis docs, "Distributed Locks with Redis": <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>
//! - Martin Kleppmann, "How to do distributed locking" (fencing tokens):
//!   <https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html>

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::Script;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{DistributedLock, KeepAlive, LockError, LockGuard};

const BACKEND: &str = "redis";

/// Set the key only if absent, with a TTL; on success hand out the next fencing token.
/// KEYS[1] = lock key, KEYS[2] = fencing counter; ARGV[1] = token, ARGV[2] = ttl in ms.
const ACQUIRE_SCRIPT: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"#;

/// Extend the lease only if it is still ours. KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = ttl in ms.
const RENEW_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Delete the key only if it is still ours, then tell the waiters.
/// KEYS[1] = lock key; ARGV[1] = token, ARGV[2] = release channel.
const RELEASE_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
"#;

/// Every release is announced on this channel, with the released key as the message.
const RELEASE_CHANNEL: &str = "seckill:lock-released";

/// How long the release listener waits before resubscribing after Redis went away.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

/// How a [`RedisLock`] behaves.
#[derive(Clone, Copy, Debug)]
pub struct RedisLockOptions {
    /// The lease: how long the key lives without renewal.
    pub ttl: Duration,
    /// Renew the lease every `ttl / 3` while held. Off only to demonstrate expiry.
    pub renew: bool,
}

impl Default for RedisLockOptions {
    fn default() -> Self {
        RedisLockOptions { ttl: Duration::from_secs(3), renew: true }
    }
}

/// A lock held as a Redis key with an owner token and a lease.
pub struct RedisLock {
    connection: ConnectionManager,
    options: RedisLockOptions,
    acquire: Script,
    renew: Arc<Script>,
    release: Script,
    /// One wake-up signal per key, fed by the release listener.
    released: Arc<StdMutex<HashMap<String, Arc<Notify>>>>,
    listener: JoinHandle<()>,
}

impl RedisLock {
    /// Connects, and subscribes to release announcements.
    pub async fn connect(client: &redis::Client, options: RedisLockOptions) -> Result<Self, LockError> {
        let connection =
            crate::redis_store::connection_manager(client).await.map_err(|e| LockError::backend(BACKEND, e))?;
        let released: Arc<StdMutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let listener = tokio::spawn(listen_for_releases(client.clone(), released.clone()));
        Ok(RedisLock {
            connection,
            options,
            acquire: Script::new(ACQUIRE_SCRIPT),
            renew: Arc::new(Script::new(RENEW_SCRIPT)),
            release: Script::new(RELEASE_SCRIPT),
            released,
            listener,
        })
    }

    fn release_signal(&self, key: &str) -> Arc<Notify> {
        signal_for(&self.released, key)
    }

    fn fencing_key(key: &str) -> String {
        format!("{key}:fence")
    }

    /// Starts the renewal task for a freshly granted lease.
    fn keep_alive(&self, key: &str, token: &str) -> KeepAlive {
        let (connection, script, ttl) = (self.connection.clone(), self.renew.clone(), self.options.ttl);
        let (key_owned, token) = (key.to_owned(), token.to_owned());
        KeepAlive::spawn(BACKEND, key, ttl, move || {
            let (mut connection, script) = (connection.clone(), script.clone());
            let (key, token) = (key_owned.clone(), token.clone());
            async move {
                let extended: i64 = script
                    .key(&key)
                    .arg(&token)
                    .arg(ttl.as_millis() as u64)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(|e| LockError::backend(BACKEND, e))?;
                Ok(extended == 1)
            }
        })
    }
}

impl Drop for RedisLock {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

fn signal_for(signals: &StdMutex<HashMap<String, Arc<Notify>>>, key: &str) -> Arc<Notify> {
    let mut signals = signals.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    signals.entry(key.to_owned()).or_default().clone()
}

/// Wakes one local waiter for every release announced on [`RELEASE_CHANNEL`].
/// Runs for the life of the lock; resubscribes when Redis comes back.
async fn listen_for_releases(client: redis::Client, signals: Arc<StdMutex<HashMap<String, Arc<Notify>>>>) {
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(RELEASE_CHANNEL).await {
                Ok(()) => {
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        if let Ok(key) = message.get_payload::<String>() {
                            // `notify_one` stores a permit if nobody is waiting yet, so a
                            // waiter that is just about to wait does not miss this release.
                            signal_for(&signals, &key).notify_one();
                        }
                    }
                    tracing::warn!("release channel closed; waiters fall back to backoff until it is back");
                }
                Err(error) => tracing::warn!(%error, "cannot subscribe to lock releases"),
            },
            Err(error) => tracing::debug!(%error, "cannot open the release subscription"),
        }
        tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
    }
}

#[async_trait]
impl DistributedLock for RedisLock {
    fn name(&self) -> &'static str {
        BACKEND
    }

    async fn try_acquire(&self, key: &str) -> Result<LockGuard, LockError> {
        let token = new_token();
        let fencing_token: u64 = self
            .acquire
            .key(key)
            .key(Self::fencing_key(key))
            .arg(&token)
            .arg(self.options.ttl.as_millis() as u64)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| LockError::backend(BACKEND, e))?;
        if fencing_token == 0 {
            return Err(LockError::Busy { key: key.to_owned() });
        }
        let mut guard = LockGuard::new(key, token);
        guard.fencing_token = Some(fencing_token);
        if self.options.renew {
            guard.keepalive = Some(self.keep_alive(key, &guard.token));
        }
        Ok(guard)
    }

    async fn wait_for_release(&self, key: &str, pause: Duration) {
        let released = self.release_signal(key);
        let _ = tokio::time::timeout(pause, released.notified()).await;
    }

    async fn release(&self, mut guard: LockGuard) -> Result<(), LockError> {
        // Stop renewing first, so a renewal cannot race the delete.
        drop(guard.keepalive.take());
        let deleted: i64 = self
            .release
            .key(&guard.key)
            .arg(&guard.token)
            .arg(RELEASE_CHANNEL)
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|e| LockError::backend(BACKEND, e))?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(LockError::Lost { key: guard.key })
        }
    }
}

/// 128 random bits: no two acquisitions, in any instance, share a token.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
