//! The docs agree with the tree. The configuration page names exactly the options of
//! `seckill serve`; every relative link and anchor in README.md and docs/ resolves; every
//! `make` target and `scripts/` path they name exists; every results block a script
//! publishes is on its page, dated, and publishing rewrites that block and nothing else.
//! No server needed.
//!
//! The pages are read as Markdown (pulldown-cmark), so text inside code spans and code
//! blocks is never taken for a link. `make` targets and `scripts/` paths are looked for
//! only there, where commands are written.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const CONFIGURATION_PAGE: &str = "docs/reference/configuration.md";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// What the checks need from one page.
#[derive(Default)]
struct Page {
    /// Link and image targets, with the line each is on.
    links: Vec<(String, usize)>,
    /// The anchors GitHub gives the page's headings.
    anchors: HashSet<String>,
    /// The text of every code span and code block, with the line it starts on.
    code: Vec<(String, usize)>,
}

fn parse(text: &str) -> Page {
    let mut page = Page::default();
    let mut heading: Option<String> = None;
    let mut code_block: Option<(String, usize)> = None;
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        let line = text[..range.start].matches('\n').count() + 1;
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push((dest_url.into_string(), line));
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let anchor = unique(anchor(&heading.take().unwrap()), &page.anchors);
                page.anchors.insert(anchor);
            }
            Event::Start(Tag::CodeBlock(_)) => code_block = Some((String::new(), line)),
            Event::End(TagEnd::CodeBlock) => page.code.push(code_block.take().unwrap()),
            Event::Text(text) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&text);
                }
                if let Some((code_block, _)) = &mut code_block {
                    code_block.push_str(&text);
                }
            }
            Event::Code(text) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&text);
                }
                page.code.push((text.into_string(), line));
            }
            _ => {}
        }
    }
    page
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped except `-` and `_`,
/// each space a `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A repeated heading gets `-1`, `-2`, ... after its anchor, as GitHub numbers them.
fn unique(anchor: String, taken: &HashSet<String>) -> String {
    std::iter::once(anchor.clone())
        .chain((1..).map(|n| format!("{anchor}-{n}")))
        .find(|candidate| !taken.contains(candidate))
        .unwrap()
}

/// `%E5%AE%89` as `安`: a link may spell a path or an anchor either way.
fn percent_decoded(text: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        let hex = tail.get(..2).and_then(|hex| std::str::from_utf8(hex).ok());
        match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(decoded) if byte == b'%' => {
                bytes.push(decoded);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(byte);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `docs/reference/../../src/http/mod.rs` as `src/http/mod.rs`.
fn normalized(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if normal.file_name().is_some() => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// The words of a text, split where a path or a flag cannot go on.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || "/._-".contains(c)))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| !word.is_empty())
}

/// The options `seckill serve --help` prints: its flags (`--port`) and variables
/// (`SECKILL_PORT`). Run without the test's own `SECKILL_*` variables.
/// The flags and variables of `seckill serve`, `seckill reconcile` and `seckill strategies`.
fn seckill_options() -> BTreeSet<String> {
    let mut options = options_of("serve");
    options.extend(options_of("reconcile"));
    options.extend(options_of("strategies"));
    assert!(
        options.contains("--redis-url") && options.contains("SECKILL_REDIS_URL"),
        "this test no longer reads the variables of the help: {options:?}"
    );
    options
}

fn options_of(subcommand: &str) -> BTreeSet<String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_seckill"));
    command.args([subcommand, "--help"]);
    for (key, _) in std::env::vars() {
        if key.starts_with("SECKILL_") {
            command.env_remove(key);
        }
    }
    let output = command.output().expect("the seckill binary runs");
    assert!(
        output.status.success(),
        "seckill {subcommand} --help failed: {output:?}"
    );
    let help = String::from_utf8(output.stdout).unwrap();
    // An option's own line (`      --port <PORT>`, `  -h, --help`) is indented less than
    // its description, whose wrapped lines may start with a flag too.
    let flags = help
        .lines()
        .filter(|line| line.trim_start().starts_with('-') && line.len() - line.trim_start().len() <= 6)
        .flat_map(words)
        .filter(|word| word.starts_with("--"));
    let variables = help
        .split("[env: ")
        .skip(1)
        .filter_map(|after| after.split_once('=').map(|(name, _)| name));
    let options: BTreeSet<String> = flags.chain(variables).map(str::to_owned).collect();
    assert!(
        options.contains("--help"),
        "this test no longer reads the help's format:\n{help}"
    );
    options
}

/// The flags and `SECKILL_*` variables a page names anywhere.
fn options_named_in(text: &str) -> BTreeSet<String> {
    words(text)
        .filter(|word| {
            word.strip_prefix("--")
                .is_some_and(|flag| flag.starts_with(|c: char| c.is_ascii_lowercase()))
                || word.starts_with("SECKILL_")
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_configuration_page_names_every_flag_and_variable_of_seckill_serve_and_reconcile_and_no_other() {
    let served = seckill_options();
    let named = options_named_in(&read(Path::new(CONFIGURATION_PAGE)));
    let missing: Vec<_> = served.difference(&named).cloned().collect();
    let extra: Vec<_> = named.difference(&served).cloned().collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "update {CONFIGURATION_PAGE} from `seckill serve --help` and `seckill reconcile --help` (src/config.rs):\n  \
         missing from the page: {}\n  named on the page, but not options of seckill: {}",
        missing.join(" "),
        extra.join(" ")
    );
}

#[test]
fn every_relative_link_and_anchor_in_readme_and_docs_resolves() {
    // The anchors of each page a link points into, read once.
    let mut anchors: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    for page_path in testkit::markdown_pages() {
        for (target, line) in parse(&read(&page_path)).links {
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| target.starts_with(scheme))
            {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (percent_decoded(path), Some(percent_decoded(fragment))),
                None => (percent_decoded(&target), None),
            };
            let file = match path.as_str() {
                "" => page_path.clone(),
                absolute if absolute.starts_with('/') => PathBuf::from(&absolute[1..]),
                relative => normalized(&page_path.parent().unwrap().join(relative)),
            };
            let at = format!("{}:{line}: ({target})", page_path.display());
            if !root().join(&file).exists() {
                broken.push(format!("{at}: there is no {}", file.display()));
                continue;
            }
            let Some(fragment) = fragment.filter(|fragment| !fragment.is_empty()) else {
                continue;
            };
            if file.extension().is_none_or(|ext| ext != "md") {
                continue; // an anchor into a source file (`#L10`) is GitHub's, not a heading
            }
            let headings = anchors
                .entry(file.clone())
                .or_insert_with(|| parse(&read(&file)).anchors);
            if !headings.contains(&fragment) {
                broken.push(format!(
                    "{at}: no heading of {} has the anchor #{fragment}",
                    file.display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_make_target_and_script_the_docs_name_exists() {
    let makefile = read(Path::new("Makefile"));
    let targets: HashSet<&str> = makefile
        .lines()
        .filter(|line| !line.starts_with(|c: char| c.is_whitespace() || c == '#' || c == '.'))
        .filter_map(|line| line.split_once(':'))
        .filter(|(_, rest)| !rest.starts_with('='))
        .flat_map(|(names, _)| names.split_whitespace())
        .collect();
    let mut unknown = Vec::new();
    for page_path in testkit::markdown_pages() {
        for (code, line) in parse(&read(&page_path)).code {
            let at = format!("{}:{line}", page_path.display());
            let words: Vec<&str> = words(&code).collect();
            for pair in words.windows(2).filter(|pair| pair[0] == "make") {
                if !pair[1].starts_with('-') && !targets.contains(pair[1]) {
                    unknown.push(format!("{at}: `make {}`: no such target in the Makefile", pair[1]));
                }
            }
            for word in &words {
                let path = word.trim_start_matches("./");
                if path.starts_with("scripts/") && !root().join(path).exists() {
                    unknown.push(format!("{at}: `{path}`: no such file"));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "the docs name what is not there:\n{}",
        unknown.join("\n")
    );
}

/// The blocks the scripts publish into docs/results/ (scripts/lib/publish.sh), as
/// (where the call is, page, block name): each `publish_results "$ROOT/PAGE" NAME` in
/// scripts/ and each `scripts/lib/publish.sh PAGE NAME` in the Makefile.
fn published_blocks() -> Vec<(String, String, String)> {
    let mut sources = vec![PathBuf::from("Makefile")];
    for entry in std::fs::read_dir(root().join("scripts")).unwrap() {
        let path = PathBuf::from("scripts").join(entry.unwrap().file_name());
        if path.extension().is_some_and(|ext| ext == "sh") {
            sources.push(path);
        }
    }
    let mut blocks = Vec::new();
    for source in sources {
        for (number, line) in read(&source).lines().enumerate() {
            let call = line
                .split_once("publish_results \"$ROOT/")
                .or_else(|| line.split_once("scripts/lib/publish.sh "));
            let Some((_, rest)) = call else { continue };
            let mut words = rest
                .split(|c: char| c.is_whitespace() || c == '"')
                .filter(|word| !word.is_empty());
            let (Some(page), Some(name)) = (words.next(), words.next()) else {
                continue;
            };
            blocks.push((
                format!("{}:{}", source.display(), number + 1),
                page.to_owned(),
                name.to_owned(),
            ));
        }
    }
    blocks
}

#[test]
fn every_results_block_a_script_publishes_is_on_its_page_once_with_its_date_and_command() {
    let blocks = published_blocks();
    let names: BTreeSet<&str> = blocks.iter().map(|(_, _, name)| name.as_str()).collect();
    for expected in [
        "demo",
        "bench",
        "bench-servers",
        "bench-breakdown",
        "bench-past-one-lock",
        "lockbench",
        "chaos",
        "clock-jump",
        "torture",
        "torture-unsafe",
    ] {
        assert!(
            names.contains(expected),
            "no script publishes `{expected}` (found {names:?})"
        );
    }
    let mut wrong = Vec::new();
    for (call, page, name) in &blocks {
        let Ok(text) = std::fs::read_to_string(root().join(page)) else {
            wrong.push(format!("{call}: publishes into {page}, which does not exist"));
            continue;
        };
        let begin = format!("<!-- latest {name}: begin");
        let end = format!("<!-- latest {name}: end -->");
        let lines: Vec<&str> = text.lines().collect();
        let at = |is: &dyn Fn(&str) -> bool| -> Vec<usize> { (0..lines.len()).filter(|&i| is(lines[i])).collect() };
        let (begins, ends) = (at(&|line| line.starts_with(&begin)), at(&|line| line == end));
        let ([first], [last]) = (begins.as_slice(), ends.as_slice()) else {
            wrong.push(format!(
                "{page}: needs one `{begin} ... -->` line and one `{end}` line for {call} (has {} and {})",
                begins.len(),
                ends.len()
            ));
            continue;
        };
        let inside = lines.get(first + 1..*last).unwrap_or_default();
        let dated = inside.iter().any(|line| {
            line.starts_with("Latest run: `")
                && line
                    .split(|c: char| !(c.is_ascii_digit() || c == '-'))
                    .any(|word| word.len() == 10 && word.as_bytes()[4] == b'-' && word.as_bytes()[7] == b'-')
        });
        if first >= last || !dated {
            wrong.push(format!(
                "{page}: the `{name}` block must hold a \"Latest run: `command`, YYYY-MM-DD ...\" line"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Runs scripts/lib/publish.sh on a page of a temporary folder.
fn publish(folder: &Path, publish: bool, name: &str) -> std::process::Output {
    let mut command = Command::new("bash");
    command
        .arg(root().join("scripts/lib/publish.sh"))
        .args(["page.md", name, "scripts/demo.sh none", "table.md"])
        .current_dir(folder)
        .env_remove("PUBLISH");
    if publish {
        command.env("PUBLISH", "1");
    }
    command.output().expect("bash runs scripts/lib/publish.sh")
}

const PAGE_WITH_TWO_BLOCKS: &str = "# A results page\n\nNotes before.\n\n\
<!-- latest demo: begin (old comment) -->\n\nLatest run: `make demo`, 2026-01-01.\n\n| old | table |\n\n\
<!-- latest demo: end -->\n\nNotes after, on the run of 2026-01-01.\n\n\
<!-- latest other: begin -->\n\n| other | table |\n\n<!-- latest other: end -->\n";

/// A temporary folder with `page.md` (PAGE_WITH_TWO_BLOCKS) and the `table.md` of a new run.
fn a_page_with_two_blocks_and_a_new_table() -> tempfile::TempDir {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("page.md"), PAGE_WITH_TWO_BLOCKS).unwrap();
    std::fs::write(folder.path().join("table.md"), "| new | table |\n").unwrap();
    folder
}

#[test]
fn publishing_a_run_rewrites_its_block_and_leaves_the_notes_and_other_blocks_as_they_were() {
    let folder = a_page_with_two_blocks_and_a_new_table();

    let output = publish(folder.path(), false, "demo");
    assert!(output.status.success());
    let page = std::fs::read_to_string(folder.path().join("page.md")).unwrap();
    assert_eq!(
        page, PAGE_WITH_TWO_BLOCKS,
        "without PUBLISH=1 the page must stay as it was"
    );

    let output = publish(folder.path(), true, "demo");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let page = std::fs::read_to_string(folder.path().join("page.md")).unwrap();
    let today = String::from_utf8(Command::new("date").args(["-u", "+%F"]).output().unwrap().stdout).unwrap();
    let (before, rest) = page.split_once("<!-- latest demo: begin").unwrap();
    let (block, after) = rest.split_once("<!-- latest demo: end -->\n").unwrap();
    assert_eq!(before, "# A results page\n\nNotes before.\n\n");
    assert!(
        block.contains("| new | table |"),
        "the new table is in the block:\n{block}"
    );
    assert!(!block.contains("old"), "nothing of the old block is left:\n{block}");
    assert!(
        block.contains(&format!("Latest run: `scripts/demo.sh none`, {}", today.trim())),
        "the block says what ran and when:\n{block}"
    );
    assert_eq!(
        after,
        "\nNotes after, on the run of 2026-01-01.\n\n<!-- latest other: begin -->\n\n| other | table |\n\n<!-- latest other: end -->\n"
    );
}

/// `command_line` of scripts/lib/publish.sh, as a script run with `env` would say its own command.
fn command_line(env: &[(&str, &str)]) -> String {
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; command_line BENCH_RUNS -- scripts/bench.sh redis",
            root().join("scripts/lib/publish.sh").display()
        ))
        .env_remove("BENCH_RUNS")
        .env_remove("COMMAND_AS")
        .envs(env.iter().copied())
        .output()
        .expect("bash runs scripts/lib/publish.sh");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_published_block_names_the_command_the_reader_typed_make_target_or_script() {
    assert_eq!(
        command_line(&[("BENCH_RUNS", "1")]),
        "BENCH_RUNS=1 scripts/bench.sh redis"
    );
    assert_eq!(
        command_line(&[("BENCH_RUNS", "1"), ("COMMAND_AS", "make bench")]),
        "BENCH_RUNS=1 make bench",
        "the Makefile's bench target says so in COMMAND_AS"
    );
    let makefile = read(Path::new("Makefile"));
    for target in ["demo", "bench", "chaos", "clock-jump"] {
        assert!(
            makefile.contains(&format!("COMMAND_AS=\"make {target}\" scripts/{target}.sh")),
            "`make {target}` publishes under its own name, as each script that publishes says its command"
        );
    }
}

#[test]
fn publishing_into_a_page_without_the_block_refuses_names_the_markers_and_changes_nothing() {
    let folder = a_page_with_two_blocks_and_a_new_table();

    let output = publish(folder.path(), true, "bench");
    assert!(
        !output.status.success(),
        "a page without the `bench` block must be refused"
    );
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("<!-- latest bench: begin") && message.contains("<!-- latest bench: end -->"),
        "the message names the markers to add: {message}"
    );
    let page = std::fs::read_to_string(folder.path().join("page.md")).unwrap();
    assert_eq!(page, PAGE_WITH_TWO_BLOCKS);
}

/// A landing page a reader takes in at once: the READMEs say what the project is, run the
/// five minutes and point into docs/. The rest lives there.
const LANDING_PAGE_LINES: usize = 250;
/// A results page: its dated block and how to read it. What each column means lives in
/// docs/reference/, the full tables in the HTML report the run writes; about 150 lines,
/// with room for a row or two more in a block before a table must move.
const RESULTS_PAGE_LINES: usize = 160;

#[test]
fn the_landing_pages_and_the_results_pages_stay_short() {
    let mut long = Vec::new();
    let mut pages: Vec<(PathBuf, usize)> = ["README.md", "docs/zh-CN/README.md"]
        .iter()
        .map(|page| (PathBuf::from(page), LANDING_PAGE_LINES))
        .collect();
    for entry in std::fs::read_dir(root().join("docs/results")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "md") {
            pages.push((path.strip_prefix(root()).unwrap().to_path_buf(), RESULTS_PAGE_LINES));
        }
    }
    assert!(pages.len() > 4, "found only {pages:?}");
    for (page, most) in pages {
        let lines = read(&page).lines().count();
        if lines > most {
            long.push(format!(
                "{} is {lines} lines, past {most}: move what a reader does not need first into docs/",
                page.display()
            ));
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}
