//! `loadtest`: reset the sale, fire 500 one-shot buyers at two instances, print the verdict.
//!
//! Exit code: 0 when the verdict is what the strategy promises (safe strategies held,
//! `none`/`local` oversold), 1 when it is not (a safe strategy oversold, a baseline did
//! not show its race, or a sale was lost), 2 when the test could not run or the run was
//! invalid (the sale was reset under it).

use std::process::ExitCode;

use clap::Parser;
use loadtest::{run, Options, Report};

#[derive(Parser)]
#[command(
    name = "loadtest",
    about = "Fire the flash-sale crowd at seckill instances and check for oversell",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Instances to split the buyers between, comma separated.
    #[arg(
        long,
        env = "LOADTEST_HOSTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080,http://127.0.0.1:8090"
    )]
    hosts: Vec<String>,
    /// Requests, one per goose user, all at once.
    #[arg(long, env = "LOADTEST_USERS", default_value_t = 500)]
    users: usize,
    /// The share of the requests (0 to 0.5) sent by a buyer who already sent one
    /// (`?buyer=`), at the same moment through another instance: what `--one-per-buyer`
    /// refuses. None by default, so that the first lesson's crowd is one request per buyer.
    #[arg(long, env = "LOADTEST_REPEAT_BUYERS", default_value_t = 0.0)]
    repeat_buyers: f64,
    /// Stock to put on sale before the attack.
    #[arg(long, env = "LOADTEST_STOCK", default_value_t = 300)]
    stock: i64,
    /// Redis the instances sell from; read directly for the verdict.
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The instances' `--key-prefix`: what every key of the sale starts with.
    #[arg(long, env = "SECKILL_KEY_PREFIX", default_value = "", value_parser = seckill::config::key_prefix)]
    key_prefix: String,
    /// MySQL of the MySQL strategies; its statement counters are read before and after.
    #[arg(
        long,
        env = "SECKILL_MYSQL_URL",
        default_value = "mysql://seckill:seckill@127.0.0.1:3306/seckill"
    )]
    mysql_url: String,
    /// The instances' admin token (`--admin-token`), sent with the reset.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Print the report as one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Also print goose's own metrics tables.
    #[arg(long)]
    goose_metrics: bool,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    report_file: Option<std::path::PathBuf>,
    /// Write the run's history (every request, its answer, one JSON line each) to this
    /// file. By default, beside --report-file: `report.json` gets `report.history.jsonl`.
    #[arg(long, env = "LOADTEST_HISTORY_FILE", value_name = "PATH")]
    history_file: Option<std::path::PathBuf>,
    /// Also append every event of the history to this file the moment it happens, one
    /// JSON line each: for a page that draws the run while it runs (`make lab`).
    #[arg(long, value_name = "PATH")]
    live_history: Option<std::path::PathBuf>,
    /// Faults that another program added during the run (`loadtest record-fault`), to
    /// put into the history and its timeline.
    #[arg(long, env = "LOADTEST_FAULTS_FILE", value_name = "PATH")]
    faults_file: Option<std::path::PathBuf>,
    /// Fire nothing: print one table comparing these JSON reports (from --report-file).
    #[arg(long, value_name = "REPORT", num_args = 1..)]
    compare: Vec<std::path::PathBuf>,
    /// With --compare: also draw the comparison as an SVG bar chart into this file.
    #[arg(long, value_name = "PATH", requires = "compare")]
    chart: Option<std::path::PathBuf>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Add a fault to a faults file, stamped now on the history's clock: for a script
    /// that injects faults during a run started with --faults-file.
    RecordFault {
        /// The faults file the run reads (--faults-file).
        #[arg(long, value_name = "PATH")]
        to: std::path::PathBuf,
        fault: loadtest::history::Fault,
        /// What it struck: an instance (`seckill-8080`), a server, a link.
        target: String,
        /// Its parameter: how long, how far, which way.
        #[arg(long)]
        detail: Option<String>,
    },
    /// Check a history file alone, with no server: the checks that need no sale record
    /// (`unique`, `sold-out`, `real-time`, `one-per-buyer`, `linearizable`). Exit 1 when
    /// one fails. Edit a line of a history and see which check catches it.
    Check {
        /// A history (`--history-file`), or one written by another tool in its format.
        history: std::path::PathBuf,
        /// The units the sale began with.
        #[arg(long, default_value_t = 300)]
        stock: i64,
        /// Into how many segments the stock was split (`--stock-segments`).
        #[arg(long, default_value_t = 1)]
        segments: u32,
        /// The sale held every buyer to one unit (`--one-per-buyer`).
        #[arg(long)]
        one_per_buyer: bool,
        /// Also draw the history's timeline into this page.
        #[arg(long, value_name = "PATH")]
        timeline: Option<std::path::PathBuf>,
    },
    /// Write the table of `make chaos` or `make clock-jump` from its runs file: each run
    /// judged from its report and history, a column per check. Exit 1 when a row that
    /// must hold did not.
    ChaosTable {
        /// The runs file: one JSON line per run, appended by the script after each run.
        runs: std::path::PathBuf,
        #[arg(long, value_enum, default_value = "chaos")]
        layout: loadtest::chaos::table::Layout,
        /// Also write the table, in Markdown, to this file.
        #[arg(long, value_name = "PATH")]
        markdown: Option<std::path::PathBuf>,
    },
    /// Print the safety matrix (a row per fault, a column per strategy, each fencing's
    /// verdicts) read from a published chaos table, docs/results/chaos.md by default.
    SafetyMatrix {
        #[arg(default_value = "docs/results/chaos.md")]
        chaos_page: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(command) = &cli.command {
        return subcommand(command);
    }
    if !cli.compare.is_empty() {
        return compare(&cli.compare, cli.chart.as_deref());
    }
    let options = Options {
        hosts: cli.hosts.iter().map(|h| h.trim_end_matches('/').to_owned()).collect(),
        users: cli.users,
        repeat_buyers: cli.repeat_buyers,
        initial_stock: cli.stock,
        redis_url: cli.redis_url.clone(),
        keys: seckill::sale::keys::Keys::for_stock_at(&cli.key_prefix, &cli.redis_url),
        mysql_url: cli.mysql_url.clone(),
        admin_token: cli.admin_token.clone(),
        goose_metrics: cli.goose_metrics,
        live_history: cli.live_history.clone(),
    };
    match run(&options).await {
        Ok(report) => show_and_keep(&cli, &report),
        Err(error) => {
            eprintln!("loadtest error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// The commands that read what runs left behind, and start no run.
fn subcommand(command: &Command) -> ExitCode {
    match command {
        Command::RecordFault {
            to,
            fault,
            target,
            detail,
        } => match loadtest::history::append_fault(to, *fault, target, detail.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("loadtest error: {error:#}");
                ExitCode::from(2)
            }
        },
        Command::ChaosTable { runs, layout, markdown } => chaos_table(runs, *layout, markdown.as_deref()),
        Command::SafetyMatrix { chaos_page } => safety_matrix(chaos_page),
        Command::Check {
            history,
            stock,
            segments,
            one_per_buyer,
            timeline,
        } => check(history, *stock, *segments, *one_per_buyer, timeline.as_deref()),
    }
}

/// Prints the run's report (or its JSON), writes the report and the history where
/// `cli` says; exit 1 when the report failed, 2 when a file could not be written.
fn show_and_keep(cli: &Cli, report: &Report) -> ExitCode {
    let json = serde_json::to_string(report).unwrap_or_default();
    if cli.json {
        println!("{json}");
    } else {
        print!("{}", report.render());
    }
    if let Some(path) = &cli.report_file {
        if let Err(error) = std::fs::write(path, &json) {
            eprintln!("loadtest error: cannot write the report to {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    let history_file = cli.history_file.clone().or_else(|| {
        let report = cli.report_file.as_deref()?;
        Some(loadtest::history::beside_report(report, "history.jsonl"))
    });
    if let Some(path) = history_file {
        if let Err(error) = write_history(&path, report, cli.faults_file.as_deref()) {
            eprintln!("loadtest error: {error:#}");
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The run's history at `path`, with the faults of `faults` if another program wrote
/// some, and its timeline beside it (`.jsonl` becomes `.html`).
fn write_history(path: &std::path::Path, report: &Report, faults: Option<&std::path::Path>) -> anyhow::Result<()> {
    let mut history = report.history.clone();
    if let Some(faults) = faults {
        loadtest::history::merge_faults(&mut history, faults)?;
    }
    let title = format!(
        "{}, fencing {}: the history of one run",
        report.label(),
        report.fencing.name()
    );
    loadtest::render::timeline::write_with_page(path, &title, &history, &report.checks)
}

/// Prints the safety matrix of the chaos table in `page`; exit 2 when there is none.
fn safety_matrix(page: &std::path::Path) -> ExitCode {
    let rows = match std::fs::read_to_string(page) {
        Ok(text) => loadtest::chaos::matrix::measured(&text),
        Err(error) => {
            eprintln!("loadtest error: cannot read {}: {error}", page.display());
            return ExitCode::from(2);
        }
    };
    if rows.is_empty() {
        eprintln!(
            "loadtest error: {} holds no chaos table (a header `| fault | strategy | fencing | ... | verdicts |`); \
             `PUBLISH=1 make chaos` writes one",
            page.display()
        );
        return ExitCode::from(2);
    }
    print!("{}", loadtest::chaos::matrix::matrix(&rows));
    ExitCode::SUCCESS
}

/// Checks the history at `path` alone, and prints each check's status and findings.
fn check(
    path: &std::path::Path,
    stock: i64,
    segments: u32,
    one_per_buyer: bool,
    timeline: Option<&std::path::Path>,
) -> ExitCode {
    let segments = match seckill::sale::segments::Segments::new(segments) {
        Ok(segments) => segments,
        Err(error) => {
            eprintln!("loadtest error: --segments: {error}");
            return ExitCode::from(2);
        }
    };
    let events = match loadtest::history::read(path) {
        Ok(events) => events,
        Err(error) => {
            eprintln!("loadtest error: {error:#}");
            return ExitCode::from(2);
        }
    };
    let checks = loadtest::history::checks::run_on_history_alone(&events, &segments.split(stock), one_per_buyer);
    print!("{}", loadtest::render::checks::text(&checks));
    if let Some(page) = timeline {
        let title = format!("{}: checked alone", path.display());
        let html = loadtest::render::timeline::page(&title, &events, &checks);
        if let Err(error) = std::fs::write(page, html) {
            eprintln!(
                "loadtest error: cannot write the timeline to {}: {error}",
                page.display()
            );
            return ExitCode::from(2);
        }
        println!("timeline: {}", page.display());
    }
    let failed = checks
        .iter()
        .any(|check| check.status == loadtest::history::checks::Status::Fail);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints the table of the runs in `runs`, and what broke; exit 1 when a row that must
/// hold did not, 2 when a run cannot be read.
fn chaos_table(
    runs: &std::path::Path,
    layout: loadtest::chaos::table::Layout,
    markdown: Option<&std::path::Path>,
) -> ExitCode {
    let runs = match loadtest::chaos::read_runs(runs) {
        Ok(runs) => runs,
        Err(error) => {
            eprintln!("loadtest error: {error:#}");
            return ExitCode::from(2);
        }
    };
    let rows = loadtest::chaos::rows(&runs);
    let table = loadtest::chaos::table::table(&rows, layout).markdown();
    print!("{table}");
    if let Some(path) = markdown {
        if let Err(error) = std::fs::write(path, &table) {
            eprintln!("loadtest error: cannot write the table to {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    rows.iter()
        .flat_map(|row| row.notes())
        .for_each(|note| println!("note: {note}"));
    let broken: Vec<String> = rows.iter().flat_map(|row| row.broken_promises()).collect();
    if broken.is_empty() {
        return ExitCode::SUCCESS;
    }
    broken.iter().for_each(|why| eprintln!("unsafe: {why}"));
    ExitCode::from(1)
}

fn compare(paths: &[std::path::PathBuf], chart: Option<&std::path::Path>) -> ExitCode {
    let mut reports = Vec::new();
    for path in paths {
        let parsed = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<loadtest::Report>(&text).map_err(|e| e.to_string()));
        match parsed {
            Ok(report) => reports.push(report),
            Err(error) => {
                eprintln!(
                    "loadtest error: {} is not a report written by --report-file: {error}",
                    path.display()
                );
                return ExitCode::from(2);
            }
        }
    }
    print!("{}", loadtest::render::tables::comparison(&reports).markdown());
    if let Some(path) = chart {
        if let Err(error) = std::fs::write(path, loadtest::render::chart::comparison_svg(&reports)) {
            eprintln!("loadtest error: cannot write the chart to {}: {error}", path.display());
            return ExitCode::from(2);
        }
        println!("chart: {}", path.display());
    }
    ExitCode::SUCCESS
}
