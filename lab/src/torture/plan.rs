//! A round drawn from its seed: a setup (the strategy and its switches) and a schedule of
//! faults, each at its time after the crowd is sent. The same seed on the same commit
//! draws the same round, so a failing round replays from its seed alone.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use seckill::strategy::{Fencing, FencingStatus, Strategy};
use serde::{Deserialize, Serialize};

use crate::crowd::Size;
use crate::faults::{refusal, Strike};
use crate::setup::Setup;

/// The latest a fault is struck after the first sale: a crowd of 500 sells its 300 units
/// through a lock within a few seconds here, and a fault later than that meets no sale.
pub const LATEST_STRIKE_MS: u64 = 4_000;
/// The least a fault meant to outlast the lease outlasts it by: another instance must be
/// granted and read within the rest.
const PAST_THE_LEASE_MS: u64 = 500;
/// The most faults in one round.
pub const MOST_FAULTS: usize = 3;
/// The longest a steady load sells: room for three faults that each outlast a lease (0.5
/// to 1.5 s asked; etcd grants 2 s at least), and still a round of seconds.
pub const STEADY_LONGEST_MS: u64 = 10_000;

/// One fault of a round, and when it strikes.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Timed {
    /// After the crowd is sent.
    pub at_ms: u64,
    pub strike: Strike,
}

/// One round: what runs, what buys, and what strikes it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Round {
    pub seed: u64,
    pub setup: Setup,
    /// The lessons' crowd when drawn; a shrunk round may send fewer.
    #[serde(default)]
    pub crowd: Size,
    /// A steady load instead of the crowd, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<Steady>,
    pub schedule: Vec<Timed>,
}

/// A steady load: `rate` buyers a second for `ms`, from a stock it never sells out (the
/// lab's keep selling). Where the crowd's sale is over in a few seconds, a steady load
/// still sells when a fault that outlasts a lease ends, and across several faults.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Steady {
    pub rate: u32,
    pub ms: u64,
}

/// What a run draws its rounds from.
#[derive(Clone, Debug)]
pub struct Choices {
    /// Names the lab offers.
    pub strategies: Vec<String>,
    /// Fencing as drawn (`None`), or always on or always off: `Some(false)` draws only
    /// the known-unsafe setups of the fenced strategies.
    pub fencing: Option<bool>,
    /// Whether this machine can keep orders (MariaDB). The draw takes the same numbers
    /// either way, so a seed draws the same round elsewhere, orders aside.
    pub orders: bool,
}

/// What a round's configuration must come to, known before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expected {
    /// Fenced (or atomic): any verdict but held is a hole to mend.
    MustHold,
    /// No tokens to fence with (Redlock): a pause may sell twice.
    MayFail,
    /// A hole we know: no lock, a lock inside one instance, fencing off, or a stock whose
    /// asynchronous replica is promoted. The checks must find it: a generator that finds
    /// nothing where a hole is known is broken. A round a stock failover struck is known
    /// unsafe as a whole: a hole another of its faults opened hides behind it.
    KnownUnsafe,
}

impl Expected {
    pub fn name(self) -> &'static str {
        match self {
            Expected::MustHold => "must hold",
            Expected::MayFail => "may fail",
            Expected::KnownUnsafe => "known unsafe",
        }
    }
}

/// The seed of round `index` of a run seeded `seed`: each round replays alone.
pub fn round_seed(seed: u64, index: u64) -> u64 {
    // splitmix64's step: neighbouring indexes give unrelated seeds.
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Round {
    /// The round `seed` draws from `choices`.
    pub fn drawn(seed: u64, choices: &Choices) -> Result<Round, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let strategy = choices
            .strategies
            .choose(&mut rng)
            .ok_or("no strategy to draw from")?
            .clone();
        let mut setup = draw_setup(&mut rng, strategy, choices.orders);
        setup.fencing = choices.fencing.unwrap_or(setup.fencing);
        let needs = setup.needs()?;
        // A round in four sells steadily: the faults strike over its first two thirds.
        let steady = rng.random_bool(0.25).then(|| Steady {
            rate: rng.random_range(50..=200),
            ms: rng.random_range(4_000..=STEADY_LONGEST_MS),
        });
        let striking_ms = steady.map_or_else(|| selling_ms(&setup), |steady| steady.ms * 2 / 3);
        let faults = rng.random_range(1..=MOST_FAULTS);
        let mut schedule = Vec::new();
        // A drawn fault the setup cannot take is drawn again, a few times at most. Whether
        // this machine can jump a clock is left to the lab when it strikes: the draw must not
        // depend on the machine, or a seed would replay as another round elsewhere.
        for _ in 0..faults * 8 {
            if schedule.len() == faults {
                break;
            }
            let strike = draw_strike(&mut rng, &setup);
            if refusal(&setup, needs, &strike, |_| true).is_none() {
                let at_ms = rng.random_range(0..=striking_ms);
                schedule.push(Timed { at_ms, strike });
            }
        }
        // Half the steady loads are restocked once, on top of their faults: a new sale
        // begins while buyers keep coming. Drawn after the faults, so that the rest of a
        // seed's round is what it was before restocks were drawn.
        if steady.is_some() && rng.random_bool(0.5) {
            let at_ms = rng.random_range(0..=striking_ms);
            schedule.push(Timed {
                at_ms,
                strike: Strike::Restock,
            });
        }
        schedule.sort_by_key(|timed| timed.at_ms);
        Ok(Round {
            seed,
            setup,
            crowd: Size::LESSONS,
            steady,
            schedule,
        })
    }

    /// What this round must come to (see [`Expected`]).
    pub fn expected(&self) -> Expected {
        let Some(strategy) = strategy_of(&self.setup.strategy) else {
            return Expected::MayFail;
        };
        let fencing = if self.setup.fencing { Fencing::On } else { Fencing::Off };
        let stock_promoted = self
            .schedule
            .iter()
            .any(|timed| matches!(timed.strike, Strike::FailOverStock { .. }));
        match strategy.fencing(fencing) {
            _ if strategy.expected_to_oversell() || stock_promoted => Expected::KnownUnsafe,
            FencingStatus::Off => Expected::KnownUnsafe,
            FencingStatus::NoTokens => Expected::MayFail,
            FencingStatus::On | FencingStatus::NotNeeded => Expected::MustHold,
        }
    }

    /// The round as one line: its seed, its setup's switches and its faults.
    pub fn describe(&self) -> String {
        let setup = &self.setup;
        let mut switches = vec![format!("fencing {}", if setup.fencing { "on" } else { "off" })];
        switches.push(format!("ttl {} ms", setup.ttl_ms));
        if setup.segments > 1 {
            switches.push(format!("{} segments", setup.segments));
        }
        for (on, name) in [
            (setup.group_commit, "group commit"),
            (setup.one_per_buyer, "one per buyer"),
            (setup.sold_out_flag, "sold-out flag"),
            (setup.lock_failover, "lock on Sentinel"),
            (setup.stock_failover, "stock on Sentinel"),
            (setup.stock_cluster, "stock on a cluster"),
            (setup.orders, "orders"),
        ] {
            if on {
                switches.push(name.to_owned());
            }
        }
        if setup.linger_ms > 0 {
            switches.push(format!("linger {} ms", setup.linger_ms));
        }
        let faults: Vec<String> = self
            .schedule
            .iter()
            .map(|timed| format!("at {} ms: {}", timed.at_ms, timed.strike.describe()))
            .collect();
        match self.steady {
            Some(Steady { rate, ms }) => switches.push(format!("a steady {rate} buyers a second for {ms} ms")),
            None if self.crowd != Size::LESSONS => {
                switches.push(format!("{} buyers at {} units", self.crowd.buyers, self.crowd.units))
            }
            None => {}
        }
        format!(
            "seed {:#018x}: {} ({}); {}",
            self.seed,
            setup.strategy,
            switches.join(", "),
            if faults.is_empty() {
                "no fault".to_owned()
            } else {
                faults.join("; ")
            }
        )
    }
}

/// About how long the crowd sells after its first sale, for the faults to strike within
/// it: the baselines sell every unit at once (a few hundred milliseconds here); a lock
/// sells one unit of a segment at a time, each taking its linger and a few milliseconds;
/// with group commit one grant sells to up to 64 buyers, so a segment takes a few grants.
fn selling_ms(setup: &Setup) -> u64 {
    if is_a_baseline(setup) {
        return 300;
    }
    let per_segment = Size::LESSONS.units as u64 / u64::from(setup.segments.max(1));
    if setup.group_commit {
        let grants = per_segment.div_ceil(u64::from(seckill::config::DEFAULT_GROUP_MAX));
        return (grants * (setup.linger_ms + 20)).clamp(100, LATEST_STRIKE_MS);
    }
    (per_segment * (setup.linger_ms + 5)).clamp(500, LATEST_STRIKE_MS)
}

/// Whether the setup runs a baseline (`none`, `local`): no lock between the instances, so
/// any crowd oversells it, fault or none.
pub fn is_a_baseline(setup: &Setup) -> bool {
    strategy_of(&setup.strategy).is_none_or(Strategy::expected_to_oversell)
}

/// The strategy named `name`, as `--lock` reads it.
fn strategy_of(name: &str) -> Option<Strategy> {
    <Strategy as clap::ValueEnum>::from_str(name, true).ok()
}

fn draw_setup(rng: &mut StdRng, strategy: String, orders: bool) -> Setup {
    // Half of redis's rounds, so that its failover is drawn in a run of an hour.
    let lock_failover = strategy == "redis" && rng.random_bool(0.5);
    // Group commit gathers the buyers of a local queue, which the baselines have not; and
    // the sold-out flag trusts an empty segment to stay empty, which no baseline keeps.
    let locks = strategy_of(&strategy).is_some_and(Strategy::takes_a_local_queue);
    // From 500 ms: Redlock refuses a lease under ten times its 50 ms node timeout.
    let ttl_ms = rng.random_range(500..=1500);
    let group_commit = rng.random_bool(0.25) && locks;
    // Where the stock is kept: one Redis mostly; on a Sentinel (which may fail over) or on a
    // cluster of three masters a round in five, and a round in seven.
    let (stock_failover, stock_cluster) = match rng.random_range(0..35) {
        0..7 => (true, false),
        7..12 => (false, true),
        _ => (false, false),
    };
    Setup {
        fencing: rng.random_bool(0.75),
        ttl_ms,
        segments: *[1, 1, 2, 4].choose(rng).unwrap_or(&1),
        group_commit,
        one_per_buyer: rng.random_bool(0.25),
        sold_out_flag: rng.random_bool(0.25) && locks,
        lock_failover,
        stock_failover,
        linger_ms: draw_linger(rng, ttl_ms, group_commit),
        orders: rng.random_bool(0.25) && orders,
        stock_cluster,
        strategy,
    }
}

/// How long each sale lingers between its lease check and its write: mostly as short as a
/// sale is. With group commit, half the time 60 to 100% of the lease asked (up to 1 s),
/// which is the lease itself for Redis, MySQL and Redlock (etcd and ZooKeeper grant more):
/// a critical section that long is where a holder cut from its lock, or slowed, writes
/// after its lease ran out. (Not without group commit: 300 sales of a second each would
/// outlast every buyer's wait.)
fn draw_linger(rng: &mut StdRng, ttl_ms: u64, group_commit: bool) -> u64 {
    if group_commit && rng.random_bool(0.5) {
        return (ttl_ms * rng.random_range(60..=100) / 100).min(crate::setup::LONGEST_LINGER_MS);
    }
    *[0, 20, 50, 100].choose(rng).unwrap_or(&0)
}

/// Any fault the lab can strike, on either instance, with its parameters drawn. How long
/// a fault lasts is drawn against the lease the backend grants (see
/// [`Setup::granted_lease_ms`]): half the time within it, which a lock rides out; half the
/// time past it, the length that opens a hole where fencing is off.
fn draw_strike(rng: &mut StdRng, setup: &Setup) -> Strike {
    let lease_ms = setup.granted_lease_ms();
    let instance = rng.random_range(0..2);
    let ms = draw_length(rng, lease_ms, setup.freed_within_ms());
    let seconds = rng.random_range(1..=120) * if rng.random_bool(0.5) { 1 } else { -1 };
    match rng.random_range(0..13) {
        0 => Strike::PauseHolder { ms },
        1 => Strike::Pause { instance, ms },
        2 => Strike::Kill { instance, ms },
        3 => Strike::CutFromLock { instance, ms },
        4 => Strike::CutFromStock { instance, ms },
        5 => Strike::DelayLock {
            instance,
            delay_ms: rng.random_range(50..=lease_ms.max(50)),
            ms,
        },
        6 => Strike::JumpClock { instance, seconds },
        7 => Strike::FailOverLock { ms },
        8 => Strike::FailOverStock { ms },
        9 => Strike::ResetLock { instance, ms },
        10 => Strike::ResetStock { instance, ms },
        11 => Strike::JumpLockClock { seconds },
        _ => Strike::RestartMariaDb { ms },
    }
}

/// How long a fault lasts: within the lease (from 200 ms), or past the moment the server
/// frees it (`freed_ms`) by the time another instance takes to be granted and to read, and
/// more: from 500 ms (a lock on MySQL polls its row with a backoff) to a whole lease again.
fn draw_length(rng: &mut StdRng, lease_ms: u64, freed_ms: u64) -> u64 {
    let ms = match rng.random_bool(0.5) {
        true => rng.random_range(200..=lease_ms.max(200)),
        false => freed_ms + rng.random_range(PAST_THE_LEASE_MS..=lease_ms.max(PAST_THE_LEASE_MS)),
    };
    ms.min(crate::faults::LONGEST_MS)
}

/// The kind of a fault, as the tables count them.
pub fn kind_of(strike: &Strike) -> &'static str {
    match strike {
        Strike::PauseHolder { .. } => "pause the holder",
        Strike::Pause { .. } => "pause an instance",
        Strike::Kill { .. } => "kill an instance",
        Strike::CutFromLock { .. } => "cut from the lock",
        Strike::CutFromStock { .. } => "cut from the stock",
        Strike::DelayLock { .. } => "delay the lock",
        Strike::ResetLock { .. } => "reset the lock's connections",
        Strike::ResetStock { .. } => "reset the stock's connections",
        Strike::JumpClock { .. } => "jump a clock",
        Strike::JumpLockClock { .. } => "jump the lock's Redis clock",
        Strike::FailOverLock { .. } => "fail over the lock's Redis",
        Strike::FailOverStock { .. } => "fail over the stock's Redis",
        Strike::RestartMariaDb { .. } => "restart MariaDB",
        Strike::Restock => "restock the sale",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Choices {
        Choices {
            strategies: crate::setup::STRATEGIES
                .iter()
                .map(|offer| offer.strategy.to_owned())
                .collect(),
            fencing: None,
            orders: true,
        }
    }

    #[test]
    fn a_seed_draws_the_same_round_every_time_and_another_seed_another() {
        let first = Round::drawn(7, &all()).unwrap();
        assert_eq!(first, Round::drawn(7, &all()).unwrap());
        let others: Vec<Round> = (8..40).map(|seed| Round::drawn(seed, &all()).unwrap()).collect();
        assert!(others.iter().any(|other| other.setup != first.setup));
    }

    #[test]
    fn a_round_holds_only_faults_its_setup_can_take_in_time_order() {
        for seed in 0..300 {
            let round = Round::drawn(round_seed(1, seed), &all()).unwrap();
            let needs = round.setup.needs().unwrap();
            let faults = round.schedule.iter().filter(|timed| timed.strike != Strike::Restock);
            assert!(faults.count() <= MOST_FAULTS);
            for timed in &round.schedule {
                assert_eq!(
                    refusal(&round.setup, needs, &timed.strike, |_| true),
                    None,
                    "{}",
                    round.describe()
                );
                match round.steady {
                    Some(steady) => assert!(timed.at_ms <= steady.ms * 2 / 3),
                    None => assert!(timed.at_ms <= selling_ms(&round.setup) && timed.at_ms <= LATEST_STRIKE_MS),
                }
            }
            assert!(round.schedule.windows(2).all(|pair| pair[0].at_ms <= pair[1].at_ms));
        }
    }

    #[test]
    fn a_round_in_four_sells_steadily_for_seconds_at_a_rate_the_lab_takes() {
        let steady: Vec<Steady> = (0..400)
            .filter_map(|seed| Round::drawn(round_seed(2, seed), &all()).unwrap().steady)
            .collect();
        assert!((70..=130).contains(&steady.len()), "{} of 400", steady.len());
        for Steady { rate, ms } in steady {
            assert!((50..=200).contains(&rate) && (4_000..=STEADY_LONGEST_MS).contains(&ms));
        }
    }

    #[test]
    fn half_the_steady_loads_are_restocked_once_and_no_crowd_is() {
        let rounds: Vec<Round> = (0..400)
            .map(|seed| Round::drawn(round_seed(4, seed), &all()).unwrap())
            .collect();
        let restocks = |round: &Round| {
            round
                .schedule
                .iter()
                .filter(|timed| timed.strike == Strike::Restock)
                .count()
        };
        let (steady, crowds): (Vec<&Round>, Vec<&Round>) = rounds.iter().partition(|round| round.steady.is_some());
        assert!(crowds.iter().all(|round| restocks(round) == 0));
        assert!(steady.iter().all(|round| restocks(round) <= 1));
        let restocked = steady.iter().filter(|round| restocks(round) == 1).count();
        assert!(
            (steady.len() * 3 / 10..=steady.len() * 7 / 10).contains(&restocked),
            "{restocked} of {}",
            steady.len()
        );
    }

    #[test]
    fn both_kinds_of_connection_reset_are_drawn() {
        let strikes: Vec<Strike> = (0..400)
            .flat_map(|seed| Round::drawn(round_seed(3, seed), &all()).unwrap().schedule)
            .map(|timed| timed.strike)
            .collect();
        assert!(strikes.iter().any(|strike| matches!(strike, Strike::ResetLock { .. })));
        assert!(strikes.iter().any(|strike| matches!(strike, Strike::ResetStock { .. })));
    }

    #[test]
    fn the_baselines_and_fencing_off_are_known_unsafe_and_fenced_locks_must_hold() {
        let round = |strategy: &str, fencing: bool| Round {
            seed: 0,
            setup: Setup {
                strategy: strategy.to_owned(),
                fencing,
                ..Setup::default()
            },
            crowd: Size::LESSONS,
            steady: None,
            schedule: Vec::new(),
        };
        assert_eq!(round("none", true).expected(), Expected::KnownUnsafe);
        assert_eq!(round("local", true).expected(), Expected::KnownUnsafe);
        assert_eq!(round("redis", false).expected(), Expected::KnownUnsafe);
        assert_eq!(round("redlock", true).expected(), Expected::MayFail);
        assert_eq!(round("etcd", true).expected(), Expected::MustHold);
        let mut promoted = round("etcd", true);
        promoted.schedule.push(Timed {
            at_ms: 0,
            strike: Strike::FailOverStock { ms: 500 },
        });
        assert_eq!(promoted.expected(), Expected::KnownUnsafe);
    }

    #[test]
    fn fencing_asked_off_is_off_in_every_round_and_the_rest_is_drawn_as_before() {
        let off = Choices {
            fencing: Some(false),
            ..all()
        };
        for seed in 0..50 {
            let (drawn, forced) = (Round::drawn(seed, &all()).unwrap(), Round::drawn(seed, &off).unwrap());
            assert!(!forced.setup.fencing);
            assert_eq!(
                (&forced.setup.strategy, &forced.schedule),
                (&drawn.setup.strategy, &drawn.schedule)
            );
        }
    }

    #[test]
    fn the_baselines_are_never_drawn_with_group_commit_nor_the_sold_out_flag_which_they_refuse() {
        let baselines = Choices {
            strategies: vec!["none".to_owned(), "local".to_owned()],
            ..all()
        };
        let drawn = |seed, choices: &Choices| Round::drawn(seed, choices).unwrap().setup;
        assert!((0..200).all(|seed| !drawn(seed, &baselines).group_commit && !drawn(seed, &baselines).sold_out_flag));
        assert!((0..200).any(|seed| drawn(seed, &all()).group_commit));
        assert!((0..200).any(|seed| drawn(seed, &all()).sold_out_flag));
    }

    #[test]
    fn the_faults_of_a_baseline_strike_within_its_short_sale_and_a_locks_within_its_long_one() {
        let with = |strategy: &str, segments: u32, linger_ms: u64| Setup {
            strategy: strategy.to_owned(),
            segments,
            linger_ms,
            ..Setup::default()
        };
        assert_eq!(selling_ms(&with("none", 1, 50)), 300);
        assert_eq!(selling_ms(&with("redis", 1, 0)), 1500);
        assert_eq!(selling_ms(&with("redis", 1, 100)), LATEST_STRIKE_MS);
        assert_eq!(selling_ms(&with("etcd", 4, 0)), 500);
        let grouped = Setup {
            group_commit: true,
            ..with("redis", 1, 100)
        };
        assert_eq!(
            selling_ms(&grouped),
            5 * 120,
            "300 units in grants of 64, each lingering"
        );
    }

    #[test]
    fn faults_outlast_the_lease_the_backend_grants_about_half_the_time_and_end_within_it_otherwise() {
        let only = |strategy: &str| Choices {
            strategies: vec![strategy.to_owned()],
            ..all()
        };
        for strategy in ["zookeeper", "etcd", "redis"] {
            let (mut within, mut past) = (0, 0);
            for seed in 0..400 {
                let round = Round::drawn(round_seed(3, seed), &only(strategy)).unwrap();
                let (lease, freed) = (round.setup.granted_lease_ms(), round.setup.freed_within_ms());
                for timed in &round.schedule {
                    if let Strike::PauseHolder { ms } | Strike::CutFromLock { ms, .. } = timed.strike {
                        match ms > lease {
                            true => past += usize::from(ms >= freed + PAST_THE_LEASE_MS),
                            false => within += 1,
                        }
                    }
                }
            }
            assert!(
                within > 40 && past > 40,
                "{strategy}: {within} within the lease, {past} past it"
            );
        }
    }

    #[test]
    fn a_sale_lingers_as_long_as_the_lease_only_with_group_commit() {
        let drawn: Vec<Setup> = (0..400).map(|seed| Round::drawn(seed, &all()).unwrap().setup).collect();
        let long = |setup: &&Setup| setup.linger_ms > 100;
        assert!(drawn.iter().filter(long).all(|setup| setup.group_commit));
        assert!(drawn.iter().filter(long).count() > 10);
        assert!(drawn.iter().all(|setup| setup.linger_ms <= setup.ttl_ms));
    }

    #[test]
    fn the_stock_is_drawn_on_one_redis_on_a_sentinel_or_on_a_cluster_never_two_at_once() {
        let drawn: Vec<Setup> = (0..300).map(|seed| Round::drawn(seed, &all()).unwrap().setup).collect();
        assert!(drawn.iter().all(|setup| !(setup.stock_cluster && setup.stock_failover)));
        assert!(drawn.iter().any(|setup| setup.stock_cluster));
        assert!(drawn.iter().any(|setup| setup.stock_failover));
        assert!(drawn.iter().any(|setup| !setup.stock_cluster && !setup.stock_failover));
    }

    #[test]
    fn a_seed_draws_the_same_setup_on_a_machine_without_mariadb_orders_aside() {
        let without = Choices { orders: false, ..all() };
        for seed in 0..100 {
            let (here, there) = (
                Round::drawn(seed, &all()).unwrap(),
                Round::drawn(seed, &without).unwrap(),
            );
            let here_without_orders = Setup {
                orders: false,
                ..here.setup.clone()
            };
            assert_eq!(here_without_orders, there.setup);
            // Without orders, a restart of their MariaDB is refused and drawn again.
            if !here.setup.orders {
                assert_eq!(here.schedule, there.schedule);
            }
        }
    }

    #[test]
    fn round_seeds_of_one_run_differ() {
        let seeds: std::collections::HashSet<u64> = (0..1000).map(|index| round_seed(42, index)).collect();
        assert_eq!(seeds.len(), 1000);
    }
}
