//! Step 1: the session. One lease per instance, kept alive every `ttl / 3`, holds every key
//! the instance puts; a lost one is replaced at the next acquire, and revoked.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};

use super::retry::{backend_error, is_lease_gone, retry_transient};
use super::{EtcdLock, BACKEND};
use crate::lock::parts::keepalive::KeepAlive;
use crate::lock::parts::unpoisoned;
use crate::lock::{Lease, LockError};

/// A keep-alive stream: where renewals are sent, and where their answers come back.
type KeepAliveStream = (LeaseKeeper, LeaseKeepAliveStream);

/// One lease, kept alive for as long as this value lives (step 1). At start the lock grants one and keeps
/// it alive ([`crate::lock::parts::keepalive`], every `ttl / 3`). Every key this instance creates is
/// attached to it, so if the instance dies, the lease runs out and all its keys vanish together.
pub(super) struct Session {
    pub(super) lease_id: i64,
    pub(super) lease: Lease,
    _keepalive: KeepAlive,
}

impl Session {
    /// Grants a lease and keeps it alive every `ttl / 3`.
    /// Tries again after transient failures until `deadline` (an election may be on).
    pub(super) async fn start(client: &Client, ttl_seconds: i64, deadline: Instant) -> Result<Session, LockError> {
        let client = client.clone();
        let (granted, sent) = retry_transient(deadline, || {
            let mut client = client.clone();
            async move {
                let sent = Instant::now();
                client
                    .lease_grant(ttl_seconds, None)
                    .await
                    .map(|granted| (granted, sent))
            }
        })
        .await
        .map_err(backend_error)?;
        let lease_id = granted.id();
        // etcd may grant more than asked (its minimum TTL); the lease is what it granted.
        let ttl = Duration::from_secs(granted.ttl().max(ttl_seconds) as u64);
        let opened = retry_transient(deadline, || {
            let mut client = client.clone();
            async move { client.lease_keep_alive(lease_id).await }
        })
        .await
        .map_err(backend_error)?;
        // The keep-alive stream, or None after a renewal failed or timed out: the next
        // renewal opens a new one, on whichever member answers (the lease lives in the
        // cluster, not in the stream).
        let slot: Arc<StdMutex<Option<KeepAliveStream>>> = Arc::new(StdMutex::new(Some(opened)));
        let (keepalive, lease) = KeepAlive::spawn(BACKEND, &format!("lease {lease_id:x}"), ttl, sent, move || {
            renew(client.clone(), lease_id, slot.clone())
        });
        Ok(Session {
            lease_id,
            lease,
            _keepalive: keepalive,
        })
    }
}

/// One renewal of the session's lease: `Ok(true)` when etcd renewed it, `Ok(false)` when
/// the lease is gone. The stream leaves its slot for the renewal and comes back only with
/// the answer to it. A renewal that times out is dropped with its stream: a stream kept
/// would hand the late answer to the next renewal, which would count a renewal that may
/// never have reached etcd.
async fn renew(
    mut client: Client,
    lease_id: i64,
    slot: Arc<StdMutex<Option<KeepAliveStream>>>,
) -> Result<bool, LockError> {
    let taken = unpoisoned(&slot).take();
    let Some((mut keeper, mut stream)) = taken else {
        // Opening a stream sends a renewal and reads its answer: this renewal.
        let opened = client.lease_keep_alive(lease_id).await.map_err(backend_error)?;
        *unpoisoned(&slot) = Some(opened);
        return Ok(true);
    };
    keeper.keep_alive().await.map_err(backend_error)?;
    match stream.message().await.map_err(backend_error)? {
        Some(answer) => {
            *unpoisoned(&slot) = Some((keeper, stream));
            // A TTL of 0 means the lease is gone: expired or revoked.
            Ok(answer.ttl() > 0)
        }
        None => Err(LockError::backend(
            BACKEND,
            std::io::Error::other("keep-alive stream closed"),
        )),
    }
}

impl EtcdLock {
    /// The current session, or a new one if the last lease was lost, or if it is `dead`: a session whose
    /// lease the server no longer has. The lost lease is revoked ([`revoke_in_background`]).
    pub(super) async fn current_session(
        &self,
        dead: Option<&Arc<Session>>,
        deadline: Instant,
    ) -> Result<Arc<Session>, LockError> {
        self.shut_down.refuse_if_shut_down()?;
        let mut session = self.session.lock().await;
        if !session.lease.is_held() || dead.is_some_and(|dead| Arc::ptr_eq(dead, &session)) {
            tracing::warn!(
                lease = session.lease_id,
                "the etcd session was lost; starting a new one"
            );
            let new_session = Arc::new(Session::start(&self.connection.client, self.ttl_seconds, deadline).await?);
            let lost = std::mem::replace(&mut *session, new_session);
            revoke_in_background(
                self.connection.client.clone(),
                lost.lease_id,
                Duration::from_secs(2 * self.ttl_seconds as u64),
            );
        }
        Ok(session.clone())
    }
}

/// Revokes a lease we count as lost, in the background, so that its keys leave the
/// queue now. A lease we could not renew may still live on the server: a new leader
/// extends every lease, and our last renewal may have reached it after all. Until it
/// ends there, its keys stay in the queue before the new session's and block every
/// instance, ours included (the chaos test with a dead leader stalled 3.7 s on them).
/// Nothing depends on the lease any more: its holders were told it is lost. Sent again
/// after transient failures, for `for_at_most` (longer than the server can keep it).
fn revoke_in_background(client: Client, lease_id: i64, for_at_most: Duration) {
    tokio::spawn(async move {
        let revoked = retry_transient(Instant::now() + for_at_most, || {
            let mut client = client.clone();
            async move { client.lease_revoke(lease_id).await }
        })
        .await;
        match revoked {
            Ok(_) => tracing::info!(lease = lease_id, "revoked the lost etcd lease: its keys are gone"),
            Err(error) if is_lease_gone(&error) => {}
            Err(error) => {
                tracing::warn!(lease = lease_id, %error, "could not revoke the lost etcd lease; it expires on its own")
            }
        }
    });
}

/// Whole seconds, rounded up, at least 1: etcd counts lease TTLs in whole seconds (and grants at least its
/// minimum, about 2 s by default), so `--lock-ttl-ms` is rounded up to seconds.
pub(super) fn lease_seconds(ttl: Duration) -> i64 {
    (ttl.as_millis().div_ceil(1000) as i64).max(1)
}
