//! `seckill serve`: config -> telemetry -> connect -> serve.

use std::process::ExitCode;

use clap::Parser;
use seckill::config::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    seckill::telemetry::init();
    let result = match cli.command {
        Command::Serve(config) => seckill::server::serve(config).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
