//! The break-it exercises stay true: each marked line is in its file once, each row
//! names a test of this suite, and the students' page, in both languages, names every
//! line and every row the grade runs (`make grade`, testkit::break_it).

use testkit::break_it::{row, EXERCISES, ROWS};

const PAGES: [&str; 2] = ["docs/teach/break-it.md", "docs/zh-CN/teach/break-it.md"];

fn read(relative: &str) -> String {
    std::fs::read_to_string(testkit::project_root().join(relative))
        .unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

#[test]
fn each_exercises_line_is_marked_once_in_its_file() {
    for exercise in EXERCISES {
        let marker = exercise.marker();
        let marked = read(exercise.file)
            .lines()
            .filter(|line| line.trim_end().ends_with(&marker))
            .count();
        assert_eq!(
            marked, 1,
            "`{marker}` ends {marked} lines of {}, not one",
            exercise.file
        );
    }
}

#[test]
fn each_row_is_a_test_of_this_suite_and_each_answer_a_row() {
    for each in ROWS {
        let path: Vec<&str> = each.test.split("::").collect();
        let (module, function) = (&path[..2], path[path.len() - 1]);
        let file = format!("tests/it/{}/{}.rs", module[0], module[1]);
        assert!(
            read(&file).contains(&format!("fn {function}(")),
            "the row `{}` names {}, and {file} has no fn {function}",
            each.name,
            each.test
        );
    }
    for exercise in EXERCISES {
        for name in exercise.breaks {
            assert!(
                row(name).is_some(),
                "{}'s key names `{name}`, which is no row",
                exercise.name
            );
        }
    }
}

#[test]
fn the_students_page_names_every_line_and_every_row_in_both_languages() {
    for page in PAGES {
        let text = read(page);
        let mut missing: Vec<String> = Vec::new();
        for exercise in EXERCISES {
            for needed in [exercise.marker(), exercise.file.to_owned()] {
                if !text.contains(&needed) {
                    missing.push(needed);
                }
            }
        }
        for each in ROWS {
            for needed in [format!("| {} |", each.name), format!("`{}`", each.test)] {
                if !text.contains(&needed) {
                    missing.push(needed);
                }
            }
        }
        assert!(missing.is_empty(), "{page} does not name: {missing:#?}");
    }
}
