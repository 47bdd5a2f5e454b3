//! `RawClient` against the simulated cluster over real gRPC on 127.0.0.1:
//! every method across Region boundaries, bad input, and the failure modes
//! of routing.md (cold Region with its leader's store down, an old leader
//! answering ServerIsBusy(0), learners and witnesses, a hanging leader, a
//! compare-and-swap whose response was dropped).

use std::time::{Duration, Instant};

use tikv_plan::Failure;
use tikv_plan::{Backoff, ColumnFamily, Config, Error, Key, KvPair, RawClient};
use tikv_sim::{ColdMode, HangMode, Outcome, RegionLayout, SimCluster, SimPeer};

fn fast_config() -> Config {
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

async fn client(cluster: &SimCluster) -> RawClient {
    RawClient::new_with_config(cluster.pd_endpoints(), fast_config())
        .await
        .unwrap()
}

fn letters() -> Vec<String> {
    ('a'..='z').map(|c| format!("{c}1")).collect()
}

fn keys(pairs: &[KvPair]) -> Vec<String> {
    pairs
        .iter()
        .map(|p| String::from_utf8(p.key().as_bytes().to_vec()).unwrap())
        .collect()
}

fn total_requests(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).total_requests())
        .sum()
}

#[tokio::test]
async fn point_operations_and_ttl() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    assert_eq!(client.get("missing").await.unwrap(), None);
    client.put("k1", "v1").await.unwrap();
    assert_eq!(client.get("k1").await.unwrap(), Some(b"v1".to_vec()));
    assert_eq!(cluster.value_of(b"k1"), Some(b"v1".to_vec()));
    client.put_with_ttl("t1", "v", 100).await.unwrap();
    let ttl = client.get_key_ttl_secs("t1").await.unwrap().unwrap();
    assert!(ttl > 0 && ttl <= 100, "{ttl}");
    assert_eq!(client.get_key_ttl_secs("nope").await.unwrap(), None);
    client.delete("k1").await.unwrap();
    assert_eq!(client.get("k1").await.unwrap(), None);
    // Column families are separate key spaces.
    let lock_cf = client.with_cf(ColumnFamily::Lock);
    lock_cf.put("k2", "in-lock").await.unwrap();
    assert_eq!(client.get("k2").await.unwrap(), None);
    assert_eq!(lock_cf.get("k2").await.unwrap(), Some(b"in-lock".to_vec()));
}

#[tokio::test]
async fn batches_cross_region_boundaries() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    let all = letters();
    client
        .batch_put(all.iter().map(|k| (k.clone(), format!("v-{k}"))))
        .await
        .unwrap();
    for k in &all {
        assert_eq!(
            cluster.value_of(k.as_bytes()),
            Some(format!("v-{k}").into_bytes()),
            "{k}"
        );
    }
    let got = client
        .batch_get(vec![
            "z1".to_owned(),
            "a1".to_owned(),
            "m1".to_owned(),
            "zz".to_owned(),
        ])
        .await
        .unwrap();
    assert_eq!(keys(&got), vec!["a1", "m1", "z1"]);
    assert_eq!(got[1].value(), b"v-m1");
    // Later duplicates win.
    client
        .batch_put(vec![("d1", "first"), ("d1", "second")])
        .await
        .unwrap();
    assert_eq!(client.get("d1").await.unwrap(), Some(b"second".to_vec()));
    client
        .batch_put_with_ttl(vec![("p1", "x"), ("q1", "y")], vec![50, 0])
        .await
        .unwrap();
    assert!(client.get_key_ttl_secs("p1").await.unwrap().unwrap() > 0);
    assert_eq!(client.get_key_ttl_secs("q1").await.unwrap(), Some(0));
    client
        .batch_delete(vec!["a1".to_owned(), "h1".to_owned(), "y1".to_owned()])
        .await
        .unwrap();
    let left = client.scan(.., 100).await.unwrap();
    assert_eq!(left.len(), 26 - 3);
    assert!(!keys(&left).contains(&"h1".to_owned()));
}

#[tokio::test]
async fn scans_follow_region_boundaries_and_respect_the_limit() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    let all = letters();
    client
        .batch_put(all.iter().map(|k| (k.clone(), k.clone())))
        .await
        .unwrap();
    // All three Regions, in order.
    assert_eq!(keys(&client.scan(.., 1000).await.unwrap()), all);
    // A limit that ends inside the second Region.
    let got = client.scan("c".."z", 9).await.unwrap();
    assert_eq!(
        keys(&got),
        vec!["c1", "d1", "e1", "f1", "g1", "h1", "i1", "j1", "k1"]
    );
    // Bounds: inclusive end, exclusive end at a Region boundary.
    assert_eq!(
        keys(&client.scan("f1"..="h1", 10).await.unwrap()),
        vec!["f1", "g1", "h1"]
    );
    assert_eq!(
        keys(&client.scan("e".."g", 10).await.unwrap()),
        vec!["e1", "f1"]
    );
    // Reverse, crossing two boundaries downward.
    let got = client.scan_reverse("e".."p", 100).await.unwrap();
    let expected: Vec<String> = ('e'..='o').rev().map(|c| format!("{c}1")).collect();
    assert_eq!(keys(&got), expected);
    let got = client.scan_reverse(.., 3).await.unwrap();
    assert_eq!(keys(&got), vec!["z1", "y1", "x1"]);
    let got = client.scan_keys("m".., 3).await.unwrap();
    assert_eq!(got, vec![Key::from("m1"), Key::from("n1"), Key::from("o1")]);
    let got = client.scan_keys_reverse(.."h", 2).await.unwrap();
    assert_eq!(got, vec![Key::from("g1"), Key::from("f1")]);
    assert!(client.scan("a".., 0).await.unwrap().is_empty());
    // batch_scan: each range cut to `each_limit` even when it spans Regions.
    let got = client
        .batch_scan(vec!["e".."i", "x".."z"], 3)
        .await
        .unwrap();
    assert_eq!(keys(&got), vec!["e1", "f1", "g1", "x1", "y1"]);
    let got = client.batch_scan_keys(vec!["a".."c"], 10).await.unwrap();
    assert_eq!(got, vec![Key::from("a1"), Key::from("b1")]);
}

/// Scans whose cached Regions went stale: the Region ["g", "n") split at
/// "k" after the client cached it. Forward and reverse walks learn the split
/// from `EpochNotMatch` and continue from the boundary of the piece actually
/// served, without losing or repeating a key.
#[tokio::test]
async fn scans_continue_correctly_after_a_split() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    let all = letters();
    client
        .batch_put(all.iter().map(|k| (k.clone(), k.clone())))
        .await
        .unwrap();
    assert_eq!(keys(&client.scan(.., 1000).await.unwrap()), all);
    cluster.split_region(b"k").unwrap();
    let got = client.scan("b".."y", 1000).await.unwrap();
    let expected: Vec<String> = ('b'..='x').map(|c| format!("{c}1")).collect();
    assert_eq!(keys(&got), expected);
    cluster.split_region(b"i").unwrap();
    let got = client.scan_reverse("b".."y", 1000).await.unwrap();
    let expected: Vec<String> = ('b'..='x').rev().map(|c| format!("{c}1")).collect();
    assert_eq!(keys(&got), expected);
    // A limit ending right at the new boundary, then the next page after it.
    cluster.split_region(b"e").unwrap();
    let page = client.scan("a".., 4).await.unwrap();
    assert_eq!(keys(&page), vec!["a1", "b1", "c1", "d1"]);
    let next = client.scan("d2".., 2).await.unwrap();
    assert_eq!(keys(&next), vec!["e1", "f1"]);
    let stale_epochs: u64 = cluster
        .store_ids()
        .into_iter()
        .map(|s| {
            cluster
                .counters(s)
                .count("raw_scan", Outcome::EpochNotMatch)
        })
        .sum();
    assert!(
        stale_epochs >= 3,
        "each split was learned from EpochNotMatch: {stale_epochs}"
    );
}

#[tokio::test]
async fn delete_range_spans_regions() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    client
        .batch_put(letters().into_iter().map(|k| (k.clone(), k)))
        .await
        .unwrap();
    client.delete_range("c".."p").await.unwrap();
    let left = keys(&client.scan(.., 100).await.unwrap());
    assert_eq!(left[..2], ["a1", "b1"]);
    assert_eq!(left[2], "p1");
    assert_eq!(left.len(), 2 + 11);
}

/// client-rust deletes the whole key space for `..` and for `"".."""`.
#[tokio::test]
async fn delete_range_of_everything_empties_every_region() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    for range in [
        tikv_plan::BoundRange::from(..),
        ("".to_owned().."".to_owned()).into(),
    ] {
        client
            .batch_put(letters().into_iter().map(|k| (k.clone(), k)))
            .await
            .unwrap();
        assert_eq!(client.scan(.., 100).await.unwrap().len(), 26);
        client.delete_range(range).await.unwrap();
        assert!(client.scan(.., 100).await.unwrap().is_empty());
    }
    // `"x"..""` reaches the end of the key space, as in client-rust.
    client.put("a1", "x").await.unwrap();
    client.put("z1", "x").await.unwrap();
    assert_eq!(keys(&client.scan("b".."", 10).await.unwrap()), ["z1"]);
}

/// Overlapping ranges are answered range by range in the order given,
/// duplicates included, each cut to `each_limit`, across Regions.
#[tokio::test]
async fn batch_scan_answers_overlapping_ranges_like_client_rust() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    client
        .batch_put(letters().into_iter().map(|k| (k.clone(), k)))
        .await
        .unwrap();
    let got = client
        .batch_scan(vec!["f".."i", "a".."z", "f".."i", "m".."p"], 3)
        .await
        .unwrap();
    assert_eq!(
        keys(&got),
        ["f1", "g1", "h1", "a1", "b1", "c1", "f1", "g1", "h1", "m1", "n1", "o1"]
    );
    let got = client
        .batch_scan_keys(
            vec![
                tikv_plan::BoundRange::from("x"..="y"),
                ("a".."b").into(),
                ("e"..).into(),
            ],
            2,
        )
        .await
        .unwrap();
    let got: Vec<&[u8]> = got.iter().map(|k| k.as_bytes()).collect();
    assert_eq!(got, [&b"x1"[..], b"a1", b"e1", b"f1"]);
}

#[tokio::test]
async fn compare_and_swap_in_atomic_mode() {
    let cluster = cluster().await;
    let client = client(&cluster).await.with_atomic_for_cas();
    let (prev, swapped) = client
        .compare_and_swap("c", None, b"one".to_vec())
        .await
        .unwrap();
    assert_eq!((prev, swapped), (None, true));
    let (prev, swapped) = client
        .compare_and_swap("c", None, b"two".to_vec())
        .await
        .unwrap();
    assert_eq!((prev, swapped), (Some(b"one".to_vec()), false));
    let (prev, swapped) = client
        .compare_and_swap("c", Some(b"one".to_vec()), b"three".to_vec())
        .await
        .unwrap();
    assert_eq!((prev, swapped), (Some(b"one".to_vec()), true));
    assert_eq!(client.get("c").await.unwrap(), Some(b"three".to_vec()));
}

#[tokio::test]
async fn bad_input_is_a_typed_error_without_any_rpc() {
    let cluster = cluster().await;
    let empty: Vec<String> = Vec::new();
    assert!(matches!(
        RawClient::new(empty)
            .await
            .as_ref()
            .err()
            .and_then(|e| e.failure()),
        Some(Failure::InvalidArgument(_))
    ));
    let err = RawClient::new(vec!["127.0.0.1"]).await.unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    let err = RawClient::new(vec!["not an address:x"]).await.unwrap_err();
    assert!(err.to_string().contains("host:port"), "{err}");

    let client = client(&cluster).await;
    let before = total_requests(&cluster);
    let err = client.scan("z".."a", 10).await.unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    let err = client.delete_range("z".."a").await.unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    let err = client.scan(.., 10241).await.unwrap_err();
    assert!(err.to_string().contains("10240"), "{err}");
    assert!(matches!(err, Error::MaxScanLimitExceeded { .. }), "{err}");
    let err = client
        .compare_and_swap("k", None, b"v".to_vec())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("with_atomic_for_cas"), "{err}");
    assert!(matches!(err, Error::UnsupportedMode), "{err}");
    let err = client
        .with_atomic_for_cas()
        .delete_range("a".."b")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedMode), "{err}");
    // As in client-rust: no batch delete in atomic mode, empty or not.
    for keys in [vec!["a", "b"], vec![]] {
        let err = client
            .with_atomic_for_cas()
            .batch_delete(keys)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UnsupportedMode), "{err}");
    }
    let err = client
        .batch_put_with_ttl(vec![("a", "b")], vec![1, 2])
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    assert_eq!(
        total_requests(&cluster),
        before,
        "bad input must not reach a store"
    );
}

/// The Region holding `key`, its PD-cached leader's store, and another voter's store.
fn region_of(cluster: &SimCluster, key: &[u8]) -> (u64, u64) {
    let region = cluster.region_for_key(key).unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    (region.id, leader.store_id)
}

#[tokio::test]
async fn cold_region_with_its_leader_store_down_is_served_by_a_voter_and_heals() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    client.put("h1", "before").await.unwrap();
    let (region_id, old_store) = region_of(&cluster, b"h1");
    // Every Region led from that store loses its leader; PD keeps the old one.
    for region in cluster.regions() {
        if cluster.leader_of(region.id).map(|l| l.store_id) == Some(old_store) {
            cluster
                .make_cold(region.id, ColdMode::NotLeaderFirst)
                .unwrap();
        }
    }
    cluster.store_down(old_store).await;
    assert_eq!(cluster.pd_leader_of(region_id).unwrap().store_id, old_store);

    assert_eq!(client.get("h1").await.unwrap(), Some(b"before".to_vec()));
    client.put("h2", "during").await.unwrap();
    assert_eq!(cluster.value_of(b"h2"), Some(b"during".to_vec()));
    let new_leader = cluster.leader_of(region_id).expect("a voter took over");
    assert_ne!(new_leader.store_id, old_store);
    let stats = client.routing_stats();
    assert!(stats.fallback_successes >= 1, "{stats:?}");

    // The cache healed: later requests go straight to the new leader.
    cluster.reset_counters();
    for _ in 0..5 {
        assert_eq!(client.get("h2").await.unwrap(), Some(b"during".to_vec()));
    }
    let after = client.routing_stats();
    assert_eq!(
        after.fallback_attempts, stats.fallback_attempts,
        "{after:?}"
    );
    assert_eq!(
        cluster
            .counters(new_leader.store_id)
            .count("raw_get", Outcome::Ok),
        5
    );
    for store in cluster.store_ids() {
        assert_eq!(cluster.counters(store).replica_reads(), 0);
    }
}

#[tokio::test]
async fn old_leader_answering_busy_zero_is_probed_around_once() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    client.put("q1", "v").await.unwrap();
    let (region_id, old_store) = region_of(&cluster, b"q1");
    cluster
        .make_cold(region_id, ColdMode::AcceptAtOnce)
        .unwrap();
    cluster.store_busy(old_store, Some(0));
    cluster.reset_counters();

    assert_eq!(client.get("q1").await.unwrap(), Some(b"v".to_vec()));
    let stats = client.routing_stats();
    assert_eq!(stats.busy_probes, 1, "{stats:?}");
    let busy = cluster
        .counters(old_store)
        .count("raw_get", Outcome::ServerIsBusy);
    assert_eq!(busy, 2, "two busy answers, then the probe");
    let new_leader = cluster.leader_of(region_id).unwrap();
    assert_ne!(new_leader.store_id, old_store);
    // Later requests skip the busy old leader entirely.
    client.get("q1").await.unwrap();
    assert_eq!(
        cluster
            .counters(old_store)
            .count("raw_get", Outcome::ServerIsBusy),
        2
    );
    assert_eq!(client.routing_stats().busy_probes, 1);
}

#[tokio::test]
async fn learners_and_witnesses_never_receive_requests() {
    let layout = RegionLayout::new(vec![
        SimPeer::voter(1),
        SimPeer::voter(2),
        SimPeer::voter(3),
        SimPeer::learner(4),
        SimPeer::witness(5),
    ])
    .leader(1);
    let cluster = SimCluster::builder()
        .stores(5)
        .region_layout(0, layout)
        .start()
        .await
        .unwrap();
    let client = client(&cluster).await;
    client.put("a", "1").await.unwrap();
    let region_id = cluster.regions()[0].id;
    cluster
        .make_cold(region_id, ColdMode::NotLeaderFirst)
        .unwrap();
    cluster.store_down(1).await;
    for i in 0..5 {
        client.put(format!("k{i}"), "v").await.unwrap();
        client.get(format!("k{i}")).await.unwrap();
    }
    assert_eq!(cluster.counters(4).total_requests(), 0, "learner store");
    assert_eq!(cluster.counters(5).total_requests(), 0, "witness store");
}

#[tokio::test]
async fn hanging_leader_is_bounded_by_the_rpc_timeout() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    client.put("b1", "v").await.unwrap();
    let (region_id, old_store) = region_of(&cluster, b"b1");
    let region = cluster.region(region_id).unwrap();
    let other = region
        .peers
        .iter()
        .find(|p| p.store_id != old_store)
        .unwrap()
        .store_id;
    // The leader moved without PD noticing, and the old leader's store hangs.
    cluster.transfer_leader(region_id, other, false).unwrap();
    cluster.store_hang(old_store, HangMode::Respond);
    let started = Instant::now();
    assert_eq!(client.get("b1").await.unwrap(), Some(b"v".to_vec()));
    let took = started.elapsed();
    // One request timeout (400 ms) on the hung store, then the voters.
    assert!(took < Duration::from_millis(400 * 3), "took {took:?}");
    cluster.store_unhang(old_store);
}

#[tokio::test]
async fn cas_whose_response_was_dropped_is_undetermined_and_applied_once() {
    let cluster = cluster().await;
    let client = client(&cluster).await.with_atomic_for_cas();
    let (_, leader_store) = region_of(&cluster, b"c");
    cluster
        .drop_next_response(leader_store, "raw_compare_and_swap")
        .unwrap();
    let err = client
        .compare_and_swap("c", None, b"once".to_vec())
        .await
        .unwrap_err();
    assert!(err.is_undetermined(), "{err:?}");
    assert_eq!(cluster.value_of(b"c"), Some(b"once".to_vec()));
    let cas_total: u64 = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).total("raw_compare_and_swap"))
        .sum();
    assert_eq!(cas_total, 1, "never replayed on another peer");
    // Reading back tells the caller what happened.
    assert_eq!(client.get("c").await.unwrap(), Some(b"once".to_vec()));
}

/// Every method, across Region boundaries, while the store leading the
/// first Region is down and the Regions it led are cold (PD still names the
/// dead leader).
#[tokio::test]
async fn every_method_works_through_fallback_while_a_leader_store_is_down() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    let cas = client.with_atomic_for_cas();
    let all = letters();
    client
        .batch_put(all.iter().map(|k| (k.clone(), k.clone())))
        .await
        .unwrap();
    // The store leading the first Region goes down, and every Region it
    // leads goes cold.
    let (_, victim) = region_of(&cluster, b"a1");
    let mut cold = 0;
    for region in cluster.regions() {
        if cluster.leader_of(region.id).map(|p| p.store_id) == Some(victim) {
            cluster
                .make_cold(region.id, ColdMode::NotLeaderFirst)
                .unwrap();
            cold += 1;
        }
    }
    assert!(cold >= 1);
    cluster.store_down(victim).await;

    assert_eq!(client.get("a1").await.unwrap(), Some(b"a1".to_vec()));
    let got = client
        .batch_get(vec!["a1".to_owned(), "m1".to_owned(), "z1".to_owned()])
        .await
        .unwrap();
    assert_eq!(keys(&got), vec!["a1", "m1", "z1"]);
    assert_eq!(keys(&client.scan(.., 100).await.unwrap()), all);
    let expected_reverse: Vec<String> = all.iter().rev().cloned().collect();
    assert_eq!(
        keys(&client.scan_reverse(.., 100).await.unwrap()),
        expected_reverse
    );
    assert_eq!(client.scan_keys("f".., 3).await.unwrap().len(), 3);
    let got = client
        .batch_scan(vec!["a".."c", "x".."z"], 5)
        .await
        .unwrap();
    assert_eq!(keys(&got), vec!["a1", "b1", "x1", "y1"]);
    client.put_with_ttl("t1", "v", 30).await.unwrap();
    assert!(client.get_key_ttl_secs("t1").await.unwrap().is_some());
    client.delete("b1").await.unwrap();
    client
        .batch_delete(vec!["c1".to_owned(), "p1".to_owned()])
        .await
        .unwrap();
    client.delete_range("q".."s").await.unwrap();
    let left = keys(&client.scan(.., 100).await.unwrap());
    for gone in ["b1", "c1", "p1", "q1", "r1"] {
        assert!(!left.contains(&gone.to_owned()), "{gone} still there");
    }
    assert_eq!(left.len(), 26 - 5, "t1 was overwritten, not added");
    let (prev, swapped) = cas
        .compare_and_swap("a1", Some(b"a1".to_vec()), b"A".to_vec())
        .await
        .unwrap();
    assert_eq!((prev, swapped), (Some(b"a1".to_vec()), true));
    assert_eq!(cluster.value_of(b"a1"), Some(b"A".to_vec()));
    let stats = client.routing_stats();
    assert!(stats.fallback_successes >= cold, "{stats:?}");
    for store in cluster.store_ids() {
        assert_eq!(cluster.counters(store).replica_reads(), 0);
    }
}

/// `coprocessor` calls the stores' plugin once per Region, with the data
/// the builder made for that Region and its pieces of the ranges; the
/// results come back per Region, in key order. A missing plugin or a version
/// mismatch is the store's answer (`KvError`); a requirement that is not
/// semver is refused before anything is sent (`InvalidSemver`).
#[tokio::test]
async fn coprocessor_runs_the_plugin_in_every_region_of_the_ranges() {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    for key in ["a1", "b1", "h1", "i1", "j1", "p1"] {
        client.put(key.to_owned(), "v".to_owned()).await.unwrap();
    }
    let regions: Vec<u64> = cluster.regions().iter().map(|r| r.id).collect();
    let answers = client
        .coprocessor(
            tikv_sim::COPROCESSOR_PLUGIN,
            ">=1.0, <2",
            [
                "b".to_owned().."j".to_owned(),
                "o".to_owned().."q".to_owned(),
            ],
            |region, ranges| {
                format!("region {} with {} ranges", region.id, ranges.len()).into_bytes()
            },
        )
        .await
        .unwrap();
    let got: Vec<(Vec<std::ops::Range<Key>>, String)> = answers
        .into_iter()
        .map(|(ranges, data)| (ranges, String::from_utf8(data).unwrap()))
        .collect();
    let range = |a: &str, b: &str| Key::from(a.to_owned())..Key::from(b.to_owned());
    assert_eq!(
        got,
        [
            (
                vec![range("b", "g")],
                format!("region {} with 1 ranges:1", regions[0])
            ),
            (
                vec![range("g", "j")],
                format!("region {} with 1 ranges:2", regions[1])
            ),
            (
                vec![range("o", "q")],
                format!("region {} with 1 ranges:1", regions[2])
            ),
        ]
    );

    let missing = client
        .coprocessor("no-such-plugin", "*", ["a".to_owned()..], |_, _| Vec::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, Error::KvError { message } if message.contains("no-such-plugin")),
        "{missing:?}"
    );
    let mismatch = client
        .coprocessor(
            tikv_sim::COPROCESSOR_PLUGIN,
            "^2",
            ["a".to_owned()..],
            |_, _| Vec::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&mismatch, Error::KvError { message } if message.contains("does not match")),
        "{mismatch:?}"
    );
    let sent = |cluster: &SimCluster| -> u64 {
        cluster
            .store_ids()
            .into_iter()
            .map(|id| cluster.counters(id).total("raw_coprocessor"))
            .sum()
    };
    let before = sent(&cluster);
    let invalid = client
        .coprocessor(
            tikv_sim::COPROCESSOR_PLUGIN,
            "one point two",
            ["a".to_owned()..],
            |_, _| Vec::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(invalid, Error::InvalidSemver(_)), "{invalid:?}");
    assert_eq!(sent(&cluster), before, "nothing was sent");
    assert!(before >= 5, "the calls above reached the plugin");
    cluster.shutdown().await;
}
