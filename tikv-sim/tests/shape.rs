//! The cluster changing shape under a client: merge, membership changes and
//! a store moving, answered over real gRPC as TiKV and PD answer.

use tikv_sim::proto::metapb::{self, PeerRole};
use tikv_sim::proto::pdpb;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::{errorpb, kvrpcpb};
use tikv_sim::{Outcome, SimCluster};

async fn cluster(stores: u64) -> SimCluster {
    SimCluster::builder()
        .stores(stores)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

async fn raw_get_at(address: &str, ctx: kvrpcpb::Context, key: &[u8]) -> kvrpcpb::RawGetResponse {
    let mut client = TikvClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    client
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx),
            key: key.to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn raw_get(
    cluster: &SimCluster,
    store: u64,
    ctx: kvrpcpb::Context,
    key: &[u8],
) -> kvrpcpb::RawGetResponse {
    raw_get_at(&cluster.store_addr(store).unwrap(), ctx, key).await
}

async fn raw_put(cluster: &SimCluster, key: &[u8], value: &[u8]) {
    let (store, ctx) = leader_ctx(cluster, key);
    let mut client = cluster.tikv_client(store).await.unwrap();
    let resp = client
        .raw_put(kvrpcpb::RawPutRequest {
            context: Some(ctx),
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none(), "{resp:?}");
}

fn leader_ctx(cluster: &SimCluster, key: &[u8]) -> (u64, kvrpcpb::Context) {
    let region = cluster.region_for_key(key).unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    (store, cluster.context(region.id, store).unwrap())
}

fn region_error(resp: &kvrpcpb::RawGetResponse) -> &errorpb::Error {
    resp.region_error
        .as_ref()
        .unwrap_or_else(|| panic!("expected a region error, got {resp:?}"))
}

fn epoch(region: &metapb::Region) -> (u64, u64) {
    let e = region.region_epoch.unwrap();
    (e.conf_ver, e.version)
}

#[tokio::test]
async fn a_merge_joins_ranges_data_and_locks_and_the_source_is_gone() {
    let cluster = cluster(3).await;
    raw_put(&cluster, b"h", b"middle").await;
    raw_put(&cluster, b"p", b"right").await;
    let source = cluster.region_for_key(b"h").unwrap();
    let target = cluster.region_for_key(b"p").unwrap();
    let (_, old_target_ctx) = leader_ctx(&cluster, b"p");
    let (source_leader, old_source_ctx) = leader_ctx(&cluster, b"h");
    // A transactional lock in the source carries over.
    let mut client = cluster.tikv_client(source_leader).await.unwrap();
    let ts = cluster.current_ts();
    let prewrite = client
        .kv_prewrite(kvrpcpb::PrewriteRequest {
            context: Some(old_source_ctx.clone()),
            mutations: vec![kvrpcpb::Mutation {
                op: kvrpcpb::Op::Put as i32,
                key: b"i".to_vec(),
                value: b"locked".to_vec(),
                ..Default::default()
            }],
            primary_lock: b"i".to_vec(),
            start_version: ts,
            lock_ttl: 3000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(prewrite.region_error.is_none() && prewrite.errors.is_empty());

    // Neighbours only, never itself.
    let left = cluster.region_for_key(b"a").unwrap();
    assert!(cluster.merge_regions(left.id, target.id).is_err());
    assert!(cluster.merge_regions(target.id, target.id).is_err());

    cluster.merge_regions(source.id, target.id).unwrap();
    let merged = cluster.region(target.id).unwrap();
    assert!(cluster.region(source.id).is_none());
    assert_eq!(
        (merged.start_key.as_slice(), merged.end_key.as_slice()),
        (&b"g"[..], &b""[..])
    );
    // PrepareMerge takes the source to version 2; CommitMerge gives the
    // target max(2, 1) + 1; the target's conf_ver is kept.
    assert_eq!(epoch(&merged), (epoch(&target).0, 3));
    assert_eq!(cluster.region_for_key(b"h").unwrap().id, target.id);

    // Every store of the source answers RegionNotFound for it.
    for peer in &source.peers {
        let mut ctx = old_source_ctx.clone();
        ctx.peer = Some(*peer);
        let resp = raw_get(&cluster, peer.store_id, ctx, b"h").await;
        assert_eq!(
            region_error(&resp).region_not_found.unwrap().region_id,
            source.id
        );
    }
    // The target's old epoch learns the merged Region.
    let store = old_target_ctx.peer.unwrap().store_id;
    let resp = raw_get(&cluster, store, old_target_ctx, b"p").await;
    let current = region_error(&resp)
        .epoch_not_match
        .clone()
        .unwrap()
        .current_regions;
    assert_eq!(current, vec![merged.clone()]);
    // The data and the lock are served from the merged Region.
    let (store, ctx) = leader_ctx(&cluster, b"h");
    assert_eq!(
        raw_get(&cluster, store, ctx.clone(), b"h").await.value,
        b"middle"
    );
    assert_eq!(raw_get(&cluster, store, ctx, b"p").await.value, b"right");
    let locks = cluster.locks(b"", b"");
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].lock_version, ts);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_merge_needs_peers_on_the_same_stores() {
    let cluster = cluster(4).await;
    let source = cluster.region_for_key(b"h").unwrap();
    let target = cluster.region_for_key(b"p").unwrap();
    // With 4 stores the two Regions sit on different store sets.
    let err = cluster.merge_regions(source.id, target.id).unwrap_err();
    assert!(err.to_string().contains("move peers first"), "{err}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn conf_changes_move_conf_ver_and_a_removed_peer_is_gone_from_its_store() {
    let cluster = cluster(4).await;
    let region = cluster.region_for_key(b"a").unwrap();
    let stores: Vec<u64> = region.peers.iter().map(|p| p.store_id).collect();
    let spare = (1..=4).find(|s| !stores.contains(s)).unwrap();
    let (conf_ver, version) = epoch(&region);
    raw_put(&cluster, b"a", b"1").await;

    // Add a learner: it serves no leader request.
    let learner = cluster
        .add_peer(region.id, spare, PeerRole::Learner)
        .unwrap();
    let now = cluster.region(region.id).unwrap();
    assert_eq!(epoch(&now), (conf_ver + 1, version));
    assert!(now
        .peers
        .iter()
        .any(|p| p.id == learner && p.role == PeerRole::Learner as i32));
    let ctx = cluster.context(region.id, spare).unwrap();
    let resp = raw_get(&cluster, spare, ctx, b"a").await;
    assert!(region_error(&resp).not_leader.is_some());
    assert!(cluster.add_peer(region.id, spare, PeerRole::Voter).is_err());

    // Promote it, then make it lead.
    cluster.promote_learner(region.id, spare).unwrap();
    assert_eq!(
        epoch(&cluster.region(region.id).unwrap()),
        (conf_ver + 2, version)
    );
    cluster.transfer_leader(region.id, spare, true).unwrap();
    let ctx = cluster.context(region.id, spare).unwrap();
    assert_eq!(raw_get(&cluster, spare, ctx, b"a").await.value, b"1");

    // Remove the leader: leadership moves first, PD names the successor,
    // and the old leader's store no longer has the Region.
    let old_ctx = cluster.context(region.id, spare).unwrap();
    cluster.remove_peer(region.id, spare).unwrap();
    let now = cluster.region(region.id).unwrap();
    assert_eq!(epoch(&now), (conf_ver + 3, version));
    assert!(now.peers.iter().all(|p| p.store_id != spare));
    let leader = cluster.leader_of(region.id).unwrap();
    assert_ne!(leader.store_id, spare);
    assert_eq!(cluster.pd_leader_of(region.id), Some(leader));
    let resp = raw_get(&cluster, spare, old_ctx, b"a").await;
    assert_eq!(
        region_error(&resp).region_not_found.unwrap().region_id,
        region.id
    );
    assert_eq!(
        cluster
            .counters(spare)
            .count("raw_get", Outcome::RegionNotFound),
        1
    );
    // Only the version is compared for reads: an old conf_ver still serves.
    let mut ctx = cluster.context(region.id, leader.store_id).unwrap();
    ctx.region_epoch = region.region_epoch;
    assert_eq!(
        raw_get(&cluster, leader.store_id, ctx, b"a").await.value,
        b"1"
    );

    // The last voter stays: no quorum would be left.
    let voters: Vec<u64> = now.peers.iter().map(|p| p.store_id).collect();
    for store in &voters[1..] {
        cluster.remove_peer(region.id, *store).unwrap();
    }
    let err = cluster.remove_peer(region.id, voters[0]).unwrap_err();
    assert!(err.to_string().contains("no quorum"), "{err}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_moved_store_is_found_at_its_new_address_and_its_old_one_answers_store_not_match() {
    let cluster = cluster(3).await;
    raw_put(&cluster, b"a", b"1").await;
    let (store, ctx) = leader_ctx(&cluster, b"a");
    let old_addr = cluster.store_addr(store).unwrap();
    let new_addr = cluster.move_store(store, None).await.unwrap();
    assert_ne!(new_addr, old_addr);
    let mut pd = cluster.pd_client(0).await.unwrap();
    let record = pd
        .get_store(pdpb::GetStoreRequest {
            store_id: store,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .store
        .unwrap();
    assert_eq!(record.address, new_addr);
    assert_eq!(raw_get_at(&new_addr, ctx.clone(), b"a").await.value, b"1");
    // The old address is closed ...
    assert!(TikvClient::connect(format!("http://{old_addr}"))
        .await
        .is_err());
    // ... until another store takes it: a request meant for the moved store
    // gets StoreNotMatch there.
    let other = store % 3 + 1;
    let taken = cluster
        .move_store(other, Some(old_addr.parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(taken, old_addr);
    let resp = raw_get_at(&old_addr, ctx, b"a").await;
    let e = region_error(&resp).store_not_match.unwrap();
    assert_eq!((e.request_store_id, e.actual_store_id), (store, other));
    cluster.shutdown().await;
}

#[tokio::test]
async fn pd_reports_the_peers_of_a_down_store_as_down() {
    let cluster = cluster(3).await;
    let mut pd = cluster.pd_client(0).await.unwrap();
    let ask = |pd: &mut tikv_sim::proto::pdpb::pd_client::PdClient<_>| {
        let mut pd = pd.clone();
        async move {
            pd.get_region(pdpb::GetRegionRequest {
                region_key: b"a".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    assert!(ask(&mut pd).await.down_peers.is_empty());
    cluster.store_down(2).await;
    let resp = ask(&mut pd).await;
    let down: Vec<u64> = resp
        .down_peers
        .iter()
        .map(|p| p.peer.unwrap().store_id)
        .collect();
    assert_eq!(down, vec![2]);
    cluster.store_up(2).await.unwrap();
    assert!(ask(&mut pd).await.down_peers.is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_control_port_drives_shape_changes() {
    let cluster = cluster(4).await;
    let region = cluster.region_for_key(b"a").unwrap();
    let spare = (1..=4)
        .find(|s| region.peers.iter().all(|p| p.store_id != *s))
        .unwrap();
    let run = |line: String| {
        let cluster = &cluster;
        async move { tikv_sim::control::execute(cluster, &line).await }
    };
    let added = run(format!("add-peer {} {spare} learner", region.id)).await;
    assert!(added.starts_with("ok "), "{added}");
    assert_eq!(run(format!("promote {} {spare}", region.id)).await, "ok\n");
    assert_eq!(
        run(format!("remove-peer {} {spare}", region.id)).await,
        "ok\n"
    );
    assert!(run("merge 1 2".to_owned()).await.starts_with("error: "));
    let left = cluster.region_for_key(b"h").unwrap().id;
    let right = cluster.region_for_key(b"p").unwrap().id;
    // With four stores, the two sit on different stores: refused.
    assert!(run(format!("merge {left} {right}"))
        .await
        .contains("move peers first"));
    // On three stores every Region has the same peers: merged.
    let three = self::cluster(3).await;
    let (left, right) = (
        three.region_for_key(b"h").unwrap().id,
        three.region_for_key(b"p").unwrap().id,
    );
    let merged = tikv_sim::control::execute(&three, &format!("merge {left} {right}")).await;
    assert_eq!(merged, "ok\n");
    assert!(three.region(left).is_none());
    three.shutdown().await;
    let moved = run(format!("move-store {spare}")).await;
    assert_eq!(
        moved.trim_end().strip_prefix("ok "),
        cluster.store_addr(spare).as_deref()
    );
    assert!(run("move-store 1 nowhere".to_owned())
        .await
        .contains("is not an address"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn unsafe_shape_changes_are_refused_as_tikv_and_pd_refuse_them() {
    let cluster = cluster(3).await;
    let source = cluster.region_for_key(b"h").unwrap().id;
    let target = cluster.region_for_key(b"p").unwrap().id;
    // A peer down: PD does not merge, TiKV does not remove a voter that
    // would leave no live quorum.
    cluster.store_down(3).await;
    let err = cluster.merge_regions(source, target).unwrap_err();
    assert!(err.to_string().contains("down"), "{err}");
    let err = cluster.remove_peer(source, 2).unwrap_err();
    assert!(err.to_string().contains("no quorum"), "{err}");
    cluster.store_up(3).await.unwrap();
    // A cold Region takes no conf change: there is no leader to propose it.
    tikv_sim::control::execute(&cluster, &format!("cold {source}")).await;
    let err = cluster.remove_peer(source, 2).unwrap_err();
    assert!(err.to_string().contains("no leader"), "{err}");
    assert!(cluster.add_peer(source, 2, PeerRole::Learner).is_err());
    assert!(cluster.merge_regions(source, target).is_err());
    // A store does not move onto its own address.
    let own = cluster.store_addr(1).unwrap().parse().unwrap();
    assert!(cluster.move_store(1, Some(own)).await.is_err());
    assert_eq!(cluster.store_addr(1).unwrap(), own.to_string());
    cluster.shutdown().await;
}
