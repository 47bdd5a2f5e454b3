//! The behaviour table in `docs/behaviours.md` names tests that exist.

use std::path::{Path, PathBuf};

/// The files a unit test named `a::b::tests::t` (a path under `src/`) may
/// live in: `src/a/b.rs`, `src/a/b/mod.rs` and the rest of `src/a/b/`, and
/// `src/a/b_tests.rs`.
fn unit_test_files(root: &Path, module: &[&str]) -> Vec<PathBuf> {
    let base = module
        .iter()
        .fold(root.join("src"), |path, part| path.join(part));
    let mut files = vec![
        base.with_extension("rs"),
        base.with_file_name(format!("{}_tests.rs", module.last().unwrap_or(&""))),
    ];
    if let Ok(dir) = std::fs::read_dir(&base) {
        files.extend(dir.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    files
}

/// The files an integration test module named `file` may be: `tests/file.rs`
/// and `tests/<binary>/file.rs`.
fn test_files(root: &Path, file: &str) -> Vec<PathBuf> {
    let tests = root.join("tests");
    let mut files = vec![tests.join(format!("{file}.rs"))];
    if let Ok(dir) = std::fs::read_dir(&tests) {
        files.extend(
            dir.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .map(|d| d.join(format!("{file}.rs"))),
        );
    }
    files
}

#[test]
fn behaviour_table_names_existing_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("docs/behaviours.md")).unwrap();
    let mut checked = 0;
    for line in docs.lines().filter(|l| l.starts_with("| ")) {
        for name in line.split('`').skip(1).step_by(2) {
            let parts: Vec<&str> = name.split("::").collect();
            let (files, test) = match parts.as_slice() {
                // A test of `tests/`: a binary of its own, or a module of a
                // binary's folder (`tests/routing/routing_fallback.rs`).
                [file, test] if !file.contains(' ') => (test_files(root, file), *test),
                [module @ .., "tests", test] if !module.is_empty() => {
                    (unit_test_files(root, module), *test)
                }
                // A unit test in a file of a module's `tests/` folder
                // (`store::tests::typed_call::t`: `src/store/tests/typed_call.rs`).
                [module @ .., "tests", file, test] if !module.is_empty() => {
                    let dir = module
                        .iter()
                        .fold(root.join("src"), |path, part| path.join(part));
                    (vec![dir.join("tests").join(format!("{file}.rs"))], *test)
                }
                _ => continue,
            };
            let found = files.iter().any(|file| {
                std::fs::read_to_string(file)
                    .is_ok_and(|source| source.contains(&format!("fn {test}(")))
            });
            assert!(found, "{name} is not a test in any of {files:?}");
            checked += 1;
        }
    }
    assert!(
        checked >= 50,
        "only {checked} test names found in the table"
    );
}
