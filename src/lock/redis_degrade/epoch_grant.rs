//! A grant of one of the inner locks, bound to the mode's epoch: its lease ends with the
//! epoch's, its fencing token carries the epoch, and its hand-over grants only while the
//! epoch allows grants (steps 1, 4 and 5 of [`super`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::watch;

use super::mode::{Mode, ModeLease};
use super::BACKEND;
use crate::lock::parts::unpoisoned;
use crate::lock::{FencingToken, HandOver, Lease, LeaseState, LockError, LockGuard, Owner, Release};

/// The newest Redis token this instance was granted, per key: `(epoch, counter)`.
pub(super) type NewestRedisTokens = Arc<StdMutex<HashMap<String, (u64, u64)>>>;

/// Notes `counter`, granted by the lock Redis for `key` in `epoch`: whether it went
/// back from the newest one noted in that epoch (the lock Redis forgot its counter).
/// The newest stays noted, so every later token of the epoch is held against it.
pub(super) fn went_back(newest: &NewestRedisTokens, key: &str, epoch: u64, counter: u64) -> bool {
    let mut newest = unpoisoned(newest);
    let seen = newest.get(key).copied();
    let back = matches!(seen, Some((seen_epoch, before)) if seen_epoch == epoch && counter <= before);
    if !back {
        newest.insert(key.to_owned(), (epoch, counter));
    }
    back
}

/// Steps 1 and 4: the grant's lease ends with the epoch's, and its token carries the epoch.
/// A holder stops trusting its grant when its instance's mode lease for that epoch ends,
/// or at once when the instance sees the epoch change.
pub(super) fn bound_by_epoch(
    inner: LockGuard,
    epoch: u64,
    view: &watch::Receiver<Option<ModeLease>>,
    newest: &NewestRedisTokens,
) -> LockGuard {
    let (mut info, releaser) = inner.into_parts();
    info.lease = Lease::both(info.lease, epoch_lease(view.clone(), epoch));
    info.fencing_token = info
        .fencing_token
        .map(|token| FencingToken::new(BACKEND, epoch, token.counter));
    info.into_guard(EpochGrant {
        inner: releaser,
        epoch,
        view: view.clone(),
        newest: newest.clone(),
    })
}

/// Whether `epoch` allows grants now, as the last mode lease says (step 1).
pub(super) fn epoch_allows_grants(view: &watch::Receiver<Option<ModeLease>>, epoch: u64) -> bool {
    let current = *view.borrow();
    current.is_some_and(|lease| lease.epoch == epoch && lease.allows_grants_at(Instant::now()))
}

/// An inner grant of one epoch: what its release and its hand-over (step 5) need.
struct EpochGrant {
    inner: Box<dyn Release>,
    epoch: u64,
    view: watch::Receiver<Option<ModeLease>>,
    /// Shared with the lock: a handed Redis token is noted as an acquired one is.
    newest: NewestRedisTokens,
}

#[async_trait]
impl Release for EpochGrant {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.inner.release().await
    }

    /// Step 5: a release that hands the key to the next buyer of the local queue
    /// ([`crate::sale::local_queue`]) goes through the inner lock's hand-over only while
    /// the epoch allows grants, before and after it. The handed grant is bound by the epoch
    /// as in steps 1 and 4. A Redis token that went back (a lock Redis that lost its last
    /// writes) is released instead, and the next acquire, which sees the same, switches to MySQL.
    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        let EpochGrant {
            inner,
            epoch,
            view,
            newest,
        } = *self;
        if !epoch_allows_grants(&view, epoch) {
            return inner.release().await.map(|()| HandOver::Released);
        }
        let handed = match inner.hand_over(next).await? {
            HandOver::Granted(handed) => handed,
            // Neither inner lock queues; a place would leave the queue as it is dropped.
            HandOver::Queued(_) | HandOver::Released => return Ok(HandOver::Released),
        };
        // The hand-over took time: its grant counts only if the epoch still allows it.
        // And a Redis counter that went back would be refused by the stock: release, and
        // the next acquire, which checks the same, switches to MySQL.
        let redis_mode = view.borrow().is_some_and(|lease| lease.mode == Mode::Redis);
        let counter = handed.fencing_token().map(|token| token.counter);
        let forgot = redis_mode && counter.is_some_and(|counter| went_back(&newest, handed.key(), epoch, counter));
        if forgot || !epoch_allows_grants(&view, epoch) {
            return handed.release().await.map(|()| HandOver::Released);
        }
        Ok(HandOver::Granted(bound_by_epoch(handed, epoch, &view, &newest)))
    }
}

/// A lease that holds while `view` shows `epoch` with a trusted mode lease, and is lost
/// as soon as this instance sees another epoch.
fn epoch_lease(mut view: watch::Receiver<Option<ModeLease>>, epoch: u64) -> Lease {
    let until = move |lease: Option<ModeLease>| match lease {
        Some(lease) if lease.epoch == epoch => LeaseState::HeldUntil(lease.trusted_until),
        _ => LeaseState::Lost,
    };
    let initial = until(*view.borrow_and_update());
    let (sender, lease) = Lease::watched(initial);
    if initial != LeaseState::Lost {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = view.changed() => if changed.is_err() { break },
                    () = sender.closed() => return,
                }
                let state = until(*view.borrow_and_update());
                sender.send_replace(state);
                if state == LeaseState::Lost {
                    return;
                }
            }
            sender.send_replace(LeaseState::Lost);
        });
    }
    lease
}
