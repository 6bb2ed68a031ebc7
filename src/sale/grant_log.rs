//! The grants the sales held, each from grant to release: how a checker counts the
//! holders that overlapped.
//!
//! A unit sold twice is the damage; two holders at once is the cause. With fencing on,
//! the cause can happen without the damage: the fence refuses the late holder's read or
//! write ([`crate::sale::stock`] counts those refusals). To show the fence at work, a run must
//! report both. So every sale under a lock appends its grant to `stock:grants` after
//! its release: the token, when the guard was handed to the sale and when the sale sent
//! its release, in microseconds of the machine's clock.
//!
//! Two grants **overlap** when one began before the other's release was sent. A correct
//! lock grants the next holder only after the release reached the backend, which is after
//! it was sent, so under a correct lock no two grants overlap. A run counts the holders
//! that were overlapped: a holder paused for a second while twenty others were granted
//! counts once, as the one stale holder whose late write the fence must refuse.
//!
//! ## What a run keeps
//! A grant whose read found its segment empty is not logged: it sold nothing and could
//! not, and after the sell-out such grants come by the thousand each second. So the log
//! holds the grants that sold a unit or tried to (a refused read or write, a lost lease,
//! a failed write), and a reset empties it. The list also keeps only its newest
//! [`GRANT_LOG_CAP`] grants: a sale whose stock never runs out (a benchmark's) cannot
//! fill the stock Redis with it.
//!
//! ## Limits
//! - **One clock.** The instances of a demo run on one machine, so their times compare.
//!   Instances on machines whose clocks differ, or an instance whose clock jumps, make
//!   the count meaningless; the counts of sold units and refusals stay right.
//! - **Only released grants.** A holder killed while holding never releases, and its
//!   grant is not in the log.
//! - **Only grants that reached for a unit.** Two holders that both read an empty
//!   segment overlapped without being counted; neither could sell.

use serde::{Deserialize, Serialize};

use crate::lock::FencingToken;
use crate::sale::stock::{StockError, StockStore};

/// The most grants the log keeps (about 150 bytes each): far more than a sale of a few
/// thousand units logs, and a bound for a sale that never sells out.
pub const GRANT_LOG_CAP: i64 = 100_000;

/// One grant, as the sale that held it saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    pub instance: String,
    /// The segment whose lock it was, when the stock is split ([`crate::sale::segments`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<FencingToken>,
    /// Unix time in microseconds: when the lock handed the sale its guard...
    pub granted_at_us: u64,
    /// ... and when the sale sent its release.
    pub released_at_us: u64,
}

/// Appends `grant` to the log, and drops the oldest grants past [`GRANT_LOG_CAP`].
pub async fn append(store: &StockStore, grant: &GrantRecord) -> Result<(), StockError> {
    let json = serde_json::to_string(grant).expect("a grant record serializes");
    redis::pipe()
        .rpush(store.keys().grants(), json)
        .ignore()
        .ltrim(store.keys().grants(), -(GRANT_LOG_CAP as isize), -1)
        .ignore()
        .query_async::<()>(&mut store.connection())
        .await?;
    Ok(())
}

/// How many holders saw another grant of the same lock (the same segment) begin while
/// they still held theirs.
pub fn overlapping_holders(grants: &[GrantRecord]) -> usize {
    let mut by_start: Vec<&GrantRecord> = grants.iter().collect();
    by_start.sort_by_key(|grant| (grant.segment, grant.granted_at_us));
    // The grant that began soonest after this one is the first that could overlap it.
    by_start
        .windows(2)
        .filter(|pair| pair[1].segment == pair[0].segment && pair[1].granted_at_us < pair[0].released_at_us)
        .count()
}

/// Unix time in microseconds, for the log.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(granted_at_us: u64, released_at_us: u64) -> GrantRecord {
        GrantRecord {
            instance: "test".into(),
            segment: None,
            fencing_token: None,
            granted_at_us,
            released_at_us,
        }
    }

    #[test]
    fn grants_one_after_another_do_not_overlap() {
        assert_eq!(overlapping_holders(&[grant(0, 10), grant(10, 20), grant(25, 30)]), 0);
    }

    #[test]
    fn a_grant_that_begins_before_the_last_release_overlaps() {
        // A paused holder (0..100), and two holders granted one after the other while it slept.
        assert_eq!(overlapping_holders(&[grant(40, 50), grant(0, 100), grant(60, 70)]), 1);
        assert_eq!(overlapping_holders(&[grant(0, 10), grant(5, 20)]), 1);
        // Three at once: the first two each saw a later grant begin.
        assert_eq!(overlapping_holders(&[grant(0, 10), grant(1, 10), grant(2, 10)]), 2);
    }

    #[test]
    fn grants_of_two_segments_may_overlap_each_other() {
        let in_segment = |segment, granted_at_us, released_at_us| GrantRecord {
            segment: Some(segment),
            ..grant(granted_at_us, released_at_us)
        };
        assert_eq!(overlapping_holders(&[in_segment(0, 0, 10), in_segment(1, 5, 15)]), 0);
        assert_eq!(
            overlapping_holders(&[in_segment(0, 0, 10), in_segment(1, 5, 15), in_segment(0, 8, 20)]),
            1
        );
    }
}
