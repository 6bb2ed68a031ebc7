//! Where a sale's time goes under sustained load, from the service's own figures.
//!
//! Two sources, both written by the instances themselves:
//! - **Each step of a sale**, from `/metrics` (`seckill_sale_step_seconds{step}`, see
//!   `seckill::metrics`): queued in the instance's local queue, the lock's acquire, the
//!   stock's read and write, the release. Scraped before and after the sustained
//!   windows; the difference of sums over the difference of counts is each step's mean.
//! - **The hand-over**, from the grant log (`seckill::sale::grant_log`): every grant's start and
//!   the moment its release was sent, on the machine's one clock. Sorted by start, a
//!   grant's *hold* runs from its start to its release, and the **hand-over gap** from
//!   its release to the next grant's start, whichever instance got it.
//!
//! Under contention the lock serializes the sales, so hold + gap is one sale of the
//! critical path: their means add up to about 1 / sales per second. With the stock in
//! N segments ([`seckill::sale::segments`]) each segment's lock serializes its own sales: the
//! hand-overs are taken within each segment, and hold + gap is about N / sales per second. The gap is the
//! lock's share (the release's way to the backend, the wake-up, the next acquire), the
//! hold the sale's (read, write, and the service's own work between them).

use serde::{Deserialize, Serialize};

use seckill::metrics::SaleStep;
use seckill::sale::grant_log::GrantRecord;

/// One step's mean over the sales of the sustained windows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepTime {
    pub step: String,
    pub count: f64,
    pub mean_ms: f64,
}

/// The hand-overs of one window's grants.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HandOver {
    pub grants: usize,
    /// From one grant to the next of the same lock: the grants less one per segment.
    #[serde(default)]
    pub hand_overs: usize,
    /// From a grant to its release being sent.
    pub mean_hold_ms: f64,
    /// From a release being sent to the next grant.
    pub mean_gap_ms: f64,
    pub median_gap_ms: f64,
    /// Hand-overs whose next holder was on the other instance.
    pub across_instances: usize,
    pub mean_gap_across_ms: f64,
    pub mean_gap_within_ms: f64,
}

impl HandOver {
    /// The hand-overs between consecutive grants of one lock (one segment), by start.
    /// A gap below zero (two holders at once: a lock without mutual exclusion) counts as zero.
    pub fn of<'a>(grants: impl IntoIterator<Item = &'a GrantRecord>) -> Option<HandOver> {
        let mut grants: Vec<&GrantRecord> = grants.into_iter().collect();
        grants.sort_by_key(|grant| (grant.segment, grant.granted_at_us));
        if grants.len() < 2 {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let holds: Vec<f64> = grants
            .iter()
            .map(|grant| ms(grant.released_at_us.saturating_sub(grant.granted_at_us)))
            .collect();
        let (mut gaps, mut across, mut within) = (Vec::new(), Vec::new(), Vec::new());
        for pair in grants.windows(2).filter(|pair| pair[0].segment == pair[1].segment) {
            let gap = ms(pair[1].granted_at_us.saturating_sub(pair[0].released_at_us));
            gaps.push(gap);
            if pair[0].instance == pair[1].instance {
                within.push(gap);
            } else {
                across.push(gap);
            }
        }
        let mean = |values: &[f64]| {
            if values.is_empty() {
                0.0
            } else {
                values.iter().sum::<f64>() / values.len() as f64
            }
        };
        if gaps.is_empty() {
            return None;
        }
        let mut sorted = gaps.clone();
        sorted.sort_by(f64::total_cmp);
        Some(HandOver {
            grants: grants.len(),
            hand_overs: gaps.len(),
            mean_hold_ms: mean(&holds),
            mean_gap_ms: mean(&gaps),
            median_gap_ms: sorted[sorted.len() / 2],
            across_instances: across.len(),
            mean_gap_across_ms: mean(&across),
            mean_gap_within_ms: mean(&within),
        })
    }
}

/// `(sum in seconds, count)` of each step, from the instances' `/metrics` pages.
pub type StepSums = Vec<(SaleStep, f64, f64)>;

/// Adds up each step's sum and count over every page (one per instance).
pub fn step_sums(pages: &[String]) -> StepSums {
    SaleStep::ALL
        .iter()
        .map(|&step| {
            let sample = |suffix: &str| -> f64 {
                let name = format!("seckill_sale_step_seconds_{suffix}{{step=\"{}\"}}", step.name());
                pages
                    .iter()
                    .flat_map(|page| page.lines())
                    .filter_map(|line| line.strip_prefix(&name))
                    .filter_map(|value| value.trim().parse::<f64>().ok())
                    .sum()
            };
            (step, sample("sum"), sample("count"))
        })
        .collect()
}

/// Each step's mean between two scrapes.
pub fn step_times(before: &StepSums, after: &StepSums) -> Vec<StepTime> {
    after
        .iter()
        .map(|&(step, sum, count)| {
            let (sum_before, count_before) = before
                .iter()
                .find(|(earlier, _, _)| *earlier == step)
                .map_or((0.0, 0.0), |&(_, sum, count)| (sum, count));
            let count = count - count_before;
            StepTime {
                step: step.name().to_owned(),
                count,
                mean_ms: if count > 0.0 {
                    (sum - sum_before) / count * 1000.0
                } else {
                    0.0
                },
            }
        })
        .collect()
}

/// The mean of the step called `name`, or `None` if no sale took it.
pub fn mean_ms(steps: &[StepTime], name: &str) -> Option<f64> {
    steps
        .iter()
        .find(|step| step.step == name && step.count > 0.0)
        .map(|step| step.mean_ms)
}

/// Every instance's `/metrics` page.
pub async fn scrape(hosts: &[String]) -> anyhow::Result<Vec<String>> {
    let mut pages = Vec::new();
    for host in hosts {
        let page = reqwest::get(format!("{host}/metrics"))
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|error| anyhow::anyhow!("cannot read {host}/metrics: {error}"))?
            .text()
            .await?;
        pages.push(page);
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(instance: &str, granted_at_us: u64, released_at_us: u64) -> GrantRecord {
        GrantRecord {
            instance: instance.into(),
            segment: None,
            fencing_token: None,
            granted_at_us,
            released_at_us,
        }
    }

    #[test]
    fn a_gap_runs_from_one_release_to_the_next_grant_whoever_got_it() {
        let grants = [
            grant("b", 3_000, 3_500), // out of order: sorted by start first
            grant("a", 0, 1_000),
            grant("a", 1_200, 2_000),
        ];
        let hand_over = HandOver::of(&grants).unwrap();
        assert_eq!(hand_over.grants, 3);
        assert_eq!(hand_over.across_instances, 1);
        assert!((hand_over.mean_hold_ms - (1.0 + 0.8 + 0.5) / 3.0).abs() < 1e-9);
        assert!((hand_over.mean_gap_within_ms - 0.2).abs() < 1e-9, "{hand_over:?}");
        assert!((hand_over.mean_gap_across_ms - 1.0).abs() < 1e-9, "{hand_over:?}");
        assert!((hand_over.mean_gap_ms - 0.6).abs() < 1e-9);
    }

    #[test]
    fn with_segments_a_gap_runs_to_the_next_grant_of_the_same_segment() {
        let in_segment = |segment, granted_at_us, released_at_us| GrantRecord {
            segment: Some(segment),
            ..grant("a", granted_at_us, released_at_us)
        };
        // Two segments sell at once; each hands over 0.5 ms after its release.
        let grants = [
            in_segment(0, 0, 1_000),
            in_segment(1, 100, 1_100),
            in_segment(0, 1_500, 2_500),
            in_segment(1, 1_600, 2_600),
        ];
        let hand_over = HandOver::of(&grants).unwrap();
        assert_eq!((hand_over.grants, hand_over.hand_overs), (4, 2));
        assert!((hand_over.mean_gap_ms - 0.5).abs() < 1e-9, "{hand_over:?}");
        assert!((hand_over.mean_hold_ms - 1.0).abs() < 1e-9, "{hand_over:?}");
    }

    #[test]
    fn each_step_mean_is_the_difference_of_sums_over_the_difference_of_counts() {
        let page = |read_sum: f64, read_count: f64| {
            format!(
                "seckill_sale_step_seconds_sum{{step=\"read\"}} {read_sum}\n\
                 seckill_sale_step_seconds_count{{step=\"read\"}} {read_count}\n"
            )
        };
        let before = step_sums(&[page(1.0, 100.0), page(0.5, 50.0)]);
        let after = step_sums(&[page(1.2, 200.0), page(0.6, 150.0)]);
        let read = step_times(&before, &after)
            .into_iter()
            .find(|step| step.step == "read")
            .unwrap();
        assert_eq!(read.count, 200.0);
        assert!((read.mean_ms - 0.3 / 200.0 * 1000.0).abs() < 1e-9, "{read:?}");
    }
}
