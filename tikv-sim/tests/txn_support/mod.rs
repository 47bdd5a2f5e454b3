//! Helpers shared by the tests that drive the simulated cluster's
//! transactional gRPC API by hand (`txn.rs`, `mvcc_rules.rs`,
//! `lock_wait.rs`).

#![allow(dead_code)]

use futures::StreamExt;
use tikv_sim::codec::encode_bytes;
use tikv_sim::proto::kvrpcpb::{self, Mutation, Op};
use tikv_sim::proto::pdpb;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::SimCluster;
use tonic::transport::Channel;

/// Three stores and replicas, Regions split at the encodings of
/// `plain_splits`.
pub async fn cluster_split_at(plain_splits: &[&[u8]]) -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(plain_splits.iter().map(|k| encode_bytes(k)).collect())
        .start()
        .await
        .unwrap()
}

/// The leader store of the Region holding transactional `key`, and a
/// correct context for it.
pub fn leader_ctx(cluster: &SimCluster, key: &[u8]) -> (u64, kvrpcpb::Context) {
    let region = cluster.region_for_key(&encode_bytes(key)).unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    (store, cluster.context(region.id, store).unwrap())
}

pub async fn client_for(
    cluster: &SimCluster,
    key: &[u8],
) -> (TikvClient<Channel>, kvrpcpb::Context) {
    let (store, ctx) = leader_ctx(cluster, key);
    (cluster.tikv_client(store).await.unwrap(), ctx)
}

/// One timestamp from PD's `Tso` stream.
pub async fn tso(cluster: &SimCluster) -> u64 {
    let mut pd = cluster.pd_client(0).await.unwrap();
    let request = pdpb::TsoRequest {
        header: Some(pdpb::RequestHeader {
            cluster_id: cluster.cluster_id(),
            sender_id: 0,
        }),
        count: 1,
        dc_location: String::new(),
    };
    let mut responses = pd
        .tso(futures::stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let ts = responses.next().await.unwrap().unwrap().timestamp.unwrap();
    (ts.physical as u64) << 18 | ts.logical as u64
}

pub fn put(key: &[u8], value: &[u8]) -> Mutation {
    Mutation {
        op: Op::Put as i32,
        key: key.to_vec(),
        value: value.to_vec(),
        assertion: 0,
    }
}

/// A prewrite of `mutations` (all in one Region) with primary `primary`.
pub fn prewrite_req(
    mutations: Vec<Mutation>,
    primary: &[u8],
    start: u64,
) -> kvrpcpb::PrewriteRequest {
    kvrpcpb::PrewriteRequest {
        mutations,
        primary_lock: primary.to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        ..Default::default()
    }
}

/// Sends `req` to the leader of its first key's Region (keeping the
/// request's `is_retry_request`).
pub async fn prewrite(
    cluster: &SimCluster,
    mut req: kvrpcpb::PrewriteRequest,
) -> kvrpcpb::PrewriteResponse {
    let (mut c, ctx) = client_for(cluster, &req.mutations[0].key).await;
    req.context = Some(kvrpcpb::Context {
        is_retry_request: req.context.is_some_and(|c| c.is_retry_request),
        ..ctx
    });
    c.kv_prewrite(req).await.unwrap().into_inner()
}

pub async fn commit(
    cluster: &SimCluster,
    keys: &[&[u8]],
    start: u64,
    commit: u64,
) -> kvrpcpb::CommitResponse {
    let (mut c, ctx) = client_for(cluster, keys[0]).await;
    c.kv_commit(kvrpcpb::CommitRequest {
        context: Some(ctx),
        start_version: start,
        keys: keys.iter().map(|k| k.to_vec()).collect(),
        commit_version: commit,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Prewrites and commits `key = value` in its own transaction; returns the
/// commit ts.
pub async fn write(cluster: &SimCluster, key: &[u8], value: &[u8]) -> u64 {
    let start = tso(cluster).await;
    let p = prewrite(cluster, prewrite_req(vec![put(key, value)], key, start)).await;
    assert!(p.errors.is_empty(), "{p:?}");
    let commit_ts = tso(cluster).await;
    let c = commit(cluster, &[key], start, commit_ts).await;
    assert!(c.error.is_none(), "{c:?}");
    commit_ts
}

pub async fn get(cluster: &SimCluster, key: &[u8], version: u64) -> kvrpcpb::GetResponse {
    let (mut c, ctx) = client_for(cluster, key).await;
    c.kv_get(kvrpcpb::GetRequest {
        context: Some(ctx),
        key: key.to_vec(),
        version,
    })
    .await
    .unwrap()
    .into_inner()
}

pub async fn check_txn_status(
    cluster: &SimCluster,
    primary: &[u8],
    lock_ts: u64,
    edit: impl FnOnce(&mut kvrpcpb::CheckTxnStatusRequest),
) -> kvrpcpb::CheckTxnStatusResponse {
    let (mut c, ctx) = client_for(cluster, primary).await;
    let now = tso(cluster).await;
    let mut req = kvrpcpb::CheckTxnStatusRequest {
        context: Some(ctx),
        primary_key: primary.to_vec(),
        lock_ts,
        caller_start_ts: now,
        current_ts: now,
        ..Default::default()
    };
    edit(&mut req);
    c.kv_check_txn_status(req).await.unwrap().into_inner()
}
