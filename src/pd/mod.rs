//! Placement Driver access: the [`PdClient`] trait the plan calls, and
//! [`PdRpcClient`], its implementation over real PD with Region and store
//! caches.

mod client;
mod cluster;
pub(crate) mod timestamp;
mod tso;

pub use client::{ConnectCounts, PdRpcClient};
pub use cluster::{PdStats, Timestamp, PD_RETRY_BACKOFF};
pub(crate) use timestamp::TimestampExt;
pub use tso::TsoStats;

use std::sync::Arc;

use async_trait::async_trait;

use crate::proto::{metapb, pdpb};
use crate::region::{CachedRegion, RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::store::{KvClient, RegionStore, Store};
use crate::Failure;
use crate::{Error, Result};

/// `region` if it holds `key`, else an error: a Region lookup answered with
/// a Region elsewhere (an inconsistent PD, or a faulty [`PdClient`]) must not
/// be routed to, and the range walks below would never advance past it.
pub(crate) fn region_holding_key(region: RegionWithLeader, key: &[u8]) -> Result<RegionWithLeader> {
    if region.contains(key) {
        return Ok(region);
    }
    Err(not_holding_key(
        key,
        region.id(),
        region.start_key(),
        region.end_key(),
    ))
}

/// [`region_holding_key`] for a shared handle.
fn shared_region_holding_key(region: Arc<CachedRegion>, key: &[u8]) -> Result<Arc<CachedRegion>> {
    if region.contains(key) {
        return Ok(region);
    }
    Err(not_holding_key(
        key,
        region.id(),
        region.start_key(),
        region.end_key(),
    ))
}

fn not_holding_key(key: &[u8], id: RegionId, start: &[u8], end: &[u8]) -> Error {
    Error::from(Failure::Pd {
        error_type: pdpb::ErrorType::Unknown,
        message: format!(
            "the lookup of key {key:?} returned region {id} [{start:?}, {end:?}), which does not hold it; PD's Region map looks inconsistent, retry later",
        ),
    })
}

/// The error of a [`PdClient`] that cannot forward or probe.
fn forwarding_unsupported(store_id: StoreId) -> Error {
    Error::from(Failure::Connect {
        address: format!("store {store_id}"),
        message: "this PD client cannot forward calls through another store or probe a store; \
                  nothing was sent"
            .to_owned(),
        source: None,
    })
}

/// What the request plan needs from PD and the caches in front of it.
///
/// Method names and meanings follow client-rust, plus
/// [`map_peer_to_store`](PdClient::map_peer_to_store), which voter fallback
/// needs: it maps *any* peer of a Region to that peer's store client.
#[async_trait]
pub trait PdClient: Send + Sync + 'static {
    /// The store client type.
    type KvClient: KvClient + Send + Sync + 'static;

    /// Maps a Region to a client of its cached leader's store.
    /// Fails with [`Error::LeaderNotFound`] when no leader is cached.
    async fn map_region_to_store(self: Arc<Self>, region: RegionWithLeader) -> Result<RegionStore> {
        let leader = region.leader.ok_or(Error::LeaderNotFound {
            region: region.ver_id(),
        })?;
        self.map_peer_to_store(region, leader).await
    }

    /// Maps a Region and one of its peers to a client of that peer's store:
    /// looks the store up (cache, then PD) and opens or reuses a channel,
    /// bounded by the connect timeout. A store that does not run TiKV (a
    /// TiFlash store, by its `engine` label) is refused with
    /// [`Failure::NotTiKvStore`] before
    /// anything is dialled ([routing.md,
    /// "TiFlash"](crate::spec::routing#tiflash-stores-and-peers)).
    async fn map_peer_to_store(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
    ) -> Result<RegionStore>;

    /// Maps a Region and one of its peers to a client that reaches that
    /// peer's store through the store `proxy`, which forwards every call
    /// ([routing.md, "Forwarding"](crate::spec::routing#forwarding-beyond)).
    /// Neither store may be a TiFlash store (refused as by
    /// [`map_peer_to_store`](PdClient::map_peer_to_store)). The default
    /// cannot forward and fails without sending anything.
    async fn map_peer_through_proxy(
        self: Arc<Self>,
        region: RegionWithLeader,
        peer: metapb::Peer,
        proxy: StoreId,
    ) -> Result<RegionStore> {
        let _ = (region, proxy);
        Err(forwarding_unsupported(peer.store_id))
    }

    /// True when [`probe_store`](PdClient::probe_store) can probe a store
    /// (the default cannot, and answers false): store liveness
    /// ([`Config::store_probe_after`](crate::Config::store_probe_after))
    /// probes only through a PD client that can.
    fn probes_stores(&self) -> bool {
        false
    }

    /// Sends one cheap call to the store `store_id`, directly or (`via`)
    /// forwarded through another store, within `bound`: any answer, a
    /// Region error included, proves the store reachable that way. The
    /// default cannot probe and fails.
    async fn probe_store(
        &self,
        store_id: StoreId,
        via: Option<StoreId>,
        bound: std::time::Duration,
    ) -> Result<()> {
        let _ = (via, bound);
        Err(forwarding_unsupported(store_id))
    }

    /// **beyond** The labels of store `store_id` (`zone`, ...) as PD
    /// reported them, when the store is cached, without waiting: a replica
    /// read prefers stores whose labels match
    /// [`Config::local_labels`](crate::Config::local_labels), and never
    /// picks a store whose `engine` label names TiFlash. `None` (the
    /// default, and for a store not cached yet): unknown.
    fn store_labels(&self, store_id: StoreId) -> Option<Vec<crate::proto::metapb::StoreLabel>> {
        let _ = store_id;
        None
    }

    /// **beyond** The labels of store `store_id`, from the cache or else
    /// from PD (`GetStore`, which caches the store): what a replica read
    /// looks up before it chooses, when the client has
    /// [`Config::local_labels`](crate::Config::local_labels), so that even
    /// the first read of a fresh client knows which stores are in its zone.
    /// The caller bounds the wait. The default asks
    /// [`store_labels`](PdClient::store_labels) only (a client without PD
    /// knows what it knows).
    async fn load_store_labels(
        &self,
        store_id: StoreId,
    ) -> Result<Option<Vec<crate::proto::metapb::StoreLabel>>> {
        Ok(self.store_labels(store_id))
    }

    /// **beyond** The health feedback of the stores this client reaches
    /// (their slow scores), kept by its connector ([routing.md, "Slow-store
    /// feedback"](crate::spec::routing#slow-store-feedback-beyond)):
    /// replica reads prefer stores that are not slow. `None` (the
    /// default): no feedback is heard.
    fn store_feedback(&self) -> Option<&crate::store::StoreFeedback> {
        None
    }

    /// The client of the store `store_id` when both the store and its
    /// connection are cached and the store is usable, without waiting: the
    /// fast path of [`map_peer_to_store`](PdClient::map_peer_to_store),
    /// which the plan takes before any `await`. `None` (the default, and on
    /// any miss) sends the caller to `map_peer_to_store`.
    fn cached_store_client(&self, store_id: StoreId) -> Option<Arc<dyn KvClient + Send + Sync>> {
        let _ = store_id;
        None
    }

    /// The Region that contains `key` (cache, then PD).
    async fn region_for_key(&self, key: &[u8]) -> Result<RegionWithLeader>;

    /// The Region with this id (cache, then PD).
    async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader>;

    /// [`region_for_key`](PdClient::region_for_key) as a shared handle: a
    /// client with a Region cache answers a hit with a reference count, no
    /// copy. The default wraps `region_for_key`, so an implementation
    /// (or a wrapper that rewrites Regions) that only provides the by-value
    /// method stays correct.
    async fn region_for_key_shared(&self, key: &[u8]) -> Result<Arc<CachedRegion>> {
        Ok(Arc::new(CachedRegion::from(
            self.region_for_key(key).await?,
        )))
    }

    /// The Region that contains `key` if the client's Region cache holds
    /// it, without waiting: the hit of
    /// [`region_for_key`](PdClient::region_for_key), which a request's
    /// first step takes before any `await`. `None` (the default, and on a
    /// miss) sends the caller to the async lookup; a client that rewrites
    /// Regions (a keyspace codec) keeps the default.
    fn cached_region_for_key(&self, key: &[u8]) -> Option<RegionWithLeader> {
        let _ = key;
        None
    }

    /// [`region_for_id`](PdClient::region_for_id) as a shared handle; see
    /// [`region_for_key_shared`](PdClient::region_for_key_shared).
    async fn region_for_id_shared(&self, id: RegionId) -> Result<Arc<CachedRegion>> {
        Ok(Arc::new(CachedRegion::from(self.region_for_id(id).await?)))
    }

    /// Every TiKV store PD knows, each with a client: tombstones and
    /// stores of another engine (TiFlash, by its `engine` label) left out,
    /// and never dialled. Store-wide requests go to these.
    async fn all_stores(&self) -> Result<Vec<Store>>;

    /// A timestamp from PD's TSO.
    async fn get_timestamp(self: Arc<Self>) -> Result<Timestamp>;

    /// Moves PD's GC safe point to `safe_point` (used by
    /// `TransactionClient::gc`); true when PD now holds exactly it. The
    /// default refuses: a client without PD cannot run GC.
    async fn update_safepoint(self: Arc<Self>, safe_point: u64) -> Result<bool> {
        Err(Error::InternalError {
            message: format!(
                "this PD client cannot update the GC safe point (asked for {safe_point})"
            ),
        })
    }

    /// Records `leader` as the leader of the cached Region `ver_id`. Ignored
    /// unless the cache holds exactly that version and `leader` is one of its
    /// peers.
    async fn update_leader(&self, ver_id: RegionVerId, leader: metapb::Peer) -> Result<()>;

    /// Drops the cached Region `ver_id`, so the next lookup asks PD.
    async fn invalidate_region_cache(&self, ver_id: RegionVerId);

    /// Drops the cached store and its connection.
    async fn invalidate_store_cache(&self, store_id: StoreId);

    /// Inserts Regions learned from an `EpochNotMatch` answer, when they are
    /// newer than what the cache holds. The default does nothing.
    async fn add_regions(&self, _regions: Vec<metapb::Region>) {}

    /// Loads into the Region cache the Regions of `[start, end)` (empty end:
    /// the end of the key space) that it lacks, at most `max_regions` of
    /// them, in bulk (PD's `ScanRegions`) rather than one lookup per Region.
    /// A hint only: failures are ignored (the per-key lookups that follow
    /// load what is missing). The default does nothing.
    async fn prefetch_regions(&self, _start: &[u8], _end: &[u8], _max_regions: usize) {}

    /// The metadata of the keyspace named `name`, from PD.
    /// [`Error::KeyspaceNotFound`] when it does not exist (the default: a PD
    /// client that knows no keyspaces).
    async fn load_keyspace(&self, name: &str) -> Result<crate::proto::keyspacepb::KeyspaceMeta> {
        Err(Error::KeyspaceNotFound(name.to_owned()))
    }

    /// Groups sorted keys by the Region containing them, in key order.
    async fn group_keys_by_region<K>(&self, keys: Vec<K>) -> Result<Vec<(RegionWithLeader, Vec<K>)>>
    where
        K: AsRef<[u8]> + Send + 'static,
    {
        group_keys_by_region(self, keys).await
    }

    /// The Regions that overlap `[start, end)` (an empty `end` is unbounded),
    /// in key order.
    async fn regions_for_range(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<Vec<RegionWithLeader>> {
        regions_for_range(self, start, end).await
    }

    /// Splits sorted, non-overlapping ranges at Region boundaries and groups
    /// the pieces by Region, in key order.
    async fn group_ranges_by_region(
        &self,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<(RegionWithLeader, Vec<(Vec<u8>, Vec<u8>)>)>> {
        group_ranges_by_region(self, ranges).await
    }
}

/// [`PdClient::group_keys_by_region`] over `pd`'s lookups: the default,
/// and what a client that rewrites Regions runs over itself.
pub(crate) async fn group_keys_by_region<P, K>(
    pd: &P,
    keys: Vec<K>,
) -> Result<Vec<(RegionWithLeader, Vec<K>)>>
where
    P: PdClient + ?Sized,
    K: AsRef<[u8]> + Send + 'static,
{
    let lowest = keys.iter().map(AsRef::as_ref).min();
    if let (Some(lowest), Some(highest)) = (lowest, keys.iter().map(AsRef::as_ref).max()) {
        let mut end = highest.to_vec();
        end.push(0);
        pd.prefetch_regions(lowest, &end, usize::MAX).await;
    }
    let mut groups: Vec<(RegionWithLeader, Vec<K>)> = Vec::new();
    for key in keys {
        if let Some((region, group)) = groups.last_mut() {
            if region.contains(key.as_ref()) {
                group.push(key);
                continue;
            }
        }
        let region = pd.region_for_key_shared(key.as_ref()).await?;
        let region = shared_region_holding_key(region, key.as_ref())?;
        groups.push((region.to_region_with_leader(), vec![key]));
    }
    Ok(groups)
}

/// [`PdClient::regions_for_range`] over `pd`'s lookups.
pub(crate) async fn regions_for_range<P: PdClient + ?Sized>(
    pd: &P,
    start: Vec<u8>,
    end: Vec<u8>,
) -> Result<Vec<RegionWithLeader>> {
    pd.prefetch_regions(&start, &end, usize::MAX).await;
    let mut regions = Vec::new();
    let mut key = start;
    loop {
        let region = shared_region_holding_key(pd.region_for_key_shared(&key).await?, &key)?;
        let region_end = region.end_key().to_vec();
        regions.push(region.to_region_with_leader());
        if region_end.is_empty() || (!end.is_empty() && region_end >= end) {
            return Ok(regions);
        }
        key = region_end;
    }
}

/// [`PdClient::group_ranges_by_region`] over `pd`'s lookups.
pub(crate) async fn group_ranges_by_region<P: PdClient + ?Sized>(
    pd: &P,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Vec<(RegionWithLeader, Vec<(Vec<u8>, Vec<u8>)>)>> {
    let lowest = ranges.iter().map(|(s, _)| s).min();
    let highest = ranges
        .iter()
        .map(|(_, e)| e)
        .max_by(|a, b| match (a.is_empty(), b.is_empty()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            (false, false) => a.cmp(b),
        });
    if let (Some(lowest), Some(highest)) = (lowest, highest) {
        pd.prefetch_regions(lowest, highest, usize::MAX).await;
    }
    let mut groups: Vec<(RegionWithLeader, Vec<_>)> = Vec::new();
    // The Region of the last group.
    let mut last: Option<Arc<CachedRegion>> = None;
    for (start, end) in ranges {
        let mut piece_start = start;
        loop {
            let region = match &last {
                Some(r) if r.contains(&piece_start) => Arc::clone(r),
                _ => {
                    let region = pd.region_for_key_shared(&piece_start).await?;
                    shared_region_holding_key(region, &piece_start)?
                }
            };
            let region_end = region.end_key().to_vec();
            let ends_here = region_end.is_empty() || (!end.is_empty() && end <= region_end);
            let piece_end = if ends_here {
                end.clone()
            } else {
                region_end.clone()
            };
            let piece = (piece_start.clone(), piece_end);
            match groups.last_mut() {
                Some((r, pieces)) if r.ver_id() == region.ver_id() => pieces.push(piece),
                _ => groups.push((region.to_region_with_leader(), vec![piece])),
            }
            last = Some(region);
            if ends_here {
                break;
            }
            piece_start = region_end;
        }
    }
    Ok(groups)
}

/// Checks PD endpoints before any connection: at least one, each
/// `host:port` (optionally with an `http://` or `https://` scheme).
pub(crate) fn validate_pd_endpoints(endpoints: &[String]) -> crate::Result<()> {
    if endpoints.is_empty() {
        return Err(Error::from(Failure::InvalidArgument(
            "no PD endpoint given; pass at least one address such as \"127.0.0.1:2379\"".to_owned(),
        )));
    }
    for endpoint in endpoints {
        let bare = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"))
            .unwrap_or(endpoint);
        let well_formed = match bare.rsplit_once(':') {
            Some((host, port)) => {
                !host.is_empty()
                    && !host.contains('/')
                    && !host.chars().any(char::is_whitespace)
                    && port.parse::<u16>().is_ok_and(|p| p != 0)
            }
            None => false,
        };
        if !well_formed {
            return Err(Error::from(Failure::InvalidArgument(format!(
                "the PD endpoint {endpoint:?} is not an address; write it as host:port, e.g. \"127.0.0.1:2379\""
            ))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::KvRpcClient;

    /// A PD that answers every key lookup with the Region `[m, z)`, and
    /// fails from the tenth lookup on, so a walk that never advances ends
    /// with the wrong error instead of hanging the test.
    #[derive(Default)]
    struct OneRegionPd {
        lookups: std::sync::atomic::AtomicUsize,
    }

    fn m_to_z() -> RegionWithLeader {
        RegionWithLeader::new(
            metapb::Region {
                id: 7,
                start_key: b"m".to_vec(),
                end_key: b"z".to_vec(),
                ..Default::default()
            },
            None,
        )
    }

    #[async_trait]
    impl PdClient for OneRegionPd {
        type KvClient = KvRpcClient;

        async fn map_peer_to_store(
            self: Arc<Self>,
            _region: RegionWithLeader,
            _peer: metapb::Peer,
        ) -> Result<RegionStore> {
            Err(Error::InternalError {
                message: "not used".to_owned(),
            })
        }
        async fn region_for_key(&self, _key: &[u8]) -> Result<RegionWithLeader> {
            let seen = self
                .lookups
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if seen >= 10 {
                return Err(Error::InternalError {
                    message: "the walk does not advance".to_owned(),
                });
            }
            Ok(m_to_z())
        }
        async fn region_for_id(&self, id: RegionId) -> Result<RegionWithLeader> {
            Err(Error::from(Failure::RegionNotFoundInPd { region_id: id }))
        }
        async fn all_stores(&self) -> Result<Vec<Store>> {
            Ok(Vec::new())
        }
        async fn get_timestamp(self: Arc<Self>) -> Result<crate::pd::Timestamp> {
            Err(Error::InternalError {
                message: "not used".to_owned(),
            })
        }
        async fn update_leader(&self, _ver_id: RegionVerId, _leader: metapb::Peer) -> Result<()> {
            Ok(())
        }
        async fn invalidate_region_cache(&self, _ver_id: RegionVerId) {}
        async fn invalidate_store_cache(&self, _store_id: StoreId) {}
    }

    fn is_inconsistent_pd(result: Result<impl std::fmt::Debug>) -> bool {
        matches!(
            result.as_ref().err().and_then(|e| e.failure()),
            Some(Failure::Pd {
                error_type: pdpb::ErrorType::Unknown,
                ref message,
            }) if message.contains("region 7")
        )
    }

    #[test]
    fn a_region_that_does_not_hold_the_key_is_refused() {
        assert!(region_holding_key(m_to_z(), b"p").is_ok());
        assert!(is_inconsistent_pd(region_holding_key(m_to_z(), b"a")));
        assert!(is_inconsistent_pd(region_holding_key(m_to_z(), b"z")));
    }

    #[tokio::test]
    async fn range_walks_stop_at_a_region_that_does_not_hold_the_key() {
        // Past `z` the walk asks for `z` and gets `[m, z)` again: without
        // the check it would loop forever.
        assert!(is_inconsistent_pd(
            OneRegionPd::default()
                .regions_for_range(b"n".to_vec(), Vec::new())
                .await
        ));
        assert!(is_inconsistent_pd(
            OneRegionPd::default()
                .group_ranges_by_region(vec![(b"n".to_vec(), Vec::new())])
                .await
        ));
        assert!(is_inconsistent_pd(
            OneRegionPd::default()
                .group_keys_by_region(vec![b"n".to_vec(), b"zz".to_vec()])
                .await
        ));
        let inside = OneRegionPd::default()
            .regions_for_range(b"n".to_vec(), b"p".to_vec())
            .await
            .unwrap();
        assert_eq!(inside.len(), 1);
    }
}
