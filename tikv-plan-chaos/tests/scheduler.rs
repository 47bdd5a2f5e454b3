//! PD's schedulers as a fault: for a whole run they move leaders, merge,
//! split and move peers, and leave a cluster whose Regions still tile the
//! key space, each led by a voter PD names; TiFlash learners stay put.

use std::time::Duration;

use tikv_plan::proto::metapb::PeerRole;
use tikv_plan_chaos::{FaultKind, Injector, InjectorConfig};
use tikv_sim::SimCluster;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn the_scheduler_keeps_changing_the_cluster_and_leaves_it_whole() {
    let cluster = SimCluster::builder()
        .stores(4)
        .split_keys(vec![b"f".to_vec(), b"m".to_vec(), b"t".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let mut injector = Injector::new(InjectorConfig {
        seed: 7,
        kinds: Vec::new(),
        interval: (Duration::from_millis(100), Duration::from_millis(100)),
        duration: (Duration::from_millis(100), Duration::from_millis(100)),
        max_splits: 6,
        scheduler: Some((Duration::from_millis(10), Duration::from_millis(30))),
        keys: (b'a'..=b'z').map(|c| vec![c]).collect(),
    });
    injector
        .run(&cluster, Instant::now() + Duration::from_secs(30))
        .await;

    let counts = injector.counts();
    for kind in [
        FaultKind::TransferFresh,
        FaultKind::Merge,
        FaultKind::Split,
        FaultKind::PeerMove,
    ] {
        let n = counts.get(&kind).copied().unwrap_or(0);
        assert!(n >= 50, "{kind}: {n} in 30 s: {counts:?}");
    }
    // No other fault was drawn.
    assert_eq!(counts.len(), 4, "{counts:?}");
    // At most the initial 4 Regions plus 6.
    let mut regions = cluster.regions();
    assert!(regions.len() <= 10, "{}", regions.len());
    regions.sort_by(|a, b| a.start_key.cmp(&b.start_key));
    assert!(regions[0].start_key.is_empty());
    assert!(regions.last().unwrap().end_key.is_empty());
    for pair in regions.windows(2) {
        assert_eq!(pair[0].end_key, pair[1].start_key, "{regions:?}");
    }
    for region in &regions {
        let voters = region
            .peers
            .iter()
            .filter(|p| p.role == PeerRole::Voter as i32)
            .count();
        assert_eq!(voters, 3, "{region:?}");
        // Every move finished: no learner is left behind.
        assert_eq!(region.peers.len(), 3, "{region:?}");
        let leader = cluster.leader_of(region.id).unwrap();
        assert!(region.peers.contains(&leader));
        assert_eq!(cluster.pd_leader_of(region.id), Some(leader));
    }
    cluster.shutdown().await;
}

/// A TiFlash store beside four TiKV stores: the schedulers move TiKV's
/// peers as before and leave each Region's TiFlash learner where PD's
/// placement rules put it, never a voter, never the leader.
#[tokio::test(start_paused = true)]
async fn the_scheduler_leaves_tiflash_learners_in_place() {
    let cluster = SimCluster::builder()
        .stores(4)
        .tiflash_stores(1)
        .split_keys(vec![b"f".to_vec(), b"m".to_vec(), b"t".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let mut injector = Injector::new(InjectorConfig {
        seed: 7,
        kinds: Vec::new(),
        interval: (Duration::from_millis(100), Duration::from_millis(100)),
        duration: (Duration::from_millis(100), Duration::from_millis(100)),
        max_splits: 6,
        scheduler: Some((Duration::from_millis(10), Duration::from_millis(30))),
        keys: (b'a'..=b'z').map(|c| vec![c]).collect(),
    });
    injector
        .run(&cluster, Instant::now() + Duration::from_secs(30))
        .await;
    let counts = injector.counts();
    for kind in [FaultKind::Merge, FaultKind::Split, FaultKind::PeerMove] {
        let n = counts.get(&kind).copied().unwrap_or(0);
        assert!(n >= 50, "{kind}: {n} in 30 s: {counts:?}");
    }
    for region in cluster.regions() {
        let on_tiflash: Vec<_> = region.peers.iter().filter(|p| p.store_id == 5).collect();
        assert_eq!(on_tiflash.len(), 1, "{region:?}");
        assert_eq!(on_tiflash[0].role, PeerRole::Learner as i32);
        let voters = region
            .peers
            .iter()
            .filter(|p| p.role == PeerRole::Voter as i32 && p.store_id <= 4)
            .count();
        assert_eq!((voters, region.peers.len()), (3, 4), "{region:?}");
        assert_ne!(cluster.leader_of(region.id).unwrap().store_id, 5);
    }
    assert_eq!(cluster.counters(5).total_requests(), 0);
    cluster.shutdown().await;
}

/// With no fault but PD's schedulers (leader transfers, merges, splits and
/// peer moves, four times faster than in the suites), every operation of
/// the raw workload succeeds: a cluster that only changes shape never
/// fails a request, and the history is linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_that_only_changes_shape_fails_no_request() {
    let report = tikv_plan_chaos::run(tikv_plan_chaos::ChaosConfig {
        seed: 5,
        duration: Duration::from_secs(10),
        tasks: 8,
        keys: 24,
        faults: Vec::new(),
        scheduler: Some((Duration::from_millis(10), Duration::from_millis(110))),
        ..Default::default()
    })
    .await
    .unwrap();
    println!("{}", report.summary());
    assert!(report.is_clean(), "{}", report.describe_violations());
    assert_eq!(
        report.tiflash_calls, 0,
        "the run's TiFlash store heard nothing"
    );
    let moves: u64 = report.faults.values().sum();
    assert!(moves >= 100, "{}", report.summary());
    let failed: Vec<String> = report
        .history
        .iter()
        .filter_map(|op| match &op.result {
            tikv_plan_chaos::OpResult::Failed { .. } => Some(format!("{op:?}")),
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
}
