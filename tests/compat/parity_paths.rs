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

/// client-rust's `From` conversions into `Error`, each landing in the
/// variant a client-rust program matches on.
#[tokio::test]
async fn client_rust_error_conversions_land_in_their_variants() {
    use tikv_plan::Error;

    let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
    assert!(matches!(Error::from(io), Error::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe));

    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    drop(tx);
    assert!(matches!(
        Error::from(rx.await.unwrap_err()),
        Error::Channel(_)
    ));

    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    drop(tx);
    assert!(matches!(
        Error::from(rx.await.unwrap_err()),
        Error::Canceled(_)
    ));

    let task = tokio::spawn(async { panic!("a task of the application") });
    assert!(matches!(
        Error::from(task.await.unwrap_err()),
        Error::JoinError(_)
    ));

    let uri = "not a uri"
        .parse::<tonic::codegen::http::Uri>()
        .unwrap_err();
    assert!(matches!(Error::from(uri), Error::Url(_)));

    let semver = semver::VersionReq::parse("one point two").unwrap_err();
    let err = Error::from(semver);
    assert!(matches!(err, Error::InvalidSemver(_)), "{err:?}");
    assert!(err.to_string().contains("semver"), "{err}");

    let status = tonic::Status::unavailable("store down");
    assert!(matches!(
        Error::from(status),
        Error::GrpcAPI(s) if s.code() == tonic::Code::Unavailable
    ));
}
