//! The holder's view of its lease: is the lock still ours?

use std::time::Instant;

use tokio::sync::watch;

/// What a lease looks like from the holder's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// The backend promises exclusion until further notice (a connected session).
    Held,
    /// The backend promises exclusion until this instant (renewal moves it on).
    HeldUntil(Instant),
    /// The lease is gone: someone else may hold the key now.
    Lost,
}

/// The holder's view of its lease: is the lock still ours?
///
/// Fed by whatever the backend learns (a renewal, a session event). A lock without
/// a lease (in-process, none) is held until it is released.
#[derive(Clone, Debug)]
pub struct Lease(Option<watch::Receiver<LeaseState>>);

impl Lease {
    /// A lease that never ends by itself.
    pub fn unbounded() -> Self {
        Lease(None)
    }

    /// A lease whose state the backend publishes through `sender`.
    /// The backend dropping the sender counts as losing the lease.
    pub fn watched(state: LeaseState) -> (watch::Sender<LeaseState>, Self) {
        let (sender, receiver) = watch::channel(state);
        (sender, Lease(Some(receiver)))
    }

    /// True while the backend still promises exclusion, judged now.
    pub fn is_held(&self) -> bool {
        match &self.0 {
            None => true,
            Some(receiver) => match *receiver.borrow() {
                LeaseState::Held => receiver.has_changed().is_ok(),
                LeaseState::HeldUntil(until) => Instant::now() < until && receiver.has_changed().is_ok(),
                LeaseState::Lost => false,
            },
        }
    }

    /// Held only while both are, for a grant that rests on two leases (see [`redis_degrade`](super::redis_degrade)).
    /// A task follows both and ends when the combined lease is lost or nobody holds it.
    pub fn both(first: Lease, second: Lease) -> Lease {
        let (mut first, mut second) = match (first.0, second.0) {
            (None, second) => return Lease(second),
            (first, None) => return Lease(first),
            (Some(first), Some(second)) => (first, second),
        };
        fn state_of(receiver: &watch::Receiver<LeaseState>) -> LeaseState {
            if receiver.has_changed().is_err() {
                LeaseState::Lost // the backend dropped its side
            } else {
                *receiver.borrow()
            }
        }
        fn earliest(first: LeaseState, second: LeaseState) -> LeaseState {
            match (first, second) {
                (LeaseState::Lost, _) | (_, LeaseState::Lost) => LeaseState::Lost,
                (LeaseState::Held, other) | (other, LeaseState::Held) => other,
                (LeaseState::HeldUntil(a), LeaseState::HeldUntil(b)) => LeaseState::HeldUntil(a.min(b)),
            }
        }
        let (sender, combined) = Lease::watched(earliest(state_of(&first), state_of(&second)));
        tokio::spawn(async move {
            loop {
                let gone = tokio::select! {
                    changed = first.changed() => changed.is_err(),
                    changed = second.changed() => changed.is_err(),
                    () = sender.closed() => return,
                };
                let state = if gone {
                    LeaseState::Lost
                } else {
                    earliest(state_of(&first), state_of(&second))
                };
                sender.send_replace(state);
                if state == LeaseState::Lost {
                    return;
                }
            }
        });
        combined
    }

    /// Completes when the lease is lost: for `tokio::select!` against a critical section.
    pub async fn lost(&self) {
        let Some(receiver) = &self.0 else {
            return std::future::pending().await;
        };
        let mut receiver = receiver.clone();
        loop {
            let state = *receiver.borrow_and_update();
            match state {
                LeaseState::Lost => return,
                LeaseState::Held => {
                    if receiver.changed().await.is_err() {
                        return;
                    }
                }
                LeaseState::HeldUntil(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until.into()) => return,
                        changed = receiver.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }
}
