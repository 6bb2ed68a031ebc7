//! The tree reads in the order `src/lib.rs` tells it: a module uses only modules that
//! the tour introduces before it, so there is no import circle. No server needed.
//!
//! It reads the sources as text: every `crate::<module>` outside a comment counts as a
//! use of that module, as do `use crate::{...}` lists.

use std::path::{Path, PathBuf};

/// The top-level modules, in the order `src/lib.rs` declares them.
fn tour() -> Vec<String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';').to_owned())
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of a top-level module: `src/<name>.rs` or the folder `src/<name>/`.
fn files_of(module: &str) -> Vec<PathBuf> {
    let file = src().join(format!("{module}.rs"));
    if file.exists() {
        return vec![file];
    }
    let mut found = Vec::new();
    let mut folders = vec![src().join(module)];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|_| panic!("no {}", folder.display())) {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => folders.push(path),
                false if path.extension().is_some_and(|ext| ext == "rs") => found.push(path),
                false => {}
            }
        }
    }
    found
}

/// The top-level modules that the code of `path` names through `crate::`.
fn modules_used_by(path: &Path, tour: &[String]) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let code: String = text
        .lines()
        .map(|line| line.trim_start())
        .filter(|line| !line.starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    tour.iter()
        .filter(|module| {
            code.contains(&format!("crate::{module}::"))
                || code.contains(&format!("crate::{module};"))
                || code.contains(&format!("crate::{module},"))
                || code.contains(&format!("crate::{module} "))
                || code.contains(&format!("crate::{{{module}"))
        })
        .cloned()
        .collect()
}

#[test]
fn every_module_uses_only_modules_the_tour_introduced_before_it() {
    let tour = tour();
    assert!(
        tour.len() >= 10,
        "src/lib.rs should declare the modules in reading order: {tour:?}"
    );
    let mut later_uses = Vec::new();
    for (position, module) in tour.iter().enumerate() {
        for file in files_of(module) {
            for used in modules_used_by(&file, &tour) {
                let used_at = tour.iter().position(|m| *m == used).unwrap();
                if used_at > position {
                    later_uses.push(format!(
                        "{} uses `{used}`, which the tour introduces later",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        later_uses.is_empty(),
        "reorder src/lib.rs or move the code:\n{}",
        later_uses.join("\n")
    );
}

#[test]
fn every_strategy_is_one_file_or_folder_in_src_lock_named_as_the_flag_names_it() {
    use clap::ValueEnum;
    for strategy in seckill::strategy::Strategy::value_variants() {
        if *strategy == seckill::strategy::Strategy::Atomic {
            continue; // no lock: one Redis script in src/stock.rs
        }
        let name = strategy.name().replace('-', "_");
        let lock = src().join("lock");
        assert!(
            lock.join(format!("{name}.rs")).exists() || lock.join(&name).join("mod.rs").exists(),
            "`--lock {strategy}` should be src/lock/{name}.rs or src/lock/{name}/"
        );
    }
}
