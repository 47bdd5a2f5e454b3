//! No source file of the workspace is over 800 lines unless one of three
//! plain rules allows it: its code, up to its unit-test module
//! (`#[cfg(test)]`), is within 800 lines; it is generated (a `generated/`
//! folder); or it is listed in [`LONGER`] with a limit of its own and the
//! reason. A listed file must be over 800 lines (a file that shrank leaves
//! the list) and within its limit (a file that grows past it is split, or
//! its limit raised in review, with the reason).

use std::path::{Path, PathBuf};

use crate::source_files::rust_files;

const LIMIT: usize = 800;

/// Files allowed past [`LIMIT`]: path from the client crate's root, the
/// file's own limit, and why one file is right for it.
const LONGER: [(&str, usize, &str); 10] = [
    (
        "src/request/routing/engine.rs",
        950,
        "the whole retry state machine of a shard: every routing decision in one place",
    ),
    (
        "src/request/routing/engine_tests.rs",
        1_700,
        "the engine's table and property tests, one or more per routing behaviour",
    ),
    (
        "src/pd/cluster.rs",
        1_100,
        "bootstrap, leader following and every bounded PD call share one connection state",
    ),
    (
        "tests/hygiene/public_api.rs",
        1_450,
        "one lister (module walk, re-exports, item shapes) and both checks with its tests",
    ),
    (
        "tikv-plan-chaos/src/txn_check.rs",
        2_850,
        "one checker: every check works from the version orders derived once at the start",
    ),
    (
        "tikv-plan-chaos/src/txn.rs",
        1_800,
        "the workloads, final reads and report of a run share its recorder and key layout",
    ),
    (
        "tikv-plan-chaos/src/check.rs",
        1_000,
        "one linearizability search and the passes that prepare its per-key state",
    ),
    (
        "tikv-sim/src/cluster.rs",
        1_250,
        "the simulator's public API: every fault and inspection method of the one cluster type",
    ),
    (
        "tikv-sim/src/mvcc.rs",
        1_880,
        "one state machine: every transactional command over the same column families",
    ),
    (
        "tikv-sim/tests/txn.rs",
        1_000,
        "every transactional command of the simulated store, each with its answers",
    ),
];

/// The workspace's source folders, from the client crate's root.
const FOLDERS: [&str; 12] = [
    "src",
    "tests",
    "benches",
    "examples",
    "tikv-plan-proto/src",
    "tikv-plan-proto/tests",
    "tikv-sim/src",
    "tikv-sim/tests",
    "tikv-plan-chaos/src",
    "tikv-plan-chaos/tests",
    "compat/src",
    "compat/tests",
];

/// What is wrong with a file at `path` (from the crate's root) of source
/// `source`, if anything; `own_limit` is its entry in [`LONGER`].
fn verdict(path: &str, source: &str, own_limit: Option<usize>) -> Result<(), String> {
    let lines: Vec<&str> = source.lines().collect();
    if let Some(limit) = own_limit {
        return match lines.len() {
            n if n <= LIMIT => Err(format!(
                "is {n} lines, within {LIMIT}: take it out of LONGER"
            )),
            n if n > limit => Err(format!(
                "is {n} lines, over its own limit of {limit}: split it"
            )),
            _ => Ok(()),
        };
    }
    if lines.len() <= LIMIT || path.contains("/generated/") {
        return Ok(());
    }
    let code = lines
        .iter()
        .rposition(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    if code <= LIMIT {
        return Ok(());
    }
    Err(format!(
        "is {} lines ({code} before its unit tests): split it, or list it in LONGER with the reason",
        lines.len()
    ))
}

#[test]
fn no_file_is_longer_than_its_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<PathBuf> = FOLDERS
        .iter()
        .flat_map(|folder| rust_files(&root.join(folder)))
        .collect();
    assert!(files.len() > 100, "only {} files found", files.len());
    for (listed, _, _) in LONGER {
        assert!(
            files
                .iter()
                .any(|f| f.strip_prefix(root).unwrap() == Path::new(listed)),
            "{listed} is listed in LONGER but is not a source file of the workspace"
        );
    }
    let bad: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let own = LONGER
                .iter()
                .find(|(listed, _, _)| *listed == relative)
                .map(|(_, limit, _)| *limit);
            let source = std::fs::read_to_string(path).unwrap();
            verdict(&relative, &source, own)
                .err()
                .map(|why| format!("{relative}: {why}"))
        })
        .collect();
    assert!(bad.is_empty(), "files too long:\n  {}", bad.join("\n  "));
}

#[test]
fn the_rules_tell_a_long_file_from_an_allowed_one() {
    let body = "fn f() {}\n".repeat(LIMIT);
    assert!(
        verdict("src/a.rs", &body, None).is_ok(),
        "800 lines is within the limit"
    );
    let long = format!("//! A module.\n{body}");
    assert!(verdict("src/a.rs", &long, None).is_err());
    let said = format!("//! A module.\n//! This file is long because of X.\n{body}");
    assert!(
        verdict("src/a.rs", &said, None).is_err(),
        "a sentence in the file allows nothing"
    );
    assert!(verdict("proto/src/generated/a.rs", &long, None).is_ok());
    let tests_after = format!("fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{body}}}\n");
    assert!(verdict("src/a.rs", &tests_after, None).is_ok());
    assert!(verdict("src/a.rs", &long, Some(900)).is_ok());
    assert!(
        verdict("src/a.rs", &long, Some(LIMIT)).is_err(),
        "over its own limit"
    );
    assert!(
        verdict("src/a.rs", "fn f() {}\n", Some(900)).is_err(),
        "a short file leaves the list"
    );
}
