//! The user-facing pages (README.md and docs/*.md) hold together: every
//! page's code blocks are compiled as doc tests (each page is included by
//! `src/spec.rs` or `src/guide.rs`, README by `src/lib.rs`), every relative
//! link reaches a file (and a heading, when it names one), README stays a
//! front page, and the pages carry no internal bookkeeping (issue numbers,
//! the maintainers' folders, commit hashes as history).

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages.push(root().join("README.md"));
    pages
}

/// The id rustdoc and GitHub give a heading: lowercased, spaces to `-`,
/// everything but letters, digits, `-` and `_` dropped.
fn heading_id(text: &str) -> String {
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_ascii_lowercase())
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// A page's text outside code blocks, line by line.
fn prose(markdown: &str) -> Vec<&str> {
    let mut in_code = false;
    let mut lines = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code {
            lines.push(line);
        }
    }
    lines
}

fn headings(markdown: &str) -> Vec<String> {
    prose(markdown)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| heading_id(l.trim_start_matches('#')))
        .collect()
}

/// The targets of inline links `[text](target)` and images, outside code.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(markdown) {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// The pages a user reads: the docs, README and CHANGELOG.
fn user_pages() -> Vec<PathBuf> {
    let mut pages = pages();
    pages.push(root().join("CHANGELOG.md"));
    pages
}

#[test]
fn every_docs_page_is_compiled_as_api_docs() {
    let included = ["src/spec.rs", "src/guide.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(root().join(f)).expect("source"))
        .collect::<String>();
    for page in pages() {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        if name == "README.md" {
            let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
            assert!(
                lib.contains("include_str!(\"../README.md\")"),
                "README is not a doc test"
            );
            continue;
        }
        assert!(
            included.contains(&format!("include_str!(\"../docs/{name}\")")),
            "docs/{name} is not included by src/spec.rs or src/guide.rs, so its code \
             blocks are not compiled"
        );
    }
}

#[test]
fn every_relative_link_reaches_a_file_and_heading() {
    let mut broken = Vec::new();
    for page in user_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (file, fragment) = match link.split_once('#') {
                Some((f, frag)) => (f, Some(frag)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                if !headings(&target_text).iter().any(|h| h == fragment) {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn readme_is_a_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; move detail to docs/"
    );
}

/// Internal bookkeeping a user has no use for.
fn bookkeeping(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    for pair in words.windows(2) {
        let word = pair[0].trim_matches(|c: char| !c.is_alphanumeric());
        let number = pair[1].trim_matches(|c: char| !c.is_ascii_digit());
        if (word == "issue" || word == "issues") && !number.is_empty() {
            return Some("an issue number");
        }
    }
    if lower.contains("shared/") {
        return Some("the maintainers' shared folder");
    }
    // A commit hash in backticks: `0123abc`.
    for piece in line.split('`').skip(1).step_by(2) {
        if (7..=40).contains(&piece.len())
            && piece
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            && piece.chars().any(|c| c.is_ascii_digit())
            && piece.chars().any(|c| c.is_ascii_alphabetic())
        {
            return Some("a commit hash");
        }
    }
    None
}

#[test]
fn pages_carry_no_internal_bookkeeping() {
    let mut found = Vec::new();
    for page in user_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = bookkeeping(line) {
                found.push(format!("{}:{}: {what}: {line}", page.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "user-facing pages name:\n{}",
        found.join("\n")
    );
}

/// Code comments are read by the next developer, who cannot look up the
/// project's tracker: a comment says what the code does and why, not
/// which issue asked for it.
#[test]
fn code_comments_name_no_issue_number() {
    let mut found = Vec::new();
    let folders = [
        "src",
        "tests",
        "benches",
        "examples",
        "tikv-plan-proto/src",
        "tikv-sim/src",
        "tikv-sim/tests",
        "tikv-plan-chaos/src",
        "tikv-plan-chaos/tests",
        "compat/src",
    ];
    let mut read = 0;
    for folder in folders {
        for file in crate::source_files::rust_files(&root().join(folder)) {
            read += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let comment = line.trim_start().starts_with("//");
                if comment && bookkeeping(line) == Some("an issue number") {
                    found.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(read > 100, "only {read} source files read");
    assert!(
        found.is_empty(),
        "comments that name an issue:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert_eq!(bookkeeping("fixed in issue 21"), Some("an issue number"));
    assert_eq!(bookkeeping("counted (issue 8)"), Some("an issue number"));
    assert_eq!(bookkeeping("measured at `7241e65`"), Some("a commit hash"));
    assert_eq!(
        bookkeeping("see `shared/seeds`"),
        Some("the maintainers' shared folder")
    );
    assert_eq!(bookkeeping("requests issued at once by 64 tasks"), None);
    assert_eq!(bookkeeping("the key `0x6b6579`"), None);
    assert_eq!(
        links("see [a](b.md#c) and ![p](img/x.svg)"),
        vec!["b.md#c", "img/x.svg"]
    );
    assert_eq!(links("```\n[a](nope.md)\n```"), Vec::<String>::new());
    assert_eq!(
        heading_id(" Side by side with tikv-client 0.4.0"),
        "side-by-side-with-tikv-client-040"
    );
}
