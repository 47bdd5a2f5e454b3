//! The cluster's truth: stores and their faults, Regions with their true
//! leader and PD's view of it, the data, PD members and the TSO. Everything
//! sits behind one mutex, so every operation is linearizable. The checks a
//! store runs on a request live here as plain synchronous code.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::counters::{Outcome, StoreCounters};
use super::data::RegionData;
use super::mvcc::Mvcc;
use crate::proto::metapb;
use crate::proto::{errorpb, keyspacepb, kvrpcpb};
use crate::{Error, Result};
use tikv_plan_proto::meta::{can_become_leader, key_in_region, StoreEngine};

/// The clock the TSO's physical part follows: the time since the UNIX
/// epoch. The system clock unless a simulation gives its own
/// ([`SimClusterBuilder::tso_clock`](crate::SimClusterBuilder::tso_clock)).
#[derive(Clone, Default)]
pub(crate) struct TsoClock(Option<Arc<dyn Fn() -> Duration + Send + Sync>>);

impl TsoClock {
    pub(crate) fn new(clock: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        TsoClock(Some(Arc::new(clock)))
    }

    /// The given clock's time since the UNIX epoch; `None` for the system
    /// clock.
    pub(crate) fn given_since_epoch(&self) -> Option<Duration> {
        self.0.as_ref().map(|clock| clock())
    }

    /// The time since the UNIX epoch, on this clock.
    fn since_epoch(&self) -> Duration {
        match &self.0 {
            Some(clock) => clock(),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }
}

impl fmt::Debug for TsoClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "TsoClock(given)"
        } else {
            "TsoClock(system)"
        })
    }
}

/// How a store hangs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangMode {
    /// The network freezes, like a host that drops packets: new TCP
    /// connects hang (the accept loop pauses and the small listen backlog is
    /// kept full, so the kernel drops SYNs) and open connections stop moving
    /// bytes. A client sees its connect timeout, or its request timeout on
    /// a connection it already had.
    Connect,
    /// Connections work and requests are received, but no request is ever
    /// answered until the hang is lifted (then they are served normally).
    Respond,
}

/// How a cold Region's voter behaves when a leader request wakes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColdMode {
    /// The voter campaigns, becomes leader at once and serves the request.
    #[default]
    AcceptAtOnce,
    /// The voter answers `NotLeader` without a hint, becomes leader, and
    /// serves the next request.
    NotLeaderFirst,
}

/// A store and its faults.
#[derive(Debug, Clone)]
pub(crate) struct SimStore {
    pub(crate) address: String,
    pub(crate) up: bool,
    pub(crate) hang: Option<HangMode>,
    pub(crate) slow: Duration,
    pub(crate) busy: Option<u32>,
    /// Methods whose next served response is dropped.
    pub(crate) drop_next: Vec<String>,
    /// How clients are cut off from the store, if they are.
    pub(crate) client_cut: Option<crate::net::ClientCut>,
    /// How late the store's non-leader peers apply, if they lag
    /// (`replica.rs`).
    pub(crate) lag: Option<Duration>,
    /// The store's labels, as PD reports them (`zone`, ...), besides its
    /// engine's.
    pub(crate) labels: Vec<(String, String)>,
    /// TiKV, or TiFlash (`cluster/tiflash.rs`): PD reports it as the
    /// `engine` label, which no one sets by hand.
    pub(crate) engine: StoreEngine,
    pub(crate) counters: StoreCounters,
    /// Its slow score and health feedback (`store/health.rs`).
    pub(crate) health: crate::store::StoreHealth,
}

/// Why a Region has no leader.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cold {
    pub(crate) mode: ColdMode,
    /// The peer that led before the leader was lost; it answers NotLeader
    /// without a hint.
    pub(crate) old_leader: Option<u64>,
}

/// A Region: metadata, true leader, PD's view, data.
#[derive(Debug, Clone)]
pub(crate) struct SimRegion {
    pub(crate) meta: metapb::Region,
    /// Peer id of the true Raft leader; None while cold.
    pub(crate) leader: Option<u64>,
    /// Peer id PD reports as leader.
    pub(crate) pd_leader: Option<u64>,
    pub(crate) cold: Option<Cold>,
    /// Its followers campaign in an election run by hand
    /// (`cluster/election.rs`): the peers that do not lead name no leader,
    /// and no request makes one win.
    pub(crate) campaigning: bool,
    /// Regions split off this one, so a stale epoch learns about them.
    pub(crate) derived: Vec<u64>,
    pub(crate) data: RegionData,
    /// The transactional data (lock, write and data families), apart from
    /// the raw data as in TiKV.
    pub(crate) mvcc: Mvcc,
    /// How many commands that are not reads were applied (TiKV's applied
    /// index, counted in writes): how far a lagging replica is behind.
    pub(crate) applied_index: u64,
    /// The Region's resolved ts (`replica.rs`): no transaction commits at
    /// or below it that is not already in the data.
    pub(crate) resolved_ts: u64,
}

impl SimRegion {
    pub(crate) fn peer(&self, peer_id: u64) -> Option<metapb::Peer> {
        self.meta.peers.iter().find(|p| p.id == peer_id).copied()
    }

    pub(crate) fn peer_on_store(&self, store_id: u64) -> Option<metapb::Peer> {
        self.meta
            .peers
            .iter()
            .find(|p| p.store_id == store_id)
            .copied()
    }

    /// Whether its leader (as the cluster knows it) is the peer on
    /// `store_id`.
    pub(crate) fn led_from(&self, store_id: u64) -> bool {
        self.leader
            .and_then(|id| self.peer(id))
            .is_some_and(|p| p.store_id == store_id)
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        key_in_region(&self.meta, key)
    }

    pub(crate) fn version(&self) -> u64 {
        self.meta.region_epoch.map(|e| e.version).unwrap_or(0)
    }
}

/// One PD member.
#[derive(Debug, Clone)]
pub(crate) struct PdMember {
    pub(crate) name: String,
    pub(crate) member_id: u64,
    pub(crate) address: String,
    pub(crate) up: bool,
    /// Receives requests and answers none until lifted.
    pub(crate) hung: bool,
}

/// The whole simulated cluster's state.
#[derive(Debug)]
pub(crate) struct ClusterState {
    pub(crate) cluster_id: u64,
    next_id: u64,
    pub(crate) stores: BTreeMap<u64, SimStore>,
    pub(crate) regions: BTreeMap<u64, SimRegion>,
    pub(crate) pd_members: Vec<PdMember>,
    pub(crate) pd_leader: usize,
    tso_physical: i64,
    tso_logical: i64,
    /// What the TSO's physical part follows.
    pub(crate) clock: TsoClock,
    /// Added to the clock for the TSO's physical part: tests move time
    /// forward (lock TTLs) without waiting.
    clock_offset_ms: i64,
    /// PD's GC safe point; never moves backwards.
    pub(crate) gc_safe_point: u64,
    pub(crate) shutdown: bool,
    /// Stores cut off from PD: their heartbeats do not reach it.
    pub(crate) cut_off_from_pd: std::collections::BTreeSet<u64>,
    /// The API version every store runs (TiKV's `storage.api-version`).
    pub(crate) api_version: kvrpcpb::ApiVersion,
    /// The keyspaces PD knows, `DEFAULT` (id 0) first.
    pub(crate) keyspaces: Vec<keyspacepb::KeyspaceMeta>,
    /// Pessimistic lock requests waiting for locks, and the wait-for graph.
    pub(crate) lock_waits: crate::lock_wait::LockWaits,
    /// What each lagging peer has applied, by (Region, store).
    pub(crate) applied: BTreeMap<(u64, u64), crate::replica::Applied>,
    /// Replica reads skip read index (a switch for checking checkers).
    pub(crate) naive_replica_reads: bool,
    /// TiKV's `resolved-ts.advance-ts-interval`.
    pub(crate) resolved_ts_interval: Duration,
    /// TiKV's `raftstore.raft-entry-max-size`: a larger write is refused
    /// (`limits.rs`).
    pub(crate) raft_entry_max_size: u64,
    /// The calls PD's members have received, by gRPC method (a `Tso`
    /// stream counts each request on it).
    pub(crate) pd_calls: BTreeMap<&'static str, u64>,
    /// Elections, and the windows around leader changes and merges
    /// (`raft.rs`).
    pub(crate) raft: crate::raft::RaftState,
    /// Region loads PD is answering (`pd/loads.rs`).
    pub(crate) pd_region_loads: crate::pd::RegionLoads,
}

/// The number of bits of the logical part of a timestamp.
pub(crate) const TSO_LOGICAL_BITS: u32 = 18;

/// One more than the most timestamps one TSO request may ask for.
pub(crate) const MAX_TSO_COUNT: u32 = 1 << TSO_LOGICAL_BITS;

/// A Region error and the outcome to count for it.
pub(crate) type Rejection = (Box<errorpb::Error>, Outcome);

fn region_error(message: String) -> errorpb::Error {
    errorpb::Error {
        message,
        ..Default::default()
    }
}

impl ClusterState {
    pub(crate) fn new(cluster_id: u64, first_id: u64) -> Self {
        ClusterState {
            cluster_id,
            next_id: first_id,
            stores: BTreeMap::new(),
            regions: BTreeMap::new(),
            pd_members: Vec::new(),
            pd_leader: 0,
            tso_physical: 0,
            tso_logical: 0,
            clock: TsoClock::default(),
            clock_offset_ms: 0,
            gc_safe_point: 0,
            shutdown: false,
            cut_off_from_pd: Default::default(),
            api_version: kvrpcpb::ApiVersion::V1,
            keyspaces: vec![keyspacepb::KeyspaceMeta {
                id: 0,
                name: crate::keyspace::DEFAULT_KEYSPACE_NAME.to_owned(),
                state: keyspacepb::KeyspaceState::Enabled as i32,
                ..Default::default()
            }],
            lock_waits: Default::default(),
            applied: BTreeMap::new(),
            naive_replica_reads: false,
            resolved_ts_interval: crate::replica::DEFAULT_RESOLVED_TS_INTERVAL,
            raft_entry_max_size: crate::limits::DEFAULT_RAFT_ENTRY_MAX_SIZE,
            pd_calls: BTreeMap::new(),
            raft: crate::raft::RaftState::new(cluster_id),
            pd_region_loads: Default::default(),
        }
    }

    /// The next id from the one allocator Regions and peers share.
    pub(crate) fn alloc_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(crate) fn store_mut(&mut self, store_id: u64) -> Result<&mut SimStore> {
        self.stores
            .get_mut(&store_id)
            .ok_or(Error::StoreNotFound { store_id })
    }

    pub(crate) fn region_mut(&mut self, region_id: u64) -> Result<&mut SimRegion> {
        self.regions
            .get_mut(&region_id)
            .ok_or(Error::RegionNotFound { region_id })
    }

    /// Regions in key order.
    pub(crate) fn regions_in_key_order(&self) -> Vec<&SimRegion> {
        let mut regions: Vec<&SimRegion> = self.regions.values().collect();
        regions.sort_by(|a, b| a.meta.start_key.cmp(&b.meta.start_key));
        regions
    }

    pub(crate) fn region_for_key(&self, key: &[u8]) -> Option<&SimRegion> {
        self.regions.values().find(|r| r.contains(key))
    }

    /// A Region and every Region split off it since, in key order: what a
    /// request with a stale epoch learns in `EpochNotMatch`.
    fn lineage(&self, region_id: u64) -> Vec<metapb::Region> {
        let mut ids = vec![region_id];
        let mut next = 0;
        while let Some(id) = ids.get(next).copied() {
            next += 1;
            if let Some(r) = self.regions.get(&id) {
                ids.extend(r.derived.iter().copied());
            }
        }
        let mut regions: Vec<metapb::Region> = ids
            .iter()
            .filter_map(|id| self.regions.get(id))
            .map(|r| r.meta.clone())
            .collect();
        regions.sort_by(|a, b| a.start_key.cmp(&b.start_key));
        regions
    }

    /// Runs a store's checks on a request, in this order: busy,
    /// Region on this store, store and peer match, epoch, key range, leader.
    /// On success returns the Region id to apply the request to. A leader
    /// request reaching a voter of a cold Region makes it campaign.
    pub(crate) fn admit(
        &mut self,
        store_id: u64,
        ctx: Option<&kvrpcpb::Context>,
        key_outside: &dyn Fn(&metapb::Region) -> Option<Vec<u8>>,
    ) -> Result<u64, Rejection> {
        let (region_id, local) = self.admit_peer(store_id, ctx, key_outside)?;
        let Some(region) = self.regions.get(&region_id) else {
            let mut e = region_error(format!("region {region_id} not found on store {store_id}"));
            e.region_not_found = Some(errorpb::RegionNotFound { region_id });
            return Err((Box::new(e), Outcome::RegionNotFound));
        };

        // 6. Leadership.
        if local.is_witness {
            let mut e = region_error(format!(
                "peer {} of region {region_id} is a witness",
                local.id
            ));
            e.is_witness = Some(errorpb::IsWitness { region_id });
            return Err((Box::new(e), Outcome::IsWitness));
        }
        let not_leader = |leader: Option<metapb::Peer>| {
            let mut e = region_error(format!(
                "peer {} is not leader of region {region_id}",
                local.id
            ));
            e.not_leader = Some(errorpb::NotLeader { region_id, leader });
            (Box::new(e), Outcome::NotLeader)
        };
        // In an election no follower knows a leader to name.
        let known_leader = region
            .leader
            .filter(|_| !region.campaigning)
            .and_then(|id| region.peer(id));
        if !can_become_leader(&local) {
            return Err(not_leader(known_leader));
        }
        if self.raft.electing(region_id) {
            // The leader died and no one is elected yet: followers still
            // name it; the old leader, back from a restart, knows no one.
            let hint = known_leader.filter(|p| p.id != local.id);
            return Err(not_leader(hint));
        }
        match region.leader {
            Some(leader) if leader == local.id => Ok(region_id),
            Some(_) => Err(not_leader(known_leader)),
            None if region.campaigning => Err(not_leader(None)),
            None => {
                let cold = region.cold.unwrap_or(Cold {
                    mode: ColdMode::AcceptAtOnce,
                    old_leader: None,
                });
                if cold.old_leader == Some(local.id) {
                    return Err(not_leader(None));
                }
                // A leader request wakes the voter: it campaigns and wins.
                if let Some(region) = self.regions.get_mut(&region_id) {
                    region.leader = Some(local.id);
                    region.cold = None;
                }
                let now = self.raft_now();
                self.raft.on_new_leader(region_id, now);
                match cold.mode {
                    ColdMode::AcceptAtOnce => Ok(region_id),
                    ColdMode::NotLeaderFirst => Err(not_leader(None)),
                }
            }
        }
    }

    /// Steps 1 to 5 of [`admit`](Self::admit): busy, the Region on this
    /// store, store and peer match, epoch, key range. Returns the Region
    /// id and this store's peer of it.
    pub(crate) fn admit_peer(
        &mut self,
        store_id: u64,
        ctx: Option<&kvrpcpb::Context>,
        key_outside: &dyn Fn(&metapb::Region) -> Option<Vec<u8>>,
    ) -> Result<(u64, metapb::Peer), Rejection> {
        let default_ctx = kvrpcpb::Context::default();
        let ctx = ctx.unwrap_or(&default_ctx);
        let region_id = ctx.region_id;

        // 1. Read-pool admission.
        if let Some(wait) = self.stores.get(&store_id).and_then(|s| s.busy) {
            let mut e = region_error(format!("store {store_id} is busy (simulated)"));
            e.server_is_busy = Some(errorpb::ServerIsBusy {
                reason: "simulated busy store".to_owned(),
                backoff_ms: 0,
                estimated_wait_ms: wait,
                applied_index: 0,
            });
            return Err((Box::new(e), Outcome::ServerIsBusy));
        }

        // 2. The Region must have a peer on this store.
        let Some(local) = self
            .regions
            .get(&region_id)
            .and_then(|r| r.peer_on_store(store_id))
        else {
            let mut e = region_error(format!("region {region_id} not found on store {store_id}"));
            e.region_not_found = Some(errorpb::RegionNotFound { region_id });
            return Err((Box::new(e), Outcome::RegionNotFound));
        };

        // 3. The request must target this store and this store's peer.
        let requested = ctx.peer.unwrap_or_default();
        if requested.store_id != store_id {
            let mut e = region_error(format!(
                "request for store {} reached store {store_id}",
                requested.store_id
            ));
            e.store_not_match = Some(errorpb::StoreNotMatch {
                request_store_id: requested.store_id,
                actual_store_id: store_id,
            });
            return Err((Box::new(e), Outcome::StoreNotMatch));
        }
        if requested.id != local.id {
            let mut e = region_error(format!(
                "region {region_id} has peer {} on store {store_id}, not peer {}",
                local.id, requested.id
            ));
            e.mismatch_peer_id = Some(errorpb::MismatchPeerId {
                request_peer_id: requested.id,
                store_peer_id: local.id,
            });
            return Err((Box::new(e), Outcome::MismatchPeerId));
        }

        let Some(region) = self.regions.get(&region_id) else {
            let mut e = region_error(format!("region {region_id} not found on store {store_id}"));
            e.region_not_found = Some(errorpb::RegionNotFound { region_id });
            return Err((Box::new(e), Outcome::RegionNotFound));
        };

        // 4. Epoch: like TiKV for reads and writes, only the version (splits
        // and merges) is compared.
        let requested_version = ctx.region_epoch.map(|e| e.version).unwrap_or(0);
        if requested_version != region.version() {
            let mut e = region_error(format!(
                "epoch not match for region {region_id}: request version {requested_version}, current {}",
                region.version()
            ));
            e.epoch_not_match = Some(errorpb::EpochNotMatch {
                current_regions: self.lineage(region_id),
            });
            return Err((Box::new(e), Outcome::EpochNotMatch));
        }

        // 5. Every key of the request must lie in the Region.
        if let Some(key) = key_outside(&region.meta) {
            let mut e = region_error(format!("key is not in region {region_id}"));
            e.key_not_in_region = Some(errorpb::KeyNotInRegion {
                key,
                region_id,
                start_key: region.meta.start_key.clone(),
                end_key: region.meta.end_key.clone(),
            });
            return Err((Box::new(e), Outcome::KeyNotInRegion));
        }
        Ok((region_id, local))
    }

    /// Splits the Region containing `split_key` at it. The existing Region
    /// keeps the upper part `[split_key, end)` (TiKV's right-derive); a new
    /// Region with new peers on the same stores takes `[start, split_key)`.
    /// Both get the parent's version plus one.
    pub(crate) fn split(&mut self, split_key: &[u8]) -> Result<u64> {
        let parent_id = self
            .region_for_key(split_key)
            .map(|r| r.meta.id)
            .ok_or_else(|| Error::InvalidArgument(format!("no region holds key {split_key:?}")))?;
        let parent_start = self
            .regions
            .get(&parent_id)
            .map(|r| r.meta.start_key.clone())
            .unwrap_or_default();
        self.raft.refuse_in_merge(parent_id, "split")?;
        if parent_start.as_slice() == split_key {
            return Err(Error::InvalidArgument(format!(
                "key {split_key:?} is already the start of region {parent_id}; split at a key inside a region"
            )));
        }
        let new_id = self.alloc_id();
        let peer_count = self
            .regions
            .get(&parent_id)
            .map(|r| r.meta.peers.len())
            .unwrap_or(0);
        let new_peer_ids: Vec<u64> = (0..peer_count).map(|_| self.alloc_id()).collect();
        let parent = self.region_mut(parent_id)?;
        let mut epoch = parent.meta.region_epoch.unwrap_or_default();
        epoch.version += 1;
        parent.meta.region_epoch = Some(epoch);
        let mut child_meta = parent.meta.clone();
        child_meta.id = new_id;
        child_meta.start_key = parent_start;
        child_meta.end_key = split_key.to_vec();
        for (peer, id) in child_meta.peers.iter_mut().zip(&new_peer_ids) {
            peer.id = *id;
        }
        parent.meta.start_key = split_key.to_vec();
        parent.derived.push(new_id);
        let child_data = parent.data.split_off_below(split_key);
        let child_mvcc = parent.mvcc.split_off_below(split_key);
        // The child's peers play the same parts as the parent's peers on the
        // same stores.
        let same_store = |peer_id: Option<u64>| -> Option<u64> {
            let store = parent.peer(peer_id?)?.store_id;
            child_meta
                .peers
                .iter()
                .find(|p| p.store_id == store)
                .map(|p| p.id)
        };
        let child = SimRegion {
            leader: same_store(parent.leader),
            pd_leader: same_store(parent.pd_leader),
            cold: parent.cold.map(|c| Cold {
                mode: c.mode,
                old_leader: same_store(c.old_leader),
            }),
            campaigning: parent.campaigning,
            derived: Vec::new(),
            data: child_data,
            mvcc: child_mvcc,
            meta: child_meta,
            applied_index: parent.applied_index,
            resolved_ts: parent.resolved_ts,
        };
        self.regions.insert(new_id, child);
        self.raft.on_split(parent_id, new_id);
        Ok(new_id)
    }

    /// The TSO's physical clock now: the clock's milliseconds plus the
    /// offset tests advanced it by.
    pub(crate) fn clock_ms(&self) -> i64 {
        let now = i64::try_from(self.clock.since_epoch().as_millis()).unwrap_or(i64::MAX);
        now.saturating_add(self.clock_offset_ms)
    }

    /// Moves the TSO's physical clock forward by `ms` milliseconds.
    pub(crate) fn advance_clock(&mut self, ms: i64) {
        self.clock_offset_ms = self.clock_offset_ms.saturating_add(ms.max(0));
    }

    /// The next timestamp range of `count` timestamps; returns the last one
    /// (physical ms, logical), as PD does. The PD service refuses a `count`
    /// of 0 or of [`MAX_TSO_COUNT`] and more before calling this.
    pub(crate) fn next_timestamp(&mut self, count: u32) -> (i64, i64) {
        let now_ms = self.clock_ms();
        let count = i64::from(count.max(1));
        if now_ms > self.tso_physical {
            self.tso_physical = now_ms;
            self.tso_logical = 0;
        }
        if self.tso_logical + count >= 1 << TSO_LOGICAL_BITS {
            self.tso_physical += 1;
            self.tso_logical = 0;
        }
        self.tso_logical += count;
        (self.tso_physical, self.tso_logical)
    }
}
