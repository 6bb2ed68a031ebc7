//! `lab`: serves the lab's page on loopback until Ctrl-C, then stops everything it started.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "lab",
    about = "The lab: pick a lock, send the crowd, strike a fault with a click"
)]
struct Cli {
    /// The page's port, on 127.0.0.1.
    #[arg(long, env = "LAB_PORT", default_value_t = 7700)]
    port: u16,
    /// Where the lab keeps the instances' logs and the crowds' reports and histories.
    #[arg(long, default_value = ".run/lab")]
    dir: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match serve(&cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lab error: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn serve(cli: &Cli) -> anyhow::Result<()> {
    let binaries = lab::lab::Binaries::beside_this_program()?;
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", cli.port)).await {
        Ok(listener) => listener,
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "port {} is taken (another lab, or another program): start this one on another, \
             `make lab LAB_PORT={}` or `lab --port {}`",
            cli.port,
            cli.port + 1,
            cli.port + 1
        ),
        Err(error) => return Err(error.into()),
    };
    let lab = lab::lab::Lab::new(binaries, &cli.dir)?;
    println!(
        "the lab: http://127.0.0.1:{}/ (Ctrl-C stops it and everything it started)",
        cli.port
    );
    let app = lab::routes::app(lab.clone());
    axum::serve(listener, app).with_graceful_shutdown(stop_asked()).await?;
    lab.shutdown().await;
    println!("the lab stopped: its instances, servers and crowd with it, every link healed");
    Ok(())
}

/// Ctrl-C, a SIGTERM, or a SIGHUP (its terminal closed).
async fn stop_asked() {
    use tokio::signal::unix::{signal, SignalKind};
    let on = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut arrived) => arrived.recv().await,
            Err(_) => std::future::pending().await, // no handler: that signal keeps its default
        }
    };
    tokio::select! {
        _ = on(SignalKind::interrupt()) => {}
        _ = on(SignalKind::terminate()) => {}
        _ = on(SignalKind::hangup()) => {}
    }
}
