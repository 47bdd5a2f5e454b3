//! The two ways a re-sent raw write broke linearizability, over
//! the simulated cluster: a write whose response was lost was applied a
//! second time, and a write that timed out was re-sent to a new leader while
//! its first copy could still land. Both now end `Failure::Undetermined` with
//! the write applied at most once and never re-sent.

use std::time::Duration;

use tikv_plan::Failure;
use tikv_plan::{Backoff, Config, RawClient};
use tikv_sim::{HangMode, Outcome, SimCluster};

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(400))
        .with_connect_timeout(Duration::from_millis(300))
        .with_region_backoff(Backoff::no_jitter_backoff(2, 50, 10))
}

/// Three stores, Regions ["", "g"), ["g", "n"), ["n", ""), three voters each.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

async fn client(cluster: &SimCluster, config: Config) -> RawClient {
    RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap()
}

fn leader_store(cluster: &SimCluster, key: &[u8]) -> u64 {
    let region = cluster.region_for_key(key).unwrap();
    cluster.leader_of(region.id).unwrap().store_id
}

/// How many `method` requests a store applied (answered, or applied and
/// then dropped the answer), over all stores.
fn applied(cluster: &SimCluster, method: &str) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| {
            let c = cluster.counters(s);
            c.count(method, Outcome::Ok) + c.count(method, Outcome::Dropped)
        })
        .sum()
}

fn assert_undetermined(result: tikv_plan::Result<()>, what: &str) {
    match result.as_ref().err().and_then(|e| e.failure()) {
        Some(Failure::Undetermined { request, .. }) => {
            assert!(request.contains(what), "{request}");
        }
        _ => panic!("{what}: expected an undetermined outcome, got {result:?}"),
    }
}

#[tokio::test]
async fn writes_whose_response_was_lost_are_undetermined_and_never_resent() {
    let cluster = cluster().await;
    let a = client(&cluster, config()).await;
    let b = client(&cluster, config()).await;
    let store = leader_store(&cluster, b"h1");

    // put: applied by the leader, then the connection resets.
    cluster.drop_next_response(store, "raw_put").unwrap();
    assert_undetermined(a.put("h1", "v1").await, "raw_put");
    assert_eq!(applied(&cluster, "raw_put"), 1, "sent once, to the leader");
    assert_eq!(cluster.value_of(b"h1"), Some(b"v1".to_vec()));
    // Another client's acknowledged write is not overwritten later by a
    // second copy of the first.
    b.put("h1", "v2").await.unwrap();
    assert_eq!(a.get("h1").await.unwrap(), Some(b"v2".to_vec()));
    assert_eq!(applied(&cluster, "raw_put"), 2);

    // delete and batch_put: the same rule.
    cluster.drop_next_response(store, "raw_delete").unwrap();
    assert_undetermined(a.delete("h1").await, "raw_delete");
    assert_eq!(applied(&cluster, "raw_delete"), 1);
    cluster.drop_next_response(store, "raw_batch_put").unwrap();
    assert_undetermined(
        a.batch_put(vec![("h2", "x"), ("h3", "y")]).await,
        "raw_batch_put",
    );
    assert_eq!(applied(&cluster, "raw_batch_put"), 1);
    assert_eq!(a.routing_stats().undetermined_writes, 3);
}

#[tokio::test]
async fn a_write_that_timed_out_is_not_resent_to_a_new_leader() {
    let cluster = cluster().await;
    let a = client(&cluster, config()).await;
    let b = client(&cluster, config()).await;
    a.put("h1", "v0").await.unwrap();
    let region = cluster.region_for_key(b"h1").unwrap();
    let old = leader_store(&cluster, b"h1");
    let new = region
        .peers
        .iter()
        .map(|p| p.store_id)
        .find(|s| *s != old)
        .unwrap();
    // The leader's network freezes and leadership moves on.
    cluster.store_hang(old, HangMode::Connect);
    cluster.transfer_leader(region.id, new, true).unwrap();
    let puts_before = applied(&cluster, "raw_put");
    assert_undetermined(a.put("h1", "v1").await, "raw_put");
    assert_eq!(
        cluster.counters(new).count("raw_put", Outcome::Ok),
        0,
        "the timed-out write was not re-sent to the new leader"
    );
    // Another client's write goes through the new leader.
    b.put("h1", "v2").await.unwrap();
    assert_eq!(b.get("h1").await.unwrap(), Some(b"v2".to_vec()));
    assert_eq!(applied(&cluster, "raw_put"), puts_before + 1);
    cluster.store_unhang(old);
}
