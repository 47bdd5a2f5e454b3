//! Errors keep their causes: `std::error::Error::source` leads
//! from the error a caller gets, which names the Region, store or address,
//! down to the root cause (an `io::Error` and its kind, tonic's timeout, a
//! gRPC status), over real sockets on 127.0.0.1 and the simulated cluster.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tikv_plan::store::{KvConnect, TikvConnect};
use tikv_plan::Failure;
use tikv_plan::SecurityManager;
use tikv_plan::{Backoff, Config, Error, RawClient};
use tikv_sim::{HangMode, SimCluster};
use tokio::net::TcpListener;

#[path = "../src/store/tests/net.rs"]
mod net_support;
use net_support::hanging_listener;

/// Every error of the chain, the outer one first.
fn chain<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = vec![error];
    let mut current = error.source();
    while let Some(e) = current {
        out.push(e);
        current = e.source();
    }
    out
}

/// The chain's texts, for failure messages.
fn texts(error: &(dyn StdError + 'static)) -> Vec<String> {
    chain(error).iter().map(|e| e.to_string()).collect()
}

/// The kind of the first `io::Error` met walking the chain with `source`
/// (the variants that hold one in an `Arc` are looked through too).
fn io_kind(error: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    chain(error).into_iter().find_map(|e| {
        e.downcast_ref::<io::Error>()
            .or_else(|| e.downcast_ref::<Arc<io::Error>>().map(|a| &**a))
            .map(io::Error::kind)
    })
}

/// The chain's elements that are this crate's errors (held as themselves
/// or in the `Box` of a variant).
fn crate_errors<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a Error> {
    chain(error)
        .into_iter()
        .filter_map(|e| {
            e.downcast_ref::<Error>()
                .or_else(|| e.downcast_ref::<Box<Error>>().map(|b| &**b))
        })
        .collect()
}

/// True when some element of the chain is a `T`.
fn has<T: StdError + 'static>(error: &(dyn StdError + 'static)) -> bool {
    chain(error).into_iter().any(|e| e.is::<T>())
}

fn connector(connect_timeout: Duration) -> TikvConnect {
    TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        Duration::from_secs(5),
        connect_timeout,
    )
}

async fn dead_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    address
}

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(400))
        .with_connect_timeout(Duration::from_millis(300))
        .with_region_backoff(Backoff::no_jitter_backoff(2, 50, 1))
}

async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_connect_keeps_the_io_error() {
    let address = dead_address().await;
    let err = connector(Duration::from_secs(3))
        .connect(&address)
        .await
        .expect_err("nothing listens there");
    assert!(
        matches!(err.failure(), Some(Failure::Connect { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&address), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    // Connect → tonic's transport error → its connect error → … → io.
    assert!(has::<tonic::transport::Error>(&err), "{:?}", texts(&err));
    assert!(has::<tonic::ConnectError>(&err), "{:?}", texts(&err));
    assert_eq!(
        io_kind(&err),
        Some(io::ErrorKind::ConnectionRefused),
        "{:?}",
        texts(&err)
    );
}

#[tokio::test]
async fn refused_stores_are_reachable_from_the_regions_error() {
    let cluster = cluster().await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config())
        .await
        .unwrap();
    let region = cluster.region_for_key(b"k").unwrap();
    for store in cluster.store_ids() {
        cluster.store_down(store).await;
    }
    let err = client.get("k").await.expect_err("every store is down");
    let text = err.to_string();
    assert!(
        text.contains(&format!("region {}", region.id)),
        "the outer message names the Region: {text}"
    );
    // The Region's error → the last store's connect error → io.
    let connect = crate_errors(&err)
        .into_iter()
        .find_map(|e| e.failure().filter(|f| matches!(f, Failure::Connect { .. })));
    match connect {
        Some(Failure::Connect { address, .. }) => assert!(
            cluster
                .store_ids()
                .iter()
                .any(|s| cluster.store_addr(*s).as_deref() == Some(address.as_str())),
            "{address}"
        ),
        _ => panic!("no connect error in the chain: {:?}", texts(&err)),
    }
    assert_eq!(
        io_kind(&err),
        Some(io::ErrorKind::ConnectionRefused),
        "{:?}",
        texts(&err)
    );
}

#[tokio::test]
async fn a_connect_timeout_keeps_what_timed_out() {
    let (_listener, _held, address) = hanging_listener().await;
    tokio::time::pause();
    let err = connector(Duration::from_secs(2))
        .connect(&address)
        .await
        .expect_err("the accept queue is full");
    assert!(
        matches!(err.failure(), Some(Failure::ConnectTimeout { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&address), "{text}");
    assert!(text.contains("2s"), "the bound is named: {text}");
    // Both timers end at the same instant; whichever fired is the cause:
    // the transport's dial timeout (an io TimedOut under tonic's error) or
    // the client's own bound (tokio's Elapsed).
    let transport =
        io_kind(&err) == Some(io::ErrorKind::TimedOut) && has::<tonic::transport::Error>(&err);
    let own = has::<tokio::time::error::Elapsed>(&err);
    assert!(transport || own, "{:?}", texts(&err));
}

#[tokio::test]
async fn a_stores_grpc_status_is_reachable_from_the_regions_error() {
    let cluster = cluster().await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config())
        .await
        .unwrap();
    // Connections are open; then no store answers.
    client.put("k", "v").await.unwrap();
    let region = cluster.region_for_key(b"k").unwrap();
    for store in cluster.store_ids() {
        cluster.store_hang(store, HangMode::Respond);
    }
    let err = client.get("k").await.expect_err("no store answers");
    let text = err.to_string();
    assert!(
        text.contains(&format!("region {}", region.id)),
        "the outer message names the Region: {text}"
    );
    // The Region's error → the store's status → the timeout that ended the
    // call. That is tonic's client timeout (`Cancelled`, from
    // `TimeoutExpired`), unless the client's backstop, 1 ms later, fired
    // first because tonic's timer started late (its channel's worker ran
    // late on a loaded machine): then the status is `DeadlineExceeded`
    // from the client's own `Failure::Timeout`.
    let status = err
        .find_source::<tonic::Status>()
        .unwrap_or_else(|| panic!("no status in the chain: {:?}", texts(&err)));
    let tonics = status.code() == tonic::Code::Cancelled && has::<tonic::TimeoutExpired>(&err);
    let mut below = status.source();
    let mut client_timeout = false;
    while let Some(source) = below {
        client_timeout |= matches!(
            source.downcast_ref::<Failure>(),
            Some(Failure::Timeout { .. })
        );
        below = source.source();
    }
    let backstop = status.code() == tonic::Code::DeadlineExceeded && client_timeout;
    assert!(tonics || backstop, "{status:?}: {:?}", texts(&err));
    for store in cluster.store_ids() {
        cluster.store_unhang(store);
    }
}

#[tokio::test]
async fn an_unreachable_pd_keeps_the_connect_error() {
    let address = dead_address().await;
    let result = RawClient::new_with_config(
        vec![address.clone()],
        Config::default()
            .with_timeout(Duration::from_millis(400))
            .with_connect_timeout(Duration::from_millis(300)),
    )
    .await;
    let Err(err) = result else {
        panic!("no PD listens there, yet the client connected");
    };
    assert!(
        matches!(err.failure(), Some(Failure::PdUnavailable { .. })),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&address), "the endpoint is named: {text}");
    // PdUnavailable → the last failure (a connect error) → … → io.
    assert!(
        crate_errors(&err)
            .iter()
            .any(|e| matches!(e.failure(), Some(Failure::Connect { .. }))),
        "{:?}",
        texts(&err)
    );
    assert_eq!(
        io_kind(&err),
        Some(io::ErrorKind::ConnectionRefused),
        "{:?}",
        texts(&err)
    );
}

#[tokio::test]
async fn undetermined_wraps_its_cause() {
    let cluster = cluster().await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config())
        .await
        .unwrap();
    let region = cluster.region_for_key(b"k").unwrap();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    // Applied, then the store resets its connections before answering.
    cluster.drop_next_response(leader, "raw_put").unwrap();
    let err = client.put("k", "v").await.expect_err("the answer was lost");
    let Some(Failure::Undetermined {
        region_id,
        store_id,
        cause,
        ..
    }) = err.failure()
    else {
        panic!("expected Undetermined, got {err:?}");
    };
    assert_eq!((*region_id, *store_id), (region.id, leader));
    let text = err.to_string();
    assert!(
        text.contains(&format!("region {}, store {leader}", region.id)),
        "{text}"
    );
    // client-rust's variant; the chain goes through the failure to the
    // cause itself.
    assert!(matches!(err, Error::UndeterminedError(_)), "{err:?}");
    let failure = err.find_source::<Failure>().expect("the failure");
    let source = std::error::Error::source(failure).expect("the cause");
    let source = source
        .downcast_ref::<Box<Error>>()
        .expect("the cause, as held");
    assert_eq!(source.to_string(), cause.to_string());
    // … and the chain goes on to the store's status and the connection's
    // I/O error.
    assert!(
        err.find_source::<tonic::Status>().is_some(),
        "{:?}",
        texts(&err)
    );
    // The connection's own failure ends the chain: an io::Error, or (when
    // the reset came while a response body was read, as on a BatchCommands
    // stream) h2's error holding one, which it does not give as a source.
    let root = texts(&err).pop().unwrap_or_default();
    assert!(
        matches!(
            io_kind(&err),
            Some(
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::UnexpectedEof
            )
        ) || ["connection reset", "broken pipe", "unexpected end of file"].contains(&root.as_str()),
        "{:?}",
        texts(&err)
    );
}
