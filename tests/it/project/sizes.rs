//! No file a newcomer reads runs past [`MOST_LINES_A_FILE`] lines, no function past
//! [`MOST_LINES_A_FN`] (declarative tables aside), in the service's, the load test's,
//! testkit's and the lab's `src/`. What is longer today is listed in [`DEBT`] at its size:
//! it may not grow, and once split below the bound its line must go.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MOST_LINES_A_FILE: usize = 700;
const MOST_LINES_A_FN: usize = 60;

/// The trees a reader opens, from the project's root.
const TREES: [&str; 4] = ["src", "loadtest/src", "testkit/src", "lab/src"];

/// Functions that are tables more than code: one entry a line.
const TABLES: [&str; 2] = [
    "lab/src/scenarios.rs::all", // the guided scenarios, one struct literal each
    "src/metrics.rs::new",       // every metric registered, one a few lines
];

/// What was longer than the bounds when this test came (issue 53), at that size.
const DEBT: &[(&str, usize)] = &[];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under the trees, from the project's root.
fn rust_files() -> Vec<PathBuf> {
    TREES
        .iter()
        .flat_map(|tree| super::layout::files_in(&root().join(tree)))
        .map(|path| path.strip_prefix(root()).unwrap().to_path_buf())
        .collect()
}

/// `code` without a leading `pub(...) ` (`pub(crate)`, `pub(super)`, `pub(in path)`).
fn without_restriction(code: &str) -> &str {
    code.strip_prefix("pub(")
        .and_then(|rest| Some(rest[rest.find(')')? + 1..].trim_start()))
        .unwrap_or(code)
}

/// The functions of `source` with a body, and their lengths in lines: from the `fn`
/// line to the `}` at its indentation.
fn functions_in(source: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let after_qualifiers = ["pub ", "async ", "const ", "unsafe "]
            .iter()
            .fold(without_restriction(code), |rest, word| {
                rest.strip_prefix(word).unwrap_or(rest)
            });
        let Some(signature) = after_qualifiers.strip_prefix("fn ") else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue; // a trait's declaration, no body
        }
        let name: String = signature
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let closing = format!("{indent}}}");
        if let Some(length) = lines[at + 1..].iter().position(|line| *line == closing) {
            found.push((name, length + 2));
        }
    }
    found
}

#[test]
fn a_function_is_measured_from_its_fn_line_to_its_closing_brace() {
    let source = "fn short() {\n    1\n}\n\npub async fn longer(x: u8) -> u8 {\n    let y = x;\n    y\n}\n    \
         fn declared();\n    pub(in crate::sale) async fn restricted() {\n    }\n";
    assert_eq!(
        functions_in(source),
        [
            ("short".to_owned(), 3),
            ("longer".to_owned(), 4),
            ("restricted".to_owned(), 2)
        ]
    );
}

#[test]
fn no_file_nor_function_a_newcomer_reads_grows_past_its_bound() {
    let debt: BTreeMap<&str, usize> = DEBT.iter().copied().collect();
    let mut over = Vec::new();
    let mut paid = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for file in rust_files() {
        let source = std::fs::read_to_string(root().join(&file)).unwrap();
        let file = file.display().to_string();
        let mut sizes = vec![(file.clone(), source.lines().count(), MOST_LINES_A_FILE)];
        for (name, length) in functions_in(&source) {
            sizes.push((format!("{file}::{name}"), length, MOST_LINES_A_FN));
        }
        for (what, length, bound) in sizes {
            seen.insert(what.clone());
            if TABLES.contains(&what.as_str()) {
                continue;
            }
            match debt.get(what.as_str()) {
                Some(&owed) if length > owed => over.push(format!(
                    "{what}: {length} lines, grown past the {owed} it had: split it"
                )),
                Some(_) if length <= bound => paid.push(format!("{what}: {length} lines, within {bound} now")),
                Some(_) => {}
                None if length > bound => over.push(format!("{what}: {length} lines, past {bound}: split it")),
                None => {}
            }
        }
    }
    assert!(seen.len() > 500, "measured only {} files and functions", seen.len());
    let unmeasured: Vec<&str> = debt.keys().filter(|what| !seen.contains(**what)).copied().collect();
    assert!(
        unmeasured.is_empty(),
        "DEBT names what no tree has (moved or renamed? follow it, or take it out): {unmeasured:?}"
    );
    assert!(over.is_empty(), "too long:\n{}", over.join("\n"));
    assert!(
        paid.is_empty(),
        "take these lines out of DEBT, they are paid:\n{}",
        paid.join("\n")
    );
}
