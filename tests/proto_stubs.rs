//! The build script generates gRPC client stubs always and server stubs
//! only with the `sim` feature (a client application never serves TiKV or
//! PD). Checked on the generated code itself.

#[test]
fn client_stubs_always_server_stubs_only_with_sim() {
    let tikv = include_str!(concat!(env!("OUT_DIR"), "/tikvpb.rs"));
    let pd = include_str!(concat!(env!("OUT_DIR"), "/pdpb.rs"));
    assert!(tikv.contains("pub mod tikv_client"));
    assert!(pd.contains("pub mod pd_client"));
    assert_eq!(tikv.contains("pub mod tikv_server"), cfg!(feature = "sim"));
    assert_eq!(pd.contains("pub mod pd_server"), cfg!(feature = "sim"));
}
