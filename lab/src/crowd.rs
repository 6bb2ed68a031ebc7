//! One crowd: the lessons' load test (`loadtest`, 500 buyers at 300 units) run as a
//! process of the lab's own, with its history written as it happens
//! (`--live-history`), and the faults the lab strikes meanwhile in its faults file, so
//! that the checks, the verdict and the timeline see them where they happened.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use loadtest::history::{self, Event};
use loadtest::verdict::Verdict;
use serde::Serialize;

/// The lessons' crowd.
pub const BUYERS: usize = 500;
pub const STOCK: i64 = 300;

/// How many buyers a crowd sends at how many units: the lessons' 500 at 300, or fewer
/// (a torture round shrinks its crowd).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct Size {
    pub buyers: usize,
    pub units: i64,
}

impl Size {
    pub const LESSONS: Size = Size {
        buyers: BUYERS,
        units: STOCK,
    };
}

impl Default for Size {
    fn default() -> Self {
        Size::LESSONS
    }
}

/// A crowd under way or done: the lessons' crowd, or a steady load ([`crate::selling`]).
pub struct Crowd {
    pub number: u32,
    pub kind: Kind,
    report: PathBuf,
    live: PathBuf,
    pub faults: PathBuf,
    /// Set once the run has been judged.
    outcome: Arc<Mutex<Option<Outcome>>>,
    task: tokio::task::JoinHandle<()>,
    /// Ends a steady load; a crowd ends by itself.
    stop: Option<tokio::sync::watch::Sender<bool>>,
}

/// The lessons' crowd, which ends by itself, or a steady load, which ends when stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Crowd,
    Steady,
}

/// What the crowd's run came to.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// `held`, `oversold`, `lost`, `wrong answer`; or `none` when the run could not be judged.
    pub verdict: String,
    /// The same, for code: `None` when the run could not be judged.
    #[serde(skip)]
    pub judged: Option<Verdict>,
    /// Every check of the history, as the report has them (name, status, findings).
    pub checks: serde_json::Value,
    /// `loadtest`'s exit code and what it said on its error output.
    pub exit_code: Option<i32>,
    pub error: String,
}

impl Outcome {
    /// A run judged `verdict` by `checks`.
    fn judged(verdict: Verdict, checks: serde_json::Value, exit_code: Option<i32>, error: String) -> Self {
        Outcome {
            verdict: verdict.word().to_owned(),
            judged: Some(verdict),
            checks,
            exit_code,
            error,
        }
    }

    /// A run that could not be judged, and why.
    fn not_judged(exit_code: Option<i32>, error: String) -> Self {
        Outcome {
            verdict: "none".to_owned(),
            judged: None,
            checks: serde_json::Value::Array(Vec::new()),
            exit_code,
            error,
        }
    }
}

/// Where a crowd's sale is kept, for its checks: the stock's Redis, and the MariaDB of
/// its orders when the instances write them.
pub struct Sold {
    pub stock_url: String,
    pub orders_mysql_url: Option<String>,
}

impl Sold {
    /// Where the sale of the setup whose servers are `servers` is kept.
    pub fn of(servers: &crate::servers::Servers) -> Sold {
        Sold {
            stock_url: servers.stock_url(),
            orders_mysql_url: servers.orders_mysql_url(),
        }
    }
}

impl Crowd {
    /// Starts `loadtest` with `size` at `hosts`, selling from `sale`'s stock (read
    /// directly for the verdict, with its orders if it keeps them); its files go into
    /// `dir` as `crowd-N.*`.
    pub fn start(
        loadtest: &Path,
        size: Size,
        number: u32,
        hosts: &[String],
        sale: &Sold,
        dir: &Path,
    ) -> anyhow::Result<Crowd> {
        let (report, live, faults) = fresh_files(dir, number)?;
        let mut command = tokio::process::Command::new(loadtest);
        command
            .args(["--users", &size.buyers.to_string(), "--stock", &size.units.to_string()])
            .args(["--hosts", &hosts.join(","), "--redis-url", &sale.stock_url, "--json"]);
        if let Some(mysql_url) = &sale.orders_mysql_url {
            command.args(["--mysql-url", mysql_url]);
        }
        command
            .arg("--report-file")
            .arg(&report)
            .arg("--live-history")
            .arg(&live)
            .arg("--faults-file")
            .arg(&faults)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        crate::instances::forget_exported_settings(&mut command, &["LOADTEST_", "SECKILL_"]);
        let child = command
            .spawn()
            .with_context(|| format!("cannot run {}", loadtest.display()))?;
        let outcome = Arc::new(Mutex::new(None));
        let task = tokio::spawn(wait_for(child, report.clone(), outcome.clone()));
        Ok(Crowd {
            number,
            kind: Kind::Crowd,
            report,
            live,
            faults,
            outcome,
            task,
            stop: None,
        })
    }

    /// Starts a steady load of `rate` buyers a second at `hosts`, until [`Crowd::stop_selling`],
    /// selling from `sale`'s stock (with its orders if it keeps them).
    pub fn start_steady(number: u32, hosts: &[String], sale: &Sold, rate: u32, dir: &Path) -> anyhow::Result<Crowd> {
        let (report, live, faults) = fresh_files(dir, number)?;
        let load = crate::selling::Load {
            hosts: hosts.to_vec(),
            redis_url: sale.stock_url.clone(),
            orders_mysql_url: sale.orders_mysql_url.clone(),
            rate,
            live: live.clone(),
            faults: faults.clone(),
            history: history::beside_report(&report, "history.jsonl"),
        };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let outcome = Arc::new(Mutex::new(None));
        let judged = outcome.clone();
        let task = tokio::spawn(async move {
            let ended = match crate::selling::sell(load, stopped).await {
                Ok((verdict, checks)) => Outcome::judged(verdict, checks, None, String::new()),
                Err(error) => Outcome::not_judged(None, format!("the steady load could not run: {error:#}")),
            };
            *judged.lock().unwrap() = Some(ended);
        });
        Ok(Crowd {
            number,
            kind: Kind::Steady,
            report,
            live,
            faults,
            outcome,
            task,
            stop: Some(stop),
        })
    }

    /// Asks a steady load to stop sending buyers; its verdict follows once the last
    /// answers came. `false` for a crowd, which cannot be stopped.
    pub fn stop_selling(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| stop.send(true).is_ok())
    }

    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome.lock().unwrap().clone()
    }

    pub fn is_running(&self) -> bool {
        self.outcome().is_none()
    }

    /// The history so far: the buyers' events as they were written, and the faults.
    pub fn history_so_far(&self) -> Vec<Event> {
        let text = std::fs::read_to_string(&self.live).unwrap_or_default();
        // The last line may be half written: only whole lines are read.
        let mut events: Vec<Event> = text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        // A faults file the lab could not read is read again at the next redraw.
        let _ = history::merge_faults(&mut events, &self.faults);
        events
    }

    /// The page of the crowd's timeline: drawn from the history so far while it runs,
    /// and the one `loadtest` wrote, with its checks, once it ended.
    pub fn timeline(&self) -> String {
        let written = history::beside_report(&self.report, "history.html");
        match self.outcome() {
            Some(_) if written.exists() => std::fs::read_to_string(&written).unwrap_or_default(),
            _ => loadtest::render::timeline::page(
                &format!("crowd {}: the history so far", self.number),
                &self.history_so_far(),
                &[],
            ),
        }
    }

    /// Stops the crowd now, unjudged (its process is killed with its task).
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Crowd `number`'s report, live history and faults file in `dir`, the faults file
/// empty; what an earlier lab left under those names is removed first, so that nothing
/// of another run is read as this one's.
fn fresh_files(dir: &Path, number: u32) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let file = |suffix: &str| dir.join(format!("crowd-{number}.{suffix}"));
    for suffix in ["json", "live.jsonl", "faults.jsonl", "history.jsonl", "history.html"] {
        let old = file(suffix);
        if old.exists() {
            std::fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
        }
    }
    let faults = file("faults.jsonl");
    std::fs::write(&faults, "").with_context(|| format!("cannot write {}", faults.display()))?;
    Ok((file("json"), file("live.jsonl"), faults))
}

async fn wait_for(child: tokio::process::Child, report: PathBuf, outcome: Arc<Mutex<Option<Outcome>>>) {
    let ended = child.wait_with_output().await;
    let (exit_code, error) = match ended {
        Ok(output) => (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ),
        Err(error) => (None, format!("the load test could not be waited for: {error}")),
    };
    let judged: Option<serde_json::Value> = std::fs::read_to_string(&report)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        // Exit 2: the run could not be judged, whatever it wrote.
        .filter(|_| matches!(exit_code, Some(0 | 1)));
    let verdict = judged
        .as_ref()
        .and_then(|report| serde_json::from_value::<Verdict>(report["verdict"].clone()).ok());
    let ended = match (judged, verdict) {
        (Some(report), Some(verdict)) => Outcome::judged(verdict, report["checks"].clone(), exit_code, error),
        _ => Outcome::not_judged(exit_code, error),
    };
    *outcome.lock().unwrap() = Some(ended);
}
