//! A stream-level HTTP/2 error (`RST_STREAM`) on one request is not a
//! connection failure: it classifies as `StreamReset`, which keeps
//! the store's shared channel and caches, and the next request on the same
//! channel goes through without a new connection. Over real loopback
//! sockets, against a minimal HTTP/2 server written with `h2`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::classify::{classify_grpc_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use tokio::net::TcpListener;

/// Serves HTTP/2 on 127.0.0.1: resets the first stream of each connection,
/// answers every later one with an empty `RawGetResponse` carrying `v`.
/// Returns the address and the number of connections accepted.
async fn resetting_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                let mut streams = 0;
                while let Some(Ok((_request, mut respond))) = conn.accept().await {
                    streams += 1;
                    if streams == 1 {
                        respond.send_reset(h2::Reason::INTERNAL_ERROR);
                        continue;
                    }
                    super::answer(respond);
                }
            });
        }
    });
    (address, connections)
}

#[tokio::test]
async fn a_reset_stream_keeps_the_channel() {
    let (address, connections) = resetting_server().await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut client = TikvClient::new(channel);
    let status = client
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        classify_grpc_error(&status),
        DispatchFailure::StreamReset,
        "{status:?}"
    );
    assert!(!DispatchFailure::StreamReset.invalidates_store());
    assert!(DispatchFailure::StreamReset.may_have_been_sent());
    // The same channel serves the next request: no new connection.
    let answer = client
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.value, b"v");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}
