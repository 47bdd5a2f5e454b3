//! Request tags on the wire: the resource group, request source,
//! transaction source and resource group tag every raw call and every
//! transactional step carries, unary and batched, as the simulator counts
//! them (`SimCluster::request_tags`) over loopback gRPC.

use std::collections::BTreeMap;
use std::time::Duration;

use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::{self, Mutation, Op};
use tikv_plan::{Config, RawClient, RequestSource, RequestTags, RpcMode};
use tikv_sim::{RequestTag, SimCluster};

use super::support::{client_with, cluster, optimistic, pessimistic};

const MODES: [RpcMode; 2] = [RpcMode::Unary, RpcMode::Batched];

/// The tags requests of `method` arrived with, by count.
fn tags_of(cluster: &SimCluster, method: &str) -> BTreeMap<RequestTag, u64> {
    cluster
        .request_tags()
        .into_iter()
        .filter(|(t, _)| t.method == method)
        .collect()
}

/// Every `method` request carried exactly `group`, `source`, `txn_source`
/// and `tag` (and there was at least one).
fn all_carry(
    cluster: &SimCluster,
    method: &str,
    group: &str,
    source: &str,
    txn_source: u64,
    tag: &[u8],
) {
    let seen = tags_of(cluster, method);
    assert!(!seen.is_empty(), "no {method} request arrived");
    for tags in seen.keys() {
        assert_eq!(
            (
                tags.resource_group.as_str(),
                tags.request_source.as_str(),
                tags.txn_source,
                tags.resource_group_tag.as_slice()
            ),
            (group, source, txn_source, tag),
            "{method}: {seen:?}"
        );
    }
}

fn batched_requests(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).batch_requests())
        .sum()
}

/// The transport asked for is the one used: batched mode sends over
/// BatchCommands streams, unary mode never does.
fn check_transport(cluster: &SimCluster, mode: RpcMode) {
    let batched = batched_requests(cluster);
    match mode {
        RpcMode::Batched => assert!(batched > 0, "batched mode sent no BatchCommands"),
        _ => assert_eq!(batched, 0, "unary mode sent over BatchCommands"),
    }
}

#[tokio::test]
async fn a_default_client_tags_nothing_as_client_rust() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        let config = Config::default().with_rpc_mode(mode);
        let raw = RawClient::new_with_config(cluster.pd_endpoints(), config.clone())
            .await
            .unwrap();
        raw.put("a".to_owned(), "1".to_owned()).await.unwrap();
        assert_eq!(raw.get("a".to_owned()).await.unwrap(), Some(b"1".to_vec()));
        let client = client_with(&cluster, config).await;
        let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
        txn.get_for_update("b".to_owned()).await.unwrap();
        txn.put("b".to_owned(), "2".to_owned()).await.unwrap();
        txn.commit().await.unwrap();
        let tags = cluster.request_tags();
        assert!(tags.len() >= 5, "{tags:?}");
        for tag in tags.keys() {
            assert_eq!(
                *tag,
                RequestTag {
                    method: tag.method.clone(),
                    ..Default::default()
                },
                "{mode:?}"
            );
        }
        check_transport(&cluster, mode);
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn raw_calls_carry_the_clients_tags_on_both_transports() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        let config = Config::default()
            .with_rpc_mode(mode)
            .with_resource_group("rg_raw")
            .with_request_source(RequestSource::external("Raw"));
        let raw = RawClient::new_with_config(cluster.pd_endpoints(), config)
            .await
            .unwrap();
        raw.put("a".to_owned(), "1".to_owned()).await.unwrap();
        raw.batch_put(vec![
            ("b".to_owned(), "2".to_owned()),
            ("y".to_owned(), "3".to_owned()),
        ])
        .await
        .unwrap();
        raw.get("a".to_owned()).await.unwrap();
        raw.batch_get(vec!["a".to_owned(), "y".to_owned()])
            .await
            .unwrap();
        raw.scan("a".to_owned().., 10).await.unwrap();
        raw.delete("a".to_owned()).await.unwrap();
        for method in [
            "raw_put",
            "raw_batch_put",
            "raw_get",
            "raw_batch_get",
            "raw_scan",
            "raw_delete",
        ] {
            all_carry(&cluster, method, "rg_raw", "external_Raw", 0, b"");
        }
        // A clone with tags of its own: every field on the wire.
        let tagged = raw.with_request_tags(
            RequestTags::new()
                .with_resource_group("rg_other")
                .with_request_source(RequestSource::internal("stats").with_explicit_type("br"))
                .with_txn_source(5)
                .with_resource_group_tag(b"tag".to_vec()),
        );
        cluster.reset_counters();
        tagged.put("c".to_owned(), "4".to_owned()).await.unwrap();
        tagged.get("c".to_owned()).await.unwrap();
        for method in ["raw_put", "raw_get"] {
            all_carry(&cluster, method, "rg_other", "internal_stats_br", 5, b"tag");
        }
        assert_eq!(
            cluster.count_tagged("raw_get", "rg_other", "internal_stats_br"),
            1
        );
        check_transport(&cluster, mode);
        cluster.shutdown().await;
    }
}

fn txn_tags() -> RequestTags {
    RequestTags::new()
        .with_resource_group("rg_txn")
        .with_request_source(RequestSource::external("Txn"))
        .with_txn_source(9)
        .with_resource_group_tag(b"topsql".to_vec())
}

#[tokio::test]
async fn every_transactional_step_carries_the_transactions_tags() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        // The client's tags are overridden field by field.
        let config = Config::default()
            .with_rpc_mode(mode)
            .with_resource_group("rg_client")
            .with_request_source(RequestSource::external("Client"));
        let client = client_with(&cluster, config).await;

        // Pessimistic lock, read, prewrite, commit, heart beat.
        let mut txn = client
            .begin_with_options(pessimistic().request_tags_from(txn_tags()))
            .await
            .unwrap();
        txn.get_for_update("a".to_owned()).await.unwrap();
        txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
        txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
        txn.get("q".to_owned()).await.unwrap();
        txn.send_heart_beat().await.unwrap();
        txn.commit().await.unwrap();
        // A pessimistic rollback.
        let mut txn = client
            .begin_with_options(pessimistic().request_tags_from(txn_tags()))
            .await
            .unwrap();
        txn.get_for_update("b".to_owned()).await.unwrap();
        txn.rollback().await.unwrap();
        for method in [
            "kv_pessimistic_lock",
            "kv_get",
            "kv_prewrite",
            "kv_commit",
            "kv_txn_heart_beat",
            "kv_pessimistic_rollback",
        ] {
            all_carry(&cluster, method, "rg_txn", "external_Txn", 9, b"topsql");
        }

        // Only the group set on the transaction: the source is the client's.
        cluster.reset_counters();
        let mut txn = client
            .begin_with_options(optimistic().resource_group("rg_only"))
            .await
            .unwrap();
        txn.put("c".to_owned(), "3".to_owned()).await.unwrap();
        txn.commit().await.unwrap();
        all_carry(
            &cluster,
            "kv_prewrite",
            "rg_only",
            "external_Client",
            0,
            b"",
        );
        check_transport(&cluster, mode);
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn a_failed_prewrite_rolls_back_with_the_transactions_tags() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        let client = client_with(&cluster, Config::default().with_rpc_mode(mode)).await;
        let mut loser = client
            .begin_with_options(optimistic().request_tags_from(txn_tags()))
            .await
            .unwrap();
        // A later transaction commits "z" first: the loser's prewrite of
        // "z" meets a write conflict, and its prewritten "a" is rolled back.
        let mut winner = client.begin_with_options(optimistic()).await.unwrap();
        winner.put("z".to_owned(), "w".to_owned()).await.unwrap();
        winner.commit().await.unwrap();
        loser.put("a".to_owned(), "l".to_owned()).await.unwrap();
        loser.put("z".to_owned(), "l".to_owned()).await.unwrap();
        assert!(loser.commit().await.is_err());
        all_carry(
            &cluster,
            "kv_batch_rollback",
            "rg_txn",
            "external_Txn",
            9,
            b"topsql",
        );
        check_transport(&cluster, mode);
        cluster.shutdown().await;
    }
}

/// A writer that crashed after prewriting `key`, sent by hand.
async fn crashed_prewrite(cluster: &SimCluster, key: &str) -> u64 {
    let start = cluster.current_ts();
    let region = cluster
        .region_for_key(&encode_bytes(key.as_bytes()))
        .unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    let mut tikv = cluster.tikv_client(store).await.unwrap();
    let request = kvrpcpb::PrewriteRequest {
        context: cluster.context(region.id, store),
        mutations: vec![Mutation {
            op: Op::Put as i32,
            key: key.as_bytes().to_vec(),
            value: b"crashed".to_vec(),
            ..Default::default()
        }],
        primary_lock: key.as_bytes().to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        ..Default::default()
    };
    let response = tikv.kv_prewrite(request).await.unwrap().into_inner();
    assert!(response.errors.is_empty(), "{response:?}");
    start
}

#[tokio::test]
async fn lock_resolution_carries_the_clients_group_and_source() {
    for mode in MODES {
        let cluster = cluster(&["m"]).await;
        let config = Config::default()
            .with_rpc_mode(mode)
            .with_resource_group("rg_client")
            .with_request_source(RequestSource::internal("gc"));
        let client = client_with(&cluster, config).await;
        crashed_prewrite(&cluster, "k").await;
        cluster.advance_tso_clock(Duration::from_secs(4));
        cluster.reset_counters();
        // The reader's own tags are the transaction's; the resolution it
        // triggers is shared by the client's readers, so it carries the
        // client's group and source (and no transaction source or tag).
        let mut reader = client
            .begin_with_options(optimistic().request_tags_from(txn_tags()))
            .await
            .unwrap();
        assert_eq!(reader.get("k".to_owned()).await.unwrap(), None);
        all_carry(&cluster, "kv_get", "rg_txn", "external_Txn", 9, b"topsql");
        all_carry(
            &cluster,
            "kv_check_txn_status",
            "rg_client",
            "internal_gc",
            0,
            b"",
        );
        all_carry(
            &cluster,
            "kv_resolve_lock",
            "rg_client",
            "internal_gc",
            0,
            b"",
        );
        check_transport(&cluster, mode);
        cluster.shutdown().await;
    }
}

/// The control interface prints the same counts.
#[tokio::test]
async fn the_control_command_lists_requests_by_tags() {
    let cluster = cluster(&["m"]).await;
    let config = Config::default()
        .with_rpc_mode(RpcMode::Unary)
        .with_resource_group("rg1")
        .with_request_source(RequestSource::external("Get"));
    let raw = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    raw.get("a".to_owned()).await.unwrap();
    raw.get("b".to_owned()).await.unwrap();
    let answer = tikv_sim::control::execute(&cluster, "request-tags").await;
    assert!(
        answer.contains("raw_get group=rg1 source=external_Get txn_source=0 tag=- 2\n"),
        "{answer}"
    );
    assert!(answer.contains("deadline_drops 0\n"), "{answer}");
    assert!(answer.ends_with("ok\n"), "{answer}");
    cluster.shutdown().await;
}

/// A plan built by hand is tagged with `PlanBuilder::request_tags`.
#[tokio::test]
async fn a_hand_built_plan_carries_its_own_tags() {
    use std::sync::Arc;
    use tikv_plan::pd::PdRpcClient;
    use tikv_plan::request::{CollectSingle, Keyspace, Plan, PlanBuilder};
    use tikv_plan::transaction_lowering::new_get_request;
    use tikv_plan::{Timestamp, TimestampExt};

    let cluster = cluster(&["m"]).await;
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let ts = Timestamp::from_version(cluster.current_ts());
    let tags = RequestTags::new()
        .with_resource_group("rg_plan")
        .with_request_source(RequestSource::external("Plan"))
        .with_resource_group_tag(b"p".to_vec());
    let value = PlanBuilder::new(pd, Keyspace::Disable, new_get_request("k".into(), ts))
        .request_tags(&tags)
        .retry_multi_region(tikv_plan::Backoff::no_jitter_backoff(2, 500, 10))
        .merge(CollectSingle)
        .post_process_default()
        .plan()
        .execute()
        .await
        .unwrap();
    assert_eq!(value, None);
    all_carry(&cluster, "kv_get", "rg_plan", "external_Plan", 0, b"p");
    cluster.shutdown().await;
}
