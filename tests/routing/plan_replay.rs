//! Replay safety (routing.md, "Replay safety").
#![cfg(feature = "mock")]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use tikv_plan::mock::{self, MappingFailure, MockPdClient};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::raw_lowering::{new_cas_request, new_raw_batch_put_request};
use tikv_plan::request::{CollectError, CollectSingle, Plan, PlanBuilder};
use tikv_plan::Error;
use tikv_plan::Failure;

async fn cas(pd: &Arc<MockPdClient>) -> tikv_plan::Result<(Option<Vec<u8>>, bool)> {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_cas_request(
            b"k".to_vec().into(),
            b"new".to_vec(),
            Some(b"old".to_vec()),
            None,
        ),
    )
    .routing(routing())
    .retry_multi_region(backoff())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
}

#[tokio::test(start_paused = true)]
async fn cas_dispatch_error_is_undetermined_and_not_replayed() {
    for failure in [unavailable, deadline, client_timeout] {
        let pd = three_voters();
        pd.set_dispatch_hook(move |peer, req| {
            if peer.id == 11 {
                failure()
            } else {
                accept(peer, req)
            }
        });
        let err = cas(&pd).await.unwrap_err();
        assert!(err.is_undetermined(), "{err}");
        assert!(matches!(
            err.failure(),
            Some(Failure::Undetermined { region_id: 1, .. })
        ));
        assert_eq!(pd.dispatched_peers(), vec![11], "never replayed on a voter");
        assert_eq!(pd.update_leader_calls(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn cas_mapping_failure_still_falls_back() {
    let pd = three_voters();
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(|_peer, _req| {
        Ok(Box::new(kvrpcpb::RawCasResponse {
            succeed: true,
            previous_value: b"old".to_vec(),
            ..Default::default()
        }))
    });
    assert_eq!(cas(&pd).await.unwrap(), (Some(b"old".to_vec()), true));
    assert_eq!(
        pd.dispatched_peers(),
        vec![12],
        "the request was never sent to 11"
    );
}

#[tokio::test(start_paused = true)]
async fn reads_keep_ordinary_retries() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.dispatched_peers(), vec![11, 12]);
}

#[tokio::test(start_paused = true)]
async fn a_write_that_may_have_been_delivered_is_undetermined_and_never_resent() {
    // Every raw write follows the rule CAS always had.
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    let err = put(&pd, &routing).await.unwrap_err();
    match err.failure() {
        Some(Failure::Undetermined {
            region_id,
            store_id,
            request,
            ..
        }) => {
            assert_eq!((*region_id, *store_id), (1, 1));
            assert!(
                // The key as client-rust prints one: upper-case hex.
                request.contains("raw_put") && request.contains("Key(6B)"),
                "{request}"
            );
        }
        _ => panic!("{err}"),
    }
    assert_eq!(pd.dispatched_peers(), vec![11], "never re-sent");
    assert_eq!(routing.stats().undetermined_writes, 1);
}

#[tokio::test(start_paused = true)]
async fn a_write_that_was_never_sent_falls_back() {
    let pd = three_voters();
    let routing = routing();
    pd.fail_store_mapping(1, mock::MappingFailure::Refused);
    pd.set_dispatch_hook(accept);
    put(&pd, &routing).await.unwrap();
    assert_eq!(pd.dispatched_peers(), vec![12]);
    assert_eq!(routing.stats().undetermined_writes, 0);
}

fn two_regions() -> Arc<MockPdClient> {
    Arc::new(MockPdClient::new(vec![
        mock::region(
            1,
            b"",
            b"m",
            &[mock::voter(11, 1), mock::voter(12, 2)],
            Some(11),
        ),
        mock::region(
            2,
            b"m",
            b"",
            &[mock::voter(21, 1), mock::voter(22, 2)],
            Some(21),
        ),
    ]))
}

fn pairs(keys: &[&[u8]]) -> Vec<kvrpcpb::KvPair> {
    keys.iter()
        .map(|k| kvrpcpb::KvPair {
            key: k.to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn undetermined_wins_over_other_shard_errors() {
    // Shard 1 (first in order) fails determinately, shard 2 undetermined,
    // and later.
    let pd = two_regions();
    pd.set_async_dispatch_hook(|peer, _req| {
        let id = peer.id;
        Box::pin(async move {
            if id == 11 {
                return Err(Error::from(tonic::Status::invalid_argument("rejected")));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            Err(Error::from(tonic::Status::unavailable("reset")))
        })
    });
    let request = new_raw_batch_put_request(
        pairs(&[b"a", b"z"]).into_iter().map(Into::into),
        std::iter::empty(),
        None,
        false,
    );
    let err = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        request.clone(),
    )
    .terminal_on_dispatch_error()
    .terminal_on_undetermined()
    .retry_multi_region(backoff())
    .plan()
    .execute()
    .await
    .unwrap_err();
    assert!(err.is_undetermined(), "{err}");

    // The same with every shard's result kept: CollectError applies the same
    // precedence.
    let err = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, request)
        .terminal_on_dispatch_error()
        .preserve_region_results()
        .retry_multi_region(backoff())
        .merge(CollectError)
        .plan()
        .execute()
        .await
        .unwrap_err();
    assert!(err.is_undetermined(), "{err}");
    // Nothing was replayed on store 2.
    assert_eq!(pd.dispatches_to_store(2), 0);
}

#[tokio::test(start_paused = true)]
async fn terminal_on_undetermined_returns_before_slow_shards_finish() {
    let pd = two_regions();
    pd.set_async_dispatch_hook(|peer, req| {
        let id = peer.id;
        let ok = accept(peer, req);
        Box::pin(async move {
            if id == 21 {
                return Err(Error::from(tonic::Status::unavailable("reset")));
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            ok
        })
    });
    let start = tokio::time::Instant::now();
    let request = new_raw_batch_put_request(
        pairs(&[b"a", b"z"]).into_iter().map(Into::into),
        std::iter::empty(),
        None,
        false,
    );
    let err = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, request)
        .terminal_on_dispatch_error()
        .terminal_on_undetermined()
        .retry_multi_region(backoff())
        .plan()
        .execute()
        .await
        .unwrap_err();
    assert!(err.is_undetermined());
    assert!(start.elapsed() < Duration::from_secs(1), "returned at once");
}
