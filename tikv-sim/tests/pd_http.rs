//! PD's HTTP API on the PD port, over real loopback HTTP/1.1 (what
//! client-rust's test suite reads with reqwest), beside gRPC on the same
//! port: the JSON PD writes, its errors, and a member that does not lead.

use std::time::Duration;

use serde_json::{json, Value};
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::proto::{kvrpcpb, pdpb};
use tikv_sim::SimCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Channel;

/// One HTTP answer as a client reads it.
#[derive(Debug)]
struct HttpAnswer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl HttpAnswer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// A bare HTTP/1.1 client: one request on a fresh connection, which the
/// server closes after answering.
async fn request(addr: &str, method: &str, path: &str, extra: &[(&str, &str)]) -> HttpAnswer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header section");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status = status_line[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (name, value) = l.split_once(':').unwrap();
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        unchunk(rest)
    } else {
        rest.to_vec()
    };
    if let Some((_, length)) = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        assert_eq!(body.len(), length.parse::<usize>().unwrap());
    }
    HttpAnswer {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

/// The body of a chunked transfer.
fn unchunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = std::str::from_utf8(&rest[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

async fn get(addr: &str, path: &str) -> HttpAnswer {
    request(addr, "GET", path, &[]).await
}

/// Three stores, Regions `["", g)`, `[g, n)`, `[n, "")`, three replicas.
async fn three_regions(pd_members: usize) -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .pd_members(pd_members)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn regions_are_listed_as_pd_lists_them() {
    let cluster = three_regions(1).await;
    let pd = cluster.pd_addr();
    let answer = get(&pd, "/pd/api/v1/regions").await;
    assert_eq!(answer.status, 200);
    // PD writes the Region endpoints with render.Data: easyjson's compact
    // bytes as octet-stream.
    assert_eq!(
        answer.header("content-type"),
        Some("application/octet-stream")
    );
    // Go's field order, compact.
    assert!(
        answer.body.starts_with(
            r#"{"count":3,"regions":[{"id":1000,"start_key":"","end_key":"67","epoch":{"conf_ver":1,"version":1},"peers":[{"role_name":"Voter","id":1001,"store_id":1},"#
        ),
        "{}",
        answer.body
    );
    let value = answer.json();
    assert_eq!(value["count"], 3);
    let regions = value["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 3);
    let middle = &regions[1];
    assert_eq!(middle["id"], 1004);
    // Upper-case hex of the keys: "g" and "n".
    assert_eq!(middle["start_key"], "67");
    assert_eq!(middle["end_key"], "6E");
    assert_eq!(middle["epoch"], json!({"conf_ver": 1, "version": 1}));
    assert_eq!(
        middle["peers"],
        json!([
            {"role_name": "Voter", "id": 1005, "store_id": 2},
            {"role_name": "Voter", "id": 1006, "store_id": 3},
            {"role_name": "Voter", "id": 1007, "store_id": 1},
        ])
    );
    assert_eq!(
        middle["leader"],
        json!({"role_name": "Voter", "id": 1005, "store_id": 2})
    );
    for field in [
        "cpu_usage",
        "written_bytes",
        "read_bytes",
        "written_keys",
        "read_keys",
        "approximate_size",
        "approximate_keys",
        "approximate_kv_size",
        "approximate_columnar_kv_size",
    ] {
        assert_eq!(middle[field], 0, "{field}");
    }
    // omitempty: no down or pending peers while every store is up.
    assert!(middle.get("down_peers").is_none());
    assert!(middle.get("pending_peers").is_none());

    // PD's view: a store down is a down peer of each of its Regions; a
    // leader PD has not heard of stays the one it names.
    cluster.store_down(3).await;
    let region = cluster.regions()[1].id;
    cluster.transfer_leader(region, 1, false).unwrap();
    let value = get(&pd, "/pd/api/v1/regions").await.json();
    let middle = &value["regions"][1];
    assert_eq!(
        middle["down_peers"],
        json!([{"peer": {"role_name": "Voter", "id": 1006, "store_id": 3}, "down_seconds": 1}])
    );
    assert_eq!(middle["leader"]["store_id"], 2);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_region_by_id_and_the_errors_pd_gives_for_a_bad_one() {
    let cluster = three_regions(1).await;
    let pd = cluster.pd_addr();
    let answer = get(&pd, "/pd/api/v1/region/id/1008").await;
    assert_eq!(answer.status, 200);
    let value = answer.json();
    assert_eq!(value["id"], 1008);
    assert_eq!(value["start_key"], "6E");
    assert_eq!(value["end_key"], "");
    assert_eq!(value["leader"]["store_id"], 3);

    let missing = get(&pd, "/pd/api/v1/region/id/99").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    assert_eq!(
        missing.body,
        "\"[PD:region:ErrRegionNotFound]region 99 not found\"\n"
    );
    let bad = get(&pd, "/pd/api/v1/region/id/abc").await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json(),
        json!("strconv.ParseUint: parsing \"abc\": invalid syntax")
    );
    let zero = get(&pd, "/pd/api/v1/region/id/0").await;
    assert_eq!(zero.status, 400);
    assert_eq!(zero.json()["rfccode"], "PD:region:ErrRegionInvalidID");
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_region_count_is_indented_json_with_null_regions() {
    let cluster = three_regions(1).await;
    let answer = get(&cluster.pd_addr(), "/pd/api/v1/regions/count").await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    assert_eq!(answer.body, "{\n  \"count\": 3,\n  \"regions\": null\n}\n");
    cluster.split_region(b"x").unwrap();
    let value = get(&cluster.pd_addr(), "/pd/api/v1/regions/count")
        .await
        .json();
    assert_eq!(value["count"], 4);
    cluster.shutdown().await;
}

#[tokio::test]
async fn stores_carry_their_meta_state_name_and_counts() {
    let cluster = three_regions(1).await;
    cluster.set_store_labels(1, &[("zone", "z1")]).unwrap();
    cluster.store_busy(2, Some(10));
    let value = get(&cluster.pd_addr(), "/pd/api/v1/stores").await.json();
    assert_eq!(value["count"], 3);
    let stores = value["stores"].as_array().unwrap();
    let first = &stores[0];
    let address = cluster.store_addr(1).unwrap();
    assert_eq!(
        first["store"],
        json!({
            "id": 1,
            "address": address,
            "labels": [{"key": "zone", "value": "z1"}],
            "version": tikv_sim::SIM_TIKV_VERSION,
            "peer_address": address,
            "state_name": "Up",
        })
    );
    let status = &first["status"];
    assert_eq!(status["region_count"], 3);
    assert_eq!(status["leader_count"], 1);
    assert_eq!(status["leader_score"], 1);
    assert_eq!(status["leader_weight"], 1);
    assert_eq!(status["capacity"], "0B");
    assert!(status.get("is_busy").is_none());
    assert_eq!(stores[1]["status"]["is_busy"], true);

    cluster.store_down(3).await;
    let value = get(&cluster.pd_addr(), "/pd/api/v1/stores").await.json();
    assert_eq!(value["stores"][2]["store"]["state_name"], "Disconnected");
    // The metadata keeps metapb's state, Up (0), which omitempty leaves out.
    assert!(value["stores"][2]["store"].get("state").is_none());
    cluster.shutdown().await;
}

#[tokio::test]
async fn members_and_health_name_every_member() {
    let cluster = three_regions(2).await;
    let endpoints = cluster.pd_endpoints();
    let members = get(&endpoints[0], "/pd/api/v1/members").await.json();
    assert_eq!(
        members["header"]["cluster_id"].as_u64(),
        Some(cluster.cluster_id())
    );
    assert_eq!(members["members"].as_array().unwrap().len(), 2);
    let leader_url = format!("http://{}", endpoints[0]);
    assert_eq!(
        members["leader"],
        json!({
            "name": "pd-0",
            "member_id": 9001,
            "peer_urls": [leader_url],
            "client_urls": [leader_url],
        })
    );
    assert_eq!(members["etcd_leader"], members["leader"]);

    let health = get(&endpoints[0], "/pd/api/v1/health").await;
    assert_eq!(health.status, 200);
    assert_eq!(
        health.json(),
        json!([
            {"name": "pd-0", "member_id": 9001, "client_urls": [leader_url], "health": true},
            {"name": "pd-1", "member_id": 9002,
             "client_urls": [format!("http://{}", endpoints[1])], "health": true},
        ])
    );
    // A hung member does not answer PD's health check.
    cluster.pd_member_hang(1).unwrap();
    let health = get(&endpoints[0], "/pd/api/v1/health").await.json();
    assert_eq!(health[1]["health"], false);
    cluster.pd_member_unhang(1).unwrap();
    let ping = get(&endpoints[1], "/pd/api/v1/ping").await;
    assert_eq!((ping.status, ping.body.as_str()), (200, ""));
    cluster.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_are_404_and_other_methods_405() {
    let cluster = three_regions(1).await;
    let pd = cluster.pd_addr();
    let answer = get(&pd, "/pd/api/v1/nothing-here").await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.body, "404 page not found\n");
    assert_eq!(
        answer.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(get(&pd, "/").await.status, 404);
    let post = request(&pd, "POST", "/pd/api/v1/regions", &[]).await;
    assert_eq!((post.status, post.body.as_str()), (405, ""));
    cluster.shutdown().await;
}

#[tokio::test]
async fn grpc_is_served_on_the_same_port_as_http() {
    let cluster = three_regions(1).await;
    let mut pd = cluster.pd_client(0).await.unwrap();
    let before = pd
        .get_members(pdpb::GetMembersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        get(&cluster.pd_addr(), "/pd/api/v1/regions").await.status,
        200
    );
    // The same gRPC connection keeps working after HTTP/1.1 on the port.
    let region = pd
        .get_region(pdpb::GetRegionRequest {
            header: Some(pdpb::RequestHeader {
                cluster_id: cluster.cluster_id(),
                sender_id: 0,
            }),
            region_key: b"h".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(region.region.map(|r| r.id), Some(1004));
    assert_eq!(before.leader.map(|l| l.member_id), Some(9001));
    // A gRPC service PD does not have is still a gRPC Unimplemented, not
    // an HTTP 404.
    let channel = Channel::from_shared(format!("http://{}", cluster.pd_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = TikvClient::new(channel)
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_follower_answers_for_the_leader_and_waits_out_its_hang() {
    let cluster = three_regions(2).await;
    let follower = cluster.pd_endpoints()[1].clone();
    let from_leader = get(&cluster.pd_addr(), "/pd/api/v1/regions").await;
    let from_follower = get(&follower, "/pd/api/v1/regions").await;
    assert_eq!(from_follower.status, 200);
    assert_eq!(from_follower.body, from_leader.body);

    cluster.pd_member_hang(0).unwrap();
    let mut held = tokio::spawn({
        let follower = follower.clone();
        async move { get(&follower, "/pd/api/v1/regions").await }
    });
    // Proxied to a hung leader: no answer while it hangs (the wait only
    // ends by its own timer).
    let waited = tokio::time::timeout(Duration::from_millis(200), &mut held).await;
    assert!(waited.is_err(), "the follower answered for a hung leader");
    // Local-only paths, and a caller that lets the follower answer, are
    // answered at once.
    assert_eq!(get(&follower, "/pd/api/v1/health").await.status, 200);
    let local = request(
        &follower,
        "GET",
        "/pd/api/v1/regions/count",
        &[("PD-Allow-follower-handle", "true")],
    )
    .await;
    assert_eq!(local.status, 200);
    cluster.pd_member_unhang(0).unwrap();
    let answer = held.await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["count"], 3);
    cluster.shutdown().await;
}
