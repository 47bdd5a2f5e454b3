//! [`CodecPdClient`]: the PD view of a client whose Region keys are
//! memcomparable-encoded. PD reports Region boundaries as TiKV keeps the
//! keys: encoded for transactional keys ([txn.md, "Key
//! encoding"](crate::spec::txn#key-encoding-api-v1)), and in API v2 for raw
//! keys too (TiKV's `ApiV2::encode_raw_key` is `Key::from_raw`); raw keys in
//! API v1 are plain. In the encoded cases this view looks keys up by their
//! encoding and hands the plan Regions with decoded boundaries, clamped to
//! the client's keyspace as client-go's API v2 codec does
//! (`DecodeRegionRange`), so requests carry the caller's keys and sharding
//! compares like with like. For plain keys it passes every call through.

use std::sync::Arc;

use async_trait::async_trait;

use super::call_deadline;
use super::keyspace::{keyspace_end, keyspace_prefix, KeyMode, Keyspace};
use crate::codec::{decode_bytes, encode_bytes};
use crate::pd::{PdClient, Timestamp};
use crate::proto::{metapb, pdpb};
use crate::region::{CachedRegion, RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::store::{RegionStore, Store};
use crate::Failure;
use crate::{Error, Result};

/// A keyspace's key range, as the plan sees it (prefixed keys) and as PD
/// holds it (encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyspaceRange {
    start: Vec<u8>,
    end: Vec<u8>,
    encoded_start: Vec<u8>,
    encoded_end: Vec<u8>,
}

impl KeyspaceRange {
    fn new(keyspace_id: u32, mode: KeyMode) -> Self {
        let start = keyspace_prefix(keyspace_id, mode).to_vec();
        let end = keyspace_end(keyspace_id, mode);
        KeyspaceRange {
            encoded_start: encode_bytes(&start),
            encoded_end: encode_bytes(&end),
            start,
            end,
        }
    }

    fn holds(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && key < self.end.as_slice()
    }

    /// Whether the Region `[start, end)`, encoded, overlaps the keyspace.
    fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        start < self.encoded_end.as_slice()
            && (end.is_empty() || end > self.encoded_start.as_slice())
    }
}

/// How a client's keys map to the Region keys PD reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RegionKeys {
    /// The keys themselves (raw keys in API v1).
    Plain,
    /// Their memcomparable encoding; Regions that overlap `keyspace` are
    /// clamped to it.
    Encoded { keyspace: Option<KeyspaceRange> },
}

/// **beyond** A [`PdClient`] over another one that speaks the client's
/// keys: lookups encode the key when Region keys are encoded, and returned
/// Regions have decoded boundaries (clamped to the keyspace). Caches stay
/// in the inner client, keyed as PD keys them. Which keys are encoded, by
/// TiKV's rule: transactional keys always, raw keys in API v2 (a
/// [`Keyspace::Enable`] or [`Keyspace::ApiV2NoPrefix`] client); raw keys in
/// API v1 pass through unchanged, at no cost but a branch.
///
/// The clients use it inside. A plan of your own over keys in an API v2
/// keyspace, or over transactional keys, needs it (client-rust's PD client
/// does the same inside, when it is connected with a keyspace):
///
/// ```no_run
/// # async fn run() -> tikv_plan::Result<()> {
/// use std::sync::Arc;
/// use tikv_plan::pd::PdRpcClient;
/// use tikv_plan::request::{CodecPdClient, KeyMode, Keyspace};
/// use tikv_plan::Config;
///
/// let pd = PdRpcClient::connect(&["127.0.0.1:2379".to_owned()], &Config::default()).await?;
/// let keyspace = Keyspace::Enable { keyspace_id: 1 };
/// let pd = Arc::new(CodecPdClient::new(Arc::new(pd), keyspace, KeyMode::Raw));
/// // PlanBuilder::new(pd, keyspace, request) now finds each key's Region by
/// // its encoding, as TiKV keeps API v2 raw keys.
/// # Ok(()) }
/// ```
pub struct CodecPdClient<PdC: PdClient> {
    inner: Arc<PdC>,
    keys: RegionKeys,
}

impl<PdC: PdClient> std::fmt::Debug for CodecPdClient<PdC> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodecPdClient")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl<PdC: PdClient> CodecPdClient<PdC> {
    /// The view of `inner` for a client of `mode` keys in `keyspace`.
    pub fn new(inner: Arc<PdC>, keyspace: Keyspace, mode: KeyMode) -> Self {
        CodecPdClient {
            inner,
            keys: RegionKeys::new(keyspace, mode),
        }
    }

    /// The view of the same inner client (same caches and connections)
    /// for `mode` keys in `keyspace`.
    pub(crate) fn view_for(&self, keyspace: Keyspace, mode: KeyMode) -> Self {
        CodecPdClient::new(Arc::clone(&self.inner), keyspace, mode)
    }

    fn encoded(&self) -> bool {
        self.keys.encoded()
    }

    fn view(&self, region: RegionWithLeader, key: Option<&[u8]>) -> Result<RegionWithLeader> {
        self.keys.view(region, key)
    }
}

impl RegionKeys {
    /// TiKV's rule: transactional keys are always encoded, raw keys in API
    /// v2.
    fn new(keyspace: Keyspace, mode: KeyMode) -> Self {
        match (keyspace, mode) {
            (Keyspace::Disable, KeyMode::Raw) => RegionKeys::Plain,
            (Keyspace::Disable | Keyspace::ApiV2NoPrefix, _) => {
                RegionKeys::Encoded { keyspace: None }
            }
            (Keyspace::Enable { keyspace_id }, _) => RegionKeys::Encoded {
                keyspace: Some(KeyspaceRange::new(keyspace_id, mode)),
            },
        }
    }

    /// Whether Region keys are encoded (else every call passes through).
    fn encoded(&self) -> bool {
        matches!(self, RegionKeys::Encoded { .. })
    }

    /// A Region as the client sees it: boundaries decoded, and clamped to
    /// the keyspace when `key` (the key it was looked up by; `None`: looked
    /// up by id) lies in the keyspace, or the Region overlaps it. A
    /// boundary that a clamp replaces need not decode.
    fn view(&self, mut region: RegionWithLeader, key: Option<&[u8]>) -> Result<RegionWithLeader> {
        let RegionKeys::Encoded { keyspace } = self else {
            return Ok(region);
        };
        let (start, end) = (&region.region.start_key, &region.region.end_key);
        let clamp = keyspace.as_ref().filter(|ks| match key {
            Some(key) => ks.holds(key),
            None => ks.overlaps(start, end),
        });
        let id = region.region.id;
        let (start, end) = match clamp {
            Some(ks) => {
                let start = if *start < ks.encoded_start {
                    ks.start.clone()
                } else {
                    decode_boundary(start, "start", id)?
                };
                let end = if end.is_empty() || *end > ks.encoded_end {
                    ks.end.clone()
                } else {
                    decode_boundary(end, "end", id)?
                };
                (start, end)
            }
            None => (
                decode_boundary(start, "start", id)?,
                decode_boundary(end, "end", id)?,
            ),
        };
        region.region.start_key = start;
        region.region.end_key = end;
        Ok(region)
    }

    /// A key or range bound as PD keys it; an empty bound (the open end of
    /// the key space) stays empty.
    fn region_key(&self, key: &[u8]) -> Vec<u8> {
        if key.is_empty() || !self.encoded() {
            key.to_vec()
        } else {
            encode_bytes(key)
        }
    }
}

/// Decodes a Region boundary (empty: the open end). One that is not a valid
/// encoding means the cluster splits at plain keys where TiKV would split
/// at encoded ones, which this client cannot route by.
fn decode_boundary(key: &[u8], which: &str, id: u64) -> Result<Vec<u8>> {
    if key.is_empty() {
        return Ok(Vec::new());
    }
    decode_bytes(key).map_err(|e| {
        Error::from(Failure::Pd {
            error_type: pdpb::ErrorType::Unknown,
            message: format!(
                "region {id} has a {which} key {key:?} that is not a memcomparable-encoded key ({e}); \
                 a cluster serving transactions, or raw keys in API v2, must split at encoded keys"
            ),
        })
    })
}

#[async_trait]
impl<PdC: PdClient> PdClient for CodecPdClient<PdC> {
    type KvClient = PdC::KvClient;

    async fn map_region_to_store(self: Arc<Self>, region: RegionWithLeader) -> Result<RegionStore> {
        Arc::clone(&self.inner).map_region_to_store(region).await
    }

    async fn map_peer_to_store(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
    ) -> Result<RegionStore> {
        Arc::clone(&self.inner)
            .map_peer_to_store(region, peer)
            .await
    }

    async fn map_peer_through_proxy(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
        proxy: StoreId,
    ) -> Result<RegionStore> {
        Arc::clone(&self.inner)
            .map_peer_through_proxy(region, peer, proxy)
            .await
    }

    fn probes_stores(&self) -> bool {
        self.inner.probes_stores()
    }

    async fn probe_store(
        &self,
        store_id: StoreId,
        via: Option<StoreId>,
        bound: std::time::Duration,
    ) -> Result<()> {
        self.inner.probe_store(store_id, via, bound).await
    }

    // Stores are not keyed: the inner client's cached handle is the answer.
    fn cached_store_client(
        &self,
        store_id: StoreId,
    ) -> Option<Arc<dyn crate::store::KvClient + Send + Sync>> {
        self.inner.cached_store_client(store_id)
    }

    fn store_labels(&self, store_id: StoreId) -> Option<Vec<crate::proto::metapb::StoreLabel>> {
        self.inner.store_labels(store_id)
    }

    fn store_feedback(&self) -> Option<&crate::store::StoreFeedback> {
        self.inner.store_feedback()
    }

    async fn load_store_labels(
        &self,
        store_id: StoreId,
    ) -> Result<Option<Vec<crate::proto::metapb::StoreLabel>>> {
        self.inner.load_store_labels(store_id).await
    }

    /// Encoded: bounded by the client call's deadline, as every PD wait of
    /// a transactional call is (a lock's Region, a timestamp).
    async fn region_for_key(&self, key: &[u8]) -> Result<RegionWithLeader> {
        if !self.encoded() {
            return self.inner.region_for_key(key).await;
        }
        let encoded = encode_bytes(key);
        let region = call_deadline::cut(
            "finding a key's Region in PD",
            self.inner.region_for_key(&encoded),
        );
        self.view(region.await?, Some(key))
    }

    /// Plain: the inner client's shared handle. Encoded: a copy with its
    /// boundaries decoded.
    async fn region_for_key_shared(&self, key: &[u8]) -> Result<Arc<CachedRegion>> {
        if !self.encoded() {
            return self.inner.region_for_key_shared(key).await;
        }
        Ok(Arc::new(CachedRegion::from(
            self.region_for_key(key).await?,
        )))
    }

    /// The inner cache's hit for the key (its encoding, when encoded), its
    /// boundaries decoded. A Region whose boundaries do not decode is left
    /// to [`region_for_key`](PdClient::region_for_key), which reports why.
    fn cached_region_for_key(&self, key: &[u8]) -> Option<RegionWithLeader> {
        if !self.encoded() {
            return self.inner.cached_region_for_key(key);
        }
        let region = self.inner.cached_region_for_key(&encode_bytes(key))?;
        self.view(region, Some(key)).ok()
    }

    async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader> {
        self.view(self.inner.region_for_id(id).await?, None)
    }

    async fn region_for_id_shared(&self, id: RegionId) -> Result<Arc<CachedRegion>> {
        if !self.encoded() {
            return self.inner.region_for_id_shared(id).await;
        }
        Ok(Arc::new(CachedRegion::from(self.region_for_id(id).await?)))
    }

    async fn all_stores(&self) -> Result<Vec<Store>> {
        self.inner.all_stores().await
    }

    /// Bounded by the client call's deadline, as every PD wait of a
    /// transactional call is.
    async fn get_timestamp(self: Arc<Self>) -> Result<Timestamp> {
        let timestamp = Arc::clone(&self.inner).get_timestamp();
        call_deadline::cut("a timestamp from PD's TSO", timestamp).await
    }

    async fn update_safepoint(self: Arc<Self>, safe_point: u64) -> Result<bool> {
        Arc::clone(&self.inner).update_safepoint(safe_point).await
    }

    async fn update_leader(&self, ver_id: RegionVerId, leader: metapb::Peer) -> Result<()> {
        self.inner.update_leader(ver_id, leader).await
    }

    async fn invalidate_region_cache(&self, ver_id: RegionVerId) {
        self.inner.invalidate_region_cache(ver_id).await
    }

    async fn invalidate_store_cache(&self, store_id: StoreId) {
        self.inner.invalidate_store_cache(store_id).await
    }

    async fn add_regions(&self, regions: Vec<metapb::Region>) {
        // TiKV reports them as PD holds them, as the inner cache keeps them.
        self.inner.add_regions(regions).await
    }

    async fn prefetch_regions(&self, start: &[u8], end: &[u8], max_regions: usize) {
        let (start, end) = (self.keys.region_key(start), self.keys.region_key(end));
        self.inner.prefetch_regions(&start, &end, max_regions).await
    }

    async fn load_keyspace(&self, name: &str) -> Result<crate::proto::keyspacepb::KeyspaceMeta> {
        self.inner.load_keyspace(name).await
    }

    // The range walks: plain, the inner client's own; encoded, the walks
    // over this view's lookups.

    async fn group_keys_by_region<K>(&self, keys: Vec<K>) -> Result<Vec<(RegionWithLeader, Vec<K>)>>
    where
        K: AsRef<[u8]> + Send + 'static,
    {
        if !self.encoded() {
            return self.inner.group_keys_by_region(keys).await;
        }
        crate::pd::group_keys_by_region(self, keys).await
    }

    async fn regions_for_range(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<Vec<RegionWithLeader>> {
        if !self.encoded() {
            return self.inner.regions_for_range(start, end).await;
        }
        crate::pd::regions_for_range(self, start, end).await
    }

    async fn group_ranges_by_region(
        &self,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<(RegionWithLeader, Vec<(Vec<u8>, Vec<u8>)>)>> {
        if !self.encoded() {
            return self.inner.group_ranges_by_region(ranges).await;
        }
        crate::pd::group_ranges_by_region(self, ranges).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pd::PdRpcClient;
    use crate::Config;
    use tikv_sim::SimCluster;

    fn region(start: Vec<u8>, end: Vec<u8>) -> RegionWithLeader {
        RegionWithLeader::new(
            metapb::Region {
                id: 9,
                start_key: start,
                end_key: end,
                ..Default::default()
            },
            None,
        )
    }

    fn view_of(keyspace: Keyspace, mode: KeyMode) -> RegionKeys {
        RegionKeys::new(keyspace, mode)
    }

    fn bounds(r: &RegionWithLeader) -> (&[u8], &[u8]) {
        (r.start_key(), r.end_key())
    }

    #[test]
    fn which_keys_are_encoded_follows_tikv() {
        let encoded = |keyspace, mode| view_of(keyspace, mode).encoded();
        assert!(!encoded(Keyspace::Disable, KeyMode::Raw));
        assert!(encoded(Keyspace::Disable, KeyMode::Txn));
        for mode in [KeyMode::Raw, KeyMode::Txn] {
            assert!(encoded(Keyspace::ApiV2NoPrefix, mode));
            assert!(encoded(Keyspace::Enable { keyspace_id: 1 }, mode));
        }
    }

    #[test]
    fn boundaries_are_decoded_and_bad_ones_refused() {
        let view = view_of(Keyspace::Disable, KeyMode::Txn);
        let r = view
            .view(region(encode_bytes(b"b"), Vec::new()), Some(b"c"))
            .unwrap();
        assert_eq!(bounds(&r), (&b"b"[..], &b""[..]));
        let err = view
            .view(region(b"raw".to_vec(), Vec::new()), Some(b"s"))
            .unwrap_err();
        assert!(err.to_string().contains("region 9"), "{err}");
        // Plain keys pass through as they are.
        let plain = view_of(Keyspace::Disable, KeyMode::Raw);
        let r = plain.view(region(b"raw".to_vec(), Vec::new()), Some(b"s"));
        assert_eq!(bounds(&r.unwrap()), (&b"raw"[..], &b""[..]));
    }

    /// client-go's `DecodeRegionRange`: a Region that straddles keyspaces
    /// is seen within the client's own, and a boundary the clamp replaces
    /// need not decode; a key outside the keyspace (a range's end) sees the
    /// Region as PD has it.
    #[test]
    fn boundaries_are_clamped_to_the_keyspace() {
        let view = view_of(Keyspace::Enable { keyspace_id: 2 }, KeyMode::Raw);
        let straddling = region(encode_bytes(b"r\0\0\x01m"), encode_bytes(b"r\0\0\x03a"));
        let r = view.view(straddling.clone(), Some(b"r\0\0\x02k")).unwrap();
        assert_eq!(bounds(&r), (&b"r\0\0\x02"[..], &b"r\0\0\x03"[..]));
        let r = view.view(straddling.clone(), None).unwrap();
        assert_eq!(bounds(&r), (&b"r\0\0\x02"[..], &b"r\0\0\x03"[..]));
        let r = view.view(straddling, Some(b"r\0\0\x03")).unwrap();
        assert_eq!(bounds(&r), (&b"r\0\0\x01m"[..], &b"r\0\0\x03a"[..]));
        // Open ends and boundaries that are not encodings, outside.
        let r = view
            .view(region(b"a".to_vec(), Vec::new()), Some(b"r\0\0\x02"))
            .unwrap();
        assert_eq!(bounds(&r), (&b"r\0\0\x02"[..], &b"r\0\0\x03"[..]));
        // Inside the keyspace a boundary must decode.
        let inside = region(b"r\0\0\x02m".to_vec(), Vec::new());
        assert!(view.view(inside, Some(b"r\0\0\x02n")).is_err());
        // A Region wholly in another keyspace, by id: only decoded.
        let elsewhere = region(encode_bytes(b"r\0\0\x05"), encode_bytes(b"r\0\0\x06"));
        let r = view.view(elsewhere, None).unwrap();
        assert_eq!(bounds(&r), (&b"r\0\0\x05"[..], &b"r\0\0\x06"[..]));
        // The last keyspace ends at the next mode byte.
        let last = view_of(
            Keyspace::Enable {
                keyspace_id: crate::request::plan::keyspace::MAX_KEYSPACE_ID,
            },
            KeyMode::Txn,
        );
        let r = last
            .view(region(Vec::new(), Vec::new()), Some(b"x\xff\xff\xffk"))
            .unwrap();
        assert_eq!(bounds(&r), (&b"x\xff\xff\xff"[..], &b"y"[..]));
    }

    // Over the simulated cluster: the view takes the inner client's fast
    // paths (a cached Region comes back without waiting, with its
    // boundaries decoded; a cached store's client too), and a prefetch of a
    // key range loads the Regions of that range's encoding.

    async fn cluster() -> SimCluster {
        SimCluster::builder()
            .stores(3)
            .replicas(3)
            .split_keys(vec![encode_bytes(b"b"), encode_bytes(b"m")])
            .start()
            .await
            .unwrap()
    }

    async fn codec(cluster: &SimCluster, mode: KeyMode) -> Arc<CodecPdClient<PdRpcClient>> {
        let pd = PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap();
        Arc::new(CodecPdClient::new(Arc::new(pd), Keyspace::Disable, mode))
    }

    #[tokio::test]
    async fn cached_regions_and_stores_come_back_decoded_without_waiting() {
        let cluster = cluster().await;
        let pd = codec(&cluster, KeyMode::Txn).await;
        let loaded = pd.region_for_key(b"c").await.unwrap();
        assert_eq!(bounds(&loaded), (&b"b"[..], &b"m"[..]));
        let cached = pd
            .cached_region_for_key(b"c")
            .expect("a loaded Region is a cache hit");
        assert_eq!(cached.id(), loaded.id());
        assert_eq!(bounds(&cached), (&b"b"[..], &b"m"[..]));
        // A key of another Region is not that hit.
        assert!(pd
            .cached_region_for_key(b"n")
            .is_none_or(|other| other.id() != loaded.id()));

        let store_id = loaded.leader_store_id().unwrap();
        let leader = loaded.leader.unwrap();
        Arc::clone(&pd)
            .map_peer_to_store(loaded, leader)
            .await
            .unwrap();
        assert!(pd.cached_store_client(store_id).is_some());
    }

    #[tokio::test]
    async fn a_prefetch_loads_the_encoded_range() {
        let cluster = cluster().await;
        let pd = codec(&cluster, KeyMode::Txn).await;
        pd.prefetch_regions(b"a", b"z", 10).await;
        for (key, start, end) in [
            (&b"a"[..], &b""[..], &b"b"[..]),
            (b"c", b"b", b"m"),
            (b"x", b"m", b""),
        ] {
            let cached = pd
                .cached_region_for_key(key)
                .unwrap_or_else(|| panic!("{key:?} was prefetched"));
            assert_eq!(bounds(&cached), (start, end), "{key:?}");
        }
    }

    /// API v1 raw keys: the boundaries as PD has them, by the key itself.
    #[tokio::test]
    async fn plain_keys_pass_through() {
        let cluster = cluster().await;
        let pd = codec(&cluster, KeyMode::Raw).await;
        let region = pd.region_for_key(b"b").await.unwrap();
        // "b" sorts below encode_bytes("b"): the first Region holds it.
        assert_eq!(bounds(&region), (&b""[..], &encode_bytes(b"b")[..]));
        let groups = pd
            .group_keys_by_region(vec![b"a".to_vec(), b"c".to_vec()])
            .await
            .unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[1].0.start_key(), encode_bytes(b"b"));
    }
}
