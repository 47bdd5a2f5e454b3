//! The Prometheus metrics (feature `prometheus`) after real traffic through
//! leader loss on the simulated cluster, scraped from `/metrics` over a
//! loopback TCP connection, the way Prometheus would.
#![cfg(feature = "prometheus")]

use std::collections::BTreeMap;
use std::time::Duration;

use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEYS: usize = 10;

fn key(i: usize) -> String {
    // Both sides of the split key "M".
    let first = if i.is_multiple_of(2) { 'A' } else { 'T' };
    format!("{first}key{i:02}")
}

/// Sends `request` to `addr` and returns the status line and the body.
async fn http(addr: std::net::SocketAddr, request: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.lines().next().unwrap().to_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(length, body.len(), "Content-Length matches the body");
    (status, body.to_owned())
}

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap();
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => {
                let labels = rest
                    .trim_end_matches('}')
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|pair| {
                        let (k, v) = pair.split_once('=').unwrap();
                        (k.to_owned(), v.trim_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        samples.push((name, labels, value));
    }
    samples
}

/// The sum of the samples of `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

#[tokio::test]
async fn metrics_scraped_after_leader_loss_count_the_real_traffic() {
    tikv_plan::metrics::register();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(tikv_plan::metrics::serve(listener));

    // Before any traffic the metrics are registered, at zero.
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let before = parse(&body);
    assert_eq!(
        value(&before, "tikv_plan_fallback_attempts_total", &[]),
        0.0
    );
    assert!(body.contains("# TYPE tikv_plan_fallback_successes_total counter"));

    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"M".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300));
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    for i in 0..KEYS {
        client.put(key(i), format!("v{i}")).await.unwrap();
    }
    for i in 0..KEYS {
        assert_eq!(
            client.get(key(i)).await.unwrap(),
            Some(format!("v{i}").into_bytes())
        );
    }

    // The first Region's leader store goes down and the Region goes cold:
    // the next request to it must fall back to another voter.
    let region = cluster.regions()[0].id;
    let victim = cluster.leader_of(region).unwrap().store_id;
    cluster.make_cold(region, ColdMode::AcceptAtOnce).unwrap();
    cluster.store_down(victim).await;
    for i in 0..KEYS {
        assert_eq!(
            client.get(key(i)).await.unwrap(),
            Some(format!("v{i}").into_bytes())
        );
    }
    let stats = client.routing_stats();
    assert!(stats.fallback_successes >= 1, "{stats:?}");

    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let m = parse(&body);

    // Per method, per outcome: every call is one request.
    let gets = [("method", "raw_get"), ("outcome", "ok")];
    let puts = [("method", "raw_put"), ("outcome", "ok")];
    assert_eq!(
        value(&m, "tikv_plan_requests_total", &gets),
        2.0 * KEYS as f64
    );
    assert_eq!(value(&m, "tikv_plan_requests_total", &puts), KEYS as f64);
    assert_eq!(
        value(&m, "tikv_plan_request_duration_seconds_count", &gets),
        2.0 * KEYS as f64
    );
    assert!(value(&m, "tikv_plan_request_duration_seconds_sum", &gets) > 0.0);

    // The forced fallback, as the routing counters saw it.
    let attempts = value(&m, "tikv_plan_fallback_attempts_total", &[]);
    let successes = value(&m, "tikv_plan_fallback_successes_total", &[]);
    assert!(attempts >= 1.0, "fallback attempts {attempts}");
    assert!(successes >= 1.0, "fallback successes {successes}");
    assert_eq!(attempts, stats.fallback_attempts as f64);
    assert_eq!(successes, stats.fallback_successes as f64);
    assert_eq!(
        value(&m, "tikv_plan_stores_marked_unreachable_total", &[]),
        stats.stores_marked_unreachable as f64
    );

    // Per store: the dead store refused an attempt; the others answered.
    let victim_label = victim.to_string();
    assert!(
        value(
            &m,
            "tikv_plan_store_rpcs_total",
            &[("store", &victim_label)]
        ) > value(
            &m,
            "tikv_plan_store_rpcs_total",
            &[("store", &victim_label), ("outcome", "ok")]
        ),
        "an attempt at store {victim} failed:\n{body}"
    );
    assert!(value(&m, "tikv_plan_store_rpcs_total", &[("outcome", "ok")]) >= 3.0 * KEYS as f64);

    // The Region cache: each Region missed once, then hit.
    assert!(
        value(
            &m,
            "tikv_plan_region_cache_lookups_total",
            &[("result", "miss")]
        ) >= 2.0
    );
    assert!(
        value(
            &m,
            "tikv_plan_region_cache_lookups_total",
            &[("result", "hit")]
        ) >= 3.0 * KEYS as f64 - 2.0
    );
    assert!(value(&m, "tikv_plan_region_cache_regions", &[]) >= 1.0);

    // PD calls and connections.
    assert!(
        value(
            &m,
            "tikv_plan_pd_requests_total",
            &[("method", "GetRegion"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert!(
        value(
            &m,
            "tikv_plan_pd_request_duration_seconds_count",
            &[("method", "GetStore")]
        ) >= 1.0
    );
    assert!(
        value(
            &m,
            "tikv_plan_connections_total",
            &[("target", "pd"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert!(
        value(
            &m,
            "tikv_plan_connections_total",
            &[("target", "store"), ("outcome", "ok")]
        ) >= 2.0
    );
    assert_eq!(value(&m, "tikv_plan_rpcs_in_flight", &[]), 0.0);
    assert_eq!(value(&m, "tikv_plan_undetermined_total", &[]), 0.0);

    // client-rust's series, under its names and its `type` label: one count
    // per TiKV RPC (so at least one per call; the attempt at the dead store
    // failed), one per PD call.
    let raw_get = [("type", "raw_get")];
    let tikv_gets = value(&m, "tikv_request_total", &raw_get);
    assert!(tikv_gets >= 2.0 * KEYS as f64, "{tikv_gets}");
    assert_eq!(
        value(&m, "tikv_request_total", &[("type", "raw_put")]),
        KEYS as f64
    );
    let failed_gets = value(&m, "tikv_failed_request_total", &raw_get);
    assert_eq!(
        value(&m, "tikv_request_duration_seconds_count", &raw_get) + failed_gets,
        tikv_gets,
        "every RPC is observed once, as answered or failed"
    );
    assert_eq!(
        value(&m, "tikv_failed_request_duration_seconds_count", &raw_get),
        failed_gets
    );
    assert!(
        value(&m, "pd_request_total", &[("type", "get_region")]) >= 1.0,
        "{body}"
    );
    assert!(value(&m, "pd_request_total", &[("type", "get_store")]) >= 1.0);
    assert!(
        value(
            &m,
            "pd_request_duration_seconds_count",
            &[("type", "get_store")]
        ) >= 1.0
    );
    assert!(body.contains("# TYPE tikv_failed_request_duration_seconds histogram"));
    assert!(body.contains("# TYPE pd_tso_batch_size histogram"));

    // The same metrics in a registry of the application's own.
    let registry = prometheus::Registry::new();
    tikv_plan::metrics::register_in(&registry).unwrap();
    let mut own = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut own,
    )
    .unwrap();
    let own = parse(&String::from_utf8(own).unwrap());
    assert!(value(&own, "tikv_request_total", &raw_get) >= tikv_gets);
    assert!(value(&own, "tikv_plan_requests_total", &gets) >= 2.0 * KEYS as f64);
    assert!(
        tikv_plan::metrics::register_in(&registry).is_err(),
        "a second registration of the same names is refused"
    );

    // Anything but GET /metrics is refused.
    let (status, _) = http(addr, "GET /other HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = http(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");

    server.abort();
    cluster.shutdown().await;
}
