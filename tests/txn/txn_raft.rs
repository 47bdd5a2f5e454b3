//! Transactions through a leader change and a crash, as TiKV answers
//! around them (tikv-sim's `raft.rs`): a new leader refusing async-commit
//! and 1PC prewrites until its max ts is synced, and a crash losing the
//! pessimistic locks its leader held in memory. On tokio's paused clock.

use std::time::Duration;

use crate::support::{client, pessimistic, read};
use tikv_plan::codec::encode_bytes;
use tikv_plan::TransactionOptions;
use tikv_sim::{Outcome, RaftTiming, SimCluster};

fn timing() -> RaftTiming {
    RaftTiming::scaled(Duration::from_millis(100)).with_max_ts_sync(Duration::from_millis(30))
}

async fn sim() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .raft_timing(timing())
        .start()
        .await
        .unwrap()
}

fn count(cluster: &SimCluster, outcome: Outcome) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count("kv_prewrite", outcome))
        .sum()
}

fn move_leader(cluster: &SimCluster) -> u64 {
    let region = cluster.region_for_key(&encode_bytes(b"a")).unwrap().id;
    let leader = cluster.leader_of(region).unwrap().store_id;
    let to = cluster
        .region(region)
        .unwrap()
        .peers
        .iter()
        .map(|p| p.store_id)
        .find(|s| *s != leader)
        .unwrap();
    cluster.transfer_leader(region, to, true).unwrap();
    region
}

#[tokio::test(start_paused = true)]
async fn async_commit_and_1pc_wait_for_a_new_leaders_max_ts() {
    let cluster = sim().await;
    let client = client(&cluster).await;
    let mut before = 0;
    for (i, options) in [
        TransactionOptions::new_optimistic().use_async_commit(),
        TransactionOptions::new_optimistic().try_one_pc(),
    ]
    .into_iter()
    .enumerate()
    {
        let region = move_leader(&cluster);
        assert!(!cluster.max_ts_synced(region).unwrap());
        let mut txn = client.begin_with_options(options).await.unwrap();
        txn.put("a".to_owned(), format!("v{i}")).await.unwrap();
        txn.commit().await.unwrap();
        assert_eq!(read(&client, "a").await, Some(format!("v{i}").into_bytes()));
        let refused = count(&cluster, Outcome::MaxTimestampNotSynced);
        assert!(refused > before, "the new leader refused first ({refused})");
        before = refused;
    }
    cluster.shutdown().await;
}

/// A pessimistic transaction that locked `a` and wrote it, then lost its
/// lock with a crash of the leader (and the election after it).
async fn lost_lock(
    cluster: &SimCluster,
    client: &tikv_plan::TransactionClient,
) -> tikv_plan::Transaction {
    let mut setup = client.begin_optimistic().await.unwrap();
    setup.put("a".to_owned(), "0").await.unwrap();
    setup.commit().await.unwrap();
    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    txn.get_for_update("a".to_owned()).await.unwrap();
    txn.put("a".to_owned(), "1").await.unwrap();
    let region = cluster.region_for_key(&encode_bytes(b"a")).unwrap().id;
    let leader = cluster.leader_of(region).unwrap().store_id;
    cluster.store_down(leader).await;
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert!(!cluster.electing(region));
    assert_eq!(cluster.raft_stats().pessimistic_locks_lost, 1);
    assert!(cluster.locks(b"", b"").is_empty(), "the lock is gone");
    txn
}

#[tokio::test(start_paused = true)]
async fn a_lost_pessimistic_lock_fails_the_commit_when_another_wrote_the_key_meanwhile() {
    let cluster = sim().await;
    let client = client(&cluster).await;
    let mut txn = lost_lock(&cluster, &client).await;
    // With the lock gone, another transaction writes the key.
    let mut other = client.begin_with_options(pessimistic()).await.unwrap();
    other.get_for_update("a".to_owned()).await.unwrap();
    other.put("a".to_owned(), "2").await.unwrap();
    other.commit().await.unwrap();
    // TiKV cannot amend the lost lock (a write at or after its start):
    // the commit fails, with nothing written and no lock left.
    let err = txn.commit().await.unwrap_err();
    assert!(!err.undetermined_anywhere(), "{err}");
    assert!(
        format!("{err:?}").contains("PessimisticLockNotFound"),
        "{err:?}"
    );
    assert_eq!(read(&client, "a").await, Some(b"2".to_vec()));
    assert!(cluster.locks(b"", b"").is_empty(), "no lock left behind");
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_pessimistic_lock_with_no_write_since_is_amended_and_commits() {
    let cluster = sim().await;
    let client = client(&cluster).await;
    let mut txn = lost_lock(&cluster, &client).await;
    // Nobody wrote the key since the transaction began: TiKV amends the
    // lock at prewrite (`amend_pessimistic_lock`) and the commit holds.
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    cluster.shutdown().await;
}
