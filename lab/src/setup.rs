//! What the teacher chose on the page: the strategy and its switches, and what the lab
//! must start for it.

use serde::{Deserialize, Serialize};

use crate::servers::on_path;

/// The strategies the lab can run, and the servers each needs. A strategy whose server
/// is not on this machine is greyed out on the page, with the line that installs it.
#[rustfmt::skip]
pub const STRATEGIES: &[Offer] = &[
    Offer { strategy: "redis", needs: Needs::LockRedis },
    Offer { strategy: "redlock", needs: Needs::RedlockMasters },
    Offer { strategy: "none", needs: Needs::StockOnly },
    Offer { strategy: "local", needs: Needs::StockOnly },
    Offer { strategy: "etcd", needs: Needs::Etcd },
    Offer { strategy: "zookeeper", needs: Needs::ZooKeeper },
    Offer { strategy: "mysql", needs: Needs::MariaDb },
    Offer { strategy: "mysql-version", needs: Needs::MariaDb },
    Offer { strategy: "redis-degrade", needs: Needs::LockRedisAndMariaDb },
];

/// How many Redlock masters the lab starts: a majority of five survives two lost.
pub const REDLOCK_MASTERS: usize = 5;

/// Where the launcher finds ZooKeeper (`scripts/lib/exec-server.sh`).
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// One strategy the page offers.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Offer {
    pub strategy: &'static str,
    pub needs: Needs,
}

/// The lock servers a strategy needs besides the stock's Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Needs {
    /// A lock in the instance itself, or none: the stock's Redis is all.
    StockOnly,
    /// A Redis of its own for the lock, so that a link to the lock can be cut apart from
    /// the link to the stock.
    LockRedis,
    /// The same Redis with a replica and a Sentinel, so that it can fail over (lesson 5).
    LockSentinel,
    /// Five independent Redis masters.
    RedlockMasters,
    Etcd,
    ZooKeeper,
    MariaDb,
    /// `redis-degrade`: a lock Redis, and MariaDB to fall back to.
    LockRedisAndMariaDb,
}

impl Needs {
    /// Whether the lock lives in MariaDB (or falls back to it): orders then go to that one.
    pub fn mariadb(self) -> bool {
        matches!(self, Needs::MariaDb | Needs::LockRedisAndMariaDb)
    }

    /// Whether the lock lives in one Redis the lab starts alone (not on a Sentinel, whose
    /// master moves; not Redlock's five, of which one clock cannot free a majority, the
    /// lab cutting all five links at once): the lab can then make its clock jump.
    pub fn lock_in_one_redis(self) -> bool {
        matches!(self, Needs::LockRedis | Needs::LockRedisAndMariaDb)
    }

    /// What this machine lacks to start these servers, with the line that installs it;
    /// `None` when all is there. No root is needed to run them, only to install them.
    pub fn missing(self) -> Option<String> {
        let install = |what: &str, package: &str| {
            Some(format!(
                "needs {what}: `sudo apt-get install {package}` (or `make services`, as root, installs every server)"
            ))
        };
        if !on_path("redis-server") {
            return install("redis-server on the PATH", "redis-server");
        }
        match self {
            Needs::Etcd if !on_path("etcd") => install("etcd on the PATH", "etcd-server"),
            Needs::ZooKeeper if !(std::path::Path::new(ZOOKEEPER_JAR).exists() && on_path("java")) => {
                install("ZooKeeper and java", "zookeeper")
            }
            Needs::MariaDb | Needs::LockRedisAndMariaDb => mariadb_missing(),
            _ => None,
        }
    }
}

/// What this machine lacks to start MariaDB (for a lock there, or for the orders), with
/// the line that installs it; `None` when it is there.
pub fn mariadb_missing() -> Option<String> {
    match on_path("mariadbd") && on_path("mysql_install_db") {
        true => None,
        false => Some(
            "needs mariadbd and mysql_install_db on the PATH (add /usr/sbin to it if they are there): \
             `sudo apt-get install mariadb-server` (or `make services`, as root, installs every server)"
                .to_owned(),
        ),
    }
}

/// A strategy as the page shows it: greyed out, with why, when `missing` says something.
#[derive(Debug, Serialize)]
pub struct Available {
    pub strategy: &'static str,
    pub missing: Option<String>,
}

/// Every strategy, and what this machine lacks for each.
pub fn available() -> Vec<Available> {
    STRATEGIES
        .iter()
        .map(|offer| Available {
            strategy: offer.strategy,
            missing: offer.needs.missing(),
        })
        .collect()
}

/// The strategy and its switches, as the page posts them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    pub strategy: String,
    /// `--fencing on|off`.
    pub fencing: bool,
    /// `--lock-ttl-ms`: how long a lease lasts without renewal.
    pub ttl_ms: u64,
    /// `--stock-segments`.
    pub segments: u32,
    /// `--group-commit` (with its local queue).
    pub group_commit: bool,
    /// `--one-per-buyer`.
    pub one_per_buyer: bool,
    /// `--sold-out-flag`: an instance that saw every segment empty answers "sold out"
    /// without the lock. The page does not offer it; `make torture` draws it.
    #[serde(default)]
    pub sold_out_flag: bool,
    /// `redis` only: the lock's Redis has a replica and a Sentinel, so it can fail over.
    #[serde(default)]
    pub lock_failover: bool,
    /// The stock's Redis has a replica and a Sentinel, so it can fail over (lesson 14).
    #[serde(default)]
    pub stock_failover: bool,
    /// The stock on a Redis Cluster of three masters (a replica each), which the instances
    /// reach directly (lesson 14).
    #[serde(default)]
    pub stock_cluster: bool,
    /// `--orders`: every unit sold becomes an order, through a Redis Stream into MariaDB
    /// (the lock's, when the lock lives there), and the crowd's checks count the orders.
    #[serde(default)]
    pub orders: bool,
    /// `--chaos-pause-before-write-ms`: every sale lingers this long between its read and
    /// its write, so that a pause of the holder lands in the middle of a sale (lesson 3).
    pub linger_ms: u64,
}

impl Default for Setup {
    /// Lesson 3's: a lease of 500 ms, every sale lingering 50 ms before its write.
    fn default() -> Self {
        Setup {
            strategy: "redis".to_owned(),
            fencing: true,
            ttl_ms: 500,
            segments: 1,
            group_commit: false,
            one_per_buyer: false,
            sold_out_flag: false,
            lock_failover: false,
            stock_failover: false,
            stock_cluster: false,
            orders: false,
            linger_ms: 50,
        }
    }
}

/// The longest a sale may linger before its write.
pub const LONGEST_LINGER_MS: u64 = 1_000;
/// The shortest lease etcd grants: 3/2 of its election timeout (1 s by default), rounded up
/// to whole seconds (etcd's lessor, `minLeaseTTL`). The lock asks for whole seconds too.
const ETCD_SHORTEST_LEASE_MS: u64 = 2_000;
/// ZooKeeper's tick in the servers the scripts start (scripts/lib/exec-server.sh writes
/// `tickTime=2000`).
const ZOOKEEPER_TICK_MS: u64 = 2_000;
/// The session timeouts ZooKeeper grants: 2 to 20 ticks.
const ZOOKEEPER_SESSIONS_MS: (u64, u64) = (2 * ZOOKEEPER_TICK_MS, 20 * ZOOKEEPER_TICK_MS);
/// How often etcd's lessor looks for expired leases to revoke.
const ETCD_REVOKE_LOOP_MS: u64 = 500;

impl Setup {
    /// How long a holder keeps the lock once its renewals stop: the lease its backend grants
    /// for `ttl_ms`, which etcd and ZooKeeper round and bound. A fault meant to outlast the
    /// lease (a pause of the holder, a cut from the lock) is drawn against this.
    pub fn granted_lease_ms(&self) -> u64 {
        match self.strategy.as_str() {
            "etcd" => (self.ttl_ms.div_ceil(1000) * 1000).max(ETCD_SHORTEST_LEASE_MS),
            "zookeeper" => self.ttl_ms.clamp(ZOOKEEPER_SESSIONS_MS.0, ZOOKEEPER_SESSIONS_MS.1),
            _ => self.ttl_ms,
        }
    }

    /// How long after its holder's last renewal the server may take to free the lock: the
    /// granted lease, and the server's own lag. ZooKeeper expires sessions in buckets of
    /// one tick (2 s here); etcd's lessor revokes expired leases in a loop that runs every
    /// 500 ms. A fault meant to let another instance in must outlast this, not the lease.
    pub fn freed_within_ms(&self) -> u64 {
        let lag = match self.strategy.as_str() {
            "zookeeper" => ZOOKEEPER_TICK_MS,
            "etcd" => ETCD_REVOKE_LOOP_MS,
            _ => 0,
        };
        self.granted_lease_ms() + lag
    }

    /// What this setup's strategy needs, or why the lab cannot run it (a sentence for the page).
    pub fn needs(&self) -> Result<Needs, String> {
        let offer = STRATEGIES
            .iter()
            .find(|offer| offer.strategy == self.strategy)
            .ok_or_else(|| {
                let known: Vec<&str> = STRATEGIES.iter().map(|offer| offer.strategy).collect();
                format!(
                    "no strategy `{}` in the lab; pick one of {}",
                    self.strategy,
                    known.join(", ")
                )
            })?;
        let needs = match (offer.needs, self.lock_failover) {
            (Needs::LockRedis, true) => Needs::LockSentinel,
            (needs, false) => needs,
            (_, true) => {
                return Err(format!(
                    "a lock Redis that fails over is for `redis` only, not `{}`: untick it",
                    self.strategy
                ))
            }
        };
        match needs.missing() {
            Some(missing) => Err(format!("`{}` {missing}", self.strategy)),
            None => Ok(needs),
        }
    }

    /// Refuses switches out of range, naming the fix.
    pub fn validate(&self) -> Result<Needs, String> {
        let needs = self.needs()?;
        if !(100..=60_000).contains(&self.ttl_ms) {
            return Err(format!("a lease (ttl) of {} ms: pick 100 to 60000", self.ttl_ms));
        }
        if !(1..=16).contains(&self.segments) {
            return Err(format!("{} stock segments: pick 1 to 16", self.segments));
        }
        if self.stock_cluster && self.stock_failover {
            return Err("the stock is on a cluster or on a Sentinel, not both: untick one".to_owned());
        }
        if self.stock_cluster && !on_path("redis-cli") {
            return Err(
                "the stock on a cluster needs redis-cli to form it: `sudo apt-get install redis-tools`".to_owned(),
            );
        }
        if let Some(missing) = mariadb_missing().filter(|_| self.orders) {
            return Err(format!("the orders {missing}"));
        }
        if self.linger_ms > LONGEST_LINGER_MS {
            return Err(format!(
                "a linger of {} ms before each write: pick 0 to {LONGEST_LINGER_MS}",
                self.linger_ms
            ));
        }
        Ok(needs)
    }

    /// The flags of `seckill serve` for this setup, but where it finds its servers.
    pub fn serve_flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = [
            "--lock",
            &self.strategy,
            "--fencing",
            if self.fencing { "on" } else { "off" },
            "--lock-ttl-ms",
            &self.ttl_ms.to_string(),
            "--stock-segments",
            &self.segments.to_string(),
            // A buyer waits for the lock as long as a paused holder may keep it.
            "--acquire-timeout-ms",
            "30000",
        ]
        .iter()
        .map(|flag| flag.to_string())
        .collect();
        // No linger is the service's default: the flag takes 1 ms and up.
        if self.linger_ms > 0 {
            flags.extend(["--chaos-pause-before-write-ms".to_owned(), self.linger_ms.to_string()]);
        }
        if self.group_commit {
            flags.extend(["--local-queue", "--group-commit"].map(String::from));
        }
        if self.one_per_buyer {
            flags.push("--one-per-buyer".to_owned());
        }
        if self.sold_out_flag {
            flags.push("--sold-out-flag".to_owned());
        }
        if self.orders {
            flags.push("--orders".to_owned());
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strategy_the_lab_cannot_start_says_why() {
        let failover = Setup {
            strategy: "redlock".to_owned(),
            lock_failover: true,
            ..Setup::default()
        };
        assert_eq!(
            failover.validate().unwrap_err(),
            "a lock Redis that fails over is for `redis` only, not `redlock`: untick it"
        );
        let unknown = Setup {
            strategy: "paxos".to_owned(),
            ..Setup::default()
        };
        assert!(unknown.validate().unwrap_err().contains("pick one of redis, redlock"));
    }

    #[test]
    fn the_stock_is_on_a_cluster_or_on_a_sentinel_not_both() {
        let both = Setup {
            stock_cluster: true,
            stock_failover: true,
            ..Setup::default()
        };
        assert_eq!(
            both.validate().unwrap_err(),
            "the stock is on a cluster or on a Sentinel, not both: untick one"
        );
    }

    #[test]
    fn switches_out_of_range_are_refused_with_the_range() {
        let short = Setup {
            ttl_ms: 5,
            ..Setup::default()
        };
        assert_eq!(
            short.validate().unwrap_err(),
            "a lease (ttl) of 5 ms: pick 100 to 60000"
        );
    }

    #[test]
    fn etcd_rounds_its_lease_up_to_whole_seconds_and_zookeeper_bounds_its_session() {
        let setup = |strategy: &str, ttl_ms| Setup {
            strategy: strategy.to_owned(),
            ttl_ms,
            ..Setup::default()
        };
        let lease = |strategy, ttl_ms| setup(strategy, ttl_ms).granted_lease_ms();
        let freed = |strategy, ttl_ms| setup(strategy, ttl_ms).freed_within_ms();
        assert_eq!(lease("redis", 700), 700);
        assert_eq!(lease("etcd", 700), 2_000);
        assert_eq!(lease("etcd", 2_100), 3_000);
        assert_eq!(lease("zookeeper", 1_500), 4_000);
        assert_eq!(lease("zookeeper", 6_000), 6_000);
        assert_eq!(
            freed("zookeeper", 1_500),
            6_000,
            "a session ends at a tick after its timeout"
        );
        assert_eq!(freed("etcd", 700), 2_500);
        assert_eq!(freed("mysql", 700), 700);
    }

    #[test]
    fn the_switches_become_the_flags_of_seckill_serve() {
        let setup = Setup {
            fencing: false,
            group_commit: true,
            one_per_buyer: true,
            ..Setup::default()
        };
        let flags = setup.serve_flags().join(" ");
        assert!(
            flags.starts_with("--lock redis --fencing off --lock-ttl-ms 500"),
            "{flags}"
        );
        assert!(
            flags.ends_with("--local-queue --group-commit --one-per-buyer"),
            "{flags}"
        );
    }
}
