//! The client crate's layers (written in `src/lib.rs`'s module docs): a
//! module may use its own files and the modules of lower layers, never a
//! module of its own layer or above. This reads every `crate::` path in the
//! code of `src/` (comments and `#[cfg(test)]` modules aside: tests may
//! reach anywhere) and fails on one that runs against the order.

use std::collections::BTreeMap;
mod source_files;

use std::path::Path;

use source_files::rust_files;

/// From the bottom up. Keep in step with `src/lib.rs`.
const LAYERS: &[&[&str]] = &[
    // Facts from outside: the wire types, the key codec, the spec pages.
    &["proto", "codec", "spec", "guide"],
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
    // The plan and its routing engine.
    &["request"],
    // The clients.
    &["raw", "transaction"],
    // Test doubles over everything.
    &["mock"],
];

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

/// The top-level module a file of `src/` belongs to (`src/request/plan.rs`
/// → `request`).
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
                "{name}: module `{module}` is in no layer of tests/layers.rs"
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
    let found = violations(&files, &reexports);
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
