//! The simulated TiKV store service (`tikvpb.Tikv`): every raw method, with
//! the checks of [`ClusterState::admit`](super::state::ClusterState::admit)
//! before the data is touched.
//!
//! This file is long because it serves every raw method of `tikvpb.Tikv` (a
//! few lines of checks and data access each) and the BatchCommands stream,
//! over one store state.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::counters::Outcome;
use super::data::column_family;
use super::lock_wait::{WaitAnswer, WaitAsk};
use super::state::{HangMode, SimRegion};
use super::Shared;
use crate::proto::tikvpb::batch_commands_request::request::Cmd as BatchRequestCmd;
use crate::proto::tikvpb::batch_commands_response::{
    response::Cmd as BatchResponseCmd, Response as BatchResponse,
};
use crate::proto::tikvpb::tikv_server::Tikv;
use crate::proto::tikvpb::{BatchCommandsRequest, BatchCommandsResponse};
use crate::proto::{kvrpcpb, metapb};
use tikv_plan_proto::meta::key_in_region;
use tikv_plan_proto::methods::{KvMethod, KvResponse};

/// The TiKV service of one store.
#[derive(Clone)]
pub(crate) struct StoreService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) store_id: u64,
}

/// A command of the simulated store (raw in this file, transactional in
/// `txn.rs`): a method of the wire protocol's table ([`KvMethod`], which
/// names its response, label and error fields) and what the store does.
pub(super) trait StoreCommand: KvMethod {
    /// The first key of the request that lies outside `region`, if any.
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>>;
    /// Executes the request on the Region's data; Err is a key-level error
    /// (or a malformed request, for responses without an error field).
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String>;
    /// Whether the command acts on the whole store rather than one Region
    /// (`UnsafeDestroyRange`): it then skips the Region checks.
    fn store_wide(&self) -> bool {
        false
    }
    /// For a request that may wait for a lock (a pessimistic lock request
    /// answered with another transaction's lock): what it waits on, and
    /// how to answer it with the key error its wait ends in.
    fn lock_wait(&self, response: &Self::Response) -> Option<(WaitAsk, WaitAnswer<Self>)> {
        let _ = response;
        None
    }
}

pub(super) fn first_outside<'a>(
    region: &metapb::Region,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    keys.into_iter()
        .find(|k| !key_in_region(region, k))
        .map(|k| k.to_vec())
}

/// A scan's first bound must lie in the Region, both ends included: the
/// start key of a forward scan, or the exclusive upper bound of a reverse
/// scan (empty: the end of the key space, only valid in the last Region).
/// TiKV checks the key its cursor seeks to the same way
/// (`check_key_in_region_inclusive`), so a scan starting exactly at a
/// Region's edge is served, empty, rather than refused.
pub(super) fn scan_start_outside(
    region: &metapb::Region,
    start: &[u8],
    reverse: bool,
) -> Option<Vec<u8>> {
    let ok = if reverse && start.is_empty() {
        region.end_key.is_empty()
    } else {
        start >= region.start_key.as_slice()
            && (region.end_key.is_empty() || start <= region.end_key.as_slice())
    };
    (!ok).then(|| start.to_vec())
}

/// The key range `[low, high)` of a scan, clamped to the Region (an empty
/// `high` is unbounded).
pub(super) fn scan_bounds(
    region: &metapb::Region,
    start: &[u8],
    end: &[u8],
    reverse: bool,
) -> (Vec<u8>, Vec<u8>) {
    let (low, high) = if reverse { (end, start) } else { (start, end) };
    let low = low.max(region.start_key.as_slice()).to_vec();
    let high = match (high.is_empty(), region.end_key.is_empty()) {
        (true, _) => region.end_key.clone(),
        (false, true) => high.to_vec(),
        (false, false) => high.min(region.end_key.as_slice()).to_vec(),
    };
    (low, high)
}

fn pairs(kvs: Vec<(Vec<u8>, Vec<u8>)>, key_only: bool) -> Vec<kvrpcpb::KvPair> {
    kvs.into_iter()
        .map(|(key, value)| kvrpcpb::KvPair {
            error: None,
            key,
            value: if key_only { Vec::new() } else { value },
        })
        .collect()
}

pub(crate) mod forward;
mod server;
mod txn;

pub use forward::{ForwardDial, ForwardStream, FORWARDED_HOST};
pub(crate) use server::StoreServer;

impl StoreCommand for kvrpcpb::RawGetRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let value = data.get(column_family(&self.cf)?, &self.key, now);
        Ok(kvrpcpb::RawGetResponse {
            not_found: value.is_none(),
            value: value.unwrap_or_default(),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawBatchGetRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, self.keys.iter().map(Vec::as_slice))
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        let found = self
            .keys
            .iter()
            .filter_map(|k| data.get(cf, k, now).map(|v| (k.clone(), v)))
            .collect();
        Ok(kvrpcpb::RawBatchGetResponse {
            pairs: pairs(found, false),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawPutRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        data.put(
            column_family(&self.cf)?,
            self.key.clone(),
            self.value.clone(),
            self.ttl,
            now,
        );
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawBatchPutRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, self.pairs.iter().map(|p| p.key.as_slice()))
    }
    #[allow(deprecated)]
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        // kvproto: exactly one TTL applies to every pair; otherwise one per
        // pair, or none.
        let one_for_all = match self.ttls.as_slice() {
            [] => Some(self.ttl),
            [ttl] => Some(*ttl),
            ttls if ttls.len() == self.pairs.len() => None,
            ttls => {
                return Err(format!(
                    "{} ttls given for {} pairs: give one TTL per pair, one for all, or none",
                    ttls.len(),
                    self.pairs.len()
                ))
            }
        };
        for (i, pair) in self.pairs.iter().enumerate() {
            let ttl = one_for_all.unwrap_or_else(|| self.ttls[i]);
            data.put(cf, pair.key.clone(), pair.value.clone(), ttl, now);
        }
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawDeleteRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        data.delete(column_family(&self.cf)?, &self.key);
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawBatchDeleteRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, self.keys.iter().map(Vec::as_slice))
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        for key in &self.keys {
            data.delete(cf, key);
        }
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawScanRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        scan_start_outside(region, &self.start_key, self.reverse)
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let (data, region) = (&mut region.data, &region.meta);
        let cf = column_family(&self.cf)?;
        let (low, high) = scan_bounds(region, &self.start_key, &self.end_key, self.reverse);
        let kvs = data.scan(cf, &low, &high, self.limit as usize, self.reverse, now);
        Ok(kvrpcpb::RawScanResponse {
            kvs: pairs(kvs, self.key_only),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawBatchScanRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| scan_start_outside(region, &r.start_key, self.reverse))
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let (data, region) = (&mut region.data, &region.meta);
        let cf = column_family(&self.cf)?;
        let mut kvs = Vec::new();
        for range in &self.ranges {
            let (low, high) = scan_bounds(region, &range.start_key, &range.end_key, self.reverse);
            kvs.extend(pairs(
                data.scan(cf, &low, &high, self.each_limit as usize, self.reverse, now),
                self.key_only,
            ));
        }
        Ok(kvrpcpb::RawBatchScanResponse {
            kvs,
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawDeleteRangeRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        if !key_in_region(region, &self.start_key) {
            return Some(self.start_key.clone());
        }
        // The end may equal the Region's end; an unbounded end only fits the
        // last Region.
        let end_fits = if region.end_key.is_empty() {
            true
        } else {
            !self.end_key.is_empty() && self.end_key <= region.end_key
        };
        (!end_fits).then(|| self.end_key.clone())
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        if !self.end_key.is_empty() && self.start_key > self.end_key {
            return Err("delete range start key is after its end key".to_owned());
        }
        data.delete_range(cf, &self.start_key, &self.end_key);
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::RawCasRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let cf = column_family(&self.cf)?;
        let expected = (!self.previous_not_exist).then_some(self.previous_value.as_slice());
        let (succeed, previous) = data.compare_and_swap(
            cf,
            self.key.clone(),
            expected,
            self.value.clone(),
            self.ttl,
            now,
        );
        Ok(kvrpcpb::RawCasResponse {
            succeed,
            previous_not_exist: previous.is_none(),
            previous_value: previous.unwrap_or_default(),
            ..Default::default()
        })
    }
}

impl StoreCommand for kvrpcpb::RawGetKeyTtlRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        first_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let data = &mut region.data;
        let ttl = data.ttl(column_family(&self.cf)?, &self.key, now);
        Ok(kvrpcpb::RawGetKeyTtlResponse {
            not_found: ttl.is_none(),
            ttl: ttl.unwrap_or(0),
            ..Default::default()
        })
    }
}

/// What to do with a request after the lock is released.
enum Verdict<R> {
    Answer(R),
    Status(Status),
    Drop,
}

impl StoreCommand for kvrpcpb::RawChecksumRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| scan_start_outside(region, &r.start_key, false))
    }
    /// TiKV's `Crc64_Xor` over the default column family, on the user keys
    /// and values ([`tikv_plan_proto::checksum::RawChecksum`]).
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        let cf = column_family("")?;
        let mut sum = tikv_plan_proto::checksum::RawChecksum::default();
        for range in &self.ranges {
            let (low, high) = scan_bounds(&region.meta, &range.start_key, &range.end_key, false);
            for (key, value) in region.data.scan(cf, &low, &high, usize::MAX, false, now) {
                sum.add(&key, &value);
            }
        }
        Ok(kvrpcpb::RawChecksumResponse {
            checksum: sum.crc64_xor,
            total_kvs: sum.total_kvs,
            total_bytes: sum.total_bytes,
            ..Default::default()
        })
    }
}

/// The coprocessor plugin every simulated store carries (TiKV loads its
/// plugins from files; the simulator has this one built in).
pub const COPROCESSOR_PLUGIN: &str = "sim-count";
/// [`COPROCESSOR_PLUGIN`]'s version, matched against the request's semver
/// requirement.
pub const COPROCESSOR_PLUGIN_VERSION: &str = "1.2.0";

impl StoreCommand for kvrpcpb::RawCoprocessorRequest {
    fn key_outside(&self, region: &metapb::Region) -> Option<Vec<u8>> {
        self.ranges
            .iter()
            .find_map(|r| scan_start_outside(region, &r.start_key, false))
    }
    /// [`COPROCESSOR_PLUGIN`] answers `<data>:<count>`: the request's own
    /// data (built per Region by the client) and how many keys of the
    /// default column family its ranges hold in this Region. Another name,
    /// a version requirement the plugin does not meet, or one that does not
    /// parse is the response's `error`, as in TiKV.
    fn apply(&self, region: &mut SimRegion, now: Instant) -> Result<Self::Response, String> {
        if self.copr_name != COPROCESSOR_PLUGIN {
            return Err(format!(
                "no coprocessor plugin named {:?} is loaded",
                self.copr_name
            ));
        }
        let requirement = semver::VersionReq::parse(&self.copr_version_req).map_err(|e| {
            format!(
                "the version requirement {:?} does not parse: {e}",
                self.copr_version_req
            )
        })?;
        let version = semver::Version::parse(COPROCESSOR_PLUGIN_VERSION)
            .map_err(|e| format!("the plugin's own version does not parse: {e}"))?;
        if !requirement.matches(&version) {
            return Err(format!(
                "coprocessor plugin {COPROCESSOR_PLUGIN} {version} does not match {:?}",
                self.copr_version_req
            ));
        }
        let cf = column_family("")?;
        let mut count = 0usize;
        for range in &self.ranges {
            let (low, high) = scan_bounds(&region.meta, &range.start_key, &range.end_key, false);
            count += region
                .data
                .scan(cf, &low, &high, usize::MAX, false, now)
                .len();
        }
        let mut data = self.data.clone();
        data.extend_from_slice(format!(":{count}").as_bytes());
        Ok(kvrpcpb::RawCoprocessorResponse {
            data,
            ..Default::default()
        })
    }
}

/// TiKV refuses a request whose `Context.api_version` is not the store's
/// (`ApiVersionNotMatched`) before it looks at the Region or the data.
fn check_api_version(
    store: kvrpcpb::ApiVersion,
    context: Option<&kvrpcpb::Context>,
) -> Result<(), String> {
    let asked = context.map_or(0, |c| c.api_version);
    if asked == store as i32 {
        return Ok(());
    }
    let asked = kvrpcpb::ApiVersion::try_from(asked)
        .map(|v| format!("{v:?}"))
        .unwrap_or_else(|_| format!("unknown ({asked})"));
    Err(format!(
        "ApiVersionNotMatched: the store runs API {store:?} but the request uses API {asked}; \
         a client of an API v2 cluster sets a keyspace (Config::with_keyspace), a client of an \
         API v1 cluster does not"
    ))
}

impl StoreService {
    /// Serves one raw request: added latency, a hang, then the checks and
    /// the operation under the cluster lock, then a dropped response if one
    /// was ordered.
    async fn serve<C: StoreCommand>(
        &self,
        request: Request<C>,
    ) -> Result<Response<C::Response>, Status> {
        self.serve_command(request.into_inner())
            .await
            .map(Response::new)
    }

    /// Serves one request, unary or from a BatchCommands stream: the same
    /// checks, faults and counters either way.
    async fn serve_command<C: StoreCommand>(&self, command: C) -> Result<C::Response, Status> {
        let slow = {
            let state = self.shared.lock();
            state
                .stores
                .get(&self.store_id)
                .map(|s| s.slow)
                .unwrap_or_default()
        };
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
        self.wait_out_hang(C::LABEL).await?;

        // Locks the command released; their waiters are woken.
        let mut released = Vec::new();
        let (verdict, waiting) = {
            let mut state = self.shared.lock();
            if let Some(ctx) = command.context() {
                if let Some(store) = state.stores.get_mut(&self.store_id) {
                    store
                        .counters
                        .record_context_flags(ctx.replica_read, ctx.stale_read);
                }
            }
            let api_check = check_api_version(state.api_version, command.context());
            let (verdict, outcome) = if let Err(message) = api_check {
                (Self::key_error_verdict::<C>(message).0, Outcome::Invalid)
            } else if command.store_wide() {
                let now = Instant::now();
                let store_id = self.store_id;
                let mut regions: Vec<&mut SimRegion> = state
                    .regions
                    .values_mut()
                    .filter(|r| r.peer_on_store(store_id).is_some())
                    .collect();
                let mut result = Ok(None);
                for region in regions.iter_mut() {
                    result = command.apply(region, now).map(Some);
                    released.extend(region.mvcc.take_released());
                    if result.is_err() {
                        break;
                    }
                }
                match result {
                    Ok(resp) => (Verdict::Answer(resp.unwrap_or_default()), Outcome::Ok),
                    Err(message) => Self::key_error_verdict::<C>(message),
                }
            } else {
                let admitted = state.admit(self.store_id, command.context(), &|r| {
                    command.key_outside(r)
                });
                match admitted {
                    Err((error, outcome)) => (
                        Verdict::Answer(C::Response::with_region_error(*error)),
                        outcome,
                    ),
                    Ok(region_id) => {
                        let now = Instant::now();
                        match state.regions.get_mut(&region_id) {
                            None => (
                                Verdict::Status(Status::internal("region vanished")),
                                Outcome::Invalid,
                            ),
                            Some(region) => {
                                let applied = command.apply(region, now);
                                released.extend(region.mvcc.take_released());
                                match applied {
                                    Ok(mut resp) => {
                                        let outcome = if resp.has_key_error() {
                                            Outcome::KeyError
                                        } else {
                                            Outcome::Ok
                                        };
                                        (Verdict::Answer(resp), outcome)
                                    }
                                    Err(message) => Self::key_error_verdict::<C>(message),
                                }
                            }
                        }
                    }
                }
            };
            let mut verdict = verdict;
            let mut outcome = outcome;
            if let Some(store) = state.stores.get_mut(&self.store_id) {
                let served = matches!(outcome, Outcome::Ok | Outcome::KeyError);
                if served {
                    if let Some(i) = store.drop_next.iter().position(|m| m == C::LABEL) {
                        store.drop_next.remove(i);
                        verdict = Verdict::Drop;
                        outcome = Outcome::Dropped;
                    }
                }
                store.counters.record(C::LABEL, outcome);
            }
            let now = Instant::now();
            self.shared.wake_released(&mut state, released, now);
            // A request that met a lock may wait for it (or close a cycle).
            let waiting = match &mut verdict {
                Verdict::Answer(response) => state.lock_waits.meet(&command, response, now),
                _ => None,
            };
            tracing::debug!(
                "simulated store {} answered {} for region {} with {}",
                self.store_id,
                C::LABEL,
                command.context().map(|c| c.region_id).unwrap_or(0),
                outcome.name()
            );
            (verdict, waiting)
        };
        if let Some((ask, wait, answer)) = waiting {
            return Ok(answer(self.shared.wait_for_lock(&ask, wait).await));
        }
        match verdict {
            Verdict::Answer(resp) => Ok(resp),
            Verdict::Status(status) => Err(status),
            Verdict::Drop => {
                // The write is applied; now the client loses the answer with
                // its connection.
                self.shared.reset_store_connections(self.store_id);
                Err(Status::unavailable("simulated dropped response"))
            }
        }
    }

    /// The answer to a request `apply` refused: a key error in the response,
    /// or a gRPC status when the response has no error field.
    fn key_error_verdict<C: StoreCommand>(message: String) -> (Verdict<C::Response>, Outcome) {
        match C::Response::with_abort(message.clone()) {
            Some(resp) => (Verdict::Answer(resp), Outcome::KeyError),
            None => (
                Verdict::Status(Status::invalid_argument(message)),
                Outcome::Invalid,
            ),
        }
    }

    /// Waits while the store hangs in `HangMode::Respond`. Returns an error
    /// (never delivered: the connection is gone) when the store goes down or
    /// the cluster shuts down meanwhile.
    async fn wait_out_hang(&self, method: &'static str) -> Result<(), Status> {
        let mut changes = self.shared.faults.subscribe();
        let mut counted = false;
        loop {
            {
                let mut state = self.shared.lock();
                if state.shutdown {
                    return Err(Status::unavailable("simulated cluster shut down"));
                }
                let Some(store) = state.stores.get_mut(&self.store_id) else {
                    return Ok(());
                };
                if !store.up {
                    return Err(Status::unavailable("simulated store is down"));
                }
                if store.hang != Some(HangMode::Respond) {
                    return Ok(());
                }
                if !counted {
                    store.counters.record(method, Outcome::Hung);
                    counted = true;
                }
            }
            if changes.changed().await.is_err() {
                return Err(Status::unavailable("simulated cluster shut down"));
            }
        }
    }
}

/// The most sub-responses the simulated store packs into one
/// `BatchCommandsResponse`.
const MAX_RESPONSES_PER_MESSAGE: usize = 128;

/// One BatchCommands sub-request being served: its answer (boxed, as the
/// enum of every answer is large and passes through a channel) or the gRPC
/// status that leaves it unanswered.
type BatchServing = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Box<BatchResponseCmd>, Status>> + Send>,
>;

impl StoreService {
    /// Serves one BatchCommands sub-request exactly as its unary method.
    /// Each method's future is boxed at its own size: one future for every
    /// method would be as large as the largest, and it is moved into a task
    /// of its own for each sub-request.
    fn serve_batch_cmd(self, cmd: BatchRequestCmd) -> BatchServing {
        // One arm a method with a batch case, from the wire protocol's table.
        macro_rules! route {
            ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
               [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {
                match cmd {
                    $($(BatchRequestCmd::$case(r) => Box::pin(async move {
                        self.serve_command(r)
                            .await
                            .map(|resp| Box::new(BatchResponseCmd::$case(resp)))
                    }),)?)*
                }
            };
        }
        tikv_plan_proto::kv_methods!(route)
    }

    fn record_batch(&self, f: impl FnOnce(&mut super::counters::StoreCounters)) {
        let mut state = self.shared.lock();
        if let Some(store) = state.stores.get_mut(&self.store_id) {
            f(&mut store.counters);
        }
    }

    /// Runs one BatchCommands stream: every sub-request is served as its
    /// unary method would be. One that is answered at its first poll (no
    /// fault delays it) is answered at once, with the others of its message
    /// that were; the rest are served each in a task of its own, and their
    /// answers go out as they finish, several per message when they are
    /// ready together, so order and grouping differ from the requests'. A
    /// sub-request that ends in a gRPC status gets no answer at all, as in
    /// TiKV (the client times out).
    fn run_batch_stream(
        &self,
        mut incoming: Streaming<BatchCommandsRequest>,
    ) -> mpsc::Receiver<Result<BatchCommandsResponse, Status>> {
        let (out_tx, out_rx) = mpsc::channel(64);
        let service = self.clone();
        tokio::spawn(async move {
            let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(u64, Box<BatchResponseCmd>)>();
            let mut done_tx = Some(done_tx);
            loop {
                tokio::select! {
                    // In order, not at random: a simulation replays.
                    biased;
                    msg = incoming.message(), if done_tx.is_some() => {
                        let Ok(Some(msg)) = msg else {
                            // The client finished or went away: answer what
                            // is still being served, then end.
                            done_tx = None;
                            continue;
                        };
                        let Some(done) = &done_tx else { continue };
                        service.record_batch(|c| c.record_batch_message(msg.requests.len()));
                        let mut answered = Vec::with_capacity(msg.requests.len());
                        for (id, req) in msg.request_ids.into_iter().zip(msg.requests) {
                            let Some(cmd) = req.cmd else { continue };
                            let mut serving = service.clone().serve_batch_cmd(cmd);
                            let store_id = service.store_id;
                            let unanswered = move |status: Status| tracing::debug!(
                                "simulated store {store_id} leaves batch request {id} unanswered: {status}"
                            );
                            match futures::poll!(&mut serving) {
                                std::task::Poll::Ready(Ok(resp)) => answered.push((id, resp)),
                                std::task::Poll::Ready(Err(status)) => unanswered(status),
                                std::task::Poll::Pending => {
                                    let done = done.clone();
                                    tokio::spawn(async move {
                                        match serving.await {
                                            Ok(resp) => {
                                                let _ = done.send((id, resp));
                                            }
                                            Err(status) => unanswered(status),
                                        }
                                    });
                                }
                            }
                        }
                        let mut answered = answered.into_iter();
                        while !answered.as_slice().is_empty() {
                            let count = answered.len().min(MAX_RESPONSES_PER_MESSAGE);
                            let msg = answers_message(count, answered.by_ref().take(count));
                            if out_tx.send(Ok(msg)).await.is_err() {
                                return;
                            }
                        }
                    }
                    first = done_rx.recv() => {
                        let Some(first) = first else { break };
                        // The answers ready now go out together.
                        let count = (done_rx.len() + 1).min(MAX_RESPONSES_PER_MESSAGE);
                        let ready = std::iter::once(first)
                            .chain(std::iter::from_fn(|| done_rx.try_recv().ok()))
                            .take(count);
                        if out_tx.send(Ok(answers_message(count, ready))).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        out_rx
    }
}

/// One message of a BatchCommands stream's answers (`count`: how many
/// there are, at most).
fn answers_message(
    count: usize,
    answers: impl Iterator<Item = (u64, Box<BatchResponseCmd>)>,
) -> BatchCommandsResponse {
    let mut msg = BatchCommandsResponse {
        request_ids: Vec::with_capacity(count),
        responses: Vec::with_capacity(count),
        ..BatchCommandsResponse::default()
    };
    for (id, resp) in answers {
        msg.request_ids.push(id);
        msg.responses.push(BatchResponse { cmd: Some(*resp) });
    }
    msg
}

/// The store's gRPC service: `BatchCommands`, and each unary method of the
/// wire protocol's table served by [`StoreService::serve`].
macro_rules! tikv_service {
    ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
       [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {
        #[tonic::async_trait]
        impl Tikv for StoreService {
            async fn batch_commands(
                &self,
                r: Request<Streaming<BatchCommandsRequest>>,
            ) -> Result<Response<BoxStream<BatchCommandsResponse>>, Status> {
                self.record_batch(|c| c.record_batch_stream());
                let out = self.run_batch_stream(r.into_inner());
                Ok(Response::new(Box::pin(ReceiverStream::new(out))))
            }
            $(
                async fn $stub(
                    &self,
                    r: Request<kvrpcpb::$req>,
                ) -> Result<Response<kvrpcpb::$resp>, Status> {
                    self.serve(r).await
                }
            )*
        }
    };
}

tikv_plan_proto::kv_methods!(tikv_service);
