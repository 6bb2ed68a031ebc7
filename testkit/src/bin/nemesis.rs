//! `nemesis`: a TCP proxy in front of a lock backend that partitions, delays or resets
//! its connections on command (see `testkit::nemesis`).
//!
//! ```text
//! nemesis --control-port 7401 16480=127.0.0.1:6480
//! curl -s -X POST '127.0.0.1:7401/delay?ms=800&jitter_ms=200'
//! curl -s -X POST 127.0.0.1:7401/heal
//! ```

use std::net::Ipv4Addr;

use anyhow::Context;
use clap::Parser;
use testkit::nemesis::{control, LinkSpec, Nemesis};

/// A TCP proxy that partitions, delays or resets its connections on command.
#[derive(Parser)]
#[command(name = "nemesis")]
struct Args {
    /// Port of the control API on 127.0.0.1: POST /partition, /delay?ms=&jitter_ms=&direction=,
    /// /reset, /hold-answers, /blackhole, /heal; GET /status.
    #[arg(long)]
    control_port: u16,
    /// The links, LISTEN_PORT=UPSTREAM_HOST:PORT, on loopback (e.g. 16480=127.0.0.1:6480).
    #[arg(required = true)]
    links: Vec<LinkSpec>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let nemesis = Nemesis::new();
    for spec in args.links {
        nemesis
            .link(spec)
            .await
            .with_context(|| format!("cannot listen on {} (is the port taken?)", spec.listen))?;
        println!("[nemesis] {} -> {}", spec.listen, spec.upstream);
    }
    let control_address = (Ipv4Addr::LOCALHOST, args.control_port);
    let listener = tokio::net::TcpListener::bind(control_address)
        .await
        .with_context(|| format!("cannot listen on the control port {}", args.control_port))?;
    println!("[nemesis] control on 127.0.0.1:{}", args.control_port);
    axum::serve(listener, control::app(nemesis)).await?;
    Ok(())
}
