//! The faults a click strikes, each with its parameter, each ended by the lab on its own
//! (a pause resumes, a cut link heals, a killed instance starts again) so that none
//! outlives its time, nor the lab.
//!
//! | fault | what the lab does | its lesson |
//! | --- | --- | --- |
//! | pause the holder | waits until an instance holds the lock, SIGSTOP, SIGCONT after `ms` | 3 |
//! | pause an instance | SIGSTOP now, SIGCONT after `ms` | 3 |
//! | kill an instance | SIGKILL, started again after `ms` | 2 |
//! | cut from the lock | its nemesis to the lock's servers partitions, heals after `ms` | 9 |
//! | cut from the stock | its nemesis to the stock's Redis partitions, heals after `ms` | 9 |
//! | delay the lock | its lock link delays each byte `delay_ms`, for `ms` | 9 |
//! | reset its lock connections | its nemesis to the lock's servers resets (RST) every connection, and refuses new ones for `ms` | 9 |
//! | reset its stock connections | the same on its link to the stock's Redis: a sale's write may be cut mid-request | 9 |
//! | jump the clock | its wall clock moves `seconds` (0 sets it right) | 4 |
//! | jump the lock's Redis clock | the wall clock of the lock's Redis (`redis`, `redis-degrade`) moves `seconds` (0 sets it right): Redis expires keys by it | 4 |
//! | fail over the stock's Redis | cuts its replication, lets the master sell alone for `ms`, kills it; the Sentinel promotes the replica; the old master comes back as a replica | 14 |
//! | fail over the lock's Redis | cuts its replication, pauses the next holder for `ms`, kills the master; the Sentinel promotes the replica; the old master comes back as a replica | 5 |
//! | restart MariaDB | SIGKILL to the setup's MariaDB (the lock's, or the orders'), started again after `ms` on its data | 7 |
//! | restock | during a steady load, the reset behind `POST /stock/reset`, on the stock's Redis: the sale ends, its records with it, and a new one begins while buyers keep coming | 2 |

use serde::{Deserialize, Serialize};

use crate::setup::{Needs, Setup};

/// One click: the fault, on whom, for how long.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Strike {
    PauseHolder {
        ms: u64,
    },
    Pause {
        instance: usize,
        ms: u64,
    },
    Kill {
        instance: usize,
        ms: u64,
    },
    CutFromLock {
        instance: usize,
        ms: u64,
    },
    CutFromStock {
        instance: usize,
        ms: u64,
    },
    DelayLock {
        instance: usize,
        delay_ms: u64,
        ms: u64,
    },
    ResetLock {
        instance: usize,
        ms: u64,
    },
    ResetStock {
        instance: usize,
        ms: u64,
    },
    JumpClock {
        instance: usize,
        seconds: i64,
    },
    JumpLockClock {
        seconds: i64,
    },
    FailOverLock {
        ms: u64,
    },
    FailOverStock {
        ms: u64,
    },
    #[serde(rename = "restart-mariadb")]
    RestartMariaDb {
        ms: u64,
    },
    Restock,
}

/// The longest a fault lasts: a class waits no longer, and a lease, a Sentinel or a
/// session runs out well within it.
pub const LONGEST_MS: u64 = 60_000;
/// The farthest a clock jumps, either way: a day.
pub const FARTHEST_S: i64 = 86_400;
/// How long "pause the holder" waits for an instance to hold the lock.
pub const HOLDER_WITHIN_MS: u64 = 30_000;

impl Strike {
    /// The instance it strikes, when it names one.
    pub fn instance(&self) -> Option<usize> {
        match *self {
            Strike::PauseHolder { .. }
            | Strike::JumpLockClock { .. }
            | Strike::FailOverLock { .. }
            | Strike::FailOverStock { .. }
            | Strike::RestartMariaDb { .. }
            | Strike::Restock => None,
            Strike::Pause { instance, .. }
            | Strike::Kill { instance, .. }
            | Strike::CutFromLock { instance, .. }
            | Strike::CutFromStock { instance, .. }
            | Strike::DelayLock { instance, .. }
            | Strike::ResetLock { instance, .. }
            | Strike::ResetStock { instance, .. }
            | Strike::JumpClock { instance, .. } => Some(instance),
        }
    }

    /// What the click asked, as the page says it back.
    pub fn describe(&self) -> String {
        let on = |instance: usize| ["A", "B"].get(instance).copied().unwrap_or("?");
        match *self {
            Strike::PauseHolder { ms } => format!("pause the holder for {ms} ms, once one holds the lock"),
            Strike::Pause { instance, ms } => format!("pause {} for {ms} ms", on(instance)),
            Strike::Kill { instance, ms } => format!("kill {}, start it again after {ms} ms", on(instance)),
            Strike::CutFromLock { instance, ms } => format!("cut {} from the lock for {ms} ms", on(instance)),
            Strike::CutFromStock { instance, ms } => format!("cut {} from the stock for {ms} ms", on(instance)),
            Strike::DelayLock { instance, delay_ms, ms } => {
                format!("delay {}'s lock link by {delay_ms} ms for {ms} ms", on(instance))
            }
            Strike::ResetLock { instance, ms } => {
                format!(
                    "reset {}'s lock connections, refusing new ones for {ms} ms",
                    on(instance)
                )
            }
            Strike::ResetStock { instance, ms } => {
                format!(
                    "reset {}'s stock connections, refusing new ones for {ms} ms",
                    on(instance)
                )
            }
            Strike::JumpClock { instance, seconds } => format!("jump {}'s clock {seconds:+} s", on(instance)),
            Strike::JumpLockClock { seconds } => format!("jump the lock's Redis clock {seconds:+} s"),
            Strike::FailOverLock { ms } => {
                format!("fail over the lock's Redis, its next holder paused for {ms} ms")
            }
            Strike::FailOverStock { ms } => {
                format!("fail over the stock's Redis, after its master sold alone for {ms} ms")
            }
            Strike::RestartMariaDb { ms } => format!("kill MariaDB, start it again after {ms} ms"),
            Strike::Restock => "restock: a new sale, while the buyers keep coming".to_owned(),
        }
    }

    /// How long it lasts, for the faults that last (all but a clock jump and a restock),
    /// to read or to change.
    pub fn lasting_ms_mut(&mut self) -> Option<&mut u64> {
        match self {
            Strike::JumpClock { .. } | Strike::JumpLockClock { .. } | Strike::Restock => None,
            Strike::PauseHolder { ms }
            | Strike::FailOverLock { ms }
            | Strike::FailOverStock { ms }
            | Strike::RestartMariaDb { ms }
            | Strike::Pause { ms, .. }
            | Strike::Kill { ms, .. }
            | Strike::CutFromLock { ms, .. }
            | Strike::CutFromStock { ms, .. }
            | Strike::DelayLock { ms, .. }
            | Strike::ResetLock { ms, .. }
            | Strike::ResetStock { ms, .. } => Some(ms),
        }
    }

    /// Refuses a parameter out of range, naming the range.
    pub fn validate(&self, instances: usize) -> Result<(), String> {
        if let Some(instance) = self.instance() {
            if instance >= instances {
                return Err(format!("no instance {instance}: the lab runs {instances} (0 and 1)"));
            }
        }
        if let Strike::JumpClock { seconds, .. } | Strike::JumpLockClock { seconds } = *self {
            return match seconds.abs() <= FARTHEST_S {
                true => Ok(()),
                false => Err(format!("a jump of {seconds} s: pick -{FARTHEST_S} to {FARTHEST_S}")),
            };
        }
        let Some(lasting) = self.clone().lasting_ms_mut().copied() else {
            return Ok(()); // a restock: nothing to bound
        };
        if !(1..=LONGEST_MS).contains(&lasting) {
            return Err(format!("a fault of {lasting} ms: pick 1 to {LONGEST_MS}"));
        }
        if let Strike::DelayLock { delay_ms, .. } = *self {
            if !(1..=LONGEST_MS).contains(&delay_ms) {
                return Err(format!("a delay of {delay_ms} ms: pick 1 to {LONGEST_MS}"));
            }
        }
        Ok(())
    }
}

/// Why `strike` cannot strike the setup `setup` (whose servers are `needs`), if it cannot:
/// a sentence for the page. `clock_jumps` says whether an instance's clock can jump.
pub fn refusal(setup: &Setup, needs: Needs, strike: &Strike, clock_jumps: impl Fn(usize) -> bool) -> Option<String> {
    let (lock_fails_over, stock_fails_over) = (needs == Needs::LockSentinel, setup.stock_failover);
    let bypassed = "the instances ask the Sentinel for the master, then reach it directly: the lab cannot \
                    cut that link";
    match (strike, needs) {
        (
            Strike::PauseHolder { .. }
            | Strike::CutFromLock { .. }
            | Strike::DelayLock { .. }
            | Strike::ResetLock { .. },
            Needs::StockOnly,
        ) => Some(format!(
            "`{}` keeps no lock on a server: there is no holder to find nor link to cut; pause an instance instead",
            setup.strategy
        )),
        (Strike::JumpLockClock { .. }, _) if !needs.lock_in_one_redis() => Some(format!(
            "`{}` keeps its lock in no one Redis the lab starts alone (Redlock's is in five, of which \
             one clock frees no majority): choose `redis` (without the lock's failover) or `redis-degrade`",
            setup.strategy
        )),
        (Strike::FailOverLock { .. }, _) if !lock_fails_over => Some(
            "a failover needs the lock's Redis with a replica and a Sentinel: choose `redis`, tick \
             \"the lock's Redis can fail over\" and start again"
                .to_owned(),
        ),
        (Strike::FailOverStock { .. }, _) if !stock_fails_over => Some(
            "a failover needs the stock's Redis with a replica and a Sentinel: tick \
             \"the stock's Redis can fail over\" and start again"
                .to_owned(),
        ),
        (Strike::CutFromLock { .. } | Strike::DelayLock { .. } | Strike::ResetLock { .. }, _) if lock_fails_over => {
            Some(format!(
                "{bypassed}; cut it from the stock, or start without the lock's failover"
            ))
        }
        (Strike::CutFromStock { .. } | Strike::ResetStock { .. }, _) if stock_fails_over => Some(format!(
            "{bypassed}; cut it from the lock, or start without the stock's failover"
        )),
        (Strike::CutFromStock { .. } | Strike::ResetStock { .. }, _) if setup.stock_cluster => Some(
            "a cluster sends its clients from node to node, which they reach directly: the lab cannot cut \
             that link; cut it from the lock, or start with the stock on one Redis"
                .to_owned(),
        ),
        (Strike::RestartMariaDb { .. }, _) if !needs.mariadb() && !setup.orders => Some(format!(
            "`{}` keeps nothing in MariaDB: choose `mysql`, `mysql-version` or `redis-degrade`, or keep orders",
            setup.strategy
        )),
        (Strike::JumpClock { instance, .. }, _) if !clock_jumps(*instance) => Some(format!(
            "a clock jump needs libfaketime ({}): `sudo apt-get install faketime`, then start again",
            testkit::wall_clock::LIBFAKETIME
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_click_is_read_from_the_json_the_page_posts() {
        let strike: Strike = serde_json::from_str(r#"{"kind":"pause-holder","ms":1500}"#).unwrap();
        assert_eq!(strike, Strike::PauseHolder { ms: 1500 });
        let strike: Strike =
            serde_json::from_str(r#"{"kind":"delay-lock","instance":1,"delay_ms":800,"ms":5000}"#).unwrap();
        assert_eq!(strike.instance(), Some(1));
        assert!(serde_json::from_str::<Strike>(r#"{"kind":"pause","instance":0,"ms":1,"pid":1}"#).is_err());
        assert_eq!(strike.describe(), "delay B's lock link by 800 ms for 5000 ms");
    }

    #[test]
    fn a_mariadb_restart_is_refused_where_the_setup_keeps_nothing_in_mariadb() {
        let restart: Strike = serde_json::from_str(r#"{"kind":"restart-mariadb","ms":1500}"#).unwrap();
        let redis = Setup::default();
        let refused = refusal(&redis, Needs::LockRedis, &restart, |_| true).unwrap();
        assert!(refused.contains("keeps nothing in MariaDB"), "{refused}");
        let with_orders = Setup {
            orders: true,
            ..Setup::default()
        };
        assert_eq!(refusal(&with_orders, Needs::LockRedis, &restart, |_| true), None);
        assert_eq!(refusal(&redis, Needs::MariaDb, &restart, |_| true), None);
    }

    #[test]
    fn a_stock_on_a_cluster_cannot_be_cut_from_its_instances() {
        let on_a_cluster = Setup {
            stock_cluster: true,
            ..Setup::default()
        };
        let cut = Strike::CutFromStock { instance: 0, ms: 500 };
        let refused = refusal(&on_a_cluster, Needs::LockRedis, &cut, |_| true).unwrap();
        assert!(refused.contains("node to node"), "{refused}");
        assert_eq!(refusal(&Setup::default(), Needs::LockRedis, &cut, |_| true), None);
    }

    #[test]
    fn a_reset_is_refused_on_a_link_the_lab_does_not_carry() {
        let reset_stock: Strike = serde_json::from_str(r#"{"kind":"reset-stock","instance":0,"ms":300}"#).unwrap();
        let reset_lock: Strike = serde_json::from_str(r#"{"kind":"reset-lock","instance":1,"ms":300}"#).unwrap();
        assert_eq!(
            reset_lock.describe(),
            "reset B's lock connections, refusing new ones for 300 ms"
        );
        let on_a_cluster = Setup {
            stock_cluster: true,
            ..Setup::default()
        };
        let refused = refusal(&on_a_cluster, Needs::LockRedis, &reset_stock, |_| true).unwrap();
        assert!(refused.contains("node to node"), "{refused}");
        let atomic = Setup {
            strategy: "atomic".to_owned(),
            ..Setup::default()
        };
        let refused = refusal(&atomic, Needs::StockOnly, &reset_lock, |_| true).unwrap();
        assert!(refused.contains("keeps no lock on a server"), "{refused}");
        assert_eq!(
            refusal(&Setup::default(), Needs::LockRedis, &reset_stock, |_| true),
            None
        );
        assert_eq!(
            refusal(&Setup::default(), Needs::LockRedis, &reset_lock, |_| true),
            None
        );
    }

    #[test]
    fn the_lock_redis_clock_jumps_only_where_the_lock_is_in_one_redis_the_lab_started() {
        let jump: Strike = serde_json::from_str(r#"{"kind":"jump-lock-clock","seconds":-90}"#).unwrap();
        assert_eq!(jump.describe(), "jump the lock's Redis clock -90 s");
        let setup = |strategy: &str| Setup {
            strategy: strategy.to_owned(),
            ..Setup::default()
        };
        for (strategy, needs) in [
            ("redis", Needs::LockRedis),
            ("redis-degrade", Needs::LockRedisAndMariaDb),
        ] {
            assert_eq!(refusal(&setup(strategy), needs, &jump, |_| true), None, "{strategy}");
        }
        for (strategy, needs) in [
            ("redis", Needs::LockSentinel),
            ("redlock", Needs::RedlockMasters),
            ("etcd", Needs::Etcd),
            ("atomic", Needs::StockOnly),
        ] {
            let refused = refusal(&setup(strategy), needs, &jump, |_| true).unwrap();
            assert!(
                refused.contains("keeps its lock in no one Redis the lab starts alone"),
                "{refused}"
            );
        }
        assert!(Strike::JumpLockClock { seconds: 100_000 }.validate(2).is_err());
    }

    #[test]
    fn a_fault_out_of_range_is_refused_with_the_range() {
        assert_eq!(
            Strike::Pause { instance: 2, ms: 10 }.validate(2).unwrap_err(),
            "no instance 2: the lab runs 2 (0 and 1)"
        );
        assert_eq!(
            Strike::CutFromLock { instance: 0, ms: 0 }.validate(2).unwrap_err(),
            "a fault of 0 ms: pick 1 to 60000"
        );
        assert!(Strike::JumpClock {
            instance: 0,
            seconds: -3600
        }
        .validate(2)
        .is_ok());
        assert!(Strike::JumpClock {
            instance: 0,
            seconds: 100_000
        }
        .validate(2)
        .is_err());
    }
}
