//! Compiles the wire protocol (`src/proto/*.proto`) into Rust with
//! tonic-prost-build. protoc comes from the `protoc-bin-vendored` crate so a
//! fresh machine needs nothing but cargo.
//!
//! Client stubs are always generated. Server stubs only with the `sim`
//! feature: the simulated cluster serves the TiKV and PD services, a client
//! application never does, so it should not compile (or link) them.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: a build script is single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = [
        "src/proto/metapb.proto",
        "src/proto/errorpb.proto",
        "src/proto/kvrpcpb.proto",
        "src/proto/tikvpb.proto",
        "src/proto/pdpb.proto",
        "src/proto/keyspacepb.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let servers = std::env::var_os("CARGO_FEATURE_SIM").is_some();
    // The TiKV service gets default method stubs (Unimplemented), so a test
    // server may implement only the methods it needs. PD keeps required
    // methods: its `Tso` stream type is an associated type that the stub
    // generator would replace.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(servers)
        .generate_default_stubs(true)
        .compile_protos(&["src/proto/tikvpb.proto"], &["src/proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(servers)
        .compile_protos(
            &["src/proto/pdpb.proto", "src/proto/keyspacepb.proto"],
            &["src/proto"],
        )?;
    Ok(())
}
