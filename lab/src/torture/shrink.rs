//! A failing round made small, as QuickCheck and Jepsen shrink theirs: fewer faults, then
//! fewer buyers, then shorter faults, each step kept only while the round still fails.
//! What is left is the smallest schedule that still shows the hole, the one worth reading
//! and the one worth keeping as a regression.
//!
//! A candidate still fails when its checks catch it on a configuration of the same kind as
//! the original's: a hole where the setup must hold stays one, and is not traded for a
//! known hole a fault of the candidate opened (a stock failover that struck this time).
//! A fault's effect depends on its timing, which is the machine's: a candidate is played
//! up to [`TRIES`] times, and one failure is enough to keep it.

use std::path::Path;
use std::sync::Arc;

use super::plan::{Expected, Round, Steady};
use super::play::{play, Played};
use crate::crowd::Size;
use crate::lab::Lab;

/// How many times a candidate is played before it counts as no longer failing.
pub const TRIES: usize = 2;
/// The smallest crowd a round shrinks to.
pub const FEWEST: Size = Size { buyers: 20, units: 12 };
/// The shortest fault a round shrinks to.
pub const SHORTEST_MS: u64 = 100;
/// The shortest steady load a round shrinks to.
pub const SHORTEST_STEADY_MS: u64 = 1_000;

/// The smallest round found, what it came to, and how many rounds the search played.
pub struct Shrunk {
    pub played: Played,
    pub plays: usize,
}

/// Shrinks `failing`, a round the checks caught.
pub async fn shrink(lab: &Arc<Lab>, failing: Played, dir: &Path) -> anyhow::Result<Shrunk> {
    let mut search = Search {
        lab,
        dir,
        expected: failing.expected,
        best: failing,
        plays: 0,
    };
    // 1. Fewer faults: each one left out in turn; one that was not needed stays out.
    let mut index = 0;
    while index < search.best.round.schedule.len() {
        let mut candidate = search.best.round.clone();
        candidate.schedule.remove(index);
        if !search.keep_if_failing(candidate).await? {
            index += 1;
        }
    }
    // 2. Fewer buyers, while it still fails.
    search.fewer_buyers().await?;
    // 3. Shorter faults: each one's length halved, while it still fails.
    for index in 0..search.best.round.schedule.len() {
        loop {
            let mut candidate = search.best.round.clone();
            let Some(shorter) = halved(&mut candidate, index) else {
                break;
            };
            if !shorter || !search.keep_if_failing(candidate).await? {
                break;
            }
        }
    }
    Ok(Shrunk {
        played: search.best,
        plays: search.plays,
    })
}

/// Halves how long fault `index` of `round` lasts; `Some(false)` when it is as short as
/// it goes, `None` when that fault has no length (a clock jump).
fn halved(round: &mut Round, index: usize) -> Option<bool> {
    let ms = round.schedule[index].strike.lasting_ms_mut()?;
    if *ms / 2 < SHORTEST_MS {
        return Some(false);
    }
    *ms /= 2;
    Some(true)
}

struct Search<'a> {
    lab: &'a Arc<Lab>,
    dir: &'a Path,
    /// What the original round must come to: a candidate must fail as one of these.
    expected: Expected,
    best: Played,
    plays: usize,
}

impl Search<'_> {
    /// Half the crowd at half the units, or a steady load half as long, while the round
    /// still fails.
    async fn fewer_buyers(&mut self) -> anyhow::Result<()> {
        // Halved only while every fault still strikes within its first two thirds, as drawn.
        let last_strike_ms = self
            .best
            .round
            .schedule
            .iter()
            .map(|timed| timed.at_ms)
            .max()
            .unwrap_or(0);
        let shorter = |steady: &Steady| steady.ms / 2 >= SHORTEST_STEADY_MS.max(last_strike_ms * 3 / 2);
        while let Some(steady) = self.best.round.steady.filter(shorter) {
            let mut candidate = self.best.round.clone();
            candidate.steady = Some(Steady {
                ms: steady.ms / 2,
                ..steady
            });
            if !self.keep_if_failing(candidate).await? {
                break;
            }
        }
        while self.best.round.steady.is_none() && self.best.round.crowd.buyers / 2 >= FEWEST.buyers {
            let mut candidate = self.best.round.clone();
            let crowd = candidate.crowd;
            candidate.crowd = Size {
                buyers: crowd.buyers / 2,
                units: (crowd.units / 2).max(FEWEST.units),
            };
            if !self.keep_if_failing(candidate).await? {
                break;
            }
        }
        Ok(())
    }

    /// Plays `candidate` up to [`TRIES`] times; if it fails once, it is the new best.
    async fn keep_if_failing(&mut self, candidate: Round) -> anyhow::Result<bool> {
        for _ in 0..TRIES {
            self.plays += 1;
            let played = play(self.lab, &candidate, self.dir).await?;
            println!(
                "[torture]   shrinking, play {}: {} -> {}",
                self.plays,
                candidate.describe(),
                played.verdict_word()
            );
            if played.caught() && played.expected == self.expected {
                self.best = played;
                return Ok(true);
            }
        }
        Ok(false)
    }
}
