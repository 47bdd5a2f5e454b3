//! A small test-only PD over real gRPC on 127.0.0.1: several members, one
//! leader (the others answer `Unavailable` "not leader", as PD followers
//! do), members that go down (listener closed, open connections answer
//! `Unavailable`) or hang, a configurable cluster id, and RPC counters.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use tikv_plan::proto::metapb;
use tikv_plan::proto::pdpb::{
    self,
    pd_server::{Pd, PdServer},
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

/// What the fake PD knows and how it behaves.
#[derive(Debug, Default)]
pub struct PdState {
    pub cluster_id: u64,
    pub leader: usize,
    /// `http://addr` of each member.
    pub urls: Vec<String>,
    pub down: Vec<bool>,
    /// Every handler of every member waits forever.
    pub hang: bool,
    /// Report no leader in GetMembers.
    pub no_leader: bool,
    pub regions: Vec<(metapb::Region, Option<metapb::Peer>)>,
    pub stores: Vec<metapb::Store>,
    pub tso_physical: i64,
    pub tso_logical: i64,
    /// Calls answered, by (member, method).
    pub calls: HashMap<(usize, &'static str), u64>,
}

impl PdState {
    pub fn calls_to(&self, method: &str) -> u64 {
        self.calls
            .iter()
            .filter(|((_, m), _)| *m == method)
            .map(|(_, n)| *n)
            .sum()
    }
}

#[derive(Clone)]
struct MemberService {
    index: usize,
    state: Arc<Mutex<PdState>>,
}

impl MemberService {
    /// Counts the call and refuses it when this member is down or not the
    /// leader (`leader_only`). Waits forever when the PD hangs.
    async fn admit(&self, method: &'static str, leader_only: bool) -> Result<(), Status> {
        let hang = {
            let mut state = self.state.lock().unwrap();
            if state.down[self.index] {
                return Err(Status::unavailable("member is down"));
            }
            *state.calls.entry((self.index, method)).or_default() += 1;
            if leader_only && state.leader != self.index {
                return Err(Status::unavailable("not leader"));
            }
            state.hang
        };
        if hang {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

fn error_header(
    cluster_id: u64,
    error_type: pdpb::ErrorType,
    message: &str,
) -> pdpb::ResponseHeader {
    pdpb::ResponseHeader {
        cluster_id,
        error: Some(pdpb::Error {
            r#type: error_type as i32,
            message: message.to_owned(),
        }),
    }
}

fn member(state: &PdState, i: usize) -> pdpb::Member {
    pdpb::Member {
        name: format!("pd-{i}"),
        member_id: i as u64 + 1,
        client_urls: vec![state.urls[i].clone()],
        ..Default::default()
    }
}

#[tonic::async_trait]
impl Pd for MemberService {
    async fn get_members(
        &self,
        _request: Request<pdpb::GetMembersRequest>,
    ) -> Result<Response<pdpb::GetMembersResponse>, Status> {
        self.admit("GetMembers", false).await?;
        let state = self.state.lock().unwrap();
        let members = (0..state.urls.len()).map(|i| member(&state, i)).collect();
        let leader = (!state.no_leader).then(|| member(&state, state.leader));
        Ok(Response::new(pdpb::GetMembersResponse {
            header: Some(self.header_of(&state)),
            members,
            leader: leader.clone(),
            etcd_leader: leader,
            ..Default::default()
        }))
    }

    type TsoStream = Pin<Box<dyn Stream<Item = Result<pdpb::TsoResponse, Status>> + Send>>;

    async fn tso(
        &self,
        request: Request<tonic::Streaming<pdpb::TsoRequest>>,
    ) -> Result<Response<Self::TsoStream>, Status> {
        self.admit("Tso", true).await?;
        let state = Arc::clone(&self.state);
        let index = self.index;
        let responses = request.into_inner().map(move |request| {
            let request = request?;
            let mut state = state.lock().unwrap();
            // Like PD, a member that lost leadership (or went down) fails
            // the stream instead of handing out timestamps.
            if state.down[index] || state.leader != index {
                return Err(Status::unavailable("not leader"));
            }
            state.tso_logical += i64::from(request.count);
            if state.tso_logical > 1000 {
                state.tso_physical += 1;
                state.tso_logical = i64::from(request.count);
            }
            Ok(pdpb::TsoResponse {
                header: Some(pdpb::ResponseHeader {
                    cluster_id: state.cluster_id,
                    error: None,
                }),
                count: request.count,
                timestamp: Some(pdpb::Timestamp {
                    physical: state.tso_physical,
                    logical: state.tso_logical,
                    suffix_bits: 0,
                }),
            })
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn get_store(
        &self,
        request: Request<pdpb::GetStoreRequest>,
    ) -> Result<Response<pdpb::GetStoreResponse>, Status> {
        self.admit("GetStore", true).await?;
        let id = request.into_inner().store_id;
        let state = self.state.lock().unwrap();
        let store = state.stores.iter().find(|s| s.id == id).cloned();
        let header = match store {
            Some(_) => self.header_of(&state),
            None => error_header(
                state.cluster_id,
                pdpb::ErrorType::Unknown,
                "invalid store ID",
            ),
        };
        Ok(Response::new(pdpb::GetStoreResponse {
            header: Some(header),
            store,
            ..Default::default()
        }))
    }

    async fn get_all_stores(
        &self,
        request: Request<pdpb::GetAllStoresRequest>,
    ) -> Result<Response<pdpb::GetAllStoresResponse>, Status> {
        self.admit("GetAllStores", true).await?;
        let exclude = request.into_inner().exclude_tombstone_stores;
        let state = self.state.lock().unwrap();
        let stores = state
            .stores
            .iter()
            .filter(|s| !exclude || s.state != metapb::StoreState::Tombstone as i32)
            .cloned()
            .collect();
        Ok(Response::new(pdpb::GetAllStoresResponse {
            header: Some(self.header_of(&state)),
            stores,
        }))
    }

    /// Like an older PD: Region scans are not served, so a client must fall
    /// back to one `GetRegion` per Region.
    async fn scan_regions(
        &self,
        _request: Request<pdpb::ScanRegionsRequest>,
    ) -> Result<Response<pdpb::ScanRegionsResponse>, Status> {
        Err(Status::unimplemented(
            "ScanRegions is not served by this PD",
        ))
    }

    async fn get_prev_region(
        &self,
        _request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        Err(Status::unimplemented(
            "GetPrevRegion is not served by this PD",
        ))
    }

    async fn get_region(
        &self,
        request: Request<pdpb::GetRegionRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.admit("GetRegion", true).await?;
        let key = request.into_inner().region_key;
        let state = self.state.lock().unwrap();
        let found = state
            .regions
            .iter()
            .find(|(r, _)| key >= r.start_key && (r.end_key.is_empty() || key < r.end_key));
        Ok(Response::new(self.region_response(&state, found)))
    }

    async fn get_region_by_id(
        &self,
        request: Request<pdpb::GetRegionByIdRequest>,
    ) -> Result<Response<pdpb::GetRegionResponse>, Status> {
        self.admit("GetRegionByID", true).await?;
        let id = request.into_inner().region_id;
        let state = self.state.lock().unwrap();
        let found = state.regions.iter().find(|(r, _)| r.id == id);
        Ok(Response::new(self.region_response(&state, found)))
    }

    // The PD-client tests need no GC safe point.
    async fn get_gc_safe_point(
        &self,
        _request: Request<pdpb::GetGcSafePointRequest>,
    ) -> Result<Response<pdpb::GetGcSafePointResponse>, Status> {
        Err(Status::unimplemented("the fake PD keeps no GC safe point"))
    }

    async fn update_gc_safe_point(
        &self,
        _request: Request<pdpb::UpdateGcSafePointRequest>,
    ) -> Result<Response<pdpb::UpdateGcSafePointResponse>, Status> {
        Err(Status::unimplemented("the fake PD keeps no GC safe point"))
    }
}

impl MemberService {
    fn header_of(&self, state: &PdState) -> pdpb::ResponseHeader {
        pdpb::ResponseHeader {
            cluster_id: state.cluster_id,
            error: None,
        }
    }

    fn region_response(
        &self,
        state: &PdState,
        found: Option<&(metapb::Region, Option<metapb::Peer>)>,
    ) -> pdpb::GetRegionResponse {
        match found {
            Some((region, leader)) => pdpb::GetRegionResponse {
                header: Some(self.header_of(state)),
                region: Some(region.clone()),
                leader: *leader,
                ..Default::default()
            },
            None => pdpb::GetRegionResponse {
                header: Some(error_header(
                    state.cluster_id,
                    pdpb::ErrorType::RegionNotFound,
                    "region not found",
                )),
                ..Default::default()
            },
        }
    }
}

struct MemberServer {
    addr: SocketAddr,
    accept_task: tokio::task::JoinHandle<()>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// A fake PD cluster of several members.
pub struct FakePd {
    pub state: Arc<Mutex<PdState>>,
    members: Vec<MemberServer>,
}

impl FakePd {
    /// `members` members, member 0 the leader; stores 1..=3 at the given
    /// addresses (`127.0.0.1:1` style placeholders when not connected to);
    /// Regions [""-"g") id 2 and ["g"-"") id 3, three peers each, leader on
    /// store 1.
    pub async fn start(members: usize, cluster_id: u64) -> FakePd {
        let state = Arc::new(Mutex::new(PdState {
            cluster_id,
            tso_physical: 1_000,
            down: vec![false; members],
            regions: default_regions(),
            stores: (1..=3)
                .map(|id| metapb::Store {
                    id,
                    address: format!("127.0.0.1:{}", 20160 + id),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }));
        let mut servers = Vec::new();
        for index in 0..members {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            state.lock().unwrap().urls.push(format!("http://{addr}"));
            // Our own accept loop, so closing the listener (aborting it)
            // makes new connections fail at once.
            let (tx, rx) = mpsc::unbounded_channel::<std::io::Result<TcpStream>>();
            let accept_task = tokio::spawn(async move {
                loop {
                    let accepted = listener.accept().await.map(|(s, _)| s);
                    if tx.send(accepted).is_err() {
                        return;
                    }
                }
            });
            let incoming = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            let (shutdown, stopped) = oneshot::channel::<()>();
            let service = MemberService {
                index,
                state: Arc::clone(&state),
            };
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(PdServer::new(service))
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    }),
            );
            servers.push(MemberServer {
                addr,
                accept_task,
                shutdown: Some(shutdown),
            });
        }
        FakePd {
            state,
            members: servers,
        }
    }

    /// `host:port` of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.addr.to_string()).collect()
    }

    pub fn url(&self, i: usize) -> String {
        format!("http://{}", self.members[i].addr)
    }

    pub fn transfer_leader(&self, i: usize) {
        self.state.lock().unwrap().leader = i;
    }

    /// Closes member `i`: new connections are refused, open ones answer
    /// `Unavailable` and are told to go away.
    pub fn member_down(&mut self, i: usize) {
        self.state.lock().unwrap().down[i] = true;
        let member = &mut self.members[i];
        member.accept_task.abort();
        if let Some(shutdown) = member.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    pub fn set_hang(&self, hang: bool) {
        self.state.lock().unwrap().hang = hang;
    }

    pub fn calls_to(&self, method: &str) -> u64 {
        self.state.lock().unwrap().calls_to(method)
    }

    pub fn set_store(&self, store: metapb::Store) {
        let mut state = self.state.lock().unwrap();
        state.stores.retain(|s| s.id != store.id);
        state.stores.push(store);
    }
}

impl Drop for FakePd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.member_down(i);
        }
    }
}

pub fn peer(id: u64, store_id: u64) -> metapb::Peer {
    metapb::Peer {
        id,
        store_id,
        ..Default::default()
    }
}

pub fn default_regions() -> Vec<(metapb::Region, Option<metapb::Peer>)> {
    let region = |id: u64, start: &[u8], end: &[u8]| {
        let peers: Vec<_> = (1..=3).map(|s| peer(id * 10 + s, s)).collect();
        let leader = Some(peers[0]);
        (
            metapb::Region {
                id,
                start_key: start.to_vec(),
                end_key: end.to_vec(),
                region_epoch: Some(metapb::RegionEpoch {
                    conf_ver: 1,
                    version: 1,
                }),
                peers,
                ..Default::default()
            },
            leader,
        )
    };
    vec![region(2, b"", b"g"), region(3, b"g", b"")]
}

/// An address nothing listens on: bound, then closed.
pub async fn dead_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

/// Slack on top of a computed time bound for scheduling and loopback round
/// trips.
pub const SLACK: std::time::Duration = std::time::Duration::from_millis(1500);

/// Short timeouts, so failure paths finish quickly.
pub fn config() -> tikv_plan::Config {
    tikv_plan::Config::default()
        .with_timeout(std::time::Duration::from_millis(300))
        .with_connect_timeout(std::time::Duration::from_millis(200))
}

/// Worst case of one PD call with `config`: every attempt asks the members
/// (connect + RPC), connects to the leader and sends the RPC, plus the
/// backoff delays of `PD_RETRY_BACKOFF`.
pub fn pd_call_bound(config: &tikv_plan::Config) -> std::time::Duration {
    let mut backoff = tikv_plan::pd::PD_RETRY_BACKOFF;
    let mut delays = std::time::Duration::ZERO;
    let mut attempts = 1;
    while let Some(d) = backoff.next_delay_duration() {
        delays += d;
        attempts += 1;
    }
    let per_attempt = 2 * config.connect_timeout + 2 * config.timeout;
    per_attempt * attempts + delays
}

/// A `PdRpcClient` connected through `endpoints` with [`config`].
pub async fn client(endpoints: &[String]) -> Arc<tikv_plan::pd::PdRpcClient> {
    Arc::new(
        tikv_plan::pd::PdRpcClient::connect(endpoints, &config())
            .await
            .unwrap(),
    )
}
