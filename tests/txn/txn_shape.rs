//! Transactions while the cluster changes shape: a merge between a
//! transaction's reads and its commit, a leader's peer removed mid-way, and
//! a crashed writer's locks resolved after their Regions merged.

use std::time::Duration;

use crate::support::{client, cluster, optimistic, pessimistic, read};
use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::{self, Mutation, Op};
use tikv_plan::proto::metapb::PeerRole;
use tikv_sim::SimCluster;

fn region_of(cluster: &SimCluster, key: &str) -> u64 {
    cluster
        .region_for_key(&encode_bytes(key.as_bytes()))
        .unwrap()
        .id
}

#[tokio::test]
async fn transactions_spanning_a_merge_commit() {
    for options in [optimistic(), pessimistic()] {
        let cluster = cluster(&["g", "n"]).await;
        let client = client(&cluster).await;
        let mut txn = client.begin_with_options(options).await.unwrap();
        assert_eq!(txn.get("h".to_owned()).await.unwrap(), None);
        txn.put("h".to_owned(), "1".to_owned()).await.unwrap();
        txn.put("p".to_owned(), "2".to_owned()).await.unwrap();
        cluster
            .merge_regions(region_of(&cluster, "h"), region_of(&cluster, "p"))
            .unwrap();
        txn.commit().await.unwrap();
        assert_eq!(read(&client, "h").await, Some(b"1".to_vec()));
        assert_eq!(read(&client, "p").await, Some(b"2".to_vec()));
        assert!(cluster.locks(b"", b"").is_empty());
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn a_pessimistic_transaction_survives_its_leaders_peer_being_removed() {
    let cluster = cluster(&["g", "n"]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    let region = region_of(&cluster, "a");
    let leader = cluster.leader_of(region).unwrap().store_id;
    // The Region moves off the leader's store: a fourth replica is not
    // needed; the leader's peer goes and another voter leads.
    cluster.remove_peer(region, leader).unwrap();
    txn.put("b".to_owned(), "2".to_owned()).await.unwrap();
    cluster.add_peer(region, leader, PeerRole::Learner).unwrap();
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "b").await, Some(b"2".to_vec()));
    cluster.shutdown().await;
}

/// A writer prewrites "h" (primary) and "p" in two Regions, commits the
/// primary only, and crashes; the Regions merge. A reader of "p" finds the
/// lock in the merged Region, learns the primary committed, and commits
/// the secondary there. A second writer that crashed before committing is
/// rolled back the same way.
#[tokio::test]
async fn lock_resolution_finds_locks_in_a_merged_region() {
    let cluster = cluster(&["g", "n"]).await;
    let client = client(&cluster).await;
    let committed = crashed_prewrite(&cluster, "h", &["h", "p"]).await;
    let commit_ts = cluster.current_ts();
    commit_by_hand(&cluster, "h", committed, commit_ts).await;
    let source = region_of(&cluster, "h");
    let target = region_of(&cluster, "p");
    // The reader has both Regions cached before they merge.
    assert_eq!(read(&client, "j").await, None);
    assert_eq!(read(&client, "r").await, None);
    cluster.merge_regions(source, target).unwrap();
    assert_eq!(read(&client, "p").await, Some(b"value-p".to_vec()));
    assert!(cluster.locks(b"", b"").is_empty());

    let rolled_back = crashed_prewrite(&cluster, "i", &["i", "q"]).await;
    cluster.advance_tso_clock(Duration::from_secs(4));
    assert_eq!(read(&client, "q").await, None);
    assert_eq!(read(&client, "i").await, None);
    assert!(cluster.locks(b"", b"").is_empty());
    assert!(cluster
        .versions(b"q")
        .iter()
        .any(|v| v.kind == "rollback" && v.start_ts == rolled_back));
    cluster.shutdown().await;
}

pub(crate) async fn crashed_prewrite(cluster: &SimCluster, primary: &str, keys: &[&str]) -> u64 {
    let start = cluster.current_ts();
    for key in keys {
        let region = region_of(cluster, key);
        let store = cluster.leader_of(region).unwrap().store_id;
        let mut tikv = cluster.tikv_client(store).await.unwrap();
        let request = kvrpcpb::PrewriteRequest {
            context: cluster.context(region, store),
            mutations: vec![Mutation {
                op: Op::Put as i32,
                key: key.as_bytes().to_vec(),
                value: format!("value-{key}").into_bytes(),
                ..Default::default()
            }],
            primary_lock: primary.as_bytes().to_vec(),
            start_version: start,
            lock_ttl: 3_000,
            ..Default::default()
        };
        let response = tikv.kv_prewrite(request).await.unwrap().into_inner();
        assert!(response.errors.is_empty() && response.region_error.is_none());
    }
    start
}

async fn commit_by_hand(cluster: &SimCluster, key: &str, start: u64, commit: u64) {
    let region = region_of(cluster, key);
    let store = cluster.leader_of(region).unwrap().store_id;
    let mut tikv = cluster.tikv_client(store).await.unwrap();
    let response = tikv
        .kv_commit(kvrpcpb::CommitRequest {
            context: cluster.context(region, store),
            start_version: start,
            keys: vec![key.as_bytes().to_vec()],
            commit_version: commit,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(response.error.is_none() && response.region_error.is_none());
}
