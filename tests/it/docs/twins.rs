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

/// The page without its generated blocks: only what a person wrote.
fn written_part(text: &str) -> String {
    let mut kept = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("<!-- output ") {
        kept.push_str(&rest[..at]);
        let after = &rest[at..];
        let name = after["<!-- output ".len()..].split(':').next().unwrap_or_default();
        let end = format!("<!-- output {name}: end -->");
        rest = after.find(&end).map_or("", |length| &after[length + end.len()..]);
    }
    kept.push_str(rest);
    kept
}

fn shape_of(page: &str, exercises_heading: &str) -> Shape {
    let text =
        std::fs::read_to_string(testkit::project_root().join(page)).unwrap_or_else(|error| panic!("{page}: {error}"));
    let text = written_part(&text);
    let mut shape = Shape::default();
    let (mut heading, mut in_exercises, mut depth) = (None::<String>, false, 0usize);
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
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
