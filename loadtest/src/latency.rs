//! Latencies: each one recorded in a histogram, read back as percentiles.
//!
//! This is the crate's one percentile. The crowd, the sustained load, the round-trip
//! probes and `lockbench` all record their latencies here, so a "p99" means the same
//! thing in every table.
//!
//! ## How it works
//! 1. Each latency is recorded in nanoseconds into an HdrHistogram with 3 significant
//!    digits: any value is kept to within 0.1%, from a 30 µs round trip to an hour.
//! 2. The percentile `q` of `n` latencies is the one of rank `ceil(q * n)` (at least 1):
//!    the nearest rank.
//! 3. It is read back as the highest value its histogram bucket holds, so at most 0.1%
//!    above the latency that was recorded.
//!
//! ## References
//! - HdrHistogram: <https://hdrhistogram.github.io/HdrHistogram/>

use std::time::Duration;

use hdrhistogram::Histogram;

/// Each latency kept to within 0.1%.
const SIGNIFICANT_DIGITS: u8 = 3;
/// The longest latency told apart, in nanoseconds: an hour. A longer one counts as an hour.
const LONGEST_NS: u64 = 3_600_000_000_000;
const NANOS_PER_MS: f64 = 1e6;

/// Every latency of one measurement.
#[derive(Clone, Debug)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Histogram::new_with_bounds(1, LONGEST_NS, SIGNIFICANT_DIGITS).expect("valid bounds and precision"))
    }
}

impl Latencies {
    /// The latencies of `values`, each in milliseconds.
    pub fn of_ms(values: impl IntoIterator<Item = f64>) -> Self {
        let mut latencies = Latencies::default();
        values.into_iter().for_each(|ms| latencies.record_ms(ms));
        latencies
    }

    /// The latencies of `values`.
    pub fn of(values: impl IntoIterator<Item = Duration>) -> Self {
        let mut latencies = Latencies::default();
        values.into_iter().for_each(|latency| latencies.record(latency));
        latencies
    }

    pub fn record(&mut self, latency: Duration) {
        self.0
            .saturating_record(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn record_ms(&mut self, ms: f64) {
        // A negative or NaN latency cannot happen; it would count as zero.
        self.0.saturating_record((ms * NANOS_PER_MS).round() as u64);
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> usize {
        self.0.len() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The nearest-rank percentile (`fraction` 0.99 for p99), in milliseconds; 0 when empty.
    pub fn percentile_ms(&self, fraction: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(fraction) as f64 / NANOS_PER_MS
    }

    /// The same, in microseconds.
    pub fn percentile_us(&self, fraction: f64) -> f64 {
        self.percentile_ms(fraction) * 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the histogram's precision: 3 significant digits.
    fn assert_close(measured: f64, expected: f64) {
        assert!(
            (measured - expected).abs() <= expected * 0.001,
            "{measured} is not within 0.1% of {expected}"
        );
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let latencies = Latencies::of_ms((1..=100).map(f64::from));
        assert_close(latencies.percentile_ms(0.50), 50.0);
        assert_close(latencies.percentile_ms(0.99), 99.0);
        assert_eq!(Latencies::default().percentile_ms(0.5), 0.0);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_lower_middle_value() {
        let latencies = Latencies::of_ms([10.0, 20.0, 30.0, 40.0]);
        assert_close(latencies.percentile_ms(0.5), 20.0);
        assert_close(latencies.percentile_ms(1.0), 40.0);
        assert_close(latencies.percentile_ms(0.0), 10.0);
    }

    #[test]
    fn microseconds_and_milliseconds_read_the_same_latency() {
        let latencies = Latencies::of([
            Duration::from_micros(45),
            Duration::from_micros(45),
            Duration::from_millis(3),
        ]);
        assert_eq!(latencies.len(), 3);
        assert_close(latencies.percentile_us(0.5), 45.0);
        assert_close(latencies.percentile_ms(0.99), 3.0);
    }
}
