//! Shrunk rounds kept as regressions: one JSON file each in `lab/regressions/`, named by
//! its seed. `make chaos` plays every one again (`torture --regressions`), so a hole found
//! once is looked for from then on; a round of a setup that must hold must be held.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::plan::{Round, STEADY_LONGEST_MS};
use super::play::Played;

/// One kept round, and what it came to when it was found.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Regression {
    pub round: Round,
    /// The verdict when found, and the checks that failed then.
    pub found: String,
    pub failed: Vec<String>,
}

/// The folder of the kept rounds.
pub fn folder() -> PathBuf {
    testkit::project_root().join("lab/regressions")
}

/// Keeps `played` in `folder` as `SEED.json`, and says where.
pub fn keep(played: &Played, folder: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(folder).with_context(|| format!("cannot make {}", folder.display()))?;
    let path = folder.join(format!("{:#018x}.json", played.round.seed));
    let regression = Regression {
        round: played.round.clone(),
        found: played.verdict_word().to_owned(),
        failed: played.failed.clone(),
    };
    std::fs::write(&path, serde_json::to_string_pretty(&regression)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Every kept round in `folder`, by file name.
pub fn all(folder: &Path) -> anyhow::Result<Vec<(PathBuf, Regression)>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(folder) {
        Ok(entries) => entries.filter_map(|entry| Some(entry.ok()?.path())).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", folder.display())),
    };
    paths.retain(|path| path.extension().is_some_and(|extension| extension == "json"));
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let regression = read(&path)?;
            Ok((path, regression))
        })
        .collect()
}

/// The kept round in `path`; a bare round (as a regression's `round` holds it) is read too,
/// so a round written by hand plays as well (`torture --play FILE`). Its faults must be
/// ones the lab can strike, and strike within a minute of the first sale.
pub fn read(path: &Path) -> anyhow::Result<Regression> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    // A kept round holds its round under `round`; anything else is read as a bare round, so
    // that its own mistake (a misspelled fault, say) is the one named.
    let regression = match json.get("round") {
        Some(_) => serde_json::from_value(json),
        None => serde_json::from_value(json).map(|round| Regression {
            round,
            found: "not played yet".to_owned(),
            failed: Vec::new(),
        }),
    };
    let regression = regression.with_context(|| {
        format!(
            "{} is neither a kept round nor a round (see lab/regressions/README.md)",
            path.display()
        )
    })?;
    check_schedule(&regression.round).with_context(|| format!("{}", path.display()))?;
    Ok(regression)
}

/// The latest a fault of a kept round may strike, after the first sale.
const LATEST_KEPT_STRIKE_MS: u64 = crate::faults::LONGEST_MS;

/// Refuses a fault out of range, or struck later than [`LATEST_KEPT_STRIKE_MS`].
fn check_schedule(round: &Round) -> anyhow::Result<()> {
    if let Some(steady) = round.steady {
        if !(1..=200).contains(&steady.rate) || !(1..=STEADY_LONGEST_MS).contains(&steady.ms) {
            anyhow::bail!(
                "a steady load of {} buyers a second for {} ms: pick 1 to 200 buyers, for 1 to {STEADY_LONGEST_MS} ms",
                steady.rate,
                steady.ms
            );
        }
    }
    for timed in &round.schedule {
        timed.strike.validate(2).map_err(anyhow::Error::msg)?;
        if timed.at_ms > LATEST_KEPT_STRIKE_MS {
            anyhow::bail!(
                "a fault at {} ms: pick 0 to {LATEST_KEPT_STRIKE_MS} ms after the first sale",
                timed.at_ms
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> anyhow::Result<Regression> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("round.json");
        std::fs::write(&path, text).unwrap();
        read(&path)
    }

    const SETUP: &str = r#""setup": {"strategy": "redis", "fencing": true, "ttl_ms": 500, "segments": 1,
        "group_commit": false, "one_per_buyer": false, "linger_ms": 50}"#;

    #[test]
    fn a_round_written_by_hand_is_read_and_its_own_mistake_named() {
        let good = format!(
            r#"{{"seed": 1, {SETUP}, "schedule": [{{"at_ms": 10, "strike": {{"kind": "pause", "instance": 0, "ms": 100}}}}]}}"#
        );
        assert_eq!(read_text(&good).unwrap().round.schedule.len(), 1);
        let misspelled = good.replace("\"pause\"", "\"paws\"");
        let error = format!("{:#}", read_text(&misspelled).unwrap_err());
        assert!(error.contains("paws"), "{error}");
    }

    #[test]
    fn a_fault_out_of_range_or_too_late_is_refused_before_it_is_played() {
        let late = format!(
            r#"{{"seed": 1, {SETUP}, "schedule": [{{"at_ms": 18446744073709551615, "strike": {{"kind": "pause", "instance": 0, "ms": 100}}}}]}}"#
        );
        assert!(format!("{:#}", read_text(&late).unwrap_err()).contains("pick 0 to 60000 ms"));
        let no_such_instance = format!(
            r#"{{"seed": 1, {SETUP}, "schedule": [{{"at_ms": 0, "strike": {{"kind": "pause", "instance": 5, "ms": 100}}}}]}}"#
        );
        assert!(format!("{:#}", read_text(&no_such_instance).unwrap_err()).contains("no instance 5"));
        let ten_minutes = format!(r#"{{"seed": 1, {SETUP}, "steady": {{"rate": 100, "ms": 600000}}, "schedule": []}}"#);
        assert!(format!("{:#}", read_text(&ten_minutes).unwrap_err()).contains("for 1 to 10000 ms"));
    }
}
