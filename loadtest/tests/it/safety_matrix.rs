//! The teacher's safety matrix (docs/teach/safety-matrix.md and its Chinese twin) shows
//! what `loadtest safety-matrix` prints from the published chaos table: it is never
//! typed, and a new `make chaos` cannot leave it behind.

use std::path::Path;

fn read(page: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(page)).unwrap_or_else(|error| panic!("{page}: {error}"))
}

/// The table between the page's markers.
fn block_of(page: &str) -> String {
    let text = read(page);
    let begin = text
        .find("<!-- safety matrix: begin")
        .unwrap_or_else(|| panic!("{page} has no block"));
    let end = text
        .find("<!-- safety matrix: end -->")
        .unwrap_or_else(|| panic!("{page}: no end"));
    let block = &text[begin..end];
    block
        .lines()
        .filter(|line| line.starts_with('|'))
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn both_pages_show_the_matrix_of_the_published_chaos_table() {
    let rows = loadtest::chaos::matrix::measured(&read("docs/results/chaos.md"));
    assert!(rows.len() > 50, "the chaos table has {} rows", rows.len());
    let matrix = loadtest::chaos::matrix::matrix(&rows);
    for page in ["docs/teach/safety-matrix.md", "docs/zh-CN/teach/safety-matrix.md"] {
        assert_eq!(
            block_of(page),
            matrix,
            "{page} is not the matrix of docs/results/chaos.md: run \
             `source scripts/lib/publish.sh; source scripts/lib/safety-matrix.sh; publish_safety_matrix`"
        );
    }
}
