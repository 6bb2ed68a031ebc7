//! `torture`: rounds of random faults over the lab's strategies, each drawn from a seed and
//! judged by the history's checks, until the time is up (`make torture`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use lab::lab::{Binaries, Lab};
use std::sync::Arc;

use lab::torture::plan::{round_seed, Choices, Round};
use lab::torture::play::{play, Played};
use lab::torture::regressions::{self, Regression};
use lab::torture::shrink::shrink;
use lab::torture::tally::Tally;
use loadtest::verdict::Verdict;

#[derive(Parser)]
#[command(
    name = "torture",
    about = "Rounds of random faults, drawn from a seed, judged by the history's checks"
)]
struct Cli {
    /// The run's seed; each round's own seed is drawn from it. Default: the clock's.
    #[arg(long, env = "SEED")]
    seed: Option<u64>,
    /// Plays rounds until this many minutes have passed.
    #[arg(long, env = "MINUTES", default_value_t = 10.0)]
    minutes: f64,
    /// Plays this many rounds at most.
    #[arg(long, env = "ROUNDS")]
    rounds: Option<u64>,
    /// The strategies to draw from, comma-separated. Default: every one the lab can run here.
    #[arg(long, env = "STRATEGIES", value_delimiter = ',')]
    strategies: Vec<String>,
    /// Fencing in every round (`on` or `off`); drawn when not given. `off` over the fenced
    /// strategies draws only setups that hold a known hole: the checks must find it.
    #[arg(long, env = "FENCING", value_parser = ["on", "off"])]
    fencing: Option<String>,
    /// Plays the one round of this seed (a round's seed, as a run prints it) and stops.
    #[arg(long)]
    round: Option<String>,
    /// Where the crowds' reports, histories and timelines go.
    #[arg(long, default_value = ".run/torture")]
    dir: PathBuf,
    /// Shrinks every round that was not held (a round that must hold is always shrunk).
    #[arg(long, env = "SHRINK", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    shrink: bool,
    /// Plays every round kept in lab/regressions/ again, and stops.
    #[arg(long)]
    regressions: bool,
    /// Plays the round in this file and stops: a kept one (lab/regressions/, or a run's
    /// `shrunk/`), or one written by hand in the same form.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["regressions", "round"])]
    play: Option<PathBuf>,
}

impl Cli {
    fn plays_kept_rounds(&self) -> bool {
        self.regressions || self.play.is_some()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli).await {
        // Kept rounds are asked for by name: one that could not be played as asked (a fault
        // refused, the crowd not judged) fails the run.
        Ok(tally) if tally.holes().is_empty() && (!cli.plays_kept_rounds() || tally.played_as_asked()) => {
            ExitCode::SUCCESS
        }
        Ok(tally) => {
            let unjudged = tally.played.iter().filter(|played| !played.judged()).count();
            eprintln!(
                "[torture] {} round(s) that must hold were not held, {} could not be played, {unjudged} not judged: \
                 see the table",
                tally.holes().len(),
                tally.unplayed.len()
            );
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("[torture] error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Plays the rounds asked for, then stops everything the lab started, even after Ctrl-C.
async fn run(cli: &Cli) -> anyhow::Result<Tally> {
    if !(cli.minutes.is_finite() && cli.minutes > 0.0) {
        anyhow::bail!(
            "MINUTES={}: give a number of minutes above 0, e.g. MINUTES=10",
            cli.minutes
        );
    }
    let lab = Lab::new(Binaries::beside_this_program()?, &cli.dir)?;
    let rounds = async {
        if let Some(file) = &cli.play {
            let kept = regressions::read(file)?;
            return play_kept(&lab, cli, vec![(file.clone(), kept)]).await;
        }
        match cli.regressions {
            true => play_kept(&lab, cli, regressions::all(&regressions::folder())?).await,
            false => play_drawn_rounds(&lab, cli).await,
        }
    };
    let result = tokio::select! {
        result = rounds => result,
        () = stop_asked() => Err(anyhow::anyhow!("stopped by a signal; what ran was stopped")),
    };
    lab.shutdown().await;
    let tally = result?;
    let tables = tally.tables();
    println!("\n{tables}");
    // The table `make torture` publishes (scripts/lib/publish.sh, with PUBLISH=1).
    let table = cli.dir.join("table.md");
    std::fs::write(&table, tables).with_context(|| format!("cannot write {}", table.display()))?;
    Ok(tally)
}

/// Ctrl-C or a SIGTERM: the lab's instances and servers must not outlive the run.
async fn stop_asked() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
}

/// Rounds drawn from the seed until the time is up (or the one round asked for).
async fn play_drawn_rounds(lab: &Arc<Lab>, cli: &Cli) -> anyhow::Result<Tally> {
    let strategies = strategies(&cli.strategies)?;
    let choices = Choices {
        strategies: strategies.clone(),
        fencing: cli.fencing.as_deref().map(|fencing| fencing == "on"),
        orders: lab::setup::mariadb_missing().is_none(),
    };
    let seed = cli.seed.unwrap_or_else(clock_seed);
    let seeds: Box<dyn Iterator<Item = u64>> = match &cli.round {
        Some(round) => Box::new(std::iter::once(parse_seed(round)?)),
        None => {
            println!(
                "[torture] seed {seed}: {} minutes over {}",
                cli.minutes,
                strategies.join(", ")
            );
            Box::new((0..cli.rounds.unwrap_or(u64::MAX)).map(move |index| round_seed(seed, index)))
        }
    };
    let deadline = Instant::now() + Duration::from_secs_f64(cli.minutes * 60.0);
    let mut tally = Tally::default();
    for (index, round_seed) in (1..).zip(seeds) {
        if Instant::now() >= deadline && cli.round.is_none() {
            break;
        }
        let round = Round::drawn(round_seed, &choices).map_err(anyhow::Error::msg)?;
        match play(lab, &round, &cli.dir).await {
            Ok(played) => {
                say_played(index, &played);
                let played = match played.is_a_hole() || (cli.shrink && played.caught()) {
                    true => shrink_and_keep(lab, played, cli).await?,
                    false => played,
                };
                tally.played.push(played);
            }
            Err(error) => {
                println!("[torture] round {index}: {} -> not played: {error:#}", round.describe());
                tally.unplayed.push((round_seed, format!("{error:#}")));
            }
        }
    }
    tally.header = format!(
        "Seed {seed}, {} minutes over {}; each round's seed replays it: `target/release/torture --round SEED`.\n\n",
        cli.minutes,
        strategies.join(", ")
    );
    Ok(tally)
}

/// Kept rounds (each with the file it was read from), played again.
async fn play_kept(lab: &Arc<Lab>, cli: &Cli, rounds: Vec<(PathBuf, Regression)>) -> anyhow::Result<Tally> {
    let mut tally = Tally {
        header: "The rounds `make torture` kept (lab/regressions/), played again: a round of a setup that \
                 must hold must be held.\n\n"
            .to_owned(),
        ..Tally::default()
    };
    let mut found = BTreeMap::new();
    for (index, (path, kept)) in (1..).zip(rounds) {
        let failed = match kept.failed.is_empty() {
            true => String::new(),
            false => format!(" ({})", kept.failed.join(", ")),
        };
        println!("[torture] {}: found {}{failed}", path.display(), kept.found);
        found.insert(kept.round.seed, format!("{}{failed}", kept.found));
        match play(lab, &kept.round, &cli.dir).await {
            Ok(played) => {
                say_played(index, &played);
                tally.played.push(played);
            }
            Err(error) => tally.unplayed.push((kept.round.seed, format!("{error:#}"))),
        }
    }
    tally.kept = Some(found);
    Ok(tally)
}

fn say_played(index: usize, played: &Played) {
    let failed = match played.failed.is_empty() {
        true => String::new(),
        false => format!(" (failed: {})", played.failed.join(", ")),
    };
    let (struck, drawn) = (played.struck.len(), played.round.schedule.len());
    let late = match struck < drawn {
        true => format!(
            " ({} of its {drawn} faults struck nothing: refused, or after the last answer)",
            drawn - struck
        ),
        false => String::new(),
    };
    println!(
        "[torture] round {index}, {:.1} s, {}: {} -> {}{failed}{late}",
        played.seconds,
        played.expected.name(),
        played.round.describe(),
        played.verdict_word()
    );
    for trouble in played
        .troubles
        .iter()
        .filter(|trouble| trouble.starts_with("not judged"))
    {
        println!("[torture]   {trouble}");
    }
    if played.verdict != Some(Verdict::Held) {
        println!(
            "[torture]   kept: {} and its history and timeline beside it",
            played.report.display()
        );
    }
}

/// Shrinks a round the checks caught; a hole (a setup that must hold) is kept in
/// lab/regressions/, any other in the run's folder. The round counts in the tally as it
/// was played, its smallest form beside it. A shrink that fails keeps the round as it was.
async fn shrink_and_keep(lab: &Arc<Lab>, mut played: Played, cli: &Cli) -> anyhow::Result<Played> {
    let (smallest, plays) = match shrink(lab, played.clone(), &cli.dir).await {
        Ok(shrunk) => (shrunk.played, shrunk.plays),
        Err(error) => {
            println!("[torture]   could not shrink it ({error:#}): kept as it was");
            (played.clone(), 0)
        }
    };
    let folder = match played.is_a_hole() {
        true => regressions::folder(),
        false => cli.dir.join("shrunk"),
    };
    let kept = regressions::keep(&smallest, &folder)?;
    println!(
        "[torture]   shrunk in {plays} plays to: {} -> {}; kept in {}",
        smallest.round.describe(),
        smallest.verdict_word(),
        kept.display()
    );
    played.shrunk_to = Some((smallest.round, smallest.verdict));
    Ok(played)
}

/// The strategies asked for, each one the lab can run here; or all of those.
fn strategies(asked: &[String]) -> anyhow::Result<Vec<String>> {
    let available = lab::setup::available();
    let runnable: Vec<String> = available
        .iter()
        .filter(|offer| offer.missing.is_none())
        .map(|offer| offer.strategy.to_owned())
        .collect();
    if asked.is_empty() {
        return Ok(runnable);
    }
    for name in asked {
        match available.iter().find(|offer| offer.strategy == name) {
            None => anyhow::bail!("no strategy `{name}` in the lab; pick among {}", runnable.join(", ")),
            Some(offer) => {
                if let Some(missing) = &offer.missing {
                    anyhow::bail!("`{name}` {missing}");
                }
            }
        }
    }
    Ok(asked.to_vec())
}

/// A round's seed as printed (`0x…`), or in decimal.
fn parse_seed(text: &str) -> anyhow::Result<u64> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| anyhow::anyhow!("`{text}` is not a seed: give one as a run prints it, e.g. 0x00c0ffee00c0ffee"))
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}
