//! Every Mermaid diagram in the docs renders. GitHub draws a ```` ```mermaid ```` block as a
//! picture, and a block Mermaid cannot parse as an error box, so this test finds every
//! such block in README.md and every `.md` under docs/ (by scanning: new pages and new
//! diagrams are found without a list) and renders each one with Mermaid's own package,
//! in Debian's headless chromium (`tests/browser/diagrams.mjs`, Mermaid pinned in
//! `tests/browser/package-lock.json`). A failure names the page, the line and Mermaid's
//! error. No server needed.
//!
//! The pages are read as Markdown (pulldown-cmark), so a fence inside another block, or
//! the word `mermaid` in prose, is not taken for a diagram.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One diagram: where its fence opens, and what is inside it.
#[derive(Debug, PartialEq)]
struct Diagram {
    page: String,
    line: usize,
    source: String,
}

/// The code blocks of `text` whose info string is `mermaid`, as GitHub picks them.
fn diagrams_in(page: &str, text: &str) -> Vec<Diagram> {
    let mut found = Vec::new();
    let mut open: Option<Diagram> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info)))
                if info.split_whitespace().next() == Some("mermaid") =>
            {
                open = Some(Diagram {
                    page: page.to_owned(),
                    line: text[..range.start].matches('\n').count() + 1,
                    source: String::new(),
                });
            }
            Event::Text(text) => {
                if let Some(diagram) = &mut open {
                    diagram.source.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => found.extend(open.take()),
            _ => {}
        }
    }
    found
}

/// The words a reader sees in a diagram, read from its source without Mermaid, one line
/// of a label each: in a sequence diagram the participants' names, the messages, the
/// notes and the blocks' labels; in a flowchart the quoted labels and the edges' labels.
fn labels_of(source: &str) -> Vec<String> {
    let mut lines = source.lines().map(str::trim).filter(|line| !line.is_empty());
    let kind = lines.next().unwrap_or_default();
    let labels: Vec<&str> = if kind.starts_with("sequenceDiagram") {
        lines.filter_map(sequence_label).collect()
    } else {
        lines.flat_map(flowchart_labels).collect()
    };
    labels
        .iter()
        .flat_map(|label| label.split("<br/>"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|line| !line.is_empty())
        .collect()
}

/// The label of one line of a sequence diagram, if it shows one.
fn sequence_label(line: &str) -> Option<&str> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    match word {
        "participant" | "actor" => Some(rest.split_once(" as ").map_or(rest, |(_, name)| name)),
        "alt" | "else" | "loop" | "opt" | "par" | "and" | "critical" | "break" => Some(rest),
        "rect" | "end" | "autonumber" | "activate" | "deactivate" => None,
        _ => line.split_once(':').map(|(_, text)| text), // a note or a message
    }
}

/// The labels on one line of a flowchart: each `"quoted"` text, and each `|edge label|`.
fn flowchart_labels(line: &str) -> Vec<&str> {
    let mut labels: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    let unquoted = line.split('"').step_by(2).collect::<Vec<_>>().join("\"");
    labels.extend(
        line.split('|')
            .skip(1)
            .step_by(2)
            .filter(|edge| !edge.starts_with('"') && unquoted.contains(&format!("|{edge}|"))),
    );
    labels
}

#[test]
fn the_labels_of_a_diagram_are_read_from_its_source_line_by_line() {
    let sequence = "sequenceDiagram\n  participant A as buyer on 8080\n  participant R\n  \
                    A->>R: read stock\n  R-->>A: 5\n  Note over A,R: one unit: sold twice\n  \
                    alt fencing on\n    R-xA: fenced\n  end\n  rect rgb(1, 2, 3)\n  end\n";
    assert_eq!(
        labels_of(sequence),
        [
            "buyer on 8080",
            "R",
            "read stock",
            "5",
            "one unit: sold twice",
            "fencing on",
            "fenced"
        ]
    );
    let flowchart = "flowchart LR\n  LT[\"load test<br/>500 buyers\"] -->|GET /stock/reduce| APP\n  \
                     APP -->|\"grant, release\"| ST[(\"stock Redis\")]\n";
    assert_eq!(
        labels_of(flowchart),
        [
            "load test",
            "500 buyers",
            "GET /stock/reduce",
            "grant, release",
            "stock Redis"
        ]
    );
}

#[test]
fn the_finder_takes_mermaid_fences_only_with_the_line_they_open_on() {
    let text = "# A page\n\nThe word mermaid, and `mermaid` in a span.\n\n\
                ```mermaid\nflowchart LR\n  A --> B\n```\n\n\
                ```rust\nlet x = 1;\n```\n\n\
                > ```mermaid\n> sequenceDiagram\n>   A->>B: hi\n> ```\n";
    let found = diagrams_in("page.md", text);
    assert_eq!(
        found,
        [
            Diagram {
                page: "page.md".into(),
                line: 5,
                source: "flowchart LR\n  A --> B\n".into()
            },
            Diagram {
                page: "page.md".into(),
                line: 14,
                source: "sequenceDiagram\n  A->>B: hi\n".into()
            },
        ]
    );
}

#[test]
fn every_mermaid_diagram_in_the_docs_renders() {
    let browser = root().join("tests/browser");
    assert!(
        ["mermaid", "playwright-core"]
            .iter()
            .all(|package| browser.join("node_modules").join(package).is_dir())
            && Path::new("/usr/bin/chromium").exists(),
        "the diagrams test needs Debian's chromium, playwright-core and mermaid: \
         `scripts/services.sh install` installs all three"
    );
    let pages = testkit::markdown_pages();
    let diagrams: Vec<Diagram> = pages
        .iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(root().join(page)).unwrap();
            diagrams_in(&page.display().to_string(), &text)
        })
        .collect();
    assert!(
        !diagrams.is_empty(),
        "no ```mermaid block in any of the {} pages (README.md and docs/); \
         the finder is broken, or the diagrams are gone",
        pages.len()
    );

    let input = serde_json::Value::Array(
        diagrams
            .iter()
            .map(|diagram| {
                serde_json::json!({
                    "page": diagram.page,
                    "line": diagram.line,
                    "source": diagram.source,
                    "labels": labels_of(&diagram.source),
                })
            })
            .collect(),
    );
    let mut node = Command::new("node")
        .arg(browser.join("diagrams.mjs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs (Node.js 20 or newer)");
    node.stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = node.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "Mermaid could not render every diagram, or drew one without its nodes or labels \
         (page:line of the fence, then what went wrong):\n{stderr}{stdout}"
    );
    assert_eq!(
        stdout.trim(),
        format!("rendered {} diagrams", diagrams.len()),
        "the script renders every diagram it is given"
    );
    println!("{} diagrams in {} pages rendered", diagrams.len(), pages.len());
}
