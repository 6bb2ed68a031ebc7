//! The lock benchmark's tables: the locks alone, without the sale, and each peer's
//! recipe beside our lock. `lockbench` prints them row by row; `bench report` whole.

use crate::bench::lockbench::Run;
use crate::render::document::{Align, Table};

use Align::{Left, Right};

/// The header of the lock benchmark's table.
pub fn lockbench_table() -> Table {
    Table::new(&[
        ("strategy", Left),
        ("contenders", Right),
        ("keys", Left),
        ("pairs/s", Right),
        ("median pair ms", Right),
        ("p99 pair ms", Right),
        ("errors", Right),
    ])
}

/// One run of the lock benchmark as a row of [`lockbench_table`]. `lockbench` prints
/// each as it is measured; `bench report` puts them all in the report.
pub fn lockbench_row(run: &Run) -> Vec<String> {
    vec![
        run.strategy.clone(),
        run.contenders.to_string(),
        run.keys.clone(),
        format!("{:.0}", run.pairs_per_second),
        format!("{:.2}", run.median_pair_ms),
        format!("{:.2}", run.p99_pair_ms),
        run.errors.to_string(),
    ]
}

/// Every run of the lock benchmark.
pub fn lockbench(runs: &[Run]) -> Table {
    let mut table = lockbench_table();
    runs.iter().for_each(|run| table.push(lockbench_row(run)));
    table
}

/// Each peer's runs on one key beside ours on the same backend, contenders alike:
/// pairs per second and the median pair, and ours over the recipe's.
pub fn against_recipes(runs: &[Run]) -> Table {
    let mut table = Table::new(&[
        ("recipe", Left),
        ("ours", Left),
        ("contenders", Right),
        ("recipe pairs/s", Right),
        ("ours pairs/s", Right),
        ("ours / recipe", Right),
        ("recipe median / p99 ms", Right),
        ("ours median / p99 ms", Right),
    ]);
    for peer in runs.iter().filter(|run| run.keys == "one") {
        let Some(ours_name) = &peer.recipe_of else { continue };
        let ours = runs.iter().find(|run| {
            run.recipe_of.is_none()
                && &run.strategy == ours_name
                && run.contenders == peer.contenders
                && run.keys == peer.keys
        });
        let Some(ours) = ours else { continue };
        table.push(vec![
            peer.strategy.clone(),
            ours.strategy.clone(),
            peer.contenders.to_string(),
            format!("{:.0}", peer.pairs_per_second),
            format!("{:.0}", ours.pairs_per_second),
            format!(
                "{:.2}",
                ours.pairs_per_second / peer.pairs_per_second.max(f64::MIN_POSITIVE)
            ),
            format!("{:.2} / {:.2}", peer.median_pair_ms, peer.p99_pair_ms),
            format!("{:.2} / {:.2}", ours.median_pair_ms, ours.p99_pair_ms),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::document::{markdown, Block};

    #[test]
    fn a_lockbench_run_is_one_row() {
        let run = Run {
            strategy: "redis".into(),
            contenders: 16,
            keys: "one each".into(),
            pairs: 100,
            errors: 0,
            pairs_per_second: 4321.4,
            median_pair_ms: 0.123,
            p99_pair_ms: 1.5,
            first_error: None,
            recipe_of: None,
        };
        assert_eq!(
            markdown(&[Block::Table(lockbench(&[run]))]),
            "| strategy | contenders | keys | pairs/s | median pair ms | p99 pair ms | errors |\n\
             | --- | ---: | --- | ---: | ---: | ---: | ---: |\n\
             | redis | 16 | one each | 4321 | 0.12 | 1.50 | 0 |\n"
        );
    }

    #[test]
    fn each_recipe_is_set_beside_our_lock_at_the_same_contenders() {
        let run = |strategy: &str, recipe_of: Option<&str>, contenders, pairs_per_second| Run {
            strategy: strategy.into(),
            contenders,
            keys: "one".into(),
            pairs: 10,
            errors: 0,
            pairs_per_second,
            median_pair_ms: 1.0,
            p99_pair_ms: 2.0,
            first_error: None,
            recipe_of: recipe_of.map(Into::into),
        };
        let runs = [
            run("zookeeper", None, 1, 900.0),
            run("zookeeper", None, 16, 1000.0),
            run("curator InterProcessMutex", Some("zookeeper"), 16, 500.0),
            run("redis-py Lock", Some("redis"), 16, 100.0), // no redis run: no row
        ];
        let table = markdown(&[Block::Table(against_recipes(&runs))]);
        assert!(
            table.contains("| curator InterProcessMutex | zookeeper | 16 | 500 | 1000 | 2.00 |"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 3, "one row, the 16-contender one:\n{table}");
    }
}
