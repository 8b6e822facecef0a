//! The book's code runs as doc tests (`src/lib.rs` includes each chapter under
//! `cfg(doctest)`); these tests keep it that way as chapters are added.

use super::common::repo_file;

fn read(path: &str) -> String {
    let full = repo_file(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The chapter files `SUMMARY.md` links to.
fn chapters() -> Vec<String> {
    read("book/src/SUMMARY.md")
        .lines()
        .filter_map(|line| {
            let start = line.find("](./")? + 4;
            let end = start + line[start..].find(')')?;
            Some(line[start..end].to_string())
        })
        .collect()
}

/// The repository file that holds `chapter`'s text: the chapter itself, or the file it is only
/// an mdBook `{{#include}}` of (the decision records live in `docs/decisions/`).
fn source_of(chapter: &str) -> String {
    let path = format!("book/src/{chapter}");
    let text = read(&path);
    let Some(included) = text
        .trim()
        .strip_prefix("{{#include ")
        .and_then(|rest| rest.strip_suffix("}}"))
    else {
        return path;
    };
    // Resolve `included` against the chapter's folder, as mdBook does.
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    for part in included.split('/') {
        match part {
            ".." => {
                parts.pop();
            }
            "." => {}
            part => parts.push(part),
        }
    }
    parts.join("/")
}

#[test]
fn every_chapter_runs_as_a_doc_test() {
    let lib = read("src/lib.rs");
    let chapters = chapters();
    assert!(chapters.len() >= 8, "{chapters:?}");
    for chapter in chapters {
        let include = format!("include_str!(\"../{}\")", source_of(&chapter));
        assert!(
            lib.contains(&include),
            "src/lib.rs does not include {chapter}"
        );
    }
}

#[test]
fn no_rust_block_in_the_book_is_skipped() {
    for chapter in chapters() {
        for line in read(&source_of(&chapter)).lines() {
            let fence = line.trim_start();
            let skipped = ["ignore", "no_run", "compile_fail"]
                .iter()
                .any(|flag| fence.starts_with("```rust") && fence.contains(flag));
            assert!(!skipped, "{chapter}: `{line}` is not run by the doc tests");
        }
    }
}
