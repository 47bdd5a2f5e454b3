//! The behaviour table in `src/request/mod.rs` names tests that exist.

use std::path::Path;

#[test]
fn behaviour_table_names_existing_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("src/request/mod.rs")).unwrap();
    let mut checked = 0;
    for line in docs.lines().filter(|l| l.starts_with("//! |")) {
        for name in line.split('`').skip(1).step_by(2) {
            let parts: Vec<&str> = name.split("::").collect();
            let (file, test) = match parts.as_slice() {
                [file, test] => (root.join("tests").join(format!("{file}.rs")), *test),
                ["request", module, "tests", test] => {
                    (root.join("src/request").join(format!("{module}.rs")), *test)
                }
                ["region", "tests", test] => (root.join("src/region/mod.rs"), *test),
                _ => continue,
            };
            let source = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{name}: cannot read {}: {e}", file.display()));
            if test != "*" {
                assert!(
                    source.contains(&format!("fn {test}(")),
                    "{name} is not a test in {}",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 40,
        "only {checked} test names found in the table"
    );
}
