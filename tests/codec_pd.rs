//! The transactional client's PD view (`CodecPdClient`) takes the inner
//! client's fast paths: a cached Region comes back without waiting, with its
//! boundaries decoded; a cached store's client too; and a prefetch of a key
//! range loads the Regions of that range's encoding.

use std::sync::Arc;

use tikv_plan::codec::encode_bytes;
use tikv_plan::pd::{PdClient, PdRpcClient};
use tikv_plan::transaction::CodecPdClient;
use tikv_plan::Config;
use tikv_sim::SimCluster;

async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![encode_bytes(b"b"), encode_bytes(b"m")])
        .start()
        .await
        .unwrap()
}

async fn codec(cluster: &SimCluster) -> Arc<CodecPdClient<PdRpcClient>> {
    let pd = PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
        .await
        .unwrap();
    Arc::new(CodecPdClient::new(Arc::new(pd)))
}

#[tokio::test]
async fn cached_regions_and_stores_come_back_decoded_without_waiting() {
    let cluster = cluster().await;
    let pd = codec(&cluster).await;
    let loaded = pd.region_for_key(b"c").await.unwrap();
    assert_eq!(
        (loaded.start_key(), loaded.end_key()),
        (&b"b"[..], &b"m"[..])
    );
    let cached = pd
        .cached_region_for_key(b"c")
        .expect("a loaded Region is a cache hit");
    assert_eq!(cached.id(), loaded.id());
    assert_eq!(
        (cached.start_key(), cached.end_key()),
        (&b"b"[..], &b"m"[..])
    );
    // A key of another Region is not that hit.
    assert!(pd
        .cached_region_for_key(b"n")
        .is_none_or(|other| other.id() != loaded.id()));

    let store_id = loaded.leader_store_id().unwrap();
    let leader = loaded.leader.unwrap();
    Arc::clone(&pd)
        .map_peer_to_store(loaded, leader)
        .await
        .unwrap();
    assert!(pd.cached_store_client(store_id).is_some());
}

#[tokio::test]
async fn a_prefetch_loads_the_encoded_range() {
    let cluster = cluster().await;
    let pd = codec(&cluster).await;
    pd.prefetch_regions(b"a", b"z", 10).await;
    for (key, start, end) in [
        (&b"a"[..], &b""[..], &b"b"[..]),
        (b"c", b"b", b"m"),
        (b"x", b"m", b""),
    ] {
        let cached = pd
            .cached_region_for_key(key)
            .unwrap_or_else(|| panic!("{key:?} was prefetched"));
        assert_eq!(
            (cached.start_key(), cached.end_key()),
            (start, end),
            "{key:?}"
        );
    }
}
