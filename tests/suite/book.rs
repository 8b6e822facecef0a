//! The book's code runs as doc tests (`src/lib.rs` includes each chapter under
//! `cfg(doctest)`); these tests keep it that way as chapters are added, and check the links
//! between its pages (so the book builds with mdBook alone).

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
    resolve(&path, included)
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

/// Every `.md` file under `book/src`, as a path relative to the repository.
fn book_files() -> Vec<String> {
    fn walk(dir: &std::path::Path, rel: &str, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                walk(&path, &format!("{rel}/{name}"), out);
            } else if name.ends_with(".md") {
                out.push(format!("{rel}/{name}"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_file("book/src"), "book/src", &mut out);
    out
}

/// `path` (relative to the repository) resolved against the folder of the file `from`.
fn resolve(from: &str, path: &str) -> String {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for part in path.split('/') {
        match part {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            part => parts.push(part),
        }
    }
    parts.join("/")
}

/// The text mdBook renders for the file `path`: its own, or the file it includes.
fn rendered(path: &str) -> String {
    read(&source_of(path.trim_start_matches("book/src/")))
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchors mdBook 0.4 gives a page's headings (its `normalize_id`: alphanumerics, `_` and
/// `-` kept and lowercased, white space to `-`, the rest dropped).
fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .chars()
                .filter_map(|c| match c {
                    c if c.is_alphanumeric() || c == '_' || c == '-' => {
                        Some(c.to_ascii_lowercase())
                    }
                    c if c.is_whitespace() => Some('-'),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The targets of the Markdown links and images on `line`: `[text](target)`.
fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            Some(&rest[..rest.find(')')?])
        })
        .collect()
}

/// What `mdbook build` checked with mdbook-linkcheck: every link inside the book reaches a file,
/// and a link's `#anchor` a heading of its page. Links to the web are not followed.
#[test]
fn every_link_in_the_book_reaches_its_page_and_anchor() {
    let files = book_files();
    assert!(files.len() >= 20, "{files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = rendered(file);
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let page = if path.is_empty() {
                    file.clone()
                } else {
                    resolve(file, path)
                };
                if !repo_file(&page).is_file() {
                    broken.push(format!("{file}: `{target}`: no file {page}"));
                } else if !anchor.is_empty()
                    && !anchors(&rendered(&page)).iter().any(|a| a == anchor)
                {
                    broken.push(format!(
                        "{file}: `{target}`: no heading #{anchor} in {page}"
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 50,
        "only {checked} links found: is the parser still right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The checker itself: a heading's anchor, a link's target, a path resolved as mdBook does.
#[test]
fn the_link_checker_reads_links_and_anchors_as_mdbook() {
    assert_eq!(
        anchors("# Racing Burn's fused matmul"),
        ["racing-burns-fused-matmul"]
    );
    assert_eq!(
        anchors("## No GPU: lavapipe\n```\n# not a heading\n```"),
        ["no-gpu-lavapipe"]
    );
    assert_eq!(anchors("### `FusionStats`"), ["fusionstats"]);
    assert_eq!(
        link_targets("see [a](./a.md#x) and ![b](images/b.png)"),
        ["./a.md#x", "images/b.png"]
    );
    assert_eq!(
        resolve("book/src/decisions/0001.md", "../walkthrough.md"),
        "book/src/walkthrough.md"
    );
}
