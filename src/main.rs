//! `seckill serve`: config -> telemetry -> connect -> serve. `seckill reconcile`: the
//! orders against the stock; exit code 3 when they disagree. `seckill strategies`: every
//! strategy `--lock` takes, as its file describes it (`--json` for scripts).

use std::process::ExitCode;

use clap::Parser;
use seckill::config::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    seckill::telemetry::init();
    let result = match cli.command {
        Command::Serve(config) => seckill::server::serve(config).await,
        Command::Strategies(args) => {
            print!("{}", seckill::strategy::render_listed(args.json));
            return ExitCode::SUCCESS;
        }
        Command::Reconcile(args) => match seckill::orders::reconcile::reconcile(&args).await {
            Ok(found) => {
                println!("{}", found.render());
                return if found.agrees() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(3)
                };
            }
            Err(error) => Err(error),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
