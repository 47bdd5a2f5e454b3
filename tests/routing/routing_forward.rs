//! Forwarding (docs/routing.md, "Forwarding"): this client is cut off from
//! a live leader's store while the rest of the cluster reaches it; the
//! leader's requests go through a voter's store, which proxies them
//! (`tikv-forwarded-host`). The raw client over real gRPC against the
//! simulator, on both transports.

use std::time::Duration;

use tikv_plan::{Config, RawClient, RpcMode};
use tikv_sim::{ClientCut, SimCluster};

async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap()
}

fn config(mode: RpcMode) -> Config {
    let mut config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(200))
        .with_rpc_mode(mode);
    config.forwarding_probe_interval = Duration::from_millis(20);
    config
}

async fn client(cluster: &SimCluster, config: Config) -> RawClient {
    RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap()
}

/// The store of the only Region's leader.
fn leader_store(cluster: &SimCluster) -> u64 {
    let region = cluster.region_for_key(b"a").unwrap();
    cluster.leader_of(region.id).unwrap().store_id
}

/// A cluster whose only Region has "a" = "1", and a client of `mode` that
/// then reads "a" through a proxy: the leader's store (returned) refuses
/// clients.
async fn forwarding_to_a_cut_off_leader(mode: RpcMode) -> (SimCluster, RawClient, u64) {
    let cluster = cluster().await;
    let client = client(&cluster, config(mode)).await;
    client.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let leader = leader_store(&cluster);
    cluster
        .cut_store_from_clients(leader, Some(ClientCut::Refuse))
        .unwrap();
    assert_eq!(
        client.get("a".to_owned()).await.unwrap().as_deref(),
        Some(&b"1"[..])
    );
    (cluster, client, leader)
}

/// Calls the stores proxied, and how many of them failed.
fn forwarded(cluster: &SimCluster) -> (u64, u64) {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).forwarded())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

#[tokio::test]
async fn a_client_cut_off_from_a_live_leader_reads_and_writes_through_a_voter() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        for cut in [ClientCut::Refuse, ClientCut::Drop] {
            let cluster = cluster().await;
            let client = client(&cluster, config(mode)).await;
            client.put("a".to_owned(), "1".to_owned()).await.unwrap();
            let leader = leader_store(&cluster);
            cluster.cut_store_from_clients(leader, Some(cut)).unwrap();

            let got = client.get("a".to_owned()).await.unwrap();
            assert_eq!(got.as_deref(), Some(&b"1"[..]), "{mode:?} {cut:?}");
            client.put("b".to_owned(), "2".to_owned()).await.unwrap();
            assert_eq!(cluster.value_of(b"b").as_deref(), Some(&b"2"[..]));
            // Further requests take the remembered route at once.
            for _ in 0..5 {
                client.get("a".to_owned()).await.unwrap();
            }

            assert_eq!(leader_store(&cluster), leader, "the leader stays");
            // A BatchCommands stream counts once, a unary call each.
            let (proxied, failed) = forwarded(&cluster);
            let least = if mode == RpcMode::Unary { 7 } else { 1 };
            assert!(proxied >= least, "{mode:?} {cut:?}: {proxied} proxied");
            assert_eq!(failed, 0);
            let stats = client.routing_stats();
            assert_eq!(stats.forwarded_requests, 7, "{stats:?}");
            assert_eq!(stats.proxies_chosen, 1, "{stats:?}");
            assert_eq!(stats.forwarded_stores, 1, "{stats:?}");
            assert_eq!(
                cluster.counters(leader).replica_reads(),
                0,
                "forwarded requests are leader requests"
            );
        }
    }
}

#[tokio::test]
async fn without_forwarding_a_cut_off_leader_fails_every_request() {
    let cluster = cluster().await;
    let mut config = config(RpcMode::Unary);
    config.forwarding = false;
    config.request_deadline = Duration::from_secs(2);
    let client = client(&cluster, config).await;
    client.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let leader = leader_store(&cluster);
    cluster
        .cut_store_from_clients(leader, Some(ClientCut::Refuse))
        .unwrap();
    assert!(client.get("a".to_owned()).await.is_err());
    assert_eq!(forwarded(&cluster), (0, 0));
}

#[tokio::test]
async fn the_cut_healing_ends_forwarding_and_requests_go_direct_again() {
    let (cluster, client, leader) = forwarding_to_a_cut_off_leader(RpcMode::Batched).await;
    assert_eq!(client.routing_stats().forwarded_stores, 1);

    cluster.cut_store_from_clients(leader, None).unwrap();
    // The background probe finds the store again; each probe is counted,
    // and the wait is bounded.
    let mut waited = Duration::ZERO;
    while client.routing_stats().forwarded_stores != 0 {
        assert!(waited < Duration::from_secs(10), "forwarding never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert!(client.routing_stats().forwarding_probes >= 1);
    let before = forwarded(&cluster);
    cluster.reset_counters();
    client.get("a".to_owned()).await.unwrap();
    client.put("c".to_owned(), "3".to_owned()).await.unwrap();
    assert_eq!(forwarded(&cluster), (0, 0), "direct again (was {before:?})");
    assert_eq!(
        cluster
            .counters(leader)
            .count("raw_get", tikv_sim::Outcome::Ok),
        1
    );
}

#[tokio::test]
async fn a_write_through_a_proxy_whose_answer_is_lost_is_undetermined_and_sent_once() {
    let (cluster, client, leader) = forwarding_to_a_cut_off_leader(RpcMode::Unary).await;
    cluster.reset_counters();
    // The leader applies the put, then resets its connections: the proxy
    // loses the answer.
    cluster.drop_next_response(leader, "raw_put").unwrap();
    let error = client
        .put("a".to_owned(), "2".to_owned())
        .await
        .unwrap_err();
    assert!(error.is_undetermined(), "{error}");
    let puts: u64 = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).total("raw_put"))
        .sum();
    assert_eq!(puts, 1, "sent once, through the proxy only");
    assert_eq!(cluster.value_of(b"a").as_deref(), Some(&b"2"[..]));
}

#[tokio::test]
async fn the_proxy_store_dying_moves_forwarding_to_the_next_voter() {
    let (cluster, client, leader) = forwarding_to_a_cut_off_leader(RpcMode::Batched).await;
    let proxy = cluster
        .store_ids()
        .into_iter()
        .find(|&s| cluster.counters(s).forwarded().0 > 0)
        .unwrap();
    cluster.store_down(proxy).await;
    cluster.reset_counters();

    let got = client.get("a".to_owned()).await.unwrap();
    assert_eq!(got.as_deref(), Some(&b"1"[..]));
    client.put("b".to_owned(), "2".to_owned()).await.unwrap();
    let next = cluster
        .store_ids()
        .into_iter()
        .find(|&s| cluster.counters(s).forwarded().0 > 0)
        .unwrap();
    assert!(next != proxy && next != leader, "store {next} proxies now");
    assert_eq!(client.routing_stats().proxies_chosen, 2);
}

#[tokio::test]
async fn the_leader_moving_while_forwarded_is_followed_directly() {
    let (cluster, client, leader) = forwarding_to_a_cut_off_leader(RpcMode::Unary).await;
    let proxy = cluster
        .store_ids()
        .into_iter()
        .find(|&s| cluster.counters(s).forwarded().0 > 0)
        .unwrap();
    let region = cluster.region_for_key(b"a").unwrap().id;
    // Leadership moves to the third store: neither cut off nor the proxy.
    let other = cluster
        .store_ids()
        .into_iter()
        .find(|&s| s != leader && s != proxy)
        .unwrap();
    cluster.transfer_leader(region, other, true).unwrap();
    cluster.reset_counters();

    client.put("a".to_owned(), "2".to_owned()).await.unwrap();
    assert_eq!(cluster.value_of(b"a").as_deref(), Some(&b"2"[..]));
    assert_eq!(
        cluster
            .counters(other)
            .count("raw_put", tikv_sim::Outcome::Ok),
        1,
        "the new leader took the put"
    );
    // One call went through the proxy (and met the move); the rest go
    // direct.
    assert_eq!(forwarded(&cluster), (1, 0));
    client.get("a".to_owned()).await.unwrap();
    assert_eq!(
        cluster
            .counters(other)
            .count("raw_get", tikv_sim::Outcome::Ok),
        1
    );
    assert_eq!(forwarded(&cluster), (1, 0), "the read went direct");
}
