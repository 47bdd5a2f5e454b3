//! Connection bounds over real sockets on 127.0.0.1: a hanging connect ends
//! with `ConnectTimeout` within the connect timeout, a refused connect fails
//! fast, a silent store is bounded by the request timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::proto::kvrpcpb;
use tikv_plan::security::SecurityManager;
use tikv_plan::store::{KvClient, KvConnect, TikvConnect};
use tikv_plan::Error;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Slack on top of a timeout for scheduling and the loopback round trips.
const SLACK: Duration = Duration::from_millis(1500);

/// A listener with backlog 0 that never accepts, with its accept queue
/// filled, so a further connect gets no SYN-ACK and hangs. Returns the
/// listener, the connections that filled the queue (keep them open), and
/// the address.
async fn hanging_listener() -> (TcpListener, Vec<TcpStream>, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => held.push(stream),
            Ok(Err(e)) => panic!("filling the accept queue failed: {e}"),
            // This connect hung: the queue is full.
            Err(_) => return (listener, held, addr.to_string()),
        }
    }
    panic!("the accept queue of a backlog-0 listener never filled");
}

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
    match result {
        Err(Error::ConnectTimeout { address, timeout }) => {
            assert_eq!(address, addr);
            assert_eq!(timeout, connect_timeout);
        }
        Err(e) => panic!("expected ConnectTimeout, got {e:?}"),
        Ok(_) => panic!("connecting to a full accept queue succeeded"),
    }
    assert!(elapsed >= connect_timeout - Duration::from_millis(50), "{elapsed:?}");
    assert!(elapsed < connect_timeout + SLACK, "{elapsed:?}");
}
