//! Shrunk rounds kept as regressions: one JSON file each in `lab/regressions/`, named by
//! its seed. `make chaos` plays every one again (`torture --regressions`), so a hole found
//! once is looked for from then on; a round of a setup that must hold must be held.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::plan::Round;
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
/// so a round written by hand plays as well (`torture --play FILE`).
pub fn read(path: &Path) -> anyhow::Result<Regression> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Ok(round) = serde_json::from_str::<Round>(&text) {
        return Ok(Regression {
            round,
            found: "not played yet".to_owned(),
            failed: Vec::new(),
        });
    }
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is neither a kept round nor a round (see lab/regressions/README.md)",
            path.display()
        )
    })
}
