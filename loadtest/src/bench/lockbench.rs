//! The locks alone, without the sale around them (the `lockbench` binary).
//!
//! N contenders (tasks sharing one handle, as the buyers of one instance do) acquire
//! and release as fast as they can for a few seconds. Either all on one key (they
//! queue for it) or each on a key of its own (nothing to wait for: the cost of the
//! round trips alone). A [`Run`] counts the acquire+release pairs and times each one.

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
    }
}
