//! Deadlines the server can see: a read carries what is left of its
//! call's time in `Context.max_execution_duration_ms`, writes never carry
//! one, and a store drops a read whose deadline passed before it read it,
//! as TiKV does (`tikv-sim`'s `store/deadline.rs`), over loopback gRPC.

use std::time::Duration;

use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb;
use tikv_plan::{Config, RawClient, RpcMode};
use tikv_sim::{Outcome, SimCluster};

use super::support::{client_with, cluster, pessimistic};

const MODES: [RpcMode; 2] = [RpcMode::Unary, RpcMode::Batched];

/// Over every store: how many `method` requests carried a deadline, and
/// the largest.
fn deadlines(cluster: &SimCluster, method: &str) -> (u64, u64) {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).deadlines(method))
        .fold((0, 0), |(n, max), (m, top)| (n + m, max.max(top)))
}

fn count(cluster: &SimCluster, method: &str, outcome: Outcome) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count(method, outcome))
        .sum()
}

#[tokio::test]
async fn reads_carry_what_is_left_of_their_time_and_writes_carry_none() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        // The per-RPC timeout bounds each attempt; the call's deadline is
        // the smaller here, so it is what a read carries.
        let config = Config::default()
            .with_rpc_mode(mode)
            .with_timeout(Duration::from_secs(5))
            .with_request_deadline(Duration::from_millis(1500));
        let raw = RawClient::new_with_config(cluster.pd_endpoints(), config.clone())
            .await
            .unwrap();
        raw.put("a".to_owned(), "1".to_owned()).await.unwrap();
        raw.get("a".to_owned()).await.unwrap();
        raw.batch_get(vec!["a".to_owned(), "z".to_owned()])
            .await
            .unwrap();
        raw.scan("a".to_owned().., 10).await.unwrap();
        let client = client_with(&cluster, config).await;
        let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
        txn.get_for_update("b".to_owned()).await.unwrap();
        txn.get("c".to_owned()).await.unwrap();
        let _ = txn
            .batch_get(vec!["d".to_owned(), "y".to_owned()])
            .await
            .unwrap()
            .count();
        let _ = txn.scan("a".to_owned().., 10).await.unwrap().count();
        txn.put("b".to_owned(), "2".to_owned()).await.unwrap();
        txn.commit().await.unwrap();
        for read in [
            "raw_get",
            "raw_batch_get",
            "raw_scan",
            "kv_get",
            "kv_batch_get",
            "kv_scan",
        ] {
            let (n, max) = deadlines(&cluster, read);
            assert!(n >= 1, "{mode:?}: {read} carried no deadline");
            // What was left of 1.5 s, never more, rounded up to whole ms.
            assert!(
                max <= 1500 && max > 1000,
                "{mode:?}: {read} carried {max} ms"
            );
        }
        for write in ["raw_put", "kv_pessimistic_lock", "kv_prewrite", "kv_commit"] {
            assert!(count(&cluster, write, Outcome::Ok) >= 1, "{write}");
            assert_eq!(deadlines(&cluster, write), (0, 0), "{mode:?}: {write}");
        }
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn the_per_rpc_timeout_bounds_what_a_read_carries() {
    let cluster = cluster(&[]).await;
    let config = Config::default()
        .with_rpc_mode(RpcMode::Unary)
        .with_timeout(Duration::from_millis(700))
        .with_request_deadline(Duration::from_secs(20));
    let raw = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    raw.get("a".to_owned()).await.unwrap();
    assert_eq!(deadlines(&cluster, "raw_get"), (1, 700));
    cluster.shutdown().await;
}

/// TiKV's answer to a read that queued past its deadline, sent by hand: a
/// Region error `ServerIsBusy` "deadline is exceeded", and nothing read.
#[tokio::test]
async fn a_store_answers_a_read_past_its_deadline_as_tikv_does() {
    let cluster = cluster(&[]).await;
    let region = cluster.region_for_key(&encode_bytes(b"k")).unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    cluster.store_slow(store, Duration::from_millis(60));
    let mut tikv = cluster.tikv_client(store).await.unwrap();
    let get = |ms: u64| {
        let mut context = cluster.context(region.id, store).unwrap();
        context.max_execution_duration_ms = ms;
        kvrpcpb::GetRequest {
            context: Some(context),
            key: encode_bytes(b"k"),
            version: cluster.current_ts(),
        }
    };
    // 30 ms of time, 60 ms in the queue: dropped unread.
    let response = tikv.kv_get(get(30)).await.unwrap().into_inner();
    let error = response.region_error.expect("a Region error");
    let busy = error.server_is_busy.expect("ServerIsBusy");
    assert_eq!(busy.reason, "deadline is exceeded");
    assert_eq!(error.message, "Deadline is exceeded");
    // Enough time (or none set, TiKV's "no limit"): read.
    for ms in [5_000, 0] {
        let response = tikv.kv_get(get(ms)).await.unwrap().into_inner();
        assert_eq!(response.region_error, None, "{ms}");
        assert!(response.not_found);
    }
    assert_eq!(cluster.deadline_drops(), 1);
    assert_eq!(count(&cluster, "kv_get", Outcome::ServerIsBusy), 1);
    assert_eq!(count(&cluster, "kv_get", Outcome::Ok), 2);
    cluster.shutdown().await;
}

/// A client that gave up on a slow store: over BatchCommands (where a
/// given-up request still reaches the store, as every request does on
/// TiKV), the store drops the read unread instead of serving it late.
#[tokio::test]
async fn a_store_drops_the_reads_a_client_gave_up_on() {
    let cluster = cluster(&[]).await;
    let config = Config::default()
        .with_rpc_mode(RpcMode::Batched)
        .with_timeout(Duration::from_millis(100))
        .with_request_deadline(Duration::from_millis(400));
    let client = client_with(&cluster, config).await;
    // Every store queues each request longer than the client waits.
    for store in cluster.store_ids() {
        cluster.store_slow(store, Duration::from_millis(150));
    }
    let mut snapshot = client.snapshot(
        client.current_timestamp().await.unwrap(),
        tikv_plan::TransactionOptions::new_optimistic(),
    );
    let error = snapshot.get("k".to_owned()).await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("deadline"), "{message}");
    // The first attempt reached its store at once and was looked at 150
    // ms later, long before the call's 400 ms ran out: dropped unread.
    assert!(cluster.deadline_drops() >= 1, "no read dropped");
    assert_eq!(count(&cluster, "kv_get", Outcome::Ok), 0);
    cluster.shutdown().await;
}

/// Each attempt of a read carries what is left of the call's deadline when
/// it is sent: the first the whole of it, the one after a slow first
/// attempt (on the paused clock) the rest.
#[tokio::test(start_paused = true)]
async fn each_attempt_of_a_read_carries_what_is_left_of_the_deadline() {
    use std::sync::{Arc, Mutex};
    use tikv_plan::mock::{self, MockPdClient};

    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
        Some(11),
    )]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    pd.set_async_dispatch_hook(move |_peer, request| {
        let ms = request.context().map_or(0, |c| c.max_execution_duration_ms);
        let first = {
            let mut log = log.lock().unwrap();
            log.push(ms);
            log.len() == 1
        };
        let answer = if first {
            // The leader answers late that it no longer leads.
            mock::response_with_region_error(request, Some(mock::not_leader(1, None)))
        } else {
            mock::response_with_region_error(request, None)
        };
        Box::pin(async move {
            if first {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            answer
        })
    });
    let config = Config::default()
        .with_timeout(Duration::from_secs(5))
        .with_request_deadline(Duration::from_secs(1));
    let raw = RawClient::new_with_pd_client(pd, &config);
    raw.get("k".to_owned()).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![1000, 700]);
}

/// `Config::without_server_deadlines` sends reads as client-rust does.
#[tokio::test]
async fn without_server_deadlines_reads_carry_none() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        let config = Config::default()
            .with_rpc_mode(mode)
            .without_server_deadlines();
        let raw = RawClient::new_with_config(cluster.pd_endpoints(), config.clone())
            .await
            .unwrap();
        raw.get("a".to_owned()).await.unwrap();
        let raw = raw.with_request_tags(tikv_plan::RequestTags::new().with_resource_group("g"));
        raw.get("b".to_owned()).await.unwrap();
        let client = client_with(&cluster, config).await;
        let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
        txn.get("c".to_owned()).await.unwrap();
        txn.rollback().await.unwrap();
        assert_eq!(count(&cluster, "raw_get", Outcome::Ok), 2);
        assert_eq!(count(&cluster, "kv_get", Outcome::Ok), 1);
        for read in ["raw_get", "kv_get"] {
            assert_eq!(deadlines(&cluster, read), (0, 0), "{mode:?}: {read}");
        }
        cluster.shutdown().await;
    }
}
