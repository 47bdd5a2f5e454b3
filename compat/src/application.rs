//! The raw API as client-rust applications use it beyond the example:
//! `Config` fields and knobs, conversions, column families, TTLs, atomic
//! compare-and-swap, and the error variants a program matches on.

use std::convert::TryFrom;
use std::path::PathBuf;
use std::time::Duration;

use tikv_client::{
    Backoff, BoundRange, ColumnFamily, Config, Error, IntoOwnedRange, Key, KvPair, ProtoKeyError,
    ProtoRegionError, RawClient, Result, SecurityManager, Value,
};

/// A `Config` built and read the way client-rust users do.
pub fn config() -> Config {
    let config = Config::default()
        .with_timeout(Duration::from_secs(3))
        .with_grpc_max_decoding_message_size(8 * 1024 * 1024);
    let _tls: (&Option<PathBuf>, &Option<PathBuf>, &Option<PathBuf>) =
        (&config.ca_path, &config.cert_path, &config.key_path);
    let _keyspace: &Option<String> = &config.keyspace;
    assert_eq!(config.grpc_max_decoding_message_size, 8 * 1024 * 1024);
    assert_eq!(config.timeout, Duration::from_secs(3));
    config
}

/// The names a program refers to without calling them.
pub fn names() {
    fn takes_security_manager(_: Option<&SecurityManager>) {}
    takes_security_manager(None);
    fn takes_raw_client(_: Option<&tikv_client::raw::Client>) {}
    takes_raw_client(None);
    let _: Option<tikv_client::raw::ColumnFamily> = None;
}

/// What an application tells its user for each error client-rust returns,
/// matching on client-rust's variant names and shapes exhaustively (no `_`
/// arm: tikv-client 0.4's `Error` is an exhaustive enum, and so is
/// tikv-plan's).
pub fn explain(error: &Error) -> String {
    match error {
        Error::RegionError(region_error) => {
            let e: &ProtoRegionError = region_error;
            format!("region error (not leader: {})", e.not_leader.is_some())
        }
        Error::KeyError(key_error) => {
            let e: &ProtoKeyError = key_error;
            format!("key error: {}", e.abort)
        }
        Error::KvError { message } => format!("kv error: {message}"),
        Error::GrpcAPI(status) => format!("gRPC status {:?}", status.code()),
        Error::Grpc(e) => format!("gRPC: {e}"),
        Error::UndeterminedError(inner) => format!("undetermined: {inner}"),
        Error::MaxScanLimitExceeded { limit, max_limit } => {
            format!("scan limit {limit} over {max_limit}")
        }
        Error::ColumnFamilyError(cf) => format!("bad column family {cf}"),
        Error::KeyspaceNotFound(name) => format!("no keyspace {name}"),
        Error::InternalError { message } => format!("internal: {message}"),
        Error::StringError(text) => text.clone(),
        Error::Unimplemented => "unimplemented".to_owned(),
        Error::UnsupportedMode => "unsupported mode".to_owned(),
        Error::RegionForKeyNotFound { key } => format!("no region for {key:?}"),
        Error::RegionForRangeNotFound { range } => format!("no region for {range:?}"),
        Error::RegionNotFoundInResponse { region_id } => format!("region {region_id} missing"),
        Error::LeaderNotFound { .. } => "no leader".to_owned(),
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            format!("{} errors", errors.len())
        }
        Error::NoCurrentRegions | Error::EntryNotFoundInRegionCache => "cache".to_owned(),
        Error::Io(e) => format!("io: {:?}", e.kind()),
        Error::DuplicateKeyInsertion => "duplicate key".to_owned(),
        Error::ResolveLockError(locks) => format!("{} locks", locks.len()),
        Error::InvalidTransactionType => "invalid transaction type".to_owned(),
        Error::OperationAfterCommitError => "operation after commit".to_owned(),
        Error::OnePcFailure => "1PC failed".to_owned(),
        Error::NoPrimaryKey => "no primary key".to_owned(),
        Error::Channel(e) => format!("channel: {e}"),
        Error::Url(e) => format!("url: {e}"),
        Error::Canceled(e) => format!("canceled: {e}"),
        Error::JoinError(e) => format!("join: {e}"),
        Error::InvalidSemver(e) => format!("semver: {e}"),
        Error::PessimisticLockError {
            inner,
            success_keys,
        } => format!(
            "pessimistic lock: {inner} ({} keys locked)",
            success_keys.len()
        ),
        Error::TxnNotFound(t) => format!("transaction {} not found", t.start_ts),
    }
}

/// The rest of the raw API, each result checked.
pub async fn run(pd_endpoints: Vec<String>) -> Result<()> {
    names();
    let client = RawClient::new_with_config(pd_endpoints, config()).await?;
    let client = client
        .with_cf(ColumnFamily::try_from("default")?)
        .with_backoff(Backoff::no_jitter_backoff(2, 500, 10));
    assert!(matches!(
        ColumnFamily::try_from("nope".to_owned()),
        Err(Error::ColumnFamilyError(_))
    ));

    // TTLs, one per pair.
    let pairs = vec![
        KvPair::new("t1".to_owned(), "a".to_owned()),
        KvPair::new("t2".to_owned(), "b".to_owned()),
    ];
    client.batch_put_with_ttl(pairs, vec![100, 200]).await?;
    let ttl = client.get_key_ttl_secs("t2".to_owned()).await?;
    assert!(matches!(ttl, Some(t) if t > 100 && t <= 200));

    // Conversions users lean on.
    let pair = KvPair::from(("t1".to_owned(), "a".to_owned()));
    let key: &Key = pair.as_ref();
    assert_eq!(key.len(), 2);
    assert!(!key.is_empty());
    let (start, end): (Key, Option<Key>) =
        BoundRange::from("a".to_owned().."t".to_owned()).into_keys();
    assert_eq!(
        (start, end),
        (Key::from("a".to_owned()), Some(Key::from("t".to_owned())))
    );
    let keys: Vec<Key> = client.scan_keys(("t".."u").into_owned(), 10).await?;
    assert_eq!(keys.len(), 2);
    let newest: Vec<KvPair> = client.scan_reverse(("t"..).into_owned(), 1).await?;
    assert_eq!(newest[0].key(), &Key::from("t2".to_owned()));
    let both: Vec<Key> = client
        .batch_scan_keys(vec![("t1".to_owned(), "t2".to_owned())], 10)
        .await?;
    assert_eq!(both, vec![Key::from("t1".to_owned())]);

    // A limit over the maximum, matched by client-rust's variant.
    match client.scan(.., 20_000).await {
        Err(Error::MaxScanLimitExceeded { limit, max_limit }) => {
            assert_eq!((limit, max_limit), (20_000, 10_240));
        }
        other => panic!("expected MaxScanLimitExceeded, got {other:?}"),
    }

    // Compare-and-swap needs atomic mode, as in client-rust.
    let err = client
        .compare_and_swap("c".to_owned(), None, "1".to_owned())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedMode), "{}", explain(&err));
    let atomic = client.with_atomic_for_cas();
    let (previous, swapped): (Option<Value>, bool) = atomic
        .compare_and_swap("c".to_owned(), None, "1".to_owned())
        .await?;
    assert_eq!((previous, swapped), (None, true));

    // Errors built the client-rust way.
    let region: Error = ProtoRegionError::default().into();
    assert!(matches!(region, Error::RegionError(_)));
    let key_error: Error = ProtoKeyError::default().into();
    assert!(matches!(key_error, Error::KeyError(_)));

    atomic.delete("c".to_owned()).await?;
    client
        .batch_delete(vec!["t1".to_owned(), "t2".to_owned()])
        .await?;
    Ok(())
}
