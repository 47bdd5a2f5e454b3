//! The simulated PD over real gRPC: bootstrap calls, Region lookups with
//! PD's (possibly stale) leader view, stores, TSO, several members.

use futures::StreamExt;
use tikv_sim::proto::{kvrpcpb, pdpb};
use tikv_sim::SimCluster;

fn header(cluster: &SimCluster) -> Option<pdpb::RequestHeader> {
    Some(pdpb::RequestHeader {
        cluster_id: cluster.cluster_id(),
        sender_id: 0,
    })
}

#[tokio::test]
async fn get_members_names_itself_as_leader_with_a_cluster_id() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let resp = pd
        .get_members(pdpb::GetMembersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let cluster_id = resp.header.unwrap().cluster_id;
    assert_ne!(cluster_id, 0);
    assert_eq!(cluster_id, cluster.cluster_id());
    let leader = resp.leader.unwrap();
    assert_eq!(
        leader.client_urls,
        vec![format!("http://{}", cluster.pd_addr())]
    );
    assert_eq!(resp.members.len(), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn regions_stores_and_stale_leader_view() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let regions = cluster.regions();
    assert_eq!(regions.len(), 3);
    // Numbering: one counter from 1000, Region then its peers.
    assert_eq!(regions[0].id, 1000);
    assert_eq!(
        regions[0].peers.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![1001, 1002, 1003]
    );
    assert_eq!(regions[1].id, 1004);
    assert_eq!(regions[1].start_key, b"g".to_vec());
    // Round-robin placement: Region i is led from store i + 1.
    assert_eq!(cluster.leader_of(regions[1].id).unwrap().store_id, 2);

    let mut pd = cluster.pd_client(0).await.unwrap();
    let resp = pd
        .get_region(pdpb::GetRegionRequest {
            header: header(&cluster),
            region_key: b"h".to_vec(),
            need_buckets: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.header.unwrap().cluster_id, cluster.cluster_id());
    assert_eq!(resp.region.unwrap(), regions[1]);
    assert_eq!(resp.leader.unwrap().store_id, 2);

    // A leader transfer that PD does not hear about leaves PD stale.
    cluster.transfer_leader(regions[1].id, 3, false).unwrap();
    let resp = pd
        .get_region_by_id(pdpb::GetRegionByIdRequest {
            header: header(&cluster),
            region_id: regions[1].id,
            need_buckets: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.leader.unwrap().store_id, 2);
    assert_eq!(cluster.leader_of(regions[1].id).unwrap().store_id, 3);
    assert_eq!(cluster.pd_leader_of(regions[1].id).unwrap().store_id, 2);
    cluster.transfer_leader(regions[1].id, 3, true).unwrap();
    assert_eq!(cluster.pd_leader_of(regions[1].id).unwrap().store_id, 3);

    // An unknown Region: an empty answer, as real PD gives.
    let resp = pd
        .get_region_by_id(pdpb::GetRegionByIdRequest {
            header: header(&cluster),
            region_id: 1,
            need_buckets: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region.is_none());

    let store = pd
        .get_store(pdpb::GetStoreRequest {
            header: header(&cluster),
            store_id: 2,
        })
        .await
        .unwrap()
        .into_inner()
        .store
        .unwrap();
    assert_eq!(store.address, cluster.store_addr(2).unwrap());
    let missing = pd
        .get_store(pdpb::GetStoreRequest {
            header: header(&cluster),
            store_id: 9,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(missing.store.is_none());
    assert!(missing.header.unwrap().error.is_some());
    let all = pd
        .get_all_stores(pdpb::GetAllStoresRequest {
            header: header(&cluster),
            exclude_tombstone_stores: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        all.stores.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn tso_stream_is_monotonic() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let requests = futures::stream::iter((0..50).map(|i| pdpb::TsoRequest {
        header: Some(pdpb::RequestHeader {
            cluster_id: 0,
            sender_id: 0,
        }),
        count: 1 + i % 3,
        dc_location: String::new(),
    }));
    let mut responses = pd.tso(requests).await.unwrap().into_inner();
    let mut last = (0i64, 0i64);
    let mut n = 0;
    while let Some(resp) = responses.next().await {
        let resp = resp.unwrap();
        let ts = resp.timestamp.unwrap();
        let now = (ts.physical, ts.logical);
        assert!(now > last, "{now:?} after {last:?}");
        // The first timestamp of the batch is also above the last one.
        assert!((ts.physical, ts.logical - i64::from(resp.count) + 1) > last);
        assert_ne!(resp.header.unwrap().cluster_id, 0);
        last = now;
        n += 1;
    }
    assert_eq!(n, 50);
    cluster.shutdown().await;
}

#[tokio::test]
async fn several_members_one_leader() {
    let cluster = SimCluster::builder()
        .stores(1)
        .pd_members(3)
        .start()
        .await
        .unwrap();
    let endpoints = cluster.pd_endpoints();
    assert_eq!(endpoints.len(), 3);
    assert_eq!(cluster.pd_addr(), endpoints[0]);
    let mut follower = cluster.pd_client(1).await.unwrap();
    let members = follower
        .get_members(pdpb::GetMembersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(members.header.unwrap().cluster_id, cluster.cluster_id());
    assert_eq!(
        members.leader.unwrap().client_urls,
        vec![format!("http://{}", endpoints[0])]
    );
    let err = follower
        .get_region(pdpb::GetRegionRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(err.message(), "not leader");

    cluster.pd_transfer_leader(1).unwrap();
    assert_eq!(cluster.pd_addr(), endpoints[1]);
    assert!(follower
        .get_region(pdpb::GetRegionRequest::default())
        .await
        .is_ok());

    // A downed leader hands over to the next member that is up, and its
    // port refuses connections.
    cluster.pd_member_down(1).await.unwrap();
    assert_eq!(cluster.pd_leader_index(), 2);
    assert!(cluster.pd_client(1).await.is_err());
    let mut first = cluster.pd_client(0).await.unwrap();
    let members = first
        .get_members(pdpb::GetMembersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        members.leader.unwrap().client_urls,
        vec![format!("http://{}", endpoints[2])]
    );
    cluster.pd_member_up(1).await.unwrap();
    assert!(cluster.pd_client(1).await.is_ok());
    cluster.shutdown().await;
}

#[tokio::test]
async fn stores_answer_raw_put_and_get() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    for key in [b"a".to_vec(), b"z".to_vec()] {
        let region = cluster.region_for_key(&key).unwrap();
        let leader = cluster.leader_of(region.id).unwrap();
        let ctx = cluster.context(region.id, leader.store_id);
        let mut store = cluster.tikv_client(leader.store_id).await.unwrap();
        let put = store
            .raw_put(kvrpcpb::RawPutRequest {
                context: ctx.clone(),
                key: key.clone(),
                value: b"v".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(put.region_error.is_none() && put.error.is_empty());
        let get = store
            .raw_get(kvrpcpb::RawGetRequest {
                context: ctx,
                key: key.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(get.region_error.is_none());
        assert!(!get.not_found);
        assert_eq!(get.value, b"v".to_vec());
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_request_for_another_cluster_is_refused() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let err = pd
        .get_all_stores(pdpb::GetAllStoresRequest {
            header: Some(pdpb::RequestHeader {
                cluster_id: cluster.cluster_id() + 1,
                sender_id: 0,
            }),
            exclude_tombstone_stores: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    cluster.shutdown().await;
}

#[tokio::test]
async fn tso_refuses_a_count_pd_refuses() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let first_answer = |count: u32| {
        let cluster = &cluster;
        async move {
            let mut pd = cluster.pd_client(0).await.unwrap();
            let request = pdpb::TsoRequest {
                header: header(cluster),
                count,
                dc_location: String::new(),
            };
            let mut responses = pd
                .tso(futures::stream::iter([request]))
                .await
                .unwrap()
                .into_inner();
            responses.next().await.unwrap()
        }
    };
    for count in [0, 1 << 18, u32::MAX] {
        let status = first_answer(count).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{count}");
    }
    let most = (1 << 18) - 1;
    let resp = first_answer(most).await.unwrap();
    assert_eq!(resp.count, most);
    assert!(resp.timestamp.unwrap().logical >= i64::from(most));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_hung_pd_member_receives_requests_and_answers_them_once_unhung() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    cluster.pd_member_hang(0).unwrap();
    assert_eq!(cluster.pd_leader_index(), 0, "a hung leader stays leader");
    let request = pdpb::GetRegionRequest {
        header: header(&cluster),
        region_key: b"k".to_vec(),
        ..Default::default()
    };
    let mut lookup = Box::pin(pd.get_region(request));
    // Held, not refused: no answer comes while the member hangs (the wait
    // only ever ends by its own timer).
    let waited = tokio::time::timeout(std::time::Duration::from_millis(200), &mut lookup).await;
    assert!(waited.is_err(), "a hung PD answered: {waited:?}");
    let mut tso = cluster.pd_client(0).await.unwrap();
    let mut stamps = tso
        .tso(futures::stream::iter([pdpb::TsoRequest {
            header: header(&cluster),
            count: 1,
            dc_location: String::new(),
        }]))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(std::time::Duration::from_millis(200), stamps.next()).await;
    assert!(first.is_err(), "a hung PD handed out a timestamp");

    cluster.pd_member_unhang(0).unwrap();
    let region = lookup.await.unwrap().into_inner();
    assert!(region.region.is_some(), "the held lookup is answered");
    let stamp = stamps.next().await.unwrap().unwrap();
    assert!(
        stamp.timestamp.is_some(),
        "the held TSO request is answered"
    );
    assert!(cluster.pd_member_hang(7).is_err(), "no member 7");
    cluster.shutdown().await;
}

/// PD counts every call it receives by gRPC method, on any member (a
/// follower's refusal is load too), each request on a `Tso` stream once;
/// a reset starts again from zero. Also through the control port.
#[tokio::test]
async fn pd_counts_the_calls_it_receives_by_method() {
    let cluster = SimCluster::builder()
        .stores(2)
        .pd_members(2)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    assert!(cluster.pd_calls().is_empty(), "{:?}", cluster.pd_calls());
    let leader = cluster.pd_leader_index();
    let mut pd = cluster.pd_client(leader).await.unwrap();
    for key in [b"a", b"z", b"q"] {
        let request = pdpb::GetRegionRequest {
            header: header(&cluster),
            region_key: key.to_vec(),
            ..Default::default()
        };
        pd.get_region(request).await.unwrap();
    }
    let store = pdpb::GetStoreRequest {
        header: header(&cluster),
        store_id: 1,
    };
    pd.get_store(store).await.unwrap();
    let tso = |count| pdpb::TsoRequest {
        header: header(&cluster),
        count,
        ..Default::default()
    };
    let requests = futures::stream::iter(vec![tso(1), tso(5), tso(2)]);
    let mut answers = pd.tso(requests).await.unwrap().into_inner();
    for _ in 0..3 {
        answers.next().await.unwrap().unwrap();
    }
    let mut follower = cluster.pd_client(1 - leader).await.unwrap();
    let refused = follower
        .get_region(pdpb::GetRegionRequest {
            header: header(&cluster),
            region_key: b"a".to_vec(),
            ..Default::default()
        })
        .await;
    assert!(refused.is_err(), "a follower answers no data");
    let calls = cluster.pd_calls();
    assert_eq!(calls.get("GetRegion"), Some(&4), "{calls:?}");
    assert_eq!(calls.get("GetStore"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("Tso"), Some(&3), "{calls:?}");
    assert_eq!(calls.len(), 3, "{calls:?}");
    let answer = tikv_sim::control::execute(&cluster, "pd-calls").await;
    assert!(answer.contains("GetRegion 4\n"), "{answer}");
    cluster.reset_counters();
    assert!(cluster.pd_calls().is_empty());
    cluster.shutdown().await;
}
