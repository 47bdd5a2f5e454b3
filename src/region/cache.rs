//! Region and store caches in front of PD.
//!
//! [`RegionCache`] keeps Regions ordered by start key. Inserting a Region
//! evicts every cached Region it overlaps, but never lets an older epoch
//! replace a newer one. Concurrent misses on the same key (or the same id)
//! share one load from PD, and a failed load is never cached.
//! [`StoreCache`] does the same for store metadata.
//!
//! This file is over 800 lines with its unit tests, which sit beside the code
//! as client-rust and tokio keep them; the code is under 800.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub(crate) use super::single_flight::SingleFlight;
use super::{CachedRegion, RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::proto::metapb;
use crate::sync::{read, write};
use crate::Failure;
use crate::Result;

/// A cached Region in the start-key index, ordered by its start key. The
/// index holds the same allocation as the id index, so the key bytes are
/// stored once, and a comparison reads them right behind the reference
/// count.
#[derive(Debug, Clone)]
struct ByStart(Arc<CachedRegion>);

impl PartialEq for ByStart {
    fn eq(&self, other: &Self) -> bool {
        self.0.start_key() == other.0.start_key()
    }
}

impl Eq for ByStart {}

impl PartialOrd for ByStart {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByStart {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.start_key().cmp(other.0.start_key())
    }
}

impl Borrow<[u8]> for ByStart {
    fn borrow(&self) -> &[u8] {
        self.0.start_key()
    }
}

/// A cached Region in the id index, hashed and compared by its id.
#[derive(Debug, Clone)]
struct ById(Arc<CachedRegion>);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id() == other.0.id()
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `RegionId` hashes, so that lookups by id (`Borrow`) find it.
        self.0.id().hash(state);
    }
}

impl Borrow<RegionId> for ById {
    fn borrow(&self) -> &RegionId {
        &self.0.id
    }
}

/// One insertion in the eviction queue: the Region's id and the stamp the
/// insertion gave it. Packed to 12 bytes: the queue holds one per cached
/// Region and more.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct Inserted {
    id: RegionId,
    stamp: u32,
}

/// The cached Regions, each one `Arc` indexed twice (by start key and by
/// id). Every Region is in both indexes or in neither.
#[derive(Debug)]
struct RegionMap {
    by_start: BTreeSet<ByStart>,
    by_id: HashSet<ById>,
    /// Insertions in order, oldest first: past the capacity the oldest go.
    /// An entry is current while the cached Region with its id has its
    /// stamp; the others (replaced, invalidated) are skipped, and compacted
    /// away when they pile up.
    inserted: VecDeque<Inserted>,
    /// The stamp of the next insertion. It wraps, which is harmless: a
    /// stale entry lives until the next compaction, at most a few times
    /// the capacity of insertions later, far fewer than 2^32; and taking
    /// one for current would only evict a Region early.
    next_stamp: u32,
    /// How many Regions the cache holds at most.
    capacity: usize,
    /// This cache's share of the Region cache size metric.
    gauge: crate::telemetry::CacheGauge,
    /// How long a cached Region lives without use.
    ttl: RegionTtl,
}

/// How long a cached Region lives ([`Config::region_cache_ttl`](crate::Config::region_cache_ttl)):
/// a Region unused for the TTL, plus up to a tenth of it as jitter (so
/// Regions loaded together do not all expire together), is dropped and
/// loaded again from PD on its next use. Each use extends the life; a
/// Region PD reported with a down peer is not extended. Times are tenths
/// of a second on tokio's clock from the cache's creation.
#[derive(Debug, Clone, Copy)]
struct RegionTtl {
    base: tokio::time::Instant,
    ttl: u32,
    jitter: u32,
}

impl RegionTtl {
    fn new(ttl: Duration) -> Self {
        let tenths = u32::try_from(ttl.as_millis() / 100)
            .unwrap_or(u32::MAX)
            .max(1);
        RegionTtl {
            base: tokio::time::Instant::now(),
            ttl: tenths,
            jitter: tenths / 10,
        }
    }

    fn now(&self) -> u32 {
        u32::try_from(self.base.elapsed().as_millis() / 100).unwrap_or(u32::MAX)
    }

    /// A new deadline: the TTL from `now`, plus a jitter below a tenth of
    /// it.
    fn deadline(&self, now: u32) -> u32 {
        now.saturating_add(self.ttl)
            .saturating_add(fastrand::u32(0..self.jitter.max(1)))
    }

    /// True once `region`'s deadline has passed (its life is not touched).
    fn expired(&self, region: &CachedRegion) -> bool {
        self.now() > region.expiry.deadline()
    }

    /// True while `region` has not expired; a use extends its life.
    fn alive(&self, region: &CachedRegion) -> bool {
        let now = self.now();
        region
            .expiry
            .alive_at(now, self.ttl, region.expires_anyway, || self.deadline(now))
    }
}

impl Default for RegionMap {
    fn default() -> Self {
        RegionMap {
            by_start: BTreeSet::new(),
            by_id: HashSet::new(),
            inserted: VecDeque::new(),
            next_stamp: 0,
            capacity: DEFAULT_REGION_CACHE_CAPACITY,
            gauge: Default::default(),
            ttl: RegionTtl::new(DEFAULT_REGION_CACHE_TTL),
        }
    }
}

pub use crate::config::{DEFAULT_REGION_CACHE_CAPACITY, DEFAULT_REGION_CACHE_TTL};

impl RegionMap {
    fn get_by_key(&self, key: &[u8]) -> Option<&Arc<CachedRegion>> {
        let ByStart(region) = self
            .by_start
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        region.contains(key).then_some(region)
    }

    fn get_by_id(&self, id: RegionId) -> Option<&Arc<CachedRegion>> {
        self.by_id.get(&id).map(|ById(region)| region)
    }

    /// [`get_by_key`](Self::get_by_key) for a lookup that routes: an
    /// expired Region is a miss, and a hit extends its life.
    fn live_by_key(&self, key: &[u8]) -> Option<&Arc<CachedRegion>> {
        self.get_by_key(key).filter(|r| self.ttl.alive(r))
    }

    /// [`get_by_id`](Self::get_by_id) for a lookup that routes.
    fn live_by_id(&self, id: RegionId) -> Option<&Arc<CachedRegion>> {
        self.get_by_id(id).filter(|r| self.ttl.alive(r))
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Ids of the cached Regions that overlap `[start, end)`, and the one
    /// starting at `start` whatever its range.
    fn overlapping(&self, start: &[u8], end: &[u8]) -> Vec<RegionId> {
        let mut ids = Vec::new();
        // The Region starting at or before `start` overlaps if it reaches
        // past `start`; one starting at `start` is replaced in any case (the
        // start-key index holds one Region per key).
        if let Some(ByStart(r)) = self
            .by_start
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(start)))
            .next_back()
        {
            if r.start_key() == start || r.end_key().is_empty() || r.end_key() > start {
                ids.push(r.id());
            }
        }
        // Those starting inside. A malformed range (end at or before start)
        // covers nothing more, and would make `range` panic.
        if end.is_empty() || end > start {
            let upper = if end.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Excluded(end)
            };
            ids.extend(
                self.by_start
                    .range::<[u8], _>((Bound::Excluded(start), upper))
                    .map(|ByStart(r)| r.id()),
            );
        }
        ids
    }

    fn remove_id(&mut self, id: RegionId) -> Option<Arc<CachedRegion>> {
        let ById(removed) = self.by_id.take(&id)?;
        self.gauge.add(-1);
        self.by_start.remove(removed.start_key());
        Some(removed)
    }

    /// Puts `region` in both indexes, replacing the entries with its id and
    /// start key (the caller has checked they are the same Region).
    fn put(&mut self, region: Arc<CachedRegion>) {
        self.by_start.replace(ByStart(Arc::clone(&region)));
        if self.by_id.replace(ById(region)).is_none() {
            self.gauge.add(1);
        }
    }

    /// Inserts `region` unless the cache holds something newer; see
    /// [`RegionCache::insert`]. Returns what is now cached, or `None` when
    /// refused.
    fn insert(
        &mut self,
        mut region: CachedRegion,
        replace_equal: bool,
    ) -> Option<Arc<CachedRegion>> {
        let epoch = region.epoch();
        let id = region.id();
        let previous_leader = match self.get_by_id(id) {
            Some(cached) => {
                let cached_epoch = cached.epoch();
                if super::epoch_is_older(&epoch, &cached_epoch) {
                    tracing::debug!(
                        "region {id}: refused a stale epoch {epoch:?} (cached {cached_epoch:?})"
                    );
                    return None;
                }
                // An equal epoch keeps the cached entry (and its leader),
                // unless that entry has expired: then it is as good as
                // absent, and this one takes its place with a new life.
                if !replace_equal && epoch == cached_epoch && !self.ttl.expired(cached) {
                    return None;
                }
                cached.leader().copied()
            }
            None => None,
        };
        let overlapping = self.overlapping(region.start_key(), region.end_key());
        // Splits and merges raise `version`; a Region overlapping a cached
        // one with a higher version is the stale side.
        let newer_neighbour = overlapping.iter().any(|other| {
            *other != id
                && self
                    .get_by_id(*other)
                    .is_some_and(|r| r.epoch().version > epoch.version)
        });
        if newer_neighbour {
            tracing::debug!(
                "region {id}: refused epoch {epoch:?}, an overlapping cached Region is newer"
            );
            return None;
        }
        for other in overlapping {
            self.remove_id(other);
        }
        self.remove_id(id);
        // A split or membership change usually keeps the leader: carry it
        // over when the new version still has that peer and brings no leader
        // of its own (EpochNotMatch regions carry none).
        if region.leader().is_none() {
            if let Some(leader) = previous_leader.filter(|l| region.has_peer(l)) {
                region.set_leader(Some(leader));
            }
        }
        region.expiry.set(self.ttl.deadline(self.ttl.now()));
        region.stamp = self.next_stamp;
        self.next_stamp = self.next_stamp.wrapping_add(1);
        self.inserted.push_back(Inserted {
            id,
            stamp: region.stamp,
        });
        let region = Arc::new(region);
        self.put(Arc::clone(&region));
        self.evict_beyond_capacity();
        Some(region)
    }

    /// True while `entry` is the insertion of the Region cached under its id.
    fn is_current(&self, entry: Inserted) -> bool {
        let Inserted { id, stamp } = entry;
        self.get_by_id(id).is_some_and(|r| r.stamp == stamp)
    }

    /// Drops the oldest inserted Regions while there are more than the
    /// capacity: a miss reloads them from PD.
    fn evict_beyond_capacity(&mut self) {
        while self.len() > self.capacity {
            let Some(oldest) = self.inserted.pop_front() else {
                break;
            };
            if self.is_current(oldest) {
                let id = oldest.id;
                tracing::debug!(
                    "region {id}: evicted from the cache (capacity {})",
                    self.capacity
                );
                self.remove_id(oldest.id);
            }
        }
        // Regions replaced or invalidated leave stale entries behind.
        if self.inserted.len() > 2 * self.len().max(64) {
            let mut inserted = std::mem::take(&mut self.inserted);
            inserted.retain(|entry| self.is_current(*entry));
            self.inserted = inserted;
        }
    }
}

/// Regions ordered by start key, with single-flight loads.
///
/// Each Region is stored once, as an `Arc<CachedRegion>`; lookups hand out
/// that `Arc` (a reference count, no copy). Memory per Region and lookup
/// speed are measured by `tests/region_cache_memory.rs` and
/// `benches/region_cache.rs`.
#[derive(Debug, Default)]
pub struct RegionCache {
    map: Arc<RwLock<RegionMap>>,
    key_loads: SingleFlight<Vec<u8>, Arc<CachedRegion>>,
    id_loads: SingleFlight<RegionId, Arc<CachedRegion>>,
}

impl RegionCache {
    #[cfg_attr(
        not(any(test, feature = "mock", feature = "unstable-internals")),
        allow(dead_code)
    )]
    /// An empty cache holding up to [`DEFAULT_REGION_CACHE_CAPACITY`]
    /// Regions.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache holding up to `capacity` Regions (at least one):
    /// beyond it, the Regions inserted longest ago are dropped.
    pub fn with_capacity(capacity: usize) -> Self {
        let cache = Self::default();
        write(&cache.map).capacity = capacity.max(1);
        cache
    }

    /// The cached Region containing `key` as a [`RegionWithLeader`], read
    /// under the lock without touching the shared handle's reference count
    /// (a count every task reading the Region would otherwise bump).
    pub fn region_with_leader_by_key(&self, key: &[u8]) -> Option<RegionWithLeader> {
        read(&self.map)
            .live_by_key(key)
            .map(|region| region.to_region_with_leader())
    }

    /// The cached Region containing `key`: a shared handle, no copy. A
    /// Region past its TTL is not returned.
    pub fn get_by_key(&self, key: &[u8]) -> Option<Arc<CachedRegion>> {
        read(&self.map).live_by_key(key).cloned()
    }

    /// The cached Region with this id: a shared handle, no copy. A Region
    /// past its TTL is not returned.
    pub fn get_by_id(&self, id: RegionId) -> Option<Arc<CachedRegion>> {
        read(&self.map).live_by_id(id).cloned()
    }

    /// Sets how long a cached Region lives without use (see
    /// [`Config::region_cache_ttl`](crate::Config::region_cache_ttl)).
    pub fn with_ttl(self, ttl: Duration) -> Self {
        write(&self.map).ttl = RegionTtl::new(ttl);
        self
    }

    /// How many Regions are cached.
    pub fn len(&self) -> usize {
        read(&self.map).len()
    }

    #[cfg_attr(not(any(test, feature = "unstable-internals")), allow(dead_code))]
    /// True when no Region is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg_attr(
        not(any(test, feature = "mock", feature = "unstable-internals")),
        allow(dead_code)
    )]
    /// Inserts a Region (as PD reported it), evicting every cached Region it
    /// overlaps. Refused, returning false, when the cached entry with the
    /// same id has a newer epoch, or an overlapping Region has a higher
    /// `version`: an older epoch never replaces a newer one. An equal epoch
    /// replaces the entry.
    pub fn insert(&self, region: RegionWithLeader) -> bool {
        let region = CachedRegion::from(region);
        write(&self.map).insert(region, true).is_some()
    }

    /// Like [`insert`](Self::insert), but an equal epoch keeps the cached
    /// entry (and its leader): only a strictly newer version is taken. For
    /// Regions learned from `EpochNotMatch`.
    pub fn insert_if_newer(&self, region: RegionWithLeader) -> bool {
        let region = CachedRegion::from(region);
        write(&self.map).insert(region, false).is_some()
    }

    /// Sets the leader of the cached Region `ver_id` to `leader`. Accepted
    /// (true) only when the cache holds exactly that version and `leader` is
    /// one of its peers; the cached peer record is stored. Handles already
    /// given out keep the leader they had.
    pub fn update_leader(&self, ver_id: RegionVerId, leader: &metapb::Peer) -> bool {
        let mut map = write(&self.map);
        let led = match map.get_by_id(ver_id.id) {
            Some(region) if region.ver_id() == ver_id => region.led_by(leader),
            _ => None,
        };
        match led {
            Some(led) => {
                map.put(Arc::new(led));
                true
            }
            None => false,
        }
    }

    /// Drops the cached Region if it is exactly version `ver_id` (a newer
    /// version stays). Returns true when something was dropped.
    pub fn invalidate(&self, ver_id: RegionVerId) -> bool {
        let mut map = write(&self.map);
        let matches = map
            .get_by_id(ver_id.id)
            .is_some_and(|r| r.ver_id() == ver_id);
        tracing::debug!(
            "region {}: invalidated in the cache (found: {matches})",
            ver_id.id
        );
        matches && map.remove_id(ver_id.id).is_some()
    }

    /// The Region containing `key`: from the cache, or from `load` (whose
    /// result is inserted). Concurrent misses on the same key share one
    /// `load`; a failed load is returned to all of them and not cached.
    pub async fn get_or_load_by_key<L, Fut, R>(
        &self,
        key: &[u8],
        load: L,
    ) -> Result<Arc<CachedRegion>>
    where
        L: FnOnce(Vec<u8>) -> Fut,
        Fut: Future<Output = Result<R>> + Send + 'static,
        R: Into<LoadedRegion>,
    {
        // A hit needs neither the single-flight lock nor a copy of the key.
        if let Some(region) = self.get_by_key(key) {
            crate::telemetry::region_cache_lookup(true);
            return Ok(region);
        }
        crate::telemetry::region_cache_lookup(false);
        // Another key's load in flight likely returns this key's Region too
        // (N requests for N keys of a Region just dropped): wait for it once
        // and look again, so they cost one PD lookup, not N. At most one
        // extra wait, so an unrelated load delays a miss by one lookup.
        if self.key_loads.wait_for_any().await {
            if let Some(region) = self.get_by_key(key) {
                return Ok(region);
            }
        }
        let map = Arc::clone(&self.map);
        self.key_loads
            .run(
                key.to_vec(),
                || self.get_by_key(key),
                || {
                    let owned_key = key.to_vec();
                    let loading = load(owned_key.clone());
                    async move {
                        let region = loading.await?.into();
                        accept_loaded(&map, region, |m| m.get_by_key(&owned_key).cloned())
                    }
                },
            )
            .await
    }

    /// The Region with id `id`: from the cache, or from `load` (whose result
    /// is inserted). Concurrent misses on the same id share one `load`; a
    /// failed load is returned to all of them and not cached.
    pub async fn get_or_load_by_id<L, Fut, R>(
        &self,
        id: RegionId,
        load: L,
    ) -> Result<Arc<CachedRegion>>
    where
        L: FnOnce(RegionId) -> Fut,
        Fut: Future<Output = Result<R>> + Send + 'static,
        R: Into<LoadedRegion>,
    {
        if let Some(region) = self.get_by_id(id) {
            crate::telemetry::region_cache_lookup(true);
            return Ok(region);
        }
        crate::telemetry::region_cache_lookup(false);
        let map = Arc::clone(&self.map);
        self.id_loads
            .run(
                id,
                || self.get_by_id(id),
                || {
                    let loading = load(id);
                    async move {
                        let region = loading.await?.into();
                        accept_loaded(&map, region, |m| m.get_by_id(id).cloned())
                    }
                },
            )
            .await
    }

    #[cfg_attr(not(any(test, feature = "unstable-internals")), allow(dead_code))]
    /// How many Region loads are in flight (by key and by id).
    pub fn loads_in_flight(&self) -> usize {
        self.key_loads.in_flight() + self.id_loads.in_flight()
    }
}

/// Inserts a Region PD returned. When the cache refuses it because it holds
/// something newer (PD answered from an older view), the newer cached entry
/// is the answer (`cached` looks it up), never the refused one; with none,
/// the lookup fails so the caller retries rather than route by a stale
/// Region.
fn accept_loaded(
    map: &RwLock<RegionMap>,
    loaded: LoadedRegion,
    cached: impl FnOnce(&RegionMap) -> Option<Arc<CachedRegion>>,
) -> Result<Arc<CachedRegion>> {
    let LoadedRegion {
        region,
        has_down_peers,
    } = loaded;
    let region_id = region.id();
    tracing::debug!(
        "region {region_id}: loaded from PD, epoch {:?}, down peers: {has_down_peers}",
        region.epoch()
    );
    let mut region = CachedRegion::from(region);
    region.expires_anyway = has_down_peers;
    let mut map = write(map);
    if let Some(inserted) = map.insert(region, true) {
        return Ok(inserted);
    }
    let newer = cached(&map).ok_or(crate::Error::from(Failure::StaleRegion { region_id }))?;
    // What PD knows is older than this entry: it stays the best route
    // there is, with a new life (were it expired, every lookup would ask
    // PD again for the same older answer).
    newer.expiry.set(map.ttl.deadline(map.ttl.now()));
    Ok(newer)
}

/// A Region as PD answered a lookup: the Region with its leader, and
/// whether PD reported any of its peers down (such a Region expires from
/// the cache after its TTL even while in use).
#[derive(Debug, Clone)]
pub struct LoadedRegion {
    /// The Region and PD's leader.
    pub region: RegionWithLeader,
    /// PD's `down_peers` was not empty.
    pub has_down_peers: bool,
}

impl From<RegionWithLeader> for LoadedRegion {
    fn from(region: RegionWithLeader) -> Self {
        LoadedRegion {
            region,
            has_down_peers: false,
        }
    }
}

/// Store metadata by store id, with single-flight loads.
#[derive(Debug, Default)]
pub struct StoreCache {
    stores: Arc<RwLock<HashMap<StoreId, metapb::Store>>>,
    loads: SingleFlight<StoreId, metapb::Store>,
}

impl StoreCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached store.
    pub fn get(&self, id: StoreId) -> Option<metapb::Store> {
        read(&self.stores).get(&id).cloned()
    }

    /// Runs `f` on the cached store, without copying it; `None` when it is
    /// not cached.
    pub(crate) fn with_cached<R>(
        &self,
        id: StoreId,
        f: impl FnOnce(&metapb::Store) -> R,
    ) -> Option<R> {
        read(&self.stores).get(&id).map(f)
    }

    /// Caches (or replaces) a store.
    pub fn insert(&self, store: metapb::Store) {
        write(&self.stores).insert(store.id, store);
    }

    /// Drops a store, returning what was cached.
    pub fn remove(&self, id: StoreId) -> Option<metapb::Store> {
        write(&self.stores).remove(&id)
    }

    /// How many stores are cached.
    pub fn len(&self) -> usize {
        read(&self.stores).len()
    }

    /// The store `id`: from the cache, or from `load` (whose result is
    /// cached). Concurrent misses share one `load`; a failure is not cached.
    pub async fn get_or_load<L, Fut>(&self, id: StoreId, load: L) -> Result<metapb::Store>
    where
        L: FnOnce(StoreId) -> Fut,
        Fut: Future<Output = Result<metapb::Store>> + Send + 'static,
    {
        if let Some(store) = self.get(id) {
            return Ok(store);
        }
        let stores = Arc::clone(&self.stores);
        self.loads
            .run(
                id,
                || self.get(id),
                || {
                    let loading = load(id);
                    async move {
                        let store = loading.await?;
                        write(&stores).insert(store.id, store.clone());
                        Ok(store)
                    }
                },
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::Error;

    fn peer(id: u64, store_id: u64) -> metapb::Peer {
        metapb::Peer {
            id,
            store_id,
            ..Default::default()
        }
    }

    /// Region `id` over `[start, end)` at epoch (conf_ver, version), with
    /// peers 10*id+1.. on stores 1..=3 and the first one as leader.
    fn region(id: u64, start: &[u8], end: &[u8], conf_ver: u64, version: u64) -> RegionWithLeader {
        let peers: Vec<_> = (1..=3).map(|s| peer(id * 10 + s, s)).collect();
        let leader = Some(peers[0]);
        RegionWithLeader::new(
            metapb::Region {
                id,
                start_key: start.to_vec(),
                end_key: end.to_vec(),
                region_epoch: Some(metapb::RegionEpoch { conf_ver, version }),
                peers,
                ..Default::default()
            },
            leader,
        )
    }

    fn ids(cache: &RegionCache, keys: &[&[u8]]) -> Vec<Option<u64>> {
        keys.iter()
            .map(|k| cache.get_by_key(k).map(|r| r.id()))
            .collect()
    }

    #[test]
    fn lookup_by_key_respects_ranges_and_gaps() {
        let cache = RegionCache::new();
        assert!(cache.insert(region(1, b"", b"c", 1, 1)));
        assert!(cache.insert(region(2, b"f", b"", 1, 1)));
        assert_eq!(
            ids(&cache, &[b"", b"b", b"c", b"e", b"f", b"zzz"]),
            vec![Some(1), Some(1), None, None, Some(2), Some(2)]
        );
        assert_eq!(cache.get_by_id(2).map(|r| r.id()), Some(2));
        assert!(cache.get_by_id(3).is_none());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn insert_evicts_every_overlapping_region() {
        let cache = RegionCache::new();
        cache.insert(region(1, b"", b"c", 1, 1));
        cache.insert(region(2, b"c", b"f", 1, 1));
        cache.insert(region(3, b"f", b"k", 1, 1));
        cache.insert(region(4, b"k", b"", 1, 1));
        // Region 5 covers [d, h): overlaps 2 (starts before d) and 3.
        assert!(cache.insert(region(5, b"d", b"h", 1, 2)));
        assert_eq!(
            ids(&cache, &[b"a", b"c", b"d", b"g", b"h", b"k"]),
            vec![Some(1), None, Some(5), Some(5), None, Some(4)]
        );
        assert!(cache.get_by_id(2).is_none());
        assert!(cache.get_by_id(3).is_none());
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn unbounded_region_evicts_everything_after_its_start() {
        let cache = RegionCache::new();
        cache.insert(region(1, b"a", b"c", 1, 1));
        cache.insert(region(2, b"c", b"f", 1, 1));
        assert!(cache.insert(region(3, b"b", b"", 1, 2)));
        assert_eq!(cache.len(), 1);
        assert_eq!(ids(&cache, &[b"a", b"z"]), vec![None, Some(3)]);
    }

    #[test]
    fn older_epoch_never_replaces_newer() {
        let cache = RegionCache::new();
        assert!(cache.insert(region(1, b"a", b"m", 2, 5)));
        // Same id, older version or older conf_ver: refused.
        assert!(!cache.insert(region(1, b"a", b"z", 2, 4)));
        assert!(!cache.insert(region(1, b"a", b"z", 1, 5)));
        assert_eq!(cache.get_by_id(1).unwrap().end_key(), b"m");
        // A neighbour overlapping with a lower version is stale too.
        assert!(!cache.insert(region(9, b"", b"c", 1, 4)));
        assert_eq!(ids(&cache, &[b"b"]), vec![Some(1)]);
        // Newer epoch replaces and re-keys.
        assert!(cache.insert(region(1, b"b", b"m", 2, 6)));
        assert_eq!(ids(&cache, &[b"a", b"b"]), vec![None, Some(1)]);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_malformed_range_from_pd_is_cached_without_panicking() {
        // An end key at or before the start key once made the
        // overlap search call `range` with inverted bounds, which panics.
        let cache = RegionCache::new();
        assert!(cache.insert(region(1, b"a", b"c", 1, 1)));
        assert!(cache.insert(region(2, b"m", b"c", 1, 1)));
        assert!(cache.insert(region(3, b"e", b"e", 1, 1)));
        // Same start key as the empty-range Region: it replaces it.
        assert!(cache.insert(region(4, b"e", b"g", 1, 1)));
        assert!(cache.get_by_id(3).is_none());
        assert_eq!(
            ids(&cache, &[b"b", b"f", b"n"]),
            vec![Some(1), Some(4), None]
        );
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn split_child_with_higher_version_evicts_the_parent() {
        let cache = RegionCache::new();
        cache.insert(region(1, b"", b"", 1, 1));
        assert!(cache.insert(region(2, b"m", b"", 1, 2)));
        assert!(cache.get_by_id(1).is_none());
        assert!(cache.insert(region(1, b"", b"m", 1, 2)));
        assert_eq!(ids(&cache, &[b"a", b"x"]), vec![Some(1), Some(2)]);
    }

    #[test]
    fn insert_if_newer_keeps_an_equal_epoch_and_carries_the_leader() {
        let cache = RegionCache::new();
        let mut r = region(1, b"a", b"m", 1, 1);
        r.leader = Some(peer(12, 2));
        cache.insert(r);
        let mut same = region(1, b"a", b"m", 1, 1);
        same.leader = None;
        assert!(!cache.insert_if_newer(same));
        assert_eq!(
            cache.get_by_id(1).unwrap().leader().copied(),
            Some(peer(12, 2))
        );
        // Newer without a leader: the old leader is still a peer, carried over.
        let mut newer = region(1, b"a", b"g", 1, 2);
        newer.leader = None;
        assert!(cache.insert_if_newer(newer));
        assert_eq!(
            cache.get_by_id(1).unwrap().leader().copied(),
            Some(peer(12, 2))
        );
        // Newer without that peer: no leader.
        let mut moved = region(1, b"a", b"g", 2, 2);
        moved.leader = None;
        moved.region.peers.retain(|p| p.id != 12);
        assert!(cache.insert_if_newer(moved));
        assert_eq!(cache.get_by_id(1).unwrap().leader().copied(), None);
    }

    #[test]
    fn update_leader_accepts_only_a_peer_of_the_cached_version() {
        let cache = RegionCache::new();
        let r = region(1, b"a", b"m", 1, 3);
        let ver = r.ver_id();
        cache.insert(r);
        // A peer of the Region, right version: accepted.
        assert!(cache.update_leader(ver, &peer(13, 3)));
        assert_eq!(
            cache.get_by_id(1).unwrap().leader().copied(),
            Some(peer(13, 3))
        );
        // Not a peer (unknown id, or right id on the wrong store): refused.
        assert!(!cache.update_leader(ver, &peer(99, 3)));
        assert!(!cache.update_leader(ver, &peer(12, 3)));
        // Another version of the Region: refused.
        let stale = RegionVerId { ver: 2, ..ver };
        assert!(!cache.update_leader(stale, &peer(12, 2)));
        // Not cached at all: refused.
        assert!(!cache.update_leader(RegionVerId { id: 7, ..ver }, &peer(12, 2)));
        assert_eq!(
            cache.get_by_id(1).unwrap().leader().copied(),
            Some(peer(13, 3))
        );
    }

    #[test]
    fn update_leader_stores_the_cached_peer_record() {
        let cache = RegionCache::new();
        let mut r = region(1, b"a", b"m", 1, 1);
        r.region.peers[1].role = metapb::PeerRole::IncomingVoter as i32;
        let ver = r.ver_id();
        cache.insert(r);
        assert!(cache.update_leader(ver, &peer(12, 2)));
        let leader = cache.get_by_id(1).unwrap().leader().copied().unwrap();
        assert_eq!(leader.role, metapb::PeerRole::IncomingVoter as i32);
    }

    #[test]
    fn invalidate_drops_only_the_named_version() {
        let cache = RegionCache::new();
        let r = region(1, b"a", b"m", 1, 3);
        let ver = r.ver_id();
        cache.insert(r);
        assert!(!cache.invalidate(RegionVerId { ver: 2, ..ver }));
        assert!(cache.get_by_key(b"b").is_some());
        assert!(cache.invalidate(ver));
        assert!(cache.get_by_key(b"b").is_none());
        assert!(cache.get_by_id(1).is_none());
        assert!(!cache.invalidate(ver));
        assert!(cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_on_one_id_share_one_load() {
        // The load sleeps on the paused clock, so every caller joins before
        // it can finish.
        let cache = Arc::new(RegionCache::new());
        let loads = Arc::new(AtomicUsize::new(0));
        let calls = (0..16).map(|_| {
            let loads = Arc::clone(&loads);
            let cache = Arc::clone(&cache);
            async move {
                cache
                    .get_or_load_by_id(4, move |id| async move {
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok(region(id, b"a", b"b", 1, 1))
                    })
                    .await
            }
        });
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(|r| r.as_ref().unwrap().id() == 4));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(cache.loads_in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_on_one_key_share_one_load_then_hit_the_cache() {
        let cache = Arc::new(RegionCache::new());
        let loads = Arc::new(AtomicUsize::new(0));
        let calls = (0..16).map(|_| {
            let loads = Arc::clone(&loads);
            let cache = Arc::clone(&cache);
            async move {
                cache
                    .get_or_load_by_key(b"k", move |key| async move {
                        assert_eq!(key, b"k");
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok(region(1, b"a", b"m", 1, 1))
                    })
                    .await
            }
        });
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(|r| r.as_ref().unwrap().id() == 1));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        // Now cached: no further load for any key of the Region.
        let r = cache
            .get_or_load_by_key(b"c", |_| async {
                Err::<RegionWithLeader, _>(Error::InternalError {
                    message: "no".into(),
                })
            })
            .await
            .unwrap();
        assert_eq!(r.id(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_load_is_shared_but_not_cached() {
        let cache = RegionCache::new();
        let loads = AtomicUsize::new(0);
        let load = |loads: &AtomicUsize| {
            loads.fetch_add(1, Ordering::SeqCst);
            |id| async move {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Err::<RegionWithLeader, _>(crate::Error::from(Failure::RegionNotFoundInPd {
                    region_id: id,
                }))
            }
        };
        let (a, b) = futures::join!(
            cache.get_or_load_by_id(5, load(&loads)),
            cache.get_or_load_by_id(5, load(&loads)),
        );
        assert!(matches!(
            a.as_ref().err().and_then(|e| e.failure()),
            Some(Failure::RegionNotFoundInPd { region_id: 5 })
        ));
        assert!(matches!(
            b.as_ref().err().and_then(|e| e.failure()),
            Some(Failure::RegionNotFoundInPd { region_id: 5 })
        ));
        assert!(cache.is_empty());
        assert_eq!(cache.loads_in_flight(), 0);
        // The next miss loads again and can succeed.
        let r = cache
            .get_or_load_by_id(5, |id| async move { Ok(region(id, b"a", b"b", 1, 1)) })
            .await
            .unwrap();
        assert_eq!(r.id(), 5);
        assert!(cache.get_by_id(5).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_load_is_dropped_and_the_next_miss_loads_again() {
        let cache = RegionCache::new();
        let started = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let load = |started: Arc<AtomicUsize>, finished: Arc<AtomicUsize>| {
            move |id| async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(region(id, b"a", b"b", 1, 1))
            }
        };
        // Two callers give up before the load finishes.
        let give_up = std::time::Duration::from_millis(10);
        let (a, b) = futures::join!(
            tokio::time::timeout(
                give_up,
                cache.get_or_load_by_id(6, load(Arc::clone(&started), Arc::clone(&finished)))
            ),
            tokio::time::timeout(
                give_up,
                cache.get_or_load_by_id(6, load(Arc::clone(&started), Arc::clone(&finished)))
            ),
        );
        assert!(a.is_err() && b.is_err());
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert_eq!(cache.loads_in_flight(), 0);
        // The abandoned load never completes in the background.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        assert!(cache.is_empty());
        // The next miss starts afresh.
        let r = cache
            .get_or_load_by_id(6, load(Arc::clone(&started), Arc::clone(&finished)))
            .await
            .unwrap();
        assert_eq!(r.id(), 6);
        assert_eq!(started.load(Ordering::SeqCst), 2);
        assert_eq!(finished.load(Ordering::SeqCst), 1);
    }

    /// A miss that waits for another key's load and then gives up, after
    /// that load's own caller gave up, drops the load: nothing stays in
    /// flight, unpolled, holding what it holds.
    #[tokio::test(start_paused = true)]
    async fn a_load_abandoned_by_its_caller_and_a_waiter_is_dropped() {
        let cache = RegionCache::new();
        let finished = Arc::new(AtomicUsize::new(0));
        let done = Arc::clone(&finished);
        let slow = move |_key: Vec<u8>| async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            done.fetch_add(1, Ordering::SeqCst);
            Ok(region(3, b"a", b"m", 1, 1))
        };
        let never = |_key: Vec<u8>| async move {
            Err::<RegionWithLeader, _>(Error::InternalError {
                message: "not reached".to_owned(),
            })
        };
        let (owner, waiter) = futures::join!(
            tokio::time::timeout(
                std::time::Duration::from_millis(10),
                cache.get_or_load_by_key(b"b", slow)
            ),
            async {
                // Starts once the first load is in flight, so it waits for it.
                tokio::task::yield_now().await;
                tokio::time::timeout(
                    std::time::Duration::from_millis(20),
                    cache.get_or_load_by_key(b"x", never),
                )
                .await
            },
        );
        assert!(owner.is_err() && waiter.is_err());
        assert_eq!(cache.loads_in_flight(), 0);
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(finished.load(Ordering::SeqCst), 0, "the load ran on");
    }

    #[tokio::test(start_paused = true)]
    async fn one_caller_giving_up_does_not_cancel_the_others() {
        let cache = RegionCache::new();
        let loads = Arc::new(AtomicUsize::new(0));
        let load = |loads: Arc<AtomicUsize>| {
            move |id| async move {
                loads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                Ok(region(id, b"a", b"b", 1, 1))
            }
        };
        let (quitter, stayer) = futures::join!(
            tokio::time::timeout(
                std::time::Duration::from_millis(10),
                cache.get_or_load_by_id(8, load(Arc::clone(&loads)))
            ),
            cache.get_or_load_by_id(8, load(Arc::clone(&loads))),
        );
        assert!(quitter.is_err());
        assert_eq!(stayer.unwrap().id(), 8);
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(cache.loads_in_flight(), 0);
        assert!(cache.get_by_id(8).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn different_keys_load_independently() {
        let cache = RegionCache::new();
        let loads = Arc::new(AtomicUsize::new(0));
        let l1 = Arc::clone(&loads);
        let l2 = Arc::clone(&loads);
        let (a, b) = futures::join!(
            cache.get_or_load_by_key(b"a", move |_| async move {
                l1.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Ok(region(1, b"a", b"b", 1, 1))
            }),
            cache.get_or_load_by_key(b"x", move |_| async move {
                l2.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Ok(region(2, b"x", b"y", 1, 1))
            }),
        );
        assert_eq!(a.unwrap().id(), 1);
        assert_eq!(b.unwrap().id(), 2);
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity_dropping_the_oldest() {
        // A map that only grows is bounded.
        let cache = RegionCache::with_capacity(100);
        for i in 0..1_000u32 {
            let start = i.to_be_bytes();
            let end = (i + 1).to_be_bytes();
            assert!(cache.insert(region(u64::from(i) + 1, &start, &end, 1, 1)));
            assert!(cache.len() <= 100);
        }
        assert_eq!(cache.len(), 100);
        assert!(cache.get_by_id(1).is_none(), "the oldest went first");
        assert!(cache.get_by_id(1_000).is_some());
        // Replacing versions leaves no unbounded trail of markers.
        for v in 2..5_000 {
            cache.insert(region(
                1_000,
                &999u32.to_be_bytes(),
                &1_000u32.to_be_bytes(),
                1,
                v,
            ));
        }
        assert!(read(&cache.map).inserted.len() <= 2 * 100);
        assert_eq!(
            cache.get_by_id(1_000).map(|r| r.epoch().version),
            Some(4_999)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_region_dropped_then_missed_by_many_keys_costs_one_load() {
        // N concurrent requests for N different keys of a Region
        // just invalidated cause O(1) PD lookups, not N.
        let cache = RegionCache::new();
        let hot = region(1, b"a", b"z", 1, 1);
        cache.insert(hot.clone());
        assert!(cache.invalidate(hot.ver_id()));
        let loads = Arc::new(AtomicUsize::new(0));
        let keys: Vec<Vec<u8>> = (0..64u8).map(|i| vec![b'b', i]).collect();
        let lookups = keys.iter().map(|key| {
            let loads = Arc::clone(&loads);
            cache.get_or_load_by_key(key, move |_| async move {
                loads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Ok(region(1, b"a", b"z", 1, 2))
            })
        });
        for found in futures::future::join_all(lookups).await {
            assert_eq!(found.unwrap().id(), 1);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1, "one PD lookup for 64 keys");
    }

    #[tokio::test(start_paused = true)]
    async fn a_load_the_cache_refuses_as_older_is_not_handed_out() {
        // PD answered from an older view than the cache holds.
        let cache = RegionCache::new();
        let newer = region(1, b"a", b"m", 1, 5);
        cache.insert(newer.clone());
        let by_id = cache.get_or_load_by_id(1, |_| async { Ok(region(1, b"a", b"m", 1, 4)) });
        // The cache already has region 1: a hit, no load at all.
        assert_eq!(by_id.await.unwrap().epoch().version, 5);
        // A key just outside the newer Region: PD returns the old, wider
        // version, which the cache refuses; the caller gets an error to
        // retry, not the stale Region.
        let stale = cache.get_or_load_by_key(b"n", |_| async { Ok(region(1, b"a", b"z", 1, 4)) });
        let stale = stale.await;
        match stale.as_ref().err().and_then(|e| e.failure()) {
            Some(Failure::StaleRegion { region_id: 1 }) => {}
            _ => panic!("{stale:?}"),
        }
        // A stale answer overlapping a newer neighbour: the neighbour that
        // holds the key is the answer.
        let right = region(2, b"m", b"z", 1, 5);
        cache.insert(right);
        let stale = cache.get_or_load_by_key(b"y", |_| async { Ok(region(3, b"a", b"z", 1, 1)) });
        assert_eq!(stale.await.unwrap().id(), 2, "served from the cache, a hit");
        cache.invalidate(RegionVerId {
            id: 2,
            conf_ver: 1,
            ver: 5,
        });
        let stale = cache.get_or_load_by_key(b"y", |_| async { Ok(region(3, b"a", b"z", 1, 1)) });
        assert!(matches!(
            stale.await.as_ref().err().and_then(|e| e.failure()),
            Some(Failure::StaleRegion { region_id: 3 })
        ));
        assert_eq!(cache.get_by_key(b"c").map(|r| r.id()), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn store_cache_single_flight_and_removal() {
        let stores = StoreCache::new();
        let loads = Arc::new(AtomicUsize::new(0));
        let load = |loads: Arc<AtomicUsize>| {
            move |id| async move {
                loads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Ok(metapb::Store {
                    id,
                    address: format!("127.0.0.1:{}", 20160 + id),
                    ..Default::default()
                })
            }
        };
        let (a, b, c) = futures::join!(
            stores.get_or_load(3, load(Arc::clone(&loads))),
            stores.get_or_load(3, load(Arc::clone(&loads))),
            stores.get_or_load(3, load(Arc::clone(&loads))),
        );
        assert_eq!(a.unwrap().address, "127.0.0.1:20163");
        assert_eq!(b.unwrap().id, 3);
        assert_eq!(c.unwrap().id, 3);
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(stores.len(), 1);
        assert_eq!(stores.remove(3).map(|s| s.id), Some(3));
        assert!(stores.get(3).is_none());
        stores
            .get_or_load(3, load(Arc::clone(&loads)))
            .await
            .unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }

    /// Steps the paused clock by `secs` seconds.
    async fn pass(secs: f64) {
        tokio::time::advance(Duration::from_secs_f64(secs)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_region_expires_after_its_ttl_and_a_used_one_lives_on() {
        // TTL 10 s: each Region lives 10 to 11 s past its last use.
        let cache = RegionCache::new().with_ttl(Duration::from_secs(10));
        cache.insert(region(1, b"a", b"m", 1, 1));
        cache.insert(region(2, b"m", b"", 1, 1));
        pass(9.9).await;
        assert_eq!(ids(&cache, &[b"b", b"x"]), vec![Some(1), Some(2)]);
        // Region 1 is used every 4 s; region 2 was last used at 9.9 s.
        for _ in 0..5 {
            pass(4.0).await;
            assert_eq!(ids(&cache, &[b"b"]), vec![Some(1)]);
        }
        assert_eq!(ids(&cache, &[b"x"]), vec![None]);
        assert!(cache.get_by_id(2).is_none());
        // Expired is a miss: the load brings it back, with a new life.
        let loaded = cache
            .get_or_load_by_key(b"x", |_| async { Ok(region(2, b"m", b"", 1, 1)) })
            .await
            .unwrap();
        assert_eq!(loaded.id(), 2);
        pass(9.9).await;
        assert_eq!(ids(&cache, &[b"x"]), vec![Some(2)]);
        // Not used for longer than TTL plus jitter: gone, by key and by id.
        pass(11.1).await;
        assert_eq!(ids(&cache, &[b"b", b"x"]), vec![None, None]);
        assert!(cache.get_by_id(1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_region_with_a_down_peer_expires_after_its_ttl_even_in_use() {
        let cache = RegionCache::new().with_ttl(Duration::from_secs(10));
        let down = LoadedRegion {
            region: region(1, b"a", b"m", 1, 1),
            has_down_peers: true,
        };
        cache
            .get_or_load_by_key(b"b", move |_| async move { Ok(down) })
            .await
            .unwrap();
        cache
            .get_or_load_by_key(b"x", |_| async { Ok(region(2, b"m", b"", 1, 1)) })
            .await
            .unwrap();
        for _ in 0..3 {
            pass(3.0).await;
            assert_eq!(ids(&cache, &[b"b", b"x"]), vec![Some(1), Some(2)]);
        }
        pass(2.1).await;
        assert_eq!(ids(&cache, &[b"b", b"x"]), vec![None, Some(2)]);
        // Reloaded without down peers, it lives on by use again.
        cache.insert(region(1, b"a", b"m", 1, 1));
        for _ in 0..5 {
            pass(4.0).await;
            assert_eq!(ids(&cache, &[b"b"]), vec![Some(1)]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_update_keeps_the_regions_life() {
        let cache = RegionCache::new().with_ttl(Duration::from_secs(10));
        cache.insert(region(1, b"a", b"", 1, 1));
        let stored = |cache: &RegionCache| read(&cache.map).get_by_id(1).cloned().unwrap();
        let before = stored(&cache).expiry.deadline();
        // Later, so a new life would be a later deadline.
        pass(5.0).await;
        assert!(cache.update_leader(stored(&cache).ver_id(), &peer(12, 2)));
        let after = stored(&cache);
        assert_eq!(after.leader().unwrap().store_id, 2);
        assert_eq!(after.expiry.deadline(), before);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_region_is_replaced_by_an_equal_epoch() {
        let cache = RegionCache::new().with_ttl(Duration::from_secs(10));
        cache.insert(region(1, b"a", b"", 1, 1));
        // Live: an equal epoch from a scan or EpochNotMatch keeps it.
        assert!(!cache.insert_if_newer(region(1, b"a", b"", 1, 1)));
        pass(11.0).await;
        assert!(cache.get_by_id(1).is_none());
        // Expired: the equal epoch takes its place, with a new life.
        assert!(cache.insert_if_newer(region(1, b"a", b"", 1, 1)));
        assert_eq!(ids(&cache, &[b"b"]), vec![Some(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_answer_from_pd_renews_the_newer_expired_entry() {
        let cache = RegionCache::new().with_ttl(Duration::from_secs(10));
        cache.insert(region(1, b"a", b"", 1, 2));
        pass(11.0).await;
        assert!(cache.get_by_id(1).is_none());
        // PD still answers with the version before: refused, and the
        // cached, newer one is handed out with a new life.
        let got = cache
            .get_or_load_by_key(b"b", |_| async { Ok(region(1, b"a", b"", 1, 1)) })
            .await
            .unwrap();
        assert_eq!(got.epoch().version, 2);
        pass(9.0).await;
        assert_eq!(ids(&cache, &[b"b"]), vec![Some(1)]);
    }
}
