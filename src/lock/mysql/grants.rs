//! A grant of a row: its token, its guard (renewed every `ttl / 3`), and its release or
//! hand-over (steps 2, 3, 5 and 6). The lock and its guards share [`Grants`]: a hand-over
//! makes the next grant from the guard of the last.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::statements::{DELETE_LAST_HOLD, DELETE_ROW, HAND_OVER, RELEASE_ONE_HOLD, RENEW};
use super::{backend_error, MySqlLockOptions, BACKEND};
use crate::lock::parts::counters::AttemptCounters;
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::LeaseKeeper;
use crate::lock::parts::kept_connections::KeptConnections;
use crate::lock::parts::release_notices::ReleaseNotices;
use crate::lock::{FencingToken, HandOver, LockError, LockGuard, Owner, Release};
use crate::store::mysql::{error_number, micros, ER_LOCK_DEADLOCK};

/// The epoch of the tokens taken from `grant_id` and `hand_overs` (steps 5 and 6), so they outrank every
/// older one at the stock's fence. An earlier version raised a counter in `seckill_lock_fences` and stamped
/// it on the row: three statements per grant, and a half-made row to clean up when the second or third
/// failed. Those tokens were epoch 0, and `grant_id` alone was epoch 1.
const TOKEN_EPOCH: u64 = 2;
/// A token is `grant_id * HAND_OVERS_PER_ROW + hand_overs` (step 6), so a row is handed
/// over fewer times than this; then it is released, and the next grant is a new row.
/// Decimal, so that a token reads as its row and its hand-over: 1234005.
const HAND_OVERS_PER_ROW: u64 = 1000;

/// What making a grant and giving it back need, shared by the lock and its guards: a
/// hand-over (step 6) makes the next grant from the guard of the last.
#[derive(Clone)]
pub(super) struct Grants {
    /// Every statement of the lock goes through its kept connections; the sweeper uses the pool. There a
    /// statement waits at most one TTL for its answer: a row it wrote later has expired by then.
    pub(super) connections: KeptConnections,
    pub(super) options: MySqlLockOptions,
    pub(super) counters: Arc<AttemptCounters>,
    /// Grants this handle holds, grant id to (name, owner), so `shutdown` can delete them.
    pub(super) held: HeldGrants<u64, (String, String)>,
    /// Release notices on a Redis, when the wiring gives some: MySQL cannot notify.
    pub(super) notices: Option<Arc<ReleaseNotices>>,
}

/// One grant of a row: the row's id, and how many times the row was handed over
/// before this grant (step 6). Together they are the fencing token.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowGrant {
    pub(super) grant_id: u64,
    pub(super) hand_overs: u64,
}

impl RowGrant {
    pub(super) fn inserted(grant_id: u64) -> Self {
        RowGrant {
            grant_id,
            hand_overs: 0,
        }
    }

    fn token(self) -> FencingToken {
        FencingToken::new(
            BACKEND,
            TOKEN_EPOCH,
            self.grant_id * HAND_OVERS_PER_ROW + self.hand_overs,
        )
    }

    /// The grant a hand-over of this one makes, if the token has room for it.
    fn handed_over(self) -> Option<Self> {
        let hand_overs = self.hand_overs + 1;
        (hand_overs < HAND_OVERS_PER_ROW).then_some(RowGrant { hand_overs, ..self })
    }
}

/// How a row was granted.
#[derive(Clone, Copy)]
pub(super) enum Granted {
    /// A new grant (inserted, or taken over from an expired holder): a new token.
    Fresh,
    /// The owner re-entered its own row: its token stays.
    Reentered,
}

/// How often a release is retried after losing a deadlock, and the pause before each retry
/// (grown by the attempt number): waiters' inserts come and go, so a retry soon wins.
const RELEASE_ATTEMPTS: u32 = 20;
const RELEASE_RETRY_PAUSE: Duration = Duration::from_millis(2);

/// Whether this transaction was chosen as a deadlock victim and rolled back.
pub(super) fn is_deadlock(error: &sqlx::Error) -> bool {
    error_number(error) == Some(ER_LOCK_DEADLOCK)
}

impl Grants {
    /// A grant of row `row` of `name`, asked for at `sent`: held here until released
    /// (a fresh one), renewed, with its fencing token.
    pub(super) fn guard(&self, name: &str, owner: &Owner, row: RowGrant, granted: Granted, sent: Instant) -> LockGuard {
        if let Granted::Fresh = granted {
            self.counters.grant();
            self.held
                .insert(row.grant_id, (name.to_owned(), owner.as_str().to_owned()));
        }
        let (connections, ttl) = (self.connections.clone(), self.options.ttl);
        let (name_owned, owner_name) = (name.to_owned(), owner.as_str().to_owned());
        let (keeper, lease) = LeaseKeeper::start(self.options.renew, BACKEND, name, ttl, sent, move || {
            let (connections, name, owner) = (connections.clone(), name_owned.clone(), owner_name.clone());
            async move {
                let renewed = connections
                    .execute(
                        sqlx::query(RENEW)
                            .bind(micros(ttl))
                            .bind(&name)
                            .bind(&owner)
                            .bind(row.grant_id),
                    )
                    .await
                    .map_err(backend_error)?;
                Ok(renewed.rows_affected() == 1)
            }
        });
        let grant = MySqlGrant {
            grants: self.clone(),
            name: name.to_owned(),
            owner: owner.as_str().to_owned(),
            row,
            reentered: matches!(granted, Granted::Reentered),
            lease: keeper,
        };
        LockGuard::new(name, grant)
            .with_fencing_token(row.token())
            .with_lease(lease)
    }

    /// A hand-over that may have run although its answer never came: delete the row
    /// if one of `owners` has it, in order, so the key is not blocked until it expires.
    /// Each delete is sent again until MySQL answers, for at most one TTL; after that
    /// the row has expired anyway.
    fn delete_in_background(&self, name: &str, owners: [String; 2], grant_id: u64) {
        let (connections, name) = (self.connections.clone(), name.to_owned());
        let give_up = Instant::now() + self.options.ttl;
        tokio::spawn(async move {
            for owner in owners {
                let delete = || sqlx::query(DELETE_ROW).bind(&name).bind(&owner).bind(grant_id);
                connections.execute_until_answered(delete, give_up).await;
            }
        });
    }
}

/// One grant: what its release needs.
struct MySqlGrant {
    grants: Grants,
    name: String,
    owner: String,
    row: RowGrant,
    /// The owner took the row again while holding it: this hold is seldom the last.
    reentered: bool,
    /// The lease: renewed while the grant lives, when renewal is on.
    lease: LeaseKeeper,
}

impl MySqlGrant {
    /// Step 2's release: one hold less, and the row gone with the last, only for our own owner and token.
    /// `true` if it was ours. A fresh grant is nearly always the last hold, a re-entered one nearly never:
    /// each first tries the statement that usually ends it, so a release is one round trip.
    async fn give_back(&self) -> Result<bool, sqlx::Error> {
        let order = if self.reentered {
            [RELEASE_ONE_HOLD, DELETE_LAST_HOLD]
        } else {
            [DELETE_LAST_HOLD, RELEASE_ONE_HOLD]
        };
        for statement in order {
            let changed = self
                .grants
                .connections
                .execute(
                    sqlx::query(statement)
                        .bind(&self.name)
                        .bind(&self.owner)
                        .bind(self.row.grant_id),
                )
                .await?;
            if changed.rows_affected() == 1 {
                if statement == DELETE_LAST_HOLD {
                    self.grants.held.remove(&self.row.grant_id);
                }
                return Ok(true);
            }
        }
        self.grants.held.remove(&self.row.grant_id); // neither: the row was no longer ours
        Ok(false)
    }
}

#[async_trait]
impl Release for MySqlGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the row goes
        let mut attempt = 1;
        let ours = loop {
            match grant.give_back().await {
                Err(error) if is_deadlock(&error) && attempt < RELEASE_ATTEMPTS => {
                    tokio::time::sleep(RELEASE_RETRY_PAUSE * attempt).await;
                    attempt += 1;
                }
                given_back => break given_back.map_err(backend_error)?,
            }
        };
        if ours {
            if let Some(notices) = &grant.grants.notices {
                notices.announce(&grant.name);
            }
            Ok(())
        } else {
            Err(LockError::Lost {
                key: grant.name.clone(),
            })
        }
    }

    /// Step 6: one UPDATE gives the row to `next`, one hand-over on. No notice goes
    /// out: the row never came free. A re-entered hold is not the last, and a row at the
    /// end of its tokens' range must go: both release instead.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let Some(handed) = self.row.handed_over().filter(|_| !self.reentered) else {
            return self.release().await.map(|()| HandOver::Released);
        };
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the row changes hands
        let sent = Instant::now();
        let changed = grant
            .grants
            .connections
            .execute(
                sqlx::query(HAND_OVER)
                    .bind(next.as_str())
                    .bind(micros(grant.grants.options.ttl))
                    .bind(&grant.name)
                    .bind(&grant.owner)
                    .bind(grant.row.grant_id),
            )
            .await;
        match changed {
            Ok(changed) if changed.rows_affected() == 1 => {
                let grants = grant.grants.clone();
                grants.held.remove(&grant.row.grant_id);
                Ok(HandOver::Granted(grants.guard(
                    &grant.name,
                    next,
                    handed,
                    Granted::Fresh,
                    sent,
                )))
            }
            // Not ours, or not our last hold (the owner re-entered through another guard),
            // or rolled back as a deadlock's victim: the release tells them apart, and
            // retries a deadlock.
            Ok(_) => Box::new(grant).release().await.map(|()| HandOver::Released),
            Err(error) if is_deadlock(&error) => Box::new(grant).release().await.map(|()| HandOver::Released),
            Err(error) => {
                // Either the row is still ours or it is `next`'s: delete whichever it is.
                let grants = &grant.grants;
                grants.held.remove(&grant.row.grant_id);
                let owners = [grant.owner.clone(), next.as_str().to_owned()];
                grants.delete_in_background(&grant.name, owners, grant.row.grant_id);
                Err(backend_error(error))
            }
        }
    }
}
