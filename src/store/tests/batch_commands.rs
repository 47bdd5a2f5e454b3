//! The batched transport (`RpcMode::Batched`, `tikvpb.Tikv/BatchCommands`)
//! over real sockets on 127.0.0.1 against the simulated cluster: the same
//! answers as unary calls, requests sharing streams, voter fallback, replay
//! safety when a stream dies, timeouts, cancellation, and a chaos run.

use std::sync::Arc;
use std::time::Duration;

use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::store::batch::{BatchOptions, KvBatchClient};
use crate::store::client::KvRpcClient;
use crate::store::{KvClient, KvConnect, TikvConnect};
use crate::Failure;
use crate::{Config, RawClient, RpcMode, TransactionClient};
use futures::future::join_all;
use tikv_sim::{HangMode, Outcome, SimCluster};

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(10);

/// The raw methods the batch protocol carries (kvproto's cases).
const BATCHABLE: [&str; 9] = [
    "raw_get",
    "raw_batch_get",
    "raw_put",
    "raw_batch_put",
    "raw_delete",
    "raw_batch_delete",
    "raw_scan",
    "raw_delete_range",
    "raw_batch_scan",
];

fn batched() -> Config {
    Config::default()
        .with_rpc_mode(RpcMode::Batched)
        .with_timeout(Duration::from_millis(800))
        .with_connect_timeout(Duration::from_millis(300))
}

async fn cluster(stores: u64, splits: &[&[u8]]) -> SimCluster {
    SimCluster::builder()
        .stores(stores)
        .replicas(stores.min(3) as usize)
        .split_keys(splits.iter().map(|k| k.to_vec()).collect())
        .start()
        .await
        .unwrap()
}

/// Waits until `f` holds, checking every few milliseconds, bounded by
/// [`PATIENCE`].
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

fn sum(cluster: &SimCluster, f: impl Fn(&tikv_sim::StoreCounters) -> u64) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| f(&cluster.counters(s)))
        .sum()
}

/// A connector in batched mode with the given limits and request timeout.
fn connector(options: BatchOptions, timeout: Duration) -> TikvConnect {
    TikvConnect::new(
        Arc::new(crate::SecurityManager::plaintext()),
        timeout,
        Duration::from_millis(300),
    )
    .with_rpc_mode(RpcMode::Batched, options)
}

async fn store_client(cluster: &SimCluster, store: u64, connect: &TikvConnect) -> KvRpcClient {
    connect
        .connect(&cluster.store_addr(store).unwrap())
        .await
        .unwrap()
}

fn raw_get(cluster: &SimCluster, store: u64, key: &[u8]) -> kvrpcpb::RawGetRequest {
    let region = cluster.region_for_key(key).unwrap();
    kvrpcpb::RawGetRequest {
        context: Some(cluster.context(region.id, store).unwrap()),
        key: key.to_vec(),
        cf: String::new(),
    }
}

fn leader_store(cluster: &SimCluster, key: &[u8]) -> u64 {
    let region = cluster.region_for_key(key).unwrap();
    cluster.leader_of(region.id).unwrap().store_id
}

#[tokio::test]
async fn raw_operations_travel_in_batches_with_unary_answers() {
    let cluster = cluster(3, &[b"g", b"n"]).await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    client.put("a", "1").await.unwrap();
    assert_eq!(client.get("a").await.unwrap(), Some(b"1".to_vec()));
    client
        .batch_put(vec![("b", "2"), ("h", "3"), ("p", "4")])
        .await
        .unwrap();
    let mut got = client.batch_get(vec!["a", "h", "p", "zz"]).await.unwrap();
    got.sort_by(|x, y| x.0.cmp(&y.0));
    let got: Vec<(Vec<u8>, Vec<u8>)> = got.into_iter().map(|p| (Vec::from(p.0), p.1)).collect();
    assert_eq!(
        got,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"h".to_vec(), b"3".to_vec()),
            (b"p".to_vec(), b"4".to_vec()),
        ]
    );
    let scanned = client
        .scan("a".to_owned().."z".to_owned(), 10)
        .await
        .unwrap();
    assert_eq!(scanned.len(), 4, "a, b, h, p across three Regions");
    client.delete("a").await.unwrap();
    assert_eq!(client.get("a").await.unwrap(), None);
    client.batch_delete(vec!["b", "h"]).await.unwrap();
    client
        .delete_range("o".to_owned().."q".to_owned())
        .await
        .unwrap();
    assert_eq!(client.scan("a".to_owned().., 10).await.unwrap(), vec![]);
    // No batch case exists for these: they go as unary calls on the same
    // client.
    let cas = client.with_atomic_for_cas();
    let (previous, swapped) = cas
        .compare_and_swap("c", None::<Vec<u8>>, b"x".to_vec())
        .await
        .unwrap();
    assert_eq!((previous, swapped), (None, true));
    assert_eq!(cas.get_key_ttl_secs("c").await.unwrap(), Some(0));

    // Every batchable request arrived inside a BatchCommands message; the
    // others did not.
    let batchable: u64 = BATCHABLE
        .iter()
        .map(|m| sum(&cluster, |c| c.total(m)))
        .sum();
    assert!(batchable >= 10, "{batchable}");
    assert_eq!(sum(&cluster, |c| c.batch_requests()), batchable);
    assert!(sum(&cluster, |c| c.batch_streams()) >= 1);
    assert_eq!(sum(&cluster, |c| c.total("raw_compare_and_swap")), 1);
    assert_eq!(sum(&cluster, |c| c.total("raw_get_key_ttl")), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn transactions_travel_in_batches() {
    let cluster = cluster(3, &[]).await;
    let client = TransactionClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put(b"a".to_vec(), b"1".to_vec()).await.unwrap();
    txn.put(b"z".to_vec(), b"2".to_vec()).await.unwrap();
    txn.commit().await.unwrap();
    let mut read = client.begin_optimistic().await.unwrap();
    assert_eq!(read.get(b"z".to_vec()).await.unwrap(), Some(b"2".to_vec()));
    read.rollback().await.unwrap();
    let txn_methods: u64 = ["kv_prewrite", "kv_commit", "kv_get"]
        .iter()
        .map(|m| sum(&cluster, |c| c.count(m, Outcome::Ok)))
        .sum();
    assert!(txn_methods >= 3, "{txn_methods}");
    assert!(
        sum(&cluster, |c| c.batch_requests()) >= txn_methods,
        "prewrite, commit and get went inside BatchCommands messages"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_share_streams_and_messages() {
    let cluster = cluster(1, &[]).await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    client.put("k", "v").await.unwrap();
    cluster.reset_counters();
    const N: u64 = 400;
    let gets = (0..N).map(|_| client.get("k"));
    for got in join_all(gets).await {
        assert_eq!(got.unwrap(), Some(b"v".to_vec()));
    }
    let c = cluster.counters(1);
    assert_eq!(c.batch_requests(), N);
    assert_eq!(c.count("raw_get", Outcome::Ok), N);
    assert!(
        c.batch_messages() * 4 < N,
        "{} messages carried {N} requests",
        c.batch_messages()
    );
    assert!(
        c.batch_streams() <= 3,
        "the put's stream is reused; saturation may add streams up to four in all"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_stream_gets_company_up_to_the_maximum() {
    let cluster = cluster(1, &[]).await;
    cluster.store_slow(1, Duration::from_millis(20));
    let options = BatchOptions {
        max_batch_size: 2,
        max_streams: 3,
        max_wait: Duration::ZERO,
        ..BatchOptions::default()
    };
    let client = store_client(&cluster, 1, &connector(options, PATIENCE)).await;
    let batch = client.batch_client().unwrap().clone();
    let req = Arc::new(raw_get(&cluster, 1, b"k"));
    let mut tasks = Vec::new();
    let spawn_one = |tasks: &mut Vec<tokio::task::JoinHandle<()>>| {
        let (client, req) = (client.clone(), req.clone());
        tasks.push(tokio::spawn(async move {
            client.dispatch(req.as_ref()).await.unwrap();
        }));
    };
    tokio::time::timeout(PATIENCE, async {
        while batch.open_streams() < 3 {
            spawn_one(&mut tasks);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("a third stream opens under load");
    for _ in 0..50 {
        spawn_one(&mut tasks);
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(batch.open_streams(), 3);
    assert_eq!(
        cluster.counters(1).batch_streams(),
        3,
        "never more than the maximum"
    );
    assert_eq!(batch.in_flight(), 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn leader_store_death_falls_back_to_voters_in_batched_mode() {
    let cluster = cluster(3, &[]).await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    client.put("k", "v1").await.unwrap();
    let region_id = cluster.region_for_key(b"k").unwrap().id;
    let leader = cluster.leader_of(region_id).unwrap().store_id;
    let next = leader % 3 + 1;
    // The leader's store dies; another voter leads, PD still names the old.
    cluster.transfer_leader(region_id, next, false).unwrap();
    cluster.store_down(leader).await;
    assert_eq!(client.get("k").await.unwrap(), Some(b"v1".to_vec()));
    client.put("k", "v2").await.unwrap();
    assert_eq!(cluster.value_of(b"k"), Some(b"v2".to_vec()));
    assert!(cluster.counters(next).batch_requests() >= 2);
    cluster.shutdown().await;
}

fn assert_undetermined(result: crate::Result<()>, what: &str) {
    match result.as_ref().err().and_then(|e| e.failure()) {
        Some(Failure::Undetermined { request, .. }) => {
            assert!(request.contains(what), "{request}");
        }
        _ => panic!("{what}: expected an undetermined outcome, got {result:?}"),
    }
}

#[tokio::test]
async fn a_write_in_flight_when_its_stream_dies_is_undetermined() {
    let cluster = cluster(3, &[]).await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    client.put("k", "v1").await.unwrap();
    let store = leader_store(&cluster, b"k");

    // Applied, then the answer is lost with the connection (and the stream).
    cluster.drop_next_response(store, "raw_put").unwrap();
    assert_undetermined(client.put("k", "v2").await, "raw_put");
    assert_eq!(cluster.value_of(b"k"), Some(b"v2".to_vec()));

    // Received and waiting in a hang when the store dies: never applied,
    // but the client cannot know, and does not send it anywhere else. (A
    // fresh client: the first one now tries that store last, after the
    // transport failure.)
    let client = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    cluster.reset_counters();
    cluster.store_hang(store, HangMode::Respond);
    let put = tokio::spawn({
        let client = client.clone();
        async move { client.put("k", "v3").await }
    });
    eventually("the put waits in the hang", || {
        cluster.counters(store).count("raw_put", Outcome::Hung) == 1
    })
    .await;
    cluster.store_down(store).await;
    assert_undetermined(put.await.unwrap(), "raw_put");
    assert_eq!(cluster.value_of(b"k"), Some(b"v2".to_vec()));
    assert_eq!(
        sum(&cluster, |c| c.total("raw_put")),
        0,
        "never re-sent to another store"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_request_never_written_fails_as_not_sent() {
    // A port that refuses: the stream never opens, so the request stays
    // queued and is never written.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_millis(300))
        .connect_lazy();
    let client = KvBatchClient::new(
        channel,
        &addr.to_string(),
        Duration::from_secs(5),
        BatchOptions::default(),
    );
    let put = kvrpcpb::RawPutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    let error = client.dispatch(&put).await.unwrap_err();
    let failure = classify_dispatch_error(&error);
    assert_eq!(failure, DispatchFailure::NotSent, "{error}");
    assert!(!failure.may_have_been_sent());
    assert_eq!(client.in_flight(), 0);
    assert_eq!(client.open_streams(), 0, "the broken stream is dropped");
}

#[tokio::test]
async fn a_hung_store_times_out_each_request_and_forgets_it() {
    let cluster = cluster(1, &[]).await;
    let timeout = Duration::from_millis(200);
    let client = store_client(&cluster, 1, &connector(BatchOptions::default(), timeout)).await;
    let batch = client.batch_client().unwrap().clone();
    let req = raw_get(&cluster, 1, b"k");
    client.dispatch(&req).await.unwrap();

    cluster.store_hang(1, HangMode::Respond);
    let error = client.dispatch(&req).await.unwrap_err();
    // As a unary call that timed out: tonic's status and cause.
    let crate::Error::GrpcAPI(status) = &error else {
        panic!("a status: {error:?}");
    };
    assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
    assert!(
        error.find_source::<tonic::TimeoutExpired>().is_some(),
        "{error:?}"
    );
    assert_eq!(
        classify_dispatch_error(&error),
        DispatchFailure::ClientTimeout
    );
    assert_eq!(batch.in_flight(), 0, "the timed-out request left the map");

    // The hang ends: the late answer to the forgotten request is ignored and
    // the same stream serves the next request.
    cluster.store_unhang(1);
    eventually("the late answer is served", || {
        cluster.counters(1).count("raw_get", Outcome::Ok) == 2
    })
    .await;
    client.dispatch(&req).await.unwrap();
    // The stream gave no answer for a whole timeout: it was retired, and
    // the next request opened a fresh one.
    assert_eq!(cluster.counters(1).batch_streams(), 2);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_dropped_request_future_removes_its_entry() {
    let cluster = cluster(1, &[]).await;
    let client = store_client(&cluster, 1, &connector(BatchOptions::default(), PATIENCE)).await;
    let batch = client.batch_client().unwrap().clone();
    let req = raw_get(&cluster, 1, b"k");
    client.dispatch(&req).await.unwrap();

    cluster.store_hang(1, HangMode::Respond);
    let mut pending = Box::pin(client.dispatch(&req));
    tokio::select! {
        _ = &mut pending => panic!("a hung store answered"),
        _ = eventually("the request reaches the hang", || {
            cluster.counters(1).count("raw_get", Outcome::Hung) == 1
        }) => {}
    }
    assert_eq!(batch.in_flight(), 1);
    drop(pending);
    assert_eq!(batch.in_flight(), 0, "cancelling removed the entry");
    cluster.store_unhang(1);
    client.dispatch(&req).await.unwrap();
    cluster.shutdown().await;
}

/// A store without BatchCommands (the generated stub answers
/// `Unimplemented`): the batched client falls back to unary calls.
#[tokio::test]
async fn a_store_without_batch_commands_is_served_with_unary_calls() {
    use crate::proto::tikvpb::tikv_server::{Tikv, TikvServer};

    struct UnaryOnly;
    #[tonic::async_trait]
    impl Tikv for UnaryOnly {
        async fn raw_get(
            &self,
            _: tonic::Request<kvrpcpb::RawGetRequest>,
        ) -> Result<tonic::Response<kvrpcpb::RawGetResponse>, tonic::Status> {
            Ok(tonic::Response::new(kvrpcpb::RawGetResponse {
                value: b"unary".to_vec(),
                ..Default::default()
            }))
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TikvServer::new(UnaryOnly))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let client = connector(BatchOptions::default(), PATIENCE)
        .connect(&addr.to_string())
        .await
        .unwrap();
    for _ in 0..2 {
        let resp = client
            .dispatch(&kvrpcpb::RawGetRequest::default())
            .await
            .unwrap();
        let resp = resp.downcast::<kvrpcpb::RawGetResponse>().unwrap();
        assert_eq!(resp.value, b"unary".to_vec());
    }
    assert_eq!(client.batch_client().unwrap().open_streams(), 0);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_decoding_limit_fails_only_its_own_request() {
    let cluster = cluster(1, &[]).await;
    let writer = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    writer.put("big", vec![7u8; 64 * 1024]).await.unwrap();
    let small = RawClient::new_with_config(
        cluster.pd_endpoints(),
        batched().with_grpc_max_decoding_message_size(16 * 1024),
    )
    .await
    .unwrap();
    small.put("k", "v").await.unwrap();
    let before = sum(&cluster, |c| c.batch_streams());
    // The big answer is a typed error naming the knob, at once (no retry).
    let big = small.get("big").await.unwrap_err();
    match big.failure() {
        Some(Failure::GrpcMessageTooLarge { limit, .. }) => assert_eq!(*limit, 16 * 1024),
        _ => panic!("expected GrpcMessageTooLarge, got {big:?}"),
    }
    // Many answers in one message, each within the limit, still decode; and
    // the stream that carried the big answer is still the one in use.
    let values: Vec<String> = (0..64).map(|i| format!("{i:0>8}").repeat(128)).collect();
    for (i, v) in values.iter().enumerate() {
        small.put(format!("k{i}"), v.clone()).await.unwrap();
    }
    let reads = join_all((0..64).map(|i| small.get(format!("k{i}")))).await;
    for (i, read) in reads.into_iter().enumerate() {
        assert_eq!(read.unwrap(), Some(values[i].clone().into_bytes()));
    }
    assert_eq!(sum(&cluster, |c| c.batch_streams()), before);
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_typed_batched_path_answers_as_the_boxed_one_and_only_when_batched() {
    let cluster = cluster(1, &[]).await;
    let writer = RawClient::new_with_config(cluster.pd_endpoints(), batched())
        .await
        .unwrap();
    writer.put("t", "typed").await.unwrap();
    let store = leader_store(&cluster, b"t");
    let connect = connector(BatchOptions::default(), PATIENCE);
    let client = store_client(&cluster, store, &connect).await;
    let request = raw_get(&cluster, store, b"t");
    let typed = crate::store::send_batched(&client, &request, None)
        .await
        .expect("a batched client takes the typed path")
        .unwrap();
    let boxed = client.dispatch(&request).await.unwrap();
    let boxed = boxed.downcast::<kvrpcpb::RawGetResponse>().unwrap();
    assert_eq!(typed.value, b"typed".to_vec());
    assert_eq!(*typed, *boxed);
    // Both went over the stream: no unary call was made.
    assert_eq!(client.batch_client().unwrap().open_streams(), 1);
    // A bound shorter than the client's own timeout is kept, and fails as
    // the plan's timeout when it runs out (here it does not).
    let bounded = crate::store::send_batched(&client, &request, Some(PATIENCE / 2))
        .await
        .unwrap();
    assert_eq!(bounded.unwrap().value, b"typed".to_vec());
    // A unary client has no typed batched path: the plan sends through
    // `dispatch_within`.
    let unary = connector(BatchOptions::default(), PATIENCE)
        .with_rpc_mode(RpcMode::Unary, BatchOptions::default());
    let unary = store_client(&cluster, store, &unary).await;
    assert!(crate::store::send_batched(&unary, &request, None)
        .await
        .is_none());
    assert!(crate::store::batched_client(&unary).is_none());
    assert!(crate::store::batched_client(&client).is_some());
    cluster.shutdown().await;
}
