//! Forwarding (`tikv-forwarded-host`) and a store cut off from clients: a
//! call sent to one store and naming another is proxied there over gRPC,
//! unary or a whole BatchCommands stream, as TiKV's server does; a store
//! cut off from clients still takes forwarded calls and keeps leading.

use std::time::Duration;

use tikv_sim::proto::kvrpcpb;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::tikvpb::{
    batch_commands_request, batch_commands_response, BatchCommandsRequest,
};
use tikv_sim::{ClientCut, Outcome, SimCluster, FORWARDED_HOST};
use tonic::transport::Channel;

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long a call to a store whose client connections are frozen is
/// given to (not) answer.
const FROZEN_WAIT: Duration = Duration::from_millis(300);

struct Setup {
    cluster: SimCluster,
    /// The leader's store and a follower's.
    leader: u64,
    follower: u64,
    /// A leader request for the Region.
    ctx: kvrpcpb::Context,
    /// The leader's store's address, what `tikv-forwarded-host` names.
    leader_addr: String,
}

async fn setup() -> Setup {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap();
    let region = cluster.region_for_key(b"k").unwrap().id;
    let leader = cluster.leader_of(region).unwrap().store_id;
    let follower = leader % 3 + 1;
    let ctx = cluster.context(region, leader).unwrap();
    let leader_addr = cluster.store_addr(leader).unwrap();
    Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    }
}

async fn client_of(cluster: &SimCluster, store: u64) -> TikvClient<Channel> {
    let addr = cluster.store_addr(store).unwrap();
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_millis(500))
        .connect_lazy();
    TikvClient::new(channel)
}

/// `message` with `tikv-forwarded-host: target`.
fn forwarded<T>(message: T, target: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert(FORWARDED_HOST, target.parse().unwrap());
    request
}

fn put(ctx: &kvrpcpb::Context, value: &[u8]) -> kvrpcpb::RawPutRequest {
    kvrpcpb::RawPutRequest {
        context: Some(ctx.clone()),
        key: b"k".to_vec(),
        value: value.to_vec(),
        ..Default::default()
    }
}

fn get(ctx: &kvrpcpb::Context) -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        context: Some(ctx.clone()),
        key: b"k".to_vec(),
        cf: String::new(),
    }
}

#[tokio::test]
async fn a_unary_call_naming_another_store_is_answered_by_that_store() {
    let Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    } = setup().await;
    let mut via_follower = client_of(&cluster, follower).await;
    // Without the header the follower answers for itself: the request is
    // for the leader's store.
    let own = via_follower.raw_get(get(&ctx)).await.unwrap().into_inner();
    assert!(own.region_error.unwrap().store_not_match.is_some());
    // With it, the leader answers through the follower.
    let resp = via_follower
        .raw_put(forwarded(put(&ctx, b"v1"), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
    let resp = via_follower
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.value, b"v1");
    assert_eq!(cluster.value_of(b"k"), Some(b"v1".to_vec()));
    assert_eq!(cluster.counters(follower).forwarded(), (2, 0));
    assert_eq!(cluster.counters(leader).count("raw_get", Outcome::Ok), 1);
    assert_eq!(cluster.counters(leader).count("raw_put", Outcome::Ok), 1);
    // A header naming the store itself is served there, not forwarded.
    let mut direct = client_of(&cluster, leader).await;
    let resp = direct
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.value, b"v1");
    assert_eq!(cluster.counters(leader).forwarded(), (0, 0));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_batch_commands_stream_naming_another_store_is_proxied_whole() {
    let Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    } = setup().await;
    let mut via_follower = client_of(&cluster, follower).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = via_follower
        .batch_commands(forwarded(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            &leader_addr,
        ))
        .await
        .unwrap()
        .into_inner();
    for (id, value) in [(1u64, &b"a"[..]), (2, b"b")] {
        tx.send(BatchCommandsRequest {
            requests: vec![batch_commands_request::Request {
                cmd: Some(batch_commands_request::request::Cmd::RawPut(put(
                    &ctx, value,
                ))),
            }],
            request_ids: vec![id],
            ..Default::default()
        })
        .await
        .unwrap();
        let msg = tokio::time::timeout(PATIENCE, answers.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(msg.request_ids, vec![id]);
        match &msg.responses[0].cmd {
            Some(batch_commands_response::response::Cmd::RawPut(r)) => {
                assert!(r.region_error.is_none(), "{r:?}")
            }
            other => panic!("expected a raw put answer, got {other:?}"),
        }
    }
    assert_eq!(cluster.value_of(b"k"), Some(b"b".to_vec()));
    // One stream, proxied once; the leader served both requests.
    assert_eq!(cluster.counters(follower).forwarded(), (1, 0));
    assert_eq!(cluster.counters(leader).batch_requests(), 2);
    assert_eq!(cluster.counters(follower).batch_requests(), 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_target_that_cannot_be_reached_is_a_grpc_error_not_a_region_error() {
    let Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    } = setup().await;
    // Kept as leader while down (no election), so back up it serves.
    cluster.store_down_cold(leader).await.unwrap();
    let mut via_follower = client_of(&cluster, follower).await;
    let status = via_follower
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains(&leader_addr), "{status:?}");
    assert_eq!(cluster.counters(follower).forwarded(), (0, 1));
    // Back up, the same proxy reaches it again.
    cluster.store_up(leader).await.unwrap();
    let resp = via_follower
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none(), "{resp:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_store_cut_off_from_clients_keeps_leading_and_takes_forwarded_calls() {
    let Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    } = setup().await;
    let region = ctx.region_id;
    let mut direct = client_of(&cluster, leader).await;
    // A connection the client already has is cut too.
    direct.raw_get(get(&ctx)).await.unwrap();
    cluster
        .cut_store_from_clients(leader, Some(ClientCut::Refuse))
        .unwrap();
    assert!(direct.raw_get(get(&ctx)).await.is_err());
    let mut fresh = client_of(&cluster, leader).await;
    assert!(fresh.raw_get(get(&ctx)).await.is_err());
    // The leader stays leader, and PD still names it.
    assert_eq!(cluster.leader_of(region).unwrap().store_id, leader);
    assert_eq!(cluster.pd_leader_of(region).unwrap().store_id, leader);
    assert!(cluster.store_fault_text(leader).contains("clients=refused"));
    // Through the follower, the leader answers.
    let mut via_follower = client_of(&cluster, follower).await;
    let resp = via_follower
        .raw_put(forwarded(put(&ctx, b"through"), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none(), "{resp:?}");
    assert_eq!(cluster.value_of(b"k"), Some(b"through".to_vec()));

    // Dropped instead: a client's call is never answered.
    cluster
        .cut_store_from_clients(leader, Some(ClientCut::Drop))
        .unwrap();
    let mut frozen = client_of(&cluster, leader).await;
    let waited = tokio::time::timeout(FROZEN_WAIT, frozen.raw_get(get(&ctx))).await;
    assert!(
        waited.is_err(),
        "a dropped client got an answer: {waited:?}"
    );
    let resp = via_follower
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.value, b"through");

    // Joined again, clients reach it directly.
    cluster.cut_store_from_clients(leader, None).unwrap();
    let mut again = client_of(&cluster, leader).await;
    let resp = tokio::time::timeout(PATIENCE, again.raw_get(get(&ctx)))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(resp.value, b"through");
    assert!(cluster.cut_store_from_clients(99, None).is_err());
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_control_port_cuts_clients_and_counts_forwarded_calls() {
    let Setup {
        cluster,
        leader,
        follower,
        ctx,
        leader_addr,
    } = setup().await;
    let run = |line: String| {
        let cluster = &cluster;
        async move { tikv_sim::control::execute(cluster, &line).await }
    };
    assert_eq!(run(format!("cut-clients {leader} drop")).await, "ok\n");
    assert!(cluster.store_fault_text(leader).contains("clients=dropped"));
    assert!(run(format!("cut-clients {leader} sideways"))
        .await
        .starts_with("error: "));
    assert_eq!(run(format!("uncut-clients {leader}")).await, "ok\n");
    assert!(cluster.store_fault_text(leader).contains("clients=-"));
    client_of(&cluster, follower)
        .await
        .raw_get(forwarded(get(&ctx), &leader_addr))
        .await
        .unwrap();
    let counters = run(format!("counters {follower}")).await;
    assert!(counters.contains("forwarded 1 0\n"), "{counters}");
    cluster.shutdown().await;
}
