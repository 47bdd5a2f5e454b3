//! The simulated TiKV store service (`tikvpb.Tikv`): every method runs the
//! checks of [`ClusterState::admit`](super::state::ClusterState::admit)
//! (or, for a read a replica may serve, `admit_read` in `replica.rs`)
//! before the data is touched, unary or from the BatchCommands stream. The
//! commands themselves are in `store/raw.rs` and `store/txn.rs`.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

use super::counters::Outcome;
use super::data::RawKeys;
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
    /// The first key of the request that lies outside `region`, if any,
    /// in the form TiKV reports in `KeyNotInRegion`. Raw keys are checked
    /// in the form the store keeps them in (`raw`: encoded in API v2),
    /// transactional keys always on their encoding.
    fn key_outside(&self, region: &metapb::Region, raw: RawKeys) -> Option<Vec<u8>>;
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
    /// For a read a replica may serve: its timestamp (0 for a raw read,
    /// which carries none). `None` for every other command: it is
    /// proposed, so only a leader serves it, and it moves the Region's
    /// apply index.
    fn read_ts(&self) -> Option<u64> {
        None
    }
    /// Whether a new leader refuses it until it has synced its max ts
    /// (`MaxTimestampNotSynced`, `raft.rs`): async-commit and 1PC
    /// prewrites, and raw writes of an API v2 store.
    fn needs_max_ts(&self, api: kvrpcpb::ApiVersion) -> bool {
        let _ = api;
        false
    }
    /// Whether TiKV's read pool checks the request's deadline before it
    /// reads (`store/deadline.rs`): transactional point reads.
    fn checks_deadline(&self) -> bool {
        false
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

/// How long a replica read waits for its read index before the store gives
/// up on it (TiKV keeps it pending; the client's deadline ends it first).
const READ_INDEX_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// The status of a replica read that waited [`READ_INDEX_GIVE_UP`].
fn read_index_gave_up() -> Status {
    Status::deadline_exceeded("the replica read waited too long for its read index (simulated)")
}

mod deadline;
pub(crate) mod forward;
mod health;
mod raw;
mod server;
mod tiflash;
mod txn;

pub use forward::{ForwardDial, ForwardStream, FORWARDED_HOST};
pub(crate) use health::{Attacher, StoreHealth};
pub use health::{DEFAULT_HEALTH_FEEDBACK_INTERVAL, DEFAULT_INSPECT_INTERVAL};
pub use raw::{COPROCESSOR_PLUGIN, COPROCESSOR_PLUGIN_VERSION};
pub(crate) use server::StoreServer;
pub(crate) use tiflash::TiFlashServer;

/// What to do with a request after the lock is released.
enum Verdict<R> {
    Answer(R),
    Status(Status),
    Drop,
    /// A replica read waits (for its read index to be applied, or for a
    /// leader to ask): admitted again after this long.
    Retry(std::time::Duration),
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
        // A read's deadline starts when it arrives (TiKV's
        // `Storage::get_deadline`); the added latency is its queueing.
        let received = Instant::now();
        let slow = {
            let mut state = self.shared.lock();
            state
                .stores
                .get_mut(&self.store_id)
                .map_or_else(Default::default, |s| {
                    s.counters.record_arrival(C::LABEL, command.context());
                    s.slow
                })
        };
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
        self.wait_out_hang(C::LABEL).await?;
        if command.checks_deadline() {
            if let Some(error) = deadline::expired(command.context(), received) {
                let mut state = self.shared.lock();
                if let Some(store) = state.stores.get_mut(&self.store_id) {
                    store.counters.record_deadline_drop();
                    store.counters.record(C::LABEL, Outcome::ServerIsBusy);
                }
                return Ok(C::Response::with_region_error(error));
            }
        }
        let proposed = self.propose(&command).await;

        let arrived = Instant::now();
        // A replica read waiting for its read index is admitted again.
        let mut waited = false;
        let (verdict, waiting) = loop {
            // Locks the command released; their waiters are woken.
            let mut released = Vec::new();
            let (verdict, waiting) = {
                let mut state = self.shared.lock();
                // Counted once per request, not per wait for a read index.
                if let Some(ctx) = command.context().filter(|_| !waited) {
                    if let Some(store) = state.stores.get_mut(&self.store_id) {
                        store
                            .counters
                            .record_context_flags(ctx.replica_read, ctx.stale_read);
                    }
                }
                // TiKV checks the API version on every request but the
                // store-wide UnsafeDestroyRange (service/kv.rs hands it to
                // the GC worker without the check).
                let api_check = if command.store_wide() {
                    Ok(())
                } else {
                    check_api_version(state.api_version, command.context())
                };
                let mut served_as_replica = false;
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
                    let raw = RawKeys::of(state.api_version);
                    let needs_max_ts = command.needs_max_ts(state.api_version);
                    // A write whose proposal waited: a leader change in
                    // between made it stale.
                    let stale = match proposed {
                        Some((region_id, peer_id)) => state.refuse_stale(region_id, peer_id),
                        None => Ok(()),
                    };
                    let admitted = stale.and_then(|()| {
                        state.admit_read(
                            self.store_id,
                            command.context(),
                            &|r| command.key_outside(r, raw),
                            command.read_ts(),
                            arrived,
                        )
                    });
                    // A write is proposed to Raft (`raft.rs`, `limits.rs`):
                    // refused before anything is applied on a leader that
                    // has not synced its max ts (when it needs that), in a
                    // merge, on a full disk, or over the entry size limit.
                    // A leader read in a merge needs a read index, refused.
                    let admitted = admitted.and_then(|plan| match plan {
                        crate::replica::ReadPlan::Current(region_id)
                            if command.read_ts().is_none() =>
                        {
                            state.refuse_proposal(region_id, self.store_id, needs_max_ts)?;
                            let (size, limit) = (command.encoded_len(), state.raft_entry_max_size);
                            crate::limits::check_entry_size(region_id, size, limit).map(|()| plan)
                        }
                        crate::replica::ReadPlan::Current(region_id) => {
                            state.refuse_merging_read(region_id).map(|()| plan)
                        }
                        plan => Ok(plan),
                    });
                    let now = Instant::now();
                    let is_read = command.read_ts().is_some();
                    let target =
                        admitted.map(|plan| state.read_view(plan, self.store_id, is_read, now));
                    match target {
                        Err((error, outcome)) => (
                            Verdict::Answer(C::Response::with_region_error(*error)),
                            outcome,
                        ),
                        Ok(Err(wait)) => (Verdict::Retry(wait), Outcome::Ok),
                        Ok(Ok(region)) => match region {
                            None => (
                                Verdict::Status(Status::internal("region vanished")),
                                Outcome::Invalid,
                            ),
                            Some((region, replica)) => {
                                let applied = command.apply(region, now);
                                released.extend(region.mvcc.take_released());
                                served_as_replica = replica && applied.is_ok();
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
                        },
                    }
                };
                let mut verdict = verdict;
                let mut outcome = outcome;
                let retry = matches!(verdict, Verdict::Retry(_));
                if let Some(store) = state.stores.get_mut(&self.store_id).filter(|_| !retry) {
                    if served_as_replica {
                        store.counters.record_served_as_replica();
                    }
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
            match verdict {
                Verdict::Retry(wait) if arrived.elapsed() < READ_INDEX_GIVE_UP => {
                    // Never past the give-up: the store is looked at again
                    // by then.
                    let left = READ_INDEX_GIVE_UP.saturating_sub(arrived.elapsed());
                    let wait = wait.min(left).max(std::time::Duration::from_millis(1));
                    tokio::time::sleep(wait).await;
                    waited = true;
                }
                Verdict::Retry(_) => break (Verdict::Status(read_index_gave_up()), None),
                verdict => break (verdict, waiting),
            }
        };
        if let Some((ask, wait, answer)) = waiting {
            return Ok(answer(self.shared.wait_for_lock(&ask, wait).await));
        }
        match verdict {
            Verdict::Answer(resp) => Ok(resp),
            Verdict::Status(status) => Err(status),
            Verdict::Retry(_) => Err(read_index_gave_up()),
            Verdict::Drop => {
                // The write is applied; now the client loses the answer with
                // its connection.
                self.shared.reset_store_connections(self.store_id);
                Err(Status::unavailable("simulated dropped response"))
            }
        }
    }

    /// A write to be proposed by a leader on a store whose proposals wait
    /// (`SimCluster::store_propose_delay`): checks it reaches the leader,
    /// waits, and returns its Region and the proposing peer, for the
    /// stale-command check. `None` for anything else.
    async fn propose<C: StoreCommand>(&self, command: &C) -> Option<(u64, u64)> {
        if command.read_ts().is_some() || command.store_wide() {
            return None;
        }
        let ctx = command.context()?;
        let (region_id, peer_id) = (ctx.region_id, ctx.peer.map(|p| p.id)?);
        let delay = {
            let state = self.shared.lock();
            let leads = state
                .regions
                .get(&region_id)
                .is_some_and(|r| r.leader == Some(peer_id) && !state.raft.electing(region_id));
            state.propose_delay(self.store_id).filter(|_| leads)?
        };
        tokio::time::sleep(delay).await;
        Some((region_id, peer_id))
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

    /// Attaches the store's health feedback to `msg` when the stream is
    /// due one (`store/health.rs`).
    fn attach_feedback(&self, attacher: &mut Attacher, msg: &mut BatchCommandsResponse) {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let Some(store) = state.stores.get_mut(&self.store_id) else {
            return;
        };
        if !attacher.due(now, store.health.feedback_interval) {
            return;
        }
        let slow = store.slow;
        msg.health_feedback = Some(store.health.feedback(self.store_id, now, slow));
        attacher.attached(now);
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
            let mut attacher = Attacher::default();
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
                            let mut msg = answers_message(count, answered.by_ref().take(count));
                            service.attach_feedback(&mut attacher, &mut msg);
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
                        let mut msg = answers_message(count, ready);
                        service.attach_feedback(&mut attacher, &mut msg);
                        if out_tx.send(Ok(msg)).await.is_err() {
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
