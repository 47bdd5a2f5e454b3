//! Client configuration: timeouts, backoff, store health, the busy probe,
//! and TLS. Every routing extension beyond upstream has a switch so its
//! effect can be measured against the upstream behaviour.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::{Backoff, DEFAULT_REGION_BACKOFF};

mod tags;
pub(crate) use tags::{server_deadline_ms, WireTags, DEADLINE_EXCEEDED_REASON};
pub use tags::{RequestSource, RequestTags};

/// Default bound on one RPC.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Default bound on opening a connection to a store or PD.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// client-rust's default bound on a decoded gRPC message: 4 MiB.
pub const DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE: usize = 4 * 1024 * 1024;
/// How many Regions a cache holds by default (`Config::region_cache_capacity`).
pub const DEFAULT_REGION_CACHE_CAPACITY: usize = 1_000_000;
/// How long a cached Region lives without use by default
/// (`Config::region_cache_ttl`): ten minutes, as client-go.
pub const DEFAULT_REGION_CACHE_TTL: Duration = Duration::from_secs(600);
/// The name of the keyspace PD creates by default.
pub const DEFAULT_KEYSPACE_NAME: &str = "DEFAULT";
/// Default time an unreachable store is avoided before it is tried first again.
pub const DEFAULT_STORE_COOLDOWN: Duration = Duration::from_secs(10);
/// Default window in which ServerIsBusy(0) answers from one leader add up.
pub const DEFAULT_BUSY_PROBE_WINDOW: Duration = Duration::from_secs(5);
/// How long an RPC waits for its store's answer before the client probes
/// the store ([`Config::store_probe_after`]).
pub const DEFAULT_STORE_PROBE_AFTER: Duration = Duration::from_millis(500);
/// How often a store the client reaches only through a proxy is probed
/// directly ([`Config::forwarding_probe_interval`]).
pub const DEFAULT_FORWARDING_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// HTTP/2 keep-alive of store connections: a PING after this long without
/// frames from the store (gRPC's and client-go's usual 10 s).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a keep-alive PING may go unanswered before the connection is
/// closed as dead: 3 s (client-go's).
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
/// The default overall deadline of one request.
pub const DEFAULT_REQUEST_DEADLINE: Duration = Duration::from_secs(20);
/// The default bound on waiting out a Region with no leader: 20 s, twice
/// TiKV's default election timeout (10 ticks of 1 s), by when a Region with
/// a live quorum has elected.
pub const DEFAULT_LEADERLESS_WAIT: Duration = Duration::from_secs(20);
/// Default largest number of requests written as one `BatchCommandsRequest`
/// (client-go's `max-batch-size`).
pub const DEFAULT_BATCH_MAX_SIZE: usize = 128;
/// Default largest number of BatchCommands streams (each on its own
/// connection) open to one store.
pub const DEFAULT_BATCH_STREAMS_PER_STORE: usize = 4;
/// Default bound on waiting for more requests before writing a batch on a
/// busy stream: zero, never wait.
pub const DEFAULT_BATCH_MAX_WAIT: Duration = Duration::ZERO;

/// How requests travel to a store. In a configuration file: `"unary"` or
/// `"batched"`.
///
/// The default is [`RpcMode::Batched`]. The environment variable
/// `TIKV_PLAN_RPC_MODE` (`unary` or `batched`), read once per process,
/// changes the default without a rebuild; a mode set in code
/// ([`Config::with_rpc_mode`]) or in a configuration file wins over it.
///
/// ```
/// use tikv_plan::{Config, RpcMode};
/// // Opting out of the batched transport:
/// let config = Config::default().with_rpc_mode(RpcMode::Unary);
/// assert_eq!(config.rpc_mode, RpcMode::Unary);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RpcMode {
    /// One gRPC call per request (client-rust's transport).
    Unary,
    /// Requests share long-lived `tikvpb.Tikv/BatchCommands` streams, several
    /// per message under load (client-go's default transport). Requests the
    /// batch protocol has no case for (compare-and-swap, TTL reads,
    /// checksums, destroy range) still go as unary calls.
    Batched,
}

/// The environment variable that sets [`RpcMode::default`].
const RPC_MODE_ENV: &str = "TIKV_PLAN_RPC_MODE";

impl Default for RpcMode {
    fn default() -> Self {
        static DEFAULT: std::sync::OnceLock<RpcMode> = std::sync::OnceLock::new();
        *DEFAULT.get_or_init(|| rpc_mode_from_env(std::env::var(RPC_MODE_ENV).ok().as_deref()))
    }
}

/// The default transport given the value of `TIKV_PLAN_RPC_MODE`; an
/// unknown value is reported in the log and leaves the default batched.
fn rpc_mode_from_env(value: Option<&str>) -> RpcMode {
    match value.map(str::trim) {
        None | Some("") => RpcMode::Batched,
        Some(v) if v.eq_ignore_ascii_case("unary") => RpcMode::Unary,
        Some(v) if v.eq_ignore_ascii_case("batched") => RpcMode::Batched,
        Some(other) => {
            tracing::warn!(
                "{RPC_MODE_ENV}={other:?} is neither \"unary\" nor \"batched\"; using the batched transport"
            );
            RpcMode::Batched
        }
    }
}

/// Paths of the PEM files for TLS. With only `ca_path` the client checks the
/// server; with `cert_path` and `key_path` too it also presents its own
/// certificate (mutual TLS).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    /// The CA certificate that signs the servers' certificates.
    pub ca_path: Option<PathBuf>,
    /// The client's certificate.
    pub cert_path: Option<PathBuf>,
    /// The client's private key.
    pub key_path: Option<PathBuf>,
}

/// Client configuration. Build it with `Config::default()` and the `with_*`
/// methods.
///
/// ```
/// use std::time::Duration;
/// let config = tikv_plan::Config::default()
///     .with_timeout(Duration::from_millis(500))
///     .with_connect_timeout(Duration::from_millis(200));
/// assert_eq!(config.timeout, Duration::from_millis(500));
/// ```
///
/// As in client-rust, `Config` is `#[non_exhaustive]` (new settings do not
/// break callers) and loads from a file with serde: field names in
/// kebab-case, every field optional (a missing one keeps its default),
/// durations as `{ secs, nanos }`. A file written for client-rust 0.4.0
/// loads unchanged.
///
/// ```
/// # fn main() -> Result<(), serde_json::Error> {
/// let config: tikv_plan::Config = serde_json::from_str(
///     r#"{ "timeout": { "secs": 1, "nanos": 0 }, "rpc-mode": "batched",
///          "region-backoff": { "kind": "full-jitter", "base-delay-ms": 2,
///                              "max-delay-ms": 500, "max-attempts": 10 } }"#,
/// )?;
/// assert_eq!(config.timeout, std::time::Duration::from_secs(1));
/// assert_eq!(config.rpc_mode, tikv_plan::RpcMode::Batched);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Config {
    /// Bound on each RPC to a store or to PD.
    pub timeout: Duration,
    /// Bound on opening a connection.
    pub connect_timeout: Duration,
    /// Retry schedule for Region errors and exhausted candidate rounds.
    pub region_backoff: Backoff,
    /// The CA certificate that signs the servers' certificates (TLS when
    /// set). Named as in client-rust's `Config`.
    pub ca_path: Option<PathBuf>,
    /// The client's certificate, for mutual TLS.
    pub cert_path: Option<PathBuf>,
    /// The client's private key, for mutual TLS.
    pub key_path: Option<PathBuf>,
    /// The largest gRPC response the client decodes from a store or PD, in
    /// bytes (client-rust's default: 4 MiB). A larger response fails with
    /// [`Failure::GrpcMessageTooLarge`](crate::Failure::GrpcMessageTooLarge).
    pub grpc_max_decoding_message_size: usize,
    /// The keyspace to use (API v2), loaded from PD by name when the client
    /// connects; `None` uses API v1 and the whole key space.
    pub keyspace: Option<String>,
    /// How many RPCs one request may have in flight at once, over all its
    /// shards.
    pub max_concurrency: usize,
    /// Client-wide store health ([routing.md, "Store
    /// health"](crate::spec::routing#store-health-beyond)). Off restores the
    /// upstream behaviour: every request pays for a dead store again.
    pub store_health: bool,
    /// How long a store marked unreachable is tried last. Jittered by up to a
    /// quarter either way.
    pub store_cooldown: Duration,
    /// Consecutive timeouts from one store, with no success between, that
    /// mark it unreachable.
    pub store_timeout_strikes: u32,
    /// With store health on: an RPC left unanswered this long makes the
    /// client probe its store (one cheap call, bounded by this same time,
    /// at most one probe per store at a time). A probe that fails marks the
    /// store unreachable at once, and the requests waiting on it that are
    /// safe to send again (reads, prewrites, commits) give up and try the
    /// next candidate; a write that must not be sent twice waits out its
    /// own timeout ([routing.md, "Store
    /// liveness"](crate::spec::routing#store-liveness-beyond)). The default
    /// (500 ms) judges a hung store within one default connect timeout. At
    /// least 10 ms.
    pub store_probe_after: Duration,
    /// Share the ServerIsBusy(0) suspicion across requests ([routing.md,
    /// "ServerIsBusy(0) follower
    /// probe"](crate::spec::routing#serverisbusy0-follower-probe)). Off
    /// restores per-request counting.
    pub shared_busy_probe: bool,
    /// How long busy answers from one leader keep counting toward the probe.
    pub busy_probe_window: Duration,
    /// One connection attempt per address at a time. Off lets concurrent
    /// misses each dial.
    pub single_flight_connect: bool,
    /// Forward leader requests through a reachable voter's store when this
    /// client cannot reach a live leader's store ([routing.md,
    /// "Forwarding"](crate::spec::routing#forwarding-beyond); TiKV's
    /// `tikv-forwarded-host`, client-go's `EnableForwarding`). On by
    /// default: it changes nothing while every store is reachable, and
    /// without it a client cut off from one store fails every request that
    /// store leads for as long as the cut lasts. Off restores that.
    pub forwarding: bool,
    /// How often a store reached only through a proxy is probed directly
    /// (one cheap call, bounded by `connect_timeout`; at least every 10
    /// ms); the first answer ends forwarding to it. A store still cut off after 10 minutes of
    /// probes is left to the next request that fails to reach it.
    pub forwarding_probe_interval: Duration,
    /// The overall deadline of one client call: every request it makes
    /// (a scan's Regions, a commit's phases, the lock resolution of a
    /// read), their rounds, backoff sleeps, lock waits and waits for PD
    /// together (each RPC is also bounded by `timeout`). A call that runs
    /// out ends with [`Failure::DeadlineExceeded`](crate::Failure::DeadlineExceeded)
    /// (or [`Failure::Timeout`](crate::Failure::Timeout) for a PD wait it
    /// cut), or undetermined for a write that may have been sent. The GC
    /// helpers of `TransactionClient` (`scan_locks`, `resolve_locks`,
    /// `cleanup_locks`, `gc`, `unsafe_destroy_range`) bound each request
    /// instead, their work growing with the range.
    pub request_deadline: Duration,
    /// How long one call waits out a Region with no leader (every voter
    /// answered `NotLeader` and none named a peer that answered as leader:
    /// an election after the leader's store died, or a lost quorum) before
    /// such rounds count against `region_backoff` again. Those rounds sleep
    /// from 2 ms up to 500 ms apart, each reloading the Region from PD,
    /// always within `request_deadline`. Default 20 s, two TiKV election
    /// timeouts; zero counts every round against `region_backoff`, as
    /// client-rust does, which fails calls within about 1.5 s of a crash.
    pub leaderless_wait: Duration,
    /// Re-send raw writes (put, delete, batches, delete range) after a
    /// failure that does not prove they never reached a store, as upstream
    /// clients do. Off by default: with two writers a re-sent or late copy
    /// of an old write can overwrite a newer acknowledged one. On, the
    /// client favours availability: a write fails less often, but may be
    /// applied twice or late. Compare-and-swap is never re-sent either way.
    pub at_least_once_writes: bool,
    /// How many Regions the client caches at most; past it, the Regions
    /// cached longest ago are dropped (and reloaded from PD when needed).
    pub region_cache_capacity: usize,
    /// How long a cached Region lives without use before it is reloaded
    /// from PD ([`DEFAULT_REGION_CACHE_TTL`]). Each use extends it; a
    /// Region PD reported with a down peer (on a lookup by key or id) is
    /// reloaded once it runs out even while in use. Up to a tenth more is
    /// added at random, so Regions loaded together are not reloaded
    /// together. Counted in tenths of a second, at least one.
    pub region_cache_ttl: Duration,
    /// Unary calls or BatchCommands streams ([`RpcMode`]).
    pub rpc_mode: RpcMode,
    /// In batched mode: the most requests written as one message on a
    /// stream (at least 1). Also the in-flight count at which a stream counts
    /// as saturated and another one is opened.
    pub batch_max_size: usize,
    /// In batched mode: the most streams open to one store at once, each on
    /// its own connection (at least 1).
    pub batch_streams_per_store: usize,
    /// In batched mode: how long a saturated stream may hold a partial batch
    /// to fill it. Zero (the default) never waits; a stream that is not
    /// saturated never waits either.
    pub batch_max_wait: Duration,
    /// **beyond** The labels of this client's own location (`zone = "z1"`,
    /// ...): a replica or stale read ([`ReplicaRead`](crate::ReplicaRead))
    /// prefers the peers whose stores carry every one of them (reads kept
    /// in the client's zone), and takes any other when none does. Empty by
    /// default: no preference.
    pub local_labels: std::collections::BTreeMap<String, String>,
    /// **beyond** The tags every request of the client carries (resource
    /// group, request source, transaction source, resource group tag;
    /// [`RequestTags`]). None by default, as client-rust sends none; a
    /// transaction's own ([`TransactionOptions`](crate::TransactionOptions))
    /// win field by field.
    pub request_tags: RequestTags,
    /// **beyond** Each attempt of a read tells TiKV how long the client
    /// waits for it (`Context.max_execution_duration_ms`: the smaller of
    /// `timeout` and what is left of `request_deadline`), so TiKV drops
    /// reads the client gave up on. On by default; off sends no deadline,
    /// as client-rust does (TiKV then sets no limit). Writes never carry
    /// one either way.
    pub server_deadlines: bool,
    /// **beyond** Replica reads (follower, mixed, learner and stale) pass
    /// over a store whose own health feedback calls it slow (TiKV's slow
    /// score, 80 or more) while another replica is not slow, as client-go
    /// does. On by default; leader requests never look at it. Off: the
    /// feedback is still kept and reported, but the choice ignores it.
    pub slow_store_feedback: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            region_backoff: DEFAULT_REGION_BACKOFF,
            ca_path: None,
            cert_path: None,
            key_path: None,
            grpc_max_decoding_message_size: DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
            keyspace: None,
            max_concurrency: 16,
            store_health: true,
            store_cooldown: DEFAULT_STORE_COOLDOWN,
            store_timeout_strikes: 2,
            store_probe_after: DEFAULT_STORE_PROBE_AFTER,
            shared_busy_probe: true,
            busy_probe_window: DEFAULT_BUSY_PROBE_WINDOW,
            single_flight_connect: true,
            forwarding: true,
            forwarding_probe_interval: DEFAULT_FORWARDING_PROBE_INTERVAL,
            request_deadline: DEFAULT_REQUEST_DEADLINE,
            leaderless_wait: DEFAULT_LEADERLESS_WAIT,
            at_least_once_writes: false,
            region_cache_capacity: DEFAULT_REGION_CACHE_CAPACITY,
            region_cache_ttl: DEFAULT_REGION_CACHE_TTL,
            rpc_mode: RpcMode::default(),
            batch_max_size: DEFAULT_BATCH_MAX_SIZE,
            batch_streams_per_store: DEFAULT_BATCH_STREAMS_PER_STORE,
            batch_max_wait: DEFAULT_BATCH_MAX_WAIT,
            local_labels: std::collections::BTreeMap::new(),
            request_tags: RequestTags::default(),
            server_deadlines: true,
            slow_store_feedback: true,
        }
    }
}

impl Config {
    /// Uses TLS with the given CA, certificate and key files.
    pub fn with_security(
        mut self,
        ca_path: impl Into<PathBuf>,
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.ca_path = Some(ca_path.into());
        self.cert_path = Some(cert_path.into());
        self.key_path = Some(key_path.into());
        self
    }

    /// The TLS file paths as one value.
    pub fn security(&self) -> SecurityConfig {
        SecurityConfig {
            ca_path: self.ca_path.clone(),
            cert_path: self.cert_path.clone(),
            key_path: self.key_path.clone(),
        }
    }

    /// Sets the largest gRPC response the client decodes, in bytes.
    #[must_use]
    pub fn with_grpc_max_decoding_message_size(mut self, size: usize) -> Self {
        self.grpc_max_decoding_message_size = size;
        self
    }

    /// Uses the keyspace named `keyspace` (API v2). The client loads its id
    /// from PD when it connects and fails with
    /// [`Error::KeyspaceNotFound`](crate::Error::KeyspaceNotFound) if PD does
    /// not know it.
    #[must_use]
    pub fn with_keyspace(mut self, keyspace: &str) -> Self {
        self.keyspace = Some(keyspace.to_owned());
        self
    }

    /// Uses the keyspace PD creates by default, `DEFAULT` (API v2).
    #[must_use]
    pub fn with_default_keyspace(self) -> Self {
        self.with_keyspace(DEFAULT_KEYSPACE_NAME)
    }

    /// Sets the per-RPC timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the Region retry schedule.
    pub fn with_region_backoff(mut self, backoff: Backoff) -> Self {
        self.region_backoff = backoff;
        self
    }

    /// Sets the store-health cool-down.
    pub fn with_store_cooldown(mut self, cooldown: Duration) -> Self {
        self.store_cooldown = cooldown;
        self
    }

    /// Sets how long an RPC waits before its store is probed
    /// ([`Config::store_probe_after`]).
    pub fn with_store_probe_after(mut self, after: Duration) -> Self {
        self.store_probe_after = after;
        self
    }

    /// Sets the labels of this client's location
    /// ([`Config::local_labels`]): replica and stale reads prefer stores
    /// that carry them all.
    pub fn with_local_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.local_labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// Sets how long one call waits out a Region with no leader (see
    /// [`leaderless_wait`](Self::leaderless_wait)); zero for client-rust's
    /// behaviour.
    pub fn with_leaderless_wait(mut self, wait: Duration) -> Self {
        self.leaderless_wait = wait;
        self
    }

    /// Turns the slow-store preference of replica reads on or off
    /// ([`Config::slow_store_feedback`]).
    pub fn with_slow_store_feedback(mut self, on: bool) -> Self {
        self.slow_store_feedback = on;
        self
    }

    /// Sets the overall deadline of one request.
    pub fn with_request_deadline(mut self, deadline: Duration) -> Self {
        self.request_deadline = deadline;
        self
    }

    /// Re-sends raw writes after failures that may have delivered them
    /// (at-least-once writes; see [`Config::at_least_once_writes`]).
    pub fn with_at_least_once_writes(mut self) -> Self {
        self.at_least_once_writes = true;
        self
    }

    /// Sets how long a cached Region lives without use
    /// ([`region_cache_ttl`](Self::region_cache_ttl)).
    pub fn with_region_cache_ttl(mut self, ttl: Duration) -> Self {
        self.region_cache_ttl = ttl;
        self
    }

    /// Sends requests as unary calls or over BatchCommands streams.
    ///
    /// ```
    /// use tikv_plan::{Config, RpcMode};
    /// let config = Config::default().with_rpc_mode(RpcMode::Batched);
    /// assert_eq!(config.rpc_mode, RpcMode::Batched);
    /// ```
    #[must_use]
    pub fn with_rpc_mode(mut self, mode: RpcMode) -> Self {
        self.rpc_mode = mode;
        self
    }

    /// Sets the batched-mode limits: requests per message and streams per
    /// store (each raised to at least 1).
    #[must_use]
    pub fn with_batch_limits(mut self, max_size: usize, streams_per_store: usize) -> Self {
        self.batch_max_size = max_size.max(1);
        self.batch_streams_per_store = streams_per_store.max(1);
        self
    }

    /// Sets how long a saturated stream may hold a partial batch.
    #[must_use]
    pub fn with_batch_max_wait(mut self, wait: Duration) -> Self {
        self.batch_max_wait = wait;
        self
    }

    /// **beyond** Charges every request of the client to TiKV resource
    /// group `name` (`Context.resource_control_context`).
    ///
    /// ```
    /// use tikv_plan::{Config, RequestSource};
    /// let config = Config::default()
    ///     .with_resource_group("batch_jobs")
    ///     .with_request_source(RequestSource::external("Import"));
    /// assert_eq!(config.request_tags.resource_group.as_deref(), Some("batch_jobs"));
    /// ```
    #[must_use]
    pub fn with_resource_group(mut self, name: impl Into<String>) -> Self {
        self.request_tags.resource_group = Some(name.into());
        self
    }

    /// **beyond** Names where the client's requests come from
    /// (`Context.request_source`, client-go's `{internal|external}_{type}`).
    #[must_use]
    pub fn with_request_source(mut self, source: RequestSource) -> Self {
        self.request_tags.request_source = Some(source);
        self
    }

    /// **beyond** Sets every tag the client's requests carry at once
    /// ([`RequestTags`]).
    #[must_use]
    pub fn with_request_tags(mut self, tags: RequestTags) -> Self {
        self.request_tags = tags;
        self
    }

    /// **beyond** Sends reads without a deadline TiKV can see, as
    /// client-rust does ([`server_deadlines`](Self::server_deadlines) off).
    #[must_use]
    pub fn without_server_deadlines(mut self) -> Self {
        self.server_deadlines = false;
        self
    }

    /// The tags' context fields for clients of this configuration.
    pub(crate) fn wire_tags(&self, tags: &RequestTags) -> WireTags {
        let mut wire = tags.wire();
        wire.no_server_deadline = !self.server_deadlines;
        wire
    }

    /// Turns every routing extension beyond upstream off (store health,
    /// shared busy probe, single-flight connect, forwarding), for
    /// comparisons.
    pub fn upstream_routing(mut self) -> Self {
        self.store_health = false;
        self.forwarding = false;
        self.shared_busy_probe = false;
        self.single_flight_connect = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_sets_the_default_transport() {
        assert_eq!(rpc_mode_from_env(None), RpcMode::Batched);
        assert_eq!(rpc_mode_from_env(Some("")), RpcMode::Batched);
        assert_eq!(rpc_mode_from_env(Some(" Unary ")), RpcMode::Unary);
        assert_eq!(rpc_mode_from_env(Some("batched")), RpcMode::Batched);
        assert_eq!(rpc_mode_from_env(Some("grpc")), RpcMode::Batched);
    }
}
