//! `bench`: the numbers behind the README, measured the same way for every strategy.
//!
//!   bench measure --label redis --out .run/results/bench/redis.json [--runs 5] ...
//!       one strategy, whose two instances run (see `loadtest::bench`)
//!   bench report .run/results/bench/*.json --html report.html [--chaos runs.jsonl] [--lockbench lockbench.json]
//!       the tables, the ordering, and one self-contained HTML report
//!
//! `make bench` (scripts/bench.sh) starts the instances of each strategy and runs both.
//! Exit codes: 0 done; 1 a strategy broke its promise (a safe one oversold or lost a
//! sale, a baseline did not oversell); 2 the benchmark could not run.

// `bench::measure` awaits its steps through async helpers, each awaiting more: the
// release build's type queries on that future need more than the default depth of 128
// ("queries overflow the depth limit!" otherwise).
#![recursion_limit = "256"]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use loadtest::bench::cpu::Watched;
use loadtest::bench::lockbench::Run;
use loadtest::bench::sustained::Load;
use loadtest::bench::{self, BenchOptions, StrategyBench};
use loadtest::chaos;
use loadtest::render::document::{self, Table};
use loadtest::render::{html, tables};
use loadtest::Options;

#[derive(Parser)]
#[command(name = "bench", about = "Measure each strategy against its bound, and report")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the strategy the instances run; write the results as JSON.
    Measure {
        /// The row's name: the strategy, or a variant such as `mysql+no-semaphore`.
        #[arg(long)]
        label: String,
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "http://127.0.0.1:8080,http://127.0.0.1:8090"
        )]
        hosts: Vec<String>,
        /// Crowd runs (500 buyers, 300 units each).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Keep-alive connections of the sustained load, split between the instances.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Seconds of each sustained window.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Windows of serial and of sustained load; the median is reported, with the spread.
        #[arg(long, default_value_t = 3)]
        sustained_runs: usize,
        /// Seconds of each window of the serial client (as many windows as sustained ones).
        #[arg(long, default_value_t = 1.0)]
        serial_seconds: f64,
        /// A process whose CPU use to report, as NAME=PID (repeat it).
        #[arg(long = "watch", value_name = "NAME=PID", value_parser = parse_watched)]
        watched: Vec<Watched>,
        /// The instances' admin token, if they have one.
        #[arg(long, env = "SECKILL_ADMIN_TOKEN")]
        admin_token: Option<String>,
    },
    /// Print the tables of several measurements and write the HTML report.
    Report {
        #[arg(required = true, value_name = "JSON")]
        results: Vec<PathBuf>,
        #[arg(long, value_name = "PATH")]
        html: Option<PathBuf>,
        /// Also write the tables as Markdown.
        #[arg(long, value_name = "PATH")]
        markdown: Option<PathBuf>,
        /// When and where it ran, for the report's first line.
        #[arg(long, default_value = "")]
        headline: String,
        /// The chaos suite's runs file (`make chaos` writes .run/results/chaos/runs.jsonl):
        /// its table goes into the report; skipped if absent.
        #[arg(long, value_name = "PATH")]
        chaos: Option<PathBuf>,
        /// The raw lock benchmark (`make lockbench` writes .run/results/lockbench.json); skipped if absent.
        #[arg(long, value_name = "PATH")]
        lockbench: Option<PathBuf>,
    },
}

/// The chaos suite's table, judged from its runs; left out, with a warning, when a run
/// cannot be read.
fn chaos_table(runs: &Path) -> Option<Table> {
    match chaos::read_runs(runs) {
        Ok(runs) => Some(chaos::table::table(&chaos::rows(&runs), chaos::table::Layout::Chaos)),
        Err(error) => {
            eprintln!("bench: the report leaves the chaos table out: {error:#}");
            None
        }
    }
}

fn parse_watched(text: &str) -> Result<Watched, String> {
    let (name, pid) = text
        .split_once('=')
        .ok_or("expected NAME=PID, e.g. redis-server=1234")?;
    let pid = pid.parse().map_err(|_| format!("`{pid}` is not a process id"))?;
    Ok(Watched {
        name: name.to_owned(),
        pid,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Measure {
            label,
            out,
            hosts,
            runs,
            connections,
            seconds,
            sustained_runs,
            serial_seconds,
            watched,
            admin_token,
        } => {
            let config = seckill::config::Config::defaults(); // the SECKILL_* settings the instances got
            let crowd = Options {
                hosts: hosts.iter().map(|host| host.trim_end_matches('/').to_owned()).collect(),
                users: 500,
                initial_stock: 300,
                redis_url: config.redis_url.clone(),
                keys: seckill::sale::keys::Keys::for_stock_at(&config.key_prefix, &config.redis_url),
                mysql_url: config.mysql_url.clone(),
                admin_token,
                goose_metrics: false,
                live_history: None,
                repeat_buyers: 0.0,
            };
            let options = BenchOptions {
                crowd,
                config,
                label,
                runs,
                sustained: Load { connections, seconds },
                sustained_runs,
                serial_seconds,
                watched,
            };
            measure(&options, &out).await
        }
        Command::Report {
            results,
            html,
            markdown,
            headline,
            chaos,
            lockbench,
        } => report(
            &results,
            html.as_deref(),
            markdown.as_deref(),
            headline,
            chaos.as_deref(),
            lockbench.as_deref(),
        ),
    }
}

/// Measures one run, writes its result and histories beside `out` and prints its
/// tables; exit 1 if the run did not keep its promise, 2 if it could not be measured.
async fn measure(options: &BenchOptions, out: &Path) -> ExitCode {
    let result = match bench::measure(options).await {
        Ok(result) => result,
        Err(error) => {
            eprintln!("bench error: {error:#}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = write(out, &serde_json::to_string(&result).expect("plain data")) {
        eprintln!("bench: {error}");
        return ExitCode::from(2);
    }
    if let Err(error) = write_histories(out, &result) {
        eprintln!("bench: {error:#}");
        return ExitCode::from(2);
    }
    print!("{}", document::markdown(&tables::bench(std::slice::from_ref(&result))));
    if result.kept_its_promise() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "bench: `{}` did not keep its promise; see {}",
            result.label,
            out.display()
        );
        ExitCode::from(1)
    }
}

fn report(
    paths: &[PathBuf],
    html: Option<&Path>,
    markdown: Option<&Path>,
    headline: String,
    chaos: Option<&Path>,
    lockbench: Option<&Path>,
) -> ExitCode {
    let mut benches = Vec::new();
    for path in paths {
        let parsed = std::fs::read_to_string(path)
            .map_err(|error| error.to_string())
            .and_then(|text| serde_json::from_str::<StrategyBench>(&text).map_err(|error| error.to_string()));
        match parsed {
            Ok(bench) => benches.push(bench),
            Err(error) => {
                eprintln!("bench: {} is not a result of `bench measure`: {error}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let tables = document::markdown(&tables::bench(&benches));
    print!("{tables}");
    if let Some(path) = markdown {
        if let Err(error) = write(path, &tables) {
            eprintln!("bench: {error}");
            return ExitCode::from(2);
        }
    }
    if let Some(path) = html {
        let extras = html::Extras {
            headline,
            chaos_table: chaos.filter(|path| path.exists()).and_then(chaos_table),
            lockbench: lockbench.and_then(lockbench_runs),
            timelines: timelines(paths, &benches, path),
        };
        if let Err(error) = write(path, &html::report(&benches, &extras)) {
            eprintln!("bench: {error}");
            return ExitCode::from(2);
        }
        println!("report: {}", path.display());
    }
    if benches.iter().all(StrategyBench::kept_its_promise) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The timelines `bench measure` wrote beside each result (see [`write_histories`]), as
/// links from the folder of the report at `html`: a name where they share it.
fn timelines(results: &[PathBuf], benches: &[StrategyBench], html: &Path) -> Vec<(String, Vec<(usize, String)>)> {
    let links = |result: &PathBuf, bench: &StrategyBench| -> Vec<(usize, String)> {
        (1..=bench.crowd_runs.len())
            .map(|run| (run, timeline_of(result, run)))
            .filter(|(_, page)| page.exists())
            .map(|(run, page)| match page.parent() == html.parent() {
                true => (run, page.file_name().unwrap_or_default().to_string_lossy().into_owned()),
                false => (run, std::path::absolute(&page).unwrap_or(page).display().to_string()),
            })
            .collect()
    };
    results
        .iter()
        .zip(benches)
        .map(|(result, bench)| (bench.label.clone(), links(result, bench)))
        .filter(|(_, links)| !links.is_empty())
        .collect()
}

/// The timeline of crowd run `run` of the result at `result`.
fn timeline_of(result: &Path, run: usize) -> PathBuf {
    loadtest::history::beside_report(result, &format!("crowd-{run}.history.html"))
}

/// The lockbench runs, or `None` if the file is absent or unreadable.
fn lockbench_runs(path: &Path) -> Option<Vec<Run>> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Each crowd run's history and its timeline, beside the result at `out`:
/// `redis.json` gets `redis.crowd-1.history.jsonl` and `redis.crowd-1.history.html`.
fn write_histories(out: &Path, result: &StrategyBench) -> anyhow::Result<()> {
    for (run, report) in (1..).zip(&result.crowd_runs) {
        let path = timeline_of(out, run).with_extension("jsonl");
        let title = format!("{}, crowd run {run}: the history", result.label);
        loadtest::render::timeline::write_with_page(&path, &title, &report.history, &report.checks)?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty());
    folder
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, text))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}
