//! Every repository path the documentation names exists.
//!
//! **Where.** The markdown pages `docs/*.md`, `README.md` and the
//! `README.md` of every folder at the root (`tikv-sim/`, `interop/`,
//! `perf/`, `tests/`, ...), and the crate docs: the `//!` lines of every
//! `.rs` file under the `src/` folder of each crate (the root, `tikv-sim`,
//! `tikv-plan-proto`, `tikv-plan-chaos`, `compat`, `interop`, `perf`,
//! `client-rust-suite`). `CHANGELOG.md` is not read: it records history,
//! and a path it names may be gone since.
//!
//! **What counts as a repository path.** A word (split at whitespace, with
//! `"'(),;` trimmed from its ends) of an inline code span (`` `...` ``, any
//! number of backticks; fenced code blocks are examples, not references,
//! and are skipped), which contains a `/` and whose first component is a
//! folder at the repository's root ([`TOP_LEVEL`]) or `proto` (the folder of
//! `tikv-plan-proto` its docs name). So `tests/txn/` and `perf/run.sh
//! --quick` are paths; `tikv_plan::spec`, `cargo test` and `raftstore/peer.rs`
//! (TiKV's) are not. From a path:
//!
//! * a `::item` suffix is cut, and the file must then contain the item's
//!   name (`tests/dst.rs::a_test`); a `:line` suffix is cut, and the file
//!   must have that many lines; a `#anchor` suffix is cut (the links between
//!   pages, anchors included, are checked by `docs_pages.rs`);
//! * a placeholder `<...>` becomes `*`: it names a family of files, and at
//!   least one of them must exist (`docs/img/<picture>.svg`);
//! * a `*` is a glob within one component, which must match at least one
//!   file or folder (`tests/routing/routing_*.rs`).
//!
//! **Where it must exist.** Below the repository's root, or, for a page or
//! source inside a crate's folder (a root folder with a `Cargo.toml`),
//! below that folder too: a crate's README and docs are published with the
//! crate, where its own `tests/generated.rs` is at that path.
//!
//! **Skipped**, each for its reason: paths into a folder a `.gitignore` (the
//! root's, or that of a folder at the root, for paths below that folder)
//! ignores (`target/`, `perf/results/`): build and run output, which a
//! checkout does not hold; and the few paths of other projects'
//! repositories that pages name as theirs ([`OTHER_PROJECTS`]: client-rust's
//! test files, TiKV's sources), each only in the files listed with it.

use std::path::{Path, PathBuf};

use crate::source_files::rust_files;

/// The folders at the repository's root; a path starting with one of them
/// is checked (`every_root_folder_is_listed` keeps the list complete).
const TOP_LEVEL: [&str; 14] = [
    ".cargo",
    ".ci",
    "benches",
    "client-rust-suite",
    "compat",
    "docs",
    "examples",
    "interop",
    "perf",
    "src",
    "tests",
    "tikv-plan-chaos",
    "tikv-plan-proto",
    "tikv-sim",
];

/// Folders a crate below the root has and the root has not.
const CRATE_ONLY: [&str; 1] = ["proto"];

/// Paths of other projects' repositories, as `(the files that may name it,
/// path, whose)`: the naming file's path must start with the first.
const OTHER_PROJECTS: [(&str, &str, &str); 4] = [
    (
        "client-rust-suite/",
        "tests/integration_tests.rs",
        "client-rust 0.4.0's",
    ),
    (
        "client-rust-suite/",
        "tests/failpoint_tests.rs",
        "client-rust 0.4.0's",
    ),
    ("tikv-sim/src/limits.rs", "src/server/server.rs", "TiKV's"),
    (
        "tikv-sim/src/limits.rs",
        "src/server/raft_client.rs",
        "TiKV's",
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A path named in a file: the file (relative to the root), the line, and
/// the word as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    file: String,
    line: usize,
    path: String,
}

/// The inline code spans of a markdown text, each with the line (from 1)
/// its content starts on. A span does not cross a blank line, and fenced
/// code blocks hold none.
fn code_spans(markdown: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut paragraph = String::new();
    let mut first_line = 0;
    let mut in_fence = false;
    for (index, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        let blank = line.trim().is_empty();
        if fence || blank || in_fence {
            spans.extend(paragraph_spans(&paragraph, first_line));
            paragraph.clear();
            if fence {
                in_fence = !in_fence;
            }
            continue;
        }
        if paragraph.is_empty() {
            first_line = index + 1;
        }
        paragraph.push_str(line);
        paragraph.push('\n');
    }
    spans.extend(paragraph_spans(&paragraph, first_line));
    spans
}

/// The code spans of one paragraph that starts on `first_line`: a run of
/// backticks opens one, the next run of the same length closes it, and a
/// run that nothing closes is text.
fn paragraph_spans(text: &str, first_line: usize) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let run_at = |from: usize| bytes[from..].iter().take_while(|b| **b == b'`').count();
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find('`') {
        let open = at + offset;
        let len = run_at(open);
        let content = open + len;
        let mut search = content;
        let mut close = None;
        while let Some(offset) = text[search..].find('`') {
            let start = search + offset;
            let run = run_at(start);
            if run == len {
                close = Some(start);
                break;
            }
            search = start + run;
        }
        match close {
            Some(close) => {
                let line = first_line + text[..content].matches('\n').count();
                spans.push((line, text[content..close].to_owned()));
                at = close + len;
            }
            None => at = content,
        }
    }
    spans
}

/// The words of a code span that are repository paths.
fn paths_in_span(span: &str) -> Vec<String> {
    span.split_whitespace()
        .map(|word| word.trim_matches(|c: char| "\"'(),;".contains(c)))
        .filter(|word| {
            word.split_once('/')
                .is_some_and(|(first, _)| TOP_LEVEL.contains(&first) || CRATE_ONLY.contains(&first))
        })
        .map(str::to_owned)
        .collect()
}

/// Every repository path a markdown text names, with its line.
fn named_paths(file: &str, markdown: &str) -> Vec<Named> {
    code_spans(markdown)
        .into_iter()
        .flat_map(|(line, span)| {
            paths_in_span(&span).into_iter().map(move |path| Named {
                file: file.to_owned(),
                line,
                path,
            })
        })
        .collect()
}

/// A Rust file's `//!` lines as markdown, every other line blank, so that
/// line numbers stay those of the file.
fn crate_docs(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.trim_start().strip_prefix("//!") {
            Some(text) => text.strip_prefix(' ').unwrap_or(text),
            None => "",
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `name` matches `pattern`, where `*` matches any run of
/// characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|i| rest.is_char_boundary(*i))
                .any(|i| wildcard(tail, &rest[i..]))
        }
    }
}

/// The files and folders below `base` that `pattern` (components split at
/// `/`, `*` a glob within one) names; a pattern ending in `/` names
/// folders only.
fn matches(base: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![base.to_path_buf()];
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for dir in &found {
            if component.contains('*') {
                let Ok(entries) = std::fs::read_dir(dir) else {
                    continue;
                };
                next.extend(
                    entries
                        .filter_map(|e| e.ok())
                        .filter(|e| wildcard(component, &e.file_name().to_string_lossy()))
                        .map(|e| e.path()),
                );
            } else {
                let path = dir.join(component);
                if path.exists() {
                    next.push(path);
                }
            }
        }
        found = next;
    }
    if pattern.ends_with('/') {
        found.retain(|p| p.is_dir());
    }
    found
}

/// The folders a `.gitignore` ignores wherever they are below it (its
/// `name/` lines), as `(the folder holding it, with a trailing '/', or ""
/// for the root's; name)`: the root's and those of the root's folders.
fn ignored_folders(root: &Path) -> Vec<(String, String)> {
    let scopes = std::iter::once(String::new()).chain(TOP_LEVEL.iter().map(|f| format!("{f}/")));
    scopes
        .flat_map(|scope| {
            let text = std::fs::read_to_string(root.join(&scope).join(".gitignore"));
            text.unwrap_or_default()
                .lines()
                .filter_map(|line| line.trim().strip_suffix('/'))
                .filter(|name| !name.is_empty() && !name.contains('/') && !name.contains('*'))
                .map(|name| (scope.clone(), name.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether a path (as written, from the root) leads into an ignored folder.
fn is_ignored(ignored: &[(String, String)], path: &str) -> bool {
    ignored.iter().any(|(scope, name)| {
        path.strip_prefix(scope.as_str())
            .is_some_and(|below| below.split('/').any(|component| component == name))
    })
}

/// What is wrong with a named path, if anything.
fn check(root: &Path, named: &Named) -> Option<String> {
    let written = named.path.as_str();
    if is_ignored(&ignored_folders(root), written) {
        return None;
    }
    if OTHER_PROJECTS
        .iter()
        .any(|(files, path, _)| named.file.starts_with(files) && written == *path)
    {
        return None;
    }
    // The suffixes: `::item`, then `#anchor`, then `:line`.
    let (path, item) = match written.split_once("::") {
        Some((path, item)) => (path, Some(item.rsplit("::").next().unwrap_or(item))),
        None => (written, None),
    };
    let path = path.split_once('#').map_or(path, |(path, _)| path);
    let (path, line) = match path.rsplit_once(':') {
        Some((file, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (file, Some(n.parse::<usize>().unwrap_or(usize::MAX)))
        }
        _ => (path, None),
    };
    // Placeholders name a family of files: `<picture>` is a glob.
    let mut pattern = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        pattern.push_str(&rest[..open]);
        pattern.push('*');
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(rest);

    let mut bases = vec![root.to_path_buf()];
    if let Some((first, _)) = named.file.split_once('/') {
        if root.join(first).join("Cargo.toml").is_file() {
            bases.push(root.join(first));
        }
    }
    let found: Vec<PathBuf> = bases.iter().flat_map(|b| matches(b, &pattern)).collect();
    let whole = || {
        if bases.len() > 1 {
            format!("below the root or {}/", bases[1].display())
        } else {
            "below the root".to_owned()
        }
    };
    if found.is_empty() {
        return Some(format!("no such file or folder {}", whole()));
    }
    if let Some(item) = item {
        let holds = found
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|text| text.contains(item)));
        if !holds {
            return Some(format!("the file does not name `{item}`"));
        }
    }
    if let Some(line) = line {
        let long_enough = found
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|text| text.lines().count() >= line));
        if !long_enough {
            return Some(format!("the file has fewer than {line} lines"));
        }
    }
    None
}

/// Every missing path of the texts, as `file:line: `path`: why`.
fn missing(root: &Path, named: &[Named]) -> Vec<String> {
    named
        .iter()
        .filter_map(|n| {
            check(root, n).map(|why| format!("{}:{}: `{}`: {why}", n.file, n.line, n.path))
        })
        .collect()
}

/// The pages and sources read, relative to the root, with the markdown
/// each holds (a source's `//!` lines).
fn documents(root: &Path) -> Vec<(String, String)> {
    let relative = |path: &Path| {
        path.strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.push(root.join("README.md"));
    pages.extend(
        TOP_LEVEL
            .iter()
            .map(|folder| root.join(folder).join("README.md"))
            .filter(|p| p.is_file()),
    );
    let mut documents: Vec<(String, String)> = pages
        .iter()
        .map(|p| (relative(p), std::fs::read_to_string(p).unwrap()))
        .collect();
    let crates = TOP_LEVEL
        .iter()
        .filter(|folder| root.join(folder).join("Cargo.toml").is_file())
        .map(|folder| root.join(folder).join("src"));
    for folder in std::iter::once(root.join("src")).chain(crates) {
        for file in rust_files(&folder) {
            let source = std::fs::read_to_string(&file).unwrap();
            documents.push((relative(&file), crate_docs(&source)));
        }
    }
    documents.sort();
    documents
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = root();
    let named: Vec<Named> = documents(root)
        .iter()
        .flat_map(|(file, markdown)| named_paths(file, markdown))
        .collect();
    assert!(
        named.len() > 200,
        "only {} repository paths found in the docs: is the scan broken?",
        named.len()
    );
    let missing = missing(root, &named);
    assert!(
        missing.is_empty(),
        "{} of the {} repository paths the docs name do not exist (point at the real \
         file, or reword):\n{}",
        missing.len(),
        named.len(),
        missing.join("\n")
    );
}

/// A folder at the root that `TOP_LEVEL` misses would leave the paths into
/// it unchecked. (A listed folder that is gone does no harm: a path into it
/// is reported missing.)
#[test]
fn every_root_folder_is_listed() {
    let ignored = ignored_folders(root());
    let folders: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".git" && !is_ignored(&ignored, name))
        .collect();
    let unlisted: Vec<&String> = folders
        .iter()
        .filter(|f| !TOP_LEVEL.contains(&f.as_str()))
        .collect();
    assert!(
        folders.len() >= 10 && unlisted.is_empty(),
        "TOP_LEVEL must list every folder at the root, so that paths into it are \
         checked; it misses {unlisted:?}"
    );
    for (_, path, whose) in OTHER_PROJECTS {
        let ours: Vec<PathBuf> = std::iter::once(root().to_path_buf())
            .chain(TOP_LEVEL.iter().map(|f| root().join(f)))
            .flat_map(|base| matches(&base, path))
            .collect();
        assert!(
            ours.is_empty(),
            "{path} is listed as {whose}, but this repository has {ours:?}"
        );
    }
}

#[test]
fn the_check_finds_a_made_up_path_and_passes_real_ones() {
    let root = root();
    let page = "\
# A page

See `tests/hygiene/main.rs` and `tests/hygiene/no_such_check.rs`, run
``perf/run.sh --only cut-off`` and `cargo test`, read `tikv_plan::spec`,
`docs/img/<picture>.svg` and `tests/routing/routing_*.rs`.

```sh
cat tests/made_up_in_a_fence.rs `tests/also_in_a_fence.rs`
```

Then `src/made_up/` on line 11, `tests/txn_*.rs`,
`tests/hygiene/main.rs:3`, `tests/hygiene/main.rs:100000`,
`tests/hygiene/repo_paths.rs::wildcard`, `tests/hygiene/main.rs::no_such_fn`,
`docs/routing.md#forwarding-beyond`, `perf/target/release/tikv-plan-perf`,
`perf/results/throughput.csv`, `docs/results/made_up.csv`.
";
    let named = named_paths("docs/sample.md", page);
    let written: Vec<&str> = named.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(
        written,
        [
            "tests/hygiene/main.rs",
            "tests/hygiene/no_such_check.rs",
            "perf/run.sh",
            "docs/img/<picture>.svg",
            "tests/routing/routing_*.rs",
            "src/made_up/",
            "tests/txn_*.rs",
            "tests/hygiene/main.rs:3",
            "tests/hygiene/main.rs:100000",
            "tests/hygiene/repo_paths.rs::wildcard",
            "tests/hygiene/main.rs::no_such_fn",
            "docs/routing.md#forwarding-beyond",
            "perf/target/release/tikv-plan-perf",
            "perf/results/throughput.csv",
            "docs/results/made_up.csv",
        ]
    );
    assert_eq!(
        missing(root, &named),
        [
            "docs/sample.md:3: `tests/hygiene/no_such_check.rs`: no such file or folder below the root",
            "docs/sample.md:11: `src/made_up/`: no such file or folder below the root",
            "docs/sample.md:11: `tests/txn_*.rs`: no such file or folder below the root",
            "docs/sample.md:12: `tests/hygiene/main.rs:100000`: the file has fewer than 100000 lines",
            "docs/sample.md:13: `tests/hygiene/main.rs::no_such_fn`: the file does not name `no_such_fn`",
            // `results/` is ignored in `perf/` only.
            "docs/sample.md:15: `docs/results/made_up.csv`: no such file or folder below the root",
        ]
    );

    // Inside a crate's folder a path may be the crate's own; outside it,
    // only the root's.
    let proto_docs = "The code is generated from `proto/*.proto` (`tests/generated.rs`).";
    assert!(missing(root, &named_paths("tikv-plan-proto/README.md", proto_docs)).is_empty());
    assert_eq!(
        missing(root, &named_paths("docs/project.md", proto_docs)).len(),
        2
    );

    // Crate docs keep the file's line numbers; other comments are not read.
    let source = "//! Crate docs naming `tests/no/such/file.rs`.\n\
                  \n\
                  // A comment naming `tests/not/read.rs`.\n\
                  /// An item's docs naming `tests/not/read/either.rs`.\n\
                  //! and `src/nowhere.rs` on line 5.\n";
    let named = named_paths("src/sample.rs", &crate_docs(source));
    assert_eq!(
        missing(root, &named),
        [
            "src/sample.rs:1: `tests/no/such/file.rs`: no such file or folder below the root",
            "src/sample.rs:5: `src/nowhere.rs`: no such file or folder below the root",
        ]
    );

    // Other projects' paths pass only in the files listed with them.
    let foreign = "client-rust's `tests/integration_tests.rs`";
    assert!(missing(root, &named_paths("client-rust-suite/README.md", foreign)).is_empty());
    assert_eq!(
        missing(root, &named_paths("docs/project.md", foreign)).len(),
        1
    );
}

#[test]
fn wildcards_match_within_a_component() {
    assert!(wildcard("routing_*.rs", "routing_forward.rs"));
    assert!(wildcard("*", "anything"));
    assert!(wildcard("a*b*c", "aXbYc"));
    assert!(!wildcard("routing_*.rs", "plan_mock.rs"));
    assert!(!wildcard("*.rs", "main.rs.bak"));
    assert_eq!(
        paragraph_spans("a ``x ` y`` b `z`", 7),
        [(7, "x ` y".to_owned()), (7, "z".to_owned())]
    );
    // A run that nothing of its length closes is text.
    assert_eq!(paragraph_spans("a `` b `c`\nd `", 1), [(1, "c".to_owned())]);
    assert_eq!(paragraph_spans("a\n`b\nc`", 4), [(5, "b\nc".to_owned())]);
}
