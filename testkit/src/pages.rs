//! The project's Markdown pages, which the docs, lessons and diagrams tests read.

use std::path::PathBuf;

use super::test_redis::project_root;

/// README.md and every `.md` under docs/, as paths from the project's root, sorted.
pub fn markdown_pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut folders = vec![PathBuf::from("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(project_root().join(&folder)).unwrap() {
            let path = folder.join(entry.unwrap().file_name());
            if project_root().join(&path).is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}
