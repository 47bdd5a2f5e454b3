//! [`PdRpcClient`]: the [`PdClient`] over a PD [`Cluster`], with Region and
//! store caches and one connection per store address.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use tracing::debug;

use super::cluster::{Cluster, PdStats, Timestamp};
use super::tso::{TimestampOracle, TsoStats};
use super::PdClient;
use crate::config::Config;
use crate::proto::{metapb, pdpb};
use crate::region::store_engine::{refuse_unless_tikv, StoreEngine};
use crate::region::{
    CachedRegion, RegionCache, RegionId, RegionVerId, RegionWithLeader, SingleFlight, StoreCache,
    StoreId,
};
use crate::security::SecurityManager;
use crate::store::{KvClient, KvConnect, RegionStore, Store, TikvConnect};
use crate::Failure;
use crate::{Error, Result};

/// Connection counters for one store address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectCounts {
    /// Lookups that found no open connection for the address.
    pub misses: u64,
    /// Calls to [`KvConnect::connect`] for the address. With single-flight
    /// connect, concurrent misses share one attempt.
    pub attempts: u64,
}

type ConnectCountMap = Arc<Mutex<BTreeMap<String, ConnectCounts>>>;

/// Clients that reach a store through a proxy, by (proxy address, target
/// address).
type ForwardedClients<KvC> = BTreeMap<(String, String), Arc<<KvC as KvConnect>::KvClient>>;

/// How many store addresses keep connection counters. Stores come and go
/// over a client's life; past this many, an address seen before makes room
/// for a new one (the counters are diagnostics, not state).
pub(crate) const MAX_COUNTED_ADDRESSES: usize = 1024;

fn count(counts: &ConnectCountMap, address: &str, update: impl FnOnce(&mut ConnectCounts)) {
    let mut counts = crate::sync::lock(counts);
    if !counts.contains_key(address) && counts.len() >= MAX_COUNTED_ADDRESSES {
        if let Some(evicted) = counts.keys().next().cloned() {
            counts.remove(&evicted);
        }
    }
    update(counts.entry(address.to_owned()).or_default());
}

/// The PD client: a connection to the PD cluster's leader, a Region cache, a
/// store cache, and one store client per address, opened with `KvC`.
///
/// ```no_run
/// # async fn demo() -> tikv_plan::Result<()> {
/// use tikv_plan::pd::{PdClient, PdRpcClient};
/// let pd = PdRpcClient::connect(&["127.0.0.1:2379".to_owned()], &tikv_plan::Config::default()).await?;
/// let region = pd.region_for_key(b"key").await?;
/// println!("region {} leads from {:?}", region.id(), region.leader);
/// # Ok(()) }
/// ```
pub struct PdRpcClient<KvC: KvConnect = TikvConnect> {
    cluster: Arc<Cluster>,
    kv_connect: Arc<KvC>,
    regions: RegionCache,
    stores: StoreCache,
    // Shared handles: a request takes a reference count, not a copy of the
    // client and a fresh allocation around it.
    /// Ordered, so that the connections close in a reproducible order when
    /// the client goes away (a simulation replays from its seed).
    connections: Arc<RwLock<BTreeMap<String, Arc<KvC::KvClient>>>>,
    connecting: SingleFlight<String, Arc<KvC::KvClient>>,
    /// Connections to a proxy store that forward every call to another
    /// store, by (proxy address, target address).
    forwarded: Arc<RwLock<ForwardedClients<KvC>>>,
    connect_counts: ConnectCountMap,
    single_flight_connect: bool,
    /// Timestamps from one batched `Tso` stream.
    tso: TimestampOracle,
}

/// The most Regions one `ScanRegions` call asks for when loading a range.
pub const SCAN_REGIONS_BATCH: usize = 1024;

impl<KvC: KvConnect> std::fmt::Debug for PdRpcClient<KvC> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PdRpcClient")
            .field("cluster", &self.cluster)
            .field("regions", &self.regions.len())
            .field("stores", &self.stores.len())
            .finish_non_exhaustive()
    }
}

impl PdRpcClient<TikvConnect> {
    /// [`connect`](Self::connect) for the clients' constructors: the
    /// endpoints (anything that turns into a `String`) are checked first,
    /// so a malformed one fails with a sentence saying what is wrong.
    pub(crate) async fn connect_endpoints<S: Into<String>>(
        pd_endpoints: Vec<S>,
        config: &Config,
    ) -> Result<Self> {
        let endpoints: Vec<String> = pd_endpoints.into_iter().map(Into::into).collect();
        super::validate_pd_endpoints(&endpoints)?;
        Self::connect(&endpoints, config).await
    }

    /// Connects to PD through `pd_endpoints` and opens store connections
    /// with [`TikvConnect`], using the timeouts and security of `config`.
    pub async fn connect(pd_endpoints: &[String], config: &Config) -> Result<Self> {
        let security = Arc::new(SecurityManager::from_config(&config.security())?);
        let kv_connect = TikvConnect::new(
            Arc::clone(&security),
            config.timeout,
            config.connect_timeout,
        )
        .with_max_decoding_message_size(config.grpc_max_decoding_message_size)
        .with_rpc_mode(config.rpc_mode, crate::store::BatchOptions::from(config));
        Self::with_security(pd_endpoints, config, security, kv_connect).await
    }
}

impl<KvC: KvConnect> PdRpcClient<KvC> {
    /// Connects to PD through `pd_endpoints` (with `config`'s timeouts and
    /// security) and opens store connections with `kv_connect`.
    pub async fn new_with(
        pd_endpoints: &[String],
        config: &Config,
        kv_connect: KvC,
    ) -> Result<Self> {
        let security = Arc::new(SecurityManager::from_config(&config.security())?);
        Self::with_security(pd_endpoints, config, security, kv_connect).await
    }

    async fn with_security(
        pd_endpoints: &[String],
        config: &Config,
        security: Arc<SecurityManager>,
        kv_connect: KvC,
    ) -> Result<Self> {
        let cluster = Cluster::connect_with_limit(
            pd_endpoints,
            security,
            config.timeout,
            config.connect_timeout,
            config.grpc_max_decoding_message_size,
        )
        .await?;
        let cluster = Arc::new(cluster);
        Ok(PdRpcClient {
            tso: TimestampOracle::new(Arc::clone(&cluster)),
            cluster,
            kv_connect: Arc::new(kv_connect),
            regions: RegionCache::with_capacity(config.region_cache_capacity)
                .with_ttl(config.region_cache_ttl),
            stores: StoreCache::new(),
            connections: Arc::new(RwLock::new(BTreeMap::new())),
            connecting: SingleFlight::default(),
            forwarded: Arc::new(RwLock::new(BTreeMap::new())),
            connect_counts: Arc::new(Mutex::new(BTreeMap::new())),
            single_flight_connect: config.single_flight_connect,
        })
    }

    /// The id of the PD cluster the client joined.
    pub fn cluster_id(&self) -> u64 {
        self.cluster.cluster_id()
    }

    /// The URL of the PD leader the client follows now, if it knows one.
    pub fn pd_leader(&self) -> Option<String> {
        self.cluster.leader_url()
    }

    /// How many Regions this client's cache holds.
    pub fn cached_regions(&self) -> usize {
        self.regions.len()
    }

    /// What the batched TSO stream did.
    pub fn tso_stats(&self) -> TsoStats {
        self.tso.stats()
    }

    /// How many PD RPCs were sent, by kind.
    pub fn pd_stats(&self) -> PdStats {
        self.cluster.stats()
    }

    /// Connection counters for one store address.
    pub fn connect_counts(&self, address: &str) -> ConnectCounts {
        crate::sync::lock(&self.connect_counts)
            .get(address)
            .copied()
            .unwrap_or_default()
    }

    /// True when a connection to `address` is open and cached.
    pub fn has_connection(&self, address: &str) -> bool {
        self.cached_connection(address).is_some()
    }

    /// The store `store_id` in whatever state PD reports (cache, then PD's
    /// `GetStore`, one lookup per store however many callers ask at once).
    async fn store_any_state(&self, store_id: StoreId) -> Result<metapb::Store> {
        let cluster = Arc::clone(&self.cluster);
        self.stores
            .get_or_load(
                store_id,
                move |id| async move { cluster.get_store(id).await },
            )
            .await
    }

    /// The store `store_id` (cache, then PD). A tombstone store is an
    /// error: nothing can be sent to it.
    pub async fn store(&self, store_id: StoreId) -> Result<metapb::Store> {
        let store = self.store_any_state(store_id).await?;
        if store.state == metapb::StoreState::Tombstone as i32 {
            return Err(Error::from(Failure::Pd {
                error_type: pdpb::ErrorType::StoreTombstone,
                message: format!(
                    "store {store_id} is a tombstone (removed from the cluster); reload the Region"
                ),
            }));
        }
        if store.address.is_empty() {
            return Err(Error::from(Failure::Connect {
                address: String::new(),
                message: format!("PD reports no address for store {store_id}"),
                source: None,
            }));
        }
        Ok(store)
    }

    /// [`store`](Self::store), refused (before anything is dialled) when
    /// it does not run TiKV: a TiFlash store takes no TiKV request
    /// ([routing.md, "TiFlash"](crate::spec::routing#tiflash-stores-and-peers)).
    async fn tikv_store(&self, store_id: StoreId) -> Result<metapb::Store> {
        let store = self.store(store_id).await?;
        refuse_unless_tikv(store_id, &store.labels)?;
        Ok(store)
    }

    /// The client of a cached, usable TiKV store whose connection is open.
    fn cached_kv_client(&self, store_id: StoreId) -> Option<Arc<KvC::KvClient>> {
        self.stores
            .with_cached(store_id, |store| {
                let usable = store.state != metapb::StoreState::Tombstone as i32
                    && !store.address.is_empty()
                    && StoreEngine::of_store(store).is_tikv();
                usable.then(|| self.cached_connection(&store.address))
            })
            .flatten()
            .flatten()
    }

    fn cached_connection(&self, address: &str) -> Option<Arc<KvC::KvClient>> {
        crate::sync::read(&self.connections).get(address).cloned()
    }

    /// The client for `address`: cached, or opened now. With single-flight
    /// connect, concurrent misses share one attempt and its outcome.
    async fn kv_client(&self, address: &str) -> Result<Arc<KvC::KvClient>> {
        if let Some(client) = self.cached_connection(address) {
            return Ok(client);
        }
        count(&self.connect_counts, address, |c| c.misses += 1);
        let connections = Arc::clone(&self.connections);
        let kv_connect = Arc::clone(&self.kv_connect);
        let counts = Arc::clone(&self.connect_counts);
        let owned_address = address.to_owned();
        let open = async move {
            count(&counts, &owned_address, |c| c.attempts += 1);
            let client = Arc::new(
                crate::telemetry::connect(
                    "store",
                    &owned_address,
                    kv_connect.connect(&owned_address),
                )
                .await?,
            );
            crate::sync::write(&connections).insert(owned_address, Arc::clone(&client));
            Ok(client)
        };
        if self.single_flight_connect {
            self.connecting
                .run(
                    address.to_owned(),
                    || self.cached_connection(address),
                    || open,
                )
                .await
        } else {
            open.await
        }
    }
}

impl<KvC: KvConnect> PdRpcClient<KvC> {
    fn cached_forwarded(&self, proxy: &str, target: &str) -> Option<Arc<KvC::KvClient>> {
        crate::sync::read(&self.forwarded)
            .get(&(proxy.to_owned(), target.to_owned()))
            .cloned()
    }

    /// The client that reaches the store at `target` through the store at
    /// `proxy`: cached, or opened now (one attempt per pair at a time).
    async fn forwarded_client(&self, proxy: &str, target: &str) -> Result<Arc<KvC::KvClient>> {
        if let Some(client) = self.cached_forwarded(proxy, target) {
            return Ok(client);
        }
        let forwarded = Arc::clone(&self.forwarded);
        let kv_connect = Arc::clone(&self.kv_connect);
        let (owned_proxy, owned_target) = (proxy.to_owned(), target.to_owned());
        let open = async move {
            let client = Arc::new(
                crate::telemetry::connect(
                    "forwarding store",
                    &owned_proxy,
                    kv_connect.connect_forwarded(&owned_proxy, &owned_target),
                )
                .await?,
            );
            crate::sync::write(&forwarded).insert((owned_proxy, owned_target), Arc::clone(&client));
            Ok(client)
        };
        // Not an address: a key of its own in the single flight.
        let key = format!("{proxy} forwarding to {target}");
        self.connecting
            .run(key, || self.cached_forwarded(proxy, target), || open)
            .await
    }
}

#[async_trait]
impl<KvC: KvConnect> PdClient for PdRpcClient<KvC> {
    type KvClient = KvC::KvClient;

    async fn map_peer_to_store(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
    ) -> Result<RegionStore> {
        // Fast path: the store is cached, usable, and its connection open.
        // Nothing is copied or allocated but the client's reference count;
        // anything else (a miss, a tombstone, no address) takes the full path
        // below, which reports it.
        let cached = self.cached_kv_client(peer.store_id);
        let client = match cached {
            Some(client) => client,
            None => {
                let store = self.tikv_store(peer.store_id).await?;
                self.kv_client(&store.address).await?
            }
        };
        Ok(RegionStore::new(region, peer, client))
    }

    async fn map_peer_through_proxy(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
        proxy: StoreId,
    ) -> Result<RegionStore> {
        let target = self.tikv_store(peer.store_id).await?;
        let proxy = self.tikv_store(proxy).await?;
        let client = self
            .forwarded_client(&proxy.address, &target.address)
            .await?;
        Ok(RegionStore::new(region, peer, client))
    }

    fn probes_stores(&self) -> bool {
        true
    }

    async fn probe_store(
        &self,
        store_id: StoreId,
        via: Option<StoreId>,
        bound: std::time::Duration,
    ) -> Result<()> {
        let probe = async {
            let target = self.tikv_store(store_id).await?;
            let client = match via {
                None => self.kv_client(&target.address).await?,
                Some(proxy) => {
                    let proxy = self.tikv_store(proxy).await?;
                    self.forwarded_client(&proxy.address, &target.address)
                        .await?
                }
            };
            client
                .dispatch_within(&crate::store::liveness_probe(), Some(bound))
                .await
                .map(drop)
        };
        match tokio::time::timeout(bound, probe).await {
            Ok(result) => result,
            Err(_) => Err(Error::from(Failure::Timeout {
                what: format!("the liveness probe of store {store_id}"),
                after: bound,
            })),
        }
    }

    async fn region_for_key(&self, key: &[u8]) -> Result<RegionWithLeader> {
        Ok(self
            .region_for_key_shared(key)
            .await?
            .to_region_with_leader())
    }

    async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader> {
        Ok(self.region_for_id_shared(id).await?.to_region_with_leader())
    }

    fn store_labels(&self, store_id: StoreId) -> Option<Vec<metapb::StoreLabel>> {
        self.stores
            .with_cached(store_id, |store| store.labels.clone())
    }

    fn store_feedback(&self) -> Option<&crate::store::StoreFeedback> {
        self.kv_connect.store_feedback()
    }

    /// Cache, then PD's `GetStore` (one lookup per store however many
    /// reads ask at once); a tombstone's labels too: the choice only
    /// ranks by them, and mapping refuses the store.
    async fn load_store_labels(
        &self,
        store_id: StoreId,
    ) -> Result<Option<Vec<metapb::StoreLabel>>> {
        let store = self.store_any_state(store_id).await?;
        Ok(Some(store.labels))
    }

    fn cached_store_client(
        &self,
        store_id: StoreId,
    ) -> Option<Arc<dyn crate::store::KvClient + Send + Sync>> {
        let client: Arc<dyn crate::store::KvClient + Send + Sync> =
            self.cached_kv_client(store_id)?;
        Some(client)
    }

    fn cached_region_for_key(&self, key: &[u8]) -> Option<RegionWithLeader> {
        let region = self.regions.region_with_leader_by_key(key)?;
        crate::telemetry::region_cache_lookup(true);
        Some(region)
    }

    async fn region_for_key_shared(&self, key: &[u8]) -> Result<Arc<CachedRegion>> {
        let cluster = Arc::clone(&self.cluster);
        self.regions
            .get_or_load_by_key(
                key,
                move |key| async move { cluster.get_region(&key).await },
            )
            .await
    }

    async fn region_for_id_shared(&self, id: RegionId) -> Result<Arc<CachedRegion>> {
        let cluster = Arc::clone(&self.cluster);
        self.regions
            .get_or_load_by_id(
                id,
                move |id| async move { cluster.get_region_by_id(id).await },
            )
            .await
    }

    /// TiKV's stores only: PD lists TiFlash's too, which take no TiKV
    /// request and are never dialled.
    async fn all_stores(&self) -> Result<Vec<Store>> {
        let metas = self.cluster.get_all_stores(true).await?;
        let mut stores = Vec::with_capacity(metas.len());
        for meta in metas {
            if meta.state == metapb::StoreState::Tombstone as i32 {
                continue;
            }
            self.stores.insert(meta.clone());
            if !StoreEngine::of_store(&meta).is_tikv() {
                debug!(
                    "store {} is not TiKV ({:?}); left out",
                    meta.id, meta.labels
                );
                continue;
            }
            let client = self.kv_client(&meta.address).await?;
            stores.push(Store { meta, client });
        }
        Ok(stores)
    }

    async fn get_timestamp(self: Arc<Self>) -> Result<Timestamp> {
        self.tso.get_timestamp().await
    }

    async fn update_safepoint(self: Arc<Self>, safe_point: u64) -> Result<bool> {
        Ok(self.cluster.update_gc_safe_point(safe_point).await? == safe_point)
    }

    async fn update_leader(&self, ver_id: RegionVerId, leader: metapb::Peer) -> Result<()> {
        if !self.regions.update_leader(ver_id, &leader) {
            debug!(
                "leader update for region {ver_id:?} to peer {} ignored: not a peer of the cached version",
                leader.id
            );
        }
        Ok(())
    }

    async fn invalidate_region_cache(&self, ver_id: RegionVerId) {
        self.regions.invalidate(ver_id);
    }

    /// Also drops the forwarded connections through the store and to it:
    /// a route is opened again, at the store's address as PD then gives it.
    async fn invalidate_store_cache(&self, store_id: StoreId) {
        if let Some(store) = self.stores.remove(store_id) {
            crate::sync::write(&self.connections).remove(&store.address);
            crate::sync::write(&self.forwarded)
                .retain(|(proxy, target), _| *proxy != store.address && *target != store.address);
        }
    }

    /// Walks the cache over the range; from the first Region it lacks, asks
    /// PD for the rest with `ScanRegions` (up to `SCAN_REGIONS_BATCH` per
    /// call) and caches what comes back.
    async fn prefetch_regions(&self, start: &[u8], end: &[u8], max_regions: usize) {
        let mut key = start.to_vec();
        let mut loaded = 0usize;
        let before_end = |key: &[u8]| end.is_empty() || key < end;
        while before_end(&key) && loaded < max_regions {
            if let Some(region) = self.regions.get_by_key(&key) {
                if region.end_key().is_empty() {
                    return;
                }
                key = region.end_key().to_vec();
                continue;
            }
            let batch = (max_regions - loaded).min(SCAN_REGIONS_BATCH) as i32;
            let regions = match self.cluster.scan_regions(&key, end, batch).await {
                Ok(regions) => regions,
                Err(e) => {
                    debug!("bulk Region load from {key:?} failed ({e}); loading one by one");
                    return;
                }
            };
            // PD answers from the Region holding `key`; anything else (an
            // empty answer, a gap) ends the walk and per-key lookups take
            // over.
            let Some(next) = regions
                .last()
                .filter(|_| regions[0].contains(&key))
                .map(|r| r.end_key().to_vec())
            else {
                return;
            };
            loaded += regions.len();
            for region in regions {
                self.regions.insert_if_newer(region);
            }
            if next.is_empty() {
                return;
            }
            key = next;
        }
    }

    async fn load_keyspace(&self, name: &str) -> Result<crate::proto::keyspacepb::KeyspaceMeta> {
        self.cluster.load_keyspace(name).await
    }

    async fn add_regions(&self, regions: Vec<metapb::Region>) {
        for region in regions {
            self.regions
                .insert_if_newer(RegionWithLeader::new(region, None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_counters_are_bounded() {
        // One entry per address ever dialled would grow forever.
        let counts: ConnectCountMap = Arc::default();
        for i in 0..(3 * MAX_COUNTED_ADDRESSES) {
            count(&counts, &format!("store-{i}:20160"), |c| c.attempts += 1);
        }
        let counts = crate::sync::lock(&counts);
        assert_eq!(counts.len(), MAX_COUNTED_ADDRESSES);
        let last = format!("store-{}:20160", 3 * MAX_COUNTED_ADDRESSES - 1);
        assert_eq!(counts.get(&last).map(|c| c.attempts), Some(1));
    }
}
