//! Message and entry sizes as TiKV and PD have them, over real loopback
//! gRPC: stores take and send messages of any size, unary or batched; a
//! write over the Raft entry limit is refused with `RaftEntryTooLarge`
//! before anything is applied; PD takes requests far above tonic's 4 MiB.

use prost::Message;
use tikv_sim::proto::kvrpcpb;
use tikv_sim::proto::pdpb;
use tikv_sim::proto::tikvpb::batch_commands_request::{request::Cmd as BatchCmd, Request};
use tikv_sim::proto::tikvpb::batch_commands_response::response::Cmd as BatchAnswer;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::tikvpb::BatchCommandsRequest;
use tikv_sim::{Outcome, SimCluster};
use tonic::transport::Channel;

const MIB: usize = 1024 * 1024;

/// A one-Region cluster (with `entry_limit`, if given), its leader's
/// client and a valid context.
async fn single_region(
    entry_limit: Option<u64>,
) -> (SimCluster, u64, TikvClient<Channel>, kvrpcpb::Context) {
    let mut builder = SimCluster::builder().stores(3);
    if let Some(limit) = entry_limit {
        builder = builder.raft_entry_max_size(limit);
    }
    let cluster = builder.start().await.unwrap();
    let region = cluster.regions()[0].clone();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    let client = cluster.tikv_client(leader).await.unwrap();
    let ctx = cluster.context(region.id, leader).unwrap();
    (cluster, leader, client, ctx)
}

fn put(ctx: &kvrpcpb::Context, key: &[u8], value: Vec<u8>) -> kvrpcpb::RawPutRequest {
    kvrpcpb::RawPutRequest {
        context: Some(ctx.clone()),
        key: key.to_vec(),
        value,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_5_mib_raw_put_is_taken_and_its_answer_sent_whatever_the_size() {
    let (cluster, _, mut client, ctx) = single_region(None).await;
    let value = vec![7u8; 5 * MIB];
    let put_req = put(&ctx, b"big", value.clone());
    // Over tonic's default 4 MiB: the store's limit is TiKV's, none.
    assert!(put_req.encoded_len() > 4 * MIB);
    let answer = client.raw_put(put_req).await.unwrap().into_inner();
    assert_eq!(answer.region_error, None);
    assert_eq!(answer.error, "");
    assert_eq!(cluster.value_of(b"big").map(|v| v.len()), Some(5 * MIB));

    // The store sends the 5 MiB answer; a client with tonic's default
    // 4 MiB receive limit refuses it itself.
    let get = kvrpcpb::RawGetRequest {
        context: Some(ctx.clone()),
        key: b"big".to_vec(),
        ..Default::default()
    };
    let refused = client.raw_get(get.clone()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::OutOfRange);
    assert!(
        refused
            .message()
            .contains("decoded message length too large"),
        "{refused:?}"
    );
    // A client whose limit allows it reads it.
    let mut roomy = client.clone().max_decoding_message_size(usize::MAX);
    let got = roomy.raw_get(get).await.unwrap().into_inner();
    assert_eq!(got.value, value);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_5_mib_put_in_a_batch_commands_stream_is_taken() {
    let (cluster, _, client, ctx) = single_region(None).await;
    let mut client = client.max_decoding_message_size(usize::MAX);
    let message = BatchCommandsRequest {
        requests: vec![Request {
            cmd: Some(BatchCmd::RawPut(put(&ctx, b"big", vec![3u8; 5 * MIB]))),
        }],
        request_ids: vec![1],
        ..Default::default()
    };
    let mut answers = client
        .batch_commands(futures::stream::iter([message]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.request_ids, vec![1]);
    match answer.responses[0].cmd.as_ref() {
        Some(BatchAnswer::RawPut(put)) => assert_eq!(put.region_error, None),
        other => panic!("not a RawPut answer: {other:?}"),
    }
    assert_eq!(cluster.value_of(b"big").map(|v| v.len()), Some(5 * MIB));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_write_over_the_entry_limit_is_refused_with_raft_entry_too_large() {
    let (cluster, store, mut client, ctx) = single_region(Some(1024)).await;
    let too_big = put(&ctx, b"k", vec![1u8; 2048]);
    let size = too_big.encoded_len() as u64;
    let answer = client.raw_put(too_big).await.unwrap().into_inner();
    let error = answer.region_error.expect("a Region error");
    let too_large = error.raft_entry_too_large.expect("RaftEntryTooLarge");
    assert_eq!(too_large.region_id, ctx.region_id);
    assert_eq!(too_large.entry_size, size);
    assert_eq!(
        error.message,
        format!(
            "raft entry is too large, region {}, entry size {size}",
            ctx.region_id
        )
    );
    // Nothing was applied.
    assert_eq!(cluster.value_of(b"k"), None);
    assert_eq!(
        cluster
            .counters(store)
            .count("raw_put", Outcome::RaftEntryTooLarge),
        1
    );

    // Under the limit, written; a read is never refused, whatever it asks.
    let small = client
        .raw_put(put(&ctx, b"k", vec![1u8; 100]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(small.region_error, None);
    let read = client
        .raw_batch_get(kvrpcpb::RawBatchGetRequest {
            context: Some(ctx.clone()),
            keys: (0..200)
                .map(|i| format!("key-{i:04}").into_bytes())
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.region_error, None);

    // The Region checks come first: a stale epoch is EpochNotMatch.
    let mut stale = ctx.clone();
    if let Some(epoch) = stale.region_epoch.as_mut() {
        epoch.version += 5;
    }
    let answer = client
        .raw_put(put(&stale, b"k", vec![1u8; 2048]))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.region_error.unwrap().epoch_not_match.is_some());

    // A transactional write too: the prewrite leaves no lock.
    let start = cluster.current_ts();
    let prewrite = client
        .kv_prewrite(kvrpcpb::PrewriteRequest {
            context: Some(ctx.clone()),
            mutations: vec![kvrpcpb::Mutation {
                op: kvrpcpb::Op::Put as i32,
                key: b"t".to_vec(),
                value: vec![2u8; 2048],
                assertion: 0,
            }],
            primary_lock: b"t".to_vec(),
            start_version: start,
            lock_ttl: 3_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(prewrite
        .region_error
        .is_some_and(|e| e.raft_entry_too_large.is_some()));
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_batched_write_over_the_entry_limit_is_answered_with_the_region_error() {
    let (cluster, _, mut client, ctx) = single_region(Some(1024)).await;
    let message = BatchCommandsRequest {
        requests: vec![
            Request {
                cmd: Some(BatchCmd::RawPut(put(&ctx, b"a", vec![1u8; 2048]))),
            },
            Request {
                cmd: Some(BatchCmd::RawPut(put(&ctx, b"b", vec![1u8; 10]))),
            },
        ],
        request_ids: vec![1, 2],
        ..Default::default()
    };
    let mut answers = client
        .batch_commands(futures::stream::iter([message]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let by_id: Vec<(u64, bool)> = answer
        .request_ids
        .iter()
        .zip(&answer.responses)
        .map(|(id, r)| match r.cmd.as_ref() {
            Some(BatchAnswer::RawPut(put)) => (
                *id,
                put.region_error
                    .as_ref()
                    .is_some_and(|e| e.raft_entry_too_large.is_some()),
            ),
            other => panic!("not a RawPut answer: {other:?}"),
        })
        .collect();
    assert_eq!(by_id, vec![(1, true), (2, false)]);
    assert_eq!(cluster.value_of(b"a"), None);
    assert_eq!(cluster.value_of(b"b"), Some(vec![1u8; 10]));
    cluster.shutdown().await;
}

#[tokio::test]
async fn pd_takes_a_request_over_4_mib() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let answer = pd
        .get_region(pdpb::GetRegionRequest {
            header: Some(pdpb::RequestHeader {
                cluster_id: cluster.cluster_id(),
                sender_id: 0,
            }),
            region_key: vec![b'k'; 5 * MIB],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.region.map(|r| r.id), Some(1000));
    cluster.shutdown().await;
}

#[tokio::test]
async fn an_entry_limit_of_zero_is_refused() {
    let built = SimCluster::builder().raft_entry_max_size(0).start().await;
    assert!(built.is_err());
}
