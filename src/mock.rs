//! Test doubles for unit tests of code that uses the plan, public behind the
//! `mock` feature so downstream crates can use them too.
//!
//! [`MockPdClient`] holds a configurable topology (Regions with voters,
//! learners and witnesses, their leaders, stores) behind real cache
//! semantics: the client's cache and a separate "PD view" that a reload
//! returns. Hooks decide per store whether mapping fails and what each peer
//! answers; counters record every call the plan makes. [`MockKvClient`] wraps
//! a dispatch closure. Nothing here panics on use.
//!
//! Everything a downstream test needs is public (this example compiles as
//! an outside crate would):
//!
//! ```
//! use tikv_plan::mock::{MockKvClient, MockPdClient};
//! use tikv_plan::pd::PdClient;
//! use tikv_plan::request::{Dispatch, Plan, PlanBuilder, RetryableMultiRegion};
//! use tikv_plan::store::{KvClient, KvConnect, TikvConnect};
//! use tikv_plan::Backoff;
//!
//! fn is_pd<P: PdClient>(_: &P) {}
//! fn is_kv<C: KvClient>(_: &C) {}
//! fn is_connect<C: KvConnect>(_: &C) {}
//! let pd = MockPdClient::new(vec![]);
//! is_pd(&pd);
//! is_kv(&MockKvClient::new(|req| tikv_plan::mock::response_with_region_error(req, None)));
//! is_connect(&TikvConnect::default());
//! let _ = Backoff::no_backoff();
//! # fn names<R: tikv_plan::request::KvRequest + tikv_plan::request::Shardable>(
//! #     _: Option<RetryableMultiRegion<Dispatch<R>, MockPdClient>>,
//! #     _: Option<PlanBuilder<MockPdClient, Dispatch<R>>>,
//! # ) where Dispatch<R>: Plan {}
//! ```

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::pd::{PdClient, Timestamp};
use crate::proto::metapb::PeerRole;
use crate::proto::{errorpb, kvrpcpb, metapb};
use crate::region::store_engine::{refuse_unless_tikv, StoreEngine};
use crate::region::{CachedRegion, RegionCache, RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::store::{KvClient, RegionStore, Request, Store};
use crate::sync::lock;
use crate::Failure;
use crate::{Error, Result};
use tikv_plan_proto::methods::KvResponse;

/// What a dispatch hook returns: a future of the type-erased response.
pub type DispatchFuture = Pin<Box<dyn Future<Output = Result<Box<dyn Any + Send>>> + Send>>;

type RequestHook = Arc<dyn Fn(&dyn Request) -> DispatchFuture + Send + Sync>;
type PeerDispatchHook = Arc<dyn Fn(&metapb::Peer, &dyn Request) -> DispatchFuture + Send + Sync>;
type MappingHook = Arc<dyn Fn(&metapb::Peer) -> Option<Error> + Send + Sync>;

/// A [`KvClient`] whose answers come from a closure.
#[derive(Clone)]
pub struct MockKvClient {
    hook: RequestHook,
}

impl std::fmt::Debug for MockKvClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockKvClient").finish_non_exhaustive()
    }
}

impl MockKvClient {
    /// A client that answers every request with `dispatch(request)`.
    pub fn new<F>(dispatch: F) -> Self
    where
        F: Fn(&dyn Request) -> Result<Box<dyn Any + Send>> + Send + Sync + 'static,
    {
        MockKvClient {
            hook: Arc::new(move |req| {
                let answer = dispatch(req);
                Box::pin(async move { answer })
            }),
        }
    }

    /// A client whose answers are futures (to model slow or hanging stores).
    pub fn new_async<F>(dispatch: F) -> Self
    where
        F: Fn(&dyn Request) -> DispatchFuture + Send + Sync + 'static,
    {
        MockKvClient {
            hook: Arc::new(dispatch),
        }
    }
}

#[async_trait]
impl KvClient for MockKvClient {
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        (self.hook)(req).await
    }
}

/// A voter peer.
pub fn voter(id: u64, store_id: StoreId) -> metapb::Peer {
    metapb::Peer {
        id,
        store_id,
        role: PeerRole::Voter as i32,
        is_witness: false,
    }
}

/// A learner peer.
pub fn learner(id: u64, store_id: StoreId) -> metapb::Peer {
    metapb::Peer {
        role: PeerRole::Learner as i32,
        ..voter(id, store_id)
    }
}

/// A witness (a voter that holds no data).
pub fn witness(id: u64, store_id: StoreId) -> metapb::Peer {
    metapb::Peer {
        is_witness: true,
        ..voter(id, store_id)
    }
}

/// A Region `[start, end)` (empty `end`: unbounded) at epoch (1, 1) with
/// `peers`, led by the peer with id `leader` if given.
pub fn region(
    id: RegionId,
    start: &[u8],
    end: &[u8],
    peers: &[metapb::Peer],
    leader: Option<u64>,
) -> RegionWithLeader {
    let leader = leader.and_then(|l| peers.iter().find(|p| p.id == l).copied());
    RegionWithLeader::new(
        metapb::Region {
            id,
            start_key: start.to_vec(),
            end_key: end.to_vec(),
            region_epoch: Some(metapb::RegionEpoch {
                conf_ver: 1,
                version: 1,
            }),
            peers: peers.to_vec(),
            ..Default::default()
        },
        leader,
    )
}

/// A `NotLeader` Region error naming `hint` as the leader (or none).
pub fn not_leader(region_id: RegionId, hint: Option<metapb::Peer>) -> errorpb::Error {
    errorpb::Error {
        message: "not leader".to_owned(),
        not_leader: Some(errorpb::NotLeader {
            region_id,
            leader: hint,
        }),
        ..Default::default()
    }
}

/// A `ServerIsBusy` Region error.
pub fn server_is_busy(estimated_wait_ms: u32, backoff_ms: u64) -> errorpb::Error {
    errorpb::Error {
        message: "server is busy".to_owned(),
        server_is_busy: Some(errorpb::ServerIsBusy {
            reason: "read pool is full".to_owned(),
            backoff_ms,
            estimated_wait_ms,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The default response to `request` with `region_error` set, type-erased
/// as a store client returns it. Fails for requests that are not raw or
/// transactional requests of this crate.
pub fn response_with_region_error(
    request: &dyn Request,
    region_error: Option<errorpb::Error>,
) -> Result<Box<dyn Any + Send>> {
    macro_rules! try_types {
        ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
           [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
            if request.as_any().is::<kvrpcpb::$req>() {
                let mut response = kvrpcpb::$resp::default();
                *response.region_error_mut() = region_error;
                return Ok(Box::new(response));
            }
        )*};
    }
    tikv_plan_proto::kv_methods!(try_types);
    Err(Error::InternalError {
        message: format!("the mock has no response type for {}", request.label()),
    })
}

/// How a store's mapping fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingFailure {
    /// The connection is refused ([`Failure::Connect`]).
    Refused,
    /// The connection does not open within the connect timeout
    /// ([`Failure::ConnectTimeout`]).
    ConnectTimeout,
}

/// One dispatch the mock saw.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchRecord {
    /// The peer the request was sent to.
    pub peer: metapb::Peer,
    /// The request's label (`raw_get`, ...).
    pub label: &'static str,
    /// The request's context as sent.
    pub context: kvrpcpb::Context,
}

#[derive(Debug, Default)]
struct Topology {
    /// What PD answers on a reload.
    pd_view: BTreeMap<RegionId, RegionWithLeader>,
    stores: BTreeMap<StoreId, metapb::Store>,
    cached_stores: HashSet<StoreId>,
    failing_stores: HashMap<StoreId, MappingFailure>,
}

#[derive(Default)]
struct Shared {
    /// What the client's cache holds: the real cache, so that epoch and
    /// overlap rules are the ones `PdRpcClient` applies.
    cache: RegionCache,
    topology: Mutex<Topology>,
    dispatch_hook: Mutex<Option<PeerDispatchHook>>,
    mapping_hook: Mutex<Option<MappingHook>>,
    map_region_to_store: AtomicU64,
    map_peer_to_store: AtomicU64,
    update_leader: AtomicU64,
    invalidate_region_cache: AtomicU64,
    invalidate_store_cache: AtomicU64,
    region_reloads: AtomicU64,
    timestamp: AtomicU64,
    /// When set, timestamp requests fail as an unreachable PD's do.
    timestamps_fail: AtomicBool,
    map_calls_by_store: Mutex<HashMap<StoreId, u64>>,
    dispatch_log: Mutex<Vec<DispatchRecord>>,
    /// When set, stores can be probed ([`MockPdClient::probe_stores`]).
    probes: AtomicBool,
    /// Liveness probes sent, by store.
    probes_by_store: Mutex<HashMap<StoreId, u64>>,
}

impl Shared {
    fn dispatch(self: &Arc<Self>, peer: metapb::Peer, req: &dyn Request) -> DispatchFuture {
        lock(&self.dispatch_log).push(DispatchRecord {
            peer,
            label: req.label(),
            context: req.context().cloned().unwrap_or_default(),
        });
        let hook = lock(&self.dispatch_hook).clone();
        match hook {
            Some(hook) => hook(&peer, req),
            None => Box::pin(async {
                Err(Error::InternalError {
                    message: "MockPdClient has no dispatch hook; call set_dispatch_hook".to_owned(),
                })
            }),
        }
    }
}

/// A [`PdClient`] over an in-memory topology, with hooks and counters.
///
/// ```
/// use tikv_plan::mock::{self, MockPdClient};
/// let pd = MockPdClient::new(vec![
///     mock::region(1, b"", b"m", &[mock::voter(11, 1), mock::learner(12, 2)], Some(11)),
///     mock::region(2, b"m", b"", &[mock::voter(21, 1), mock::witness(22, 2)], Some(21)),
/// ]);
/// assert_eq!(pd.cached_leader(2).map(|p| p.id), Some(21));
/// ```
#[derive(Clone)]
pub struct MockPdClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockPdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockPdClient")
            .field("topology", &*lock(&self.shared.topology))
            .finish_non_exhaustive()
    }
}

impl MockPdClient {
    /// A mock whose cache and PD view both hold `regions`; a store is created
    /// for every store id a peer names (address `store-<id>`).
    pub fn new(regions: Vec<RegionWithLeader>) -> Self {
        let mut topology = Topology::default();
        let cache = RegionCache::new();
        for r in regions {
            for p in &r.region.peers {
                topology.stores.entry(p.store_id).or_insert(metapb::Store {
                    id: p.store_id,
                    address: format!("store-{}", p.store_id),
                    ..Default::default()
                });
            }
            topology.pd_view.insert(r.id(), r.clone());
            cache.insert(r);
        }
        MockPdClient {
            shared: Arc::new(Shared {
                cache,
                topology: Mutex::new(topology),
                ..Default::default()
            }),
        }
    }

    /// Makes every later timestamp request fail as an unreachable PD's
    /// does (`true`), or succeed again (`false`).
    pub fn fail_timestamps(&self, fail: bool) {
        self.shared.timestamps_fail.store(fail, Ordering::SeqCst);
    }

    /// Lets the client probe stores (`true`; by default it cannot, as a
    /// [`PdClient`] that does not override
    /// [`probe_store`](PdClient::probe_store)): a probe is a raw get in
    /// Region 0 answered by the dispatch hook as the store's peer `0`, or
    /// the store's mapping failure; it is not in the dispatch log (see
    /// [`probes_of_store`](Self::probes_of_store)).
    pub fn probe_stores(&self, on: bool) {
        self.shared.probes.store(on, Ordering::SeqCst);
    }

    /// Gives store `store_id` these labels (`("zone", "z1")`, ...), which
    /// [`PdClient::store_labels`] then reports. `("engine", "tiflash")`
    /// makes it a TiFlash store, as PD lists one: mapping a peer there
    /// and probing it fail with
    /// [`Failure::NotTiKvStore`] (nothing
    /// dispatched), and [`PdClient::all_stores`] leaves it out.
    pub fn set_store_labels(&self, store_id: StoreId, labels: &[(&str, &str)]) {
        let mut t = lock(&self.shared.topology);
        let store = t.stores.entry(store_id).or_insert(metapb::Store {
            id: store_id,
            address: format!("store-{store_id}"),
            ..Default::default()
        });
        store.labels = labels
            .iter()
            .map(|(key, value)| metapb::StoreLabel {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect();
    }

    /// How many probes went to `store_id`.
    pub fn probes_of_store(&self, store_id: StoreId) -> u64 {
        lock(&self.shared.probes_by_store)
            .get(&store_id)
            .copied()
            .unwrap_or(0)
    }

    /// Sets what every peer answers: `hook(target_peer, request)`.
    pub fn set_dispatch_hook<F>(&self, hook: F)
    where
        F: Fn(&metapb::Peer, &dyn Request) -> Result<Box<dyn Any + Send>> + Send + Sync + 'static,
    {
        *lock(&self.shared.dispatch_hook) = Some(Arc::new(move |peer, req| {
            let answer = hook(peer, req);
            Box::pin(async move { answer })
        }));
    }

    /// Sets what every peer answers, as a future (slow or hanging peers).
    pub fn set_async_dispatch_hook<F>(&self, hook: F)
    where
        F: Fn(&metapb::Peer, &dyn Request) -> DispatchFuture + Send + Sync + 'static,
    {
        *lock(&self.shared.dispatch_hook) = Some(Arc::new(hook));
    }

    /// Sets a hook that can fail any mapping: `Some(error)` fails it.
    pub fn set_mapping_hook<F>(&self, hook: F)
    where
        F: Fn(&metapb::Peer) -> Option<Error> + Send + Sync + 'static,
    {
        *lock(&self.shared.mapping_hook) = Some(Arc::new(hook));
    }

    /// Makes mapping to `store_id` fail the given way until
    /// [`heal_store`](Self::heal_store).
    pub fn fail_store_mapping(&self, store_id: StoreId, failure: MappingFailure) {
        lock(&self.shared.topology)
            .failing_stores
            .insert(store_id, failure);
    }

    /// Makes mapping to `store_id` succeed again.
    pub fn heal_store(&self, store_id: StoreId) {
        lock(&self.shared.topology).failing_stores.remove(&store_id);
    }

    /// Replaces what PD answers for this Region on the next reload (the
    /// client's cache is unchanged until then).
    pub fn set_pd_view(&self, region: RegionWithLeader) {
        let mut t = lock(&self.shared.topology);
        for p in &region.region.peers {
            t.stores.entry(p.store_id).or_insert(metapb::Store {
                id: p.store_id,
                address: format!("store-{}", p.store_id),
                ..Default::default()
            });
        }
        t.pd_view.insert(region.id(), region);
    }

    /// Removes a Region from PD's view (after a merge, say).
    pub fn remove_from_pd_view(&self, region_id: RegionId) {
        lock(&self.shared.topology).pd_view.remove(&region_id);
    }

    /// The client's cached copy of a Region.
    pub fn cached_region(&self, region_id: RegionId) -> Option<RegionWithLeader> {
        self.shared
            .cache
            .get_by_id(region_id)
            .map(|r| r.to_region_with_leader())
    }

    /// The cached leader of a Region.
    pub fn cached_leader(&self, region_id: RegionId) -> Option<metapb::Peer> {
        self.cached_region(region_id).and_then(|r| r.leader)
    }

    /// True while the store's entry is in the store cache (after a mapping,
    /// until an invalidation).
    pub fn is_store_cached(&self, store_id: StoreId) -> bool {
        lock(&self.shared.topology)
            .cached_stores
            .contains(&store_id)
    }

    /// Calls of `map_region_to_store`.
    pub fn map_region_to_store_calls(&self) -> u64 {
        self.shared.map_region_to_store.load(Ordering::SeqCst)
    }

    /// Calls of `map_peer_to_store` (the plan maps every candidate with it).
    pub fn map_peer_to_store_calls(&self) -> u64 {
        self.shared.map_peer_to_store.load(Ordering::SeqCst)
    }

    /// Mapping calls (either method) for one store.
    pub fn map_calls_to_store(&self, store_id: StoreId) -> u64 {
        lock(&self.shared.map_calls_by_store)
            .get(&store_id)
            .copied()
            .unwrap_or(0)
    }

    /// Calls of `update_leader`.
    pub fn update_leader_calls(&self) -> u64 {
        self.shared.update_leader.load(Ordering::SeqCst)
    }

    /// Calls of `invalidate_region_cache`.
    pub fn invalidate_region_cache_calls(&self) -> u64 {
        self.shared.invalidate_region_cache.load(Ordering::SeqCst)
    }

    /// Calls of `invalidate_store_cache`.
    pub fn invalidate_store_cache_calls(&self) -> u64 {
        self.shared.invalidate_store_cache.load(Ordering::SeqCst)
    }

    /// Region lookups that missed the cache and asked PD.
    pub fn region_reloads(&self) -> u64 {
        self.shared.region_reloads.load(Ordering::SeqCst)
    }

    /// Every dispatch so far, in order.
    pub fn dispatch_log(&self) -> Vec<DispatchRecord> {
        lock(&self.shared.dispatch_log).clone()
    }

    /// How many requests were dispatched.
    pub fn dispatches(&self) -> usize {
        lock(&self.shared.dispatch_log).len()
    }

    /// How many requests were dispatched to one store.
    pub fn dispatches_to_store(&self, store_id: StoreId) -> usize {
        lock(&self.shared.dispatch_log)
            .iter()
            .filter(|d| d.peer.store_id == store_id)
            .count()
    }

    /// The ids of the peers dispatched to, in order.
    pub fn dispatched_peers(&self) -> Vec<u64> {
        lock(&self.shared.dispatch_log)
            .iter()
            .map(|d| d.peer.id)
            .collect()
    }

    /// A cache miss answered from PD's view: counted, and cached (the cache
    /// drops what the loaded Region overlaps).
    fn load_from_pd(&self, found: Option<RegionWithLeader>) -> Option<RegionWithLeader> {
        let region = found?;
        self.shared.region_reloads.fetch_add(1, Ordering::SeqCst);
        self.shared.cache.insert(region.clone());
        Some(region)
    }
}

#[async_trait]
impl PdClient for MockPdClient {
    type KvClient = MockKvClient;

    async fn map_region_to_store(self: Arc<Self>, region: RegionWithLeader) -> Result<RegionStore> {
        self.shared
            .map_region_to_store
            .fetch_add(1, Ordering::SeqCst);
        let leader = region.leader.ok_or(Error::LeaderNotFound {
            region: region.ver_id(),
        })?;
        self.map_peer_to_store(region, leader).await
    }

    async fn map_peer_to_store(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
    ) -> Result<RegionStore> {
        self.shared.map_peer_to_store.fetch_add(1, Ordering::SeqCst);
        *lock(&self.shared.map_calls_by_store)
            .entry(peer.store_id)
            .or_default() += 1;
        let hook = lock(&self.shared.mapping_hook).clone();
        if let Some(error) = hook.and_then(|h| h(&peer)) {
            return Err(error);
        }
        {
            let mut t = lock(&self.shared.topology);
            let address = match t.stores.get(&peer.store_id) {
                Some(s) => {
                    // A TiFlash store (labelled so) is refused, as
                    // `PdRpcClient` refuses it: never dialled.
                    refuse_unless_tikv(peer.store_id, &s.labels)?;
                    s.address.clone()
                }
                None => {
                    return Err(Error::from(Failure::StoreNotFound {
                        store_id: peer.store_id,
                    }))
                }
            };
            match t.failing_stores.get(&peer.store_id) {
                Some(MappingFailure::Refused) => {
                    return Err(Error::from(Failure::Connect {
                        address,
                        message: "connection refused (mock)".to_owned(),
                        source: Some(crate::ErrorSource::new(std::io::Error::from(
                            std::io::ErrorKind::ConnectionRefused,
                        ))),
                    }))
                }
                Some(MappingFailure::ConnectTimeout) => {
                    return Err(Error::from(Failure::ConnectTimeout {
                        address,
                        timeout: Duration::from_secs(1),
                        source: Some(crate::ErrorSource::new(std::io::Error::from(
                            std::io::ErrorKind::TimedOut,
                        ))),
                    }))
                }
                None => {}
            }
            t.cached_stores.insert(peer.store_id);
        }
        let shared = Arc::clone(&self.shared);
        let client = MockKvClient::new_async(move |req| shared.dispatch(peer, req));
        Ok(RegionStore::new(region, peer, Arc::new(client)))
    }

    fn probes_stores(&self) -> bool {
        self.shared.probes.load(Ordering::SeqCst)
    }

    fn store_labels(&self, store_id: StoreId) -> Option<Vec<metapb::StoreLabel>> {
        lock(&self.shared.topology)
            .stores
            .get(&store_id)
            .map(|s| s.labels.clone())
    }

    async fn probe_store(
        &self,
        store_id: StoreId,
        via: Option<StoreId>,
        bound: Duration,
    ) -> Result<()> {
        if via.is_some() || !self.probes_stores() {
            return Err(Error::from(Failure::Connect {
                address: format!("store-{store_id}"),
                message: "MockPdClient probes stores only directly, after probe_stores(true)"
                    .to_owned(),
                source: None,
            }));
        }
        let labels = self.store_labels(store_id).unwrap_or_default();
        refuse_unless_tikv(store_id, &labels)?;
        *lock(&self.shared.probes_by_store)
            .entry(store_id)
            .or_default() += 1;
        let failing = lock(&self.shared.topology)
            .failing_stores
            .get(&store_id)
            .copied();
        if let Some(failure) = failing {
            return Err(Error::from(Failure::Connect {
                address: format!("store-{store_id}"),
                message: format!("{failure:?} (mock)"),
                source: None,
            }));
        }
        let hook = lock(&self.shared.dispatch_hook).clone();
        let Some(hook) = hook else {
            return Err(Error::InternalError {
                message: "MockPdClient has no dispatch hook; call set_dispatch_hook".to_owned(),
            });
        };
        let peer = metapb::Peer {
            store_id,
            ..Default::default()
        };
        let probe = crate::store::liveness_probe();
        match tokio::time::timeout(bound, hook(&peer, &probe)).await {
            Ok(answer) => answer.map(drop),
            Err(_) => Err(Error::from(Failure::Timeout {
                what: format!("the liveness probe of store {store_id}"),
                after: bound,
            })),
        }
    }

    async fn region_for_key(&self, key: &[u8]) -> Result<RegionWithLeader> {
        if let Some(r) = self.shared.cache.get_by_key(key) {
            return Ok(r.to_region_with_leader());
        }
        let found = lock(&self.shared.topology)
            .pd_view
            .values()
            .find(|r| r.contains(key))
            .cloned();
        self.load_from_pd(found)
            .ok_or_else(|| Error::RegionForKeyNotFound { key: key.to_vec() })
    }

    async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader> {
        if let Some(r) = self.shared.cache.get_by_id(id) {
            return Ok(r.to_region_with_leader());
        }
        let found = lock(&self.shared.topology).pd_view.get(&id).cloned();
        self.load_from_pd(found)
            .ok_or(Error::from(Failure::RegionNotFoundInPd { region_id: id }))
    }

    async fn region_for_key_shared(&self, key: &[u8]) -> Result<Arc<CachedRegion>> {
        match self.shared.cache.get_by_key(key) {
            Some(r) => Ok(r),
            None => Ok(Arc::new(self.region_for_key(key).await?.into())),
        }
    }

    async fn region_for_id_shared(&self, id: RegionId) -> Result<Arc<CachedRegion>> {
        match self.shared.cache.get_by_id(id) {
            Some(r) => Ok(r),
            None => Ok(Arc::new(self.region_for_id(id).await?.into())),
        }
    }

    /// The TiKV stores of the topology (a store labelled
    /// `engine=tiflash` is left out, as `PdRpcClient` leaves it out).
    async fn all_stores(&self) -> Result<Vec<Store>> {
        let stores: Vec<metapb::Store> = lock(&self.shared.topology)
            .stores
            .values()
            .filter(|s| StoreEngine::of_store(s).is_tikv())
            .cloned()
            .collect();
        Ok(stores
            .into_iter()
            .map(|meta| {
                let shared = Arc::clone(&self.shared);
                let peer = metapb::Peer {
                    store_id: meta.id,
                    ..Default::default()
                };
                let client = MockKvClient::new_async(move |req| shared.dispatch(peer, req));
                Store {
                    meta,
                    client: Arc::new(client),
                }
            })
            .collect())
    }

    async fn get_timestamp(self: Arc<Self>) -> Result<Timestamp> {
        if self.shared.timestamps_fail.load(Ordering::SeqCst) {
            return Err(Error::from(tonic::Status::unavailable(
                "MockPdClient: PD is unreachable (fail_timestamps)",
            )));
        }
        let logical = self.shared.timestamp.fetch_add(1, Ordering::SeqCst) as i64;
        Ok(Timestamp {
            physical: 1,
            logical,
            suffix_bits: 0,
        })
    }

    async fn update_leader(&self, ver_id: RegionVerId, leader: metapb::Peer) -> Result<()> {
        self.shared.update_leader.fetch_add(1, Ordering::SeqCst);
        self.shared.cache.update_leader(ver_id, &leader);
        Ok(())
    }

    async fn invalidate_region_cache(&self, ver_id: RegionVerId) {
        self.shared
            .invalidate_region_cache
            .fetch_add(1, Ordering::SeqCst);
        self.shared.cache.invalidate(ver_id);
    }

    async fn invalidate_store_cache(&self, store_id: StoreId) {
        self.shared
            .invalidate_store_cache
            .fetch_add(1, Ordering::SeqCst);
        lock(&self.shared.topology).cached_stores.remove(&store_id);
    }

    async fn add_regions(&self, regions: Vec<metapb::Region>) {
        for region in regions {
            self.shared
                .cache
                .insert_if_newer(RegionWithLeader::new(region, None));
        }
    }
}
