//! `grade`: the break-it exercises graded by the suite (`make grade`).
//!
//! ```text
//! grade            # the rows on this tree: which held, which broke
//! grade --prove    # each exercise's line deleted in a copy, in turn: the rows of the key fail
//! ```
//!
//! The exercises and their rows are in `testkit::break_it`; docs/teach/break-it.md is
//! the students' page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};
use clap::Parser;
use testkit::break_it::{EXERCISES, ROWS};

/// Runs the rows of the break-it exercises on a tree, and says which broke.
#[derive(Parser)]
#[command(name = "grade")]
struct Args {
    /// The project tree to grade (the student's): this project's root when absent.
    #[arg(long)]
    tree: Option<PathBuf>,
    /// Instead: delete each exercise's line in a copy of the tree, in turn, and check
    /// that exactly the rows of the answer key fail, and none on the untouched copy.
    #[arg(long)]
    prove: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let tree = args.tree.unwrap_or_else(testkit::project_root);
    let outcome = if args.prove { prove(&tree) } else { grade(&tree) };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("grade: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// The student's run: where each marked line is, and each row's result.
fn grade(tree: &Path) -> anyhow::Result<bool> {
    println!("The lines of the exercises in {}:", tree.display());
    for exercise in EXERCISES {
        let there = exercise
            .line_is_there(tree)
            .with_context(|| format!("reading {}", exercise.file))?;
        let state = if there { "there" } else { "DELETED" };
        println!(
            "  {:<16} {:<8} {}: {}",
            exercise.name, state, exercise.file, exercise.what_it_does
        );
    }
    let failed = failing_rows(tree, None)?;
    println!("\n{:<26} result", "row");
    for row in ROWS {
        let result = if failed.contains(row.name) { "FAILED" } else { "ok" };
        println!("{:<26} {result}", row.name);
    }
    println!(
        "\n{} of {} rows failed. Compare with your prediction: the answers are at the end of docs/teach/break-it.md \
         (中文：docs/zh-CN/teach/break-it.md). Put a line back with git checkout -- FILE.",
        failed.len(),
        ROWS.len()
    );
    Ok(failed.is_empty())
}

/// The answer key checked: the untouched copy fails no row, and each exercise's
/// deleted line fails exactly its rows.
fn prove(tree: &Path) -> anyhow::Result<bool> {
    if let Some(missing) = EXERCISES.iter().find(|e| !e.line_is_there(tree).unwrap_or(false)) {
        bail!(
            "the line marked `{}` is not in {}: put it back (git checkout -- {}) before proving the key",
            missing.marker(),
            missing.file,
            missing.file
        );
    }
    // The copy builds into a target of its own. Never the project's: cargo would take
    // the copy's build, made later, for a fresh build of the project's older sources.
    let (copy, target) = (tree.join(".run/grade/tree"), tree.join(".run/grade/target"));
    copy_the_tree(tree, &copy)?;
    println!("| line deleted | from | rows that failed | as the key says |\n| --- | --- | --- | --- |");
    let mut all_as_the_key_says = true;
    let untouched = failing_rows(&copy, Some(&target))?;
    all_as_the_key_says &= print_proof_line("nothing", "-", &untouched, &BTreeSet::new());
    for exercise in EXERCISES {
        let original = std::fs::read(copy.join(exercise.file))?;
        exercise.delete_the_line(&copy)?;
        let failed = failing_rows(&copy, Some(&target));
        std::fs::write(copy.join(exercise.file), original)?;
        let expected = exercise.breaks.iter().map(|name| name.to_string()).collect();
        all_as_the_key_says &= print_proof_line(exercise.name, exercise.file, &failed?, &expected);
    }
    Ok(all_as_the_key_says)
}

fn print_proof_line(deleted: &str, from: &str, failed: &BTreeSet<String>, expected: &BTreeSet<String>) -> bool {
    let names: Vec<&str> = failed.iter().map(String::as_str).collect();
    let shown = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    let as_the_key_says = failed == expected;
    let verdict = if as_the_key_says {
        "yes".to_owned()
    } else {
        let key: Vec<&str> = expected.iter().map(String::as_str).collect();
        format!(
            "NO: the key says {}",
            if key.is_empty() {
                "none".to_owned()
            } else {
                key.join(", ")
            }
        )
    };
    println!("| {deleted} | {from} | {shown} | {verdict} |");
    as_the_key_says
}

/// Runs every row on `tree` (built into `target`, or the tree's own) and returns the
/// short names of those that failed. A tree that does not build is an error that says so.
fn failing_rows(tree: &Path, target: Option<&Path>) -> anyhow::Result<BTreeSet<String>> {
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(tree)
        .args(["test", "-p", "seckill", "--test", "it", "--", "--exact"]);
    cargo.args(ROWS.iter().map(|row| row.test));
    if let Some(target) = target {
        // A copy: its own build, and the project's test Redis, which the copy's tests
        // would not recognise by its data folder (it is not under the copy).
        cargo.env("CARGO_TARGET_DIR", target);
        cargo.env("SECKILL_TEST_REDIS_URL", testkit::redis_url());
    }
    let output = cargo
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo (is it on the PATH?)")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let results = test_results(&stdout);
    if results.is_empty() {
        bail!(
            "cargo test built or ran nothing in {} (its error is above): if you deleted more than the marked line, \
             put the file back with git checkout -- FILE",
            tree.display()
        );
    }
    let mut failed = BTreeSet::new();
    for row in ROWS {
        match results.iter().find(|(test, _)| *test == row.test) {
            Some((_, passed)) if !passed => _ = failed.insert(row.name.to_owned()),
            Some(_) => {}
            None => bail!(
                "the row `{}` ({}) did not run: was the test renamed?",
                row.name,
                row.test
            ),
        }
    }
    Ok(failed)
}

/// `test NAME ... ok` and `test NAME ... FAILED` lines: each test's name and whether it passed.
fn test_results(stdout: &str) -> Vec<(&str, bool)> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test "))
        .filter_map(|line| line.rsplit_once(" ... "))
        .map(|(name, result)| (name, result == "ok"))
        .collect()
}

/// `tree`'s files, tracked or new (not ignored), copied to `copy`.
fn copy_the_tree(tree: &Path, copy: &Path) -> anyhow::Result<()> {
    let listed = Command::new("git")
        .current_dir(tree)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .context("running git ls-files (is the tree a git clone?)")?;
    if !listed.status.success() {
        bail!("git ls-files failed in {}: is it a git clone?", tree.display());
    }
    for file in listed.stdout.split(|byte| *byte == 0).filter(|name| !name.is_empty()) {
        let file = Path::new(std::str::from_utf8(file)?);
        let (from, to) = (tree.join(file), copy.join(file));
        if !from.is_file() {
            continue; // deleted in the working tree
        }
        std::fs::create_dir_all(to.parent().expect("a file has a folder"))?;
        if std::fs::read(&to).ok() != Some(std::fs::read(&from)?) {
            std::fs::copy(&from, &to).with_context(|| format!("copying {}", file.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_tests_result_and_nothing_else() {
        let stdout = "running 3 tests\ntest a::b ... ok\ntest a::c ... FAILED\ntest a::d ... ignored\n\nfailures:\n";
        assert_eq!(
            test_results(stdout),
            vec![("a::b", true), ("a::c", false), ("a::d", false)]
        );
    }
}
