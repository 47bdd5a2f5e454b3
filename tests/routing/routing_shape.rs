//! The cluster changes shape under a cached route (docs/routing.md, "The
//! cluster changes shape"): a merged Region, an added, promoted or removed
//! peer, and a store that moved. The raw client, over real gRPC against
//! the simulator.

use std::time::Duration;

use tikv_plan::mock;
use tikv_plan::proto::metapb::PeerRole;
use tikv_plan::{Config, RawClient};
use tikv_sim::{Outcome, SimCluster};

use crate::common::{accept, get, routing, text, three_voters};

async fn cluster(stores: u64) -> SimCluster {
    SimCluster::builder()
        .stores(stores)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

async fn client(cluster: &SimCluster) -> RawClient {
    let config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(200));
    RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap()
}

fn counted(cluster: &SimCluster, method: &str, outcome: Outcome) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count(method, outcome))
        .sum()
}

async fn value(client: &RawClient, key: &str) -> Option<String> {
    client
        .get(key.to_owned())
        .await
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

#[tokio::test]
async fn a_merged_region_replaces_both_cached_regions() {
    let cluster = cluster(3).await;
    let client = client(&cluster).await;
    let other = self::client(&cluster).await;
    for key in ["a", "h", "p"] {
        client.put(key.to_owned(), key.to_owned()).await.unwrap();
        other.get(key.to_owned()).await.unwrap();
    }
    let source = cluster.region_for_key(b"h").unwrap().id;
    let target = cluster.region_for_key(b"p").unwrap().id;
    cluster.merge_regions(source, target).unwrap();
    cluster.reset_counters();

    // The source's range first: its stores no longer have it.
    assert_eq!(value(&client, "h").await.as_deref(), Some("h"));
    assert_eq!(counted(&cluster, "raw_get", Outcome::RegionNotFound), 1);
    // The target's range first (the other client): its old epoch learns the
    // merged Region from EpochNotMatch, which covers the source's range too.
    other.put("q".to_owned(), "q".to_owned()).await.unwrap();
    assert_eq!(counted(&cluster, "raw_put", Outcome::EpochNotMatch), 1);
    assert_eq!(value(&other, "h").await.as_deref(), Some("h"));
    assert_eq!(counted(&cluster, "raw_get", Outcome::RegionNotFound), 1);
    assert_eq!(value(&client, "q").await.as_deref(), Some("q"));
    // Batches and scans cross the merged range in one piece.
    let got = client
        .batch_get(vec!["a".to_owned(), "h".to_owned(), "p".to_owned()])
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
    let keys: Vec<Vec<u8>> = client
        .scan("b".."z", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|kv| kv.0.into())
        .collect();
    assert_eq!(keys, vec![b"h".to_vec(), b"p".to_vec(), b"q".to_vec()]);
    // Merge back to one Region and everything still reads.
    let left = cluster.region_for_key(b"a").unwrap().id;
    cluster.merge_regions(left, target).unwrap();
    assert_eq!(cluster.regions().len(), 1);
    let got = client.scan(.., 10).await.unwrap();
    assert_eq!(got.len(), 4);
}

#[tokio::test]
async fn a_removed_leader_peer_is_dropped_from_the_route() {
    let cluster = cluster(4).await;
    let client = client(&cluster).await;
    client.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let region = cluster.region_for_key(b"a").unwrap();
    let old_leader = cluster.leader_of(region.id).unwrap();
    let spare = (1..=4)
        .find(|s| region.peers.iter().all(|p| p.store_id != *s))
        .unwrap();

    // PD moves the Region: a learner on the spare store, promoted, then
    // the leader's peer removed (leadership moves first).
    cluster
        .add_peer(region.id, spare, PeerRole::Learner)
        .unwrap();
    cluster.promote_learner(region.id, spare).unwrap();
    cluster.remove_peer(region.id, old_leader.store_id).unwrap();

    assert_eq!(value(&client, "a").await.as_deref(), Some("1"));
    client.put("a".to_owned(), "2".to_owned()).await.unwrap();
    assert_eq!(value(&client, "a").await.as_deref(), Some("2"));
    assert_eq!(
        cluster
            .counters(old_leader.store_id)
            .count("raw_get", Outcome::RegionNotFound),
        1,
        "the removed peer was asked once, then dropped from the route"
    );
    // Later requests never go to the removed peer again.
    cluster.reset_counters();
    for _ in 0..5 {
        assert_eq!(value(&client, "a").await.as_deref(), Some("2"));
    }
    assert_eq!(cluster.counters(old_leader.store_id).total_requests(), 0);
}

#[tokio::test]
async fn a_store_that_moved_is_found_at_its_new_address() {
    let cluster = cluster(3).await;
    let client = client(&cluster).await;
    client.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let region = cluster.region_for_key(b"a").unwrap().id;
    let store = cluster.leader_of(region).unwrap().store_id;
    cluster.move_store(store, None).await.unwrap();

    assert_eq!(value(&client, "a").await.as_deref(), Some("1"));
    client.put("a".to_owned(), "2".to_owned()).await.unwrap();
    // Reads reach the leader at its new address again, directly.
    cluster.reset_counters();
    assert_eq!(value(&client, "a").await.as_deref(), Some("2"));
    assert_eq!(cluster.counters(store).count("raw_get", Outcome::Ok), 1);
    assert_eq!(counted(&cluster, "raw_get", Outcome::NotLeader), 0);
}

#[tokio::test]
async fn another_store_at_the_old_address_answers_store_not_match_and_the_store_is_resolved_again()
{
    let cluster = cluster(3).await;
    let client = client(&cluster).await;
    client.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let region = cluster.region_for_key(b"a").unwrap().id;
    let store = cluster.leader_of(region).unwrap().store_id;
    let other = store % 3 + 1;
    let old_addr = cluster.store_addr(store).unwrap();
    cluster.move_store(store, None).await.unwrap();
    cluster
        .move_store(other, Some(old_addr.parse().unwrap()))
        .await
        .unwrap();

    assert_eq!(value(&client, "a").await.as_deref(), Some("1"));
    assert_eq!(
        cluster
            .counters(other)
            .count("raw_get", Outcome::StoreNotMatch),
        1
    );
    assert_eq!(cluster.counters(store).count("raw_get", Outcome::Ok), 1);
    // Both moved stores serve their Regions at their new addresses.
    for key in ["a", "h", "p"] {
        client.put(key.to_owned(), key.to_owned()).await.unwrap();
        assert_eq!(value(&client, key).await.as_deref(), Some(key));
    }
}

/// A route that keeps working is still refreshed: PD moved the Region's
/// leadership (and the old leader still answers, so no error ever tells
/// the client). While used, the cached route lives on; once it goes unused
/// for the TTL (ten minutes, plus up to one of jitter) the next request
/// loads PD's view.
#[tokio::test(start_paused = true)]
async fn a_route_that_never_fails_is_reloaded_once_unused_for_its_ttl() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(accept);
    pd.set_pd_view(mock::region(
        1,
        b"",
        b"",
        &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
        Some(12),
    ));
    // Used every five minutes for an hour: never reloaded.
    for _ in 0..12 {
        assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-11");
        tokio::time::advance(Duration::from_secs(300)).await;
    }
    assert_eq!(pd.region_reloads(), 0);
    // Unused for eleven minutes: PD's view is loaded and followed.
    tokio::time::advance(Duration::from_secs(360)).await;
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.region_reloads(), 1);
}
