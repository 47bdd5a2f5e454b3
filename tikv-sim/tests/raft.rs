//! Raft as the simulated cluster models it (`raft.rs`): elections after a
//! store dies, graceful restarts, and the Region errors TiKV gives around
//! leader changes, merges, new peers and full disks. On tokio's paused
//! clock, over real sockets.

mod txn_support;

use std::time::Duration;

use tikv_sim::codec::encode_bytes;
use tikv_sim::proto::metapb::PeerRole;
use tikv_sim::proto::{errorpb, kvrpcpb};
use tikv_sim::{HangMode, Outcome, RaftTiming, SimCluster};
use txn_support::{put, tso};

/// A 100 ms tick: elections 1 to 2 s after a leader dies.
const TICK: Duration = Duration::from_millis(100);

fn timing() -> RaftTiming {
    RaftTiming::scaled(TICK).with_max_ts_sync(Duration::from_millis(20))
}

async fn cluster(regions: usize) -> SimCluster {
    let splits = (1..regions)
        .map(|i| encode_bytes(format!("k{i:03}").as_bytes()))
        .collect();
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(splits)
        .raft_timing(timing())
        .start()
        .await
        .unwrap()
}

/// A raw get of `key` in Region `region_id`, sent to its peer on `store`:
/// the Region error, if any.
async fn raw_get_on(cluster: &SimCluster, region_id: u64, store: u64) -> Option<errorpb::Error> {
    let ctx = cluster.context(region_id, store).unwrap();
    let mut client = cluster.tikv_client(store).await.unwrap();
    let key = cluster.region(region_id).unwrap().start_key;
    client
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx),
            key,
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .region_error
}

/// A raw put in Region `region_id` on its peer on `store`, with `ctx`'s
/// flags: the Region error, if any.
async fn raw_put_on(
    cluster: &SimCluster,
    region_id: u64,
    store: u64,
    value: &[u8],
) -> Option<errorpb::Error> {
    let ctx = cluster.context(region_id, store).unwrap();
    let mut client = cluster.tikv_client(store).await.unwrap();
    let key = cluster.region(region_id).unwrap().start_key;
    client
        .raw_put(kvrpcpb::RawPutRequest {
            context: Some(ctx),
            key,
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .region_error
}

fn first_region(cluster: &SimCluster) -> u64 {
    cluster.regions()[0].id
}

fn other_store(cluster: &SimCluster, region_id: u64, not: &[u64]) -> u64 {
    cluster
        .region(region_id)
        .unwrap()
        .peers
        .iter()
        .map(|p| p.store_id)
        .find(|s| !not.contains(s))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_dead_leader_is_replaced_after_an_election_timeout_and_pd_learns_it() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let dead = cluster.leader_of(region).unwrap();
    let follower = other_store(&cluster, region, &[dead.store_id]);
    let died = tokio::time::Instant::now();
    cluster.store_down(dead.store_id).await;
    assert!(cluster.electing(region));

    // The window: a follower still names the dead leader.
    let e = raw_get_on(&cluster, region, follower).await.unwrap();
    let hint = e.not_leader.unwrap().leader.unwrap();
    assert_eq!(hint.id, dead.id, "followers name the dead leader");
    assert_eq!(cluster.pd_leader_of(region).unwrap().id, dead.id);

    // Elected within [E - one heartbeat interval, 2E) of the death.
    let e_timeout = timing().election_timeout();
    while cluster.electing(region) {
        tokio::time::sleep(TICK / 10).await;
    }
    let took = died.elapsed();
    assert!(took >= e_timeout - TICK * 2, "elected after {took:?}");
    assert!(took < e_timeout * 2 + TICK, "elected after {took:?}");
    let leader = cluster.leader_of(region).unwrap();
    assert_ne!(leader.store_id, dead.store_id);
    assert_eq!(cluster.pd_leader_of(region), Some(leader), "PD heard of it");
    assert!(raw_get_on(&cluster, region, leader.store_id)
        .await
        .is_none());
    assert_eq!(cluster.raft_stats().elections, 1);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn election_times_spread_over_the_drawn_range() {
    let cluster = cluster(60).await;
    let led: Vec<u64> = cluster
        .regions()
        .iter()
        .filter(|r| cluster.leader_of(r.id).unwrap().store_id == 1)
        .map(|r| r.id)
        .collect();
    assert!(led.len() >= 15, "store 1 leads {} regions", led.len());
    let died = tokio::time::Instant::now();
    cluster.store_down(1).await;
    let mut elected_at = Vec::new();
    let mut waiting = led.clone();
    while !waiting.is_empty() {
        tokio::time::sleep(TICK / 10).await;
        waiting.retain(|r| {
            let done = !cluster.electing(*r);
            if done {
                elected_at.push(died.elapsed());
            }
            !done
        });
    }
    let e = timing().election_timeout();
    let (first, last) = (elected_at[0], elected_at[elected_at.len() - 1]);
    assert!(
        first >= e - TICK * 2 && last < e * 2 + TICK,
        "{elected_at:?}"
    );
    assert!(
        last - first >= e / 4,
        "draws differ across Regions: {elected_at:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_old_leader_knows_no_leader_until_the_election() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let dead = cluster.leader_of(region).unwrap();
    cluster.store_down(dead.store_id).await;
    cluster.store_up(dead.store_id).await.unwrap();
    let e = raw_get_on(&cluster, region, dead.store_id).await.unwrap();
    let not_leader = e.not_leader.expect("NotLeader");
    assert!(not_leader.leader.is_none(), "{not_leader:?}");
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert!(!cluster.electing(region));
    let leader = cluster.leader_of(region).unwrap();
    assert!(raw_get_on(&cluster, region, leader.store_id)
        .await
        .is_none());
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_quorum_of_live_voters_no_one_leads_until_one_returns() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let dead = cluster.leader_of(region).unwrap().store_id;
    let second = other_store(&cluster, region, &[dead]);
    let last = other_store(&cluster, region, &[dead, second]);
    cluster.store_down(dead).await;
    cluster.store_down(second).await;
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert!(cluster.electing(region));
    assert_eq!(cluster.leader_of(region), None);
    let e = raw_get_on(&cluster, region, last).await.unwrap();
    assert!(e.not_leader.unwrap().leader.is_none(), "no hint");
    assert!(cluster.raft_stats().no_quorum >= 1);
    // A leader request does not wake it into leading, as a cold Region's
    // voter would.
    assert!(raw_get_on(&cluster, region, last).await.is_some());

    cluster.store_up(second).await.unwrap();
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert!(!cluster.electing(region));
    let leader = cluster.leader_of(region).unwrap().store_id;
    assert!([second, last].contains(&leader), "leader on {leader}");
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_hang_lifted_before_the_timeout_keeps_the_leader() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let leader = cluster.leader_of(region).unwrap();
    cluster.store_hang(leader.store_id, HangMode::Respond);
    assert!(cluster.electing(region));
    tokio::time::sleep(timing().election_timeout() / 2).await;
    cluster.store_unhang(leader.store_id);
    assert!(!cluster.electing(region));
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert_eq!(cluster.leader_of(region), Some(leader));
    assert_eq!(cluster.raft_stats().elections, 0);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_cold_store_keeps_its_leaders_however_long_it_is_down() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let leader = cluster.leader_of(region).unwrap();
    cluster.store_down_cold(leader.store_id).await.unwrap();
    assert!(!cluster.electing(region));
    tokio::time::sleep(timing().election_timeout() * 5).await;
    assert_eq!(cluster.leader_of(region), Some(leader));
    cluster.store_up(leader.store_id).await.unwrap();
    assert!(raw_get_on(&cluster, region, leader.store_id)
        .await
        .is_none());
    // Up again, the keeping is over: the next crash elects.
    cluster.store_down(leader.store_id).await;
    assert!(cluster.electing(region));
    cluster.shutdown().await;
}

/// Takes a pessimistic lock on transactional `key` at `start`.
async fn pessimistic_lock(cluster: &SimCluster, key: &[u8], start: u64) {
    let (mut client, ctx) = txn_support::client_for(cluster, key).await;
    let resp = client
        .kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
            context: Some(ctx),
            mutations: vec![kvrpcpb::Mutation {
                op: kvrpcpb::Op::PessimisticLock as i32,
                key: key.to_vec(),
                ..Default::default()
            }],
            primary_lock: key.to_vec(),
            start_version: start,
            for_update_ts: start,
            lock_ttl: 20_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.errors.is_empty(),
        "{resp:?}"
    );
}

fn lock_count(cluster: &SimCluster) -> usize {
    cluster.locks(b"", b"").len()
}

#[tokio::test(start_paused = true)]
async fn a_crash_loses_in_memory_pessimistic_locks_and_a_transfer_keeps_them() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let start = tso(&cluster).await;
    pessimistic_lock(&cluster, b"a", start).await;
    assert_eq!(lock_count(&cluster), 1);

    // A graceful move keeps them: TiKV proposes them before it transfers.
    let moved = cluster
        .evict_leaders(cluster.leader_of(region).unwrap().store_id)
        .unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!(lock_count(&cluster), 1);

    // A crash loses them with the leader's memory.
    cluster
        .store_down(cluster.leader_of(region).unwrap().store_id)
        .await;
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert!(!cluster.electing(region));
    assert_eq!(lock_count(&cluster), 0);
    assert_eq!(cluster.raft_stats().pessimistic_locks_lost, 1);
    // Prewrite locks (written through Raft) survive a crash.
    let start = tso(&cluster).await;
    let mut req = txn_support::prewrite_req(vec![put(b"b", b"v")], b"b", start);
    req.lock_ttl = 20_000;
    let p = txn_support::prewrite(&cluster, req).await;
    assert!(p.errors.is_empty() && p.region_error.is_none(), "{p:?}");
    let leader = cluster.leader_of(region).unwrap().store_id;
    cluster.store_down(leader).await;
    tokio::time::sleep(timing().election_timeout() * 2).await;
    assert_eq!(lock_count(&cluster), 1);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_graceful_restart_evicts_leaders_first_and_brings_them_back() {
    let cluster = cluster(12).await;
    let led_by_1 = |c: &SimCluster| {
        c.regions()
            .iter()
            .filter(|r| c.leader_of(r.id).unwrap().store_id == 1)
            .count()
    };
    let before = led_by_1(&cluster);
    assert!(before > 0);
    let restart = cluster
        .restart_store(1, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(restart.evicted, before);
    assert_eq!(restart.returned, before);
    assert_eq!(led_by_1(&cluster), before);
    // No Region ever lost its leader: no election ran.
    assert_eq!(cluster.raft_stats().elections, 0);
    assert!(cluster.regions_electing().is_empty());
    for r in cluster.regions() {
        assert_eq!(cluster.pd_leader_of(r.id), cluster.leader_of(r.id));
    }

    let restarts = cluster
        .rolling_restart(Duration::from_secs(1), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(restarts.len(), 3);
    assert_eq!(cluster.raft_stats().elections, 0);
    cluster.shutdown().await;
}

/// An async-commit (or 1PC, or plain) prewrite of transactional `key`:
/// the response.
async fn prewrite_kind(
    cluster: &SimCluster,
    key: &[u8],
    async_commit: bool,
    one_pc: bool,
) -> kvrpcpb::PrewriteResponse {
    let start = tso(cluster).await;
    let mut req = txn_support::prewrite_req(vec![put(key, b"v")], key, start);
    req.use_async_commit = async_commit;
    req.try_one_pc = one_pc;
    if async_commit {
        req.secondaries = Vec::new();
    }
    txn_support::prewrite(cluster, req).await
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_refuses_async_commit_and_1pc_until_its_max_ts_is_synced() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let to = other_store(
        &cluster,
        region,
        &[cluster.leader_of(region).unwrap().store_id],
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cluster.transfer_leader(region, to, true).unwrap();
    assert!(!cluster.max_ts_synced(region).unwrap());
    for (key, async_commit, one_pc) in [(b"a", true, false), (b"b", false, true)] {
        let p = prewrite_kind(&cluster, key, async_commit, one_pc).await;
        let e = p.region_error.expect("refused");
        assert!(e.max_timestamp_not_synced.is_some(), "{e:?}");
    }
    // A plain two-phase prewrite does not need it.
    let p = prewrite_kind(&cluster, b"c", false, false).await;
    assert!(p.region_error.is_none(), "{p:?}");
    assert_eq!(
        cluster
            .counters(to)
            .count("kv_prewrite", Outcome::MaxTimestampNotSynced),
        2
    );
    tokio::time::sleep(timing().max_ts_sync).await;
    assert!(cluster.max_ts_synced(region).unwrap());
    let p = prewrite_kind(&cluster, b"a", true, false).await;
    assert!(p.region_error.is_none(), "{p:?}");

    // With PD down, the new leader cannot fetch a timestamp: it stays
    // unsynced until PD is back.
    let back = cluster.leader_of(region).unwrap().store_id;
    let to = other_store(&cluster, region, &[back]);
    cluster.pd_member_down(0).await.unwrap();
    cluster.transfer_leader(region, to, true).unwrap();
    tokio::time::sleep(timing().max_ts_sync * 10).await;
    assert!(!cluster.max_ts_synced(region).unwrap());
    cluster.pd_member_up(0).await.unwrap();
    tokio::time::sleep(timing().max_ts_sync * 2).await;
    assert!(cluster.max_ts_synced(region).unwrap());
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn api_v2_raw_writes_wait_for_the_max_ts_too() {
    let cluster = SimCluster::builder()
        .stores(3)
        .api_version(kvrpcpb::ApiVersion::V2)
        .raft_timing(timing())
        .start()
        .await
        .unwrap();
    let region = first_region(&cluster);
    let to = other_store(
        &cluster,
        region,
        &[cluster.leader_of(region).unwrap().store_id],
    );
    cluster.transfer_leader(region, to, true).unwrap();
    let mut ctx = cluster.context(region, to).unwrap();
    ctx.api_version = kvrpcpb::ApiVersion::V2 as i32;
    let mut client = cluster.tikv_client(to).await.unwrap();
    let put = |ctx: kvrpcpb::Context| kvrpcpb::RawPutRequest {
        context: Some(ctx),
        key: b"r\0\0\0k".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    let resp = client.raw_put(put(ctx.clone())).await.unwrap().into_inner();
    let e = resp.region_error.expect("refused");
    assert!(e.max_timestamp_not_synced.is_some(), "{e:?}");
    tokio::time::sleep(timing().max_ts_sync).await;
    let resp = client.raw_put(put(ctx)).await.unwrap().into_inner();
    assert!(resp.region_error.is_none(), "{resp:?}");
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_proposal_overtaken_by_a_leader_change_is_a_stale_command_and_not_applied() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let leader = cluster.leader_of(region).unwrap().store_id;
    let to = other_store(&cluster, region, &[leader]);
    cluster
        .store_propose_delay(leader, Duration::from_millis(100))
        .unwrap();
    let writing = {
        let ctx = cluster.context(region, leader).unwrap();
        let mut client = cluster.tikv_client(leader).await.unwrap();
        tokio::spawn(async move {
            client
                .raw_put(kvrpcpb::RawPutRequest {
                    context: Some(ctx),
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    cluster.transfer_leader(region, to, true).unwrap();
    let resp = writing.await.unwrap();
    let e = resp.region_error.expect("stale");
    assert!(e.stale_command.is_some(), "{e:?}");
    assert_eq!(cluster.value_of(b"k"), None, "nothing applied");
    assert_eq!(cluster.raft_stats().stale_commands, 1);

    // Without a leader change the write waits and is applied.
    cluster
        .store_propose_delay(to, Duration::from_millis(100))
        .unwrap();
    assert!(raw_put_on(&cluster, region, to, b"w").await.is_none());
    assert_eq!(cluster.value_of(b"k"), None);
    let key = cluster.region(region).unwrap().start_key;
    assert_eq!(cluster.value_of(&key), Some(b"w".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_merging_region_refuses_writes_and_read_indexes_until_the_merge_commits() {
    let cluster = cluster(2).await;
    let regions = cluster.regions();
    let (source, target) = (regions[0].id, regions[1].id);
    // Both Regions led from the same store, as a merge needs.
    let store = cluster.leader_of(target).unwrap().store_id;
    cluster.transfer_leader(source, store, true).unwrap();
    cluster
        .merge_regions_after(source, target, Duration::from_secs(1))
        .unwrap();
    let e = raw_put_on(&cluster, source, store, b"v").await.unwrap();
    assert_eq!(
        e.proposal_in_merging_mode,
        Some(errorpb::ProposalInMergingMode { region_id: source })
    );
    let e = raw_get_on(&cluster, source, store).await.unwrap();
    assert!(e.read_index_not_ready.is_some(), "{e:?}");
    // The target is not merging yet.
    assert!(raw_put_on(&cluster, target, store, b"t").await.is_none());

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(cluster.region(source).is_none(), "merged");
    let e = raw_get_on_ctx(&cluster, source, store, target).await;
    assert!(e.region_not_found.is_some(), "{e:?}");
    assert_eq!(cluster.raft_stats().proposals_in_merging_mode, 1);
    cluster.shutdown().await;
}

/// A raw get sent for gone Region `gone` to `store` (whose context is
/// built from Region `alive`, then renamed).
async fn raw_get_on_ctx(cluster: &SimCluster, gone: u64, store: u64, alive: u64) -> errorpb::Error {
    let mut ctx = cluster.context(alive, store).unwrap();
    ctx.region_id = gone;
    let mut client = cluster.tikv_client(store).await.unwrap();
    client
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx),
            key: b"a".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .region_error
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_uninitialized_peer_refuses_replica_reads_and_is_no_leader() {
    let cluster = SimCluster::builder()
        .stores(4)
        .replicas(3)
        .raft_timing(timing())
        .start()
        .await
        .unwrap();
    let region = first_region(&cluster);
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
        .add_peer_uninitialized(region, spare, PeerRole::Learner, Duration::from_secs(1))
        .unwrap();
    let mut ctx = cluster.context(region, spare).unwrap();
    ctx.replica_read = true;
    let mut client = cluster.tikv_client(spare).await.unwrap();
    let read = |ctx: kvrpcpb::Context| kvrpcpb::RawGetRequest {
        context: Some(ctx),
        key: b"k".to_vec(),
        cf: String::new(),
    };
    let resp = client
        .raw_get(read(ctx.clone()))
        .await
        .unwrap()
        .into_inner();
    let e = resp.region_error.expect("refused");
    assert_eq!(
        e.region_not_initialized,
        Some(errorpb::RegionNotInitialized { region_id: region })
    );
    // A leader request meets the not-leader check first.
    let e = raw_get_on(&cluster, region, spare).await.unwrap();
    assert!(e.not_leader.is_some(), "{e:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let resp = client.raw_get(read(ctx)).await.unwrap().into_inner();
    assert!(resp.region_error.is_none(), "{resp:?}");
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_disk_refuses_writes_and_serves_reads() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let leader = cluster.leader_of(region).unwrap().store_id;
    cluster.store_disk_full(leader, true).unwrap();
    let e = raw_put_on(&cluster, region, leader, b"v").await.unwrap();
    assert_eq!(e.disk_full.unwrap().store_id, vec![leader]);
    assert!(raw_get_on(&cluster, region, leader).await.is_none());
    assert_eq!(
        cluster.counters(leader).count("raw_put", Outcome::DiskFull),
        1
    );

    // A majority of the peers full refuses too, naming them.
    cluster.store_disk_full(leader, false).unwrap();
    let others: Vec<u64> = (1..=3).filter(|s| *s != leader).collect();
    for s in &others {
        cluster.store_disk_full(*s, true).unwrap();
    }
    let e = raw_put_on(&cluster, region, leader, b"v").await.unwrap();
    assert_eq!(e.disk_full.unwrap().store_id, others);
    cluster.store_disk_full(others[0], false).unwrap();
    assert!(raw_put_on(&cluster, region, leader, b"v").await.is_none());
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_ends_the_lock_waits_of_the_store_with_its_connections() {
    let cluster = cluster(1).await;
    let region = first_region(&cluster);
    let holder = tso(&cluster).await;
    pessimistic_lock(&cluster, b"a", holder).await;
    // A second transaction waits for the lock on the leader's store.
    let waiter = tso(&cluster).await;
    let (mut client, ctx) = txn_support::client_for(&cluster, b"a").await;
    let waiting = tokio::spawn(async move {
        client
            .kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
                context: Some(ctx),
                mutations: vec![kvrpcpb::Mutation {
                    op: kvrpcpb::Op::PessimisticLock as i32,
                    key: b"a".to_vec(),
                    ..Default::default()
                }],
                primary_lock: b"a".to_vec(),
                start_version: waiter,
                for_update_ts: waiter,
                lock_ttl: 20_000,
                wait_timeout: 10_000,
                ..Default::default()
            })
            .await
    });
    while cluster.lock_waiters() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    cluster
        .store_down(cluster.leader_of(region).unwrap().store_id)
        .await;
    // The wait ends with the store's connections: the client sees a
    // transport error, and the queue is gone with the store's memory.
    let answer = waiting.await.unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(cluster.lock_waiters(), 0);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_merging_region_takes_no_split_and_no_conf_change() {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![b"m".to_vec()])
        .raft_timing(timing())
        .start()
        .await
        .unwrap();
    let regions = cluster.regions();
    // The source above its target: a split of the source would leave the
    // target's new range over the part split off.
    let (target, source) = (regions[0].id, regions[1].id);
    let store = cluster.leader_of(target).unwrap().store_id;
    cluster.transfer_leader(source, store, true).unwrap();
    cluster
        .merge_regions_after(source, target, Duration::from_secs(1))
        .unwrap();
    for region in [source, target] {
        let key = cluster.region(region).unwrap().start_key;
        let inside = [key, b"x".to_vec()].concat();
        assert!(cluster.split_region(&inside).is_err(), "split of {region}");
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
        assert!(cluster.add_peer(region, spare, PeerRole::Learner).is_err());
    }
    assert!(cluster.merge_regions(target, source).is_err());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(cluster.region(source).is_none());
    let merged = cluster.region(target).unwrap();
    assert!(merged.start_key.is_empty() && merged.end_key.is_empty());
    assert!(
        cluster.split_region(b"q").is_ok(),
        "merged, it splits again"
    );
    cluster.shutdown().await;
}
