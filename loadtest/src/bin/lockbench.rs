//! `lockbench`: the raw speed of each lock, without the sale around it.
//!
//! For every strategy and contender count, one run on one key and one on a key each
//! (`loadtest::bench::lockbench` says what a run measures). It prints acquire+release
//! pairs per second and the median and 99th percentile pair, and writes them as JSON.
//! Exit 1 if any acquire or release failed, 2 if a lock could not start.
//!
//!   lockbench [--strategies redis,etcd,...] [--peers curator,redis-py,...|none] [--contenders 1,16,64]
//!             [--seconds 2] [--json PATH]
//!
//! After our locks, the peers: the canonical recipes on the same backends (Curator's
//! InterProcessMutex, etcd's concurrency.Mutex, redis-py's Lock, python-redis-lock,
//! pottery's Redlock), each installed by its own script on first use
//! (`loadtest/peers/`), then one table of ours against each recipe.
//!
//! The servers are those of `make services` (or the `SECKILL_*` settings); the locks use
//! keys under `bench:` and leave none behind.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use loadtest::bench::lockbench;
use loadtest::render::document::{markdown, markdown_row, Block};
use loadtest::render::tables::{against_recipes, lockbench_row, lockbench_table};
use seckill::lock::DistributedLock;
use seckill::sale::Guarding;
use seckill::store::redis_master::MasterAddress;
use seckill::strategy::Strategy;

#[derive(Parser)]
#[command(
    name = "lockbench",
    about = "Acquire+release pairs per second for each lock strategy"
)]
struct Cli {
    /// The strategies to measure; by default every one with a lock, but `none`.
    #[arg(long, value_delimiter = ',')]
    strategies: Option<Vec<Strategy>>,
    /// The canonical recipes to measure beside ours (`none` for none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "curator,etcd-concurrency,redis-py,python-redis-lock,pottery-redlock"
    )]
    peers: Vec<String>,
    /// How many contenders at once, one run per number.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    contenders: Vec<usize>,
    /// How long each run lasts.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Where to write the results as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<std::path::PathBuf>,
}

/// Every strategy with a lock worth timing, in `--lock`'s order: all but `atomic`, which
/// takes no lock, and `none`, whose lock grants everyone at once and so times nothing.
fn every_lock() -> Vec<Strategy> {
    use clap::ValueEnum;
    Strategy::value_variants()
        .iter()
        .copied()
        .filter(|&strategy| strategy.takes_a_lock() && strategy != Strategy::None)
        .collect()
}

/// The strategy's lock, as `seckill serve` builds it (defaults and `SECKILL_*` settings).
async fn lock_of(strategy: Strategy) -> anyhow::Result<Arc<dyn DistributedLock>> {
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    let stock_redis = MasterAddress::parse(&config.redis_url).map_err(anyhow::Error::msg)?;
    match seckill::wiring::build(&config, &stock_redis).await? {
        Guarding::Lock(lock) => Ok(lock.backend().clone()),
        Guarding::AtomicScript => anyhow::bail!("`{strategy}` takes no lock"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    print!("{}", lockbench_table().markdown_head());
    let mut runs = match time_our_locks(&cli).await {
        Ok(runs) => runs,
        Err(exit) => return exit,
    };
    let peers_failed = match time_the_peers(&cli, &mut runs).await {
        Ok(failed) => failed,
        Err(exit) => return exit,
    };
    if runs.iter().any(|run| run.recipe_of.is_some()) {
        println!();
        print!("{}", markdown(&[Block::Table(against_recipes(&runs))]));
    }
    if let Some(path) = &cli.json {
        let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty());
        let written = folder
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, serde_json::to_string_pretty(&runs).expect("plain data")));
        if let Err(error) = written {
            eprintln!("lockbench: could not write {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    // A recipe's errors are part of what it is measured for (pottery's Redlock times out at
    // 64 contenders): they show in its rows. Only our locks' errors, or a peer that could
    // not run at all, fail the run.
    if runs.iter().any(|run| run.errors > 0 && run.recipe_of.is_none()) || !peers_failed.is_empty() {
        if !peers_failed.is_empty() {
            eprintln!("lockbench: peers that could not run: {}", peers_failed.join(", "));
        }
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Every run of our locks, each row printed as it ends; exit 2 if a lock cannot start.
async fn time_our_locks(cli: &Cli) -> Result<Vec<lockbench::Run>, ExitCode> {
    let mut runs = Vec::new();
    for strategy in cli.strategies.clone().unwrap_or_else(every_lock) {
        let lock = match lock_of(strategy).await {
            Ok(lock) => lock,
            Err(error) => {
                eprintln!("lockbench: `{strategy}` could not start: {error:#} (are the servers up? `make services`)");
                return Err(ExitCode::from(2));
            }
        };
        for &contenders in &cli.contenders {
            for one_key in [true, false] {
                let run = lockbench::run(lock.clone(), strategy, contenders, one_key, cli.seconds).await;
                print!("{}", markdown_row(&lockbench_row(&run)));
                if let Some(error) = &run.first_error {
                    eprintln!(
                        "lockbench: {} errors in {strategy} x{contenders}, the first: {error}",
                        run.errors
                    );
                }
                runs.push(run);
            }
        }
        let _ = lock.shutdown().await;
    }
    Ok(runs)
}

/// The peers' runs, added to `runs` with their rows printed; the peers that could not
/// run. Exit 2 for a peer nobody knows.
async fn time_the_peers(cli: &Cli, runs: &mut Vec<lockbench::Run>) -> Result<Vec<&'static str>, ExitCode> {
    let mut peers_failed = Vec::new();
    for name in cli.peers.iter().filter(|name| name.as_str() != "none") {
        let Some(peer) = lockbench::PEERS.iter().find(|peer| peer.name == name) else {
            let known: Vec<_> = lockbench::PEERS.iter().map(|peer| peer.name).collect();
            eprintln!(
                "lockbench: no peer `{name}`; the peers are {} (or none)",
                known.join(", ")
            );
            return Err(ExitCode::from(2));
        };
        match lockbench::run_peer(peer, &cli.contenders, cli.seconds).await {
            Ok(peer_runs) => {
                for run in peer_runs {
                    print!("{}", markdown_row(&lockbench_row(&run)));
                    runs.push(run);
                }
            }
            Err(error) => {
                eprintln!("lockbench: {error:#}");
                peers_failed.push(peer.name);
            }
        }
    }
    Ok(peers_failed)
}
