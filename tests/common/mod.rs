//! Helpers shared by the routing and plan tests (all through `MockPdClient`,
//! no sockets).

#![allow(dead_code)]

use std::any::Any;
use std::sync::Arc;

use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::proto::{errorpb, kvrpcpb, metapb};
use tikv_plan::raw_lowering::{new_raw_get_request, new_raw_put_request};
use tikv_plan::request::{CollectSingle, Plan, PlanBuilder, RoutingState};
use tikv_plan::store::Request;
use tikv_plan::{Backoff, Config, Error, Result};

/// The answer a hook gives.
pub type Answer = Result<Box<dyn Any + Send>>;

/// One Region over the whole key space with voters 11@1 (leader), 12@2,
/// 13@3.
pub fn three_voters() -> Arc<MockPdClient> {
    Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
        Some(11),
    )]))
}

/// One Region with `n` voters `1i@i`, led by peer 11.
pub fn voters(n: u64) -> Arc<MockPdClient> {
    let peers: Vec<metapb::Peer> = (1..=n).map(|i| mock::voter(10 + i, i)).collect();
    Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &peers,
        Some(11),
    )]))
}

/// Three Regions `["", b)`, `[b, c)`, `[c, "")`, voters `r1@1` (leader)
/// and `r2@2` for Region `r`.
pub fn three_regions_led_from_store_1() -> Arc<MockPdClient> {
    let peers = |r: u64| [mock::voter(r * 10 + 1, 1), mock::voter(r * 10 + 2, 2)];
    Arc::new(MockPdClient::new(vec![
        mock::region(1, b"", b"b", &peers(1), Some(11)),
        mock::region(2, b"b", b"c", &peers(2), Some(21)),
        mock::region(3, b"c", b"", &peers(3), Some(31)),
    ]))
}

/// Store 1 takes every call (a probe too) and never answers; the other
/// stores accept at once.
pub fn hang_store_1(pd: &MockPdClient) {
    pd.set_async_dispatch_hook(|peer, req| {
        let answer = accept(peer, req);
        let store = peer.store_id;
        Box::pin(async move {
            if store == 1 {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
            answer
        })
    });
}

/// Routing state with the default config.
pub fn routing() -> Arc<RoutingState> {
    Arc::new(RoutingState::new(&Config::default()))
}

/// The default test backoff: 2 ms doubling to 500 ms, ten retries.
pub fn backoff() -> Backoff {
    Backoff::no_jitter_backoff(2, 500, 10)
}

/// A successful get answer carrying the peer's id as the value.
pub fn value_from(peer: &metapb::Peer) -> Answer {
    Ok(Box::new(kvrpcpb::RawGetResponse {
        value: format!("from-{}", peer.id).into_bytes(),
        ..Default::default()
    }))
}

/// A success answer of the request's type (a get answers with the peer id).
pub fn accept(peer: &metapb::Peer, req: &dyn Request) -> Answer {
    if req.as_any().is::<kvrpcpb::RawGetRequest>() {
        return value_from(peer);
    }
    mock::response_with_region_error(req, None)
}

/// An answer of the request's type carrying a Region error.
pub fn region_error(req: &dyn Request, e: errorpb::Error) -> Answer {
    mock::response_with_region_error(req, Some(e))
}

/// A transport failure (`Unavailable`, no source).
pub fn unavailable() -> Answer {
    Err(Error::from(tonic::Status::unavailable("connection reset")))
}

/// A `DeadlineExceeded` status.
pub fn deadline() -> Answer {
    Err(Error::from(tonic::Status::deadline_exceeded("deadline")))
}

/// tonic's client-side timeout: `Cancelled` with a `TimeoutExpired` source.
pub fn client_timeout() -> Answer {
    Err(Error::from(tonic::Status::from_error(Box::new(
        tonic::TimeoutExpired(()),
    ))))
}

/// The value a get plan returned, as text.
pub fn text(v: Option<Vec<u8>>) -> String {
    String::from_utf8(v.unwrap_or_default()).unwrap()
}

/// Runs a raw get of `key` through the full plan.
pub async fn get_with(
    pd: &Arc<MockPdClient>,
    routing: Option<&Arc<RoutingState>>,
    backoff: Backoff,
    key: &[u8],
) -> Result<Option<Vec<u8>>> {
    let mut builder = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_get_request(key.to_vec().into(), None),
    );
    if let Some(r) = routing {
        builder = builder.routing(r.clone());
    }
    builder
        .retry_multi_region(backoff)
        .merge(CollectSingle)
        .post_process_default()
        .plan()
        .execute()
        .await
}

/// A raw get of `k` with shared routing state and the default backoff.
pub async fn get(pd: &Arc<MockPdClient>, routing: &Arc<RoutingState>) -> Result<Option<Vec<u8>>> {
    get_with(pd, Some(routing), backoff(), b"k").await
}

/// A raw put of `k` through the full plan.
pub async fn put(pd: &Arc<MockPdClient>, routing: &Arc<RoutingState>) -> Result<()> {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_put_request(b"k".to_vec().into(), b"v".to_vec(), None, 0, false),
    )
    .routing(routing.clone())
    .retry_multi_region(backoff())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
}

/// Asserts that no dispatch set `replica_read` or `stale_read`.
pub fn assert_leader_requests_only(pd: &MockPdClient) {
    for d in pd.dispatch_log() {
        assert!(!d.context.replica_read, "replica_read set: {d:?}");
        assert!(!d.context.stale_read, "stale_read set: {d:?}");
        assert_eq!(d.context.peer, Some(d.peer), "context.peer is the target");
    }
}
