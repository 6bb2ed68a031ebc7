//! Steps 5 and 6: a grant, its lease renewed on every master, and its release or hand-over.
//! The lock and its guards share [`Grants`]: a hand-over makes the next grant from the
//! guard of the last.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::masters::{Masters, Tally, Unanswered};
use super::{RedlockOptions, BACKEND};
use crate::lock::parts::held_grants::HeldGrants;
use crate::lock::parts::keepalive::{trusted_until, LeaseKeeper};
use crate::lock::parts::release_notices::ReleaseNotices;
use crate::lock::{HandOver, Lease, LockError, LockGuard, Owner, Release};

/// What making a grant and giving it back need, shared by the lock and its guards: a
/// hand-over (step 6) makes the next grant from the guard of the last.
#[derive(Clone)]
pub(super) struct Grants {
    pub(super) masters: Arc<Masters>,
    pub(super) options: RedlockOptions,
    /// Grants this handle holds, value to key, so `shutdown` can give them back.
    pub(super) held: HeldGrants<String, String>,
    /// Release notices on a Redis, when the wiring gives some: the masters are
    /// independent, and no one of them can speak for the lock.
    pub(super) notices: Option<Arc<ReleaseNotices>>,
}

/// A value for one grant: the owner's name and 128 random bits.
pub(super) fn new_value(owner: &Owner) -> String {
    format!("{}:{:032x}", owner.as_str(), rand::random::<u128>())
}

impl Grants {
    /// A grant of `key` to `value`, asked for at `sent`: held here until released, its
    /// lease renewed (step 5); `sets_on_their_way` are the masters still to answer.
    pub(super) fn guard(&self, key: &str, value: String, sent: Instant, sets_on_their_way: Unanswered) -> LockGuard {
        self.held.insert(value.clone(), key.to_owned());
        let (keeper, lease) = self.lease_for(key, &value, sent);
        let grant = RedlockGrant {
            grants: self.clone(),
            key: key.to_owned(),
            value,
            lease: keeper,
            sets_on_their_way,
        };
        // The lease starts at the validity's end and moves on with each majority renewal.
        LockGuard::new(key, grant).with_lease(lease)
    }

    /// Step 5: a lease renewed on every master every `ttl / 3`, or a fixed one. Each renewal extends the
    /// key with an owner-checked script, and counts: a majority extended moves the validity on
    /// (`ttl - elapsed - drift`, counted from that renewal's start), a majority that no longer holds our
    /// value ends it.
    fn lease_for(&self, key: &str, value: &str, sent: Instant) -> (LeaseKeeper, Lease) {
        let ttl = self.options.ttl;
        let (masters, key_owned, value) = (self.masters.clone(), key.to_owned(), value.to_owned());
        LeaseKeeper::start(self.options.renew, BACKEND, key, ttl, sent, move || {
            let (masters, key, value) = (masters.clone(), key_owned.clone(), value.clone());
            async move {
                let tally = masters.extend_everywhere(&key, &value, ttl).await;
                if tally.yes >= masters.quorum() {
                    Ok(true)
                } else if tally.no > masters.masters.len() - masters.quorum() {
                    Ok(false) // a majority no longer holds our value: no renewal can bring it back
                } else {
                    Err(LockError::backend(
                        BACKEND,
                        too_few(tally, masters.masters.len(), masters.quorum(), "extended"),
                    ))
                }
            }
        })
    }
}

/// The error of a request that reached too few masters.
fn too_few(tally: Tally, total: usize, quorum: usize, what: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "only {} of {total} Redlock masters {what} ({} refused, {} did not answer); a majority is {quorum}",
        tally.yes, tally.no, tally.silent
    ))
}

/// One grant: what its release needs.
struct RedlockGrant {
    grants: Grants,
    key: String,
    value: String,
    /// The lease: renewed while the grant lives, when renewal is on.
    lease: LeaseKeeper,
    /// The acquire's sets to the masters that had not answered when it was granted.
    sets_on_their_way: Unanswered,
}

#[async_trait]
impl Release for RedlockGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before deleting
        grant.grants.held.remove(&grant.value);
        let masters = &grant.grants.masters;
        let tally = masters
            .release_everywhere(&grant.key, &grant.value, grant.sets_on_their_way)
            .await;
        // Lost when a majority answered that our value was gone already (expired, or
        // taken); masters that did not answer will expire the key on their own.
        if tally.no > masters.masters.len() - masters.quorum() {
            Err(LockError::Lost { key: grant.key })
        } else {
            if let Some(notices) = &grant.grants.notices {
                notices.announce(&grant.key);
            }
            Ok(())
        }
    }

    /// Step 6: the next owner's value in place of ours, on a majority, with time left
    /// (as step 3). Anything less is no grant: every master is asked to delete the next
    /// value, then ours. It ends as a release does: lost when a majority no longer had
    /// our value, else released (masters that did not answer expire the key on their own).
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let mut grant = *self;
        grant.lease.stop(); // stop renewing before the key changes hands
        grant.grants.held.remove(&grant.value);
        let (masters, ttl) = (grant.grants.masters.clone(), grant.grants.options.ttl);
        let next_value = new_value(next);
        let started = Instant::now();
        let (tally, hand_overs_on_their_way) = masters
            .hand_over_everywhere(&grant.key, (&grant.value, &next_value), ttl, grant.sets_on_their_way)
            .await;
        if tally.yes >= masters.quorum() && Instant::now() < trusted_until(started, ttl) {
            return Ok(HandOver::Granted(grant.grants.guard(
                &grant.key,
                next_value,
                started,
                hand_overs_on_their_way,
            )));
        }
        // No grant. Each master ends with neither value: the next one's is deleted after
        // that master's hand-over, then ours, where the hand-over did not run.
        masters
            .delete_everywhere(&grant.key, &next_value, hand_overs_on_their_way)
            .await;
        let nothing = masters.nothing_on_its_way();
        masters.delete_everywhere(&grant.key, &grant.value, nothing).await;
        if tally.no > masters.masters.len() - masters.quorum() {
            return Err(LockError::Lost { key: grant.key });
        }
        if let Some(notices) = &grant.grants.notices {
            notices.announce(&grant.key);
        }
        Ok(HandOver::Released)
    }
}
