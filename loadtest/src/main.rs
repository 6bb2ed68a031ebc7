//! `loadtest`: reset the sale, fire 500 one-shot buyers at two instances, print the verdict.
//!
//! Exit code: 0 when the verdict is what the strategy promises (safe strategies held,
//! `none`/`local` oversold or honestly did not), 1 when a safe strategy oversold or
//! lost a sale, 2 when the test could not run.

use std::process::ExitCode;

use clap::Parser;
use loadtest::{run, Options};

#[derive(Parser)]
#[command(name = "loadtest", about = "Fire the flash-sale crowd at seckill instances and check for oversell")]
struct Cli {
    /// Instances to split the buyers between, comma separated.
    #[arg(long, env = "LOADTEST_HOSTS", value_delimiter = ',',
          default_value = "http://127.0.0.1:8080,http://127.0.0.1:8090")]
    hosts: Vec<String>,
    /// Buyers; each sends exactly one request.
    #[arg(long, env = "LOADTEST_USERS", default_value_t = 500)]
    users: usize,
    /// Stock to put on sale before the attack.
    #[arg(long, env = "LOADTEST_STOCK", default_value_t = 300)]
    stock: i64,
    /// Redis the instances sell from; read directly for the verdict.
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Print the report as one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Also print goose's own metrics tables.
    #[arg(long)]
    goose_metrics: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = Options {
        hosts: cli.hosts.iter().map(|h| h.trim_end_matches('/').to_owned()).collect(),
        users: cli.users,
        initial_stock: cli.stock,
        redis_url: cli.redis_url,
        goose_metrics: cli.goose_metrics,
    };
    match run(&options).await {
        Ok(report) => {
            if cli.json {
                println!("{}", serde_json::to_string(&report).expect("a report always serializes"));
            } else {
                print!("{}", report.render());
            }
            if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(error) => {
            eprintln!("loadtest error: {error:#}");
            ExitCode::from(2)
        }
    }
}
