//! The checked-in Rust under `src/generated/` is exactly what
//! tonic-prost-build makes of `proto/*.proto`: this test generates it afresh
//! (protoc from `protoc-bin-vendored`, so nothing needs installing) and
//! compares file by file. After changing a `.proto` file, run
//! `UPDATE_GENERATED=1 cargo test -p tikv-plan-proto --test generated` to
//! rewrite the checked-in copy.

use std::path::{Path, PathBuf};

/// The packages, one generated file each.
const PACKAGES: [&str; 10] = [
    "metapb",
    "errorpb",
    "kvrpcpb",
    "tikvpb",
    "pdpb",
    "keyspacepb",
    "tracepb",
    "deadlock",
    "encryptionpb",
    "resource_manager",
];

const HEADER: &str = "// Generated from proto/*.proto by tonic-prost-build (tests/generated.rs);\n\
// do not edit. Long because it is generated: one file per protobuf package.\n\n";

fn generate(out: &Path) -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let proto = |name: &str| root.join("proto").join(name);
    let includes = [root.join("proto")];
    let protoc = protoc_bin_vendored::protoc_bin_path().map_err(std::io::Error::other)?;
    let config = || {
        let mut config = tonic_prost_build::Config::new();
        config.protoc_executable(&protoc);
        config
    };
    // Server stubs are generated but compiled only with the `server`
    // feature: a client application never serves TiKV or PD. The TiKV
    // service gets default method stubs (Unimplemented), so a test server
    // implements only the methods it needs; PD keeps required methods (its
    // `Tso` stream is an associated type the stub generator would replace).
    tonic_prost_build::configure()
        .out_dir(out)
        .emit_rerun_if_changed(false)
        .server_mod_attribute(".", "#[cfg(feature = \"server\")]")
        .generate_default_stubs(true)
        .compile_with_config(config(), &[proto("tikvpb.proto")], &includes)?;
    tonic_prost_build::configure()
        .out_dir(out)
        .emit_rerun_if_changed(false)
        .server_mod_attribute(".", "#[cfg(feature = \"server\")]")
        .compile_with_config(
            config(),
            &[proto("pdpb.proto"), proto("keyspacepb.proto")],
            &includes,
        )?;
    Ok(())
}

#[test]
fn the_checked_in_code_is_what_the_protos_generate() {
    let fresh = tempfile::tempdir().unwrap();
    generate(fresh.path()).unwrap();
    let checked_in: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated");
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for package in PACKAGES {
        let generated = std::fs::read_to_string(fresh.path().join(format!("{package}.rs")))
            .unwrap_or_else(|e| panic!("protoc wrote no {package}.rs: {e}"));
        let expected = format!("{HEADER}{generated}");
        let path = checked_in.join(format!("{package}.rs"));
        if update {
            std::fs::write(&path, &expected).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(expected.as_str()) {
            stale.push(package);
        }
    }
    assert!(
        stale.is_empty(),
        "src/generated is stale for {stale:?}: run \
         `UPDATE_GENERATED=1 cargo test -p tikv-plan-proto --test generated`"
    );
}

#[test]
fn client_stubs_are_always_compiled_and_server_stubs_only_with_the_server_feature() {
    let tikv = include_str!("../src/generated/tikvpb.rs");
    assert!(tikv.contains("pub mod tikv_client"));
    assert!(tikv.contains("#[cfg(feature = \"server\")]\npub mod tikv_server"));
    let pd = include_str!("../src/generated/pdpb.rs");
    assert!(pd.contains("#[cfg(feature = \"server\")]\npub mod pd_server"));
}
