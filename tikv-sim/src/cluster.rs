//! [`SimCluster`] and its builder.
//!
//! This file is long because it is the simulator's public API: the builder
//! and every fault and inspection method live on the one cluster type.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tonic::service::Routes;

use super::codec;
use super::counters::StoreCounters;
use super::mvcc::MvccVersion;
use super::net::{bind, Endpoint, PeerPorts};

mod clients;
mod election;
mod health;
mod layout;
mod raft;
mod replicas;
mod shape;
mod tags;
mod tiflash;
use super::limits::{PD_GRPC_MAX_RECV_MESSAGE_SIZE, PD_GRPC_MAX_SEND_MESSAGE_SIZE};
use super::pd::{PdHttp, PdService};
use super::state::{ClusterState, Cold, ColdMode, HangMode, PdMember, SimRegion, TsoClock};
use super::store::forward::DialHolder;
use super::store::{ForwardDial, StoreServer, StoreService};
pub use layout::{RegionLayout, SimPeer};
pub use raft::{Restart, RESTART_DRAIN};
use tonic::transport::Channel;

use super::keyspace::KeyspaceService;
use crate::proto::keyspacepb::{self, keyspace_server::KeyspaceServer};
use crate::proto::kvrpcpb;
use crate::proto::metapb;
use crate::proto::pdpb::pd_client::PdClient;
use crate::proto::pdpb::pd_server::PdServer;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::{Error, Result};
use tikv_plan_proto::meta::{can_become_leader, role_can_lead};

/// The cluster id every PD header carries unless the builder sets another.
pub const DEFAULT_CLUSTER_ID: u64 = 7_046_000_000_000_000_001;
/// The first Region/peer id (store ids are `1..=n`).
pub const FIRST_REGION_ID: u64 = 1000;
/// The member id of PD member 0; member `i` has `PD_MEMBER_ID_BASE + i`.
pub const PD_MEMBER_ID_BASE: u64 = 9001;
/// Every store method label the simulated stores serve (the labels of
/// `tikv_plan::store::Request`).
pub const RAW_METHODS: [&str; 11] = [
    "raw_get",
    "raw_batch_get",
    "raw_put",
    "raw_batch_put",
    "raw_delete",
    "raw_batch_delete",
    "raw_scan",
    "raw_batch_scan",
    "raw_delete_range",
    "raw_compare_and_swap",
    "raw_get_key_ttl",
];
/// Every transactional method label the simulated stores serve (the gRPC
/// method names of `tikvpb.Tikv` in snake case).
pub const TXN_METHODS: [&str; 17] = [
    "kv_get",
    "kv_batch_get",
    "kv_scan",
    "kv_prewrite",
    "kv_commit",
    "kv_batch_rollback",
    "kv_cleanup",
    "kv_check_txn_status",
    "kv_check_secondary_locks",
    "kv_resolve_lock",
    "kv_pessimistic_lock",
    "kv_pessimistic_rollback",
    "kv_txn_heart_beat",
    "kv_scan_lock",
    "kv_delete_range",
    "unsafe_destroy_range",
    "kv_gc",
];

/// A range end's encoding; empty stays empty (unbounded).
fn encoded_bound(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        Vec::new()
    } else {
        codec::encode_bytes(key)
    }
}

/// A timestamp from its physical (ms) and logical parts.
pub(crate) fn compose_ts(physical: i64, logical: i64) -> u64 {
    (physical.max(0) as u64) << 18 | (logical.max(0) as u64)
}

/// State shared by the cluster handle and every service.
pub(crate) struct Shared {
    state: Mutex<ClusterState>,
    /// Bumped on every fault change; hung requests wait on it.
    pub(crate) faults: watch::Sender<u64>,
    stores: Mutex<BTreeMap<u64, Endpoint>>,
    pd: Mutex<Vec<Endpoint>>,
    /// The ports of the stores' own connections to each other.
    pub(crate) peers: PeerPorts,
    /// How a hosted store dials another to forward a call.
    forward_dial: Option<ForwardDial>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the simulation in a state
    // worse than the panic itself; keep serving.
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Shared {
    /// The cluster's state, with whatever Raft had due by now settled
    /// (`raft.rs`).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ClusterState> {
        let mut state = lock(&self.state);
        state.tick();
        state
    }

    fn faults_changed(&self) {
        self.faults.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn reset_store_connections(&self, store_id: u64) {
        if let Some(e) = lock(&self.stores).get_mut(&store_id) {
            e.reset_connections();
        }
    }
}

/// Builds a [`SimCluster`]; see [`SimCluster::builder`].
#[derive(Debug, Clone)]
pub struct SimClusterBuilder {
    stores: u64,
    split_keys: Vec<Vec<u8>>,
    replicas: usize,
    layouts: BTreeMap<usize, RegionLayout>,
    pd_members: usize,
    pd_addr: Option<SocketAddr>,
    store_addrs: BTreeMap<u64, SocketAddr>,
    cluster_id: u64,
    api_version: kvrpcpb::ApiVersion,
    keyspaces: Vec<(String, u32)>,
    tso_clock: TsoClock,
    lock_wait: crate::LockWaitConfig,
    forward_dial: Option<DialHolder>,
    raft_entry_max_size: u64,
    tiflash_stores: u64,
    raft_timing: crate::RaftTiming,
}

impl Default for SimClusterBuilder {
    fn default() -> Self {
        SimClusterBuilder {
            stores: 3,
            split_keys: Vec::new(),
            replicas: 3,
            layouts: BTreeMap::new(),
            pd_members: 1,
            pd_addr: None,
            store_addrs: BTreeMap::new(),
            cluster_id: DEFAULT_CLUSTER_ID,
            api_version: kvrpcpb::ApiVersion::V1,
            keyspaces: Vec::new(),
            tso_clock: TsoClock::default(),
            lock_wait: crate::LockWaitConfig::default(),
            forward_dial: None,
            raft_entry_max_size: crate::DEFAULT_RAFT_ENTRY_MAX_SIZE,
            tiflash_stores: 0,
            raft_timing: crate::RaftTiming::tikv(),
        }
    }
}

/// The services of PD member `member`: PD and keyspaces over gRPC, with
/// PD's gRPC message limits, and every other request to PD's HTTP API
/// (`pd/http.rs`).
fn pd_routes(shared: &Arc<Shared>, member: usize) -> Routes {
    let service = PdService {
        shared: shared.clone(),
        member,
    };
    let keyspaces = KeyspaceService {
        shared: shared.clone(),
        member,
    };
    let pd = PdServer::new(service.clone())
        .max_decoding_message_size(PD_GRPC_MAX_RECV_MESSAGE_SIZE)
        .max_encoding_message_size(PD_GRPC_MAX_SEND_MESSAGE_SIZE);
    let keyspaces = KeyspaceServer::new(keyspaces)
        .max_decoding_message_size(PD_GRPC_MAX_RECV_MESSAGE_SIZE)
        .max_encoding_message_size(PD_GRPC_MAX_SEND_MESSAGE_SIZE);
    let grpc = Routes::new(pd).add_service(keyspaces).into_axum_router();
    Routes::from(grpc.fallback_service(PdHttp::new(service)))
}

/// The gRPC service of store `store_id`: TiKV's, or TiFlash's.
fn store_routes(shared: &Arc<Shared>, store_id: u64) -> Routes {
    let engine = shared.lock().stores.get(&store_id).map(|s| s.engine);
    if engine.is_some_and(|e| !e.is_tikv()) {
        return tiflash::tiflash_routes(shared, store_id);
    }
    Routes::new(StoreServer::new(
        StoreService {
            shared: shared.clone(),
            store_id,
        },
        shared.peers.clone(),
        shared.forward_dial.clone(),
    ))
}

/// Announces PD member `member` at `address`.
fn register_pd_member(shared: &Shared, member: usize, address: String) {
    shared.lock().pd_members.push(PdMember {
        name: format!("pd-{member}"),
        member_id: PD_MEMBER_ID_BASE + member as u64,
        address,
        up: true,
        hung: false,
    });
}

/// The servers of a cluster built with
/// [`SimClusterBuilder::build_hosted`], for the caller to serve: each
/// one's announced address and its gRPC routes (clone them to serve again
/// after a restart; the cluster's state lives on in [`SimCluster`]).
#[derive(Debug)]
pub struct HostedServers {
    /// Each PD member: its address and routes.
    pub pd: Vec<(String, Routes)>,
    /// Each store: its id, address and routes.
    pub stores: Vec<(u64, String, Routes)>,
}

fn loopback_any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

impl SimClusterBuilder {
    /// The number of TiKV stores; their ids are `1..=n`. Default 3.
    /// TiFlash stores, if any, follow ([`tiflash_stores`](Self::tiflash_stores)).
    pub fn stores(mut self, n: u64) -> Self {
        self.stores = n;
        self
    }

    /// The keys the key space is split at; `k` keys make `k + 1` Regions.
    /// Default: none (one Region).
    pub fn split_keys(mut self, keys: Vec<Vec<u8>>) -> Self {
        self.split_keys = keys;
        self
    }

    /// Voters per Region, placed round-robin: Region `i` (key order, from 0)
    /// has voters on stores `(i + j) % n + 1` for `j` in `0..replicas`, and
    /// the first leads. Default 3 (capped at the store count).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Gives Region `index` (key order, from 0) an explicit peer list.
    pub fn region_layout(mut self, index: usize, layout: RegionLayout) -> Self {
        self.layouts.insert(index, layout);
        self
    }

    /// The number of PD members (default 1). All share the cluster state;
    /// member 0 leads at start.
    pub fn pd_members(mut self, n: usize) -> Self {
        self.pd_members = n;
        self
    }

    /// The address of PD member 0 (default `127.0.0.1:0`, a free port).
    pub fn pd_addr(mut self, addr: SocketAddr) -> Self {
        self.pd_addr = Some(addr);
        self
    }

    /// The address of one store (default `127.0.0.1:0`).
    pub fn store_addr(mut self, store_id: u64, addr: SocketAddr) -> Self {
        self.store_addrs.insert(store_id, addr);
        self
    }

    /// The cluster id in every PD header (default [`DEFAULT_CLUSTER_ID`]).
    pub fn cluster_id(mut self, id: u64) -> Self {
        self.cluster_id = id;
        self
    }

    /// How a store built with [`build_hosted`](Self::build_hosted) opens a
    /// connection to another (by its address) to forward a call to it:
    /// the network's own dial. Without one, a hosted store dials over the
    /// machine's network.
    pub fn forward_dial(mut self, dial: ForwardDial) -> Self {
        self.forward_dial = Some(DialHolder(dial));
        self
    }

    /// The stores' lock-wait settings (TiKV's `pessimistic-txn` section;
    /// default: its defaults, a 1 s wait and a 20 ms wake-up delay).
    pub fn lock_wait(mut self, config: crate::LockWaitConfig) -> Self {
        self.lock_wait = config;
        self
    }

    /// TiKV's `raftstore.raft-entry-max-size` for every store, in bytes
    /// (default [`DEFAULT_RAFT_ENTRY_MAX_SIZE`](crate::DEFAULT_RAFT_ENTRY_MAX_SIZE),
    /// TiKV's 8 MiB). A write whose Raft entry would be larger — measured
    /// as the encoded size of its request, TiKV measuring the serialized
    /// command it proposes — is answered with the Region error
    /// `RaftEntryTooLarge { region_id, entry_size }` after the Region
    /// checks, before anything is applied. Reads are never refused.
    pub fn raft_entry_max_size(mut self, bytes: u64) -> Self {
        self.raft_entry_max_size = bytes;
        self
    }

    /// The API version every store runs (default V1, TiKV's default). A
    /// store answers a request whose `Context.api_version` differs with an
    /// error, as TiKV does; API v2 clients set a keyspace
    /// (`Config::with_keyspace`).
    pub fn api_version(mut self, version: kvrpcpb::ApiVersion) -> Self {
        self.api_version = version;
        self
    }

    /// Adds a keyspace PD serves to clients (`keyspacepb.Keyspace`), besides
    /// `DEFAULT` (id 0), which always exists. Ids are below 2^24.
    pub fn keyspace(mut self, name: &str, id: u32) -> Self {
        self.keyspaces.push((name.to_owned(), id));
        self
    }

    /// The clock the TSO's physical part follows, as the time since the
    /// UNIX epoch; default the system clock. A deterministic simulation
    /// gives its virtual clock, so timestamps (and with them lock TTLs)
    /// move with simulated time and replay. The TSO never goes backwards
    /// whatever the clock does.
    pub fn tso_clock(mut self, clock: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        self.tso_clock = TsoClock::new(clock);
        self
    }

    fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::InvalidArgument(m));
        if self.stores == 0 {
            return invalid("a simulated cluster needs at least one store".to_owned());
        }
        if self.pd_members == 0 {
            return invalid("a simulated cluster needs at least one PD member".to_owned());
        }
        if self.cluster_id == 0 {
            return invalid("the cluster id must not be 0: clients reject it".to_owned());
        }
        for (name, id) in &self.keyspaces {
            if *id >= 1 << 24 || *id == 0 || name.is_empty() {
                return invalid(format!(
                    "keyspace {name:?} with id {id}: names must be non-empty and ids between 1 and 2^24 - 1 (0 is DEFAULT)"
                ));
            }
        }
        if self.raft_entry_max_size == 0 {
            return invalid(
                "raft_entry_max_size must be at least 1 byte (TiKV refuses 0 too)".to_owned(),
            );
        }
        if self.layouts.is_empty() && self.replicas == 0 {
            return invalid("replicas must be at least 1".to_owned());
        }
        let sorted = self.split_keys.windows(2).all(|w| w[0] < w[1]);
        if !sorted || self.split_keys.iter().any(Vec::is_empty) {
            return invalid("split keys must be non-empty, sorted and distinct".to_owned());
        }
        let regions = self.split_keys.len() + 1;
        for (index, layout) in &self.layouts {
            if *index >= regions {
                return invalid(format!(
                    "region layout {index} given, but there are only {regions} regions"
                ));
            }
            let mut seen = Vec::new();
            for p in &layout.peers {
                if !self.all_store_ids().contains(&p.store_id) {
                    return invalid(format!(
                        "region {index}: store {} does not exist",
                        p.store_id
                    ));
                }
                if let Some(refusal) = self.tiflash_peer_refusal(*index, p) {
                    return invalid(refusal);
                }
                if seen.contains(&p.store_id) {
                    return invalid(format!("region {index}: two peers on store {}", p.store_id));
                }
                seen.push(p.store_id);
            }
            if let Some(leader) = layout.leader {
                let ok = layout
                    .peers
                    .iter()
                    .any(|p| p.store_id == leader && role_can_lead(p.role, p.is_witness));
                if !ok {
                    return invalid(format!(
                        "region {index}: the leader on store {leader} must be a voter that is not a witness"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Starts PD and the stores, each on its own port.
    pub async fn start(self) -> Result<SimCluster> {
        let shared = self.prepare()?;
        let cluster = SimCluster {
            shared: shared.clone(),
        };
        for member in 0..self.pd_members {
            let addr = match (member, self.pd_addr) {
                (0, Some(a)) => a,
                _ => loopback_any_port(),
            };
            let routes = pd_routes(&shared, member);
            let endpoint = Endpoint::start(addr, routes, shared.peers.clone(), true).await?;
            let address = endpoint.addr().to_string();
            lock(&shared.pd).push(endpoint);
            register_pd_member(&shared, member, address);
        }
        for store_id in self.all_store_ids() {
            let addr = self
                .store_addrs
                .get(&store_id)
                .copied()
                .unwrap_or_else(loopback_any_port);
            let routes = store_routes(&shared, store_id);
            let endpoint = Endpoint::start(addr, routes, shared.peers.clone(), false).await?;
            let address = endpoint.addr().to_string();
            lock(&shared.stores).insert(store_id, endpoint);
            if let Some(s) = shared.lock().stores.get_mut(&store_id) {
                s.address = address;
            }
        }
        Ok(cluster)
    }

    /// Builds the cluster without binding a port: the caller serves each
    /// server's routes on a network of its own (a simulated one, where
    /// every host is a name). PD member `m` is announced at
    /// `pd_address(m)`, store `s` at `store_address(s)`. The faults of
    /// [`SimCluster`] that act on the network (a hang that freezes
    /// connections, the connection resets of a store going down or of a
    /// dropped answer) have no ports to act on here; the rest of each fault
    /// (a store or PD member down refuses requests, ...) still applies.
    /// The network's owner makes its own network faults.
    pub fn build_hosted(
        self,
        pd_address: impl Fn(usize) -> String,
        store_address: impl Fn(u64) -> String,
    ) -> Result<(SimCluster, HostedServers)> {
        let shared = self.prepare()?;
        let mut servers = HostedServers {
            pd: Vec::new(),
            stores: Vec::new(),
        };
        for member in 0..self.pd_members {
            let address = pd_address(member);
            register_pd_member(&shared, member, address.clone());
            servers.pd.push((address, pd_routes(&shared, member)));
        }
        for store_id in self.all_store_ids() {
            let address = store_address(store_id);
            if let Some(s) = shared.lock().stores.get_mut(&store_id) {
                s.address = address.clone();
            }
            servers
                .stores
                .push((store_id, address, store_routes(&shared, store_id)));
        }
        Ok((SimCluster { shared }, servers))
    }

    /// The cluster's state and the handle its servers share, before any
    /// server runs.
    fn prepare(&self) -> Result<Arc<Shared>> {
        self.validate()?;
        let mut state = ClusterState::new(self.cluster_id, FIRST_REGION_ID);
        for id in self.all_store_ids() {
            state
                .stores
                .insert(id, tiflash::new_store(self.engine_of(id)));
        }
        self.create_regions(&mut state);
        state.api_version = self.api_version;
        state.lock_waits.config = self.lock_wait;
        state.raft_entry_max_size = self.raft_entry_max_size;
        state.clock = self.tso_clock.clone();
        state.raft.timing = self.raft_timing;
        for (name, id) in &self.keyspaces {
            state.keyspaces.push(keyspacepb::KeyspaceMeta {
                id: *id,
                name: name.clone(),
                state: keyspacepb::KeyspaceState::Enabled as i32,
                ..Default::default()
            });
        }

        let (faults, _) = watch::channel(0u64);
        Ok(Arc::new(Shared {
            state: Mutex::new(state),
            faults,
            stores: Mutex::new(BTreeMap::new()),
            pd: Mutex::new(Vec::new()),
            peers: PeerPorts::default(),
            forward_dial: self.forward_dial.clone().map(|d| d.0),
        }))
    }

    fn create_regions(&self, state: &mut ClusterState) {
        let n = self.stores;
        let replicas = self.replicas.clamp(1, n as usize);
        let mut bounds = vec![Vec::new()];
        bounds.extend(self.split_keys.iter().cloned());
        bounds.push(Vec::new());
        for index in 0..bounds.len() - 1 {
            let layout = self
                .layouts
                .get(&index)
                .cloned()
                .unwrap_or_else(|| RegionLayout::new(self.default_peers(index, replicas)));
            let region_id = state.alloc_id();
            let peers: Vec<metapb::Peer> = layout
                .peers
                .iter()
                .map(|p| metapb::Peer {
                    id: state.alloc_id(),
                    store_id: p.store_id,
                    role: p.role as i32,
                    is_witness: p.is_witness,
                })
                .collect();
            let leader_peer = match layout.leader {
                Some(store) => peers.iter().find(|p| p.store_id == store),
                None => peers.iter().find(|p| can_become_leader(p)),
            }
            .map(|p| p.id);
            let (leader, cold) = match layout.cold {
                Some(mode) => (
                    None,
                    Some(Cold {
                        mode,
                        old_leader: leader_peer,
                    }),
                ),
                None => (leader_peer, None),
            };
            let meta = metapb::Region {
                id: region_id,
                start_key: bounds[index].clone(),
                end_key: bounds[index + 1].clone(),
                region_epoch: Some(metapb::RegionEpoch {
                    conf_ver: 1,
                    version: 1,
                }),
                peers,
                ..Default::default()
            };
            state.regions.insert(
                region_id,
                SimRegion {
                    meta,
                    leader,
                    pd_leader: leader_peer,
                    cold,
                    campaigning: false,
                    derived: Vec::new(),
                    data: crate::data::RegionData::new(crate::data::RawKeys::of(self.api_version)),
                    mvcc: Default::default(),
                    applied_index: 0,
                    resolved_ts: 0,
                },
            );
        }
    }
}

async fn connect_channel(address: &str) -> Result<Channel> {
    let endpoint = Channel::from_shared(format!("http://{address}"))
        .map_err(|e| Error::InvalidArgument(format!("bad address {address}: {e}")))?
        .connect_timeout(Duration::from_secs(2));
    endpoint.connect().await.map_err(|e| Error::Connect {
        address: address.to_owned(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    })
}

/// A simulated TiKV cluster: one PD (or several members) and N stores, each
/// a gRPC server on 127.0.0.1. See the [module documentation](super).
pub struct SimCluster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("pd", &self.pd_endpoints())
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// A builder with 3 stores, one Region, 3 replicas and one PD member.
    pub fn builder() -> SimClusterBuilder {
        SimClusterBuilder::default()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, ClusterState> {
        self.shared.lock()
    }

    /// The cluster id PD reports.
    pub fn cluster_id(&self) -> u64 {
        self.state().cluster_id
    }

    /// `127.0.0.1:port` of every PD member, in member order.
    pub fn pd_endpoints(&self) -> Vec<String> {
        self.state()
            .pd_members
            .iter()
            .map(|m| m.address.clone())
            .collect()
    }

    /// The address of the PD leader.
    pub fn pd_addr(&self) -> String {
        let state = self.state();
        state
            .pd_members
            .get(state.pd_leader)
            .map(|m| m.address.clone())
            .unwrap_or_default()
    }

    /// The index of the PD leader among [`pd_endpoints`](Self::pd_endpoints).
    pub fn pd_leader_index(&self) -> usize {
        self.state().pd_leader
    }

    /// A one-line description of a store's faults, as the control
    /// interface prints it: `up|down busy=MS|- slow=MSms hang=connect|respond|-`.
    pub fn store_fault_text(&self, store_id: u64) -> String {
        let state = self.state();
        let Some(s) = state.stores.get(&store_id) else {
            return "unknown".to_owned();
        };
        format!(
            "{} busy={} slow={}ms hang={} clients={}",
            if s.up { "up" } else { "down" },
            s.busy
                .map(|w| w.to_string())
                .unwrap_or_else(|| "-".to_owned()),
            s.slow.as_millis(),
            match s.hang {
                None => "-",
                Some(HangMode::Connect) => "connect",
                Some(HangMode::Respond) => "respond",
            },
            match s.client_cut {
                None => "-",
                Some(crate::ClientCut::Refuse) => "refused",
                Some(crate::ClientCut::Drop) => "dropped",
            }
        )
    }

    /// The store ids, ascending.
    pub fn store_ids(&self) -> Vec<u64> {
        self.state().stores.keys().copied().collect()
    }

    /// `127.0.0.1:port` of a store.
    pub fn store_addr(&self, store_id: u64) -> Option<String> {
        self.state()
            .stores
            .get(&store_id)
            .map(|s| s.address.clone())
    }

    /// Every Region as it truly is now, in key order.
    pub fn regions(&self) -> Vec<metapb::Region> {
        self.state()
            .regions_in_key_order()
            .into_iter()
            .map(|r| r.meta.clone())
            .collect()
    }

    /// The Region holding `key`.
    pub fn region_for_key(&self, key: &[u8]) -> Option<metapb::Region> {
        self.state().region_for_key(key).map(|r| r.meta.clone())
    }

    /// A Region by id.
    pub fn region(&self, region_id: u64) -> Option<metapb::Region> {
        self.state().regions.get(&region_id).map(|r| r.meta.clone())
    }

    /// The true Raft leader of a Region; None while it is cold.
    pub fn leader_of(&self, region_id: u64) -> Option<metapb::Peer> {
        let state = self.state();
        let r = state.regions.get(&region_id)?;
        r.peer(r.leader?)
    }

    /// The leader PD reports for a Region (possibly stale).
    pub fn pd_leader_of(&self, region_id: u64) -> Option<metapb::Peer> {
        let state = self.state();
        let r = state.regions.get(&region_id)?;
        r.peer(r.pd_leader?)
    }

    /// The value of the raw `key` (default column family, by its encoding
    /// in API v2), read straight from its Region, bypassing every check.
    pub fn value_of(&self, key: &[u8]) -> Option<Vec<u8>> {
        let state = self.state();
        state
            .region_for_key(&crate::data::RawKeys::of(state.api_version).stored(key))?
            .data
            .get("default", key, tokio::time::Instant::now())
    }

    /// A correct request context for the peer of `region_id` on `store_id`:
    /// Region id, current epoch and that peer. None when the Region has no
    /// peer there.
    pub fn context(&self, region_id: u64, store_id: u64) -> Option<kvrpcpb::Context> {
        let state = self.state();
        let r = state.regions.get(&region_id)?;
        Some(kvrpcpb::Context {
            region_id,
            region_epoch: r.meta.region_epoch,
            peer: Some(r.peer_on_store(store_id)?),
            ..Default::default()
        })
    }

    /// A raw gRPC client connected to a store (for tests).
    pub async fn tikv_client(&self, store_id: u64) -> Result<TikvClient<Channel>> {
        let address = self
            .store_addr(store_id)
            .ok_or(Error::StoreNotFound { store_id })?;
        Ok(TikvClient::new(connect_channel(&address).await?))
    }

    /// A raw gRPC client connected to PD member `index` (for tests).
    pub async fn pd_client(&self, index: usize) -> Result<PdClient<Channel>> {
        let address = self
            .pd_endpoints()
            .get(index)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("there is no PD member {index}")))?;
        Ok(PdClient::new(connect_channel(&address).await?))
    }

    /// A raw gRPC client of PD member `index`'s keyspace service (for tests).
    pub async fn keyspace_client(
        &self,
        index: usize,
    ) -> Result<keyspacepb::keyspace_client::KeyspaceClient<Channel>> {
        let address = self
            .pd_endpoints()
            .get(index)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("there is no PD member {index}")))?;
        Ok(keyspacepb::keyspace_client::KeyspaceClient::new(
            connect_channel(&address).await?,
        ))
    }

    /// A snapshot of a store's counters (empty for an unknown store).
    pub fn counters(&self, store_id: u64) -> StoreCounters {
        self.state()
            .stores
            .get(&store_id)
            .map(|s| s.counters.clone())
            .unwrap_or_default()
    }

    /// Zeroes every store's counters, PD's call counts and the most Region
    /// loads PD answered at once.
    pub fn reset_counters(&self) {
        let mut state = self.state();
        for store in state.stores.values_mut() {
            store.counters = StoreCounters::default();
        }
        state.pd_calls.clear();
        state.pd_region_loads.reset_most();
    }

    /// The calls PD has received since the start (or the last
    /// [`reset_counters`](Self::reset_counters)), by gRPC method name
    /// (`GetRegion`, `ScanRegions`, `GetStore`, `Tso`, ...; each request on
    /// a `Tso` stream counts once, `LoadKeyspace` is the keyspace
    /// service's), summed over every member: a test bounds a client's
    /// load on PD with it.
    pub fn pd_calls(&self) -> BTreeMap<String, u64> {
        self.state()
            .pd_calls
            .iter()
            .map(|(method, n)| ((*method).to_owned(), *n))
            .collect()
    }

    /// Takes a store down, as a crash does: its listener closes
    /// (connections are refused) and every open connection is reset.
    /// Requests waiting in a hang end. When this returns, the port is
    /// closed. The Regions it led elect new leaders among their live
    /// voters after an election timeout ([`RaftTiming`](crate::RaftTiming)),
    /// losing the pessimistic locks the dead leader kept in memory, unless
    /// the store keeps its leaders ([`keep_leaders`](Self::keep_leaders),
    /// [`store_down_cold`](Self::store_down_cold)).
    pub async fn store_down(&self, store_id: u64) {
        tracing::info!("simulated store {store_id} goes down");
        {
            let mut state = self.state();
            if let Some(s) = state.stores.get_mut(&store_id) {
                s.up = false;
            }
            state.store_died(store_id);
        }
        self.shared.faults_changed();
        let accept_task = lock(&self.shared.stores)
            .get_mut(&store_id)
            .and_then(|e| e.down());
        if let Some(task) = accept_task {
            let _ = task.await;
        }
    }

    /// Brings a store back on the same address. Its other faults (busy,
    /// slow, hang) are kept.
    pub async fn store_up(&self, store_id: u64) -> Result<()> {
        if !self.state().stores.contains_key(&store_id) {
            return Err(Error::StoreNotFound { store_id });
        }
        // A hosted cluster (`build_hosted`) has no port of its own to
        // reopen: only the store's state comes back up.
        let endpoint = lock(&self.shared.stores)
            .get(&store_id)
            .map(|e| (e.addr(), e.is_up()));
        if let Some((addr, false)) = endpoint {
            let listener = bind(addr).await?;
            if let Some(e) = lock(&self.shared.stores).get_mut(&store_id) {
                e.up(listener);
            }
        }
        {
            let mut state = self.state();
            if let Some(s) = state.stores.get_mut(&store_id) {
                s.up = true;
            }
            // A cold store's Regions had kept their leaders: they lead again.
            state.raft.keep_leaders.remove(&store_id);
        }
        self.shared.faults_changed();
        Ok(())
    }

    /// Makes a store hang (see [`HangMode`]). Its Regions' followers stop
    /// hearing from it and elect, as when it goes down
    /// ([`store_down`](Self::store_down)), unless the hang ends first.
    pub fn store_hang(&self, store_id: u64, mode: HangMode) {
        {
            let mut state = self.state();
            if let Some(s) = state.stores.get_mut(&store_id) {
                s.hang = Some(mode);
            }
            state.store_died(store_id);
        }
        if let Some(e) = lock(&self.shared.stores).get_mut(&store_id) {
            e.set_frozen(mode == HangMode::Connect);
        }
        self.shared.faults_changed();
    }

    /// Ends a hang: frozen connections move again and waiting requests are
    /// served.
    pub fn store_unhang(&self, store_id: u64) {
        {
            let mut state = self.state();
            if let Some(s) = state.stores.get_mut(&store_id) {
                s.hang = None;
            }
            state.store_revived(store_id);
        }
        if let Some(e) = lock(&self.shared.stores).get_mut(&store_id) {
            e.set_frozen(false);
        }
        self.shared.faults_changed();
    }

    /// Adds `delay` before a store handles each request
    /// (`Duration::ZERO` removes it).
    ///
    /// The store's slow score follows, as TiKV's does
    /// (`store/health.rs`): it doubles every round of inspections
    /// (30 × [`store_health_timing`](Self::store_health_timing)'s inspect
    /// interval, 3 s by default) while the delay is at least the inspect
    /// interval, up to 100, and falls back to 1 over five minutes after.
    pub fn store_slow(&self, store_id: u64, delay: Duration) {
        if let Some(s) = self.state().stores.get_mut(&store_id) {
            let old = s.slow;
            s.health.catch_up(tokio::time::Instant::now(), old);
            s.slow = delay;
        }
        self.shared.faults_changed();
    }

    /// Makes a store answer every request with `ServerIsBusy` carrying
    /// `estimated_wait_ms` (checked before anything else), or ends that with
    /// `None`.
    pub fn store_busy(&self, store_id: u64, estimated_wait_ms: Option<u32>) {
        if let Some(s) = self.state().stores.get_mut(&store_id) {
            s.busy = estimated_wait_ms;
        }
        self.shared.faults_changed();
    }

    /// Moves a Region's leadership to its peer on `to_store` (a voter that is
    /// not a witness); the Region stops being cold, and an election under
    /// way ([`start_election`](Self::start_election)) ends with it. PD learns of it only
    /// when `update_pd`.
    pub fn transfer_leader(&self, region_id: u64, to_store: u64, update_pd: bool) -> Result<()> {
        let mut state = self.state();
        let region = state.region_mut(region_id)?;
        let peer = region
            .peer_on_store(to_store)
            .filter(can_become_leader)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "region {region_id} has no voter (non-witness) peer on store {to_store} to lead it"
                ))
            })?;
        region.leader = Some(peer.id);
        region.cold = None;
        region.campaigning = false;
        let now = state.raft_now();
        state.raft.on_new_leader(region_id, now);
        if update_pd && !state.cut_off_from_pd.contains(&to_store) {
            if let Ok(region) = state.region_mut(region_id) {
                region.pd_leader = Some(peer.id);
            }
        }
        drop(state);
        self.shared.faults_changed();
        Ok(())
    }

    /// Cuts store `store_id` off from PD, or joins them again: a partition
    /// between a store and PD, as far as this cluster models it. Stores
    /// and PD share their state here rather than talk, so what the
    /// partition changes is what PD hears: while cut off, the store's
    /// heartbeats are lost, and a leader moving to it is not reported
    /// (PD keeps naming the old one, even for a transfer that asks to
    /// update PD). Once joined, its first heartbeat reports every Region
    /// it leads. Clients reach the store as before: a client ↔ store
    /// partition is the network's to make.
    pub fn set_store_cut_off_from_pd(&self, store_id: u64, cut_off: bool) {
        let mut state = self.state();
        if cut_off {
            state.cut_off_from_pd.insert(store_id);
            return;
        }
        state.cut_off_from_pd.remove(&store_id);
        for region in state.regions.values_mut() {
            if region.led_from(store_id) {
                region.pd_leader = region.leader;
            }
        }
    }

    /// Sets the leader PD reports for a Region: the peer on `store_id`, or
    /// none. The true leader is unchanged.
    pub fn set_pd_leader(&self, region_id: u64, store_id: Option<u64>) -> Result<()> {
        let mut state = self.state();
        let region = state.region_mut(region_id)?;
        region.pd_leader = match store_id {
            None => None,
            Some(s) => Some(
                region
                    .peer_on_store(s)
                    .ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "region {region_id} has no peer on store {s}"
                        ))
                    })?
                    .id,
            ),
        };
        Ok(())
    }

    /// Makes a Region cold: the leader is lost (the old leader's peer
    /// answers `NotLeader` without a hint), PD keeps naming the old leader,
    /// and a leader request to another voter makes it campaign in `mode`.
    pub fn make_cold(&self, region_id: u64, mode: ColdMode) -> Result<()> {
        tracing::info!("simulated region {region_id} loses its leader ({mode:?})");
        let mut state = self.state();
        let region = state.region_mut(region_id)?;
        let old_leader = region.leader.or(region.cold.and_then(|c| c.old_leader));
        region.leader = None;
        region.cold = Some(Cold { mode, old_leader });
        state.raft.elections.remove(&region_id);
        drop(state);
        self.shared.faults_changed();
        Ok(())
    }

    /// Splits the Region holding `split_key` at it and returns the new
    /// Region's id. The existing Region keeps `[split_key, end)`, the new one
    /// gets `[start, split_key)` with new peers on the same stores (same
    /// roles, same leader store); both get version + 1. PD learns of it.
    pub fn split_region(&self, split_key: &[u8]) -> Result<u64> {
        let id = self.state().split(split_key)?;
        self.shared.faults_changed();
        Ok(id)
    }

    /// The next response of `method` (a label such as
    /// `"raw_compare_and_swap"` or `"kv_commit"`, see [`RAW_METHODS`] and
    /// [`TXN_METHODS`]) served by the store is
    /// dropped: the request is applied, then the store resets its
    /// connections, so the client sees a transport failure. Orders stack.
    pub fn drop_next_response(&self, store_id: u64, method: &str) -> Result<()> {
        if !RAW_METHODS.contains(&method) && !TXN_METHODS.contains(&method) {
            return Err(Error::InvalidArgument(format!(
                "unknown method {method:?}; use one of {}, {}",
                RAW_METHODS.join(", "),
                TXN_METHODS.join(", ")
            )));
        }
        self.state()
            .store_mut(store_id)?
            .drop_next
            .push(method.to_owned());
        Ok(())
    }

    /// Makes PD member `index` the leader (it must be up).
    pub fn pd_transfer_leader(&self, index: usize) -> Result<()> {
        let mut state = self.state();
        match state.pd_members.get(index) {
            Some(m) if m.up => {
                state.pd_leader = index;
                Ok(())
            }
            Some(_) => Err(Error::InvalidArgument(format!(
                "PD member {index} is down; bring it up first"
            ))),
            None => Err(Error::InvalidArgument(format!(
                "there is no PD member {index}"
            ))),
        }
    }

    /// Takes PD member `index` down (listener closed, connections reset).
    /// A downed leader hands leadership to the next member that is up.
    pub async fn pd_member_down(&self, index: usize) -> Result<()> {
        {
            let mut state = self.state();
            let count = state.pd_members.len();
            let member = state
                .pd_members
                .get_mut(index)
                .ok_or_else(|| Error::InvalidArgument(format!("there is no PD member {index}")))?;
            member.up = false;
            if state.pd_leader == index {
                if let Some(next) = (1..count)
                    .map(|d| (index + d) % count)
                    .find(|i| state.pd_members.get(*i).is_some_and(|m| m.up))
                {
                    state.pd_leader = next;
                }
            }
        }
        let task = lock(&self.shared.pd).get_mut(index).and_then(|e| e.down());
        if let Some(task) = task {
            let _ = task.await;
        }
        Ok(())
    }

    /// Brings PD member `index` back on the same address (as a follower).
    pub async fn pd_member_up(&self, index: usize) -> Result<()> {
        if index >= self.state().pd_members.len() {
            return Err(Error::InvalidArgument(format!(
                "there is no PD member {index}"
            )));
        }
        // A hosted cluster has no port of its own to reopen.
        let endpoint = lock(&self.shared.pd)
            .get(index)
            .map(|e| (e.addr(), e.is_up()));
        if let Some((addr, false)) = endpoint {
            let listener = bind(addr).await?;
            if let Some(e) = lock(&self.shared.pd).get_mut(index) {
                e.up(listener);
            }
        }
        if let Some(m) = self.state().pd_members.get_mut(index) {
            m.up = true;
        }
        Ok(())
    }

    /// Makes PD member `index` hang: it accepts connections and receives
    /// requests (TSO streams included) but answers none until
    /// [`pd_member_unhang`](Self::pd_member_unhang); it stays leader if it
    /// led. A client sees its own timeouts, and a client call its deadline.
    pub fn pd_member_hang(&self, index: usize) -> Result<()> {
        self.set_pd_hung(index, true)
    }

    /// Ends PD member `index`'s hang: the requests it held are answered.
    pub fn pd_member_unhang(&self, index: usize) -> Result<()> {
        self.set_pd_hung(index, false)
    }

    fn set_pd_hung(&self, index: usize, hung: bool) -> Result<()> {
        {
            let mut state = self.state();
            let member = state
                .pd_members
                .get_mut(index)
                .ok_or_else(|| Error::InvalidArgument(format!("there is no PD member {index}")))?;
            member.hung = hung;
        }
        self.shared.faults_changed();
        Ok(())
    }

    /// Moves the TSO's physical clock forward by `by` (whole milliseconds):
    /// every later timestamp is at least that much later, so lock TTLs,
    /// which TiKV measures on the physical part of the timestamps a request
    /// carries, expire without real waiting.
    pub fn advance_tso_clock(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.state().advance_clock(ms);
    }

    /// A fresh timestamp from the TSO (`physical << 18 | logical`), as a
    /// `Tso` request for one timestamp would get, without a network round
    /// trip.
    pub fn current_ts(&self) -> u64 {
        let (physical, logical) = self.state().next_timestamp(1);
        compose_ts(physical, logical)
    }

    /// The transactional locks (`KvScanLock`'s view, any start ts) on keys
    /// in `[start, end)` (unencoded keys; an empty `end` is unbounded), in
    /// key order across Regions, bypassing every check and fault.
    pub fn locks(&self, start: &[u8], end: &[u8]) -> Vec<kvrpcpb::LockInfo> {
        let (low, high) = (codec::encode_bytes(start), encoded_bound(end));
        let state = self.state();
        state
            .regions_in_key_order()
            .into_iter()
            .flat_map(|r| r.mvcc.locks_in(&low, &high))
            .map(|(key, lock)| {
                let raw = codec::decode_bytes(&key).unwrap_or(key);
                lock.info(&raw)
            })
            .collect()
    }

    /// The committed versions (write records) of a transactional key,
    /// newest first, bypassing every check and fault.
    pub fn versions(&self, key: &[u8]) -> Vec<MvccVersion> {
        let encoded = codec::encode_bytes(key);
        let state = self.state();
        state
            .region_for_key(&encoded)
            .map(|r| r.mvcc.versions(&encoded))
            .unwrap_or_default()
    }

    /// The largest read timestamp the Region holding a transactional key
    /// has seen (async commit and 1PC commit above it).
    pub fn max_ts(&self, key: &[u8]) -> u64 {
        let encoded = codec::encode_bytes(key);
        self.state()
            .region_for_key(&encoded)
            .map(|r| r.mvcc.max_ts())
            .unwrap_or(0)
    }

    /// PD's GC safe point.
    pub fn gc_safe_point(&self) -> u64 {
        self.state().gc_safe_point
    }

    /// Stops every server and waits for their tasks to end.
    pub async fn shutdown(&self) {
        self.state().shutdown = true;
        self.shared.faults_changed();
        let mut tasks = Vec::new();
        for e in lock(&self.shared.stores).values_mut() {
            tasks.extend(e.stop());
        }
        for e in lock(&self.shared.pd).iter_mut() {
            tasks.extend(e.stop());
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.state().shutdown = true;
        self.shared.faults_changed();
        for e in lock(&self.shared.stores).values_mut() {
            e.stop();
        }
        for e in lock(&self.shared.pd).iter_mut() {
            e.stop();
        }
    }
}
