//! PD's HTTP API, served on each PD member's port beside gRPC as PD serves
//! it: the part client test suites and tools read, in the JSON PD writes.
//!
//! The shapes are PD's: `RegionInfo`, `RegionsInfo` and `MetaPeer` of
//! PD's `pkg/response/region.go` (written by easyjson, compact),
//! `StoreInfo` and `StoresInfo` of `pkg/response/store.go`, `Health` of
//! `server/api/health.go`, and `pdpb.GetMembersResponse` for
//! `server/api/member.go` (written by Go's `encoding/json` through
//! unrolled/render with `IndentJSON`, two-space indent and a final
//! newline). Fields keep Go's order and Go's `omitempty` rules. Region keys
//! are upper-case hex of the key as PD holds it (`core.HexRegionKeyStr`).
//! What a store reports in heartbeats and the simulator has no figure for
//! (sizes, flows, CPU, capacity) is 0.
//!
//! A member that does not lead answers what the leader would: PD's
//! redirector proxies every API call but `health` and `ping` to the
//! leader, and every member here shares the leader's state, so the member
//! waits out the leader's hang and answers itself, or answers 503 as PD
//! does when no leader is up. A request with PD's
//! `PD-Allow-follower-handle` header is answered at once, as PD answers it
//! locally.

use std::convert::Infallible;
use std::task::{Context, Poll};

use serde::Serialize;
use tonic::body::Body;
use tonic::codegen::http::{self, header, Method, StatusCode};
use tonic::codegen::{BoxFuture, Service};

use super::{members_response, PdService};
use crate::proto::{metapb, pdpb};
use crate::state::ClusterState;

/// The header with which a caller lets a PD follower answer by itself
/// (PD's `apiutil.PDAllowFollowerHandleHeader`).
const ALLOW_FOLLOWER_HANDLE: &str = "pd-allow-follower-handle";

/// What PD's HTTP API path `path` names, if it is one the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    /// `/pd/api/v1/regions`
    Regions,
    /// `/pd/api/v1/regions/count`
    RegionCount,
    /// `/pd/api/v1/region/id/{id}`, the id as written.
    RegionById(&'a str),
    /// `/pd/api/v1/stores`
    Stores,
    /// `/pd/api/v1/members`
    Members,
    /// `/pd/api/v1/health` (and the deprecated `/pd/health`)
    Health,
    /// `/pd/api/v1/ping` (and the deprecated `/pd/ping`)
    Ping,
}

impl<'a> Route<'a> {
    fn of(path: &'a str) -> Option<Route<'a>> {
        let route = match path {
            "/pd/api/v1/regions" => Route::Regions,
            "/pd/api/v1/regions/count" => Route::RegionCount,
            "/pd/api/v1/stores" => Route::Stores,
            "/pd/api/v1/members" => Route::Members,
            "/pd/api/v1/health" | "/pd/health" => Route::Health,
            "/pd/api/v1/ping" | "/pd/ping" => Route::Ping,
            _ => {
                let id = path.strip_prefix("/pd/api/v1/region/id/")?;
                // A mux path variable: one non-empty segment.
                if id.is_empty() || id.contains('/') {
                    return None;
                }
                Route::RegionById(id)
            }
        };
        Some(route)
    }

    /// Whether every member answers it by itself (PD's `localOnlyPaths`),
    /// rather than through the leader.
    fn local_only(self) -> bool {
        matches!(self, Route::Health | Route::Ping)
    }
}

/// One HTTP answer: status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: StatusCode,
    content_type: Option<&'static str>,
    body: String,
}

/// `unrolled/render`'s `Data`: bytes PD marshalled itself (the Region
/// endpoints, by easyjson).
const BINARY: &str = "application/octet-stream";
/// `unrolled/render`'s `JSON`.
const JSON: &str = "application/json; charset=UTF-8";
/// Go's `http.Error` and `http.NotFound`.
const TEXT: &str = "text/plain; charset=utf-8";

impl Answer {
    /// A compact JSON body, as PD's easyjson writers give it.
    fn compact(value: &impl Serialize) -> Answer {
        Answer::json_as(StatusCode::OK, BINARY, serde_json::to_string(value))
    }

    /// An indented JSON body with a final newline, as `render.JSON` with
    /// `IndentJSON` writes it.
    fn indented(status: StatusCode, value: &impl Serialize) -> Answer {
        let body = serde_json::to_string_pretty(value).map(|mut body| {
            body.push('\n');
            body
        });
        Answer::json_as(status, JSON, body)
    }

    fn json_as(
        status: StatusCode,
        content_type: &'static str,
        body: serde_json::Result<String>,
    ) -> Answer {
        match body {
            Ok(body) => Answer {
                status,
                content_type: Some(content_type),
                body,
            },
            Err(e) => Answer::text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    }

    /// Go's `http.Error`: the message and a newline.
    fn text(status: StatusCode, message: &str) -> Answer {
        Answer {
            status,
            content_type: Some(TEXT),
            body: format!("{message}\n"),
        }
    }

    /// Go's `http.NotFound`, which PD's router and etcd's mux answer for a
    /// path they do not serve.
    fn not_found() -> Answer {
        Answer::text(StatusCode::NOT_FOUND, "404 page not found")
    }

    /// gorilla/mux's answer to a served path asked with another method: a
    /// bare 405.
    fn method_not_allowed() -> Answer {
        Answer {
            status: StatusCode::METHOD_NOT_ALLOWED,
            content_type: None,
            body: String::new(),
        }
    }

    fn into_http(self) -> http::Response<Body> {
        let nosniff = self.content_type == Some(TEXT);
        let mut builder = http::Response::builder().status(self.status);
        if let Some(content_type) = self.content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        if nosniff {
            builder = builder.header("x-content-type-options", "nosniff");
        }
        builder
            .body(Body::new(self.body))
            .unwrap_or_else(|_| http::Response::new(Body::empty()))
    }
}

/// The answer to `method path` from the cluster as it is now (the member
/// already waited for whatever it had to).
fn answer(state: &ClusterState, method: &Method, path: &str) -> Answer {
    let Some(route) = Route::of(path) else {
        return Answer::not_found();
    };
    if *method != Method::GET {
        return Answer::method_not_allowed();
    }
    match route {
        Route::Regions => {
            let regions: Vec<RegionInfo> = state
                .regions_in_key_order()
                .into_iter()
                .map(|r| RegionInfo::new(state, r))
                .collect();
            Answer::compact(&RegionsInfo {
                count: regions.len(),
                regions: Some(regions),
            })
        }
        Route::RegionCount => Answer::indented(
            StatusCode::OK,
            &RegionsInfo {
                count: state.regions.len(),
                regions: None,
            },
        ),
        Route::RegionById(id) => region_by_id(state, id),
        Route::Stores => {
            let stores: Vec<StoreInfo> = state
                .stores
                .keys()
                .filter_map(|id| StoreInfo::new(state, *id))
                .collect();
            Answer::indented(
                StatusCode::OK,
                &StoresInfo {
                    count: stores.len(),
                    stores,
                },
            )
        }
        Route::Members => {
            Answer::indented(StatusCode::OK, &MembersInfo::from(&members_response(state)))
        }
        Route::Health => {
            let health: Vec<Health> = (0..state.pd_members.len())
                .filter_map(|i| Health::new(state, i))
                .collect();
            Answer::indented(StatusCode::OK, &health)
        }
        Route::Ping => Answer {
            status: StatusCode::OK,
            content_type: None,
            body: String::new(),
        },
    }
}

/// `GET /pd/api/v1/region/id/{id}`, with PD's answers to a bad id.
fn region_by_id(state: &ClusterState, id: &str) -> Answer {
    let region_id = match parse_uint(id) {
        Ok(id) => id,
        Err(message) => return Answer::indented(StatusCode::BAD_REQUEST, &message),
    };
    if region_id == 0 {
        return Answer::indented(
            StatusCode::BAD_REQUEST,
            &PdError {
                class: 0,
                code: 0,
                message: "invalid region id",
                rfccode: "PD:region:ErrRegionInvalidID",
            },
        );
    }
    match state.regions.get(&region_id) {
        Some(region) => Answer::compact(&RegionInfo::new(state, region)),
        None => Answer::indented(
            StatusCode::NOT_FOUND,
            &format!("[PD:region:ErrRegionNotFound]region {region_id} not found"),
        ),
    }
}

/// Go's `strconv.ParseUint(s, 10, 64)`, with its error message.
fn parse_uint(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseUint: parsing {s:?}: invalid syntax"));
    }
    s.parse::<u64>()
        .map_err(|_| format!("strconv.ParseUint: parsing {s:?}: value out of range"))
}

/// A PD member's HTTP API: every request to its port that is not gRPC.
#[derive(Clone)]
pub(crate) struct PdHttp {
    service: PdService,
}

impl PdHttp {
    pub(crate) fn new(service: PdService) -> Self {
        PdHttp { service }
    }

    async fn serve(self, method: Method, path: String, follower_handle: bool) -> Answer {
        if self.service.wait_out_hang().await.is_err() {
            // The connection is gone with the member; nobody reads this.
            return Answer::text(StatusCode::SERVICE_UNAVAILABLE, "PD server is not serving");
        }
        let through_leader = Route::of(&path).is_some_and(|r| !r.local_only()) && !follower_handle;
        if through_leader {
            let leader = {
                let state = self.service.shared.lock();
                let leader = state.pd_leader;
                let up = state.pd_members.get(leader).is_some_and(|m| m.up);
                (leader != self.service.member).then_some((leader, up))
            };
            match leader {
                Some((_, false)) => {
                    return Answer::text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "[PD:apiutil:ErrRedirectNoLeader]redirect finds no leader",
                    )
                }
                Some((leader, true)) => {
                    let leader = PdService {
                        shared: self.service.shared.clone(),
                        member: leader,
                    };
                    if leader.wait_out_hang().await.is_err() {
                        return Answer::text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "[PD:apiutil:ErrRedirectNoLeader]redirect finds no leader",
                        );
                    }
                }
                None => {}
            }
        }
        let state = self.service.shared.lock();
        answer(&state, &method, &path)
    }
}

/// A gRPC request: PD (like any gRPC server) tells them apart by their
/// content type.
fn is_grpc<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

impl<B: Send + 'static> Service<http::Request<B>> for PdHttp {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if is_grpc(&req) {
            // A gRPC method no service here has, as tonic answers it.
            let status = tonic::Status::unimplemented("");
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let follower_handle = req.headers().contains_key(ALLOW_FOLLOWER_HANDLE);
        let this = self.clone();
        Box::pin(async move { Ok(this.serve(method, path, follower_handle).await.into_http()) })
    }
}

// ---- PD's JSON shapes -------------------------------------------------

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_usize(v: &usize) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// Upper-case hex of a key (PD's `core.HexRegionKeyStr`).
fn hex_key(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02X}")).collect()
}

/// A peer's role as Go's enum `String()` names it.
fn role_name(role: i32) -> String {
    match metapb::PeerRole::try_from(role) {
        Ok(role) => role.as_str_name().to_owned(),
        Err(_) => role.to_string(),
    }
}

/// PD's `response.MetaPeer`: `role_name` and `is_learner` first, then the
/// embedded `metapb.Peer` with its `omitempty` fields.
#[derive(Debug, Serialize)]
struct MetaPeer {
    role_name: String,
    #[serde(skip_serializing_if = "is_false")]
    is_learner: bool,
    #[serde(skip_serializing_if = "is_zero_u64")]
    id: u64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    store_id: u64,
    #[serde(skip_serializing_if = "is_zero_i32")]
    role: i32,
    #[serde(skip_serializing_if = "is_false")]
    is_witness: bool,
}

impl MetaPeer {
    /// A peer, or none (PD writes a Region without a leader as
    /// `{"role_name":""}`).
    fn new(peer: Option<&metapb::Peer>) -> MetaPeer {
        match peer {
            Some(p) => MetaPeer {
                role_name: role_name(p.role),
                is_learner: p.role == metapb::PeerRole::Learner as i32,
                id: p.id,
                store_id: p.store_id,
                role: p.role,
                is_witness: p.is_witness,
            },
            None => MetaPeer {
                role_name: String::new(),
                is_learner: false,
                id: 0,
                store_id: 0,
                role: 0,
                is_witness: false,
            },
        }
    }
}

/// `metapb.RegionEpoch`.
#[derive(Debug, Serialize)]
struct Epoch {
    #[serde(skip_serializing_if = "is_zero_u64")]
    conf_ver: u64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    version: u64,
}

/// PD's `response.PDPeerStats`.
#[derive(Debug, Serialize)]
struct PeerStats {
    peer: MetaPeer,
    #[serde(skip_serializing_if = "is_zero_u64")]
    down_seconds: u64,
}

/// PD's `response.RegionInfo` (no buckets, no replication status: the
/// simulator has neither).
#[derive(Debug, Serialize)]
struct RegionInfo {
    id: u64,
    start_key: String,
    end_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<Epoch>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    peers: Vec<MetaPeer>,
    leader: MetaPeer,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    down_peers: Vec<PeerStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending_peers: Vec<MetaPeer>,
    cpu_usage: u64,
    written_bytes: u64,
    read_bytes: u64,
    written_keys: u64,
    read_keys: u64,
    approximate_size: i64,
    approximate_keys: i64,
    approximate_kv_size: i64,
    approximate_columnar_kv_size: i64,
}

impl RegionInfo {
    /// The Region as PD sees it: its leader is PD's view (possibly stale),
    /// its down peers those `GetRegion` reports.
    fn new(state: &ClusterState, region: &crate::state::SimRegion) -> RegionInfo {
        let meta = &region.meta;
        let leader = region.pd_leader.and_then(|id| region.peer(id));
        RegionInfo {
            id: meta.id,
            start_key: hex_key(&meta.start_key),
            end_key: hex_key(&meta.end_key),
            epoch: meta.region_epoch.map(|e| Epoch {
                conf_ver: e.conf_ver,
                version: e.version,
            }),
            peers: meta.peers.iter().map(|p| MetaPeer::new(Some(p))).collect(),
            leader: MetaPeer::new(leader.as_ref()),
            down_peers: PdService::down_peers(state, meta)
                .into_iter()
                .map(|s| PeerStats {
                    peer: MetaPeer::new(s.peer.as_ref()),
                    down_seconds: s.down_seconds,
                })
                .collect(),
            pending_peers: Vec::new(),
            cpu_usage: 0,
            written_bytes: 0,
            read_bytes: 0,
            written_keys: 0,
            read_keys: 0,
            approximate_size: 0,
            approximate_keys: 0,
            approximate_kv_size: 0,
            approximate_columnar_kv_size: 0,
        }
    }
}

/// PD's `response.RegionsInfo`; `/regions/count` leaves `regions` nil,
/// which Go writes as `null`.
#[derive(Debug, Serialize)]
struct RegionsInfo {
    count: usize,
    regions: Option<Vec<RegionInfo>>,
}

/// `metapb.StoreLabel`.
#[derive(Debug, Serialize)]
struct StoreLabel {
    #[serde(skip_serializing_if = "String::is_empty")]
    key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    value: String,
}

/// PD's `response.MetaStore`: the embedded `metapb.Store` with its
/// `omitempty` fields, then `state_name`.
#[derive(Debug, Serialize)]
struct MetaStore {
    #[serde(skip_serializing_if = "is_zero_u64")]
    id: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    address: String,
    #[serde(skip_serializing_if = "is_zero_i32")]
    state: i32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    labels: Vec<StoreLabel>,
    #[serde(skip_serializing_if = "String::is_empty")]
    version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    peer_address: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    status_address: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    git_hash: String,
    #[serde(skip_serializing_if = "is_zero_i64")]
    start_timestamp: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    deploy_path: String,
    #[serde(skip_serializing_if = "is_zero_i64")]
    last_heartbeat: i64,
    #[serde(skip_serializing_if = "is_false")]
    physically_destroyed: bool,
    #[serde(skip_serializing_if = "is_zero_i32")]
    node_state: i32,
    state_name: String,
}

impl MetaStore {
    fn new(store: metapb::Store, state_name: String) -> MetaStore {
        MetaStore {
            id: store.id,
            address: store.address,
            state: store.state,
            labels: store
                .labels
                .into_iter()
                .map(|l| StoreLabel {
                    key: l.key,
                    value: l.value,
                })
                .collect(),
            version: store.version,
            peer_address: store.peer_address,
            status_address: store.status_address,
            git_hash: store.git_hash,
            start_timestamp: store.start_timestamp,
            deploy_path: store.deploy_path,
            last_heartbeat: store.last_heartbeat,
            physically_destroyed: store.physically_destroyed,
            node_state: store.node_state,
            state_name,
        }
    }
}

/// `units.BytesSize(0)`, as PD's `typeutil.ByteSize` writes a size of 0.
const ZERO_BYTES: &str = "0B";

/// PD's `response.StoreStatus`. The weights and scores are Go `float64`s,
/// which `encoding/json` writes without a fraction when whole, as these
/// always are; the simulator has no disk, so every size is 0.
#[derive(Debug, Serialize)]
struct StoreStatus {
    capacity: &'static str,
    available: &'static str,
    used_size: &'static str,
    leader_count: usize,
    leader_weight: u64,
    leader_score: usize,
    leader_size: i64,
    region_count: usize,
    region_weight: u64,
    region_score: u64,
    region_size: i64,
    #[serde(skip_serializing_if = "is_zero_usize")]
    learner_count: usize,
    #[serde(skip_serializing_if = "is_zero_usize")]
    witness_count: usize,
    #[serde(skip_serializing_if = "is_false")]
    is_busy: bool,
}

/// PD's `response.StoreInfo`.
#[derive(Debug, Serialize)]
struct StoreInfo {
    store: MetaStore,
    status: StoreStatus,
}

impl StoreInfo {
    fn new(state: &ClusterState, store_id: u64) -> Option<StoreInfo> {
        let meta = PdService::store_meta(state, store_id)?;
        let store = state.stores.get(&store_id)?;
        // An Up store whose heartbeats stopped is "Disconnected" to PD
        // (after 20 s), "Down" only after max-store-down-time (30 min).
        let state_name = if store.up { "Up" } else { "Disconnected" };
        let mut status = StoreStatus {
            capacity: ZERO_BYTES,
            available: ZERO_BYTES,
            used_size: ZERO_BYTES,
            leader_count: 0,
            leader_weight: 1,
            leader_score: 0,
            leader_size: 0,
            region_count: 0,
            region_weight: 1,
            region_score: 0,
            region_size: 0,
            learner_count: 0,
            witness_count: 0,
            is_busy: store.busy.is_some(),
        };
        for region in state.regions.values() {
            let Some(peer) = region.peer_on_store(store_id) else {
                continue;
            };
            status.region_count += 1;
            if peer.role == metapb::PeerRole::Learner as i32 {
                status.learner_count += 1;
            }
            if peer.is_witness {
                status.witness_count += 1;
            }
            if region.pd_leader == Some(peer.id) {
                status.leader_count += 1;
            }
        }
        // PD's default leader-schedule-policy "count": leaders / weight.
        status.leader_score = status.leader_count;
        Some(StoreInfo {
            store: MetaStore::new(meta, state_name.to_owned()),
            status,
        })
    }
}

/// PD's `response.StoresInfo`.
#[derive(Debug, Serialize)]
struct StoresInfo {
    count: usize,
    stores: Vec<StoreInfo>,
}

/// `pdpb.ResponseHeader` (no error: the simulator answers none here).
#[derive(Debug, Serialize)]
struct HeaderInfo {
    #[serde(skip_serializing_if = "is_zero_u64")]
    cluster_id: u64,
}

/// `pdpb.Member`.
#[derive(Debug, Serialize)]
struct MemberInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero_u64")]
    member_id: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    peer_urls: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    client_urls: Vec<String>,
    #[serde(skip_serializing_if = "is_zero_i32")]
    leader_priority: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    deploy_path: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    binary_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    git_hash: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    dc_location: String,
}

impl From<&pdpb::Member> for MemberInfo {
    fn from(m: &pdpb::Member) -> Self {
        MemberInfo {
            name: m.name.clone(),
            member_id: m.member_id,
            peer_urls: m.peer_urls.clone(),
            client_urls: m.client_urls.clone(),
            leader_priority: m.leader_priority,
            deploy_path: m.deploy_path.clone(),
            binary_version: m.binary_version.clone(),
            git_hash: m.git_hash.clone(),
            dc_location: m.dc_location.clone(),
        }
    }
}

/// `pdpb.GetMembersResponse`, the same the gRPC `GetMembers` answers.
#[derive(Debug, Serialize)]
struct MembersInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<HeaderInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    members: Vec<MemberInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<MemberInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    etcd_leader: Option<MemberInfo>,
}

impl From<&pdpb::GetMembersResponse> for MembersInfo {
    fn from(r: &pdpb::GetMembersResponse) -> Self {
        MembersInfo {
            header: r.header.as_ref().map(|h| HeaderInfo {
                cluster_id: h.cluster_id,
            }),
            members: r.members.iter().map(MemberInfo::from).collect(),
            leader: r.leader.as_ref().map(MemberInfo::from),
            etcd_leader: r.etcd_leader.as_ref().map(MemberInfo::from),
        }
    }
}

/// PD's `api.Health`: a member is healthy when it answers (up, not hung).
#[derive(Debug, Serialize)]
struct Health {
    name: String,
    member_id: u64,
    client_urls: Vec<String>,
    health: bool,
}

impl Health {
    fn new(state: &ClusterState, index: usize) -> Option<Health> {
        let m = state.pd_members.get(index)?;
        Some(Health {
            name: m.name.clone(),
            member_id: m.member_id,
            client_urls: vec![format!("http://{}", m.address)],
            health: m.up && !m.hung,
        })
    }
}

/// A pingcap/errors error as `encoding/json` writes it (its
/// `MarshalJSON`).
#[derive(Debug, Serialize)]
struct PdError {
    class: i32,
    code: i32,
    message: &'static str,
    rfccode: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_routes_pd_serves() {
        assert_eq!(Route::of("/pd/api/v1/regions"), Some(Route::Regions));
        assert_eq!(
            Route::of("/pd/api/v1/region/id/1000"),
            Some(Route::RegionById("1000"))
        );
        assert_eq!(Route::of("/pd/api/v1/region/id/"), None);
        assert_eq!(Route::of("/pd/api/v1/region/id/1/2"), None);
        assert_eq!(Route::of("/pd/api/v1/regions/"), None);
        assert_eq!(Route::of("/nothing"), None);
        assert!(Route::Health.local_only());
        assert!(!Route::Regions.local_only());
    }

    #[test]
    fn ids_parse_as_go_parses_them() {
        assert_eq!(parse_uint("42"), Ok(42));
        assert_eq!(
            parse_uint("+4"),
            Err("strconv.ParseUint: parsing \"+4\": invalid syntax".to_owned())
        );
        assert_eq!(
            parse_uint("99999999999999999999"),
            Err(
                "strconv.ParseUint: parsing \"99999999999999999999\": value out of range"
                    .to_owned()
            )
        );
    }

    #[test]
    fn keys_are_upper_case_hex_and_peers_keep_gos_field_order() {
        assert_eq!(hex_key(b"g\x00\xfe"), "6700FE");
        let learner = metapb::Peer {
            id: 5,
            store_id: 2,
            role: metapb::PeerRole::Learner as i32,
            is_witness: false,
        };
        assert_eq!(
            serde_json::to_string(&MetaPeer::new(Some(&learner))).ok(),
            Some(
                r#"{"role_name":"Learner","is_learner":true,"id":5,"store_id":2,"role":1}"#
                    .to_owned()
            )
        );
        assert_eq!(
            serde_json::to_string(&MetaPeer::new(None)).ok(),
            Some(r#"{"role_name":""}"#.to_owned())
        );
    }
}
