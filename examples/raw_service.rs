//! A small service on `RawClient`: user profiles (get, put, delete, list)
//! and counters (an increment by compare-and-swap), with the error handling
//! a service needs around each call.
//!
//! [`ProfileService`] is the part to copy. It turns every client error into
//! one of four answers for its own callers ([`ServiceError`]), by what the
//! error means ([`classify`]):
//!
//! - **transient** (a Region error the client's own retries could not
//!   resolve, a store or PD that could not be reached, a deadline): nothing
//!   happened, or it was a read. The service retries a few times with a
//!   backoff, then answers [`ServiceError::Unavailable`] (HTTP 503: the
//!   caller may retry);
//! - **the caller's mistake** (a scan limit over the maximum, an invalid
//!   argument): [`ServiceError::BadRequest`] at once, never retried;
//! - **undetermined** (`Error::UndeterminedError`, or any error for which
//!   `undetermined_anywhere()` holds; only writes and compare-and-swap get
//!   it): the write may or may not have been applied, now or later. The
//!   client never re-sends such a write, and the service must not either
//!   without looking: it **reads the key back** and decides from what it
//!   finds. When even that read fails, the answer is
//!   [`ServiceError::OutcomeUnknown`], never a success or a plain failure;
//! - anything else (a bug, a misconfiguration): [`ServiceError::Internal`].
//!
//! Counters live under their own prefix and are written only through a
//! client in atomic mode (`with_atomic_for_cas()`), as TiKV requires for
//! keys that compare-and-swap touches. An increment carries a request id,
//! and the counter's value keeps the ids of its last few increments, so a
//! read tells whether an increment was applied: that makes the undetermined
//! case decidable, and makes a caller's re-sent request harmless.
//!
//! With no arguments the program starts a simulated cluster in-process and
//! shows each case: concurrent increments (compare-and-swap conflicts), a
//! put, a delete and an increment whose answers are lost (the writes were
//! applied), every store answering `ServerIsBusy` (the service gives up
//! with `Unavailable`), and a bad scan limit. With `--pd HOST:PORT` it runs
//! the fault-free steps against a real cluster, under the key prefix
//! `raw_service/`. It exits non-zero when an expectation fails.
//!
//! ```text
//! cargo run --example raw_service
//! cargo run --example raw_service -- --pd 127.0.0.1:2379
//! ```
//!
//! Outside this repository, [`classify`] names gRPC status codes with
//! `tonic::Code`: add `tonic` (the version tikv-plan uses) to your
//! dependencies.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::{Backoff, Config, Error, RawClient};
use tikv_sim::SimCluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PREFIX: &str = "raw_service/";
/// Attempts of one service call (transient errors, undetermined writes).
const ATTEMPTS: u32 = 3;
/// Request ids a counter remembers.
const RECENT_IDS: usize = 16;
/// Compare-and-swap rounds of one increment before the service gives up.
const CAS_ROUNDS: u32 = 100;

fn profile_key(user: &str) -> String {
    format!("{PREFIX}profiles/{user}")
}

fn counter_key(name: &str) -> String {
    format!("{PREFIX}counters/{name}")
}

/// What the service answers its own callers.
#[derive(Debug)]
enum ServiceError {
    /// The request is invalid; retrying it cannot help (HTTP 400).
    BadRequest(String),
    /// The cluster could not serve it in time, and nothing was changed:
    /// the caller may retry (HTTP 503).
    Unavailable(String),
    /// A write may or may not have been applied, and reading back could not
    /// tell (HTTP 500). Needs reconciliation; never retried blindly.
    OutcomeUnknown(String),
    /// A bug or a misconfiguration (HTTP 500).
    Internal(String),
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::BadRequest(m) => write!(f, "bad request: {m}"),
            ServiceError::Unavailable(m) => write!(f, "unavailable, retry later: {m}"),
            ServiceError::OutcomeUnknown(m) => write!(f, "outcome unknown: {m}"),
            ServiceError::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl std::error::Error for ServiceError {}

/// What a client error means for the call that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A write that may or may not have been applied: read before deciding.
    Undetermined,
    /// Worth another try after a backoff; nothing was applied.
    Transient,
    /// The caller's request is wrong.
    BadRequest,
    /// Anything else: a bug or a misconfiguration.
    Internal,
}

fn classify(e: &Error) -> Class {
    // First, always: a multi-Region write whose pieces failed differently,
    // or a deadline whose last error was undetermined, is undetermined too,
    // though it is not an `Error::UndeterminedError` itself.
    if e.undetermined_anywhere() {
        return Class::Undetermined;
    }
    match e {
        Error::RegionError(_) | Error::LeaderNotFound { .. } => Class::Transient,
        Error::GrpcAPI(status) => match status.code() {
            tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::ResourceExhausted
            | tonic::Code::Aborted => Class::Transient,
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => Class::BadRequest,
            _ => Class::Internal,
        },
        Error::MaxScanLimitExceeded { .. } => Class::BadRequest,
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors)
            if !errors.is_empty() && errors.iter().all(|e| classify(e) == Class::Transient) =>
        {
            Class::Transient
        }
        _ => Class::Internal,
    }
}

/// The answer for an error that is not worth (or no longer worth) a retry.
fn give_up(what: &str, e: &Error) -> ServiceError {
    let message = format!("{what}: {e}");
    match classify(e) {
        Class::Transient => ServiceError::Unavailable(message),
        Class::BadRequest => ServiceError::BadRequest(message),
        Class::Undetermined => ServiceError::OutcomeUnknown(message),
        Class::Internal => ServiceError::Internal(message),
    }
}

async fn backoff(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(50 << attempt.min(5))).await;
}

/// A counter's value: the count and the ids of its last increments,
/// `7;id-a,id-b`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Counter {
    count: u64,
    recent: Vec<String>,
}

impl Counter {
    fn decode(value: Option<&[u8]>) -> Result<Counter, String> {
        let Some(value) = value else {
            return Ok(Counter::default());
        };
        let text = std::str::from_utf8(value).map_err(|e| e.to_string())?;
        let (count, ids) = text
            .split_once(';')
            .ok_or_else(|| format!("malformed counter {text:?}"))?;
        Ok(Counter {
            count: count
                .parse()
                .map_err(|e| format!("counter {text:?}: {e}"))?,
            recent: ids
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    fn encode(&self) -> Vec<u8> {
        format!("{};{}", self.count, self.recent.join(",")).into_bytes()
    }

    fn incremented(&self, request_id: &str) -> Counter {
        let mut recent = self.recent.clone();
        recent.push(request_id.to_owned());
        if recent.len() > RECENT_IDS {
            recent.remove(0);
        }
        Counter {
            count: self.count + 1,
            recent,
        }
    }
}

/// What the service did, for its metrics.
#[derive(Debug, Default)]
struct ServiceStats {
    transient_retries: AtomicU64,
    cas_conflicts: AtomicU64,
    undetermined: AtomicU64,
    undetermined_applied: AtomicU64,
    undetermined_not_applied: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The service. Cheap to clone: clones share the clients and the stats.
#[derive(Clone)]
struct ProfileService {
    /// Profiles: plain writes.
    kv: RawClient,
    /// Counters: atomic mode, every write a compare-and-swap.
    counters: RawClient,
    stats: Arc<ServiceStats>,
}

impl ProfileService {
    fn new(client: RawClient) -> Self {
        ProfileService {
            counters: client.with_atomic_for_cas(),
            kv: client,
            stats: Arc::default(),
        }
    }

    /// Runs a read, retrying transient errors.
    async fn read<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, ServiceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = tikv_plan::Result<T>>,
    {
        let mut attempt = 1;
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(e) if classify(&e) == Class::Transient && attempt < ATTEMPTS => {
                    bump(&self.stats.transient_retries);
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(give_up(what, &e)),
            }
        }
    }

    /// The value under `key` after a write's outcome was undetermined. When
    /// even this read fails, the write's outcome stays unknown.
    async fn read_back(
        &self,
        client: &RawClient,
        key: &str,
    ) -> Result<Option<Vec<u8>>, ServiceError> {
        bump(&self.stats.undetermined);
        self.read(key, || client.get(key.to_owned()))
            .await
            .map_err(|e| {
                ServiceError::OutcomeUnknown(format!(
                    "a write to {key} may or may not have been applied, and reading it back failed: {e}"
                ))
            })
    }

    async fn get_profile(&self, user: &str) -> Result<Option<String>, ServiceError> {
        let value = self
            .read("get profile", || self.kv.get(profile_key(user)))
            .await?;
        value
            .map(|v| String::from_utf8(v).map_err(|e| ServiceError::Internal(e.to_string())))
            .transpose()
    }

    /// Up to `limit` profiles in user order.
    async fn list_profiles(&self, limit: u32) -> Result<Vec<(String, String)>, ServiceError> {
        let (start, end) = (profile_key(""), format!("{PREFIX}profiles0"));
        let pairs = self
            .read("list profiles", || {
                self.kv.scan(start.clone()..end.clone(), limit)
            })
            .await?;
        let start_len = start.len();
        pairs
            .into_iter()
            .map(|pair| {
                let key = String::from_utf8(Vec::from(pair.key().clone()));
                let value = String::from_utf8(pair.into_value());
                match (key, value) {
                    (Ok(k), Ok(v)) => Ok((k[start_len..].to_owned(), v)),
                    _ => Err(ServiceError::Internal("a profile is not UTF-8".to_owned())),
                }
            })
            .collect()
    }

    /// Sets a profile. Each profile has one writer (its user's requests,
    /// one at a time), so after an undetermined put that the read-back does
    /// not show, writing the same value again is what the caller asked for.
    /// (What raw KV cannot rule out: the lost put landing late, over a
    /// newer write. Where that matters, use a transaction or a
    /// compare-and-swap, as `increment` does.)
    async fn put_profile(&self, user: &str, profile: &str) -> Result<(), ServiceError> {
        let key = profile_key(user);
        for attempt in 1..=ATTEMPTS {
            let error = match self.kv.put(key.clone(), profile.to_owned()).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            match classify(&error) {
                Class::Undetermined => {
                    let found = self.read_back(&self.kv, &key).await?;
                    if found.as_deref() == Some(profile.as_bytes()) {
                        bump(&self.stats.undetermined_applied);
                        println!(
                            "    put {key}: outcome undetermined ({error}); read back: applied"
                        );
                        return Ok(());
                    }
                    bump(&self.stats.undetermined_not_applied);
                    println!("    put {key}: outcome undetermined; read back: not applied, writing again");
                }
                Class::Transient if attempt < ATTEMPTS => {
                    bump(&self.stats.transient_retries);
                    backoff(attempt).await;
                }
                _ => return Err(give_up("put profile", &error)),
            }
        }
        // Only an undetermined last attempt gets here: it may still land.
        Err(ServiceError::OutcomeUnknown(format!(
            "put {key}: no definite answer after {ATTEMPTS} attempts"
        )))
    }

    /// Deletes a profile (deleting a missing one is not an error). Same
    /// rule as `put_profile` after an undetermined delete.
    async fn delete_profile(&self, user: &str) -> Result<(), ServiceError> {
        let key = profile_key(user);
        for attempt in 1..=ATTEMPTS {
            let error = match self.kv.delete(key.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            match classify(&error) {
                Class::Undetermined => {
                    if self.read_back(&self.kv, &key).await?.is_none() {
                        bump(&self.stats.undetermined_applied);
                        println!(
                            "    delete {key}: outcome undetermined; read back: gone, so applied"
                        );
                        return Ok(());
                    }
                    bump(&self.stats.undetermined_not_applied);
                    println!("    delete {key}: outcome undetermined; read back: still there, deleting again");
                }
                Class::Transient if attempt < ATTEMPTS => {
                    bump(&self.stats.transient_retries);
                    backoff(attempt).await;
                }
                _ => return Err(give_up("delete profile", &error)),
            }
        }
        // Only an undetermined last attempt gets here: it may still land.
        Err(ServiceError::OutcomeUnknown(format!(
            "delete {key}: no definite answer after {ATTEMPTS} attempts"
        )))
    }

    /// Adds one to a counter and returns the new count. `request_id` makes
    /// it idempotent: an increment with an id the counter remembers is not
    /// applied again (its count is returned as the current count).
    ///
    /// Every loop reads the counter first, so after an undetermined swap
    /// the next loop decides from the value: our id is in it (applied); or
    /// the value is the one we swapped from (not applied yet: swapping from
    /// it again is safe, because only one of the two swaps can match it); or
    /// it moved on without our id (ours can no longer match: increment from
    /// the new value).
    async fn increment(&self, name: &str, request_id: &str) -> Result<u64, ServiceError> {
        if request_id.is_empty() || request_id.contains([',', ';']) {
            return Err(ServiceError::BadRequest(format!(
                "request id {request_id:?}: must be non-empty, without ',' or ';'"
            )));
        }
        let key = counter_key(name);
        let mut undetermined_at: Option<u64> = None;
        let mut transient = 0;
        for _ in 0..CAS_ROUNDS {
            let value = match undetermined_at {
                None => {
                    self.read("read counter", || self.counters.get(key.clone()))
                        .await?
                }
                Some(_) => self.read_back(&self.counters, &key).await?,
            };
            let current = Counter::decode(value.as_deref()).map_err(ServiceError::Internal)?;
            if current.recent.iter().any(|id| id == request_id) {
                if undetermined_at.is_some() {
                    bump(&self.stats.undetermined_applied);
                    println!("    increment {key} ({request_id}): read back: applied");
                }
                return Ok(current.count);
            }
            if let Some(count) = undetermined_at.take() {
                // Our id is not there. If more increments than the counter
                // remembers landed since, ours may be among the forgotten.
                if current.count > count + RECENT_IDS as u64 {
                    return Err(ServiceError::OutcomeUnknown(format!(
                        "increment {request_id} of {key}: undetermined, and too many increments since to tell"
                    )));
                }
                bump(&self.stats.undetermined_not_applied);
                println!("    increment {key} ({request_id}): read back: not applied");
            }
            let next = current.incremented(request_id);
            match self
                .counters
                .compare_and_swap(key.clone(), value, next.encode())
                .await
            {
                Ok((_, true)) => return Ok(next.count),
                // Another increment got there first: read again.
                Ok((_, false)) => bump(&self.stats.cas_conflicts),
                Err(e) => match classify(&e) {
                    Class::Undetermined => {
                        println!("    increment {key} ({request_id}): outcome undetermined ({e})");
                        undetermined_at = Some(current.count);
                    }
                    Class::Transient if transient + 1 < ATTEMPTS => {
                        transient += 1;
                        bump(&self.stats.transient_retries);
                        backoff(transient).await;
                    }
                    _ => return Err(give_up("increment", &e)),
                },
            }
        }
        Err(match undetermined_at {
            Some(_) => ServiceError::OutcomeUnknown(format!(
                "increment {request_id} of {key}: still undetermined after {CAS_ROUNDS} rounds"
            )),
            None => ServiceError::Unavailable(format!(
                "increment of {key}: lost {CAS_ROUNDS} rounds to other increments"
            )),
        })
    }
}

fn expect(condition: bool, what: &str) -> Result<(), BoxError> {
    if condition {
        Ok(())
    } else {
        Err(format!("expectation failed: {what}").into())
    }
}

/// Profiles and concurrent increments: what runs against any cluster.
async fn basic_steps(service: &ProfileService) -> Result<(), BoxError> {
    println!("1. Profiles: put, get, list, delete");
    for (user, profile) in [("alice", "Alice A."), ("bob", "Bob B."), ("zoe", "Zoe Z.")] {
        service.put_profile(user, profile).await?;
    }
    let alice = service.get_profile("alice").await?;
    println!("  alice = {alice:?}");
    expect(alice.as_deref() == Some("Alice A."), "alice's profile")?;
    let listed = service.list_profiles(10).await?;
    println!("  listed: {listed:?}");
    expect(listed.len() == 3, "three profiles listed")?;
    service.delete_profile("bob").await?;
    expect(
        service.get_profile("bob").await?.is_none(),
        "bob's profile deleted",
    )?;

    println!("2. A counter: 4 workers increment it 10 times each, concurrently");
    // Request ids are unique per run, so a rerun against a real cluster
    // counts again.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let name = "page-views";
    let before = service.increment(name, &format!("{run}-first")).await?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..4 {
        let service = service.clone();
        workers.push(tokio::spawn(async move {
            for n in 0..10 {
                service
                    .increment(name, &format!("{run}-w{worker}-{n}"))
                    .await?;
            }
            Ok::<_, ServiceError>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let last = format!("{run}-last");
    let after = service.increment(name, &last).await?;
    println!(
        "  count went from {before} to {after} in {:?}; {} swaps lost to another worker and were redone",
        started.elapsed(),
        load(&service.stats.cas_conflicts)
    );
    expect(after == before + 41, "every increment counted once")?;
    // A caller that re-sends a request (its answer was lost on the way to
    // it) gets the same answer, and nothing is counted twice.
    let again = service.increment(name, &last).await?;
    println!(
        "  the last increment re-sent with the same request id: count {again}, not counted again"
    );
    expect(again == after, "a re-sent increment is not applied twice")?;

    println!("3. A caller's mistake is answered at once, never retried");
    let retries = load(&service.stats.transient_retries);
    match service.list_profiles(1_000_000).await {
        Err(ServiceError::BadRequest(m)) => println!("  list_profiles(1000000): {m}"),
        other => return Err(format!("expected a bad request, got {other:?}").into()),
    }
    expect(
        load(&service.stats.transient_retries) == retries,
        "no retry of a bad request",
    )
}

/// The faults only the simulated cluster can inject.
async fn fault_steps(service: &ProfileService, cluster: &SimCluster) -> Result<(), BoxError> {
    let leader_of = |key: &str| -> Result<u64, BoxError> {
        let region = cluster.region_for_key(key.as_bytes()).ok_or("no Region")?;
        Ok(cluster.leader_of(region.id).ok_or("no leader")?.store_id)
    };

    println!("4. Lost answers: a put, a delete and an increment are applied, their answers lost");
    let settled = load(&service.stats.undetermined_applied);
    let key = profile_key("carol");
    cluster.drop_next_response(leader_of(&key)?, "raw_put")?;
    service.put_profile("carol", "Carol C.").await?;
    expect(
        service.get_profile("carol").await?.as_deref() == Some("Carol C."),
        "carol's profile written once",
    )?;
    cluster.drop_next_response(leader_of(&key)?, "raw_delete")?;
    service.delete_profile("carol").await?;
    expect(
        service.get_profile("carol").await?.is_none(),
        "carol's profile deleted",
    )?;
    let name = "orders";
    let key = counter_key(name);
    let before = service.increment(name, "order-1").await?;
    let swaps = || -> u64 {
        cluster
            .store_ids()
            .into_iter()
            .map(|s| cluster.counters(s).total("raw_compare_and_swap"))
            .sum()
    };
    let swaps_before = swaps();
    cluster.drop_next_response(leader_of(&key)?, "raw_compare_and_swap")?;
    let count = service.increment(name, "order-2").await?;
    println!("  the increment returned {count} (was {before})");
    expect(
        count == before + 1,
        "the lost-answer increment counted once",
    )?;
    println!(
        "  compare-and-swap requests the stores saw for it: {} (never re-sent)",
        swaps() - swaps_before
    );
    expect(swaps() - swaps_before == 1, "the increment sent once")?;
    expect(
        load(&service.stats.undetermined_applied) - settled == 3,
        "three undetermined writes settled as applied",
    )?;

    println!("5. Every store answers ServerIsBusy: the service gives up with Unavailable");
    for store in cluster.store_ids() {
        cluster.store_busy(store, Some(20));
    }
    let started = Instant::now();
    let result = service.get_profile("alice").await;
    let retries = load(&service.stats.transient_retries);
    match result {
        Err(ServiceError::Unavailable(m)) => println!(
            "  get_profile(alice) after {retries} service retries, {:?}: {m}",
            started.elapsed()
        ),
        other => return Err(format!("expected unavailable, got {other:?}").into()),
    }
    for store in cluster.store_ids() {
        cluster.store_busy(store, None);
    }
    let alice = service.get_profile("alice").await?;
    println!("  busy over: alice = {alice:?}");
    expect(alice.as_deref() == Some("Alice A."), "alice readable again")
}

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(200))
        .with_region_backoff(Backoff::no_jitter_backoff(10, 50, 3))
        .with_request_deadline(Duration::from_secs(1))
}

fn print_stats(service: &ProfileService) {
    let s = &service.stats;
    println!(
        "service stats: transient retries {}, compare-and-swap conflicts {}, undetermined writes {} ({} applied, {} not applied)",
        load(&s.transient_retries),
        load(&s.cas_conflicts),
        load(&s.undetermined),
        load(&s.undetermined_applied),
        load(&s.undetermined_not_applied)
    );
}

async fn against_real_cluster(pd: String) -> Result<(), BoxError> {
    println!("Connecting to PD at {pd}");
    let service = ProfileService::new(RawClient::new_with_config(vec![pd], config()).await?);
    basic_steps(&service).await?;
    print_stats(&service);
    Ok(())
}

async fn against_simulated_cluster() -> Result<(), BoxError> {
    // Three Regions: the counters and profiles a-l share the middle one.
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![
            counter_key("").into_bytes(),
            profile_key("m").into_bytes(),
        ])
        .start()
        .await?;
    println!("Simulated cluster: PD at {}", cluster.pd_addr());
    let service =
        ProfileService::new(RawClient::new_with_config(cluster.pd_endpoints(), config()).await?);
    basic_steps(&service).await?;
    fault_steps(&service, &cluster).await?;
    print_stats(&service);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let result = match (args.next().as_deref(), args.next()) {
        (None, _) => against_simulated_cluster().await,
        (Some("--pd"), Some(pd)) => against_real_cluster(pd).await,
        _ => Err("usage: raw_service [--pd HOST:PORT]".into()),
    };
    if result.is_ok() {
        println!("OK");
    }
    result
}
