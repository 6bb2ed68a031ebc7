//! `lockbench`: the raw speed of each lock, without the sale around it.
//!
//! For every strategy, N contenders (tasks sharing one handle, as the buyers of one
//! instance do) acquire and release as fast as they can for a few seconds, all on one
//! key (they queue for it) or each on a key of its own (nothing to wait for: the cost of
//! the round trips alone). It prints acquire+release pairs per second and the median
//! and 99th percentile pair, and writes them as JSON. Exit 1 if any acquire or release
//! failed, 2 if a lock could not start.
//!
//!   lockbench [--strategies redis,etcd,...] [--contenders 1,16,64] [--seconds 2] [--json PATH]
//!
//! The servers are those of `make services` (or the `SECKILL_*` settings); the locks use
//! keys under `bench:` and leave none behind.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use seckill::lock::{DistributedLock, Owner};
use seckill::sale::Guarding;
use seckill::strategy::Strategy;

#[derive(Parser)]
#[command(name = "lockbench", about = "Acquire+release pairs per second for each lock strategy")]
struct Cli {
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "local,redis,redis-degrade,redlock,etcd,zookeeper,mysql,mysql-version"
    )]
    strategies: Vec<Strategy>,
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

/// One run: a strategy, a number of contenders, one key or one each.
#[derive(Debug, Serialize)]
struct Run {
    strategy: String,
    contenders: usize,
    keys: &'static str,
    pairs: usize,
    errors: usize,
    pairs_per_second: f64,
    median_pair_ms: f64,
    /// The slowest 1%: a lock that lets the releaser win again starves the others here.
    p99_pair_ms: f64,
    first_error: Option<String>,
}

async fn run(
    lock: Arc<dyn DistributedLock>,
    strategy: Strategy,
    contenders: usize,
    one_key: bool,
    seconds: f64,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..contenders)
        .map(|contender| {
            let (lock, stop, pairs, errors) = (lock.clone(), stop.clone(), pairs.clone(), errors.clone());
            let key = if one_key { format!("bench:{strategy}") } else { format!("bench:{strategy}:{contender}") };
            tokio::spawn(async move {
                let owner = Owner::new("lockbench");
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let outcome = match lock.acquire(&key, &owner, Duration::from_secs(10)).await {
                        Ok(guard) => guard.release().await,
                        Err(error) => Err(error),
                    };
                    match outcome {
                        Ok(()) => pairs.lock().unwrap().push(began.elapsed()),
                        Err(error) => errors.lock().unwrap().push(error.to_string()),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut pairs = std::mem::take(&mut *pairs.lock().unwrap());
    pairs.sort();
    let errors = errors.lock().unwrap();
    Run {
        strategy: strategy.name().to_owned(),
        contenders,
        keys: if one_key { "one" } else { "one each" },
        pairs: pairs.len(),
        errors: errors.len(),
        pairs_per_second: pairs.len() as f64 / elapsed,
        median_pair_ms: quantile_ms(&pairs, 0.5),
        p99_pair_ms: quantile_ms(&pairs, 0.99),
        first_error: errors.first().cloned(),
    }
}

/// The `q` quantile of sorted durations, in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    let index = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(index).map_or(0.0, |pair| pair.as_secs_f64() * 1000.0)
}

/// The strategy's lock, as `seckill serve` builds it (defaults and `SECKILL_*` settings).
async fn lock_of(strategy: Strategy) -> anyhow::Result<Arc<dyn DistributedLock>> {
    let mut config = seckill::config::Config::defaults();
    config.lock = strategy;
    let redis = redis::Client::open(config.redis_url.as_str())?;
    match seckill::wiring::build(&config, &redis).await? {
        Guarding::Lock(lock) => Ok(lock.backend().clone()),
        Guarding::AtomicScript => anyhow::bail!("`{strategy}` takes no lock"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut runs = Vec::new();
    println!("| strategy | contenders | keys | pairs/s | median pair ms | p99 pair ms | errors |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
    for &strategy in &cli.strategies {
        let lock = match lock_of(strategy).await {
            Ok(lock) => lock,
            Err(error) => {
                eprintln!("lockbench: `{strategy}` could not start: {error:#} (are the servers up? `make services`)");
                return ExitCode::from(2);
            }
        };
        for &contenders in &cli.contenders {
            for one_key in [true, false] {
                let run = run(lock.clone(), strategy, contenders, one_key, cli.seconds).await;
                println!(
                    "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |",
                    run.strategy,
                    run.contenders,
                    run.keys,
                    run.pairs_per_second,
                    run.median_pair_ms,
                    run.p99_pair_ms,
                    run.errors
                );
                if let Some(error) = &run.first_error {
                    eprintln!("lockbench: {} errors in {strategy} x{contenders}, the first: {error}", run.errors);
                }
                runs.push(run);
            }
        }
        let _ = lock.shutdown().await;
    }
    if let Some(path) = cli.json {
        let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty());
        let written = folder
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, serde_json::to_string_pretty(&runs).expect("plain data")));
        if let Err(error) = written {
            eprintln!("lockbench: could not write {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    if runs.iter().any(|run| run.errors > 0) {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
