//! What `redis-degrade` counts of its own: the mode in use, the switches, and the time in
//! each mode. `/healthz` shows it under `lock_stats.degrade`, `/metrics` as two metrics,
//! and the load test reads it back ([`crate::lock::LockStats::own_part`]).

use std::time::{Duration, Instant};

use super::mode::Mode;
use crate::lock::OwnStats;

/// Mode, switches and time in each mode, as `/healthz` and the load test show them.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DegradeStats {
    pub mode: Option<Mode>,
    pub epoch: u64,
    /// Switches this instance has seen (made by it or by another instance).
    pub switches: u64,
    pub seconds_in_redis: f64,
    pub seconds_in_mysql: f64,
}

impl DegradeStats {
    /// What the trait's [`own_stats`](crate::lock::DistributedLock::own_stats) hands out: these
    /// numbers for `/healthz`, and the metrics made of them.
    pub(super) fn own_stats(self) -> OwnStats {
        OwnStats {
            key: STATS_KEY,
            healthz: serde_json::to_value(self).expect("plain numbers and names"),
            metrics: self.metrics(),
        }
    }

    /// The metrics of `GET /metrics` that only this strategy has: the mode in use, and
    /// the switches this instance has seen.
    fn metrics(&self) -> Vec<prometheus::proto::MetricFamily> {
        use prometheus::core::Collector;
        let mode = prometheus::IntGaugeVec::new(
            prometheus::Opts::new(
                "seckill_lock_mode",
                "redis-degrade: 1 for the lock mode in use, 0 for the other.",
            ),
            &["mode"],
        )
        .expect("a valid metric");
        for (each, name) in [(Mode::Redis, "redis"), (Mode::Mysql, "mysql")] {
            mode.with_label_values(&[name]).set(i64::from(self.mode == Some(each)));
        }
        let switches = prometheus::IntCounter::new(
            "seckill_lock_mode_switches_total",
            "redis-degrade: lock mode switches this instance has seen.",
        )
        .expect("a valid metric name");
        switches.inc_by(self.switches);
        [mode.collect(), switches.collect()].concat()
    }
}

/// The key of [`DegradeStats`] in `/healthz`'s `lock_stats` (`scripts/demo-degrade.sh`
/// reads `lock_stats.degrade.mode`; the load test reads it back with
/// [`LockStats::own_part`](crate::lock::LockStats::own_part)).
pub const STATS_KEY: &str = "degrade";

/// Time spent in each mode, as this instance saw it.
#[derive(Default)]
pub(super) struct ModeClock {
    current: Option<(Mode, u64, Instant)>,
    switches: u64,
    in_redis: Duration,
    in_mysql: Duration,
}

impl ModeClock {
    pub(super) fn observe(&mut self, mode: Mode, epoch: u64) {
        let now = Instant::now();
        match self.current {
            Some((_, seen, _)) if seen == epoch => return,
            Some((previous, _, since)) => {
                *self.time_in(previous) += now - since;
                self.switches += 1;
                tracing::warn!(?mode, epoch, "the lock switched mode");
            }
            None => {}
        }
        self.current = Some((mode, epoch, now));
    }

    fn time_in(&mut self, mode: Mode) -> &mut Duration {
        match mode {
            Mode::Redis => &mut self.in_redis,
            Mode::Mysql => &mut self.in_mysql,
        }
    }

    pub(super) fn stats(&self) -> DegradeStats {
        let (mut in_redis, mut in_mysql) = (self.in_redis, self.in_mysql);
        if let Some((mode, _, since)) = self.current {
            match mode {
                Mode::Redis => in_redis += since.elapsed(),
                Mode::Mysql => in_mysql += since.elapsed(),
            }
        }
        DegradeStats {
            mode: self.current.map(|(mode, _, _)| mode),
            epoch: self.current.map_or(0, |(_, epoch, _)| epoch),
            switches: self.switches,
            seconds_in_redis: in_redis.as_secs_f64(),
            seconds_in_mysql: in_mysql.as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{LockCounters, LockStats};

    const DEGRADED: DegradeStats = DegradeStats {
        mode: Some(Mode::Mysql),
        epoch: 3,
        switches: 2,
        seconds_in_redis: 1.5,
        seconds_in_mysql: 0.5,
    };

    #[test]
    fn healthz_shows_the_mode_beside_the_counters_and_the_load_test_reads_it_back() {
        let stats = LockStats::new(LockCounters::default(), Some(DEGRADED.own_stats()));
        let healthz = serde_json::to_value(&stats).unwrap();
        // scripts/demo-degrade.sh greps these two.
        assert_eq!(healthz["degrade"]["mode"], "mysql", "{healthz}");
        assert_eq!(healthz["degrade"]["epoch"], 3, "{healthz}");
        assert_eq!(healthz["attempts"], 0, "the counters sit beside it: {healthz}");
        let read_back: LockStats = serde_json::from_value(healthz).unwrap();
        assert_eq!(read_back.own_part::<DegradeStats>(STATS_KEY), Some(DEGRADED));
        assert_eq!(read_back, stats);
    }

    #[test]
    fn metrics_show_the_mode_in_use_and_the_switches() {
        let mut text = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &DEGRADED.metrics(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            "seckill_lock_mode{mode=\"mysql\"} 1",
            "seckill_lock_mode{mode=\"redis\"} 0",
            "seckill_lock_mode_switches_total 2",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
