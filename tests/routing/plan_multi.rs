//! Multi-shard plans: order, error precedence, the concurrency limit, and
//! batch splitting (routing.md, "Invariants" and "Replay safety").
#![cfg(feature = "mock")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::raw_lowering::{new_raw_batch_get_request, new_raw_batch_put_request};
use tikv_plan::request::{Collect, CollectError, Plan, PlanBuilder};
use tikv_plan::Error;

/// Regions `[.., b)`, `[b, c)`, ... `[f, ..)`: six Regions, keys a..f one per
/// Region, peers `r1@1`, `r2@2`.
fn six_regions() -> Arc<MockPdClient> {
    let bounds: Vec<&[u8]> = vec![b"", b"b", b"c", b"d", b"e", b"f", b""];
    let regions = (0..6)
        .map(|i| {
            let id = i as u64 + 1;
            mock::region(
                id,
                bounds[i],
                bounds[i + 1],
                &[mock::voter(id * 10 + 1, 1), mock::voter(id * 10 + 2, 2)],
                Some(id * 10 + 1),
            )
        })
        .collect();
    Arc::new(MockPdClient::new(regions))
}

fn keys() -> Vec<Vec<u8>> {
    [b"f", b"e", b"d", b"c", b"b", b"a"]
        .iter()
        .map(|k| k.to_vec())
        .collect()
}

fn echo_pairs(req: &dyn tikv_plan::store::Request) -> kvrpcpb::RawBatchGetResponse {
    let req = req
        .as_any()
        .downcast_ref::<kvrpcpb::RawBatchGetRequest>()
        .unwrap();
    kvrpcpb::RawBatchGetResponse {
        pairs: req
            .keys
            .iter()
            .map(|k| kvrpcpb::KvPair {
                key: k.clone(),
                value: k.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn multi_shard_results_keep_shard_order() {
    let pd = six_regions();
    // Earlier Regions answer later.
    pd.set_async_dispatch_hook(|peer, req| {
        let delay = 100 - peer.id;
        let resp = echo_pairs(req);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok(Box::new(resp) as Box<dyn std::any::Any + Send>)
        })
    });
    let got = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(keys().into_iter().map(Into::into), None),
    )
    .routing(routing())
    .retry_multi_region(backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap();
    let got: Vec<Vec<u8>> = got.into_iter().map(|p| p.into_key().into()).collect();
    assert_eq!(got, vec![b"a", b"b", b"c", b"d", b"e", b"f"]);
}

#[tokio::test(start_paused = true)]
async fn multi_shard_error_precedence_is_stable() {
    for later_first in [false, true] {
        let pd = six_regions();
        pd.set_async_dispatch_hook(move |peer, req| {
            let id = peer.id;
            let resp = echo_pairs(req);
            Box::pin(async move {
                // Region 2 and Region 5 fail; which finishes first varies.
                let delay = match (id, later_first) {
                    (21, true) | (51, false) => 50,
                    _ => 1,
                };
                tokio::time::sleep(Duration::from_millis(delay)).await;
                match id {
                    21 => Err(Error::from(tonic::Status::invalid_argument("two"))),
                    51 => Err(Error::from(tonic::Status::invalid_argument("five"))),
                    _ => Ok(Box::new(resp) as Box<dyn std::any::Any + Send>),
                }
            })
        });
        let err = PlanBuilder::new(
            pd.clone(),
            tikv_plan::request::Keyspace::Disable,
            new_raw_batch_get_request(keys().into_iter().map(Into::into), None),
        )
        .preserve_region_results()
        .retry_multi_region(backoff())
        .merge(CollectError)
        .plan()
        .execute()
        .await
        .unwrap_err();
        match err {
            Error::ExtractedErrors(errors) => {
                let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                assert!(
                    msgs[0].contains("two") && msgs[1].contains("five"),
                    "{msgs:?}"
                );
            }
            other => panic!("{other}"),
        }
        // Without preserving results, the same order decides.
        let err = PlanBuilder::new(
            pd.clone(),
            tikv_plan::request::Keyspace::Disable,
            new_raw_batch_get_request(keys().into_iter().map(Into::into), None),
        )
        .retry_multi_region(backoff())
        .plan()
        .execute()
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::ExtractedErrors(ref e) if e[0].to_string().contains("two")),
            "{err}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_holds_one_permit_per_rpc() {
    let pd = six_regions();
    let routing = routing();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let (now, max) = (in_flight.clone(), max_seen.clone());
    pd.set_async_dispatch_hook(move |peer, req| {
        let (now, max) = (now.clone(), max.clone());
        let leader = peer.id % 10 == 1;
        let resp = echo_pairs(req);
        Box::pin(async move {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            if leader {
                // Every leader fails: each shard falls back, one RPC at a time.
                return Err(Error::from(tonic::Status::unavailable("reset")));
            }
            Ok(Box::new(resp) as Box<dyn std::any::Any + Send>)
        })
    });
    let got = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(keys().into_iter().map(Into::into), None),
    )
    .routing(routing.clone())
    .max_concurrency(2)
    .retry_multi_region(backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap();
    assert_eq!(got.len(), 6);
    assert_eq!(max_seen.load(Ordering::SeqCst), 2);
    assert_eq!(pd.dispatches(), 12);
    assert_eq!(routing.stats().rpcs_in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn batch_put_splits_by_region_and_size() {
    let pd = six_regions();
    pd.set_dispatch_hook(accept);
    // Region 1 gets three pairs of 10 KiB: two batches (16 KiB limit);
    // Region 2 gets one small pair.
    let mut pairs: Vec<kvrpcpb::KvPair> = (0..3)
        .map(|i| kvrpcpb::KvPair {
            key: vec![b'a', i],
            value: vec![0; 10 * 1024],
            ..Default::default()
        })
        .collect();
    pairs.push(kvrpcpb::KvPair {
        key: b"b".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    });
    let responses = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_put_request(
            pairs.into_iter().map(Into::into),
            std::iter::empty(),
            None,
            false,
        ),
    )
    .retry_multi_region(backoff())
    .merge(CollectError)
    .extract_error()
    .plan()
    .execute()
    .await
    .unwrap();
    assert_eq!(
        responses.len(),
        4,
        "one RPC per 10 KiB pair in Region 1, one for Region 2"
    );
    let log = pd.dispatch_log();
    assert_eq!(log.iter().filter(|d| d.context.region_id == 1).count(), 3);
    assert_eq!(log.iter().filter(|d| d.context.region_id == 2).count(), 1);
}

/// A shard whose deadline runs out while it waits for a concurrency permit
/// is not sent: with a zero bound it would end as a timeout that may have
/// reached the store (a write undetermined though nothing left the client).
/// The first shard's leader never answers and keeps the one permit until
/// the deadline; the second shard then ends without an RPC.
#[tokio::test(start_paused = true)]
async fn a_shard_whose_deadline_ran_out_waiting_for_a_permit_is_not_sent() {
    let pd = six_regions();
    pd.set_async_dispatch_hook(|_peer, req| {
        let resp = echo_pairs(req);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Box::new(resp) as Box<dyn std::any::Any + Send>)
        })
    });
    let error = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(
            [b"a".to_vec(), b"b".to_vec()].into_iter().map(Into::into),
            None,
        ),
    )
    .routing(routing())
    .max_concurrency(1)
    .request_deadline(Duration::from_secs(1))
    .retry_multi_region(backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap_err();
    // Both shards ran out of their deadline, the second before it sent.
    let text = error.to_string();
    assert!(
        text.starts_with("2 requests failed") && text.contains("deadline of 1s ran out"),
        "{text}"
    );
    assert!(!error.is_undetermined(), "{error}");
    assert_eq!(pd.dispatches(), 1, "only the first shard's RPC was sent");
}
