//! The API docs cite the specifications through `tikv_plan::spec` (the
//! `docs/*.md` pages included as documentation), never through a file
//! outside the published package. rustdoc checks that an intra-doc link's
//! item exists but not its `#section` fragment; this checks both that each
//! fragment names a heading of its page and that no doc comment names a
//! markdown file the package does not ship.

use std::path::{Path, PathBuf};

use crate::source_files::rust_files;

/// The pages of `tikv_plan::spec`, by module name.
const PAGES: [&str; 4] = ["routing", "txn", "wire", "behaviours"];

/// The id rustdoc gives a heading: its text lowercased, ASCII whitespace
/// turned into `-`, and everything but letters, digits, `-` and `_`
/// dropped (so markdown such as `**`, `\[` and backticks disappears too).
fn heading_id(text: &str) -> String {
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c.is_ascii_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}

/// The heading ids of a markdown page (headings inside code blocks are
/// not headings).
fn heading_ids(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut ids = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            ids.push(heading_id(line.trim_start_matches('#')));
        }
    }
    ids
}

/// Each file's doc comments (`///` and `//!`), one string per run of
/// consecutive doc-comment lines, with the comment markers removed.
fn doc_blocks(root: &Path) -> Vec<(PathBuf, String)> {
    let files = rust_files(&root.join("src"));
    let mut blocks = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        let mut block = String::new();
        for line in source.lines() {
            let trimmed = line.trim_start();
            match trimmed
                .strip_prefix("///")
                .or_else(|| trimmed.strip_prefix("//!"))
            {
                Some(text) => {
                    block.push_str(text);
                    block.push('\n');
                }
                None if !block.is_empty() => {
                    blocks.push((file.clone(), std::mem::take(&mut block)))
                }
                None => {}
            }
        }
        if !block.is_empty() {
            blocks.push((file, block));
        }
    }
    blocks
}

/// The `(page, fragment)` of every `crate::spec::page#fragment` link target
/// in `text`, and `text` with every `[...](crate::spec::...)` link removed.
fn spec_links(text: &str) -> (Vec<(String, String)>, String) {
    const TARGET: &str = "](crate::spec::";
    let mut links = Vec::new();
    let mut rest = String::new();
    let mut tail = text;
    while let Some(at) = tail.find(TARGET) {
        let (before, after) = tail.split_at(at);
        // Drop the link text: back to its opening bracket.
        let open = before.rfind('[').expect("a link target without its text");
        rest.push_str(&before[..open]);
        let after = &after[TARGET.len()..];
        let close = after.find(')').expect("an unclosed link target");
        let target = &after[..close];
        let (page, fragment) = target.split_once('#').unwrap_or((target, ""));
        links.push((page.to_owned(), fragment.to_owned()));
        tail = &after[close + 1..];
    }
    rest.push_str(tail);
    (links, rest)
}

#[test]
fn heading_ids_follow_rustdoc() {
    // The ids rustdoc 1.95 generated for these headings of the spec pages.
    assert_eq!(
        heading_id(" Store health **\\[beyond\\]**"),
        "store-health-beyond"
    );
    assert_eq!(
        heading_id(" ServerIsBusy(0) follower probe"),
        "serverisbusy0-follower-probe"
    );
    assert_eq!(
        heading_id(" Transactional kvrpcpb (for `txn.md`)"),
        "transactional-kvrpcpb-for-txnmd"
    );
    assert_eq!(
        heading_id(" Known upstream defects not to copy (client-rust 0.4.0)"),
        "known-upstream-defects-not-to-copy-client-rust-040"
    );
}

#[test]
fn spec_links_name_a_page_and_one_of_its_headings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for (file, block) in doc_blocks(root) {
        for (page, fragment) in spec_links(&block).0 {
            assert!(
                PAGES.contains(&page.as_str()),
                "{}: a link to crate::spec::{page}, which is not a spec page ({PAGES:?})",
                file.display()
            );
            if fragment.is_empty() {
                continue;
            }
            let markdown = std::fs::read_to_string(root.join(format!("docs/{page}.md"))).unwrap();
            let ids = heading_ids(&markdown);
            assert!(
                ids.contains(&fragment),
                "{}: crate::spec::{page}#{fragment} names no heading of docs/{page}.md; \
                 its headings are {ids:?}",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} section links found");
}

#[test]
fn doc_comments_name_only_markdown_files_in_the_package() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, block) in doc_blocks(root) {
        let (_, rest) = spec_links(&block);
        for word in rest.split(|c: char| c.is_whitespace() || "`()[],;:\"'".contains(c)) {
            let word = word.trim_end_matches('.');
            if !word.ends_with(".md") {
                continue;
            }
            assert!(
                !word.contains("..") && root.join(word).is_file(),
                "{}: the doc comment names `{word}`, which is not a file of the package; \
                 link the spec page instead ([{word}](crate::spec::...))\n{block}",
                file.display()
            );
        }
    }
}
