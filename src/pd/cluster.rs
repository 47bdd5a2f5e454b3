//! The connection to the PD leader: bootstrap with `GetMembers` on every
//! configured endpoint ([wire.md, "pdpb"](crate::spec::wire#pdpb)), cluster id
//! check, leader following, and bounded calls with retries.
//!
//! This file is long because bootstrap, leader following and every bounded PD
//! call share one connection state and one retry policy.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Code, Status};
use tracing::{debug, info, warn};

pub use crate::proto::pdpb::Timestamp;

use crate::backoff::Backoff;
use crate::classify::{classify_status_source, DispatchFailure};
use crate::proto::keyspacepb::{self, keyspace_client::KeyspaceClient as KeyspaceGrpcClient};
use crate::proto::metapb;
use crate::proto::pdpb::{self, pd_client::PdClient as PdGrpcClient};
use crate::region::cache::LoadedRegion;
use crate::region::{RegionId, RegionWithLeader, StoreId};
use crate::security::SecurityManager;
use crate::Failure;
use crate::{Error, ErrorSource, Result};

/// Retries of one PD call after a transport failure, an `Unavailable`
/// answer (a PD member that is not the leader) or a timeout. Each retry asks
/// the members for the leader again (a connect and an RPC) before it
/// connects to the leader and sends the call (another connect and RPC), so
/// the total is bounded by about
/// `(max_attempts + 1) * 2 * (connect timeout + RPC timeout)` plus these
/// delays.
pub const PD_RETRY_BACKOFF: Backoff = Backoff::no_jitter_backoff(50, 400, 3);

/// How many PD RPCs a client has sent, by kind, and how often it looked
/// for the leader. Counters only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PdStats {
    /// `GetMembers` calls (one per endpoint asked).
    pub get_members: u64,
    /// `GetRegion` calls.
    pub get_region: u64,
    /// `GetRegionByID` calls.
    pub get_region_by_id: u64,
    /// `GetStore` calls.
    pub get_store: u64,
    /// `GetAllStores` calls.
    pub get_all_stores: u64,
    /// `Tso` calls (one request each).
    pub tso: u64,
    /// Successful connections to a PD leader, the first one included.
    pub leader_connects: u64,
    /// `ScanRegions` calls (bulk Region loads).
    pub scan_regions: u64,
    /// `LoadKeyspace` calls.
    pub load_keyspace: u64,
}

#[derive(Debug, Default)]
struct PdCounters {
    get_members: AtomicU64,
    get_region: AtomicU64,
    get_region_by_id: AtomicU64,
    get_store: AtomicU64,
    get_all_stores: AtomicU64,
    update_gc_safe_point: AtomicU64,
    tso: AtomicU64,
    leader_connects: AtomicU64,
    scan_regions: AtomicU64,
    load_keyspace: AtomicU64,
}

impl PdCounters {
    fn snapshot(&self) -> PdStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PdStats {
            get_members: get(&self.get_members),
            get_region: get(&self.get_region),
            get_region_by_id: get(&self.get_region_by_id),
            get_store: get(&self.get_store),
            get_all_stores: get(&self.get_all_stores),
            tso: get(&self.tso),
            leader_connects: get(&self.leader_connects),
            scan_regions: get(&self.scan_regions),
            load_keyspace: get(&self.load_keyspace),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A channel to the PD member believed to be the leader.
#[derive(Debug)]
struct LeaderConnection {
    url: String,
    client: PdGrpcClient<Channel>,
    /// The same channel, for PD's other services (keyspaces).
    channel: Channel,
    /// Tells connections apart, so a failed call only drops the connection
    /// it used, not a newer one another call already set up.
    generation: u64,
}

/// Responses that carry a `pdpb::ResponseHeader`.
trait WithHeader {
    fn header(&self) -> Option<&pdpb::ResponseHeader>;
}

macro_rules! with_header {
    ($($t:ty),*) => {$(
        impl WithHeader for $t {
            fn header(&self) -> Option<&pdpb::ResponseHeader> {
                self.header.as_ref()
            }
        }
    )*};
}

with_header!(
    pdpb::ScanRegionsResponse,
    crate::proto::keyspacepb::LoadKeyspaceResponse,
    pdpb::GetRegionResponse,
    pdpb::GetStoreResponse,
    pdpb::GetAllStoresResponse,
    pdpb::TsoResponse,
    pdpb::UpdateGcSafePointResponse
);

/// The error of a PD response header, if it reports one.
fn header_error(header: Option<&pdpb::ResponseHeader>) -> Option<(pdpb::ErrorType, String)> {
    let error = header?.error.as_ref()?;
    let error_type = pdpb::ErrorType::try_from(error.r#type).unwrap_or(pdpb::ErrorType::Unknown);
    if error_type == pdpb::ErrorType::Ok {
        return None;
    }
    Some((error_type, error.message.clone()))
}

/// True when the failure says "this PD member cannot serve you" rather than
/// "this request is wrong": transport failures, timeouts, and `Unavailable`
/// (PD followers answer "not leader" with it).
fn calls_for_new_leader(status: &Status) -> bool {
    // The transport's own finding (the store path's classifier) first; then
    // the codes a PD member answers when it cannot serve (a follower says
    // "not leader" with `Unavailable`).
    // A reset of one stream leaves the connection to the leader usable.
    matches!(classify_status_source(status), Some(f) if f != DispatchFailure::StreamReset)
        || matches!(
            status.code(),
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded
        )
}

/// How leader discovery last ended, shared by the callers that waited for
/// it.
#[derive(Debug, Default)]
struct DiscoveryOutcome {
    /// Discoveries finished so far.
    finished: u64,
    /// The last one's failure, if it failed.
    failure: Option<SharedFailure>,
}

/// A discovery failure in a form every waiting caller can get a copy of.
#[derive(Debug, Clone)]
enum SharedFailure {
    Unavailable {
        endpoints: String,
        message: String,
        source: Option<ErrorSource>,
    },
    Mismatch {
        endpoint: String,
        expected: u64,
        found: u64,
    },
}

impl SharedFailure {
    fn of(error: &Error) -> Self {
        match error.failure() {
            Some(Failure::ClusterIdMismatch {
                endpoint,
                expected,
                found,
            }) => SharedFailure::Mismatch {
                endpoint: endpoint.clone(),
                expected: *expected,
                found: *found,
            },
            Some(Failure::PdUnavailable {
                endpoints,
                message,
                source,
            }) => SharedFailure::Unavailable {
                endpoints: endpoints.clone(),
                message: message.clone(),
                source: source.clone(),
            },
            _ => SharedFailure::Unavailable {
                endpoints: String::new(),
                message: error.to_string(),
                source: Some(ErrorSource::from(error.duplicate())),
            },
        }
    }

    fn share(&self) -> Error {
        match self.clone() {
            SharedFailure::Unavailable {
                endpoints,
                message,
                source,
            } => Error::from(Failure::PdUnavailable {
                endpoints,
                message: format!("{message} (a concurrent leader discovery just failed)"),
                source,
            }),
            SharedFailure::Mismatch {
                endpoint,
                expected,
                found,
            } => Error::from(Failure::ClusterIdMismatch {
                endpoint,
                expected,
                found,
            }),
        }
    }
}

/// `host:port` of a URL or address, for comparing endpoints written with and
/// without a scheme.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.trim_end_matches('/')
}

/// The connection to a PD cluster's leader.
///
/// [`Cluster::connect`] asks every endpoint for the members
/// (`GetMembers`), checks that all that answer report the same cluster id,
/// and connects to the first client URL of the leader. A call that fails with
/// a transport error, a timeout or `Unavailable` drops that connection and
/// asks the members again, with backoff ([`PD_RETRY_BACKOFF`]); when no
/// member can be reached the call fails with [`Failure::PdUnavailable`](crate::Failure::PdUnavailable).
/// Every RPC is bounded by the RPC timeout.
#[derive(Debug)]
pub struct Cluster {
    /// The endpoints the user gave.
    configured: Vec<String>,
    /// The configured endpoints plus client URLs of members PD reported.
    endpoints: RwLock<Vec<String>>,
    security: Arc<SecurityManager>,
    timeout: Duration,
    connect_timeout: Duration,
    retry_backoff: Backoff,
    /// The largest response decoded from PD.
    max_decoding_message_size: usize,
    /// 0 until the first member answers.
    cluster_id: AtomicU64,
    leader: RwLock<Option<Arc<LeaderConnection>>>,
    /// Serialises leader discovery, so concurrent failures cause one; holds
    /// how many discoveries finished and how the last one failed, so callers
    /// that waited for a discovery share its failure instead of each paying
    /// another one.
    discovery: tokio::sync::Mutex<DiscoveryOutcome>,
    /// `DiscoveryOutcome::finished`, readable without the lock.
    discoveries_finished: AtomicU64,
    generation: AtomicU64,
    counters: PdCounters,
}

impl Cluster {
    /// [`connect`](Self::connect) with a bound on the size of a decoded PD
    /// response (`Config::grpc_max_decoding_message_size`).
    pub async fn connect_with_limit(
        endpoints: &[String],
        security: Arc<SecurityManager>,
        timeout: Duration,
        connect_timeout: Duration,
        max_decoding_message_size: usize,
    ) -> Result<Cluster> {
        if endpoints.is_empty() {
            return Err(Error::from(Failure::InvalidArgument(
                "no PD endpoint was given; pass at least one host:port".to_owned(),
            )));
        }
        let cluster = Cluster {
            configured: endpoints.to_vec(),
            endpoints: RwLock::new(endpoints.to_vec()),
            security,
            timeout,
            connect_timeout,
            retry_backoff: PD_RETRY_BACKOFF,
            max_decoding_message_size,
            cluster_id: AtomicU64::new(0),
            leader: RwLock::new(None),
            discovery: tokio::sync::Mutex::new(DiscoveryOutcome::default()),
            discoveries_finished: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            counters: PdCounters::default(),
        };
        let mut backoff = cluster.retry_backoff.clone();
        loop {
            match cluster.current_leader().await {
                Ok(_) => return Ok(cluster),
                Err(e) if is_cluster_id_mismatch(&e) => return Err(e),
                Err(e) => match backoff.next_delay_duration() {
                    Some(delay) => {
                        debug!("PD bootstrap failed ({e}); retrying in {delay:?}");
                        tokio::time::sleep(delay).await;
                    }
                    None => return Err(cluster.unavailable(e)),
                },
            }
        }
    }

    /// The cluster id every member reported.
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id.load(Ordering::Acquire)
    }

    /// The URL of the PD leader currently connected, if any.
    pub fn leader_url(&self) -> Option<String> {
        self.read_leader().map(|c| c.url.clone())
    }

    /// The per-RPC timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many PD RPCs were sent, by kind.
    pub fn stats(&self) -> PdStats {
        self.counters.snapshot()
    }

    /// The Region containing `key`, with PD's view of its leader.
    /// [`Error::RegionForKeyNotFound`] when PD has none; [`Failure::Pd`](crate::Failure::Pd) when
    /// PD answers with a Region that does not hold `key`.
    pub async fn get_region(&self, key: &[u8]) -> Result<LoadedRegion> {
        let timeout = self.timeout;
        let response = self
            .call(
                "GetRegion",
                &self.counters.get_region,
                |mut client, header| {
                    let request = bounded(
                        pdpb::GetRegionRequest {
                            header: Some(header),
                            region_key: key.to_vec(),
                            need_buckets: false,
                        },
                        timeout,
                    );
                    async move { Ok(client.get_region(request).await?.into_inner()) }
                },
            )
            .await;
        let not_found = || Error::RegionForKeyNotFound { key: key.to_vec() };
        let loaded = region_from_response(response, not_found)?;
        Ok(LoadedRegion {
            region: super::region_holding_key(loaded.region, key)?,
            ..loaded
        })
    }

    /// The Region with id `region_id`, with PD's view of its leader.
    /// [`Failure::RegionNotFoundInPd`](crate::Failure::RegionNotFoundInPd) when PD has none.
    pub async fn get_region_by_id(&self, region_id: RegionId) -> Result<LoadedRegion> {
        let timeout = self.timeout;
        let response = self
            .call(
                "GetRegionByID",
                &self.counters.get_region_by_id,
                |mut client, header| {
                    let request = bounded(
                        pdpb::GetRegionByIdRequest {
                            header: Some(header),
                            region_id,
                            need_buckets: false,
                        },
                        timeout,
                    );
                    async move { Ok(client.get_region_by_id(request).await?.into_inner()) }
                },
            )
            .await;
        region_from_response(response, || {
            Error::from(Failure::RegionNotFoundInPd { region_id })
        })
    }

    /// The store with id `store_id` (tombstones included; the caller
    /// decides). [`Failure::StoreNotFound`](crate::Failure::StoreNotFound) when PD has none.
    pub async fn get_store(&self, store_id: StoreId) -> Result<metapb::Store> {
        let timeout = self.timeout;
        let response = self
            .call(
                "GetStore",
                &self.counters.get_store,
                |mut client, header| {
                    let request = bounded(
                        pdpb::GetStoreRequest {
                            header: Some(header),
                            store_id,
                        },
                        timeout,
                    );
                    async move { Ok(client.get_store(request).await?.into_inner()) }
                },
            )
            .await?;
        response
            .store
            .filter(|s| s.id != 0)
            .ok_or(Error::from(Failure::StoreNotFound { store_id }))
    }

    /// Every store PD knows; tombstones only when `exclude_tombstones` is
    /// false.
    pub async fn get_all_stores(&self, exclude_tombstones: bool) -> Result<Vec<metapb::Store>> {
        let timeout = self.timeout;
        let response = self
            .call(
                "GetAllStores",
                &self.counters.get_all_stores,
                |mut client, header| {
                    let request = bounded(
                        pdpb::GetAllStoresRequest {
                            header: Some(header),
                            exclude_tombstone_stores: exclude_tombstones,
                        },
                        timeout,
                    );
                    async move { Ok(client.get_all_stores(request).await?.into_inner()) }
                },
            )
            .await?;
        Ok(response.stores)
    }

    /// Asks PD to move the GC safe point to `safe_point`; returns the safe
    /// point PD holds afterwards (it never moves back).
    pub async fn update_gc_safe_point(&self, safe_point: u64) -> Result<u64> {
        let timeout = self.timeout;
        let response = self
            .call(
                "UpdateGCSafePoint",
                &self.counters.update_gc_safe_point,
                |mut client, header| {
                    let request = bounded(
                        pdpb::UpdateGcSafePointRequest {
                            header: Some(header),
                            safe_point,
                        },
                        timeout,
                    );
                    async move { Ok(client.update_gc_safe_point(request).await?.into_inner()) }
                },
            )
            .await?;
        Ok(response.new_safe_point)
    }

    /// Up to `limit` Regions from the one holding `start` to `end`
    /// (exclusive; empty: the end of the key space), in key order, with PD's
    /// view of their leaders: one `ScanRegions` call.
    pub async fn scan_regions(
        &self,
        start: &[u8],
        end: &[u8],
        limit: i32,
    ) -> Result<Vec<RegionWithLeader>> {
        let timeout = self.timeout;
        let response = self
            .call(
                "ScanRegions",
                &self.counters.scan_regions,
                |mut client, header| {
                    let request = bounded(
                        pdpb::ScanRegionsRequest {
                            header: Some(header),
                            start_key: start.to_vec(),
                            limit,
                            end_key: end.to_vec(),
                        },
                        timeout,
                    );
                    async move { Ok(client.scan_regions(request).await?.into_inner()) }
                },
            )
            .await?;
        // PD answers with `regions`; older PDs only with the two lists.
        let pairs: Vec<(Option<metapb::Region>, Option<metapb::Peer>)> =
            if response.regions.is_empty() {
                let mut leaders = response.leaders.into_iter();
                response
                    .region_metas
                    .into_iter()
                    .map(|r| (Some(r), leaders.next().filter(|p| p.id != 0)))
                    .collect()
            } else {
                response
                    .regions
                    .into_iter()
                    .map(|r| (r.region, r.leader.filter(|p| p.id != 0)))
                    .collect()
            };
        let mut regions = Vec::with_capacity(pairs.len());
        for (region, leader) in pairs {
            let Some(region) = region else {
                return Err(Error::from(Failure::Pd {
                    error_type: pdpb::ErrorType::Unknown,
                    message: "PD answered ScanRegions with an entry without a Region".to_owned(),
                }));
            };
            regions.push(RegionWithLeader::new(region, leader));
        }
        Ok(regions)
    }

    /// The metadata of the keyspace named `name` (`keyspacepb.Keyspace`'s
    /// `LoadKeyspace`). [`Error::KeyspaceNotFound`] when PD does not know it.
    pub async fn load_keyspace(&self, name: &str) -> Result<keyspacepb::KeyspaceMeta> {
        let timeout = self.timeout;
        let limit = self.max_decoding_message_size;
        let response = self
            .call_on_leader(
                "LoadKeyspace",
                &self.counters.load_keyspace,
                |leader, header| {
                    let mut client = KeyspaceGrpcClient::new(leader.channel.clone())
                        .max_decoding_message_size(limit);
                    let request = bounded(
                        keyspacepb::LoadKeyspaceRequest {
                            header: Some(header),
                            name: name.to_owned(),
                        },
                        timeout,
                    );
                    async move { Ok(client.load_keyspace(request).await?.into_inner()) }
                },
            )
            .await;
        match response {
            Ok(r) => r
                .keyspace
                .ok_or_else(|| Error::KeyspaceNotFound(name.to_owned())),
            Err(e) if matches!(e.failure(), Some(Failure::Pd { .. })) => {
                Err(Error::KeyspaceNotFound(name.to_owned()))
            }
            Err(e) => Err(e),
        }
    }

    /// Opens a `Tso` stream to the leader carrying `requests` (whose first
    /// request should already be queued: PD may answer the call only after
    /// it). Returns the responses and the leader connection's generation,
    /// for [`Cluster::tso_stream_failed`]. Counts one `Tso` call.
    pub(crate) async fn open_tso_stream(
        &self,
        requests: impl futures::Stream<Item = pdpb::TsoRequest> + Send + 'static,
    ) -> Result<(tonic::Streaming<pdpb::TsoResponse>, u64)> {
        let leader = self.current_leader().await?;
        let mut client = leader.client.clone();
        match tokio::time::timeout(self.timeout, client.tso(requests)).await {
            Ok(Ok(response)) => Ok((response.into_inner(), leader.generation)),
            Ok(Err(status)) => {
                if calls_for_new_leader(&status) {
                    self.drop_leader(leader.generation);
                }
                Err(status.into())
            }
            Err(_) => {
                self.drop_leader(leader.generation);
                Err(Error::from(Failure::Timeout {
                    what: format!("opening the TSO stream to {}", leader.url),
                    after: self.timeout,
                }))
            }
        }
    }

    /// A TSO stream on the leader connection `generation` broke: the next
    /// call looks for the leader again.
    pub(crate) fn tso_stream_failed(&self, generation: u64) {
        self.drop_leader(generation);
    }

    /// The retry schedule of PD calls.
    pub(crate) fn retry_backoff(&self) -> Backoff {
        self.retry_backoff.clone()
    }

    /// A failure after the retries, as [`Failure::PdUnavailable`](crate::Failure::PdUnavailable) naming the
    /// configured endpoints.
    pub(crate) fn unavailable_after_retries(&self, failure: Error) -> Error {
        self.unavailable(failure)
    }

    /// Counts one request sent on a TSO stream.
    pub(crate) fn count_tso_request(&self) {
        bump(&self.counters.tso);
    }

    /// The header of this client's PD requests.
    pub(crate) fn pd_request_header(&self) -> pdpb::RequestHeader {
        self.request_header()
    }

    /// Checks a TSO response's header (error, cluster id).
    pub(crate) fn check_tso_response(
        &self,
        response: pdpb::TsoResponse,
    ) -> Result<pdpb::TsoResponse> {
        let url = self.leader_url().unwrap_or_default();
        self.check_header(response, &url)
    }

    /// Sends one RPC to the leader, following leader changes: a failure
    /// that calls for a new leader drops the connection, backs off and asks
    /// the members again. Each attempt is bounded by the RPC timeout;
    /// a PD header error is returned as [`Failure::Pd`](crate::Failure::Pd).
    async fn call<T, F, Fut>(&self, what: &str, counter: &AtomicU64, mut rpc: F) -> Result<T>
    where
        T: WithHeader,
        F: FnMut(PdGrpcClient<Channel>, pdpb::RequestHeader) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        self.call_on_leader(what, counter, |leader, header| {
            rpc(leader.client.clone(), header)
        })
        .await
    }

    /// [`call`](Self::call) for any service of the leader: `rpc` gets the
    /// leader connection (its `pdpb.PD` client and its channel).
    async fn call_on_leader<T, F, Fut>(&self, what: &str, counter: &AtomicU64, rpc: F) -> Result<T>
    where
        T: WithHeader,
        F: FnMut(&LeaderConnection, pdpb::RequestHeader) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let call = self.call_on_leader_with_retries(what, counter, rpc);
        crate::telemetry::pd_request(what, call).await
    }

    async fn call_on_leader_with_retries<T, F, Fut>(
        &self,
        what: &str,
        counter: &AtomicU64,
        mut rpc: F,
    ) -> Result<T>
    where
        T: WithHeader,
        F: FnMut(&LeaderConnection, pdpb::RequestHeader) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let mut backoff = self.retry_backoff.clone();
        loop {
            let failure = match self.current_leader().await {
                Err(e) if is_cluster_id_mismatch(&e) => return Err(e),
                Err(e) => e,
                Ok(leader) => {
                    bump(counter);
                    let attempt =
                        crate::telemetry::pd_call(what, rpc(&leader, self.request_header()));
                    match tokio::time::timeout(self.timeout, attempt).await {
                        Ok(Ok(response)) => return self.check_header(response, &leader.url),
                        Ok(Err(status)) if !calls_for_new_leader(&status) => {
                            return Err(status.into())
                        }
                        Ok(Err(status)) => {
                            self.drop_leader(leader.generation);
                            Error::from(status)
                        }
                        Err(_) => {
                            self.drop_leader(leader.generation);
                            Error::from(Failure::Timeout {
                                what: format!("PD {what} on {}", leader.url),
                                after: self.timeout,
                            })
                        }
                    }
                }
            };
            match backoff.next_delay_duration() {
                Some(delay) => {
                    debug!("PD {what} failed ({failure}); asking the members again in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                None => {
                    warn!("PD {what} failed after retries: {failure}");
                    return Err(self.unavailable(failure));
                }
            }
        }
    }

    fn check_header<T: WithHeader>(&self, response: T, url: &str) -> Result<T> {
        if let Some((error_type, message)) = header_error(response.header()) {
            return Err(Error::from(Failure::Pd {
                error_type,
                message,
            }));
        }
        let found = response.header().map_or(0, |h| h.cluster_id);
        let expected = self.cluster_id();
        if found != 0 && found != expected {
            return Err(Error::from(Failure::ClusterIdMismatch {
                endpoint: url.to_owned(),
                expected,
                found,
            }));
        }
        Ok(response)
    }

    fn request_header(&self) -> pdpb::RequestHeader {
        pdpb::RequestHeader {
            cluster_id: self.cluster_id(),
            sender_id: 0,
        }
    }

    fn unavailable(&self, failure: Error) -> Error {
        match failure {
            e if matches!(e.failure(), Some(Failure::PdUnavailable { .. })) => e,
            e => Error::from(Failure::PdUnavailable {
                endpoints: self.configured.join(", "),
                message: e.to_string(),
                source: Some(ErrorSource::from(e)),
            }),
        }
    }

    fn read_leader(&self) -> Option<Arc<LeaderConnection>> {
        crate::sync::read(&self.leader).clone()
    }

    fn drop_leader(&self, generation: u64) {
        let mut leader = crate::sync::write(&self.leader);
        if leader.as_ref().is_some_and(|c| c.generation == generation) {
            info!("dropping the PD leader connection (generation {generation}); the next call rediscovers the leader");
            *leader = None;
        }
    }

    /// The leader connection, discovering the leader if there is none.
    async fn current_leader(&self) -> Result<Arc<LeaderConnection>> {
        if let Some(leader) = self.read_leader() {
            return Ok(leader);
        }
        let seen = self.discoveries_finished.load(Ordering::Acquire);
        let mut outcome = self.discovery.lock().await;
        // Another call may have found the leader while we waited.
        if let Some(leader) = self.read_leader() {
            return Ok(leader);
        }
        // A discovery finished while we waited, and failed: during a PD
        // outage, K waiting callers share one failure instead of paying K
        // connect timeouts one after another.
        if outcome.finished != seen {
            if let Some(failure) = &outcome.failure {
                return Err(failure.share());
            }
        }
        let discovered = self.discover_leader().await;
        outcome.finished += 1;
        self.discoveries_finished
            .store(outcome.finished, Ordering::Release);
        let leader = match discovered {
            Ok(leader) => Arc::new(leader),
            Err(e) => {
                warn!("PD leader discovery failed: {e}");
                outcome.failure = Some(SharedFailure::of(&e));
                return Err(e);
            }
        };
        outcome.failure = None;
        *crate::sync::write(&self.leader) = Some(Arc::clone(&leader));
        Ok(leader)
    }

    async fn fetch_members(&self, endpoint: &str) -> Result<pdpb::GetMembersResponse> {
        bump(&self.counters.get_members);
        let channel = crate::telemetry::connect(
            "pd",
            endpoint,
            self.security
                .connect_channel(endpoint, self.connect_timeout, self.timeout),
        )
        .await?;
        let mut client =
            PdGrpcClient::new(channel).max_decoding_message_size(self.max_decoding_message_size);
        let request = bounded(
            pdpb::GetMembersRequest {
                header: Some(self.request_header()),
            },
            self.timeout,
        );
        match tokio::time::timeout(
            self.timeout,
            crate::telemetry::pd_call("GetMembers", client.get_members(request)),
        )
        .await
        {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(status.into()),
            Err(_) => Err(Error::from(Failure::Timeout {
                what: format!("PD GetMembers on {endpoint}"),
                after: self.timeout,
            })),
        }
    }

    /// Asks every known endpoint for the members at once, checks the cluster
    /// ids, and connects to the first reported leader that accepts.
    async fn discover_leader(&self) -> Result<LeaderConnection> {
        let endpoints = crate::sync::read(&self.endpoints).clone();
        let answers =
            futures::future::join_all(endpoints.iter().map(|e| self.fetch_members(e))).await;
        let mut expected = self.cluster_id();
        let mut leader_urls: Vec<String> = Vec::new();
        let mut member_urls: Vec<String> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        // The last failure that was an error, kept whole as the source.
        let mut last_error: Option<Error> = None;
        for (endpoint, answer) in endpoints.iter().zip(answers) {
            let members = match answer {
                Ok(members) => members,
                Err(e) => {
                    failures.push(format!("{endpoint}: {e}"));
                    last_error = Some(e);
                    continue;
                }
            };
            if let Some((error_type, message)) = header_error(members.header.as_ref()) {
                failures.push(format!("{endpoint}: PD error {error_type:?}: {message}"));
                last_error = Some(Error::from(Failure::Pd {
                    error_type,
                    message,
                }));
                continue;
            }
            let cluster_id = members.header.as_ref().map_or(0, |h| h.cluster_id);
            if cluster_id == 0 {
                failures.push(format!("{endpoint}: answered with cluster id 0"));
                continue;
            }
            if expected == 0 {
                expected = cluster_id;
            } else if cluster_id != expected {
                return Err(Error::from(Failure::ClusterIdMismatch {
                    endpoint: endpoint.clone(),
                    expected,
                    found: cluster_id,
                }));
            }
            match members
                .leader
                .as_ref()
                .and_then(|l| l.client_urls.first())
                .filter(|u| !u.is_empty())
            {
                Some(url) => {
                    if !leader_urls.iter().any(|u| authority(u) == authority(url)) {
                        leader_urls.push(url.clone());
                    }
                }
                None => failures.push(format!("{endpoint}: reported no leader")),
            }
            member_urls.extend(members.members.iter().flat_map(|m| m.client_urls.clone()));
        }
        for url in leader_urls {
            match crate::telemetry::connect(
                "pd",
                &url,
                self.security
                    .connect_channel(&url, self.connect_timeout, self.timeout),
            )
            .await
            {
                Ok(channel) => {
                    self.cluster_id.store(expected, Ordering::Release);
                    self.remember_members(member_urls);
                    bump(&self.counters.leader_connects);
                    let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
                    info!("connected to PD leader {url} (cluster {expected})");
                    return Ok(LeaderConnection {
                        url,
                        client: PdGrpcClient::new(channel.clone())
                            .max_decoding_message_size(self.max_decoding_message_size),
                        channel,
                        generation,
                    });
                }
                Err(e) => {
                    failures.push(format!("leader {url}: {e}"));
                    last_error = Some(e);
                }
            }
        }
        Err(Error::from(Failure::PdUnavailable {
            endpoints: endpoints.join(", "),
            message: failures.join("; "),
            source: last_error.map(ErrorSource::from),
        }))
    }

    /// Adds member client URLs PD reported to the endpoints asked on the
    /// next discovery, so a leader change to a member the user did not list
    /// is still followed.
    fn remember_members(&self, urls: Vec<String>) {
        let mut endpoints = crate::sync::write(&self.endpoints);
        for url in urls {
            if !url.is_empty() && !endpoints.iter().any(|e| authority(e) == authority(&url)) {
                endpoints.push(url);
            }
        }
    }
}

/// A request bounded by `timeout` (sent as `grpc-timeout`; tonic also
/// enforces it on the client side).
fn bounded<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// True for PD endpoints of another cluster: no retry can help.
fn is_cluster_id_mismatch(error: &Error) -> bool {
    matches!(error.failure(), Some(Failure::ClusterIdMismatch { .. }))
}

fn region_from_response(
    response: Result<pdpb::GetRegionResponse>,
    not_found: impl FnOnce() -> Error,
) -> Result<LoadedRegion> {
    let response = match response {
        Err(e)
            if matches!(
                e.failure(),
                Some(Failure::Pd {
                    error_type: pdpb::ErrorType::RegionNotFound,
                    ..
                })
            ) =>
        {
            return Err(not_found())
        }
        other => other?,
    };
    let region = response.region.ok_or_else(not_found)?;
    // PD sends a default peer (id 0) when it knows no leader.
    let leader = response.leader.filter(|l| l.id != 0);
    Ok(LoadedRegion {
        region: RegionWithLeader::new(region, leader),
        has_down_peers: !response.down_peers.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_and_transport_failures_call_for_a_new_leader() {
        assert!(calls_for_new_leader(&Status::unavailable("not leader")));
        assert!(calls_for_new_leader(&Status::cancelled("timeout expired")));
        assert!(calls_for_new_leader(&Status::deadline_exceeded("late")));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let mut status = Status::unknown("transport");
        status.set_source(Arc::new(io));
        assert!(calls_for_new_leader(&status));
        assert!(!calls_for_new_leader(&Status::invalid_argument("bad")));
        assert!(!calls_for_new_leader(&Status::unknown("no source")));
    }

    #[test]
    fn header_errors_and_region_not_found_are_typed() {
        let header = pdpb::ResponseHeader {
            cluster_id: 1,
            error: Some(pdpb::Error {
                r#type: pdpb::ErrorType::NotBootstrapped as i32,
                message: "not bootstrapped".to_owned(),
            }),
        };
        assert_eq!(
            header_error(Some(&header)),
            Some((
                pdpb::ErrorType::NotBootstrapped,
                "not bootstrapped".to_owned()
            ))
        );
        let ok = pdpb::ResponseHeader {
            cluster_id: 1,
            error: Some(pdpb::Error::default()),
        };
        assert_eq!(header_error(Some(&ok)), None);
        assert_eq!(header_error(None), None);

        let missing = region_from_response(
            Err(Error::from(Failure::Pd {
                error_type: pdpb::ErrorType::RegionNotFound,
                message: String::new(),
            })),
            || Error::from(Failure::RegionNotFoundInPd { region_id: 9 }),
        );
        assert!(matches!(
            missing.as_ref().err().and_then(|e| e.failure()),
            Some(Failure::RegionNotFoundInPd { region_id: 9 })
        ));
        let empty = region_from_response(Ok(pdpb::GetRegionResponse::default()), || {
            Error::RegionForKeyNotFound { key: b"k".to_vec() }
        });
        assert!(matches!(empty, Err(Error::RegionForKeyNotFound { .. })));
        let no_leader = region_from_response(
            Ok(pdpb::GetRegionResponse {
                region: Some(metapb::Region {
                    id: 3,
                    ..Default::default()
                }),
                leader: Some(metapb::Peer::default()),
                ..Default::default()
            }),
            || Error::InternalError {
                message: String::new(),
            },
        )
        .unwrap();
        assert_eq!(no_leader.region.id(), 3);
        assert_eq!(no_leader.region.leader, None);
        assert!(!no_leader.has_down_peers);
        let down = region_from_response(
            Ok(pdpb::GetRegionResponse {
                region: Some(metapb::Region::default()),
                down_peers: vec![pdpb::PeerStats::default()],
                ..Default::default()
            }),
            || Error::InternalError {
                message: String::new(),
            },
        )
        .unwrap();
        assert!(down.has_down_peers);
    }

    #[test]
    fn authority_ignores_scheme_and_trailing_slash() {
        assert_eq!(authority("http://127.0.0.1:2379/"), "127.0.0.1:2379");
        assert_eq!(authority("https://pd:2379"), "pd:2379");
        assert_eq!(authority("127.0.0.1:2379"), "127.0.0.1:2379");
    }
}
