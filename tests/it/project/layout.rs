//! Each crate's tree reads in the order its `lib.rs` tells it (the service's src/, and
//! loadtest/src/ and testkit/src/ as well): a module uses only modules that the tour
//! introduces before it, and inside a folder a file uses only the files its `mod.rs`
//! declares before it, so there is no import circle. No server needed.
//!
//! It reads the sources as text: every `crate::<module>` outside a comment counts as a
//! use of that module, as do `use crate::{...}` lists and, inside a folder,
//! `super::<file>`.

use std::path::{Path, PathBuf};

/// The crates whose trees a reader opens: each one's `src/`, from the project's root.
const CRATES: [&str; 3] = ["src", "loadtest/src", "testkit/src"];

/// The top-level modules of the crate at `src`, in the order its `lib.rs` declares them.
fn tour_of(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';').to_owned())
        .collect()
}

/// The service's modules, in its tour's order.
fn tour() -> Vec<String> {
    tour_of(&src())
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of a top-level module: `<src>/<name>.rs` or the folder `<src>/<name>/`.
fn files_of(src: &Path, module: &str) -> Vec<PathBuf> {
    let file = src.join(format!("{module}.rs"));
    if file.exists() {
        return vec![file];
    }
    files_in(&src.join(module))
}

/// Every `.rs` file under `folder`.
pub(super) fn files_in(folder: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
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

/// The code of `path`, without its comment lines.
fn code_of(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| line.trim_start())
        .filter(|line| !line.starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Whether `code` names the module `path` (as `crate::sale::stock` or `super::stock`).
fn names(code: &str, path: &str) -> bool {
    ["::", ";", ",", " ", "}"]
        .iter()
        .any(|after| code.contains(&format!("{path}{after}")))
}

/// The top-level modules that the code of `path` names through `crate::`.
fn modules_used_by(path: &Path, tour: &[String]) -> Vec<String> {
    let code = code_of(path);
    tour.iter()
        .filter(|module| names(&code, &format!("crate::{module}")) || code.contains(&format!("crate::{{{module}")))
        .cloned()
        .collect()
}

/// The modules a folder's `mod.rs` declares, in its order.
fn declared_in(folder: &Path) -> Vec<String> {
    std::fs::read_to_string(folder.join("mod.rs"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")))
        .filter(|line| line.ends_with(';'))
        .map(|name| name.trim_end_matches(';').to_owned())
        .collect()
}

/// Every use, inside the folder `folder` (the module `crate::<path>`), of a file that its
/// `mod.rs` declares later than the user; then the same inside its own folders.
fn later_uses_inside(folder: &Path, path: &str) -> Vec<String> {
    let declared = declared_in(folder);
    let mut later_uses = Vec::new();
    for (position, module) in declared.iter().enumerate() {
        let single = folder.join(format!("{module}.rs"));
        let files = if single.exists() {
            vec![single]
        } else {
            files_in(&folder.join(module))
        };
        for file in files {
            let code = code_of(&file);
            for later in &declared[position + 1..] {
                if names(&code, &format!("crate::{path}::{later}")) || names(&code, &format!("super::{later}")) {
                    later_uses.push(format!(
                        "{} uses `{path}::{later}`, which {}/mod.rs declares later",
                        file.display(),
                        folder.display()
                    ));
                }
            }
        }
        if folder.join(module).join("mod.rs").exists() {
            later_uses.extend(later_uses_inside(&folder.join(module), &format!("{path}::{module}")));
        }
    }
    later_uses
}

#[test]
fn every_module_uses_only_modules_the_tour_introduced_before_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut later_uses = Vec::new();
    for crate_src in CRATES.map(|crate_src| root.join(crate_src)) {
        later_uses.extend(later_uses_in_tour(&crate_src));
    }
    assert!(
        later_uses.is_empty(),
        "reorder the crate's lib.rs or move the code:\n{}",
        later_uses.join("\n")
    );
}

/// Every use, in the crate at `src`, of a module its tour introduces later than the user.
fn later_uses_in_tour(src: &Path) -> Vec<String> {
    let tour = tour_of(src);
    assert!(
        tour.len() >= 5,
        "{}/lib.rs should declare the modules in reading order: {tour:?}",
        src.display()
    );
    let mut later_uses = Vec::new();
    for (position, module) in tour.iter().enumerate() {
        for file in files_of(src, module) {
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
    later_uses
}

#[test]
fn inside_every_folder_a_file_uses_only_the_files_its_mod_rs_declares_before_it() {
    let folders: Vec<String> = tour()
        .into_iter()
        .filter(|module| src().join(module).is_dir())
        .collect();
    assert!(
        folders.len() >= 4,
        "src/ should group its modules in folders (store, lock, sale, http): {folders:?}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut later_uses: Vec<String> = Vec::new();
    for crate_src in CRATES.map(|crate_src| root.join(crate_src)) {
        for folder in tour_of(&crate_src)
            .into_iter()
            .filter(|module| crate_src.join(module).is_dir())
        {
            later_uses.extend(later_uses_inside(&crate_src.join(&folder), &folder));
        }
    }
    assert!(
        later_uses.is_empty(),
        "reorder the folder's mod.rs or move the code:\n{}",
        later_uses.join("\n")
    );
}

#[test]
fn every_strategy_is_one_file_or_folder_in_src_lock_named_as_the_flag_names_it() {
    use clap::ValueEnum;
    for strategy in seckill::strategy::Strategy::value_variants() {
        if *strategy == seckill::strategy::Strategy::Atomic {
            continue; // no lock: one Redis script in src/sale/stock/mod.rs
        }
        let name = strategy.name().replace('-', "_");
        let lock = src().join("lock");
        assert!(
            lock.join(format!("{name}.rs")).exists() || lock.join(&name).join("mod.rs").exists(),
            "`--lock {strategy}` should be src/lock/{name}.rs or src/lock/{name}/"
        );
    }
}
