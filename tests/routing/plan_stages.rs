//! client-rust's plan stages beyond the Region retry: `all_stores`
//! (`RetryableAllStores` over a `StoreRequest`), `single_region_with_store`
//! and `retry_multi_region_preserve_results`, on the public test doubles.
#![cfg(feature = "mock")]

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tikv_plan::mock::{self, MockPdClient};
use tikv_plan::pd::PdClient;
use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tikv_plan::raw_lowering::{new_raw_batch_get_request, new_raw_get_request};
use tikv_plan::request::{Keyspace, KvRequest, Plan, PlanBuilder, SingleKey, StoreRequest};
use tikv_plan::store::{Request, Store};
use tikv_plan::{Backoff, Error, Result};
use tonic::transport::Channel;

/// Two Regions, `[.., m)` led from store 1 and `[m, ..)` led from store 2.
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
            &[mock::voter(21, 2), mock::voter(22, 1)],
            Some(21),
        ),
    ]))
}

/// A store-wide request: a raw get aimed at each store in turn.
#[derive(Debug, Clone)]
struct GetOnEveryStore(kvrpcpb::RawGetRequest);

#[async_trait]
impl Request for GetOnEveryStore {
    async fn dispatch(
        &self,
        client: &TikvClient<Channel>,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>> {
        self.0.dispatch(client, timeout).await
    }
    fn label(&self) -> &'static str {
        "get_on_every_store"
    }
    fn as_any(&self) -> &dyn Any {
        &self.0
    }
    fn context(&self) -> Option<&kvrpcpb::Context> {
        self.0.context.as_ref()
    }
    fn set_context(&mut self, context: kvrpcpb::Context) {
        self.0.context = Some(context);
    }
}

impl KvRequest for GetOnEveryStore {
    type Response = kvrpcpb::RawGetResponse;
}

impl StoreRequest for GetOnEveryStore {
    fn apply_store(&mut self, store: &Store) {
        // Say which store it went to, so the answers can be told apart.
        self.0.key = format!("store-{}", store.meta.id).into_bytes();
    }
}

fn answer_with_key(request: &dyn Request) -> Result<Box<dyn Any + Send>> {
    let get = request
        .as_any()
        .downcast_ref::<kvrpcpb::RawGetRequest>()
        .ok_or_else(|| Error::InternalError {
            message: "not a raw get".to_owned(),
        })?;
    Ok(Box::new(kvrpcpb::RawGetResponse {
        value: get.key.clone(),
        ..Default::default()
    }))
}

#[tokio::test(start_paused = true)]
async fn all_stores_runs_once_per_store_and_retries_region_errors() {
    let pd = two_regions();
    let busy_once = Arc::new(AtomicUsize::new(0));
    let busy = Arc::clone(&busy_once);
    pd.set_dispatch_hook(move |peer, request| {
        if peer.store_id == 2 && busy.fetch_add(1, Ordering::SeqCst) == 0 {
            return mock::response_with_region_error(request, Some(mock::not_leader(2, None)));
        }
        answer_with_key(request)
    });
    let request = GetOnEveryStore(kvrpcpb::RawGetRequest::default());
    let results = PlanBuilder::new(pd.clone(), Keyspace::Disable, request)
        .all_stores(Backoff::no_jitter_backoff(1, 10, 3))
        .plan()
        .execute()
        .await
        .unwrap();
    let mut values: Vec<Vec<u8>> = results.into_iter().map(|r| r.unwrap().value).collect();
    values.sort();
    assert_eq!(values, [b"store-1".to_vec(), b"store-2".to_vec()]);
    assert_eq!(
        busy_once.load(Ordering::SeqCst),
        2,
        "store 2 was asked twice"
    );
}

#[tokio::test]
async fn single_region_with_store_sends_to_the_given_store_only() {
    let pd = two_regions();
    pd.set_dispatch_hook(|_peer, request| answer_with_key(request));
    let region = pd.region_for_key(b"x").await.unwrap();
    let store = pd.clone().map_region_to_store(region).await.unwrap();
    let request = new_raw_get_request(b"x".to_vec().into(), None);
    assert_eq!(SingleKey::key(&request), &b"x".to_vec());
    let response = PlanBuilder::new(pd.clone(), Keyspace::Disable, request)
        .single_region_with_store(store)
        .await
        .unwrap()
        .plan()
        .execute()
        .await
        .unwrap();
    assert_eq!(response.value, b"x".to_vec());
    assert_eq!(pd.dispatched_peers(), vec![21]);
}

#[tokio::test(start_paused = true)]
async fn preserve_results_keeps_each_regions_outcome() {
    let pd = two_regions();
    pd.set_dispatch_hook(|peer, request| {
        if peer.store_id == 1 {
            return Err(Error::InternalError {
                message: "store 1 is broken".to_owned(),
            });
        }
        let get = request
            .as_any()
            .downcast_ref::<kvrpcpb::RawBatchGetRequest>()
            .ok_or_else(|| Error::InternalError {
                message: "not a batch get".to_owned(),
            })?;
        Ok(Box::new(kvrpcpb::RawBatchGetResponse {
            pairs: get
                .keys
                .iter()
                .map(|k| kvrpcpb::KvPair {
                    key: k.clone(),
                    value: k.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }))
    });
    let request = new_raw_batch_get_request(
        vec![b"a".to_vec(), b"z".to_vec()]
            .into_iter()
            .map(Into::into),
        None,
    );
    let results = PlanBuilder::new(pd.clone(), Keyspace::Disable, request)
        .retry_multi_region_preserve_results(Backoff::no_backoff())
        .plan()
        .execute()
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_err(), "Region [.., m) on store 1 failed");
    let served = results[1].as_ref().unwrap();
    assert_eq!(served.pairs[0].key, b"z".to_vec());
}

/// A [`PdClient`] that hands out every store it is given, a TiFlash one
/// included, as a PD client of a caller's own might.
struct ListsTiFlash(Arc<MockPdClient>);

#[async_trait]
impl PdClient for ListsTiFlash {
    type KvClient = mock::MockKvClient;

    async fn map_peer_to_store(
        self: Arc<Self>,
        region: tikv_plan::region::RegionWithLeader,
        peer: tikv_plan::proto::metapb::Peer,
    ) -> Result<tikv_plan::store::RegionStore> {
        self.0.clone().map_peer_to_store(region, peer).await
    }
    async fn region_for_key(&self, key: &[u8]) -> Result<tikv_plan::region::RegionWithLeader> {
        self.0.region_for_key(key).await
    }
    async fn region_for_id(&self, id: u64) -> Result<tikv_plan::region::RegionWithLeader> {
        self.0.region_for_id(id).await
    }
    async fn all_stores(&self) -> Result<Vec<Store>> {
        let mut stores = self.0.all_stores().await?;
        let mut tiflash = stores[0].clone();
        tiflash.meta.id = 9;
        tiflash.meta.labels = vec![tikv_plan::proto::metapb::StoreLabel {
            key: "engine".to_owned(),
            value: "tiflash".to_owned(),
        }];
        stores.push(tiflash);
        Ok(stores)
    }
    async fn get_timestamp(self: Arc<Self>) -> Result<tikv_plan::Timestamp> {
        self.0.clone().get_timestamp().await
    }
    async fn update_leader(
        &self,
        ver_id: tikv_plan::region::RegionVerId,
        leader: tikv_plan::proto::metapb::Peer,
    ) -> Result<()> {
        self.0.update_leader(ver_id, leader).await
    }
    async fn invalidate_region_cache(&self, ver_id: tikv_plan::region::RegionVerId) {
        self.0.invalidate_region_cache(ver_id).await
    }
    async fn invalidate_store_cache(&self, store_id: u64) {
        self.0.invalidate_store_cache(store_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn all_stores_never_runs_on_a_tiflash_store() {
    let pd = two_regions();
    pd.set_store_labels(3, &[("engine", "tiflash")]);
    pd.set_dispatch_hook(|_peer, request| answer_with_key(request));
    let ids: Vec<u64> = pd
        .all_stores()
        .await
        .unwrap()
        .iter()
        .map(|s| s.meta.id)
        .collect();
    assert_eq!(
        ids,
        vec![1, 2],
        "the mock lists TiKV's stores, as PdRpcClient does"
    );
    // A PD client that lists a TiFlash store all the same: the plan leaves
    // it out.
    let request = GetOnEveryStore(kvrpcpb::RawGetRequest::default());
    let results = PlanBuilder::new(
        Arc::new(ListsTiFlash(pd.clone())),
        Keyspace::Disable,
        request,
    )
    .all_stores(Backoff::no_backoff())
    .plan()
    .execute()
    .await
    .unwrap();
    let mut values: Vec<Vec<u8>> = results.into_iter().map(|r| r.unwrap().value).collect();
    values.sort();
    assert_eq!(values, [b"store-1".to_vec(), b"store-2".to_vec()]);
    assert_eq!(pd.dispatches(), 2);
}
