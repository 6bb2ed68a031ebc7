//! The guard a grant hands out, and how a backend gives the grant back.

use std::time::Instant;

use async_trait::async_trait;

use crate::lock::{FencingToken, Lease, LockError, Owner};

/// What [`LockGuard::hand_over`] did with the key.
#[derive(Debug)]
pub enum HandOver {
    /// The key now belongs to the next owner: its grant, made by the same request.
    Granted(LockGuard),
    /// The key was given back, and the next owner took a place at the back of the
    /// backend's queue in the same request. A queue lock grants its oldest entry, so the
    /// place is granted in its turn, after the entries already there.
    Queued(QueuedPlace),
    /// The key was given back, as a release does: the next owner asks for it as anyone would.
    Released,
}

/// A place in a queue lock's queue that a release took for the next owner of this
/// process ([`HandOver::Queued`]). Dropped before its grant, it leaves the queue.
pub struct QueuedPlace {
    key: String,
    wait: Box<dyn AwaitGrant>,
    /// What a wrapper does to the grant when it comes (the reentrancy count's hold).
    then: Option<Box<dyn FnOnce(LockGuard) -> LockGuard + Send>>,
}

/// How a queue lock waits until a place is first in its queue.
#[async_trait]
pub trait AwaitGrant: Send {
    /// Waits until no entry is ahead of the place, or `deadline`: the grant. On any
    /// failure the place leaves the queue.
    async fn granted(self: Box<Self>, deadline: Instant) -> Result<LockGuard, LockError>;
}

impl QueuedPlace {
    pub fn new(key: &str, wait: impl AwaitGrant + 'static) -> Self {
        QueuedPlace {
            key: key.to_owned(),
            wait: Box::new(wait),
            then: None,
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until the place is first in its queue, or `deadline`: the grant, as an
    /// acquire's would be.
    pub async fn granted(self, deadline: Instant) -> Result<LockGuard, LockError> {
        let granted = self.wait.granted(deadline).await?;
        Ok(match self.then {
            Some(then) => then(granted),
            None => granted,
        })
    }

    /// The same place, its grant passed through `then` when it comes.
    pub(crate) fn then(self, then: impl FnOnce(LockGuard) -> LockGuard + Send + 'static) -> Self {
        assert!(self.then.is_none(), "one wrapper per place");
        QueuedPlace {
            then: Some(Box::new(then)),
            ..self
        }
    }
}

impl std::fmt::Debug for QueuedPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedPlace")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// How a backend gives one grant back. Each backend keeps in it what release needs
/// (a token, a connection, a session, a permit).
#[async_trait]
pub trait Release: Send + Sync {
    /// Gives the key back. [`LockError::Lost`] if it was no longer ours.
    async fn release(self: Box<Self>) -> Result<(), LockError>;

    /// Gives the key to `next`, a new owner in this process, in the request that
    /// releases it, where the backend can: one round trip where a release and the next
    /// acquire take two, and a new grant with a newer fencing token. A queue lock
    /// queues `next` instead, in the same request ([`HandOver::Queued`]). The default
    /// releases, and the next owner then acquires as anyone would.
    async fn hand_over(self: Box<Self>, _next: &Owner) -> Result<HandOver, LockError> {
        self.release().await.map(|()| HandOver::Released)
    }
}

/// A wrapper's guard gives back the inner grant it was made from.
#[async_trait]
impl Release for Box<dyn Release> {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        (*self).release().await
    }

    async fn hand_over(self: Box<Self>, next: &Owner) -> Result<HandOver, LockError> {
        (*self).hand_over(next).await
    }
}

/// Nothing to give back: the grant ends when its guard goes away.
pub struct NothingToRelease;

#[async_trait]
impl Release for NothingToRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        Ok(())
    }
}

/// Proof that the caller holds a key. Give it back with [`LockGuard::release`].
///
/// Its fields are private: a caller can read the token but not forge a guard for
/// someone else's grant.
pub struct LockGuard {
    key: String,
    fencing_token: Option<FencingToken>,
    lease: Lease,
    releaser: Box<dyn Release>,
}

impl LockGuard {
    /// A grant of `key` that `releaser` knows how to give back; no token, no lease.
    pub fn new(key: &str, releaser: impl Release + 'static) -> Self {
        LockGuard {
            key: key.to_owned(),
            fencing_token: None,
            lease: Lease::unbounded(),
            releaser: Box::new(releaser),
        }
    }

    pub fn with_fencing_token(mut self, token: FencingToken) -> Self {
        self.fencing_token = Some(token);
        self
    }

    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = lease;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn fencing_token(&self) -> Option<&FencingToken> {
        self.fencing_token.as_ref()
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// False once the lease is lost (or, for a lease with a deadline, past it). Checking it before
    /// a write narrows the window for a late writer; only a fencing token closes it.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Gives the key back. [`LockError::Lost`] if the lease had already run out.
    pub async fn release(self) -> Result<(), LockError> {
        self.releaser.release().await
    }

    /// Gives the key straight to `next`, where the backend can (see [`Release::hand_over`]);
    /// otherwise releases it. [`LockError::Lost`] if it was no longer ours.
    pub async fn hand_over(self, next: &Owner) -> Result<HandOver, LockError> {
        self.releaser.hand_over(next).await
    }

    /// Splits the guard into its parts, for a wrapper that hands out guards of its own.
    pub(crate) fn into_parts(self) -> (GuardInfo, Box<dyn Release>) {
        let info = GuardInfo {
            key: self.key,
            fencing_token: self.fencing_token,
            lease: self.lease,
        };
        (info, self.releaser)
    }
}

/// Everything in a guard but the way to release it.
#[derive(Clone, Debug)]
pub(crate) struct GuardInfo {
    pub key: String,
    pub fencing_token: Option<FencingToken>,
    pub lease: Lease,
}

impl GuardInfo {
    pub fn into_guard(self, releaser: impl Release + 'static) -> LockGuard {
        LockGuard {
            key: self.key,
            fencing_token: self.fencing_token,
            lease: self.lease,
            releaser: Box::new(releaser),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}
