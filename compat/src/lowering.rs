//! Plans built by hand from client-rust's `raw_lowering` and
//! `transaction_lowering`: each request comes from a lowering function and
//! runs through `PlanBuilder::new(pd, keyspace, request)` with client-rust's
//! stages, merges and processors. The transactional part is a two-phase
//! commit written out step by step (prewrite, commit, read back at a later
//! timestamp), as a tool that drives TiKV below the transaction API would.

// client-rust's `Timestamp` is a protobuf message, not `Copy`: its users
// clone it, and this program is written as they write it.
#![allow(clippy::clone_on_copy)]

use std::sync::Arc;

use tikv_client::pd::{PdClient, PdRpcClient};
use tikv_client::proto::kvrpcpb;
use tikv_client::raw_lowering::{
    new_raw_batch_get_request, new_raw_batch_put_request, new_raw_coprocessor_request,
    new_raw_delete_range_request, new_raw_get_request, new_raw_put_request, new_raw_scan_request,
};
use tikv_client::request::{Collect, CollectError, CollectSingle, Keyspace, Plan, PlanBuilder};
use tikv_client::transaction_lowering::{
    new_batch_get_request, new_commit_request, new_get_request, new_prewrite_request,
    new_scan_lock_request, new_scan_request,
};
use tikv_client::{Backoff, BoundRange, Config, Key, KvPair, Result, Timestamp};

/// What the program saw, for its test to check.
#[derive(Debug, Default)]
pub struct Seen {
    /// The raw value read back after the raw put.
    pub raw_get: Option<Vec<u8>>,
    /// The raw batch get of three keys, one of them absent.
    pub raw_batch_get: Vec<KvPair>,
    /// The raw scan of the first Region after the delete range.
    pub raw_scan_after_delete: Vec<KvPair>,
    /// The coprocessor's answers: one per Region.
    pub coprocessor: Vec<Vec<u8>>,
    /// Locks in the store between the prewrite and the commit.
    pub locks_before_commit: usize,
    /// The transactional read of the primary after the commit.
    pub txn_get: Option<Vec<u8>>,
    /// The transactional batch get after the commit.
    pub txn_batch_get: Vec<KvPair>,
    /// The transactional scan after the commit.
    pub txn_scan: Vec<KvPair>,
}

/// Runs the raw plans and the hand-written two-phase commit against the
/// cluster behind `pd_endpoints` (API v1). `coprocessor` names a plugin the
/// stores load, with its version requirement.
pub async fn run(pd_endpoints: Vec<String>, coprocessor: (&str, &str)) -> Result<Seen> {
    let pd = Arc::new(PdRpcClient::connect(&pd_endpoints, &Config::default()).await?);
    let keyspace = Keyspace::Disable;
    let backoff = Backoff::no_jitter_backoff(2, 500, 10);
    let mut seen = Seen::default();

    // Raw: put, get, batch put, batch get, delete range, scan, coprocessor.
    PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_raw_put_request("raw-a".to_owned().into(), b"1".to_vec(), None, 0, false),
    )
    .retry_multi_region(backoff.clone())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await?;
    seen.raw_get = PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_raw_get_request("raw-a".to_owned().into(), None),
    )
    .retry_multi_region(backoff.clone())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await?;
    let pairs = ["raw-b", "raw-z"]
        .into_iter()
        .map(|k| KvPair::new(k.to_owned(), k.as_bytes().to_vec()));
    PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_raw_batch_put_request(pairs, std::iter::empty(), None, false),
    )
    .retry_multi_region(backoff.clone())
    .merge(CollectError)
    .post_process_default()
    .plan()
    .execute()
    .await?;
    let keys = ["raw-a", "raw-missing", "raw-z"].map(|k| Key::from(k.to_owned()));
    let found = PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_raw_batch_get_request(keys.into_iter(), None),
    )
    .retry_multi_region(backoff.clone())
    .merge(Collect)
    .plan()
    .execute()
    .await?;
    // `Vec<KvPair>`, the crate's pair, as client-rust's `Collect` yields.
    seen.raw_batch_get = found;
    let range: BoundRange = ("raw-b".to_owned().."raw-c".to_owned()).into();
    PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_raw_delete_range_request(range, None),
    )
    .retry_multi_region(backoff.clone())
    .merge(CollectError)
    .post_process_default()
    .plan()
    .execute()
    .await?;
    let scanned = PlanBuilder::new(
        pd.clone(),
        keyspace,
        // One Region's piece: a raw scan plan covers the first Region of
        // its range (the caller continues from the Region's end).
        new_raw_scan_request(
            ("raw-".to_owned().."raw-m".to_owned()).into(),
            10,
            false,
            false,
            None,
        ),
    )
    .retry_multi_region(backoff.clone())
    .merge(Collect)
    .plan()
    .execute()
    .await?;
    seen.raw_scan_after_delete = scanned;
    let (name, version) = coprocessor;
    let request = new_raw_coprocessor_request(
        name.to_owned(),
        version.to_owned(),
        std::iter::once(("raw-".to_owned()..).into()),
        |region, _ranges| format!("region {}", region.id).into_bytes(),
    );
    let answers = PlanBuilder::new(pd.clone(), keyspace, request)
        .preserve_shard()
        .retry_multi_region(backoff.clone())
        .post_process_default()
        .plan()
        .execute()
        .await?;
    seen.coprocessor = answers.into_iter().map(|(_ranges, data)| data).collect();

    // Transactional: a two-phase commit of two keys, by hand.
    let start = pd.clone().get_timestamp().await?;
    let mutations = ["txn-a", "txn-b"]
        .into_iter()
        .map(|k| kvrpcpb::Mutation {
            op: kvrpcpb::Op::Put as i32,
            key: k.as_bytes().to_vec(),
            value: format!("{k} value").into_bytes(),
            ..Default::default()
        })
        .collect();
    let primary = Key::from("txn-a".to_owned());
    PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_prewrite_request(mutations, primary.clone(), start.clone(), 3_000),
    )
    .retry_multi_region(backoff.clone())
    .merge(CollectError)
    .extract_error()
    .plan()
    .execute()
    .await?;
    let now = pd.clone().get_timestamp().await?;
    let locks = PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_scan_lock_request(("txn-".to_owned()..).into(), &now, 10),
    )
    .retry_multi_region(backoff.clone())
    .merge(Collect)
    .plan()
    .execute()
    .await?;
    seen.locks_before_commit = locks.len();
    let commit = pd.clone().get_timestamp().await?;
    // The primary first: once it is committed, the transaction is.
    for key in ["txn-a", "txn-b"] {
        PlanBuilder::new(
            pd.clone(),
            keyspace,
            new_commit_request(
                std::iter::once(Key::from(key.to_owned())),
                start.clone(),
                commit.clone(),
            ),
        )
        .retry_multi_region(backoff.clone())
        .merge(CollectError)
        .extract_error()
        .plan()
        .execute()
        .await?;
    }
    let read: Timestamp = pd.clone().get_timestamp().await?;
    seen.txn_get = PlanBuilder::new(pd.clone(), keyspace, new_get_request(primary, read.clone()))
        .retry_multi_region(backoff.clone())
        .merge(CollectSingle)
        .post_process_default()
        .plan()
        .execute()
        .await?;
    let keys = ["txn-a", "txn-b", "txn-c"].map(|k| Key::from(k.to_owned()));
    seen.txn_batch_get = PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_batch_get_request(keys.into_iter(), read.clone()),
    )
    .retry_multi_region(backoff.clone())
    .merge(Collect)
    .plan()
    .execute()
    .await?;
    seen.txn_scan = PlanBuilder::new(
        pd.clone(),
        keyspace,
        new_scan_request(("txn-".to_owned()..).into(), read, 10, false, false),
    )
    .retry_multi_region(backoff)
    .merge(Collect)
    .plan()
    .execute()
    .await?;
    Ok(seen)
}
