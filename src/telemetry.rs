//! The crate's observability hooks, so that each call site elsewhere is one
//! line: metrics (feature `prometheus`, see [`crate::metrics`]) and the
//! tracing spans of requests and attempts.
//!
//! Without the `prometheus` feature the metric hooks are empty inline
//! functions and zero-sized types: they compile to nothing. Spans and events
//! are always compiled; tracing checks each callsite's level once and caches
//! the answer, so a disabled span or event costs a load and a branch, with
//! no formatting and no allocation (field values are only evaluated when
//! enabled).

use std::fmt;
use std::future::Future;

use tracing::Span;

use crate::classify::DispatchFailure;
use crate::ids::{RegionId, StoreId};
use crate::proto::{errorpb, metapb};
use crate::Error;

#[cfg(feature = "prometheus")]
use crate::metrics::METRICS;
use crate::Failure;

/// Which routing counter to bump (the routing state counts it per client;
/// [`routing_event`] counts it in the process-wide metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    FallbackAttempt,
    FallbackSuccess,
    BusyProbe,
    StoreInvalidation,
    RegionInvalidation,
    ConnectTimeout,
    Undetermined,
    Forwarded,
    ProxyChosen,
    ForwardingProbe,
    LivenessProbe,
    RpcGaveUp,
    ReplicaRead,
    ReplicaFallback,
}

/// One routing counter was bumped (request/routing/state/counters.rs).
#[inline]
pub(crate) fn routing_event(counter: Counter) {
    #[cfg(feature = "prometheus")]
    {
        let m = &*METRICS;
        match counter {
            Counter::FallbackAttempt => m.fallback_attempts.inc(),
            Counter::FallbackSuccess => m.fallback_successes.inc(),
            Counter::BusyProbe => m.busy_probes.inc(),
            Counter::StoreInvalidation => m.store_invalidations.inc(),
            Counter::RegionInvalidation => m.region_invalidations.inc(),
            Counter::ConnectTimeout => m.connect_timeouts.inc(),
            Counter::Undetermined => m.undetermined.inc(),
            Counter::Forwarded => m.forwarded_requests.inc(),
            Counter::ProxyChosen => m.proxies_chosen.inc(),
            Counter::ForwardingProbe => m.forwarding_probes.inc(),
            Counter::LivenessProbe => m.liveness_probes.inc(),
            Counter::RpcGaveUp => m.rpcs_given_up.inc(),
            Counter::ReplicaRead => m.replica_reads.inc(),
            Counter::ReplicaFallback => m.replica_fallbacks.inc(),
        }
    }
    #[cfg(not(feature = "prometheus"))]
    let _ = counter;
}

/// A store was marked unreachable.
#[inline]
pub(crate) fn store_marked_unreachable() {
    #[cfg(feature = "prometheus")]
    METRICS.stores_marked_unreachable.inc();
}

/// A store's health feedback was kept: its slow score is now `score`.
#[inline]
pub(crate) fn store_slow_score(store_id: StoreId, score: u32) {
    #[cfg(feature = "prometheus")]
    {
        METRICS.health_feedbacks.inc();
        METRICS
            .store_slow_score
            .with_label_values(&[&store_id.to_string()])
            .set(i64::from(score));
    }
    #[cfg(not(feature = "prometheus"))]
    let _ = (store_id, score);
}

/// An RPC started (`true`) or ended.
#[inline]
pub(crate) fn rpc_in_flight(started: bool) {
    #[cfg(feature = "prometheus")]
    if started {
        METRICS.rpcs_in_flight.inc();
    } else {
        METRICS.rpcs_in_flight.dec();
    }
    #[cfg(not(feature = "prometheus"))]
    let _ = started;
}

/// How a request (all its shards) ended, worst first.
#[cfg(feature = "prometheus")]
const OUTCOMES: [&str; 5] = [
    "undetermined",
    "deadline_exceeded",
    "retries_exhausted",
    "error",
    "ok",
];

/// The index of `retries_exhausted` in [`OUTCOMES`].
#[cfg(feature = "prometheus")]
const RETRIES_EXHAUSTED_RANK: u8 = 2;

/// The index in [`OUTCOMES`] of a shard's result.
#[cfg(feature = "prometheus")]
fn outcome_rank(result: &Result<(), &Error>) -> u8 {
    match result {
        Ok(()) => 4,
        Err(e) if e.is_undetermined() => 0,
        Err(e) => match e.failure() {
            Some(Failure::DeadlineExceeded { .. }) => 1,
            Some(Failure::RetriesExhausted { .. }) => RETRIES_EXHAUSTED_RANK,
            _ => 3,
        },
    }
}

/// Watches one request (a plan's run over all its shards): the method, and
/// with the `prometheus` feature its latency and outcome, counted when it
/// is dropped at the end of the request (or when the caller drops it).
/// The outcome is the worst of its shards' (`undetermined`,
/// `deadline_exceeded`, `retries_exhausted`, `error`, `ok`), or `cancelled`
/// when no shard finished.
#[derive(Debug)]
pub(crate) struct RequestObserver {
    method: &'static str,
    #[cfg(feature = "prometheus")]
    started: tokio::time::Instant,
    /// The worst outcome rank seen; `u8::MAX` while no shard finished.
    #[cfg(feature = "prometheus")]
    worst: std::sync::atomic::AtomicU8,
}

impl Default for RequestObserver {
    fn default() -> Self {
        RequestObserver::new("request")
    }
}

impl RequestObserver {
    /// Starts watching a request of `method`.
    pub(crate) fn new(method: &'static str) -> Self {
        RequestObserver {
            method,
            #[cfg(feature = "prometheus")]
            started: tokio::time::Instant::now(),
            #[cfg(feature = "prometheus")]
            worst: std::sync::atomic::AtomicU8::new(u8::MAX),
        }
    }

    /// The request's method name.
    pub(crate) fn method(&self) -> &'static str {
        self.method
    }

    /// The request was split into `shards` (or failed to be): records the
    /// Regions on the current (request) span, and a sharding failure as the
    /// request's outcome. Returns `shards` unchanged.
    pub(crate) fn sharded<S, R>(
        &self,
        shards: crate::Result<Vec<(S, R)>>,
        region_id: fn(&R) -> RegionId,
    ) -> crate::Result<Vec<(S, R)>> {
        match &shards {
            Ok(list) => {
                let span = Span::current();
                if !span.is_disabled() {
                    span.record(
                        "regions",
                        tracing::field::display(RegionIds(list, region_id)),
                    );
                }
            }
            Err(e) => self.shard_done(Err(e)),
        }
        shards
    }

    /// A shard spent its retries: its error is the last one it met
    /// (client-rust's variant, e.g. the Region error itself), so the outcome
    /// `retries_exhausted` is recorded here, before [`shard_done`](Self::shard_done).
    #[inline]
    pub(crate) fn shard_exhausted(&self) {
        #[cfg(feature = "prometheus")]
        self.worst
            .fetch_min(RETRIES_EXHAUSTED_RANK, std::sync::atomic::Ordering::Relaxed);
    }

    /// A shard (or a piece of one) finished with `result`.
    #[inline]
    pub(crate) fn shard_done(&self, result: Result<(), &Error>) {
        #[cfg(feature = "prometheus")]
        self.worst
            .fetch_min(outcome_rank(&result), std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(feature = "prometheus"))]
        let _ = result;
    }
}

impl Drop for RequestObserver {
    fn drop(&mut self) {
        #[cfg(feature = "prometheus")]
        {
            let rank = *self.worst.get_mut();
            let outcome = OUTCOMES
                .get(usize::from(rank))
                .copied()
                .unwrap_or("cancelled");
            let labels = [self.method, outcome];
            METRICS.requests.with_label_values(&labels).inc();
            METRICS
                .request_duration
                .with_label_values(&labels)
                .observe(self.started.elapsed().as_secs_f64());
            let span = Span::current();
            if !span.is_disabled() {
                span.record("outcome", outcome);
            }
        }
    }
}

/// Region ids of shards, for the request span (`[1, 2, 5]`).
struct RegionIds<'a, S, R>(&'a [(S, R)], fn(&R) -> RegionId);

impl<S, R> fmt::Display for RegionIds<'_, S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(_, r)| (self.1)(r)))
            .finish()
    }
}

/// The span of one attempt at a candidate: mapping its store and the RPC.
/// Its `outcome` is recorded by [`attempt_end`].
#[inline]
pub(crate) fn attempt_span(
    method: &'static str,
    region_id: RegionId,
    peer: &metapb::Peer,
    attempt: u32,
    is_leader: bool,
) -> Span {
    tracing::debug_span!(
        "attempt",
        method,
        region = region_id,
        store = peer.store_id,
        peer = peer.id,
        attempt,
        role = if is_leader { "leader" } else { "fallback" },
        via = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// The attempt in `span` is forwarded by the store `proxy`.
#[inline]
pub(crate) fn attempt_via(span: &Span, proxy: StoreId) {
    if !span.is_disabled() {
        span.record("via", proxy);
    }
}

/// The attempt in `span` at `store_id` ended with `outcome`: records it on
/// the span, closes the span, and counts it per store.
#[inline]
pub(crate) fn attempt_end(span: &mut Span, store_id: StoreId, outcome: &'static str) {
    let span = std::mem::replace(span, Span::none());
    if !span.is_disabled() {
        span.record("outcome", outcome);
    }
    #[cfg(feature = "prometheus")]
    {
        let mut digits = [0u8; 20];
        METRICS
            .store_rpcs
            .with_label_values(&[decimal(store_id, &mut digits), outcome])
            .inc();
    }
    #[cfg(not(feature = "prometheus"))]
    let _ = store_id;
}

/// `n` in decimal, written into `buf` (no allocation per attempt).
#[cfg(feature = "prometheus")]
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

/// The outcome word of a failed dispatch.
pub(crate) fn dispatch_failure(failure: DispatchFailure) -> &'static str {
    #[allow(unreachable_patterns)]
    match failure {
        DispatchFailure::NotSent => "not_sent",
        DispatchFailure::Transport => "transport",
        DispatchFailure::ClientTimeout => "timeout",
        DispatchFailure::StreamReset => "stream_reset",
        DispatchFailure::Deadline => "deadline_exceeded",
        DispatchFailure::Fatal => "fatal",
        _ => "failed",
    }
}

/// The outcome word of a failed store mapping.
pub(crate) fn mapping_failure(error: &Error) -> &'static str {
    match error.failure() {
        Some(Failure::ConnectTimeout { .. }) => "connect_timeout",
        _ => "not_mapped",
    }
}

/// The outcome word of a Region error answer.
pub(crate) fn region_error(e: &errorpb::Error) -> &'static str {
    if e.not_leader.is_some() {
        "not_leader"
    } else if e.region_not_found.is_some() {
        "region_not_found"
    } else if e.key_not_in_region.is_some() {
        "key_not_in_region"
    } else if e.epoch_not_match.is_some() {
        "epoch_not_match"
    } else if let Some(busy) = &e.server_is_busy {
        // A read TiKV dropped past its `max_execution_duration_ms`.
        if busy.reason == crate::config::DEADLINE_EXCEEDED_REASON {
            "server_deadline_exceeded"
        } else {
            "server_is_busy"
        }
    } else if e.stale_command.is_some() {
        "stale_command"
    } else if e.store_not_match.is_some() {
        "store_not_match"
    } else if e.max_timestamp_not_synced.is_some() {
        "max_timestamp_not_synced"
    } else if e.read_index_not_ready.is_some() {
        "read_index_not_ready"
    } else if e.proposal_in_merging_mode.is_some() {
        "proposal_in_merging_mode"
    } else if e.data_is_not_ready.is_some() {
        "data_is_not_ready"
    } else if e.region_not_initialized.is_some() {
        "region_not_initialized"
    } else if e.disk_full.is_some() {
        "disk_full"
    } else if e.undetermined_result.is_some() {
        "undetermined_result"
    } else {
        "region_error"
    }
}

/// A Region cache lookup by key or id hit (`true`) or missed.
#[inline]
pub(crate) fn region_cache_lookup(hit: bool) {
    #[cfg(feature = "prometheus")]
    METRICS
        .region_cache_lookups
        .with_label_values(&[if hit { "hit" } else { "miss" }])
        .inc();
    #[cfg(not(feature = "prometheus"))]
    let _ = hit;
}

/// A Region cache's share of the `tikv_plan_region_cache_regions` gauge:
/// adds and removes as the cache does, and takes its count back out when
/// the cache is dropped. Zero-sized without the `prometheus` feature.
#[derive(Debug, Default)]
pub(crate) struct CacheGauge {
    #[cfg(feature = "prometheus")]
    held: i64,
}

impl CacheGauge {
    /// The cache now holds `delta` more Regions (negative: fewer).
    #[inline]
    pub(crate) fn add(&mut self, delta: i64) {
        #[cfg(feature = "prometheus")]
        {
            self.held += delta;
            METRICS.region_cache_regions.add(delta);
        }
        #[cfg(not(feature = "prometheus"))]
        let _ = delta;
    }
}

#[cfg(feature = "prometheus")]
impl Drop for CacheGauge {
    fn drop(&mut self) {
        METRICS.region_cache_regions.sub(self.held);
    }
}

/// Runs one PD RPC attempt of `method`, counting it and its latency
/// (outcome `ok`, `error`, or `cancelled` when dropped unfinished, as by a
/// timeout).
pub(crate) async fn pd_call<T, E, F>(method: &str, rpc: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
{
    #[cfg(feature = "prometheus")]
    {
        struct Watch<'a> {
            method: &'a str,
            started: tokio::time::Instant,
            outcome: &'static str,
        }
        impl Drop for Watch<'_> {
            fn drop(&mut self) {
                METRICS
                    .pd_requests
                    .with_label_values(&[self.method, self.outcome])
                    .inc();
                METRICS
                    .pd_request_duration
                    .with_label_values(&[self.method])
                    .observe(self.started.elapsed().as_secs_f64());
            }
        }
        let mut watch = Watch {
            method,
            started: tokio::time::Instant::now(),
            outcome: "cancelled",
        };
        let result = rpc.await;
        watch.outcome = if result.is_ok() { "ok" } else { "error" };
        result
    }
    #[cfg(not(feature = "prometheus"))]
    {
        let _ = method;
        rpc.await
    }
}

/// Runs one TiKV RPC of `kind` (the request's label, `raw_get`), for
/// client-rust's `tikv_request_*` series: counted once it ends, ok when the
/// store answered (a Region error is an answer). A future of its own, not
/// an `async fn`: an `async fn` would keep `rpc` twice in its state (the
/// argument and the awaited copy), and this one wraps every RPC.
pub(crate) fn tikv_rpc<T, F>(kind: &'static str, rpc: F) -> TikvRpc<F>
where
    F: Future<Output = crate::Result<T>>,
{
    TikvRpc {
        rpc,
        kind,
        started: RpcStart::default(),
    }
}

/// When the RPC was first polled (measured only with the metrics on).
#[cfg(feature = "prometheus")]
type RpcStart = Option<tokio::time::Instant>;
#[cfg(not(feature = "prometheus"))]
type RpcStart = ();

pin_project_lite::pin_project! {
    /// The future of [`tikv_rpc`].
    pub(crate) struct TikvRpc<F> {
        #[pin]
        rpc: F,
        kind: &'static str,
        started: RpcStart,
    }
}

impl<T, F> Future for TikvRpc<F>
where
    F: Future<Output = crate::Result<T>>,
{
    type Output = crate::Result<T>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        #[cfg(feature = "prometheus")]
        let started = *this.started.get_or_insert_with(tokio::time::Instant::now);
        let result = std::task::ready!(this.rpc.poll(cx));
        #[cfg(feature = "prometheus")]
        METRICS
            .compat
            .tikv_rpc(this.kind, started.elapsed(), result.is_ok());
        #[cfg(not(feature = "prometheus"))]
        let _ = (this.kind, this.started);
        std::task::Poll::Ready(result)
    }
}

/// Runs one PD call (`method`: its gRPC name, `GetRegion`), retries on a
/// new leader included, for client-rust's `pd_request_*` series under
/// client-rust's type names (`get_region`).
pub(crate) async fn pd_request<T, F>(method: &str, call: F) -> crate::Result<T>
where
    F: Future<Output = crate::Result<T>>,
{
    #[cfg(feature = "prometheus")]
    {
        let started = tokio::time::Instant::now();
        let result = call.await;
        METRICS
            .compat
            .pd_call(pd_request_type(method), started.elapsed(), result.is_ok());
        result
    }
    #[cfg(not(feature = "prometheus"))]
    {
        let _ = method;
        call.await
    }
}

/// A TSO request asked for `count` timestamps (`pd_tso_batch_size`).
#[inline]
pub(crate) fn tso_batch(count: u32) {
    #[cfg(feature = "prometheus")]
    METRICS.compat.pd_tso_batch_size.observe(f64::from(count));
    #[cfg(not(feature = "prometheus"))]
    let _ = count;
}

/// client-rust's `type` label of a PD call, from its gRPC method name.
#[cfg(feature = "prometheus")]
fn pd_request_type(method: &str) -> &'static str {
    match method {
        "GetRegion" => "get_region",
        "GetRegionByID" => "get_region_by_id",
        "GetStore" => "get_store",
        "GetAllStores" => "get_all_stores",
        "UpdateGCSafePoint" => "update_gc_safepoint",
        "LoadKeyspace" => "load_keyspace",
        "ScanRegions" => "scan_regions",
        "GetMembers" => "get_members",
        _ => "other",
    }
}

/// Opens a connection to `address` (`target`: `store` or `pd`) with
/// `connect`: a debug event before, a warning on failure, and the
/// connection counters.
pub(crate) async fn connect<T, F>(
    target: &'static str,
    address: &str,
    connect: F,
) -> crate::Result<T>
where
    F: Future<Output = crate::Result<T>>,
{
    tracing::debug!(target: "tikv_plan::connect", %address, "connecting to {target}");
    let result = connect.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => {
            tracing::warn!(target: "tikv_plan::connect", %address, "could not connect to {target}: {e}");
            match e.failure() {
                Some(Failure::ConnectTimeout { .. }) => "timeout",
                _ => "failed",
            }
        }
    };
    #[cfg(feature = "prometheus")]
    METRICS
        .connections
        .with_label_values(&[target, outcome])
        .inc();
    #[cfg(not(feature = "prometheus"))]
    let _ = outcome;
    result
}

#[cfg(all(test, feature = "prometheus"))]
mod tests {
    use super::*;

    #[test]
    fn decimal_writes_every_width() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), "0");
        assert_eq!(decimal(7, &mut buf), "7");
        assert_eq!(decimal(1234, &mut buf), "1234");
        assert_eq!(decimal(u64::MAX, &mut buf), "18446744073709551615");
    }

    #[test]
    fn every_pd_method_the_client_calls_has_client_rusts_type_name() {
        for (method, kind) in [
            ("GetRegion", "get_region"),
            ("GetRegionByID", "get_region_by_id"),
            ("GetStore", "get_store"),
            ("GetAllStores", "get_all_stores"),
            ("UpdateGCSafePoint", "update_gc_safepoint"),
            ("LoadKeyspace", "load_keyspace"),
        ] {
            assert_eq!(pd_request_type(method), kind);
        }
        assert_eq!(pd_request_type("SomethingNew"), "other");
    }

    #[test]
    fn the_request_outcome_is_the_worst_shard_or_cancelled() {
        let before = |outcome: &str| {
            METRICS
                .requests
                .with_label_values(&["unit_test_method", outcome])
                .get()
        };
        let (ok, err, cancelled) = (before("ok"), before("error"), before("cancelled"));
        {
            let r = RequestObserver::new("unit_test_method");
            r.shard_done(Ok(()));
        }
        {
            let r = RequestObserver::new("unit_test_method");
            r.shard_done(Ok(()));
            r.shard_done(Err(&Error::InternalError {
                message: "x".to_owned(),
            }));
            r.shard_done(Ok(()));
        }
        drop(RequestObserver::new("unit_test_method"));
        assert_eq!(before("ok"), ok + 1);
        assert_eq!(before("error"), err + 1);
        assert_eq!(before("cancelled"), cancelled + 1);
    }

    /// Retries spent on a Region error end as that Region error (client-rust's
    /// variant), and still count as `retries_exhausted`.
    #[test]
    fn retries_spent_on_a_region_error_count_as_retries_exhausted() {
        let count = || {
            METRICS
                .requests
                .with_label_values(&["unit_test_exhausted", "retries_exhausted"])
                .get()
        };
        let before = count();
        {
            let r = RequestObserver::new("unit_test_exhausted");
            r.shard_exhausted();
            r.shard_done(Err(&Error::RegionError(Box::default())));
        }
        assert_eq!(count(), before + 1);
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    #[test]
    fn a_read_tikv_dropped_past_its_deadline_has_its_own_outcome() {
        let busy = |reason: &str| errorpb::Error {
            server_is_busy: Some(errorpb::ServerIsBusy {
                reason: reason.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            region_error(&busy("deadline is exceeded")),
            "server_deadline_exceeded"
        );
        assert_eq!(region_error(&busy("scheduler is busy")), "server_is_busy");
    }
}
