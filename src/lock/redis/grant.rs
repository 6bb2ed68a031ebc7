//! Steps 2, 3 and 8: one grant held. Its lease renewed, its release, and its hand-over to the next
//! owner, which makes a grant of its own. Apart from the lock because a guard carries it, and a hand-over
//! runs from it with no lock at hand.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::grants::{clean_up, wait_for_replicas, CLEANUP_TTLS};
use super::{new_token, RedisLock, RedisLockOptions, Scripts, BACKEND};
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::LeaseKeeper;
use crate::lock::parts::release_notices::RELEASE_CHANNEL;
use crate::lock::{FencingToken, HandOver, Lease, LockError, LockGuard, Owner, Release};
use crate::store::redis_master::{may_mean_the_master_moved, MasterConnection};

/// Step 2: the lease of `token`'s grant of `key`, made by a request sent at `sent`: renewed on `connection`
/// every `ttl / 3` by a background task, or fixed. A slow critical section keeps its lock; a crashed holder
/// stops renewing and the key expires.
///
/// A holder paused longer than the TTL (GC, swap, a stalled VM) loses the lock without knowing and may
/// still write. Renewal narrows the window; the guard's `is_held()` narrows it more; the fencing token
/// closes it, because the stock Redis refuses a read or write with an older token ([`crate::sale::stock`]).
/// Expiry is measured by the Redis server's clock: a jump in it can end a lease early and let a second
/// holder in, and the token still refuses the first holder's late write (`tests/it/chaos/clock_jumps.rs`).
/// The holder's own view of its lease runs on the monotonic clock, which a jump of its wall clock does not
/// move.
pub(super) fn keep_alive(
    connection: &MasterConnection,
    scripts: &Arc<Scripts>,
    options: RedisLockOptions,
    (key, token): (&str, &str),
    sent: Instant,
) -> (LeaseKeeper, Lease) {
    let (connection, scripts, ttl) = (connection.clone(), scripts.clone(), options.ttl);
    let wait = options.wait_for_replicas;
    let (key_owned, token) = (key.to_owned(), token.to_owned());
    LeaseKeeper::start(options.renew, BACKEND, key, ttl, sent, move || {
        let (mut connection, scripts) = (connection.clone(), scripts.clone());
        let (key, token) = (key_owned.clone(), token.clone());
        async move {
            let moves_before = connection.moves();
            let extended: i64 = scripts
                .renew
                .key(&key)
                .arg(&token)
                .arg(ttl.as_millis() as u64)
                .invoke_async(&mut connection)
                .await
                .map_err(|e| LockError::backend(BACKEND, e))?;
            if extended == 1 {
                wait_for_replicas(&mut connection, wait, moves_before, "renewal").await?;
            }
            Ok(extended == 1)
        }
    })
}

/// One grant: what its release needs.
pub(super) struct RedisGrant {
    pub(super) key: String,
    pub(super) token: String,
    pub(super) connection: MasterConnection,
    pub(super) scripts: Arc<Scripts>,
    pub(super) held: HeldGrants<String, String>,
    /// The lease: renewed while the grant lives, when renewal is on.
    pub(super) lease: LeaseKeeper,
    /// What the next grant of a hand-over (step 8) is made with; `None` where the lock
    /// releases instead.
    pub(super) hand_over_with: Option<RedisLockOptions>,
}

impl RedisGrant {
    /// The owner-checked delete: 1 when the key was still ours.
    async fn send_release(&mut self) -> redis::RedisResult<i64> {
        self.scripts
            .release
            .key(&self.key)
            .arg(&self.token)
            .arg(RELEASE_CHANNEL)
            .invoke_async(&mut self.connection)
            .await
    }
}

#[async_trait]
impl Release for RedisGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        // Stop renewing first, so a renewal cannot race the delete.
        grant.lease.stop();
        let mut answer = grant.send_release().await;
        if let Err(error) = &answer {
            // The connection may have followed a failover on this very error: the
            // release is owner-checked, so sending it once more, to the new master, is safe.
            if grant.connection.follows_sentinels() && may_mean_the_master_moved(error) {
                answer = grant.send_release().await;
            }
        }
        let deleted = answer.map_err(|e| LockError::backend(BACKEND, e))?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(LockError::Lost { key: grant.key.clone() })
        }
    }

    /// Step 8: one script gives the key to `next` and numbers that grant.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let Some(options) = self.hand_over_with else {
            return self.release().await.map(|()| HandOver::Released);
        };
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the key changes hands
        let next_token = new_token(next);
        let sent = Instant::now();
        let answer: redis::RedisResult<(i64, u64)> = grant
            .scripts
            .hand_over
            .key(&grant.key)
            .key(RedisLock::fencing_key(&grant.key))
            .key(RedisLock::epoch_key(&grant.key))
            .arg(&grant.token)
            .arg(&next_token)
            .arg(options.ttl.as_millis() as u64)
            .invoke_async(&mut grant.connection)
            .await;
        match answer {
            Ok((-2, _)) => Err(LockError::Lost { key: grant.key.clone() }),
            // No epoch to number the grant with: the key is still ours, so release it.
            Ok((-1, _)) => Box::new(grant).release().await.map(|()| HandOver::Released),
            Ok((epoch, counter)) => {
                let key = (grant.key.as_str(), next_token.as_str());
                let (keeper, lease) = keep_alive(&grant.connection, &grant.scripts, options, key, sent);
                grant.held.insert(next_token.clone(), grant.key.clone());
                let handed = RedisGrant {
                    key: grant.key.clone(),
                    token: next_token,
                    connection: grant.connection.clone(),
                    scripts: grant.scripts.clone(),
                    held: grant.held.clone(),
                    lease: keeper,
                    hand_over_with: Some(options),
                };
                Ok(HandOver::Granted(
                    LockGuard::new(&grant.key, handed)
                        .with_fencing_token(FencingToken::new(BACKEND, epoch as u64, counter))
                        .with_lease(lease),
                ))
            }
            Err(error) => {
                // The script may have run: the key is ours, or `next`'s. Release whichever.
                let give_up = options.ttl * CLEANUP_TTLS;
                clean_up(&grant.connection, &grant.scripts, &grant.key, next_token, give_up);
                clean_up(
                    &grant.connection,
                    &grant.scripts,
                    &grant.key,
                    grant.token.clone(),
                    give_up,
                );
                Err(LockError::backend(BACKEND, error))
            }
        }
    }
}

impl Drop for RedisGrant {
    fn drop(&mut self) {
        self.held.remove(&self.token);
    }
}
