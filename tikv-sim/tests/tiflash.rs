//! TiFlash stores beside the TiKV ones: PD lists them with the label
//! `engine=tiflash`, every Region carries a learner on each, those
//! learners never vote, lead or get promoted, and a TiFlash store answers
//! every TiKV request with gRPC `Unimplemented`, as TiFlash's own server
//! does. Over real gRPC on loopback.

use std::time::Duration;

use tikv_sim::proto::metapb::{self, PeerRole};
use tikv_sim::proto::tikvpb::{batch_commands_request, BatchCommandsRequest};
use tikv_sim::proto::{kvrpcpb, pdpb};
use tikv_sim::{Outcome, RegionLayout, SimCluster, SimPeer, StoreEngine, FORWARDED_HOST};

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(10);

/// Three TiKV stores, one TiFlash store (4), three Regions.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .tiflash_stores(1)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

fn label(store: &metapb::Store, key: &str) -> Option<String> {
    store
        .labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.clone())
}

#[tokio::test]
async fn pd_lists_tiflash_stores_by_their_engine_label_and_regions_carry_their_learners() {
    let cluster = cluster().await;
    assert_eq!(cluster.store_ids(), vec![1, 2, 3, 4]);
    assert_eq!(cluster.tikv_store_ids(), vec![1, 2, 3]);
    assert_eq!(cluster.tiflash_store_ids(), vec![4]);
    assert_eq!(cluster.store_engine(4), Some(StoreEngine::TiFlash));
    assert_eq!(cluster.store_engine(1), Some(StoreEngine::TiKv));

    let mut pd = cluster.pd_client(0).await.unwrap();
    let header = Some(pdpb::RequestHeader {
        cluster_id: cluster.cluster_id(),
        ..Default::default()
    });
    let stores = pd
        .get_all_stores(pdpb::GetAllStoresRequest {
            header,
            exclude_tombstone_stores: true,
        })
        .await
        .unwrap()
        .into_inner()
        .stores;
    assert_eq!(stores.len(), 4, "PD lists TiFlash stores with TiKV's");
    for store in &stores {
        let engine = label(store, "engine");
        if store.id == 4 {
            assert_eq!(engine.as_deref(), Some("tiflash"));
            assert_eq!(store.version, tikv_sim::SIM_TIFLASH_VERSION);
            assert_eq!(store.address, cluster.store_addr(4).unwrap());
            assert!(!store.peer_address.is_empty());
        } else {
            assert_eq!(engine, None, "TiKV sets no engine label");
        }
    }
    let by_id = pd
        .get_store(pdpb::GetStoreRequest {
            header,
            store_id: 4,
        })
        .await
        .unwrap()
        .into_inner()
        .store
        .unwrap();
    assert_eq!(label(&by_id, "engine").as_deref(), Some("tiflash"));

    for region in cluster.regions() {
        let on_tiflash: Vec<&metapb::Peer> =
            region.peers.iter().filter(|p| p.store_id == 4).collect();
        assert_eq!(on_tiflash.len(), 1, "{region:?}");
        assert_eq!(on_tiflash[0].role, PeerRole::Learner as i32);
        assert_eq!(region.peers.len(), 4, "three voters and the learner");
        assert_ne!(cluster.leader_of(region.id).unwrap().store_id, 4);
    }
}

#[tokio::test]
async fn a_tikv_request_sent_straight_to_a_tiflash_store_is_unimplemented() {
    let cluster = cluster().await;
    let region = cluster.region_for_key(b"a").unwrap().id;
    // A correct context for the TiFlash learner: TiFlash does not look.
    let ctx = cluster.context(region, 4).unwrap();
    let mut client = cluster.tikv_client(4).await.unwrap();

    let status = client
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx.clone()),
            key: b"a".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    assert_eq!(status.message(), "");

    let replica_read = kvrpcpb::Context {
        replica_read: true,
        ..ctx.clone()
    };
    let status = client
        .kv_get(kvrpcpb::GetRequest {
            context: Some(replica_read),
            key: b"a".to_vec(),
            version: cluster.current_ts(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        tonic::Code::Unimplemented,
        "not even a learner read"
    );

    let status = client
        .unsafe_destroy_range(kvrpcpb::UnsafeDestroyRangeRequest {
            context: Some(kvrpcpb::Context::default()),
            start_key: b"a".to_vec(),
            end_key: b"z".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);

    // TiFlash does not proxy: a call naming a TiKV store is its own.
    let mut forwarded = tonic::Request::new(kvrpcpb::RawGetRequest {
        context: Some(cluster.context(region, 1).unwrap()),
        key: b"a".to_vec(),
        ..Default::default()
    });
    forwarded.metadata_mut().insert(
        FORWARDED_HOST,
        cluster.store_addr(1).unwrap().parse().unwrap(),
    );
    let status = client.raw_get(forwarded).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);

    // The BatchCommands stream is refused as it opens.
    let request = BatchCommandsRequest {
        requests: vec![batch_commands_request::Request {
            cmd: Some(batch_commands_request::request::Cmd::RawGet(
                kvrpcpb::RawGetRequest {
                    context: Some(ctx),
                    key: b"a".to_vec(),
                    ..Default::default()
                },
            )),
        }],
        request_ids: vec![1],
        ..Default::default()
    };
    let opened = tokio::time::timeout(
        PATIENCE,
        client.batch_commands(tokio_stream::iter(vec![request])),
    )
    .await
    .expect("TiFlash answers at once");
    match opened {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unimplemented),
        Ok(response) => {
            let mut stream = response.into_inner();
            let status = stream.message().await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unimplemented);
        }
    }

    let counters = cluster.counters(4);
    assert_eq!(counters.count("raw_get", Outcome::Unimplemented), 2);
    assert_eq!(counters.count("kv_get", Outcome::Unimplemented), 1);
    assert_eq!(
        counters.count("unsafe_destroy_range", Outcome::Unimplemented),
        1
    );
    assert_eq!(counters.count("batch_commands", Outcome::Unimplemented), 1);
    assert_eq!(counters.total_requests(), 5);
    assert_eq!(counters.forwarded(), (0, 0));
    // The data is untouched, and no TiKV store heard of any of it.
    for store in cluster.tikv_store_ids() {
        assert_eq!(cluster.counters(store).total_requests(), 0, "store {store}");
    }
}

#[tokio::test]
async fn a_hung_tiflash_store_holds_calls_until_unhung() {
    let cluster = cluster().await;
    cluster.store_hang(4, tikv_sim::HangMode::Respond);
    let mut client = cluster.tikv_client(4).await.unwrap();
    let call = tokio::spawn(async move {
        client
            .raw_get(kvrpcpb::RawGetRequest {
                key: b"a".to_vec(),
                ..Default::default()
            })
            .await
    });
    // Wait until the store holds the call, then lift the hang.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while cluster.counters(4).count("raw_get", Outcome::Hung) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never arrived"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!call.is_finished());
    cluster.store_unhang(4);
    let status = tokio::time::timeout(PATIENCE, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
}

#[tokio::test]
async fn tiflash_learners_never_vote_lead_or_become_voters() {
    let cluster = cluster().await;
    let region = cluster.region_for_key(b"a").unwrap().id;
    assert!(cluster.transfer_leader(region, 4, true).is_err());
    assert!(cluster.promote_learner(region, 4).is_err());
    cluster.remove_peer(region, 4).unwrap();
    assert!(
        cluster.add_peer(region, 4, PeerRole::Voter).is_err(),
        "only learners live on a TiFlash store"
    );
    cluster.add_peer(region, 4, PeerRole::Learner).unwrap();
    // A split gives the new Region a learner there too; a merge joins two
    // Regions that both have one.
    let new = cluster.split_region(b"c").unwrap();
    let learner = cluster
        .region(new)
        .unwrap()
        .peers
        .into_iter()
        .find(|p| p.store_id == 4)
        .unwrap();
    assert_eq!(learner.role, PeerRole::Learner as i32);
    cluster.merge_regions(new, region).unwrap();
    // The engine label is the store's: PD refuses to set it by hand.
    assert!(cluster.set_store_labels(4, &[("engine", "tikv")]).is_err());
    assert!(cluster
        .set_store_labels(1, &[("engine", "tiflash")])
        .is_err());
    cluster.set_store_labels(4, &[("zone", "z1")]).unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let store = pd
        .get_store(pdpb::GetStoreRequest {
            header: Some(pdpb::RequestHeader {
                cluster_id: cluster.cluster_id(),
                ..Default::default()
            }),
            store_id: 4,
        })
        .await
        .unwrap()
        .into_inner()
        .store
        .unwrap();
    assert_eq!(label(&store, "engine").as_deref(), Some("tiflash"));
    assert_eq!(label(&store, "zone").as_deref(), Some("z1"));
}

#[tokio::test]
async fn a_layout_places_only_learners_on_tiflash_stores() {
    let voter_there = SimCluster::builder()
        .stores(3)
        .tiflash_stores(1)
        .region_layout(
            0,
            RegionLayout::new(vec![SimPeer::voter(1), SimPeer::voter(4)]),
        )
        .build_hosted(|m| format!("pd-{m}"), |s| format!("store-{s}"));
    assert!(voter_there.is_err());
    let (cluster, servers) = SimCluster::builder()
        .stores(3)
        .tiflash_stores(2)
        .region_layout(
            0,
            RegionLayout::new(vec![
                SimPeer::voter(1),
                SimPeer::voter(2),
                SimPeer::learner(5),
            ]),
        )
        .build_hosted(|m| format!("pd-{m}"), |s| format!("store-{s}"))
        .unwrap();
    assert_eq!(servers.stores.len(), 5, "TiFlash stores are served too");
    let region = &cluster.regions()[0];
    let stores: Vec<u64> = region.peers.iter().map(|p| p.store_id).collect();
    assert_eq!(stores, vec![1, 2, 5], "a layout names its own peers");
    assert_eq!(cluster.tiflash_store_ids(), vec![4, 5]);
}
