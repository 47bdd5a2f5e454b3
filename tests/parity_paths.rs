//! tikv-client 0.4.0's paths that name our types: a client-rust program
//! that imports them builds unchanged.

use tikv_plan::request::RetryOptions as RequestRetryOptions;
use tikv_plan::transaction::{Client, ProtoLockInfo};

#[test]
fn client_rust_paths_name_the_same_types() {
    // `request::RetryOptions` is the root's.
    let from_request: RequestRetryOptions = RequestRetryOptions::default_pessimistic();
    let from_root: tikv_plan::RetryOptions = from_request.clone();
    assert_eq!(from_root, RequestRetryOptions::default_pessimistic());
    // `ProtoLockInfo` is the lock TiKV reports, at both paths.
    let lock = ProtoLockInfo {
        key: b"k".to_vec(),
        lock_version: 7,
        ..Default::default()
    };
    let at_root: tikv_plan::ProtoLockInfo = lock.clone();
    let wire: tikv_plan::proto::kvrpcpb::LockInfo = at_root;
    assert_eq!(wire, lock);
    // `transaction::Client` is `TransactionClient`.
    fn named(_: &Client) {}
    let _: fn(&tikv_plan::TransactionClient) = named;
}
