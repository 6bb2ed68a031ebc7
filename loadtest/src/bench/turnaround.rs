//! One client alone: the HTTP turnaround, the part of a serial sale that no lock owns.
//!
//! A serial client sends its next request the moment an answer arrives. Between one
//! sale's answer and the next sale's start lie the answer's way back, the client, the
//! next request's way in, and the service's router: one round trip of HTTP. The service
//! answers before it releases (`seckill::sale`), so the release runs during that round
//! trip, and the next sale waits only for what is left of it (its `queued` step).
//!
//! So one serial sale costs about: turnaround + queued + lock + read + write. The lock
//! and the sale's steps come from the service's `/metrics`; the turnaround is timed
//! here, on the same kind of keep-alive connection, with `GET /healthz`, which touches
//! no backend. What the sum leaves out of the client's time per sale is the sale's own
//! glue in the service: its task, its answer's channel, its records.

use std::time::{Duration, Instant};

use anyhow::Context;

/// Requests timed, after a few that open and warm the connection.
const PROBES: usize = 500;
const WARM_UP_PROBES: usize = 50;

/// The mean time of one `GET /healthz` on one keep-alive connection to `host`.
pub async fn measure(host: &str) -> anyhow::Result<Duration> {
    // The serial load's own kind of client.
    let http = super::sustained::one_connection_client(Duration::from_secs(10))?;
    let url = format!("{host}/healthz");
    let mut timed = Duration::ZERO;
    for sent in 0..WARM_UP_PROBES + PROBES {
        let started = Instant::now();
        let answer = http
            .get(&url)
            .send()
            .await
            .and_then(|response| response.error_for_status())
            .with_context(|| format!("timing the HTTP turnaround with GET {url}: is the instance running?"))?;
        answer.bytes().await.context("reading /healthz's answer")?;
        if sent >= WARM_UP_PROBES {
            timed += started.elapsed();
        }
    }
    Ok(timed / PROBES as u32)
}
