//! The client crate's layers (written in `src/lib.rs`'s module docs): a
//! module may use its own files and the modules of lower layers, never a
//! module of its own layer or above. This reads every `crate::` path in the
//! code of `src/` (comments and `#[cfg(test)]` modules aside: tests may
//! reach anywhere) and fails on one that runs against the order.
//!
//! Inside a module split into folders (`SUB_LAYERS`), the folders are
//! layers too: a file names another folder's file by its path
//! (`crate::request::plan::builder::PlanBuilder`), never through the
//! module's front door (`crate::request::PlanBuilder`) or a folder's
//! re-exports, and only folders below its own; and only a `mod.rs` (a
//! folder's door) re-exports.

use std::collections::BTreeMap;

use std::path::Path;

use crate::source_files::rust_files;

/// From the bottom up. Keep in step with `src/lib.rs`.
const LAYERS: &[&[&str]] = &[
    // Facts from outside: the wire types, the key codec, the spec pages;
    // locks that survive a panic elsewhere.
    &["proto", "codec", "spec", "guide", "sync"],
    // Region and store identities.
    &["ids"],
    // Keys and ranges, and the error type (one unit, see `UNITS`).
    &["kv", "error"],
    // Retry delays, then the configuration that holds them.
    &["backoff"],
    &["config"],
    // Error classification, TLS.
    &["classify", "security"],
    // Observability hooks.
    &["metrics"],
    &["telemetry"],
    // Regions and their caches.
    &["region"],
    // Store connections, then PD (which hands out store clients).
    &["store"],
    &["pd"],
    // The plan and its routing engine, in folders (`SUB_LAYERS`).
    &["request"],
    // The clients.
    &["raw", "transaction"],
    // The blocking clients, over both.
    &["blocking"],
    // Test doubles over everything.
    &["mock"],
];

/// Modules split into folders, each folder a layer, from the bottom up:
/// in `request`, the pure routing engine, then the plan stages that drive
/// it, then lock resolution, which builds plans. The module's `mod.rs` is
/// its front door and may name them all. Keep in step with `src/lib.rs`.
const SUB_LAYERS: &[(&str, &[&str])] = &[("request", &["routing", "plan", "locks"])];

/// Modules of one layer that may use each other: the error type carries keys
/// and ranges (`RegionForRangeNotFound { range: BoundRange }`, as in
/// client-rust), and the key types' fallible conversions return it.
const UNITS: &[&[&str]] = &[&["kv", "error"]];

fn same_unit(a: &str, b: &str) -> bool {
    UNITS
        .iter()
        .any(|unit| unit.contains(&a) && unit.contains(&b))
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level module a file of `src/` belongs to
/// (`src/request/plan/base.rs` → `request`).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// The code lines of a file: comments dropped, and everything from a
/// `#[cfg(test)]` module on (test modules close their file).
fn code_lines(source: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            let next = lines[i + 1..].iter().find(|l| !l.trim().is_empty());
            if next.is_some_and(|l| l.trim_start().starts_with("mod ")) {
                break;
            }
            // A test-only item: skip it (one line).
            i += 2;
            continue;
        }
        if !trimmed.starts_with("//") {
            out.push((i + 1, lines[i]));
        }
        i += 1;
    }
    out
}

/// The names the crate root re-exports (`pub use error::{Error, Result}`),
/// with the module each comes from: `crate::Error` is a use of `error`.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let text: String = code_lines(lib)
        .into_iter()
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join(" ");
    for statement in text.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        // `pub use tikv_plan_proto::codec;`: another crate's module, known
        // here by its own name.
        let external = layer_of(module.trim()).is_none();
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let name = item.trim().rsplit("::").next().unwrap_or("").trim();
            let name = name.rsplit(" as ").next().unwrap_or(name).trim();
            if !name.is_empty() {
                let from = if external { name } else { module.trim() };
                names.insert(name.to_owned(), from.to_owned());
            }
        }
    }
    names
}

/// Every `crate::NAME` on a line, as the module it reaches.
fn uses_on(line: &str, reexports: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before_ok = at == 0
            || !rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if !before_ok {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            // `crate::{a, b}`: each item is a root name or module.
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                for item in group.split(',') {
                    let item = item.trim().split("::").next().unwrap_or("").trim();
                    if !item.is_empty() {
                        out.push(reexports.get(item).cloned().unwrap_or(item.to_owned()));
                    }
                }
            }
            continue;
        }
        out.push(reexports.get(&name).cloned().unwrap_or(name));
    }
    out
}

/// Every import against the layers, as `file:line: from -> to`.
fn violations(
    files: &[(String, String, String)],
    reexports: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (name, module, source) in files {
        let Some(from) = layer_of(module) else {
            found.push(format!(
                "{name}: module `{module}` is in no layer of tests/hygiene/layers.rs"
            ));
            continue;
        };
        for (number, line) in code_lines(source) {
            for target in uses_on(line, reexports) {
                if &target == module || same_unit(module, &target) {
                    continue;
                }
                match layer_of(&target) {
                    Some(to) if to < from => {}
                    Some(_) => found.push(format!(
                        "{name}:{number}: `{module}` uses `{target}`, which is not below it"
                    )),
                    None => found.push(format!(
                        "{name}:{number}: `{module}` uses `crate::{target}`, which names no \
                         module of the layer table"
                    )),
                }
            }
        }
    }
    found
}

/// Where a file of `src/` stands in a split module: `Some((module,
/// Some(folder)))` in one of its folders (`src/request/plan/base.rs` →
/// `("request", Some("plan"))`), `Some((module, None))` directly in the
/// module's own folder (its `mod.rs`, the front door, or a stray file), and
/// `None` outside split modules.
fn folder_of(relative: &str) -> Option<(&'static str, Option<&str>)> {
    let mut parts = relative.trim_start_matches("src/").split('/');
    let module = parts.next()?;
    let (name, _) = SUB_LAYERS.iter().find(|(name, _)| *name == module)?;
    let first = parts.next()?;
    Some((name, parts.next().map(|_| first)))
}

/// The first segment of each item of a `{a::b, C}` group that starts
/// `group` (the text after its `{`).
fn group_heads(group: &str) -> Vec<String> {
    group
        .split('}')
        .next()
        .unwrap_or("")
        .split(',')
        .map(|item| {
            item.trim()
                .split("::")
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .filter(|head| !head.is_empty())
        .collect()
}

/// The item names a path reaches after `rest` (the text after `X::`): the
/// next segment, or each first segment of a group.
fn next_segments(rest: &str) -> Vec<String> {
    match rest.strip_prefix('{') {
        Some(group) => group_heads(group),
        None => vec![rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()],
    }
}

fn is_item(segment: &str) -> bool {
    segment.chars().next().is_some_and(|c| c.is_uppercase())
}

/// Every import inside a split module against its folders' order, as
/// `file:line: what`.
fn sub_violations(files: &[(String, String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, _, source) in files {
        let Some((module, folder)) = folder_of(name) else {
            continue;
        };
        let folders = SUB_LAYERS
            .iter()
            .find(|(m, _)| *m == module)
            .map(|(_, f)| *f)
            .unwrap_or(&[]);
        let rank = |f: &str| folders.iter().position(|x| *x == f);
        let Some(folder) = folder else {
            if !name.ends_with(&format!("src/{module}/mod.rs")) {
                found.push(format!(
                    "{name}: stands beside the front door of `{module}`; put it in one of its \
                     folders {folders:?}"
                ));
            }
            continue;
        };
        let Some(own) = rank(folder) else {
            found.push(format!(
                "{name}: folder `{module}::{folder}` is in no sub-layer of tests/hygiene/layers.rs"
            ));
            continue;
        };
        let door = name.ends_with("/mod.rs");
        let prefix = format!("crate::{module}::");
        for (number, line) in code_lines(source) {
            let at = format!("{name}:{number}");
            if line.contains("super::super") {
                found.push(format!(
                    "{at}: leaves its folder with `super::super`; name the file as \
                     `crate::{module}::<folder>::<file>`"
                ));
            }
            let trimmed = line.trim_start();
            let reexport = trimmed.starts_with("pub") && trimmed.contains(" use ");
            if reexport && !door && trimmed.contains("::") {
                found.push(format!(
                    "{at}: re-exports; only a folder's `mod.rs` is a door, so name the \
                     item where it is defined"
                ));
            }
            // `super::Item` in a file reaches the folder's door (in `plan/`,
            // the public `request::plan` module, which re-exports from
            // above); a file names the file.
            if !door {
                let mut rest = line;
                while let Some(found_at) = rest.find("super::") {
                    rest = &rest[found_at + "super::".len()..];
                    if next_segments(rest).iter().any(|s| is_item(s)) {
                        found.push(format!(
                            "{at}: names an item through its folder's door (`super::`); name \
                             its file"
                        ));
                    }
                }
            }
            if line.contains("crate::{") && line.contains(&format!("{module}::")) {
                found.push(format!(
                    "{at}: reaches `{module}` inside a `crate::{{..}}` group; write the path out"
                ));
            }
            let mut rest = line;
            while let Some(found_at) = rest.find(&prefix) {
                let before = rest[..found_at].chars().last();
                rest = &rest[found_at + prefix.len()..];
                // `$crate::` in a macro body is expanded where the macro is
                // used, outside the folders.
                if before == Some('$') || before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                for segment in next_segments(rest) {
                    let Some(to) = rank(&segment) else {
                        found.push(format!(
                            "{at}: names `crate::{module}::{segment}` through the module's \
                             front door; name the folder and file"
                        ));
                        continue;
                    };
                    if to > own {
                        found.push(format!(
                            "{at}: `{module}::{folder}` uses `{module}::{segment}`, which is \
                             not below it"
                        ));
                    }
                }
                let segment: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if segment.is_empty() {
                    continue;
                }
                let after = rest[segment.len()..].strip_prefix("::").unwrap_or("");
                if next_segments(after).iter().any(|s| is_item(s)) {
                    found.push(format!(
                        "{at}: names an item through `{module}::{segment}`'s door; name its file"
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_import_runs_against_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexports = root_reexports(&lib);
    // Test folders (`src/store/tests/`) are test modules: tests may reach
    // anywhere.
    let paths: Vec<_> = rust_files(&src)
        .into_iter()
        .filter(|path| !path.components().any(|part| part.as_os_str() == "tests"))
        .collect();
    let files: Vec<(String, String, String)> = paths
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "lib.rs"))
        // Whole files of tests (`#[cfg(test)] mod engine_tests;`).
        .filter(|p| !p.to_string_lossy().ends_with("_tests.rs"))
        .map(|p| {
            (
                p.strip_prefix(root).unwrap().display().to_string(),
                module_of(&src, p),
                std::fs::read_to_string(p).unwrap(),
            )
        })
        .collect();
    assert!(files.len() > 40, "only {} files read", files.len());
    let in_folders = files
        .iter()
        .filter(|(name, _, _)| folder_of(name).is_some_and(|(_, f)| f.is_some()))
        .count();
    assert!(
        in_folders > 20,
        "only {in_folders} files of split modules read"
    );
    let mut found = violations(&files, &reexports);
    found.extend(sub_violations(&files));
    assert!(
        found.is_empty(),
        "imports against the layers (see src/lib.rs):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_checker_sees_imports_against_the_layers() {
    let lib = "pub use error::{Error, Result};\npub use raw::RawClient;\n";
    let reexports = root_reexports(lib);
    let file = |module: &str, source: &str| {
        (
            format!("src/{module}.rs"),
            module.to_owned(),
            source.to_owned(),
        )
    };
    let files = vec![
        // Down: fine.
        file(
            "transaction",
            "use crate::request::Plan;\nuse crate::Error;\n",
        ),
        // Sideways, inline path: caught.
        file("transaction", "    let x = crate::raw::clip(a);\n"),
        // Up, through a root re-export in a group: caught.
        file("store", "use crate::{Error, RawClient};\n"),
        // Comments and test modules do not count.
        file(
            "region",
            "// crate::raw::x\n#[cfg(test)]\nmod tests {\n    use crate::mock::M;\n}\n",
        ),
    ];
    let found = violations(&files, &reexports);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("`transaction` uses `raw`"), "{found:#?}");
    assert!(found[1].contains("`store` uses `raw`"), "{found:#?}");
}

#[test]
fn the_checker_sees_imports_against_the_folders() {
    let file = |path: &str, source: &str| {
        (
            format!("src/{path}"),
            "request".to_owned(),
            source.to_owned(),
        )
    };
    let files =
        vec![
        // Down or in the same folder, by file: fine.
        file(
            "request/locks/x.rs",
            "use crate::request::plan::builder::PlanBuilder;\nuse crate::request::locks::y::Y;\n\
             use super::lock_rules::{a, B};\n",
        ),
        // Up: caught.
        file(
            "request/plan/x.rs",
            "use crate::request::locks::cleanup_locks::CleanupLocks;\n",
        ),
        // Through the front door: caught.
        file("request/routing/x.rs", "use crate::request::PlanBuilder;\n"),
        // Through a folder's door, by path or in a group: caught.
        file("request/locks/x.rs", "use crate::request::plan::Plan;\n"),
        file(
            "request/locks/x.rs",
            "use crate::request::plan::{base::Plan, CleanupLocks};\n",
        ),
        // Through the own folder's door: caught.
        file("request/plan/x.rs", "use super::{retry::R, CleanupLocks};\n"),
        // Out of the folder by `super::super`: caught.
        file("request/routing/state/x.rs", "use super::super::round::X;\n"),
        // A re-export outside a door: caught.
        file("request/plan/x.rs", "pub(crate) use super::retry::retry;\n"),
        // A file beside the front door, a folder of no sub-layer: caught.
        file("request/stray.rs", "use crate::request::X;\n"),
        file("request/other/x.rs", ""),
        // Macro text, the front door, a folder's door and test modules: fine.
        file("request/plan/shard.rs", "impl $crate::request::Shardable for X {}\n"),
        file(
            "request/mod.rs",
            "pub use locks::cleanup_locks::CleanupLocks;\nuse crate::request::X;\n",
        ),
        file(
            "request/routing/state/mod.rs",
            "pub(crate) use busy::{Busy, Probe};\n",
        ),
        file(
            "request/plan/y.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::request::locks::L;\n}\n",
        ),
    ];
    let found = sub_violations(&files);
    let expected = [
        "`request::plan` uses `request::locks`",
        "front door",
        "`request::plan`'s door",
        "`request::plan`'s door",
        "its folder's door (`super::`)",
        "super::super",
        "re-exports",
        "beside the front door",
        "no sub-layer",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (found, expected) in found.iter().zip(expected) {
        assert!(found.contains(expected), "{found} should say {expected}");
    }
}
