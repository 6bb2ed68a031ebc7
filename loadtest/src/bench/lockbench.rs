//! The locks alone, without the sale around them (the `lockbench` binary).
//!
//! N contenders (tasks sharing one handle, as the buyers of one instance do) acquire
//! and release as fast as they can for a few seconds. Either all on one key (they
//! queue for it) or each on a key of its own (nothing to wait for: the cost of the
//! round trips alone). A [`Run`] counts the acquire+release pairs and times each one.
//!
//! [`PEERS`] are the recipes people use today (Curator's mutex, etcd's own, redis-py's
//! lock, ...), each a program in `loadtest/peers/` that installs itself on first use and
//! measures the same runs on the same servers (`loadtest/peers/README.md` is the contract).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use seckill::lock::{DistributedLock, Owner};
use seckill::strategy::Strategy;

use crate::latency::Latencies;

/// Longer than any pair takes, so a slow pair is timed and not expired.
const LEASE: Duration = Duration::from_secs(10);

/// One run: a strategy, a number of contenders, one key or one each.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub strategy: String,
    pub contenders: usize,
    /// `one` or `one each`.
    pub keys: String,
    pub pairs: usize,
    pub errors: usize,
    pub pairs_per_second: f64,
    pub median_pair_ms: f64,
    /// The slowest 1%: a lock that lets the releaser win again starves the others here.
    pub p99_pair_ms: f64,
    pub first_error: Option<String>,
    /// For a peer's run: our strategy it is the recipe of, on the same backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe_of: Option<String>,
}

/// A canonical lock recipe, measured beside our lock on the same backend.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// What `--peers` calls it.
    pub name: &'static str,
    /// Its program, from the project's folder, and the arguments before the contract's.
    pub program: &'static str,
    pub args: &'static [&'static str],
    /// Our strategy on the same backend.
    pub recipe_of: Strategy,
}

/// Every peer `make lockbench` measures.
pub const PEERS: [Peer; 5] = [
    Peer {
        name: "curator",
        program: "loadtest/peers/curator/run",
        args: &[],
        recipe_of: Strategy::Zookeeper,
    },
    Peer {
        name: "etcd-concurrency",
        program: "loadtest/peers/etcd-concurrency/run",
        args: &[],
        recipe_of: Strategy::Etcd,
    },
    Peer {
        name: "redis-py",
        program: "loadtest/peers/python/run",
        args: &["redis-py"],
        recipe_of: Strategy::Redis,
    },
    Peer {
        name: "python-redis-lock",
        program: "loadtest/peers/python/run",
        args: &["python-redis-lock"],
        recipe_of: Strategy::Redis,
    },
    Peer {
        name: "pottery-redlock",
        program: "loadtest/peers/python/run",
        args: &["pottery-redlock"],
        recipe_of: Strategy::Redlock,
    },
];

/// Runs `peer` for every contender count, one key and one each; its runs, or why it
/// could not run (its own message, which names the fix).
pub async fn run_peer(peer: &Peer, contenders: &[usize], seconds: f64) -> anyhow::Result<Vec<Run>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("loadtest/ sits in the project's folder");
    let contenders: Vec<String> = contenders.iter().map(usize::to_string).collect();
    let output = tokio::process::Command::new(root.join(peer.program))
        .args(peer.args)
        .args(["--contenders", &contenders.join(","), "--seconds", &seconds.to_string()])
        .current_dir(root)
        .stderr(std::process::Stdio::inherit()) // its install and progress messages
        .output()
        .await
        .map_err(|error| anyhow::anyhow!("cannot start {}: {error}", peer.program))?;
    anyhow::ensure!(
        output.status.success(),
        "the peer `{}` ({}) could not run ({}); its message is above",
        peer.name,
        peer.program,
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut run: Run = serde_json::from_str(line)
                .map_err(|error| anyhow::anyhow!("the peer `{}` printed `{line}`, not a run: {error}", peer.name))?;
            run.recipe_of = Some(peer.recipe_of.name().to_owned());
            Ok(run)
        })
        .collect()
}

/// Keeps `contenders` tasks acquiring and releasing for `seconds`, then counts.
pub async fn run(
    lock: Arc<dyn DistributedLock>,
    strategy: Strategy,
    contenders: usize,
    one_key: bool,
    seconds: f64,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(Mutex::new(Latencies::default()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..contenders)
        .map(|contender| {
            let (lock, stop, pairs, errors) = (lock.clone(), stop.clone(), pairs.clone(), errors.clone());
            let key = if one_key {
                format!("bench:{strategy}")
            } else {
                format!("bench:{strategy}:{contender}")
            };
            tokio::spawn(async move {
                let owner = Owner::new("lockbench");
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let outcome = match lock.acquire(&key, &owner, LEASE).await {
                        Ok(guard) => guard.release().await,
                        Err(error) => Err(error),
                    };
                    match outcome {
                        Ok(()) => pairs.lock().unwrap().record(began.elapsed()),
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
    let pairs = pairs.lock().unwrap();
    let errors = errors.lock().unwrap();
    Run {
        strategy: strategy.name().to_owned(),
        contenders,
        keys: if one_key { "one" } else { "one each" }.to_owned(),
        pairs: pairs.len(),
        errors: errors.len(),
        pairs_per_second: pairs.len() as f64 / elapsed,
        median_pair_ms: pairs.percentile_ms(0.5),
        p99_pair_ms: pairs.percentile_ms(0.99),
        first_error: errors.first().cloned(),
        recipe_of: None,
    }
}
