//! The course shows what its commands print today. Each lesson's commands are a script
//! of `scripts/lessons/`, and `scripts/lessons.sh` writes the script and its output into
//! the pages between `<!-- output NAME: begin -->` and `<!-- output NAME: end -->`.
//! These tests fail when a page and the code have drifted apart:
//!
//! - every script is shown, as it is now, in its English and its Chinese lesson, and every
//!   block on a page belongs to a script;
//! - the quick lessons (`# Needs: redis`) run for real, on the debug build, and print the
//!   same labelled lines as their pages show (the figures may differ);
//! - the longer lessons' outputs are newer than the last change to the load test's report.
//!
//! After a change that fails them: `scripts/lessons.sh N` (or `make lessons`).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The scripts of scripts/lessons/, by name (`01-none`).
fn scripts() -> BTreeMap<String, String> {
    let mut scripts = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("scripts/lessons")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "sh") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            scripts.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    assert!(!scripts.is_empty(), "no script in scripts/lessons/");
    scripts
}

/// One published block: the script it shows, the line that dates it, and the output.
struct Block {
    page: PathBuf,
    name: String,
    text: String,
    script: String,
    dated: Option<String>,
    output: String,
}

/// Every block of every page; a begin marker without its end is a failure.
fn blocks() -> Vec<Block> {
    let mut blocks = Vec::new();
    for page in testkit::markdown_pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("<!-- output ") {
            let after = &rest[at + "<!-- output ".len()..];
            let name = after.split(':').next().unwrap().to_owned();
            let end = format!("<!-- output {name}: end -->");
            let Some(length) = after.find(&end) else {
                panic!("{}: the block `{name}` has no `{end}` line", page.display());
            };
            let inside = &after[..length];
            blocks.push(Block {
                page: page.clone(),
                name: name.clone(),
                text: inside.to_owned(),
                script: fenced(inside, "```sh\n").unwrap_or_default(),
                dated: inside.lines().find_map(|line| {
                    line.strip_prefix("Output on ")
                        .map(|date| date.chars().take(20).collect())
                }),
                output: fenced(inside.split("Output on ").nth(1).unwrap_or_default(), "```\n").unwrap_or_default(),
            });
            rest = &after[length + end.len()..];
        }
    }
    blocks
}

/// The text of the first code block that opens with `opening`.
fn fenced(text: &str, opening: &str) -> Option<String> {
    let start = text.find(opening)? + opening.len();
    let length = text[start..].find("```")?;
    Some(text[start..start + length].to_owned())
}

/// `3` for `03-holder-paused`: what `scripts/lessons.sh` takes.
fn lesson_number(name: &str) -> &str {
    name[..2].trim_start_matches('0')
}

fn lesson_page(folder: &str, name: &str) -> PathBuf {
    let number = &name[..2];
    let entries = std::fs::read_dir(root().join(folder)).unwrap();
    let file = entries
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .find(|file| file.starts_with(number) && file.ends_with(".md"))
        .unwrap_or_else(|| panic!("no lesson {number} in {folder}"));
    Path::new(folder).join(file)
}

#[test]
fn every_lesson_script_is_shown_as_it_is_in_both_languages_and_every_block_has_a_script() {
    let scripts = scripts();
    let blocks = blocks();
    let mut wrong = Vec::new();
    for block in &blocks {
        let Some(script) = scripts.get(&block.name) else {
            wrong.push(format!(
                "{}: the block `{}` has no script scripts/lessons/{}.sh",
                block.page.display(),
                block.name,
                block.name
            ));
            continue;
        };
        let shown = script.split_once('\n').map_or("", |(_, rest)| rest);
        if block.script != shown || block.dated.is_none() {
            wrong.push(format!(
                "{}: the block `{}` does not show scripts/lessons/{}.sh as it is now, with its output: run `scripts/lessons.sh {}`",
                block.page.display(),
                block.name,
                block.name,
                lesson_number(&block.name)
            ));
        }
    }
    for name in scripts.keys() {
        for folder in ["docs/lessons", "docs/zh-CN/lessons"] {
            let page = lesson_page(folder, name);
            let count = blocks.iter().filter(|b| &b.name == name && b.page == page).count();
            if count != 1 {
                wrong.push(format!(
                    "{}: shows the block `{name}` {count} times, not once",
                    page.display()
                ));
            }
        }
        let (landing, lessons): (Vec<&Block>, Vec<&Block>) = blocks
            .iter()
            .filter(|b| &b.name == name)
            .partition(|b| LANDING_PAGES.iter().any(|page| b.page == Path::new(page)));
        if let Some(different) = lessons.iter().find(|b| b.text != lessons[0].text) {
            wrong.push(format!(
                "the block `{name}` differs between {} and {}: only scripts/lessons.sh writes it",
                lessons[0].page.display(),
                different.page.display()
            ));
        }
        for shown in landing {
            let whole = lessons[0];
            if shown.output != report_of(&whole.output) || shown.script != whole.script || shown.dated != whole.dated {
                wrong.push(format!(
                    "{}: the block `{name}` is not the report of {}'s run: only scripts/lessons.sh writes it",
                    shown.page.display(),
                    whole.page.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The most lines a block's output may show: a reader reads a block whole, so a script
/// keeps the lines its lesson reads and leaves the rest in a log.
const MOST_OUTPUT_LINES: usize = 80;

#[test]
fn every_block_shows_at_most_what_a_reader_reads() {
    let long: Vec<String> = blocks()
        .iter()
        .filter(|block| block.output.lines().count() > MOST_OUTPUT_LINES)
        .map(|block| {
            format!(
                "{}: the block `{}` shows {} lines of output, past {MOST_OUTPUT_LINES}: \
                 let scripts/lessons/{}.sh keep the lines the lesson reads",
                block.page.display(),
                block.name,
                block.output.lines().count(),
                block.name
            )
        })
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The READMEs: their blocks show the load test's report alone ([`report_of`]).
const LANDING_PAGES: [&str; 2] = ["README.md", "docs/zh-CN/README.md"];

/// The lines of an output from the load test's `== seckill load test` to its exit code,
/// as `scripts/lessons.sh` writes them into a README.
fn report_of(output: &str) -> String {
    let mut report = String::new();
    let mut inside = false;
    for line in output.lines() {
        inside |= line.starts_with("== seckill load test");
        if inside {
            report.push_str(line);
            report.push('\n');
        }
        if inside && line.contains("exited with code") {
            inside = false;
        }
    }
    report
}

#[test]
fn a_readme_shows_the_report_from_its_header_to_the_exit_code() {
    let output = "INFO serving\n== seckill load test: x ==\n  hosts  a\nverdict: HELD\nloadtest exited with code 0\nINFO stopped\n";
    assert_eq!(
        report_of(output),
        "== seckill load test: x ==\n  hosts  a\nverdict: HELD\nloadtest exited with code 0\n"
    );
}

/// What must stay the same between two runs of one script: the labels of the load test's
/// report lines, its header and verdict, the keys of a JSON answer, the script's own
/// `--- ` lines, and that an exit code was printed. Figures, log lines and the reasons
/// under a verdict are left out: they change from run to run.
fn labels(output: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("  ").filter(|rest| !rest.starts_with([' ', '-'])) {
            labels.push(format!("report line `{}`", rest.split("  ").next().unwrap().trim_end()));
        } else if line.starts_with("== seckill load test") || line.starts_with("--- ") {
            labels.push(line.to_owned());
        } else if line.starts_with("verdict: ") {
            labels.push("verdict".to_owned());
        } else if line.contains("exited with code") {
            labels.push(line.split(" exited with code").next().unwrap().to_owned() + " exited with code …");
        } else if line.starts_with('{') {
            if let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(line) {
                labels.push(format!(
                    "JSON {{{}}}",
                    fields.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    labels
}

#[test]
fn labels_keep_the_report_lines_and_leave_out_figures_logs_and_reasons() {
    let output = "2026-11-27T07:24:12Z  INFO seckill is serving\n== seckill load test: strategy `none` ==\n  \
                  hosts                 http://127.0.0.1:8080\n  buyers with 2+ units  3\n  - 500 buyers got a unit out of 300\n\
                  verdict: OVERSOLD\n{\"stock\":300,\"lucky\":0}\nloadtest exited with code 1\n";
    assert_eq!(
        labels(output),
        [
            "== seckill load test: strategy `none` ==",
            "report line `hosts`",
            "report line `buyers with 2+ units`",
            "verdict",
            "JSON {lucky, stock}",
            "loadtest exited with code …"
        ]
    );
}

/// The quick lessons whose verdict is the same in every run: no lock and the in-process
/// lock oversell (the baselines widen the race so that every run hits it), the Redis lock
/// and the atomic script hold. Their pages must show the verdict and exit code a run
/// prints, not only that there was one.
const SAME_VERDICT_EVERY_RUN: [&str; 4] = ["01-none", "01-local", "02-redis", "10-atomic"];

/// The verdict lines and exit codes of an output, word for word.
fn verdicts(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|line| line.starts_with("verdict: ") || line.contains("exited with code"))
        .collect()
}

#[test]
fn verdicts_keep_the_verdict_word_and_the_exit_code() {
    let output = "  hosts  http://127.0.0.1:8080\nverdict: OVERSOLD\n  - 200 units sold twice\n\
                  loadtest exited with code 1\n";
    assert_eq!(verdicts(output), ["verdict: OVERSOLD", "loadtest exited with code 1"]);
}

/// Runs one lesson script with the debug build first on the PATH; its output.
fn run_quick(name: &str) -> String {
    let binaries = Path::new(env!("CARGO_BIN_EXE_seckill")).parent().unwrap();
    assert!(
        binaries.join("loadtest").exists(),
        "{} is missing: build it with `cargo build --workspace --all-targets` (make test does)",
        binaries.join("loadtest").display()
    );
    let path = format!("{}:{}", binaries.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("bash")
        .arg(format!("scripts/lessons/{name}.sh"))
        .current_dir(root())
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0) // so that what it started can be stopped with it
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(180) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: a plain kill(2) of the process group this test started.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "scripts/lessons/{name}.sh failed or ran past 180 s:\n{text}"
    );
    text
}

#[test]
fn the_quick_lessons_print_the_lines_their_pages_show() {
    let redis = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    redis
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap_or_else(|error| {
            panic!("the quick lessons sell from the Redis on 6379 ({error}): start it with `make services`")
        });
    for port in [8080, 8090] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: the lessons' instances listen on 8080 and 8090"
        );
    }
    let blocks = blocks();
    let quick: Vec<String> = scripts()
        .into_iter()
        .filter(|(_, script)| script.lines().any(|line| line == "# Needs: redis"))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        quick,
        [
            "01-local",
            "01-none",
            "02-redis",
            "02-watchdog",
            "03-holder-paused",
            "10-atomic",
            "15-history"
        ],
        "the quick lessons (`# Needs: redis`) changed: say here which of them keep their verdict"
    );
    let mut wrong = Vec::new();
    for name in &quick {
        let output = run_quick(name);
        let printed = labels(&output);
        // Every page that shows the block, in both languages, must show what a run prints.
        for block in blocks.iter().filter(|b| &b.name == name) {
            let shown = labels(&block.output);
            if SAME_VERDICT_EVERY_RUN.contains(&name.as_str()) && verdicts(&output) != verdicts(&block.output) {
                wrong.push(format!(
                    "{}: the block `{name}` shows {:?}, a run prints {:?}; run `scripts/lessons.sh {}`",
                    block.page.display(),
                    verdicts(&block.output),
                    verdicts(&output),
                    lesson_number(name)
                ));
            }
            if printed != shown {
                wrong.push(format!(
                    "{}: the block `{name}` shows lines a run no longer prints; run `scripts/lessons.sh {}` \
                     (or, if this test ran alone, the debug loadtest may be older than the code: `cargo build -p loadtest`).\n  shown:   {shown:?}\n  printed: {printed:?}",
                    block.page.display(),
                    lesson_number(name)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// When the load test's report last changed, as `YYYY-MM-DD HH:MM` in UTC.
fn report_format_changed() -> String {
    let output = Command::new("git")
        .args([
            "log",
            "-1",
            "--date=format-local:%Y-%m-%d %H:%M",
            "--format=%cd",
            "--",
            "loadtest/src/render/text.rs",
        ])
        .env("TZ", "UTC")
        .current_dir(root())
        .output()
        .expect("git runs");
    let date = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        date.len() == 16,
        "git log gave no date for loadtest/src/render/text.rs: {output:?}"
    );
    date
}

#[test]
fn every_output_with_a_load_test_report_is_newer_than_the_reports_last_change() {
    let changed = report_format_changed();
    let stale: Vec<String> = blocks()
        .iter()
        .filter(|block| block.output.contains("== seckill load test"))
        .filter(|block| block.dated.as_deref().is_none_or(|dated| dated[..16] < *changed))
        .map(|block| {
            format!(
                "{}: the block `{}` was made on {:?}, before the report changed ({changed} UTC): run `scripts/lessons.sh {}`",
                block.page.display(),
                block.name,
                block.dated,
                lesson_number(&block.name)
            )
        })
        .collect();
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
