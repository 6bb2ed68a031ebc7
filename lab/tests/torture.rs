//! `make torture` in small: one seeded round played by the `torture` binary as the seed
//! draws it, and the shrinker on a planted failure (lesson 3's: the fence check off, the
//! holder paused past its lease), which must keep the pause and drop the rest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use lab::crowd::Size;
use lab::faults::Strike;
use lab::lab::{Binaries, Lab};
use lab::setup::Setup;
use lab::torture::plan::{Choices, Expected, Round, Steady, Timed};
use lab::torture::play::play;
use lab::torture::play::Played;
use lab::torture::shrink::shrink;
use loadtest::history::{Event, Fault, What};

/// target/debug/, where `cargo test --workspace` builds seckill and loadtest beside the
/// lab's binaries.
fn binaries() -> Binaries {
    let torture = PathBuf::from(env!("CARGO_BIN_EXE_torture"));
    let folder = torture.parent().unwrap_or(Path::new("."));
    Binaries {
        seckill: folder.join("seckill"),
        loadtest: folder.join("loadtest"),
    }
}

#[test]
fn a_seeded_round_is_played_as_its_seed_draws_it_and_judged_by_the_checks() {
    let _alone = testkit::take_turn_blocking();
    let dir = tempfile::tempdir().unwrap();
    let seed = 0x5eed_f7e5_u64;
    let choices = Choices {
        strategies: vec!["redis".to_owned()],
        fencing: Some(true),
        orders: lab::setup::mariadb_missing().is_none(),
    };
    let drawn = Round::drawn(seed, &choices).unwrap();
    assert_eq!(drawn.expected(), Expected::MustHold);
    let output = Command::new(env!("CARGO_BIN_EXE_torture"))
        .args([
            "--round",
            &format!("{seed:#x}"),
            "--strategies",
            "redis",
            "--fencing",
            "on",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    let line = printed
        .lines()
        .find(|line| line.starts_with("[torture] round 1,"))
        .unwrap_or_else(|| {
            panic!(
                "no round was played: {printed}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert!(
        line.contains(&format!("must hold: {} -> held", drawn.describe())),
        "{line}"
    );
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(printed.contains("1 rounds played (0 could not be)"), "{printed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shrinker_keeps_the_pause_that_sells_twice_and_drops_the_faults_it_does_not_need() {
    let _alone = testkit::take_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(binaries(), dir.path()).unwrap();
    let at = |at_ms: u64, strike: Strike| Timed { at_ms, strike };
    let planted = Round {
        seed: 0,
        // Lesson 3's setup: a lease of 500 ms, each sale lingering 50 ms before its write.
        setup: Setup {
            fencing: false,
            ..Setup::default()
        },
        crowd: Size { buyers: 100, units: 60 },
        steady: None,
        schedule: vec![
            at(0, Strike::PauseHolder { ms: 1500 }),
            at(
                0,
                Strike::DelayLock {
                    instance: 1,
                    delay_ms: 20,
                    ms: 200,
                },
            ),
            // Not a clock jump: one on the paused holder makes it find its lease gone on
            // waking, and sell nothing (it held 3 plays in a row here).
            at(3000, Strike::CutFromStock { instance: 1, ms: 100 }),
        ],
    };
    let mut first = None;
    for _ in 0..5 {
        let played = play(&lab, &planted, dir.path()).await.unwrap();
        println!(
            "planted round: {} (struck {}, troubles {:?})",
            played.verdict_word(),
            played.struck.len(),
            played.troubles
        );
        if played.caught() {
            first = Some(played);
            break;
        }
    }
    let first =
        first.expect("the planted round (fencing off, the holder paused past its lease) sold no unit twice in 5 plays");
    let shrunk = shrink(&lab, first, dir.path()).await.unwrap();
    lab.shutdown().await;
    let smallest = &shrunk.played.round;
    assert!(shrunk.played.caught(), "{}", smallest.describe());
    let kept: Vec<&Strike> = smallest.schedule.iter().map(|timed| &timed.strike).collect();
    assert!(
        matches!(kept[..], [Strike::PauseHolder { ms }] if *ms >= 375),
        "the pause past the lease, alone, should be left (a renewal every third of the 500 ms lease leaves at least 333 ms of it, which a shorter pause cannot outlast): {}",
        smallest.describe()
    );
    assert!(
        smallest.crowd.buyers < 100,
        "the crowd should be smaller: {}",
        smallest.describe()
    );
}

/// Plays one round of `setup` with one fault, a crowd of 200 buyers at 120 units, on a
/// lab of its own: what it came to, the crowd's report, and its history (read before the
/// folder they were in goes).
async fn play_one(setup: Setup, fault: Timed) -> (Played, serde_json::Value, String) {
    let _alone = testkit::take_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(binaries(), dir.path()).unwrap();
    let round = Round {
        seed: 0,
        setup,
        crowd: Size {
            buyers: 200,
            units: 120,
        },
        steady: None,
        schedule: vec![fault],
    };
    let played = play(&lab, &round, dir.path()).await.unwrap();
    lab.shutdown().await;
    let report = std::fs::read_to_string(&played.report).unwrap_or_default();
    let history = loadtest::history::beside_report(&played.report, "history.jsonl");
    let history = std::fs::read_to_string(history).unwrap_or_default();
    (played, serde_json::from_str(&report).unwrap_or_default(), history)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_that_keeps_orders_is_judged_with_them_after_its_mariadb_restarted_mid_sale() {
    // The lock on Redis, the orders in a MariaDB of their own.
    let setup = Setup {
        orders: true,
        linger_ms: 0,
        ..Setup::default()
    };
    let restart = Timed {
        at_ms: 100,
        strike: Strike::RestartMariaDb { ms: 1000 },
    };
    let (played, report, _) = play_one(setup, restart).await;
    assert_eq!(played.verdict_word(), "held", "{:?}", played.troubles);
    assert_eq!(played.struck.len(), 1, "the restart struck before the last answer");
    let sold = report["initial_stock"].as_i64().unwrap() - report["stock_left"].as_i64().unwrap();
    assert!(sold > 0, "{report}");
    assert_eq!(
        report["orders"]["rows"].as_i64(),
        Some(sold),
        "every unit sold is an order, written once MariaDB was back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_with_the_stock_on_a_redis_cluster_is_played_and_judged() {
    let setup = Setup {
        stock_cluster: true,
        segments: 4,
        linger_ms: 0,
        ..Setup::default()
    };
    let pause = Timed {
        at_ms: 50,
        strike: Strike::Pause { instance: 0, ms: 500 },
    };
    let (played, report, _) = play_one(setup, pause).await;
    assert_eq!(played.verdict_word(), "held", "{:?}", played.troubles);
    assert_eq!(report["stock_segments"].as_u64(), Some(4), "{report}");
    assert_eq!(report["initial_stock"].as_i64(), Some(120), "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_whose_stock_connections_are_reset_mid_sale_is_held_and_the_reset_is_in_its_history() {
    // Each sale lingers, so that a reset finds one between its read and its write.
    let setup = Setup {
        linger_ms: 20,
        ..Setup::default()
    };
    let reset = Timed {
        at_ms: 100,
        strike: Strike::ResetStock { instance: 0, ms: 300 },
    };
    let (played, _, history) = play_one(setup, reset).await;
    assert_eq!(
        played.verdict_word(),
        "held",
        "{:?} {:?}",
        played.troubles,
        played.failed
    );
    assert_eq!(played.struck.len(), 1, "the reset struck before the last answer");
    let faults: Vec<&str> = history
        .lines()
        .filter(|line| line.contains(r#""type":"fault""#))
        .collect();
    assert!(
        faults[0].contains(r#""fault":"reset""#) && faults[0].contains("its stock connections"),
        "{faults:?}"
    );
    assert!(faults[1].contains(r#""fault":"heal""#), "{faults:?}");
}

/// Plays a steady round of `setup` (100 buyers a second for 2 s) with one fault, on a lab
/// of its own, and asserts it held: what it came to, its checks as the lab shows them, and
/// its history (read before the folder it was in goes).
async fn a_steady_round_holds(setup: Setup, fault: Timed) -> (Played, serde_json::Value, Vec<Event>) {
    let _alone = testkit::take_turn().await;
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(binaries(), dir.path()).unwrap();
    let round = Round {
        seed: 0,
        setup,
        crowd: Size::LESSONS,
        steady: Some(Steady { rate: 100, ms: 2_000 }),
        schedule: vec![fault],
    };
    let played = play(&lab, &round, dir.path()).await.unwrap();
    let checks = lab
        .state()
        .await
        .crowd
        .and_then(|crowd| crowd.outcome)
        .map(|outcome| outcome.checks);
    lab.shutdown().await;
    assert_eq!(
        played.verdict_word(),
        "held",
        "{:?} {:?}",
        played.troubles,
        played.failed
    );
    let history = loadtest::history::beside_report(&played.report, "history.jsonl");
    let events = loadtest::history::read(&history).unwrap();
    (played, checks.unwrap_or_default(), events)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steady_round_sells_for_its_time_and_counts_its_orders_across_a_mariadb_restart() {
    let setup = Setup {
        orders: true,
        linger_ms: 0,
        ..Setup::default()
    };
    let restart = Timed {
        at_ms: 300,
        strike: Strike::RestartMariaDb { ms: 1000 },
    };
    let (played, checks, _) = a_steady_round_holds(setup, restart).await;
    // 100 buyers a second for 2 s, from the first sale on.
    assert!(
        (150..=260).contains(&played.operations),
        "{} requests",
        played.operations
    );
    let orders = checks
        .as_array()
        .into_iter()
        .flatten()
        .find(|check| check["name"] == "orders");
    assert_eq!(
        orders.map(|check| check["status"].clone()),
        Some(serde_json::json!("pass")),
        "{checks}"
    );
}

/// A round of redis, fencing `fencing`, whose lock Redis's clock jumps a minute forward
/// mid-sale: the lease of the holder, lingering 50 ms before each write, ends at once.
async fn the_lock_redis_clock_jumps(fencing: bool) -> (Played, String) {
    let setup = Setup {
        fencing,
        ..Setup::default()
    };
    let jump = Timed {
        at_ms: 200,
        strike: Strike::JumpLockClock { seconds: 60 },
    };
    let (played, _, history) = play_one(setup, jump).await;
    (played, history)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jump_of_the_lock_redis_clock_sells_a_unit_twice_without_fencing_and_never_with_it() {
    // The jump lands in a linger most of the time, not every time (the shrinker's TRIES
    // are for the same reason): four plays, of which one must oversell.
    let mut verdicts = Vec::new();
    for _ in 0..4 {
        let (unfenced, history) = the_lock_redis_clock_jumps(false).await;
        assert!(
            history.contains(r#""fault":"clock_jump","target":"lock-redis","detail":"+60 s""#),
            "{history:.2000}"
        );
        verdicts.push(unfenced.verdict_word());
        if unfenced.caught() {
            break;
        }
    }
    assert_eq!(verdicts.last(), Some(&"oversold"), "{verdicts:?}");
    let (fenced, _) = the_lock_redis_clock_jumps(true).await;
    assert_eq!(
        fenced.verdict_word(),
        "held",
        "{:?} {:?}",
        fenced.troubles,
        fenced.failed
    );
}

/// A steady round of `setup`, restocked 700 ms in: held, its history naming the sale the
/// restock ended, and buyers told of both sales.
async fn a_restocked_steady_round_holds(setup: Setup) {
    let restock = Timed {
        at_ms: 700,
        strike: Strike::Restock,
    };
    let (played, _, events) = a_steady_round_holds(setup, restock).await;
    assert_eq!(played.struck.len(), 1, "{:?}", played.troubles);
    let ended: Vec<String> = events
        .iter()
        .filter_map(|event| match &event.what {
            What::Fault {
                fault: Fault::Restock,
                detail,
                ..
            } => detail.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "one restock, naming the sale it ended");
    let sales: BTreeSet<&str> = events
        .iter()
        .filter_map(|event| match &event.what {
            What::Ok { sold_unit, .. } => Some(sold_unit.sale.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(sales.len(), 2, "buyers were told of both sales: {sales:?}");
    assert!(sales.contains(ended[0].as_str()), "{sales:?} {ended:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steady_round_restocked_mid_sale_is_judged_in_both_sales_and_holds() {
    // Each sale lingers between its read and its write, so that the restock finds some
    // there: their writes must be refused, not land in the new sale.
    a_restocked_steady_round_holds(Setup {
        linger_ms: 20,
        orders: lab::setup::mariadb_missing().is_none(),
        ..Setup::default()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steady_round_on_a_redis_cluster_restocked_mid_sale_holds() {
    // On a cluster the reset takes one transaction per segment, one after the other.
    a_restocked_steady_round_holds(Setup {
        linger_ms: 20,
        stock_cluster: true,
        segments: 4,
        ..Setup::default()
    })
    .await;
}
