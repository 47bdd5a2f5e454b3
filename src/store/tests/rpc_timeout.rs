//! The RPC timeout on the typed path. A client built by `TikvConnect` has
//! a channel that bounds every call by the client's timeout itself, so a
//! call carries no `grpc-timeout` header unless a shorter bound applies; a
//! client on the caller's own channel (`KvRpcClient::new`) sends the header
//! on every call. Either way tonic enforces the bound on the client side:
//! a store that never answers costs one timeout, not a hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::request::{FastDispatch, Stage};
use crate::store::client::KvRpcClient;
use crate::store::{KvClient, KvConnect, TikvConnect};
use crate::SecurityManager;
use tikv_sim::{HangMode, SimCluster};
use tonic::transport::Endpoint;

const TIMEOUT: Duration = Duration::from_millis(300);

/// Sends a raw get of `key` to `client` on the typed path, with no bound of
/// the plan's own (the client's timeout is the only one).
async fn raw_get(
    client: Arc<dyn KvClient + Send + Sync>,
    context: &kvrpcpb::Context,
    key: &[u8],
) -> crate::Result<kvrpcpb::RawGetResponse> {
    let mut plan = FastDispatch::with_client(
        kvrpcpb::RawGetRequest {
            context: Some(context.clone()),
            key: key.to_vec(),
            ..Default::default()
        },
        client,
    );
    plan.run_mut().await
}

#[tokio::test]
async fn both_kinds_of_client_bound_a_silent_store_by_their_timeout() {
    let cluster = SimCluster::builder()
        .stores(1)
        .replicas(1)
        .start()
        .await
        .unwrap();
    let key = b"k";
    let region = cluster.region_for_key(key).unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let address = cluster.store_addr(leader.store_id).unwrap();
    let context = kvrpcpb::Context {
        region_id: region.id,
        region_epoch: region.region_epoch,
        peer: Some(leader),
        ..Default::default()
    };

    let connect = TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        TIMEOUT,
        Duration::from_secs(2),
    );
    let connected = connect.connect(&address).await.unwrap();
    assert!(
        connected.enforces_timeout(),
        "TikvConnect's channel keeps the timeout"
    );
    // The caller's channel has no timeout of its own.
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let own = KvRpcClient::new(channel, TIMEOUT);
    assert!(
        !own.enforces_timeout(),
        "a caller's channel needs the header"
    );
    let clients: [(&str, Arc<dyn KvClient + Send + Sync>); 2] = [
        ("connected", Arc::new(connected)),
        ("own channel", Arc::new(own)),
    ];

    // Both answer while the store does.
    for (name, client) in &clients {
        let answer = raw_get(Arc::clone(client), &context, key).await;
        assert!(answer.is_ok(), "{name}: {answer:?}");
    }

    // The store takes requests but never answers: each call ends with the
    // client's timeout, classified as one.
    cluster.store_hang(leader.store_id, HangMode::Respond);
    for (name, client) in &clients {
        let started = Instant::now();
        let error = raw_get(Arc::clone(client), &context, key)
            .await
            .expect_err("the store never answers");
        let took = started.elapsed();
        assert_eq!(
            classify_dispatch_error(&error),
            DispatchFailure::ClientTimeout,
            "{name}: {error:?}"
        );
        assert!(took >= TIMEOUT, "{name}: ended after {took:?}");
        assert!(took < TIMEOUT * 10, "{name}: ended after {took:?}");
    }
    cluster.store_unhang(leader.store_id);
}
