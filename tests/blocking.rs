//! The blocking clients (`SyncRawClient`, `SyncTransactionClient` and the
//! transactions and snapshots it hands out), used as a program with a
//! plain `fn main` uses them: every test is a plain `#[test]` on a thread
//! without a runtime, against `tikv-sim` running on a runtime of its own
//! over loopback gRPC. Inside a runtime every call is refused with a typed
//! error (`Failure::NestedRuntime`), never a panic; dropping a client never
//! waits for requests in flight, and never panics inside a runtime.

use std::thread;
use std::time::{Duration, Instant};

use tikv_plan::codec::encode_bytes;
use tikv_plan::{
    CheckLevel, Config, Error, Failure, KvPair, RawClient, SyncRawClient, SyncTransactionClient,
    TimestampExt, TransactionOptions,
};
use tikv_sim::{HangMode, Outcome, SimCluster, SimClusterBuilder};

/// A simulated cluster on a runtime of its own, so the test's thread stays
/// outside any runtime.
struct Sim {
    cluster: Option<SimCluster>,
    runtime: tokio::runtime::Runtime,
}

impl Sim {
    fn start(builder: SimClusterBuilder) -> Sim {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let cluster = runtime.block_on(builder.start()).unwrap();
        Sim {
            cluster: Some(cluster),
            runtime,
        }
    }

    /// Three stores, three replicas, Regions split at `splits` as written.
    fn raw(splits: &[&str]) -> Sim {
        Sim::start(
            SimCluster::builder()
                .stores(3)
                .replicas(3)
                .split_keys(splits.iter().map(|k| k.as_bytes().to_vec()).collect()),
        )
    }

    /// Three stores, three replicas, Regions split at the encodings of
    /// `splits` (transactional keys are routed by their encoding).
    fn txn(splits: &[&str]) -> Sim {
        Sim::start(
            SimCluster::builder()
                .stores(3)
                .replicas(3)
                .split_keys(splits.iter().map(|k| encode_bytes(k.as_bytes())).collect()),
        )
    }

    /// One store holding every Region: nothing to fall back to.
    fn single() -> Sim {
        Sim::start(SimCluster::builder().stores(1).replicas(1))
    }

    fn cluster(&self) -> &SimCluster {
        self.cluster.as_ref().unwrap()
    }

    fn endpoints(&self) -> Vec<String> {
        self.cluster().pd_endpoints()
    }

    /// How many `method` requests the stores received, hung ones included.
    fn received(&self, method: &str, outcome: Option<Outcome>) -> u64 {
        let cluster = self.cluster();
        cluster
            .store_ids()
            .into_iter()
            .map(|store| {
                let counters = cluster.counters(store);
                match outcome {
                    Some(outcome) => counters.count(method, outcome),
                    None => counters.total(method),
                }
            })
            .sum()
    }

    /// Waits until a `method` request hangs at a store (bounded).
    fn wait_for_hung(&self, method: &str) {
        wait_until(&format!("a {method} request hangs"), || {
            self.received(method, Some(Outcome::Hung)) > 0
        });
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _entered = self.runtime.enter();
        drop(self.cluster.take());
    }
}

/// Polls `done` until it holds, failing after 20 s.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "waited 20 s for: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

fn outside_any_runtime() {
    assert!(
        tokio::runtime::Handle::try_current().is_err(),
        "the test must run on a thread outside any runtime"
    );
}

fn pair(key: &str, value: &str) -> KvPair {
    KvPair::new(key.to_owned(), value.to_owned())
}

fn keys_of(pairs: impl IntoIterator<Item = KvPair>) -> Vec<Vec<u8>> {
    pairs.into_iter().map(|p| Vec::from(p.into_key())).collect()
}

/// The call a refusal inside a runtime names: an `Error::GrpcAPI` with code
/// `FailedPrecondition` carrying `Failure::NestedRuntime`. Anything else
/// fails the test.
fn refused_call(result: Result<impl std::fmt::Debug, Error>) -> String {
    let error = result.expect_err("refused inside a runtime");
    let Error::GrpcAPI(status) = &error else {
        panic!("expected Error::GrpcAPI, got {error:?}");
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    match error.failure() {
        Some(Failure::NestedRuntime { call }) => call.clone(),
        other => panic!("expected Failure::NestedRuntime, got {other:?}"),
    }
}

fn warn_on_drop(options: TransactionOptions) -> TransactionOptions {
    options.drop_check(CheckLevel::Warn)
}

/// The clients, transactions and snapshots move between threads, and
/// the clients are shared between them, as the async ones are.
#[test]
fn the_blocking_types_go_to_other_threads() {
    fn shared<T: Send + Sync>() {}
    fn sent<T: Send>() {}
    shared::<SyncRawClient>();
    shared::<SyncTransactionClient>();
    sent::<tikv_plan::SyncTransaction>();
    sent::<tikv_plan::SyncSnapshot>();
    sent::<tikv_plan::blocking::SyncScanIter>();
}

#[test]
fn raw_reads_and_writes_from_a_plain_thread() {
    outside_any_runtime();
    let sim = Sim::raw(&["m"]);
    let client = SyncRawClient::new(sim.endpoints()).unwrap();
    client.put("a".to_owned(), "1".to_owned()).unwrap();
    assert_eq!(client.get("a".to_owned()).unwrap(), Some(b"1".to_vec()));
    assert_eq!(sim.cluster().value_of(b"a"), Some(b"1".to_vec()));
    // Both sides of the split.
    client
        .batch_put(vec![pair("b", "2"), pair("n", "3"), pair("z", "4")])
        .unwrap();
    let got = client.batch_get(vec!["a".to_owned(), "n".to_owned(), "q".to_owned()]);
    assert_eq!(keys_of(got.unwrap()), [b"a".to_vec(), b"n".to_vec()]);
    let all = [b"a".to_vec(), b"b".to_vec(), b"n".to_vec(), b"z".to_vec()];
    assert_eq!(keys_of(client.scan("a".to_owned().., 10).unwrap()), all);
    let mut reversed = all.to_vec();
    reversed.reverse();
    assert_eq!(
        keys_of(client.scan_reverse("a".to_owned().., 10).unwrap()),
        reversed
    );
    let keys: Vec<Vec<u8>> = client
        .scan_keys("a".to_owned().., 2)
        .unwrap()
        .into_iter()
        .map(Vec::from)
        .collect();
    assert_eq!(keys, all[..2]);
    // A stream read a page of one pair at a time, across the Regions.
    let streamed: Vec<KvPair> = client
        .scan_stream("a".to_owned().., 1)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(keys_of(streamed), all);
    let streamed: Vec<KvPair> = client
        .scan_stream_reverse("a".to_owned().., 3)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(keys_of(streamed), reversed);
    let checksum = client.checksum("a".to_owned()..).unwrap();
    assert_eq!(checksum.total_kvs, 4);
    // Deletes: one key, a batch, a range.
    client.delete("a".to_owned()).unwrap();
    assert_eq!(client.get("a".to_owned()).unwrap(), None);
    client.batch_delete(vec!["b".to_owned()]).unwrap();
    client.delete_range("m".to_owned()..).unwrap();
    assert!(client.scan("".to_owned().., 10).unwrap().is_empty());
    // Compare-and-swap in atomic mode.
    let atomic = client.with_atomic_for_cas();
    let (before, swapped) = atomic
        .compare_and_swap("c".to_owned(), None, b"x".to_vec())
        .unwrap();
    assert_eq!((before, swapped), (None, true));
    let (before, swapped) = atomic
        .compare_and_swap("c".to_owned(), Some(b"y".to_vec()), b"z".to_vec())
        .unwrap();
    assert_eq!((before, swapped), (Some(b"x".to_vec()), false));
}

#[test]
fn the_blocking_raw_client_fails_as_the_async_one_does() {
    outside_any_runtime();
    let sim = Sim::raw(&[]);
    let client = SyncRawClient::new(sim.endpoints()).unwrap();
    let endpoints = sim.endpoints();
    let (async_scan, async_cas) = sim.runtime.block_on(async move {
        let client = RawClient::new(endpoints).await.unwrap();
        let scan = client.scan("a".to_owned().., 10_241).await;
        let cas = client
            .compare_and_swap("k".to_owned(), None, b"v".to_vec())
            .await;
        (scan, cas)
    });
    // A scan over TiKV's limit: the same failure, the same sentence.
    let scan = client.scan("a".to_owned().., 10_241);
    let (scan, async_scan) = (scan.unwrap_err(), async_scan.unwrap_err());
    assert!(
        matches!(scan, Error::MaxScanLimitExceeded { .. }),
        "{scan:?}"
    );
    assert_eq!(scan.to_string(), async_scan.to_string());
    // Compare-and-swap outside atomic mode.
    let cas = client.compare_and_swap("k".to_owned(), None, b"v".to_vec());
    assert!(matches!(cas, Err(Error::UnsupportedMode)), "{cas:?}");
    assert!(matches!(async_cas, Err(Error::UnsupportedMode)));
    // A stream with no page size yields its error once, then ends.
    let mut stream = client.scan_stream("a".to_owned().., 0);
    let first = stream.next().unwrap().unwrap_err();
    assert!(matches!(first.failure(), Some(Failure::InvalidArgument(_))));
    assert!(stream.next().is_none());
}

#[test]
fn transactions_from_a_plain_thread() {
    outside_any_runtime();
    let sim = Sim::txn(&["m"]);
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    // Optimistic, over both Regions.
    let mut txn = client.begin_optimistic().unwrap();
    txn.put("a".to_owned(), "1".to_owned()).unwrap();
    txn.put("n".to_owned(), "2".to_owned()).unwrap();
    assert_eq!(txn.get("a".to_owned()).unwrap(), Some(b"1".to_vec()));
    let committed = txn.commit().unwrap().expect("a commit timestamp");
    assert!(committed.version() > txn.start_timestamp().version());
    assert_eq!(
        txn.status(),
        tikv_plan::transaction::TransactionStatus::Committed
    );
    // Its secondary ("n") is committed in the background: wait for it, so
    // the locks counted below are the next transaction's alone.
    wait_until("the optimistic secondary's lock is committed", || {
        sim.cluster().locks(b"", b"").is_empty()
    });
    // Pessimistic: a locking read, a write, a commit.
    let mut txn = client.begin_pessimistic().unwrap();
    assert_eq!(
        txn.get_for_update("a".to_owned()).unwrap(),
        Some(b"1".to_vec())
    );
    txn.put("a".to_owned(), "10".to_owned()).unwrap();
    txn.lock_keys(vec!["z".to_owned()]).unwrap();
    assert_eq!(sim.cluster().locks(b"", b"").len(), 2);
    txn.commit().unwrap();
    // The secondaries are committed in the background, on the client's
    // runtime, after `commit` returns.
    wait_until("the secondary's lock is committed", || {
        sim.cluster().locks(b"", b"").is_empty()
    });
    // A rolled-back write is never seen.
    let mut txn = client.begin_optimistic().unwrap();
    txn.put("b".to_owned(), "gone".to_owned()).unwrap();
    txn.rollback().unwrap();
    let mut check = client.begin_optimistic().unwrap();
    assert_eq!(check.get("b".to_owned()).unwrap(), None);
    assert_eq!(check.get("a".to_owned()).unwrap(), Some(b"10".to_vec()));
    let pairs = check.scan("".to_owned().., 10).unwrap();
    assert_eq!(keys_of(pairs), [b"a".to_vec(), b"n".to_vec()]);
    check.rollback().unwrap();
    // Two writers of one key: the second commit fails, as the async
    // client's does, and the first one's value stays.
    let mut first = client.begin_optimistic().unwrap();
    let mut second = client.begin_optimistic().unwrap();
    first.put("c".to_owned(), "first".to_owned()).unwrap();
    second.put("c".to_owned(), "second".to_owned()).unwrap();
    first.commit().unwrap();
    let conflict = second.commit().unwrap_err();
    assert!(
        conflict.to_string().contains("conflict"),
        "a write conflict: {conflict}"
    );
    let mut check = client.begin_optimistic().unwrap();
    assert_eq!(check.get("c".to_owned()).unwrap(), Some(b"first".to_vec()));
    check.rollback().unwrap();
}

#[test]
fn snapshots_read_at_their_timestamp() {
    outside_any_runtime();
    let sim = Sim::txn(&["m"]);
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let mut txn = client.begin_optimistic().unwrap();
    txn.put("a".to_owned(), "old".to_owned()).unwrap();
    txn.put("x".to_owned(), "old".to_owned()).unwrap();
    txn.commit().unwrap();
    let before = client.current_timestamp().unwrap();
    let mut txn = client.begin_optimistic().unwrap();
    txn.put("a".to_owned(), "new".to_owned()).unwrap();
    txn.commit().unwrap();
    let options = TransactionOptions::new_optimistic;
    let mut old = client.snapshot(before, options());
    assert_eq!(old.get("a".to_owned()).unwrap(), Some(b"old".to_vec()));
    assert!(old.key_exists("x".to_owned()).unwrap());
    assert!(!old.key_exists("y".to_owned()).unwrap());
    let got = old.batch_get(vec!["a".to_owned(), "x".to_owned()]).unwrap();
    let values: Vec<Vec<u8>> = got.map(|p| p.value().clone()).collect();
    assert_eq!(values, [b"old".to_vec(), b"old".to_vec()]);
    let keys: Vec<Vec<u8>> = old
        .scan_keys_reverse("".to_owned().., 10)
        .unwrap()
        .map(Vec::from)
        .collect();
    assert_eq!(keys, [b"x".to_vec(), b"a".to_vec()]);
    let now = client.current_timestamp().unwrap();
    let mut new = client.snapshot(now, options());
    assert_eq!(new.get("a".to_owned()).unwrap(), Some(b"new".to_vec()));
}

/// The cluster-wide calls: locks scanned, resolved and cleaned up, GC.
#[test]
fn lock_and_gc_calls_from_a_plain_thread() {
    outside_any_runtime();
    let sim = Sim::txn(&["m"]);
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let mut holder = client
        .begin_with_options(warn_on_drop(TransactionOptions::new_pessimistic()))
        .unwrap();
    holder
        .lock_keys(vec!["a".to_owned(), "z".to_owned()])
        .unwrap();
    let now = client.current_timestamp().unwrap();
    let locks = client.scan_locks(&now, "".to_owned().., 10).unwrap();
    let keys: Vec<&[u8]> = locks.iter().map(|l| l.key.as_slice()).collect();
    assert_eq!(keys, [b"a".as_slice(), b"z".as_slice()]);
    // The holder is alive: its locks stay.
    let alive = client
        .resolve_locks(locks, now, tikv_plan::Backoff::no_backoff())
        .unwrap();
    assert_eq!(alive.len(), 2);
    holder.rollback().unwrap();
    let now = client.current_timestamp().unwrap();
    let cleaned = client.cleanup_locks("".to_owned().., &now, Default::default());
    assert!(cleaned.is_ok(), "{cleaned:?}");
    assert!(client
        .scan_locks(&now, "".to_owned().., 10)
        .unwrap()
        .is_empty());
    assert!(client.gc(now).unwrap());
    assert_eq!(sim.cluster().gc_safe_point(), now.version());
}

/// Every kind of blocking call, inside a runtime: refused with the call's
/// name, nothing sent; on a plain thread again, the same objects work.
#[test]
fn inside_a_runtime_every_call_is_refused_with_a_typed_error() {
    outside_any_runtime();
    let sim = Sim::txn(&[]);
    let raw = SyncRawClient::new(sim.endpoints()).unwrap();
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let mut txn = client
        .begin_with_options(warn_on_drop(TransactionOptions::new_optimistic()))
        .unwrap();
    let mut snapshot = client.snapshot(
        client.current_timestamp().unwrap(),
        TransactionOptions::new_optimistic(),
    );
    let gets_before = sim.received("raw_get", None) + sim.received("kv_get", None);
    let outer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let endpoints = sim.endpoints();
    outer.block_on(async {
        let refused = SyncRawClient::new(endpoints.clone());
        assert_eq!(refused_call(refused), "SyncRawClient::new");
        let refused = SyncTransactionClient::new_with_config(endpoints, Config::default());
        assert_eq!(
            refused_call(refused),
            "SyncTransactionClient::new_with_config"
        );
        assert_eq!(refused_call(raw.get("k".to_owned())), "SyncRawClient::get");
        assert_eq!(
            refused_call(client.begin_optimistic()),
            "SyncTransactionClient::begin_optimistic"
        );
        assert_eq!(
            refused_call(client.current_timestamp()),
            "SyncTransactionClient::current_timestamp"
        );
        assert_eq!(
            refused_call(txn.get("k".to_owned())),
            "SyncTransaction::get"
        );
        assert_eq!(
            refused_call(snapshot.get("k".to_owned())),
            "SyncSnapshot::get"
        );
        let mut stream = raw.scan_stream("a".to_owned().., 10);
        let refused = stream.next().unwrap();
        assert_eq!(refused_call(refused), "SyncRawClient::scan_stream");
        assert!(stream.next().is_none());
    });
    // A worker thread of a multi-threaded runtime, and a thread of its
    // `spawn_blocking`, are inside it too.
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    for blocking in [false, true] {
        let raw = raw.clone();
        let error = multi.block_on(async move {
            let call = move || raw.get("k".to_owned()).unwrap_err();
            if blocking {
                tokio::task::spawn_blocking(call).await.unwrap()
            } else {
                tokio::spawn(async move { call() }).await.unwrap()
            }
        });
        let text = error.to_string();
        assert!(
            text.contains("SyncRawClient::get was called inside a Tokio runtime")
                && text.contains("use the async client there"),
            "{text}"
        );
    }
    assert_eq!(
        sim.received("raw_get", None) + sim.received("kv_get", None),
        gets_before,
        "a refused call sends nothing"
    );
    // Back on a plain thread, everything works.
    raw.put("k".to_owned(), "v".to_owned()).unwrap();
    assert_eq!(raw.get("k".to_owned()).unwrap(), Some(b"v".to_vec()));
    txn.put("t".to_owned(), "1".to_owned()).unwrap();
    txn.commit().unwrap();
    assert_eq!(snapshot.get("t".to_owned()).unwrap(), None);
}

/// A clone dropped while another clone's request waits on a hung store:
/// the drop returns at once (it would wait for the hang otherwise, and the
/// hang ends only after it), and the request is served when the store
/// answers again.
#[test]
fn dropping_a_clone_does_not_wait_for_requests_in_flight() {
    outside_any_runtime();
    let sim = Sim::single();
    let config = Config::default().with_timeout(Duration::from_secs(60));
    let client = SyncRawClient::new_with_config(sim.endpoints(), config).unwrap();
    client.put("k".to_owned(), "v".to_owned()).unwrap();
    let store = sim.cluster().store_ids()[0];
    sim.cluster().store_hang(store, HangMode::Respond);
    let other = client.clone();
    let in_flight = thread::spawn(move || other.get("k".to_owned()));
    sim.wait_for_hung("raw_get");
    drop(client);
    sim.cluster().store_unhang(store);
    assert_eq!(in_flight.join().unwrap().unwrap(), Some(b"v".to_vec()));
}

/// The last handle dropped while the client's own background work (the
/// release of a dropped transaction's locks) waits on a hung store, on a
/// plain thread and inside another runtime: the drop returns, and does
/// not panic.
#[test]
fn dropping_the_last_handle_while_requests_hang_returns() {
    outside_any_runtime();
    for inside in [false, true] {
        let sim = Sim::single();
        let config = Config::default().with_timeout(Duration::from_secs(60));
        let client = SyncTransactionClient::new_with_config(sim.endpoints(), config).unwrap();
        let mut txn = client
            .begin_with_options(warn_on_drop(TransactionOptions::new_pessimistic()))
            .unwrap();
        txn.lock_keys(vec!["k".to_owned()]).unwrap();
        let store = sim.cluster().store_ids()[0];
        sim.cluster().store_hang(store, HangMode::Respond);
        drop(txn);
        sim.wait_for_hung("kv_pessimistic_rollback");
        if inside {
            let outer = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            outer.block_on(async move { drop(client) });
        } else {
            drop(client);
        }
        sim.cluster().store_unhang(store);
    }
}

/// The last handle dropped right after a commit, on a plain thread: the
/// drop lets the secondary commits finish first, so no lock is left.
#[test]
fn the_last_drop_lets_secondary_commits_finish() {
    outside_any_runtime();
    let sim = Sim::txn(&["d", "h", "m", "r"]);
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let mut txn = client.begin_optimistic().unwrap();
    for key in ["a", "e", "i", "n", "s", "t", "u"] {
        txn.put(key.to_owned(), "v".to_owned()).unwrap();
    }
    txn.commit().unwrap();
    drop(txn);
    drop(client);
    assert!(
        sim.cluster().locks(b"", b"").is_empty(),
        "left: {:?}",
        sim.cluster().locks(b"", b"")
    );
}

/// A pessimistic transaction dropped unfinished releases its locks in the
/// background, on the client's runtime (dropped on a plain thread, it
/// could find no runtime to do it on).
#[test]
fn a_dropped_pessimistic_transaction_releases_its_locks() {
    outside_any_runtime();
    let sim = Sim::txn(&[]);
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let mut txn = client
        .begin_with_options(warn_on_drop(TransactionOptions::new_pessimistic()))
        .unwrap();
    txn.lock_keys(vec!["a".to_owned(), "b".to_owned()]).unwrap();
    assert_eq!(sim.cluster().locks(b"", b"").len(), 2);
    drop(txn);
    wait_until("the dropped transaction's locks are released", || {
        sim.cluster().locks(b"", b"").is_empty()
    });
}

/// Clients, a transaction and a snapshot dropped inside a runtime, where
/// Tokio panics when a runtime is dropped: nothing panics.
#[test]
fn dropping_inside_a_runtime_does_not_panic() {
    outside_any_runtime();
    let sim = Sim::txn(&[]);
    let raw = SyncRawClient::new(sim.endpoints()).unwrap();
    let client = SyncTransactionClient::new(sim.endpoints()).unwrap();
    let txn = client
        .begin_with_options(warn_on_drop(TransactionOptions::new_optimistic()))
        .unwrap();
    let snapshot = client.snapshot(
        client.current_timestamp().unwrap(),
        TransactionOptions::new_optimistic(),
    );
    let outer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    outer.block_on(async move {
        drop(raw);
        drop(client);
        drop(txn);
        drop(snapshot);
    });
    // On a task of a multi-threaded runtime as well: the task ends without
    // a panic.
    let raw = SyncRawClient::new(sim.endpoints()).unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let dropped = multi.block_on(async move { tokio::spawn(async move { drop(raw) }).await });
    assert!(dropped.is_ok(), "{dropped:?}");
    // The cluster is unharmed: a new client works.
    let raw = SyncRawClient::new(sim.endpoints()).unwrap();
    raw.put("k".to_owned(), "v".to_owned()).unwrap();
}
