//! Hardening: the etcd failures that another try may cure (a member gone, an election), and
//! the tries again. Every step of the lock sends its requests through here.

use std::future::Future;
use std::time::{Duration, Instant};

use super::BACKEND;
use crate::lock::LockError;

/// How long a step outside an acquire's own deadline (connect, release, a try-acquire)
/// keeps trying after transient failures: longer than an election.
pub(super) const RETRY_BUDGET: Duration = Duration::from_secs(3);
/// After a second transient failure in a row, how long to wait before trying again.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The pause before each try again after transient failures. The first try again goes
/// at once: the client spreads requests over the members, so it most likely reaches one
/// that answers (a dead member's refusal takes no time). Later ones wait
/// [`RETRY_PAUSE`], so a cluster that is down is not asked in a spin.
#[derive(Default)]
pub(super) struct RetryPauses {
    failures_in_a_row: u32,
}

impl RetryPauses {
    /// After a failure: waits before the next try.
    pub(super) async fn after_a_failure(&mut self) {
        self.failures_in_a_row += 1;
        if self.failures_in_a_row > 1 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// After a success: the next failure is a first one again.
    pub(super) fn reset(&mut self) {
        self.failures_in_a_row = 0;
    }
}

pub(super) fn backend_error(error: etcd_client::Error) -> LockError {
    LockError::backend(BACKEND, error)
}

/// Failures that another try may cure: the member we talked to went away, or the
/// cluster is electing a leader. Not: a lease that is gone, or a bad request.
pub(super) fn is_transient(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Unavailable | Code::Unknown | Code::DeadlineExceeded | Code::Cancelled
            )
        }
        _ => false,
    }
}

/// Sends a request, and again after each transient failure, until `deadline`. When the member this client
/// talks to dies, or an election is on, a request fails with a transport error: every step is tried again
/// until the acquire's deadline, and the keep-alive stream is opened again (`renew`, in `session.rs`), on
/// whichever member answers. Every step may be repeated safely: the queue key is created only if absent,
/// and reads and watches change nothing.
pub(super) async fn retry_transient<T, F, Fut>(deadline: Instant, request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let transient = |error: &etcd_client::Error| {
        let again = is_transient(error) && Instant::now() + RETRY_PAUSE < deadline;
        if again {
            tracing::debug!(%error, "etcd request failed; trying again, another member may answer");
        }
        again
    };
    send_again_while(request, transient).await
}

/// Sends a request, and again, after a pause, after each failure `again` accepts.
pub(super) async fn send_again_while<T, F, Fut>(
    mut request: F,
    mut again: impl FnMut(&etcd_client::Error) -> bool,
) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut pauses = RetryPauses::default();
    loop {
        match request().await {
            Err(error) if again(&error) => pauses.after_a_failure().await,
            answer => return answer,
        }
    }
}

/// The lease named in a request no longer exists on the server (expired or revoked),
/// even if our keep-alive has not heard yet.
pub(super) fn is_lease_gone(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::NotFound)
}

/// etcd canceled the watch. Not transient: the wait ends with this error, as it always has.
pub(super) fn watch_canceled() -> WatchFailure {
    etcd_client::Error::WatchError("the watch was canceled".into()).into()
}

/// The stream ended without a cancel: its member went away. Watch again.
pub(super) fn watch_ended() -> WatchFailure {
    WatchFailure {
        source: etcd_client::Error::WatchError("the watch stream ended".into()),
        transient: true,
    }
}

/// A read or watch that failed, and whether watching again may cure it.
pub(super) struct WatchFailure {
    pub(super) source: etcd_client::Error,
    pub(super) transient: bool,
}

impl From<etcd_client::Error> for WatchFailure {
    fn from(source: etcd_client::Error) -> Self {
        WatchFailure {
            transient: is_transient(&source),
            source,
        }
    }
}
