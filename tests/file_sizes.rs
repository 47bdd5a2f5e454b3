//! No source file of the workspace is over 800 lines without saying why at
//! its top: a sentence in its opening comment that it "is long because" of
//! something, or that it is over 800 lines "with its unit tests" (then its
//! code, up to the `#[cfg(test)]` module, must be under 800 lines, which
//! this checks). Generated code says so in its header.

mod source_files;

use std::path::{Path, PathBuf};

use source_files::rust_files;

const LIMIT: usize = 800;

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

/// Why a file of `lines` lines is fine, or what is wrong with it.
fn verdict(source: &str) -> Result<(), String> {
    let lines: Vec<&str> = source.lines().collect();
    if lines.len() <= LIMIT {
        return Ok(());
    }
    let opening: String = lines
        .iter()
        .take_while(|l| l.starts_with("//") || l.trim().is_empty())
        .map(|l| l.trim_start_matches('/').trim_start_matches('!').trim())
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    if opening.contains("long because") {
        return Ok(());
    }
    if opening.contains("with its unit tests") {
        let code = lines
            .iter()
            .rposition(|l| l.starts_with("#[cfg(test)]"))
            .unwrap_or(lines.len());
        return if code <= LIMIT {
            Ok(())
        } else {
            Err(format!(
                "says its unit tests make it long, but its code alone is {code} lines"
            ))
        };
    }
    Err(format!(
        "is {} lines and its opening comment does not say why",
        lines.len()
    ))
}

#[test]
fn every_long_file_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<PathBuf> = FOLDERS
        .iter()
        .flat_map(|folder| rust_files(&root.join(folder)))
        .collect();
    assert!(files.len() > 100, "only {} files found", files.len());
    let bad: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let source = std::fs::read_to_string(path).unwrap();
            verdict(&source)
                .err()
                .map(|why| format!("{}: {why}", path.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "files over {LIMIT} lines:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn the_check_tells_a_reason_from_none() {
    let body = "fn f() {}\n".repeat(LIMIT);
    assert!(verdict(&body).is_ok(), "800 lines is within the limit");
    let long = format!("//! A module.\n{body}");
    assert!(verdict(&long).is_err());
    let explained = format!("//! A module.\n//!\n//! This file is long because of X.\n{body}");
    assert!(verdict(&explained).is_ok());
    let tests_claim = format!("//! A module.\n//! Over 800 lines with its unit tests.\n{body}");
    assert!(verdict(&tests_claim).is_err(), "its code is over the limit");
    let short_code = format!(
        "//! A module.\n//! Over 800 lines with its unit tests.\nfn f() {{}}\n#[cfg(test)]\nmod tests {{\n{body}}}\n"
    );
    assert!(verdict(&short_code).is_ok());
}
