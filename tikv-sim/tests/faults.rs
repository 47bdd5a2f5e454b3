//! Faults of the simulated cluster over real sockets: stores down and up on
//! the same port, hangs, added latency, dropped responses, cold Regions, an election.

use std::time::Duration;

use tikv_sim::proto::kvrpcpb;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::tikvpb::{
    batch_commands_request, BatchCommandsRequest, BatchCommandsResponse,
};
use tikv_sim::{ColdMode, HangMode, Outcome, SimCluster};
use tonic::transport::Channel;

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(10);

async fn one_region() -> SimCluster {
    SimCluster::builder().stores(3).start().await.unwrap()
}

fn get_req(ctx: &kvrpcpb::Context, key: &[u8]) -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        context: Some(ctx.clone()),
        key: key.to_vec(),
        cf: String::new(),
    }
}

/// The leader's store, a client to it and a context for it.
async fn leader_of_first(cluster: &SimCluster) -> (u64, TikvClient<Channel>, kvrpcpb::Context) {
    let region = cluster.regions()[0].clone();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    let client = cluster.tikv_client(store).await.unwrap();
    (store, client, cluster.context(region.id, store).unwrap())
}

/// Waits until `f` holds, checking every few milliseconds, bounded by
/// [`PATIENCE`].
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test]
async fn a_downed_store_refuses_connections_and_comes_back_on_the_same_port() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    let addr = cluster.store_addr(store).unwrap();
    client
        .raw_put(kvrpcpb::RawPutRequest {
            context: Some(ctx.clone()),
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();

    // Its Regions keep it as leader while it is down (no election): back
    // up, it serves them again.
    cluster.store_down_cold(store).await.unwrap();
    let refused = tokio::net::TcpStream::connect(&addr).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let failed = client.raw_get(get_req(&ctx, b"k")).await.unwrap_err();
    assert!(
        std::error::Error::source(&failed).is_some(),
        "a transport failure keeps its source: {failed:?}"
    );

    cluster.store_up(store).await.unwrap();
    assert_eq!(cluster.store_addr(store).unwrap(), addr);
    let mut client = cluster.tikv_client(store).await.unwrap();
    let got = client
        .raw_get(get_req(&ctx, b"k"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, b"v".to_vec(), "data survives a restart");
    // Only the requests that reached it were counted.
    assert_eq!(cluster.counters(store).total("raw_get"), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_respond_hang_receives_requests_and_never_answers_until_lifted() {
    let cluster = one_region().await;
    let (store, client, ctx) = leader_of_first(&cluster).await;
    cluster.store_hang(store, HangMode::Respond);

    // A request with a deadline ends with that deadline.
    let mut timed = tonic::Request::new(get_req(&ctx, b"k"));
    timed.set_timeout(Duration::from_millis(100));
    let err = client.clone().raw_get(timed).await.unwrap_err();
    assert!(
        matches!(
            err.code(),
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        ),
        "{err:?}"
    );

    let mut waiting_client = client.clone();
    let req = get_req(&ctx, b"k");
    let mut waiting = tokio::spawn(async move { waiting_client.raw_get(req).await });
    eventually("two hung requests", || {
        cluster.counters(store).count("raw_get", Outcome::Hung) == 2
    })
    .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_err(),
        "a hung store must not answer"
    );
    cluster.store_unhang(store);
    let resp = tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none() && resp.not_found);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_hung_request_ends_when_its_store_goes_down() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    cluster.store_hang(store, HangMode::Respond);
    let req = get_req(&ctx, b"k");
    let waiting = tokio::spawn(async move { client.raw_get(req).await });
    eventually("the hung request", || {
        cluster.counters(store).count("raw_get", Outcome::Hung) == 1
    })
    .await;
    cluster.store_down(store).await;
    let result = tokio::time::timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_err());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_connect_hang_freezes_every_connection() {
    let cluster = one_region().await;
    let (store, client, ctx) = leader_of_first(&cluster).await;
    cluster.store_hang(store, HangMode::Connect);

    let mut frozen_client = client.clone();
    let req = get_req(&ctx, b"k");
    let mut on_open_connection = tokio::spawn(async move { frozen_client.raw_get(req).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut on_open_connection)
            .await
            .is_err(),
        "no answer while frozen"
    );
    // A new TCP connect hangs: the kernel drops the SYNs.
    let addr = cluster.store_addr(store).unwrap();
    let connect = tokio::time::timeout(
        Duration::from_millis(200),
        tokio::net::TcpStream::connect(&addr),
    )
    .await;
    assert!(connect.is_err(), "connect must hang, got {connect:?}");
    // So does opening a gRPC channel, bounded by its connect timeout.
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_millis(150))
        .connect()
        .await;
    assert!(channel.is_err());
    // The requests never reached the service.
    assert_eq!(cluster.counters(store).total_requests(), 0);

    cluster.store_unhang(store);
    let resp = tokio::time::timeout(PATIENCE, on_open_connection)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none());
    // New connections work again.
    let mut fresh = cluster.tikv_client(store).await.unwrap();
    assert!(fresh.raw_get(get_req(&ctx, b"k")).await.is_ok());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_connect_hang_survives_down_and_up() {
    let cluster = one_region().await;
    let (store, _client, _ctx) = leader_of_first(&cluster).await;
    cluster.store_hang(store, HangMode::Connect);
    cluster.store_down(store).await;
    cluster.store_up(store).await.unwrap();
    let addr = cluster.store_addr(store).unwrap();
    let connect = tokio::time::timeout(
        Duration::from_millis(200),
        tokio::net::TcpStream::connect(&addr),
    )
    .await;
    assert!(connect.is_err(), "still hung after a restart");
    cluster.store_unhang(store);
    assert!(cluster.tikv_client(store).await.is_ok());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_slow_store_adds_latency() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    let delay = Duration::from_millis(150);
    cluster.store_slow(store, delay);
    let started = std::time::Instant::now();
    client.raw_get(get_req(&ctx, b"k")).await.unwrap();
    assert!(started.elapsed() >= delay);
    cluster.store_slow(store, Duration::ZERO);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_dropped_response_is_applied_exactly_once_and_lost() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    cluster
        .drop_next_response(store, "raw_compare_and_swap")
        .unwrap();
    assert!(cluster.drop_next_response(store, "raw_cas").is_err());
    let cas = kvrpcpb::RawCasRequest {
        context: Some(ctx.clone()),
        key: b"k".to_vec(),
        value: b"1".to_vec(),
        previous_not_exist: true,
        ..Default::default()
    };
    let err = client.raw_compare_and_swap(cas.clone()).await.unwrap_err();
    assert!(
        std::error::Error::source(&err).is_some(),
        "the client sees a transport failure, not an answer: {err:?}"
    );
    assert_eq!(cluster.value_of(b"k"), Some(b"1".to_vec()));
    let counters = cluster.counters(store);
    assert_eq!(counters.count("raw_compare_and_swap", Outcome::Dropped), 1);
    assert_eq!(counters.count("raw_compare_and_swap", Outcome::Ok), 0);

    // Only the next one is dropped: a replay is answered, and shows the
    // first attempt was applied.
    let mut client = cluster.tikv_client(store).await.unwrap();
    let replay = client.raw_compare_and_swap(cas).await.unwrap().into_inner();
    assert!(!replay.succeed && !replay.previous_not_exist);
    assert_eq!(replay.previous_value, b"1".to_vec());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_cold_region_whose_leader_store_is_down_recovers_through_a_voter() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    let region = cluster.region_for_key(b"a").unwrap();
    let old = cluster.leader_of(region.id).unwrap();
    cluster.store_down(old.store_id).await;
    cluster
        .make_cold(region.id, ColdMode::NotLeaderFirst)
        .unwrap();
    assert_eq!(cluster.pd_leader_of(region.id), Some(old));

    let voter = region
        .peers
        .iter()
        .find(|p| p.id != old.id)
        .unwrap()
        .store_id;
    let mut client = cluster.tikv_client(voter).await.unwrap();
    let ctx = cluster.context(region.id, voter).unwrap();
    let first = client
        .raw_get(get_req(&ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.region_error.unwrap().not_leader.unwrap().leader, None);
    let second = client
        .raw_get(get_req(&ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    assert!(second.region_error.is_none());
    assert_eq!(cluster.leader_of(region.id).unwrap().store_id, voter);
    assert_eq!(cluster.pd_leader_of(region.id), Some(old), "PD stays stale");
    cluster.shutdown().await;
}

#[tokio::test]
async fn in_an_election_followers_name_no_leader_and_wait_for_the_winner() {
    let cluster = one_region().await;
    let (leader, mut to_leader, leader_ctx) = leader_of_first(&cluster).await;
    let region_id = leader_ctx.region_id;
    cluster.start_election(region_id).unwrap();
    let voter = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != leader)
        .unwrap();
    let mut to_voter = cluster.tikv_client(voter).await.unwrap();
    let voter_ctx = cluster.context(region_id, voter).unwrap();
    // Asked twice: a follower in an election neither names a leader nor
    // campaigns on a request.
    for _ in 0..2 {
        let answer = to_voter
            .raw_get(get_req(&voter_ctx, b"a"))
            .await
            .unwrap()
            .into_inner();
        let not_leader = answer.region_error.unwrap().not_leader.unwrap();
        assert_eq!(not_leader.leader, None);
    }
    // The leader it lost, heard from again, still serves.
    let answer = to_leader
        .raw_get(get_req(&leader_ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.region_error.is_none(), "{answer:?}");
    assert_eq!(cluster.leader_of(region_id).unwrap().store_id, leader);
    // The winner ends the election: it serves, the others name it.
    cluster.transfer_leader(region_id, voter, true).unwrap();
    let answer = to_voter
        .raw_get(get_req(&voter_ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.region_error.is_none(), "{answer:?}");
    let answer = to_leader
        .raw_get(get_req(&leader_ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    let hint = answer.region_error.unwrap().not_leader.unwrap().leader;
    assert_eq!(hint.map(|p| p.store_id), Some(voter));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_busy_old_leader_of_a_cold_region_answers_busy_not_not_leader() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    let region_id = ctx.region_id;
    cluster
        .make_cold(region_id, ColdMode::AcceptAtOnce)
        .unwrap();
    cluster.store_busy(store, Some(0));
    let resp = client
        .raw_get(get_req(&ctx, b"a"))
        .await
        .unwrap()
        .into_inner();
    let busy = resp.region_error.unwrap().server_is_busy.unwrap();
    assert_eq!(busy.estimated_wait_ms, 0);
    assert_eq!(cluster.leader_of(region_id), None, "busy never campaigns");
    cluster.shutdown().await;
}

#[tokio::test]
async fn dropping_the_cluster_closes_its_ports() {
    let cluster = one_region().await;
    let pd = cluster.pd_addr();
    let store = cluster.store_addr(1).unwrap();
    drop(cluster);
    // The listeners close as soon as their aborted tasks are dropped.
    eventually("closed ports", || {
        std::net::TcpStream::connect(&pd).is_err() && std::net::TcpStream::connect(&store).is_err()
    })
    .await;
}

#[tokio::test]
async fn a_store_cut_off_from_pd_leaves_pd_stale_until_it_joins_again() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    let left = cluster.region_for_key(b"a").unwrap();
    let right = cluster.region_for_key(b"z").unwrap();
    let old = cluster.leader_of(left.id).unwrap();
    let other = |region: &tikv_sim::proto::metapb::Region, not: u64| {
        region
            .peers
            .iter()
            .find(|p| p.store_id != not)
            .unwrap()
            .store_id
    };
    let cut = other(&left, old.store_id);
    cluster.set_store_cut_off_from_pd(cut, true);
    // A transfer that would update PD does not reach it from a cut-off
    // store.
    cluster.transfer_leader(left.id, cut, true).unwrap();
    assert_eq!(cluster.leader_of(left.id).unwrap().store_id, cut);
    assert_eq!(cluster.pd_leader_of(left.id), Some(old));
    // A store still joined to PD reports as before.
    let right_old = cluster.leader_of(right.id).unwrap().store_id;
    let right_new = right
        .peers
        .iter()
        .find(|p| p.store_id != right_old && p.store_id != cut)
        .unwrap()
        .store_id;
    cluster.transfer_leader(right.id, right_new, true).unwrap();
    assert_eq!(
        cluster.pd_leader_of(right.id).map(|p| p.store_id),
        Some(right_new)
    );
    // Joined again, the store's heartbeat reports the Region it leads.
    cluster.set_store_cut_off_from_pd(cut, false);
    assert_eq!(cluster.pd_leader_of(left.id), cluster.leader_of(left.id));
    assert_eq!(
        cluster.pd_leader_of(right.id).map(|p| p.store_id),
        Some(right_new)
    );
    cluster.shutdown().await;
}

/// A BatchCommands message of `RawGet`s with the given ids.
fn batch_of_gets(ctx: &kvrpcpb::Context, ids: &[u64]) -> BatchCommandsRequest {
    BatchCommandsRequest {
        requests: ids
            .iter()
            .map(|_| batch_commands_request::Request {
                cmd: Some(batch_commands_request::request::Cmd::RawGet(get_req(
                    ctx, b"k",
                ))),
            })
            .collect(),
        request_ids: ids.to_vec(),
        ..Default::default()
    }
}

/// The next answer message of a BatchCommands stream, bounded by
/// [`PATIENCE`].
async fn next_answers(
    answers: &mut tonic::Streaming<BatchCommandsResponse>,
) -> BatchCommandsResponse {
    tokio::time::timeout(PATIENCE, answers.message())
        .await
        .expect("an answer in time")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn batch_commands_answers_undelayed_requests_together_and_delayed_ones_after_the_delay() {
    let cluster = one_region().await;
    let (store, mut client, ctx) = leader_of_first(&cluster).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = client
        .batch_commands(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // Nothing delays them: the three go out in one message, in order.
    tx.send(batch_of_gets(&ctx, &[1, 2, 3])).await.unwrap();
    let msg = next_answers(&mut answers).await;
    assert_eq!(msg.request_ids, vec![1, 2, 3]);
    assert_eq!(msg.responses.len(), 3);
    // A slow store: each is served in a task of its own, after the delay.
    let delay = Duration::from_millis(150);
    cluster.store_slow(store, delay);
    let started = std::time::Instant::now();
    tx.send(batch_of_gets(&ctx, &[4, 5])).await.unwrap();
    let mut ids = Vec::new();
    while ids.len() < 2 {
        ids.extend(next_answers(&mut answers).await.request_ids);
    }
    assert!(started.elapsed() >= delay);
    ids.sort_unstable();
    assert_eq!(ids, vec![4, 5]);
    cluster.store_slow(store, Duration::ZERO);
    // Back to at once, on the same stream.
    tx.send(batch_of_gets(&ctx, &[6])).await.unwrap();
    assert_eq!(next_answers(&mut answers).await.request_ids, vec![6]);
    let served = cluster.counters(store).batch_requests();
    assert_eq!(served, 6);
    cluster.shutdown().await;
}
