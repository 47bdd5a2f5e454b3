//! Prometheus metrics (feature `prometheus`).
//!
//! Every metric lives in the [`prometheus`] crate's default registry, the
//! one `prometheus::gather()` reads, so an application that already exports
//! its own metrics gets these with no extra wiring. They are registered on
//! first use; [`register`] does it up front so a scrape before any traffic
//! already lists the unlabelled ones. For an application without an
//! exporter, [`render`] produces the text exposition format and [`serve`]
//! answers `GET /metrics` on a TCP listener.
//!
//! `docs/observability.md` (`tikv_plan::guide::observability`) lists every metric, its labels and
//! meaning. Label values are small closed sets (method names, outcome
//! words, store ids), never keys or Region ids.
//!
//! Without the feature this module does not exist and the crate's hooks
//! compile to nothing.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every metric of the crate.
pub(crate) struct Metrics {
    pub(crate) requests: IntCounterVec,
    pub(crate) request_duration: HistogramVec,
    pub(crate) store_rpcs: IntCounterVec,
    pub(crate) fallback_attempts: IntCounter,
    pub(crate) fallback_successes: IntCounter,
    pub(crate) busy_probes: IntCounter,
    pub(crate) store_invalidations: IntCounter,
    pub(crate) region_invalidations: IntCounter,
    pub(crate) connect_timeouts: IntCounter,
    pub(crate) stores_marked_unreachable: IntCounter,
    pub(crate) undetermined: IntCounter,
    pub(crate) forwarded_requests: IntCounter,
    pub(crate) proxies_chosen: IntCounter,
    pub(crate) forwarding_probes: IntCounter,
    pub(crate) liveness_probes: IntCounter,
    pub(crate) rpcs_given_up: IntCounter,
    pub(crate) replica_reads: IntCounter,
    pub(crate) replica_fallbacks: IntCounter,
    pub(crate) rpcs_in_flight: IntGauge,
    pub(crate) region_cache_lookups: IntCounterVec,
    pub(crate) region_cache_regions: IntGauge,
    pub(crate) pd_requests: IntCounterVec,
    pub(crate) pd_request_duration: HistogramVec,
    pub(crate) connections: IntCounterVec,
    pub(crate) health_feedbacks: IntCounter,
    pub(crate) store_slow_score: IntGaugeVec,
    /// The series client-rust exports, under its names, so its dashboards
    /// keep working.
    pub(crate) compat: CompatMetrics,
}

/// client-rust's series: its names, its one label (`type`: the request
/// kind, `raw_get` or `kv_prewrite` for TiKV, `get_region` or `get_store`
/// for PD) and prometheus's default buckets. A TiKV request counts per RPC
/// (a response carrying a Region error counts as answered); a PD request
/// counts once per call, its retries on a new leader included.
pub(crate) struct CompatMetrics {
    pub(crate) tikv_request_duration: HistogramVec,
    pub(crate) tikv_requests: IntCounterVec,
    pub(crate) tikv_failed_request_duration: HistogramVec,
    pub(crate) tikv_failed_requests: IntCounterVec,
    pub(crate) pd_request_duration: HistogramVec,
    pub(crate) pd_requests: IntCounterVec,
    pub(crate) pd_failed_request_duration: HistogramVec,
    pub(crate) pd_failed_requests: IntCounterVec,
    pub(crate) pd_tso_batch_size: Histogram,
}

impl CompatMetrics {
    fn new() -> Self {
        let ty = &["type"];
        let default_histogram = |name: &str, help: &str| {
            HistogramVec::new(HistogramOpts::new(name, help), ty)
                .unwrap_or_else(|e| invalid(name, e))
        };
        CompatMetrics {
            tikv_request_duration: default_histogram(
                "tikv_request_duration_seconds",
                "Latency of TiKV RPCs that got an answer, by request type (client-rust's series).",
            ),
            tikv_requests: counter_vec(
                "tikv_request_total",
                "TiKV RPCs sent, by request type (client-rust's series).",
                ty,
            ),
            tikv_failed_request_duration: default_histogram(
                "tikv_failed_request_duration_seconds",
                "Latency of TiKV RPCs that failed, by request type (client-rust's series).",
            ),
            tikv_failed_requests: counter_vec(
                "tikv_failed_request_total",
                "TiKV RPCs that failed, by request type (client-rust's series).",
                ty,
            ),
            pd_request_duration: default_histogram(
                "pd_request_duration_seconds",
                "Latency of PD calls that succeeded, by request type (client-rust's series).",
            ),
            pd_requests: counter_vec(
                "pd_request_total",
                "PD calls, by request type (client-rust's series).",
                ty,
            ),
            pd_failed_request_duration: default_histogram(
                "pd_failed_request_duration_seconds",
                "Latency of PD calls that failed, by request type (client-rust's series).",
            ),
            pd_failed_requests: counter_vec(
                "pd_failed_request_total",
                "PD calls that failed, by request type (client-rust's series).",
                ty,
            ),
            pd_tso_batch_size: Histogram::with_opts(HistogramOpts::new(
                "pd_tso_batch_size",
                "Timestamps asked for per TSO request (client-rust's series).",
            ))
            .unwrap_or_else(|e| invalid("pd_tso_batch_size", e)),
        }
    }

    fn collectors(&self) -> [Box<dyn prometheus::core::Collector>; 9] {
        [
            Box::new(self.tikv_request_duration.clone()),
            Box::new(self.tikv_requests.clone()),
            Box::new(self.tikv_failed_request_duration.clone()),
            Box::new(self.tikv_failed_requests.clone()),
            Box::new(self.pd_request_duration.clone()),
            Box::new(self.pd_requests.clone()),
            Box::new(self.pd_failed_request_duration.clone()),
            Box::new(self.pd_failed_requests.clone()),
            Box::new(self.pd_tso_batch_size.clone()),
        ]
    }

    /// One TiKV RPC of `kind` ended after `elapsed`.
    pub(crate) fn tikv_rpc(&self, kind: &str, elapsed: Duration, ok: bool) {
        Self::observe(
            [&self.tikv_requests, &self.tikv_failed_requests],
            [
                &self.tikv_request_duration,
                &self.tikv_failed_request_duration,
            ],
            kind,
            elapsed,
            ok,
        );
    }

    /// One PD call of `kind` ended after `elapsed`.
    pub(crate) fn pd_call(&self, kind: &str, elapsed: Duration, ok: bool) {
        Self::observe(
            [&self.pd_requests, &self.pd_failed_requests],
            [&self.pd_request_duration, &self.pd_failed_request_duration],
            kind,
            elapsed,
            ok,
        );
    }

    /// client-rust counts every request, and observes its latency in the
    /// plain or the failed histogram; a failure also counts as failed.
    fn observe(
        [total, failed]: [&IntCounterVec; 2],
        [duration, failed_duration]: [&HistogramVec; 2],
        kind: &str,
        elapsed: Duration,
        ok: bool,
    ) {
        total.with_label_values(&[kind]).inc();
        let seconds = elapsed.as_secs_f64();
        if ok {
            duration.with_label_values(&[kind]).observe(seconds);
        } else {
            failed_duration.with_label_values(&[kind]).observe(seconds);
            failed.with_label_values(&[kind]).inc();
        }
    }
}

/// The metrics, registered in the default registry on first use.
pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

fn counter(name: &str, help: &str) -> IntCounter {
    // Name and help are constants of this file; a bad one is a bug caught by
    // the tests, never input.
    IntCounter::with_opts(Opts::new(name, help)).unwrap_or_else(|e| invalid(name, e))
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| invalid(name, e))
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::with_opts(Opts::new(name, help)).unwrap_or_else(|e| invalid(name, e))
}

fn histogram_vec(name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    // 0.5 ms to about 16 s, doubling.
    let buckets = exponential_buckets(0.0005, 2.0, 16).unwrap_or_default();
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .unwrap_or_else(|e| invalid(name, e))
}

fn invalid(name: &str, e: prometheus::Error) -> ! {
    panic!("metric {name} is malformed (a bug in tikv-plan): {e}")
}

impl Metrics {
    fn new() -> Self {
        let m = Metrics {
            requests: counter_vec(
                "tikv_plan_requests_total",
                "Requests (one call of a client method's plan, all its Regions), by method and outcome.",
                &["method", "outcome"],
            ),
            request_duration: histogram_vec(
                "tikv_plan_request_duration_seconds",
                "Latency of requests, retries and fallback included, by method and outcome.",
                &["method", "outcome"],
            ),
            store_rpcs: counter_vec(
                "tikv_plan_store_rpcs_total",
                "Attempts at a candidate (store mapping plus RPC), by store id and outcome.",
                &["store", "outcome"],
            ),
            fallback_attempts: counter(
                "tikv_plan_fallback_attempts_total",
                "Attempts sent to a candidate other than the cached leader.",
            ),
            fallback_successes: counter(
                "tikv_plan_fallback_successes_total",
                "Fallback candidates that accepted a request and became the cached leader.",
            ),
            busy_probes: counter(
                "tikv_plan_busy_probes_total",
                "Followers-only probe rounds run after repeated ServerIsBusy(0) answers.",
            ),
            store_invalidations: counter(
                "tikv_plan_store_invalidations_total",
                "Store cache entries (and their connections) dropped by routing.",
            ),
            region_invalidations: counter(
                "tikv_plan_region_invalidations_total",
                "Region cache entries dropped by routing.",
            ),
            connect_timeouts: counter(
                "tikv_plan_connect_timeouts_total",
                "Store mappings that ended with a connect timeout.",
            ),
            stores_marked_unreachable: counter(
                "tikv_plan_stores_marked_unreachable_total",
                "Stores marked unreachable by store health (transport failures or timeout strikes).",
            ),
            undetermined: counter(
                "tikv_plan_undetermined_total",
                "Shards that ended undetermined: a write that may have been applied, never re-sent.",
            ),
            forwarded_requests: counter(
                "tikv_plan_forwarded_requests_total",
                "Leader attempts routed through a proxy store (tikv-forwarded-host).",
            ),
            proxies_chosen: counter(
                "tikv_plan_proxies_chosen_total",
                "Proxy stores chosen for a store this client could not reach.",
            ),
            forwarding_probes: counter(
                "tikv_plan_forwarding_probes_total",
                "Direct probes of a store reached only through a proxy.",
            ),
            liveness_probes: counter(
                "tikv_plan_liveness_probes_total",
                "Probes of a store that left an RPC unanswered for store_probe_after.",
            ),
            rpcs_given_up: counter(
                "tikv_plan_rpcs_given_up_total",
                "RPCs abandoned because their store was marked unreachable while they waited.",
            ),
            replica_reads: counter(
                "tikv_plan_replica_reads_total",
                "Reads sent to a replica first, as replica or stale reads.",
            ),
            replica_fallbacks: counter(
                "tikv_plan_replica_fallbacks_total",
                "Replica or stale reads the replica did not answer cleanly, sent to the leader.",
            ),
            rpcs_in_flight: gauge(
                "tikv_plan_rpcs_in_flight",
                "Store RPCs in flight now.",
            ),
            region_cache_lookups: counter_vec(
                "tikv_plan_region_cache_lookups_total",
                "Region cache lookups by key or id, by result (hit, miss).",
                &["result"],
            ),
            region_cache_regions: gauge(
                "tikv_plan_region_cache_regions",
                "Regions held in the Region caches of the process.",
            ),
            pd_requests: counter_vec(
                "tikv_plan_pd_requests_total",
                "PD RPCs (each attempt), by method and outcome (ok, error, cancelled).",
                &["method", "outcome"],
            ),
            pd_request_duration: histogram_vec(
                "tikv_plan_pd_request_duration_seconds",
                "Latency of PD RPC attempts, by method.",
                &["method"],
            ),
            connections: counter_vec(
                "tikv_plan_connections_total",
                "Connection attempts, by target (store, pd) and outcome (ok, failed, timeout).",
                &["target", "outcome"],
            ),
            health_feedbacks: counter(
                "tikv_plan_health_feedbacks_total",
                "Health feedbacks from stores kept (newer than the store's last one).",
            ),
            store_slow_score: IntGaugeVec::new(
                Opts::new(
                    "tikv_plan_store_slow_score",
                    "The slow score each store last reported (1 healthy to 100; 80 and above is slow).",
                ),
                &["store"],
            )
            .unwrap_or_else(|e| invalid("tikv_plan_store_slow_score", e)),
            compat: CompatMetrics::new(),
        };
        for collector in m.collectors() {
            if let Err(e) = prometheus::default_registry().register(collector) {
                // Another collector already took the name: ours still
                // counts, but is not exported. Not worth failing requests.
                tracing::warn!("a tikv-plan metric could not be registered: {e}");
            }
        }
        m
    }

    fn collectors(&self) -> impl Iterator<Item = Box<dyn prometheus::core::Collector>> {
        let own: [Box<dyn prometheus::core::Collector>; 26] = [
            Box::new(self.requests.clone()),
            Box::new(self.request_duration.clone()),
            Box::new(self.store_rpcs.clone()),
            Box::new(self.fallback_attempts.clone()),
            Box::new(self.fallback_successes.clone()),
            Box::new(self.busy_probes.clone()),
            Box::new(self.store_invalidations.clone()),
            Box::new(self.region_invalidations.clone()),
            Box::new(self.connect_timeouts.clone()),
            Box::new(self.stores_marked_unreachable.clone()),
            Box::new(self.undetermined.clone()),
            Box::new(self.forwarded_requests.clone()),
            Box::new(self.proxies_chosen.clone()),
            Box::new(self.forwarding_probes.clone()),
            Box::new(self.liveness_probes.clone()),
            Box::new(self.rpcs_given_up.clone()),
            Box::new(self.replica_reads.clone()),
            Box::new(self.replica_fallbacks.clone()),
            Box::new(self.rpcs_in_flight.clone()),
            Box::new(self.region_cache_lookups.clone()),
            Box::new(self.region_cache_regions.clone()),
            Box::new(self.pd_requests.clone()),
            Box::new(self.pd_request_duration.clone()),
            Box::new(self.connections.clone()),
            Box::new(self.health_feedbacks.clone()),
            Box::new(self.store_slow_score.clone()),
        ];
        own.into_iter().chain(self.compat.collectors())
    }
}

/// Registers every metric in the default registry now, instead of at its
/// first use. Idempotent.
pub fn register() {
    LazyLock::force(&METRICS);
}

/// Registers every metric of the crate in `registry` as well (they stay in
/// the default registry, where client-rust registers its own): for an
/// application that exports its own [`Registry`]. Fails if `registry`
/// already holds a metric of the same name, e.g. when called twice.
pub fn register_in(registry: &Registry) -> prometheus::Result<()> {
    METRICS
        .collectors()
        .try_for_each(|collector| registry.register(collector))
}

/// Every metric of the default registry (this crate's and any other the
/// application registered there) in the Prometheus text exposition format.
pub fn render() -> String {
    register();
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&prometheus::gather(), &mut out) {
        tracing::warn!("encoding the metrics failed: {e}");
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long [`serve`] waits for a request's head before dropping the
/// connection.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most [`serve`] reads of a request's head.
const MAX_HEAD: usize = 8 * 1024;

/// Answers HTTP/1.1 `GET /metrics` on `listener` with [`render`]'s output
/// (404 for other paths, 405 for other methods), one request per
/// connection. Runs until the task is dropped; a failed accept or
/// connection is logged and the server goes on.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9100").await?;
/// tokio::spawn(tikv_plan::metrics::serve(listener));
/// # Ok(())
/// # }
/// ```
pub async fn serve(listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(async move {
                    if let Err(e) = answer(stream).await {
                        tracing::debug!("metrics connection failed: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("metrics listener: accept failed: {e}");
                // Out of file descriptors, say: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request head and writes the answer.
async fn answer(mut stream: TcpStream) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()),
    };
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, render()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "only /metrics is served here\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET is served here\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The request head (up to the blank line), at most [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}
