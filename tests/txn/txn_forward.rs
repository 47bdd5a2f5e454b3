//! Transactions while this client is cut off from a live leader's store
//! (docs/routing.md, "Forwarding"): every phase, lock resolution included,
//! reaches that leader through a voter's store.

use std::time::Duration;

use crate::support::{client_with, cluster, optimistic, pessimistic, read};
use crate::txn_shape::crashed_prewrite;
use tikv_plan::codec::encode_bytes;
use tikv_plan::{Config, TransactionClient};
use tikv_sim::{ClientCut, SimCluster};

fn leader_store(cluster: &SimCluster, key: &str) -> u64 {
    let region = cluster
        .region_for_key(&encode_bytes(key.as_bytes()))
        .unwrap();
    cluster.leader_of(region.id).unwrap().store_id
}

async fn client(cluster: &SimCluster) -> TransactionClient {
    let config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(200));
    client_with(cluster, config).await
}

fn proxied(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).forwarded().0)
        .sum()
}

#[tokio::test]
async fn transactions_commit_through_a_proxy_when_cut_off_before_or_during() {
    for options in [optimistic(), pessimistic()] {
        for cut_before_begin in [true, false] {
            let cluster = cluster(&["n"]).await;
            let client = client(&cluster).await;
            // "a" and "p" in two Regions; the first one's leader is cut off.
            let cut = leader_store(&cluster, "a");
            let mut txn = if cut_before_begin {
                cluster
                    .cut_store_from_clients(cut, Some(ClientCut::Refuse))
                    .unwrap();
                client.begin_with_options(options.clone()).await.unwrap()
            } else {
                client.begin_with_options(options.clone()).await.unwrap()
            };
            assert_eq!(txn.get("a".to_owned()).await.unwrap(), None);
            txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
            if !cut_before_begin {
                cluster
                    .cut_store_from_clients(cut, Some(ClientCut::Drop))
                    .unwrap();
            }
            txn.put("p".to_owned(), "2".to_owned()).await.unwrap();
            txn.commit().await.unwrap();
            assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
            assert_eq!(read(&client, "p").await, Some(b"2".to_vec()));
            assert!(cluster.locks(b"", b"").is_empty());
            assert!(proxied(&cluster) > 0);
            assert_eq!(leader_store(&cluster, "a"), cut, "the leader stayed");
            cluster.shutdown().await;
        }
    }
}

/// A writer prewrote "a" (primary, first Region) and "p" and crashed;
/// a reader cut off from the first Region's leader finds the lock on "p",
/// checks the primary through a proxy and rolls the transaction back.
#[tokio::test]
async fn a_reader_cut_off_from_a_crashed_writers_primary_resolves_its_locks_through_a_proxy() {
    let cluster = cluster(&["n"]).await;
    let reader = client(&cluster).await;
    let start = crashed_prewrite(&cluster, "a", &["a", "p"]).await;
    cluster
        .cut_store_from_clients(leader_store(&cluster, "a"), Some(ClientCut::Refuse))
        .unwrap();
    cluster.advance_tso_clock(Duration::from_secs(4));
    assert_eq!(read(&reader, "p").await, None, "never committed");
    assert_eq!(read(&reader, "a").await, None);
    assert!(cluster.locks(b"", b"").is_empty());
    assert!(cluster
        .versions(b"a")
        .iter()
        .any(|v| v.kind == "rollback" && v.start_ts == start));
    assert!(proxied(&cluster) > 0);
}
