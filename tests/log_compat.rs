//! Users of the `log` facade keep seeing the crate's messages: with no
//! tracing subscriber installed in the process, tracing's `log` feature
//! turns each event into a `log` record (target `tikv_plan::...`). Its own
//! test binary: once any tracing subscriber is set, even a scoped one, the
//! records stop, by tracing's design. Needs the `log` feature.

#![cfg(feature = "log")]

use std::sync::Mutex;
use std::time::Duration;

use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};

struct Capture(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().unwrap().push((
            record.level(),
            record.target().to_owned(),
            record.args().to_string(),
        ));
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

#[tokio::test]
async fn events_reach_a_log_logger_when_no_subscriber_is_installed() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Debug);

    let cluster = SimCluster::builder()
        .stores(3)
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
    client.put("k", "v").await.unwrap();
    let region = cluster.regions()[0].id;
    let victim = cluster.leader_of(region).unwrap().store_id;
    cluster.make_cold(region, ColdMode::AcceptAtOnce).unwrap();
    cluster.store_down(victim).await;
    assert_eq!(client.get("k").await.unwrap(), Some(b"v".to_vec()));

    let records = CAPTURE.0.lock().unwrap().clone();
    let ours: Vec<_> = records
        .iter()
        .filter(|(_, target, _)| target.starts_with("tikv_plan"))
        .collect();
    // The fallback success, at info, from the retry engine.
    assert!(
        ours.iter()
            .any(|(level, target, message)| *level == log::Level::Info
                && target == "tikv_plan::request::routing::engine"
                && message.contains("it is now the cached leader")),
        "{ours:#?}"
    );
    // Per-request detail at debug: the candidates tried.
    assert!(
        ours.iter()
            .any(|(level, _, message)| *level == log::Level::Debug
                && message.contains("trying peer")),
        "{ours:#?}"
    );
    // The connection events.
    assert!(
        ours.iter()
            .any(|(_, target, _)| target == "tikv_plan::connect"),
        "{ours:#?}"
    );
    cluster.shutdown().await;
}
