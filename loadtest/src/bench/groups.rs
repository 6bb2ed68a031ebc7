//! How many units each grant sold under sustained load, with `--group-commit`.
//!
//! Each instance counts the buyers of every grant in the histogram `seckill_group_size`
//! (`seckill::metrics`). Scraped before and after the sustained windows, the difference
//! of its sums over the difference of its counts is the mean group; a quantile is the
//! first bucket whose count reaches it, so it reads as "at most" that bucket's bound.
//! A run without groups has no such grants, and no figures.

use serde::{Deserialize, Serialize};

const METRIC: &str = "seckill_group_size";

/// The groups of the sustained windows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSizes {
    pub grants: f64,
    /// Units per grant, on average: buyers per group.
    pub mean: f64,
    /// The bucket bounds that hold the median and the 99th percentile group.
    pub median_at_most: f64,
    pub p99_at_most: f64,
}

/// The histogram summed over every instance's page: `(bucket bound, count)` pairs in
/// rising order, then the sum and the count.
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    fn read(pages: &[String]) -> Histogram {
        let lines = || pages.iter().flat_map(|page| page.lines());
        let total = |name: &str| -> f64 {
            lines()
                .filter_map(|line| line.strip_prefix(name))
                .filter_map(|value| value.trim().parse::<f64>().ok())
                .sum()
        };
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        let bucket = format!("{METRIC}_bucket{{le=\"");
        for line in lines() {
            let Some((bound, count)) = line.strip_prefix(&bucket).and_then(|rest| rest.split_once("\"}")) else {
                continue;
            };
            let (Ok(bound), Ok(count)) = (bound.parse::<f64>(), count.trim().parse::<f64>()) else {
                continue; // `+Inf`, which every group is under
            };
            match buckets.iter_mut().find(|(known, _)| *known == bound) {
                Some((_, total)) => *total += count,
                None => buckets.push((bound, count)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram {
            buckets,
            sum: total(&format!("{METRIC}_sum ")),
            count: total(&format!("{METRIC}_count ")),
        }
    }
}

/// The groups between two scrapes of every instance's `/metrics`; `None` without any.
pub fn between(before: &[String], after: &[String]) -> Option<GroupSizes> {
    let (before, after) = (Histogram::read(before), Histogram::read(after));
    let grants = after.count - before.count;
    if grants <= 0.0 {
        return None;
    }
    let counted_before = |bound: f64| {
        before
            .buckets
            .iter()
            .find(|(known, _)| *known == bound)
            .map_or(0.0, |(_, count)| *count)
    };
    let cumulative: Vec<(f64, f64)> = after
        .buckets
        .iter()
        .map(|&(bound, count)| (bound, count - counted_before(bound)))
        .collect();
    let at_most = |quantile: f64| {
        cumulative
            .iter()
            .find(|(_, count)| *count >= quantile * grants)
            .map_or(f64::INFINITY, |(bound, _)| *bound)
    };
    Some(GroupSizes {
        grants,
        mean: (after.sum - before.sum) / grants,
        median_at_most: at_most(0.5),
        p99_at_most: at_most(0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(buckets: &[(f64, u64)], sum: u64) -> String {
        let mut page = String::new();
        for (bound, count) in buckets {
            page.push_str(&format!("{METRIC}_bucket{{le=\"{bound}\"}} {count}\n"));
        }
        let count = buckets.last().map_or(0, |(_, count)| *count);
        page.push_str(&format!(
            "{METRIC}_bucket{{le=\"+Inf\"}} {count}\n{METRIC}_sum {sum}\n{METRIC}_count {count}\n"
        ));
        page
    }

    #[test]
    fn the_groups_between_two_scrapes_of_two_instances() {
        // Before: 2 grants of 1 buyer on one instance, none on the other.
        let before = [
            page(&[(1.0, 2), (4.0, 2), (16.0, 2)], 2),
            page(&[(1.0, 0), (4.0, 0), (16.0, 0)], 0),
        ];
        // After: 12 more grants, 40 buyers: 3 of one buyer, 7 of two to four, 2 of five to sixteen.
        let after = [
            page(&[(1.0, 3), (4.0, 6), (16.0, 7)], 22),
            page(&[(1.0, 2), (4.0, 6), (16.0, 7)], 20),
        ];
        let groups = between(&before, &after).unwrap();
        assert_eq!(groups.grants, 12.0);
        assert_eq!(groups.mean, 40.0 / 12.0);
        assert_eq!((groups.median_at_most, groups.p99_at_most), (4.0, 16.0));
    }

    #[test]
    fn a_run_without_groups_has_no_figures() {
        let pages = [String::from("seckill_units_sold_total 300\n")];
        assert_eq!(between(&pages, &pages), None);
    }
}
