//! English and Chinese are one course: each lesson and its Chinese twin have the same
//! sections, the same exercises, the same backticked tokens
//! (commands, flags, report labels) and the same verdict words outside their generated
//! blocks; and the Chinese prose types no number its English twin does not (a figure the
//! English stopped retyping, once the block began to show it, must go from both).
//!
//! A page is read as Markdown (pulldown-cmark); what lies between a block's markers, in
//! code blocks, in links' targets and in HTML comments is not prose.

use std::collections::BTreeSet;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The verdict words of a load test.
const VERDICTS: [&str; 4] = ["HELD", "OVERSOLD", "LOST", "WRONG ANSWER"];

/// What a page says outside its generated blocks, as the checks compare it.
#[derive(Debug, Default)]
struct Shape {
    /// `##` and `###` headings, as levels in order.
    sections: Vec<u8>,
    /// Items of the numbered list of each `## Exercises` section.
    exercises: usize,
    /// Inline code spans.
    tokens: BTreeSet<String>,
    /// Verdict words in prose.
    verdicts: BTreeSet<&'static str>,
    /// Numbers in prose (not in code, nor in a link's target).
    numbers: BTreeSet<String>,
}

/// The page split in two: what a person wrote, and what its generated blocks (a lesson's
/// `output`, a page's `latest`) say between their markers.
fn written_and_generated(text: &str) -> (String, String) {
    let (mut written, mut generated) = (text.to_owned(), String::new());
    for kind in ["output", "latest"] {
        let (mut kept, mut rest) = (String::new(), written.as_str());
        let opening = format!("<!-- {kind} ");
        while let Some(at) = rest.find(&opening) {
            kept.push_str(&rest[..at]);
            let after = &rest[at..];
            let name = after[opening.len()..].split(':').next().unwrap_or_default();
            let end = format!("<!-- {kind} {name}: end -->");
            let Some(length) = after.find(&end) else {
                rest = "";
                break;
            };
            generated.push_str(&after[..length]);
            rest = &after[length + end.len()..];
        }
        kept.push_str(rest);
        written = kept;
    }
    (written, generated)
}

/// The page without its generated blocks: only what a person wrote.
fn written_part(text: &str) -> String {
    written_and_generated(text).0
}

fn shape_of(page: &str, exercises_heading: &str) -> Shape {
    let text =
        std::fs::read_to_string(testkit::project_root().join(page)).unwrap_or_else(|error| panic!("{page}: {error}"));
    let text = written_part(&text);
    let mut shape = Shape::default();
    let (mut heading, mut in_exercises, mut depth) = (None::<String>, false, 0usize);
    let mut in_code_block = false;
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(TagEnd::CodeBlock) => in_code_block = false,
            Event::Text(_) if in_code_block => {}
            Event::Start(Tag::Heading { level, .. }) if level <= HeadingLevel::H3 => {
                shape.sections.push(level as u8);
                heading = Some(String::new());
            }
            Event::End(TagEnd::Heading(level)) if level <= HeadingLevel::H3 => {
                let title = heading.take().unwrap_or_default();
                if level == HeadingLevel::H2 {
                    in_exercises = title.trim() == exercises_heading;
                }
            }
            Event::Start(Tag::List(Some(_))) => depth += 1,
            Event::End(TagEnd::List(true)) => depth -= 1,
            Event::Start(Tag::Item) if in_exercises && depth == 1 => shape.exercises += 1,
            Event::Code(code) => {
                shape.tokens.insert(code.to_string());
            }
            Event::Text(prose) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&prose);
                }
                for verdict in VERDICTS {
                    if prose.contains(verdict) {
                        shape.verdicts.insert(verdict);
                    }
                }
                shape.numbers.extend(numbers_in(&prose));
            }
            _ => {}
        }
    }
    shape
}

/// The numbers a text types: runs of digits, with their decimal point; a comma between
/// digits groups thousands (`16,384` is `16384`).
fn numbers_in(text: &str) -> Vec<String> {
    let mut numbers = Vec::new();
    let mut number = String::new();
    let mut chars = text.chars().chain([' ']).peekable();
    while let Some(c) = chars.next() {
        let digit_next = chars.peek().is_some_and(char::is_ascii_digit);
        if c.is_ascii_digit() || (c == '.' && !number.is_empty()) {
            number.push(c);
        } else if c == ',' && !number.is_empty() && digit_next {
            continue;
        } else if !number.is_empty() {
            numbers.push(number.trim_end_matches('.').to_owned());
            number.clear();
        }
    }
    numbers
}

/// Each English lesson with its Chinese twin. (The READMEs are not twins yet: the
/// Chinese one has a column and pages for readers of the Java articles.)
fn twins() -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for entry in std::fs::read_dir(testkit::project_root().join("docs/lessons")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            pairs.push((format!("docs/lessons/{name}"), format!("docs/zh-CN/lessons/{name}")));
        }
    }
    pairs.sort();
    pairs
}

/// Where the two shapes differ, a line each.
fn differences(english: &str, chinese: &str) -> Vec<String> {
    let (en, zh) = (shape_of(english, "Exercises"), shape_of(chinese, "练习"));
    let mut found = Vec::new();
    if en.sections != zh.sections {
        found.push(format!("sections: {:?} against {:?}", en.sections, zh.sections));
    }
    if en.exercises != zh.exercises {
        found.push(format!("exercises: {} against {}", en.exercises, zh.exercises));
    }
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| a.difference(b).cloned().collect::<Vec<_>>();
    for (side, tokens) in [
        ("English", only(&en.tokens, &zh.tokens)),
        ("Chinese", only(&zh.tokens, &en.tokens)),
    ] {
        if !tokens.is_empty() {
            found.push(format!("`code` only in the {side}: {tokens:?}"));
        }
    }
    if en.verdicts != zh.verdicts {
        found.push(format!("verdict words: {:?} against {:?}", en.verdicts, zh.verdicts));
    }
    let typed = only(&zh.numbers, &en.numbers);
    if !typed.is_empty() {
        found.push(format!("numbers the English does not type: {typed:?}"));
    }
    found
        .into_iter()
        .map(|difference| format!("{english} / {chinese}: {difference}"))
        .collect()
}

#[test]
fn the_numbers_of_prose_are_read_with_their_decimal_point_and_nothing_else() {
    assert_eq!(numbers_in("约 4 秒，1.5 s，第 12 课。v2."), ["4", "1.5", "12", "2"]);
    assert_eq!(numbers_in("16,384 slots, 1, 2 and 3"), ["16384", "1", "2", "3"]);
}

#[test]
fn a_generated_block_is_not_part_of_what_a_person_wrote() {
    let page = "a\n<!-- output 01-none: begin (x) -->\nOVERSOLD 7\n<!-- output 01-none: end -->\nb";
    assert_eq!(written_part(page), "a\n\nb");
}

#[test]
fn each_english_page_and_its_chinese_twin_say_the_same_things() {
    let mut found = Vec::new();
    for (english, chinese) in twins() {
        assert!(
            testkit::project_root().join(&chinese).exists(),
            "{english} has no Chinese twin at {chinese}"
        );
        found.extend(differences(&english, &chinese));
    }
    assert!(found.is_empty(), "the twins differ:\n{}", found.join("\n"));
}

/// The numbers a lesson's prose may type: the values its commands set, the ports, the
/// HTTP statuses and goals the code names. Anything else a run prints, and the prose names
/// the line that shows it instead. Counts up to [`SMALL`] (lessons, steps, exercises,
/// masters) are words more than figures, and pass.
const CONFIGURATION_VALUES: &[(&str, &str)] = &[
    ("127.0.0.1", "loopback, where every server and instance listens"),
    ("6379", "the stock Redis's port"),
    ("6380", "the lock Redis's port"),
    ("6486", "a lesson 5 master's port"),
    ("6487", "its replica's port"),
    ("7700", "the lab's port"),
    ("8080", "the first instance's port"),
    ("8090", "the second instance's port"),
    ("100", "a stock the chaos scripts set"),
    ("200", "a crowd the chaos scripts set"),
    ("300", "the stock of the default crowd"),
    ("400", "lesson 14's crowd"),
    ("500", "the default crowd, and a lease in ms"),
    ("8000", "lesson 8's crowd"),
    ("40", "lesson 4's units sold before its second clock jump"),
    ("70", "lesson 4's units sold before its third clock jump"),
    (
        "50",
        "the linger before each write, in ms (--chaos-pause-before-write-ms)",
    ),
    ("250", "PROBE_EVERY, in ms"),
    ("333", "a third of a 1000 ms lease: the renewal period"),
    ("1000", "a lease in ms (--lock-ttl-ms)"),
    ("1500", "a pause the lab's scenarios set, in ms"),
    ("2000", "--degrade-recover-ms in lesson 8"),
    ("3000", "a pause the lab's scenarios set, in ms"),
    ("1.2", "lesson 9's delay of a link, in s (its low end)"),
    (
        "1.5",
        "a pause of three 500 ms leases, and the Sentinels' down-after, in s",
    ),
    ("30", "the default acquire timeout in s, and the smallest TTL in ms"),
    ("64", "--group-max, and the bench's keep-alive connections"),
    ("256", "lesson 12's largest sustained load, in connections"),
    ("5000", "the crowd's spawn rate, buyers a second"),
    ("16384", "the hash slots of a Redis Cluster"),
    ("1000000", "microseconds in a second"),
    ("0.7", "the bench's goal for sustained / protocol bound"),
    ("0.8", "the bench's goal for sustained / backend bound"),
    ("409", "the HTTP status of a repeat buyer"),
    ("503", "the HTTP status of a refused sale"),
    ("504", "the HTTP status of an unknown outcome"),
    ("3.4.3", "the etcd version of Jepsen's analysis"),
];

/// Counts this small are not figures of a run: lesson and step numbers, masters, runs.
const SMALL: f64 = 20.0;

/// The numbers of `page`'s prose that are neither small nor configuration values.
fn figures_in(page: &str) -> BTreeSet<String> {
    let allowed: BTreeSet<&str> = CONFIGURATION_VALUES.iter().map(|(value, _)| *value).collect();
    shape_of(page, "Exercises")
        .numbers
        .into_iter()
        .filter(|number| {
            !number
                .parse::<f64>()
                .is_ok_and(|value| value <= SMALL && value.fract() == 0.0)
        })
        .filter(|number| !allowed.contains(number.as_str()))
        .collect()
}

#[test]
fn the_english_prose_types_no_figure_of_a_run() {
    let mut typed = Vec::new();
    for (english, _) in twins() {
        let figures = figures_in(&english);
        if !figures.is_empty() {
            typed.push(format!("{english}: {figures:?}"));
        }
    }
    assert!(
        typed.is_empty(),
        "prose types numbers that are no configuration value: name the line of the block that shows \
         the figure instead, or add a value a command sets to CONFIGURATION_VALUES, with why:\n{}",
        typed.join("\n")
    );
}

/// Whether `word` stands alone in `text`: in capitals (a report's `verdict:` line), or in
/// small letters on a table's line (a chaos table's verdicts column). Elsewhere small
/// letters are plain English ("nothing lost"), not a verdict.
fn names_the_verdict(text: &str, word: &str) -> bool {
    let alone = |line: &str, spelling: &str| {
        line.match_indices(spelling).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + spelling.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
        })
    };
    text.lines()
        .any(|line| alone(line, word) || (line.starts_with('|') && alone(line, &word.to_lowercase())))
}

#[test]
fn a_verdict_word_the_prose_names_is_one_a_block_of_its_page_shows() {
    let mut unshown = Vec::new();
    for (english, chinese) in twins() {
        for page in [english, chinese] {
            let text = std::fs::read_to_string(testkit::project_root().join(&page)).unwrap();
            let blocks = written_and_generated(&text).1;
            if blocks.is_empty() {
                continue; // a page without blocks (the answers, the course's index) names verdicts of other pages
            }
            for verdict in shape_of(&page, "Exercises").verdicts {
                if !names_the_verdict(&blocks, verdict) {
                    unshown.push(format!(
                        "{page}: its prose says {verdict}, which none of its blocks shows"
                    ));
                }
            }
        }
    }
    assert!(unshown.is_empty(), "{}", unshown.join("\n"));
}

#[test]
fn a_verdict_is_found_alone_in_either_case_and_not_inside_a_word() {
    assert!(names_the_verdict("verdict: HELD: no oversell", "HELD"));
    assert!(names_the_verdict("| 3 | held |", "HELD"));
    assert!(!names_the_verdict("the lock was withheld", "HELD"));
    assert!(!names_the_verdict("nothing LOSTX", "LOST"));
    assert!(!names_the_verdict("verdict: HELD: no oversell, nothing lost", "LOST"));
}
