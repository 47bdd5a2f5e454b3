//! The Region errors TiKV gives around leader changes, merges, new peers
//! and full disks, met by the client against the simulator, which gives
//! each where TiKV does (tikv-sim's `raft.rs`): each handled as client-go
//! handles it (routing.md, "Region errors from the cached leader"). On
//! tokio's paused clock.

use std::time::Duration;

use tikv_plan::{Config, Error, RawClient, ReplicaRead};
use tikv_sim::proto::metapb::PeerRole;
use tikv_sim::{Outcome, RaftTiming, SimCluster};
use tokio::time::Instant;

/// Elections 1 to 2 s after a leader dies; max ts synced 20 ms after a
/// leader change.
fn timing() -> RaftTiming {
    RaftTiming::scaled(Duration::from_millis(100)).with_max_ts_sync(Duration::from_millis(20))
}

async fn sim(stores: u64) -> SimCluster {
    SimCluster::builder()
        .stores(stores)
        .replicas(3)
        .raft_timing(timing())
        .start()
        .await
        .unwrap()
}

async fn client(cluster: &SimCluster) -> RawClient {
    RawClient::new_with_config(cluster.pd_endpoints(), Config::default())
        .await
        .unwrap()
}

fn count(cluster: &SimCluster, method: &str, outcome: Outcome) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count(method, outcome))
        .sum()
}

fn region_of(cluster: &SimCluster) -> u64 {
    cluster.region_for_key(b"k").unwrap().id
}

fn other_voter(cluster: &SimCluster, region_id: u64, not: u64) -> u64 {
    cluster
        .region(region_id)
        .unwrap()
        .peers
        .iter()
        .map(|p| p.store_id)
        .find(|s| *s != not)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_stale_command_is_sent_again_at_once_and_applied_once() {
    let cluster = sim(3).await;
    let client = client(&cluster).await.with_atomic_for_cas();
    let region = region_of(&cluster);
    client.put(b"warm".to_vec(), b"".to_vec()).await.unwrap();
    let leader = cluster.leader_of(region).unwrap().store_id;
    let to = other_voter(&cluster, region, leader);
    cluster
        .store_propose_delay(leader, Duration::from_millis(100))
        .unwrap();
    let cas = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .compare_and_swap(b"k".to_vec(), None::<Vec<u8>>, b"v".to_vec())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    cluster.transfer_leader(region, to, true).unwrap();
    let started = Instant::now();
    let (previous, swapped) = cas.await.unwrap().unwrap();
    // Applied exactly once: had the first proposal been applied, the
    // second compare would have failed.
    assert_eq!((previous, swapped), (None, true));
    assert_eq!(cluster.value_of(b"k"), Some(b"v".to_vec()));
    assert_eq!(
        count(&cluster, "raw_compare_and_swap", Outcome::StaleCommand),
        1
    );
    // Sent again without a backoff: the old leader's hint, then the new
    // leader (the max ts wait does not apply to API v1 raw writes).
    assert!(
        started.elapsed() < Duration::from_millis(60),
        "{:?}",
        started.elapsed()
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_in_a_merge_waits_it_out_and_lands_in_the_merged_region() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec()])
        .raft_timing(timing())
        .start()
        .await
        .unwrap();
    let client = client(&cluster).await;
    client.put(b"k".to_vec(), b"before".to_vec()).await.unwrap();
    let (source, target) = (
        cluster.region_for_key(b"k").unwrap().id,
        cluster.region_for_key(b"m").unwrap().id,
    );
    let store = cluster.leader_of(target).unwrap().store_id;
    cluster.transfer_leader(source, store, true).unwrap();
    cluster
        .merge_regions_after(source, target, Duration::from_millis(300))
        .unwrap();
    let started = Instant::now();
    client.put(b"k".to_vec(), b"after".to_vec()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(cluster.value_of(b"k"), Some(b"after".to_vec()));
    assert!(count(&cluster, "raw_put", Outcome::ProposalInMergingMode) >= 1);
    // The cache was kept through the merge window: no reload per refusal.
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_replica_read_on_an_uninitialized_learner_backs_off_until_it_serves() {
    let cluster = sim(4).await;
    let writer = client(&cluster).await;
    writer.put(b"k".to_vec(), b"v".to_vec()).await.unwrap();
    let region = region_of(&cluster);
    let spare = (1..=4)
        .find(|s| {
            cluster
                .region(region)
                .unwrap()
                .peers
                .iter()
                .all(|p| p.store_id != *s)
        })
        .unwrap();
    cluster
        .add_peer_uninitialized(region, spare, PeerRole::Learner, Duration::from_millis(200))
        .unwrap();
    // A new client: its cache has the learner.
    let reader = client(&cluster)
        .await
        .with_replica_read(ReplicaRead::Learner);
    assert_eq!(
        reader.get(b"k".to_vec()).await.unwrap(),
        Some(b"v".to_vec())
    );
    assert!(count(&cluster, "raw_get", Outcome::RegionNotInitialized) >= 1);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_disk_is_waited_out_and_a_disk_that_stays_full_is_a_typed_error() {
    let cluster = sim(3).await;
    let client = client(&cluster).await;
    client.put(b"k".to_vec(), b"0".to_vec()).await.unwrap();
    let leader = cluster.leader_of(region_of(&cluster)).unwrap().store_id;
    cluster.store_disk_full(leader, true).unwrap();
    // Reads go on.
    assert_eq!(
        client.get(b"k".to_vec()).await.unwrap(),
        Some(b"0".to_vec())
    );
    let freed = tokio::time::sleep(Duration::from_millis(100));
    let put = client.put(b"k".to_vec(), b"1".to_vec());
    tokio::pin!(put);
    tokio::select! {
        _ = &mut put => panic!("a write went through a full disk"),
        () = freed => cluster.store_disk_full(leader, false).unwrap(),
    }
    put.await.unwrap();
    assert_eq!(cluster.value_of(b"k"), Some(b"1".to_vec()));

    // Full for good: the caller gets the Region error, naming the store.
    cluster.store_disk_full(leader, true).unwrap();
    let err = client.put(b"k".to_vec(), b"2".to_vec()).await.unwrap_err();
    match &err {
        Error::RegionError(e) => assert!(
            e.disk_full
                .as_ref()
                .is_some_and(|d| d.store_id == vec![leader]),
            "{e:?}"
        ),
        other => panic!("expected the DiskFull Region error, got {other:?}"),
    }
    assert_eq!(cluster.value_of(b"k"), Some(b"1".to_vec()));
    cluster.shutdown().await;
}
