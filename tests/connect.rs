//! Connection bounds over real sockets on 127.0.0.1: a hanging connect ends
//! with `ConnectTimeout` within the connect timeout, a refused connect fails
//! fast, a silent store is bounded by the request timeout.

// The test PD (tests/pd_support) implements the PD server stubs
// (tikv-plan-proto's `server` feature, on for the tests through tikv-sim).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::proto::kvrpcpb;
use tikv_plan::store::{KvClient, KvConnect, TikvConnect};
use tikv_plan::Error;
use tikv_plan::Failure;
use tikv_plan::SecurityManager;
use tokio::net::TcpListener;

#[path = "../src/store/tests/net.rs"]
mod net_support;
use net_support::hanging_listener;

mod pd_support;

/// Slack on top of a timeout for scheduling and the loopback round trips.
const SLACK: Duration = Duration::from_millis(1500);

fn connector(timeout: Duration, connect_timeout: Duration) -> TikvConnect {
    TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        timeout,
        connect_timeout,
    )
}

#[tokio::test]
async fn hanging_connect_ends_with_connect_timeout_within_the_bound() {
    let (_listener, _held, addr) = hanging_listener().await;
    let connect_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = connector(Duration::from_secs(5), connect_timeout)
        .connect(&addr)
        .await;
    let elapsed = started.elapsed();
    let err = result.expect_err("connecting to a full accept queue must fail");
    match err.failure() {
        Some(Failure::ConnectTimeout {
            address, timeout, ..
        }) => {
            assert_eq!(*address, addr);
            assert_eq!(*timeout, connect_timeout);
        }
        _ => panic!("expected ConnectTimeout, got {err:?}"),
    }
    assert!(
        elapsed >= connect_timeout - Duration::from_millis(50),
        "{elapsed:?}"
    );
    assert!(elapsed < connect_timeout + SLACK, "{elapsed:?}");
}

#[tokio::test]
async fn refused_connect_fails_fast_with_connect() {
    let addr = pd_support::dead_address().await;
    let connect_timeout = Duration::from_secs(3);
    let started = Instant::now();
    let result = connector(Duration::from_secs(3), connect_timeout)
        .connect(&addr)
        .await;
    let elapsed = started.elapsed();
    let err = result.expect_err("connecting to a closed port must fail");
    match err.failure() {
        Some(Failure::Connect { address, .. }) => assert_eq!(*address, addr),
        _ => panic!("expected Connect, got {err:?}"),
    }
    // Well before the connect timeout: a refusal is not waited out.
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
}

/// A store that accepts connections and never writes a byte.
async fn silent_store() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}

#[tokio::test]
async fn silent_store_is_bounded_by_the_rpc_timeout() {
    let (addr, server) = silent_store().await;
    let timeout = Duration::from_millis(400);
    let client = connector(timeout, Duration::from_millis(400))
        .connect(&addr)
        .await
        .expect("the TCP connection is accepted");
    let request = kvrpcpb::RawGetRequest {
        key: b"k".to_vec(),
        ..Default::default()
    };
    let started = Instant::now();
    let result = client.dispatch(&request).await;
    let elapsed = started.elapsed();
    match result {
        Err(Error::GrpcAPI(status)) => assert!(
            matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            ),
            "{status:?}"
        ),
        Err(e) => panic!("expected a timeout status, got {e:?}"),
        Ok(_) => panic!("a silent store answered"),
    }
    assert!(
        elapsed >= timeout - Duration::from_millis(50),
        "{elapsed:?}"
    );
    assert!(elapsed < timeout + SLACK, "{elapsed:?}");
    server.abort();
}

mod single_flight {
    use std::any::Any;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use tikv_plan::pd::{PdClient, PdRpcClient};
    use tikv_plan::store::Request;
    use tikv_plan::Config;
    use tokio::sync::watch;

    use super::*;
    use crate::pd_support::{peer, FakePd};

    /// Store 1's address in the fake PD.
    const STORE_1: &str = "127.0.0.1:20161";
    const CALLERS: usize = 16;

    /// A connector that counts its attempts and holds each one until the
    /// test opens the gate with the outcome (true: connected).
    #[derive(Clone)]
    struct GatedConnect {
        attempts: Arc<AtomicUsize>,
        gate: watch::Receiver<Option<bool>>,
    }

    #[derive(Clone)]
    pub(super) struct NullClient;

    #[async_trait]
    impl KvClient for NullClient {
        async fn dispatch(&self, _req: &dyn Request) -> tikv_plan::Result<Box<dyn Any + Send>> {
            Err(Error::InternalError {
                message: "test client sends nothing".to_owned(),
            })
        }
    }

    #[async_trait]
    impl KvConnect for GatedConnect {
        type KvClient = NullClient;

        async fn connect(&self, address: &str) -> tikv_plan::Result<NullClient> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            let mut gate = self.gate.clone();
            let outcome = *gate.wait_for(|g| g.is_some()).await.unwrap();
            match outcome {
                Some(true) => Ok(NullClient),
                _ => Err(Error::from(Failure::Connect {
                    address: address.to_owned(),
                    message: "refused by the test".to_owned(),
                    source: None,
                })),
            }
        }
    }

    struct Setup {
        pd: FakePd,
        client: Arc<PdRpcClient<GatedConnect>>,
        attempts: Arc<AtomicUsize>,
        open: watch::Sender<Option<bool>>,
    }

    async fn setup(single_flight_connect: bool) -> Setup {
        let pd = FakePd::start(1, 9).await;
        let (open, gate) = watch::channel(None);
        let attempts = Arc::new(AtomicUsize::new(0));
        let mut config = Config::default();
        config.single_flight_connect = single_flight_connect;
        let connect = GatedConnect {
            attempts: Arc::clone(&attempts),
            gate,
        };
        let client = Arc::new(
            PdRpcClient::new_with(&pd.endpoints(), &config, connect)
                .await
                .unwrap(),
        );
        Setup {
            pd,
            client,
            attempts,
            open,
        }
    }

    /// Starts `CALLERS` concurrent mappings of store 1's peer.
    async fn spawn_callers(
        client: &Arc<PdRpcClient<GatedConnect>>,
    ) -> Vec<tokio::task::JoinHandle<tikv_plan::Result<tikv_plan::store::RegionStore>>> {
        let region = client.region_for_key(b"a").await.unwrap();
        (0..CALLERS)
            .map(|_| {
                let client = Arc::clone(client);
                let region = region.clone();
                tokio::spawn(async move { client.map_peer_to_store(region, peer(21, 1)).await })
            })
            .collect()
    }

    /// Waits (bounded) until `done()` holds.
    async fn wait_until(mut done: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("condition not reached within 5 s");
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_connect_attempt() {
        let s = setup(true).await;
        let tasks = spawn_callers(&s.client).await;
        let client = Arc::clone(&s.client);
        wait_until(|| client.connect_counts(STORE_1).misses == CALLERS as u64).await;
        s.open.send(Some(true)).unwrap();
        for t in tasks {
            let store = t.await.unwrap().unwrap();
            assert_eq!(store.store_id(), 1);
        }
        assert_eq!(s.attempts.load(Ordering::SeqCst), 1);
        assert_eq!(s.client.connect_counts(STORE_1).attempts, 1);
        assert_eq!(s.pd.calls_to("GetStore"), 1);
        assert!(s.client.has_connection(STORE_1));

        // A later mapping reuses the connection; invalidating the store
        // drops it, so the next mapping dials again.
        let region = s.client.region_for_key(b"a").await.unwrap();
        Arc::clone(&s.client)
            .map_peer_to_store(region.clone(), peer(21, 1))
            .await
            .unwrap();
        assert_eq!(s.attempts.load(Ordering::SeqCst), 1);
        s.client.invalidate_store_cache(1).await;
        assert!(!s.client.has_connection(STORE_1));
        Arc::clone(&s.client)
            .map_peer_to_store(region, peer(21, 1))
            .await
            .unwrap();
        assert_eq!(s.attempts.load(Ordering::SeqCst), 2);
        assert_eq!(s.pd.calls_to("GetStore"), 2);
    }

    #[tokio::test]
    async fn concurrent_misses_share_the_failure_and_it_is_not_cached() {
        let s = setup(true).await;
        let tasks = spawn_callers(&s.client).await;
        let client = Arc::clone(&s.client);
        wait_until(|| client.connect_counts(STORE_1).misses == CALLERS as u64).await;
        s.open.send(Some(false)).unwrap();
        for t in tasks {
            let err = t.await.unwrap().unwrap_err();
            assert!(
                matches!(err.failure(), Some(Failure::Connect { .. })),
                "{err:?}"
            );
        }
        assert_eq!(s.attempts.load(Ordering::SeqCst), 1);
        assert!(!s.client.has_connection(STORE_1));
        // The next miss dials again.
        let region = s.client.region_for_key(b"a").await.unwrap();
        let _ = Arc::clone(&s.client)
            .map_peer_to_store(region, peer(21, 1))
            .await;
        assert_eq!(s.attempts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn without_single_flight_each_miss_dials() {
        let s = setup(false).await;
        let tasks = spawn_callers(&s.client).await;
        let attempts = Arc::clone(&s.attempts);
        wait_until(|| attempts.load(Ordering::SeqCst) == CALLERS).await;
        s.open.send(Some(true)).unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(s.client.connect_counts(STORE_1).attempts, CALLERS as u64);
    }
}

mod forwarded_connections {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use tikv_plan::pd::{PdClient, PdRpcClient};
    use tikv_plan::Config;

    use super::single_flight::NullClient;
    use super::*;
    use crate::pd_support::{peer, FakePd};

    /// A connector that opens clients which send nothing, counting the
    /// forwarded ones.
    #[derive(Clone, Default)]
    struct CountingConnect {
        forwarded: Arc<AtomicUsize>,
    }

    #[async_trait]
    impl KvConnect for CountingConnect {
        type KvClient = NullClient;

        async fn connect(&self, _address: &str) -> tikv_plan::Result<NullClient> {
            Ok(NullClient)
        }

        async fn connect_forwarded(
            &self,
            _proxy: &str,
            _target: &str,
        ) -> tikv_plan::Result<NullClient> {
            self.forwarded.fetch_add(1, Ordering::SeqCst);
            Ok(NullClient)
        }
    }

    /// A route to store 1 through store 2 is opened once and reused, and
    /// opened again once either store is dropped from the cache (its
    /// address may have changed), so no route outlives its stores.
    #[tokio::test]
    async fn a_forwarded_connection_lives_as_long_as_both_its_stores_are_cached() {
        let pd = FakePd::start(1, 9).await;
        let connect = CountingConnect::default();
        let opened = Arc::clone(&connect.forwarded);
        let client = Arc::new(
            PdRpcClient::new_with(&pd.endpoints(), &Config::default(), connect)
                .await
                .unwrap(),
        );
        let region = client.region_for_key(b"a").await.unwrap();
        let route = || {
            let client = Arc::clone(&client);
            let region = region.clone();
            async move {
                client
                    .map_peer_through_proxy(region, peer(21, 1), 2)
                    .await
                    .map(drop)
            }
        };
        route().await.unwrap();
        route().await.unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 1, "reused");
        client.invalidate_store_cache(2).await;
        route().await.unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 2, "the proxy was dropped");
        client.invalidate_store_cache(1).await;
        route().await.unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 3, "the target was dropped");
        client
            .clone()
            .map_peer_to_store(region.clone(), peer(23, 3))
            .await
            .unwrap();
        client.invalidate_store_cache(3).await;
        route().await.unwrap();
        assert_eq!(
            opened.load(Ordering::SeqCst),
            3,
            "another store changes nothing"
        );
        drop(pd);
    }
}
