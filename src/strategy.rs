//! Which strategy guards the stock: the closed list, and what each one promises.
//!
//! What a strategy is (its name, backend, tokens, critical path) is one
//! [`Description`] declared beside its lock; this list only points at it.
//!
//! Every strategy but one is a lock around the read-check-write (see [`crate::lock`]).
//! `atomic` is not a lock: it moves the whole check-and-decrement into one Redis
//! script (see [`crate::sale::stock`]), which is why it is the speed ceiling.

use crate::lock::{self, Backend, Description, Step};

/// Every strategy the service can run with; `--lock <strategy>` picks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// No lock: the read-check-write races and the sale oversells.
    None,
    /// An in-process mutex: correct inside one instance, oversells across two.
    Local,
    /// Redis `SET NX PX` with an owner token, owner-checked release and renewal.
    Redis,
    /// Redis, switching every instance to the MySQL version lock while Redis fails, and back.
    RedisDegrade,
    /// Redlock: `SET NX PX` on a majority of independent Redis masters, with validity.
    Redlock,
    /// etcd: keys under a kept-alive lease, granted in revision order.
    Etcd,
    /// ZooKeeper: ephemeral sequential nodes, each waiter watching its predecessor.
    Zookeeper,
    /// MySQL: a row per held lock, unique by name, with owner, hold count and expiry.
    Mysql,
    /// MySQL, optimistic: a compare-and-set on a version column, one row per lock name.
    MysqlVersion,
    /// No lock: one Lua script does the whole check-and-decrement inside Redis.
    Atomic,
}

/// `atomic` is no lock, so it has no file in [`crate::lock`]: its one script is in
/// [`crate::sale::stock`].
const ATOMIC: Description = Description {
    name: "atomic",
    backend: None,
    tokens: false,
    oversells: false,
    critical_path: None,
};

impl Strategy {
    /// What the strategy is, as its own file declares it.
    pub fn description(self) -> &'static Description {
        match self {
            Strategy::None => &lock::none::DESCRIPTION,
            Strategy::Local => &lock::local::DESCRIPTION,
            Strategy::Redis => &lock::redis::DESCRIPTION,
            Strategy::RedisDegrade => &lock::redis_degrade::DESCRIPTION,
            Strategy::Redlock => &lock::redlock::DESCRIPTION,
            Strategy::Etcd => &lock::etcd::DESCRIPTION,
            Strategy::Zookeeper => &lock::zookeeper::DESCRIPTION,
            Strategy::Mysql => &lock::mysql::DESCRIPTION,
            Strategy::MysqlVersion => &lock::mysql_version::DESCRIPTION,
            Strategy::Atomic => &ATOMIC,
        }
    }

    /// The name used on the command line, in responses and in reports.
    pub fn name(self) -> &'static str {
        self.description().name
    }

    /// Whether the buyers of an instance line up in process before this strategy's lock
    /// (`src/sale/mod.rs`, step 0). Not for the baselines, whose lesson is the race.
    /// `redis-degrade` takes one too: it judges an outage by time as well as by failures
    /// in a row, so one attempt at a time still notices a frozen Redis at its first
    /// timeout (`src/lock/redis_degrade/outage.rs`).
    pub fn takes_a_local_queue(self) -> bool {
        !self.expected_to_oversell()
    }

    /// Whether it is a lock around the read-check-write: every strategy but `atomic`.
    pub fn takes_a_lock(self) -> bool {
        self != Strategy::Atomic
    }

    /// Whether two instances running this strategy are expected to oversell.
    pub fn expected_to_oversell(self) -> bool {
        self.description().oversells
    }

    /// Whether its grants carry fencing tokens the stock can check.
    pub fn issues_fencing_tokens(self) -> bool {
        self.description().tokens
    }

    /// The round trips from one grant to the next, as the strategy's own file declares
    /// them (see [`crate::lock::critical_path`]). `None` for the baselines: `none` and
    /// `local` serialize nothing across instances, and `atomic` takes no lock.
    pub fn critical_path(self) -> Option<&'static [Step]> {
        self.description().critical_path
    }

    /// The server the strategy's lock lives on; `None` for the baselines.
    /// `redis-degrade` counts as its normal mode, the lock Redis.
    pub fn lock_backend(self) -> Option<Backend> {
        self.description().backend
    }

    /// Whether the sale is fenced under `fencing`: only with tokens, and only if asked.
    pub fn fencing(self, fencing: Fencing) -> FencingStatus {
        match (self, fencing) {
            (Strategy::Atomic, _) => FencingStatus::NotNeeded,
            (strategy, _) if !strategy.issues_fencing_tokens() => FencingStatus::NoTokens,
            (_, Fencing::On) => FencingStatus::On,
            (_, Fencing::Off) => FencingStatus::Off,
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `--fencing on|off`: whether the stock checks the lock's fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fencing {
    On,
    Off,
}

/// How a running strategy is fenced, as `/healthz` and the load test report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FencingStatus {
    /// Reads and writes of the stock check the grant's token.
    On,
    /// The strategy has tokens, but `--fencing off` asked not to check them (the lesson).
    Off,
    /// The strategy issues no tokens (`none`, `local`): the sale runs unfenced.
    NoTokens,
    /// `atomic` takes no lock, so there is nothing to fence.
    NotNeeded,
}

impl FencingStatus {
    /// As `/healthz` spells it.
    pub fn name(self) -> &'static str {
        match self {
            FencingStatus::On => "on",
            FencingStatus::Off => "off",
            FencingStatus::NoTokens => "no_tokens",
            FencingStatus::NotNeeded => "not_needed",
        }
    }

    pub fn is_on(self) -> bool {
        self == FencingStatus::On
    }
}

/// One strategy as `seckill strategies` lists it.
#[derive(Debug, serde::Serialize)]
pub struct Listed {
    pub name: &'static str,
    /// The server its lock lives on (`none` for the baselines and `atomic`).
    pub backend: &'static str,
    /// The flag that says where that server is (`null` where there is none).
    pub lock_flag: Option<&'static str>,
    /// Whether its grants carry fencing tokens the stock checks.
    pub tokens: bool,
    /// Whether two instances running it are expected to oversell (the baselines).
    pub oversells: bool,
}

/// Every strategy, in `--lock`'s order, as its own file describes it.
pub fn listed() -> Vec<Listed> {
    use clap::ValueEnum;
    Strategy::value_variants()
        .iter()
        .map(|strategy| {
            let description = strategy.description();
            Listed {
                name: description.name,
                backend: description.backend.map_or("none", Backend::name),
                lock_flag: description.backend.map(Backend::address_flag),
                tokens: description.tokens,
                oversells: description.oversells,
            }
        })
        .collect()
}

/// `seckill strategies`: a table for a reader, or JSON for a script.
pub fn render_listed(json: bool) -> String {
    let listed = listed();
    if json {
        return serde_json::to_string_pretty(&listed).expect("plain fields");
    }
    let mut text = format!(
        "{:<15} {:<16} {:<15} {}\n",
        "strategy", "backend", "fencing tokens", "two instances"
    );
    for each in &listed {
        let tokens = if each.tokens { "yes" } else { "no" };
        let verdict = if each.oversells {
            "oversell (a baseline)"
        } else {
            "hold"
        };
        text += &format!("{:<15} {:<18} {:<15} {verdict}\n", each.name, each.backend, tokens);
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn only_the_two_baselines_are_expected_to_oversell() {
        let oversell: Vec<Strategy> = Strategy::value_variants()
            .iter()
            .copied()
            .filter(|strategy| strategy.expected_to_oversell())
            .collect();
        assert_eq!(oversell, [Strategy::None, Strategy::Local]);
    }

    #[test]
    fn every_lock_but_the_baselines_takes_a_local_queue() {
        for strategy in Strategy::value_variants() {
            let expected = !matches!(strategy, Strategy::None | Strategy::Local);
            assert_eq!(strategy.takes_a_local_queue(), expected, "{strategy}");
        }
    }

    #[test]
    fn fencing_is_on_only_for_strategies_with_tokens_and_only_when_asked() {
        assert_eq!(Strategy::Redis.fencing(Fencing::On), FencingStatus::On);
        assert_eq!(Strategy::Redis.fencing(Fencing::Off), FencingStatus::Off);
        assert_eq!(
            Strategy::Redlock.fencing(Fencing::On),
            FencingStatus::NoTokens,
            "Redlock issues no tokens"
        );
        assert_eq!(Strategy::Local.fencing(Fencing::On), FencingStatus::NoTokens);
        assert_eq!(Strategy::Atomic.fencing(Fencing::On), FencingStatus::NotNeeded);
    }

    #[test]
    fn every_lock_declares_a_critical_path_and_no_baseline_does() {
        for strategy in Strategy::value_variants() {
            let baseline = matches!(strategy, Strategy::None | Strategy::Local | Strategy::Atomic);
            assert_eq!(strategy.critical_path().is_none(), baseline, "{strategy}");
        }
        let redis_trips: f64 = Strategy::Redis
            .critical_path()
            .unwrap()
            .iter()
            .map(|step| step.round_trips)
            .sum();
        assert_eq!(redis_trips, 2.0, "half a release, half a wake-up, one acquire");
    }

    #[test]
    fn every_lock_path_stays_on_its_lock_backend_or_the_stock_redis() {
        for strategy in Strategy::value_variants() {
            let (Some(path), Some(backend)) = (strategy.critical_path(), strategy.lock_backend()) else {
                assert!(
                    strategy.lock_backend().is_none() && strategy.critical_path().is_none(),
                    "{strategy}"
                );
                continue;
            };
            for step in path {
                // The stock Redis carries the release notices of the locks whose backend cannot.
                assert!(
                    step.backend == backend || step.backend == Backend::StockRedis,
                    "{strategy}: {}",
                    step.name
                );
            }
        }
    }

    #[test]
    fn every_name_is_the_flag_clap_parses() {
        for strategy in Strategy::value_variants() {
            assert_eq!(Strategy::from_str(strategy.name(), false).unwrap(), *strategy);
        }
    }
}
