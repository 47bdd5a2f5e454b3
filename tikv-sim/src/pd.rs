//! The simulated PD service (`pdpb.PD`). Every member shares the cluster's
//! state; only the leader member answers data RPCs, the others answer
//! `Unavailable` "not leader" (and GetMembers with the real leader). PD's
//! HTTP API, on the same port, is in `pd/http.rs`.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::state::{ClusterState, MAX_TSO_COUNT};
use super::Shared;
use crate::proto::metapb;
use crate::proto::pdpb::{self, pd_server::Pd};
use tikv_plan_proto::meta::{StoreEngine, ENGINE_LABEL_KEY};

mod http;
mod loads;
pub(crate) use http::PdHttp;
pub(crate) use loads::RegionLoads;

/// The PD service of one member.
#[derive(Clone)]
pub(crate) struct PdService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) member: usize,
}

fn header(cluster_id: u64) -> Option<pdpb::ResponseHeader> {
    Some(pdpb::ResponseHeader {
        cluster_id,
        error: None,
    })
}

fn error_header(
    cluster_id: u64,
    error_type: pdpb::ErrorType,
    message: String,
) -> Option<pdpb::ResponseHeader> {
    Some(pdpb::ResponseHeader {
        cluster_id,
        error: Some(pdpb::Error {
            r#type: error_type as i32,
            message,
        }),
    })
}

fn member_info(state: &ClusterState, index: usize) -> Option<pdpb::Member> {
    let m = state.pd_members.get(index)?;
    let url = format!("http://{}", m.address);
    Some(pdpb::Member {
        name: m.name.clone(),
        member_id: m.member_id,
        peer_urls: vec![url.clone()],
        client_urls: vec![url],
        leader_priority: 0,
        ..Default::default()
    })
}

/// Every member, the leader and the etcd leader (the same), as
/// `GetMembers` answers on any member.
fn members_response(state: &ClusterState) -> pdpb::GetMembersResponse {
    let members = (0..state.pd_members.len())
        .filter_map(|i| member_info(state, i))
        .collect();
    let leader = member_info(state, state.pd_leader);
    pdpb::GetMembersResponse {
        header: header(state.cluster_id),
        members,
        etcd_leader: leader.clone(),
        leader,
        ..Default::default()
    }
}

/// Counts one call to PD's `method`, on whichever member received it.
pub(crate) fn count_pd_call(shared: &Shared, method: &'static str) {
    *shared.lock().pd_calls.entry(method).or_default() += 1;
}

/// PD refuses a TSO request for no timestamps, or for more than the logical
/// part can hold in one millisecond (it would overlap the next one).
fn check_tso_count(count: u32) -> Result<(), Status> {
    if count == 0 {
        return Err(Status::invalid_argument(
            "tso count should be positive: ask for at least one timestamp",
        ));
    }
    if count >= MAX_TSO_COUNT {
        return Err(Status::invalid_argument(format!(
            "tso count {count} does not fit the logical part: ask for fewer than {MAX_TSO_COUNT}"
        )));
    }
    Ok(())
}

impl PdService {
    /// One TSO answer, once the member does not hang.
    async fn timestamp(&self, req: pdpb::TsoRequest) -> Result<pdpb::TsoResponse, Status> {
        self.count("Tso");
        self.wait_out_hang().await?;
        let mut state = self.leader_state(req.header.as_ref())?;
        check_tso_count(req.count)?;
        let (physical, logical) = state.next_timestamp(req.count);
        Ok(pdpb::TsoResponse {
            header: header(state.cluster_id),
            count: req.count,
            timestamp: Some(pdpb::Timestamp {
                physical,
                logical,
                suffix_bits: 0,
            }),
        })
    }

    /// Counts a call this member received ([`SimCluster::pd_calls`](crate::SimCluster::pd_calls)).
    pub(crate) fn count(&self, method: &'static str) {
        count_pd_call(&self.shared, method);
    }

    /// Waits while this member hangs ([`SimCluster::pd_member_hang`](crate::SimCluster::pd_member_hang)):
    /// the request was received and is never answered until the hang is
    /// lifted, as a PD whose process stalls (a long GC pause, a stuck
    /// disk under etcd) answers nothing. Fails (an answer never delivered:
    /// the connection is gone) when the member goes down or the cluster
    /// shuts down meanwhile.
    async fn wait_out_hang(&self) -> Result<(), Status> {
        let mut changes = self.shared.faults.subscribe();
        loop {
            {
                let state = self.shared.lock();
                if state.shutdown {
                    return Err(Status::unavailable("simulated cluster shut down"));
                }
                match state.pd_members.get(self.member) {
                    Some(m) if !m.up => {
                        return Err(Status::unavailable("simulated PD member is down"))
                    }
                    Some(m) if m.hung => {}
                    _ => return Ok(()),
                }
            }
            if changes.changed().await.is_err() {
                return Err(Status::unavailable("simulated cluster shut down"));
            }
        }
    }

    /// Locks the state after checking this member leads and the request
    /// belongs to this cluster.
    fn leader_state(
        &self,
        request_header: Option<&pdpb::RequestHeader>,
    ) -> Result<std::sync::MutexGuard<'_, ClusterState>, Status> {
        let state = self.shared.lock();
        if state.pd_leader != self.member {
            return Err(Status::unavailable("not leader"));
        }
        let asked = request_header.map(|h| h.cluster_id).unwrap_or(0);
        if asked != 0 && asked != state.cluster_id {
            return Err(Status::failed_precondition(format!(
                "mismatch cluster id, need {} but got {asked}",
                state.cluster_id
            )));
        }
        Ok(state)
    }

    fn region_response(
        state: &ClusterState,
        region: Option<metapb::Region>,
        leader: Option<metapb::Peer>,
    ) -> pdpb::GetRegionResponse {
        let down_peers = region
            .as_ref()
            .map(|r| Self::down_peers(state, r))
            .unwrap_or_default();
        pdpb::GetRegionResponse {
            header: header(state.cluster_id),
            region,
            leader,
            down_peers,
            pending_peers: Vec::new(),
            ..Default::default()
        }
    }

    /// The Region's peers on stores that are down, as PD reports peers
    /// whose store stopped heartbeating.
    fn down_peers(state: &ClusterState, region: &metapb::Region) -> Vec<pdpb::PeerStats> {
        // The leader reports the others; it never lists itself.
        let leader = state.regions.get(&region.id).and_then(|r| r.leader);
        region
            .peers
            .iter()
            .filter(|p| Some(p.id) != leader)
            .filter(|p| state.stores.get(&p.store_id).is_some_and(|s| !s.up))
            .map(|p| pdpb::PeerStats {
                peer: Some(*p),
                down_seconds: 1,
            })
            .collect()
    }

    fn store_meta(state: &ClusterState, store_id: u64) -> Option<metapb::Store> {
        let store = state.stores.get(&store_id)?;
        // TiFlash's proxy registers its store with the engine label
        // (`engine=tiflash`) and its own release version; TiKV sets no
        // engine label.
        let engine = (!store.engine.is_tikv()).then(|| metapb::StoreLabel {
            key: ENGINE_LABEL_KEY.to_owned(),
            value: store.engine.label_value().to_owned(),
        });
        let version = match store.engine {
            StoreEngine::TiKv => super::SIM_TIKV_VERSION,
            _ => super::SIM_TIFLASH_VERSION,
        };
        Some(metapb::Store {
            id: store_id,
            address: store.address.clone(),
            state: metapb::StoreState::Up as i32,
            version: version.to_owned(),
            // The Raft address; the simulator serves each store on one
            // address (a TiFlash proxy listens on a port of its own).
            peer_address: store.address.clone(),
            labels: engine
                .into_iter()
                .chain(store.labels.iter().map(|(key, value)| metapb::StoreLabel {
                    key: key.clone(),
                    value: value.clone(),
                }))
                .collect(),
            ..Default::default()
        })
    }
}

type TsoStream = Pin<Box<dyn Stream<Item = Result<pdpb::TsoResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Pd for PdService {
    async fn get_members(
        &self,
        _request: Request<pdpb::GetMembersRequest>,
    ) -> Result<Response<pdpb::GetMembersResponse>, Status> {
        self.count("GetMembers");
        self.wait_out_hang().await?;
        Ok(Response::new(members_response(&self.shared.lock())))
    }

    type TsoStream = TsoStream;

    async fn tso(
        &self,
        request: Request<Streaming<pdpb::TsoRequest>>,
    ) -> Result<Response<Self::TsoStream>, Status> {
        let service = self.clone();
        let responses = request.into_inner().then(move |req| {
            let service = service.clone();
            async move { service.timestamp(req?).await }
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn get_store(
        &self,
        request: Request<pdpb::GetStoreRequest>,
    ) -> Result<Response<pdpb::GetStoreResponse>, Status> {
        self.count("GetStore");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let state = self.leader_state(req.header.as_ref())?;
        let store = Self::store_meta(&state, req.store_id);
        let header = match store {
            Some(_) => header(state.cluster_id),
            None => error_header(
                state.cluster_id,
                pdpb::ErrorType::Unknown,
                format!("invalid store ID {}, not found", req.store_id),
            ),
        };
        Ok(Response::new(pdpb::GetStoreResponse {
            header,
            store,
            ..Default::default()
        }))
    }

    async fn get_all_stores(
        &self,
        request: Request<pdpb::GetAllStoresRequest>,
    ) -> Result<Response<pdpb::GetAllStoresResponse>, Status> {
        self.count("GetAllStores");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let state = self.leader_state(req.header.as_ref())?;
        let stores = state
            .stores
            .keys()
            .filter_map(|id| Self::store_meta(&state, *id))
            .collect();
        Ok(Response::new(pdpb::GetAllStoresResponse {
            header: header(state.cluster_id),
            stores,
        }))
    }

    async fn get_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count("GetRegion");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let id = self
            .shared
            .lock()
            .region_for_key(&req.region_key)
            .map(|r| r.meta.id);
        let _load = self.load_region(id).await;
        let state = self.leader_state(req.header.as_ref())?;
        let (region, leader) = match state.region_for_key(&req.region_key) {
            Some(r) => (Some(r.meta.clone()), r.pd_leader.and_then(|id| r.peer(id))),
            None => (None, None),
        };
        Ok(Response::new(Self::region_response(&state, region, leader)))
    }

    async fn get_region_by_id(
        &self,
        request: Request<pdpb::GetRegionByIdRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count("GetRegionByID");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let _load = self.load_region(Some(req.region_id)).await;
        let state = self.leader_state(req.header.as_ref())?;
        let (region, leader) = match state.regions.get(&req.region_id) {
            Some(r) => (Some(r.meta.clone()), r.pd_leader.and_then(|id| r.peer(id))),
            None => (None, None),
        };
        Ok(Response::new(Self::region_response(&state, region, leader)))
    }

    /// The Region just before the one holding `region_key` (kvproto's
    /// `GetPrevRegion`; what a reverse scan asks for). No Region when the
    /// key is in the first one.
    async fn get_prev_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.count("GetPrevRegion");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let state = self.leader_state(req.header.as_ref())?;
        let regions = state.regions_in_key_order();
        let prev = regions
            .iter()
            .position(|r| r.contains(&req.region_key))
            .and_then(|i| i.checked_sub(1))
            .map(|i| regions[i]);
        let (region, leader) = match prev {
            Some(r) => (Some(r.meta.clone()), r.pd_leader.and_then(|id| r.peer(id))),
            None => (None, None),
        };
        Ok(Response::new(Self::region_response(&state, region, leader)))
    }

    /// The Regions from the one holding `start_key` up to `end_key`
    /// (exclusive; empty: the end of the key space), at most `limit`
    /// (`<= 0`: all), in both the new (`regions`) and old
    /// (`region_metas`/`leaders`) forms, as PD answers.
    async fn scan_regions(
        &self,
        request: Request<pdpb::ScanRegionsRequest>,
    ) -> Result<Response<pdpb::ScanRegionsResponse>, Status> {
        self.count("ScanRegions");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let state = self.leader_state(req.header.as_ref())?;
        let limit = usize::try_from(req.limit)
            .ok()
            .filter(|l| *l > 0)
            .unwrap_or(usize::MAX);
        let mut response = pdpb::ScanRegionsResponse {
            header: header(state.cluster_id),
            ..Default::default()
        };
        for r in state.regions_in_key_order() {
            let after_start =
                r.meta.end_key.is_empty() || r.meta.end_key.as_slice() > req.start_key.as_slice();
            let before_end = req.end_key.is_empty() || r.meta.start_key < req.end_key;
            if !after_start || !before_end {
                continue;
            }
            if response.regions.len() >= limit {
                break;
            }
            let leader = r.pd_leader.and_then(|id| r.peer(id));
            response.region_metas.push(r.meta.clone());
            response.leaders.push(leader.unwrap_or_default());
            response.regions.push(pdpb::Region {
                region: Some(r.meta.clone()),
                leader,
                down_peers: Self::down_peers(&state, &r.meta),
                pending_peers: Vec::new(),
            });
        }
        Ok(Response::new(response))
    }

    async fn get_gc_safe_point(
        &self,
        request: Request<pdpb::GetGcSafePointRequest>,
    ) -> Result<Response<pdpb::GetGcSafePointResponse>, Status> {
        self.count("GetGCSafePoint");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let state = self.leader_state(req.header.as_ref())?;
        Ok(Response::new(pdpb::GetGcSafePointResponse {
            header: header(state.cluster_id),
            safe_point: state.gc_safe_point,
        }))
    }

    async fn update_gc_safe_point(
        &self,
        request: Request<pdpb::UpdateGcSafePointRequest>,
    ) -> Result<Response<pdpb::UpdateGcSafePointResponse>, Status> {
        self.count("UpdateGCSafePoint");
        let req = request.into_inner();
        self.wait_out_hang().await?;
        let mut state = self.leader_state(req.header.as_ref())?;
        // Like PD, the safe point never moves backwards: an older one is
        // ignored and the current one returned.
        state.gc_safe_point = state.gc_safe_point.max(req.safe_point);
        Ok(Response::new(pdpb::UpdateGcSafePointResponse {
            header: header(state.cluster_id),
            new_safe_point: state.gc_safe_point,
        }))
    }
}
