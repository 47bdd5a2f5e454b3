//! Region errors from the cached leader (routing.md, "Region errors from the
//! cached leader").
#![cfg(feature = "mock")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::proto::{errorpb, kvrpcpb, metapb};
use tikv_plan::raw_lowering::new_raw_batch_get_request;
use tikv_plan::request::{Collect, Plan, PlanBuilder};
use tikv_plan::{Backoff, Error};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn leader_hint_updates_leader_and_retries_without_sleep() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => region_error(req, mock::not_leader(1, Some(mock::voter(13, 3)))),
        _ => accept(peer, req),
    });
    let start = Instant::now();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-13");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(pd.dispatched_peers(), vec![11, 13]);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(13));
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn ping_pong_hints_stop_at_the_attempt_budget() {
    let pd = three_voters();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => region_error(req, mock::not_leader(1, Some(mock::voter(12, 2)))),
        _ => region_error(req, mock::not_leader(1, Some(mock::voter(11, 1)))),
    });
    let start = Instant::now();
    let err = get_with(&pd, None, Backoff::no_jitter_backoff(2, 500, 4), b"k")
        .await
        .unwrap_err();
    // Retries spent on a Region error: client-rust's RegionError, whose
    // message names the Region and the attempts.
    assert!(
        matches!(&err, Error::RegionError(e) if e.message.contains("gave up after 5 attempts")),
        "{err}"
    );
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 11, 12, 11]);
    assert_eq!(start.elapsed(), Duration::ZERO, "hint retries do not sleep");
}

fn err_with(f: impl FnOnce(&mut errorpb::Error)) -> errorpb::Error {
    let mut e = errorpb::Error::default();
    f(&mut e);
    e
}

/// Each Region error from the leader once, then success: the cache work and
/// whether the retry slept.
#[tokio::test(start_paused = true)]
async fn region_error_table_drives_cache_work() {
    // (name, error, region invalidations, store invalidations, slept, result ok)
    let table: Vec<(&str, errorpb::Error, u64, u64, bool, bool)> = vec![
        (
            "region not found",
            err_with(|e| e.region_not_found = Some(Default::default())),
            1,
            0,
            true,
            true,
        ),
        (
            "key not in region",
            err_with(|e| e.key_not_in_region = Some(Default::default())),
            1,
            0,
            true,
            true,
        ),
        (
            "stale command",
            err_with(|e| e.stale_command = Some(Default::default())),
            0,
            0,
            false,
            true,
        ),
        (
            "store not match",
            err_with(|e| e.store_not_match = Some(Default::default())),
            1,
            1,
            true,
            true,
        ),
        (
            "max ts not synced",
            err_with(|e| e.max_timestamp_not_synced = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "read index not ready",
            err_with(|e| e.read_index_not_ready = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "merging",
            err_with(|e| e.proposal_in_merging_mode = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "not initialized",
            err_with(|e| e.region_not_initialized = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "data not ready",
            err_with(|e| e.data_is_not_ready = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "disk full",
            err_with(|e| e.disk_full = Some(Default::default())),
            0,
            0,
            true,
            true,
        ),
        (
            "recovery",
            err_with(|e| e.recovery_in_progress = Some(Default::default())),
            1,
            0,
            true,
            true,
        ),
        (
            "witness",
            err_with(|e| e.is_witness = Some(Default::default())),
            1,
            0,
            true,
            true,
        ),
        (
            "bucket version",
            err_with(|e| e.bucket_version_not_match = Some(Default::default())),
            0,
            0,
            false,
            true,
        ),
        (
            "hint outside",
            mock::not_leader(1, Some(mock::voter(99, 9))),
            1,
            0,
            true,
            true,
        ),
        (
            "unrecognised",
            err_with(|e| e.message = "?".into()),
            1,
            1,
            true,
            true,
        ),
        (
            "entry too large",
            err_with(|e| e.raft_entry_too_large = Some(Default::default())),
            0,
            0,
            false,
            false,
        ),
        (
            "flashback",
            err_with(|e| e.flashback_in_progress = Some(Default::default())),
            0,
            0,
            false,
            false,
        ),
        (
            "flashback not prepared",
            err_with(|e| e.flashback_not_prepared = Some(Default::default())),
            0,
            0,
            false,
            false,
        ),
    ];
    for (name, error, regions, stores, slept, ok) in table {
        let pd = three_voters();
        let routing = routing();
        let calls = AtomicU32::new(0);
        pd.set_dispatch_hook(move |peer, req| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                region_error(req, error.clone())
            } else {
                accept(peer, req)
            }
        });
        let start = Instant::now();
        let got = get(&pd, &routing).await;
        assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
        if ok {
            assert_eq!(
                text(got.unwrap()),
                "from-11",
                "{name}: the same leader again"
            );
        } else {
            assert!(matches!(got, Err(Error::RegionError { .. })), "{name}");
        }
        assert_eq!(pd.invalidate_region_cache_calls(), regions, "{name}");
        assert_eq!(pd.invalidate_store_cache_calls(), stores, "{name}");
        assert_eq!(start.elapsed() > Duration::ZERO, slept, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn epoch_not_match_splits_the_shard_and_keeps_order() {
    let peers = [mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)];
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &peers,
        Some(11),
    )]));
    // The Region split at "m".
    let mut left = mock::region(1, b"", b"m", &peers, Some(11));
    let mut right = mock::region(2, b"m", b"", &peers, Some(11));
    for r in [&mut left, &mut right] {
        r.region.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 2,
        });
    }
    pd.set_pd_view(left.clone());
    pd.set_pd_view(right.clone());
    let current = vec![left.region.clone(), right.region.clone()];
    pd.set_dispatch_hook(move |_peer, req| {
        let req = req
            .as_any()
            .downcast_ref::<kvrpcpb::RawBatchGetRequest>()
            .unwrap();
        let ctx = req.context.clone().unwrap();
        if ctx.region_epoch.map(|e| e.version) == Some(1) {
            return Ok(Box::new(kvrpcpb::RawBatchGetResponse {
                region_error: Some(errorpb::Error {
                    epoch_not_match: Some(errorpb::EpochNotMatch {
                        current_regions: current.clone(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }));
        }
        let pairs = req
            .keys
            .iter()
            .map(|k| kvrpcpb::KvPair {
                key: k.clone(),
                value: ctx.region_id.to_string().into_bytes(),
                ..Default::default()
            })
            .collect();
        Ok(Box::new(kvrpcpb::RawBatchGetResponse {
            pairs,
            ..Default::default()
        }))
    });
    let keys: Vec<Vec<u8>> = [b"y", b"a", b"x", b"b"]
        .iter()
        .map(|k| k.to_vec())
        .collect();
    let pairs = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(keys.into_iter().map(Into::into), None),
    )
    .routing(routing())
    .retry_multi_region(backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap();
    let got: Vec<(String, String)> = pairs
        .into_iter()
        .map(|p| {
            let (key, value): (tikv_plan::Key, tikv_plan::Value) = p.into();
            (
                String::from_utf8(key.into()).unwrap(),
                String::from_utf8(value).unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("a", "1"), ("b", "1"), ("x", "2"), ("y", "2")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
}

/// After a split reported by `EpochNotMatch`, the new versions keep the
/// cached leader: the retry goes straight to it, no voter is tried first.
#[tokio::test(start_paused = true)]
async fn epoch_not_match_keeps_the_cached_leader_for_the_new_regions() {
    let peers = [mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)];
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &peers,
        Some(12),
    )]));
    let mut left = mock::region(1, b"", b"m", &peers, None);
    let mut right = mock::region(2, b"m", b"", &peers, None);
    for r in [&mut left, &mut right] {
        r.region.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 2,
        });
    }
    let current = vec![left.region.clone(), right.region.clone()];
    pd.set_dispatch_hook(move |peer, req| {
        let ctx = req
            .as_any()
            .downcast_ref::<kvrpcpb::RawGetRequest>()
            .unwrap()
            .context
            .clone()
            .unwrap();
        if peer.id != 12 {
            return region_error(req, mock::not_leader(1, Some(mock::voter(12, 2))));
        }
        if ctx.region_epoch.map(|e| e.version) == Some(1) {
            return region_error(
                req,
                errorpb::Error {
                    epoch_not_match: Some(errorpb::EpochNotMatch {
                        current_regions: current.clone(),
                    }),
                    ..Default::default()
                },
            );
        }
        accept(peer, req)
    });
    let routing = routing();
    assert_eq!(
        text(
            get_with(&pd, Some(&routing), backoff(), b"a")
                .await
                .unwrap()
        ),
        "from-12"
    );
    assert_eq!(pd.dispatched_peers(), vec![12, 12]);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    assert_eq!(pd.cached_region(1).unwrap().epoch().version, 2);
    assert_eq!(routing.stats().fallback_attempts, 0);
}
