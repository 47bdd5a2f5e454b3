//! [`CodecPdClient`]: the PD view of a transactional client. Transactional
//! keys live in TiKV in the memcomparable encoding and PD reports Region
//! boundaries encoded ([txn.md, "Key
//! encoding"](crate::spec::txn#key-encoding-api-v1)); this wrapper looks keys
//! up by their encoding and hands the plan Regions with decoded boundaries, so
//! requests carry the caller's keys and sharding compares like with like.

use std::sync::Arc;

use async_trait::async_trait;

use crate::codec::{decode_bytes, encode_bytes};
use crate::pd::{PdClient, Timestamp};
use crate::proto::{metapb, pdpb};
use crate::region::{RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::request::plan::call_deadline;
use crate::store::{RegionStore, Store};
use crate::Failure;
use crate::{Error, Result};

/// A [`PdClient`] over another one, for transactional keys: lookups encode
/// the key, returned Regions have decoded boundaries. Caches stay in the
/// inner client, keyed by encoded keys.
pub struct CodecPdClient<PdC: PdClient> {
    inner: Arc<PdC>,
}

impl<PdC: PdClient> CodecPdClient<PdC> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<PdC>) -> Self {
        CodecPdClient { inner }
    }
}

/// Decodes a Region's boundaries. A boundary that is not a valid encoding
/// means the cluster splits at raw keys, which a transactional client
/// cannot route by.
fn decode_region(mut region: RegionWithLeader) -> Result<RegionWithLeader> {
    let decode = |key: &[u8], which: &str, id: u64| -> Result<Vec<u8>> {
        if key.is_empty() {
            return Ok(Vec::new());
        }
        decode_bytes(key).map_err(|e| Error::from(Failure::Pd {
            error_type: pdpb::ErrorType::Unknown,
            message: format!(
                "region {id} has a {which} key {key:?} that is not a memcomparable-encoded key ({e}); \
                 a cluster serving transactions must split at encoded keys"
            ),
        }))
    };
    let id = region.region.id;
    region.region.start_key = decode(&region.region.start_key, "start", id)?;
    region.region.end_key = decode(&region.region.end_key, "end", id)?;
    Ok(region)
}

#[async_trait]
impl<PdC: PdClient> PdClient for CodecPdClient<PdC> {
    type KvClient = PdC::KvClient;

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

    /// Bounded by the client call's deadline, as every PD wait of a
    /// transactional call is (a lock's Region, a timestamp).
    async fn region_for_key(&self, key: &[u8]) -> Result<RegionWithLeader> {
        let encoded = encode_bytes(key);
        let region = call_deadline::cut(
            "finding a key's Region in PD",
            self.inner.region_for_key(&encoded),
        );
        decode_region(region.await?)
    }

    /// The inner cache's hit for the key's encoding, its boundaries decoded.
    /// A Region whose boundaries do not decode is left to
    /// [`region_for_key`](PdClient::region_for_key), which reports why.
    fn cached_region_for_key(&self, key: &[u8]) -> Option<RegionWithLeader> {
        let region = self.inner.cached_region_for_key(&encode_bytes(key))?;
        decode_region(region).ok()
    }

    async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader> {
        decode_region(self.inner.region_for_id(id).await?)
    }

    async fn all_stores(&self) -> Result<Vec<Store>> {
        self.inner.all_stores().await
    }

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
        // TiKV reports them encoded, as the inner cache keeps them.
        self.inner.add_regions(regions).await
    }

    async fn prefetch_regions(&self, start: &[u8], end: &[u8], max_regions: usize) {
        // An empty end is the end of the key space, encoded or not.
        let end = if end.is_empty() {
            Vec::new()
        } else {
            encode_bytes(end)
        };
        self.inner
            .prefetch_regions(&encode_bytes(start), &end, max_regions)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pd::PdRpcClient;
    use crate::Config;
    use tikv_sim::SimCluster;

    #[test]
    fn boundaries_are_decoded_and_bad_ones_refused() {
        let region = |start: Vec<u8>, end: Vec<u8>| {
            RegionWithLeader::new(
                metapb::Region {
                    id: 9,
                    start_key: start,
                    end_key: end,
                    ..Default::default()
                },
                None,
            )
        };
        let r = decode_region(region(encode_bytes(b"b"), Vec::new())).unwrap();
        assert_eq!(r.start_key(), b"b");
        assert!(r.end_key().is_empty());
        let err = decode_region(region(b"raw".to_vec(), Vec::new())).unwrap_err();
        assert!(err.to_string().contains("region 9"), "{err}");
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

    async fn codec(cluster: &SimCluster) -> Arc<CodecPdClient<PdRpcClient>> {
        let pd = PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap();
        Arc::new(CodecPdClient::new(Arc::new(pd)))
    }

    #[tokio::test]
    async fn cached_regions_and_stores_come_back_decoded_without_waiting() {
        let cluster = cluster().await;
        let pd = codec(&cluster).await;
        let loaded = pd.region_for_key(b"c").await.unwrap();
        assert_eq!(
            (loaded.start_key(), loaded.end_key()),
            (&b"b"[..], &b"m"[..])
        );
        let cached = pd
            .cached_region_for_key(b"c")
            .expect("a loaded Region is a cache hit");
        assert_eq!(cached.id(), loaded.id());
        assert_eq!(
            (cached.start_key(), cached.end_key()),
            (&b"b"[..], &b"m"[..])
        );
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
        let pd = codec(&cluster).await;
        pd.prefetch_regions(b"a", b"z", 10).await;
        for (key, start, end) in [
            (&b"a"[..], &b""[..], &b"b"[..]),
            (b"c", b"b", b"m"),
            (b"x", b"m", b""),
        ] {
            let cached = pd
                .cached_region_for_key(key)
                .unwrap_or_else(|| panic!("{key:?} was prefetched"));
            assert_eq!(
                (cached.start_key(), cached.end_key()),
                (start, end),
                "{key:?}"
            );
        }
    }
}
