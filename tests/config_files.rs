//! `Config` loads from TOML and JSON files as client-rust's does: kebab-case
//! field names, every field optional, durations as `{ secs, nanos }`.

use std::time::Duration;

use tikv_plan::request::{KeyMode, Keyspace};
use tikv_plan::{Backoff, Config, RpcMode};

/// A file written for client-rust 0.4.0 (its six fields) loads unchanged;
/// the settings it does not name keep tikv-plan's defaults.
#[test]
fn a_client_rust_config_file_loads() {
    let text = r#"
        ca-path = "/etc/tikv/ca.pem"
        cert-path = "/etc/tikv/client.pem"
        key-path = "/etc/tikv/client.key"
        grpc-max-decoding-message-size = 1048576
        keyspace = "orders"

        [timeout]
        secs = 3
        nanos = 500000000
    "#;
    let config: Config = toml::from_str(text).unwrap();
    assert_eq!(config.ca_path.as_deref(), Some("/etc/tikv/ca.pem".as_ref()));
    assert_eq!(
        config.key_path.as_deref(),
        Some("/etc/tikv/client.key".as_ref())
    );
    assert_eq!(config.timeout, Duration::from_millis(3500));
    assert_eq!(config.grpc_max_decoding_message_size, 1 << 20);
    assert_eq!(config.keyspace.as_deref(), Some("orders"));
    let defaults = Config::default();
    assert_eq!(config.request_deadline, defaults.request_deadline);
    assert_eq!(config.region_backoff, defaults.region_backoff);
    assert_eq!(config.rpc_mode, defaults.rpc_mode);
}

#[test]
fn an_empty_file_is_the_default_config() {
    let config: Config = toml::from_str("").unwrap();
    assert_eq!(config, Config::default());
    let config: Config = serde_json::from_str("{}").unwrap();
    assert_eq!(config, Config::default());
}

/// Every setting survives a write and a read, in both formats.
#[test]
fn every_setting_round_trips() {
    let config = Config::default()
        .with_security("ca.pem", "client.pem", "client.key")
        .with_timeout(Duration::from_millis(750))
        .with_connect_timeout(Duration::from_millis(120))
        .with_region_backoff(Backoff::decorrelated_jitter_backoff(3, 700, 9))
        .with_store_cooldown(Duration::from_secs(4))
        .with_request_deadline(Duration::from_secs(7))
        .with_at_least_once_writes()
        .with_rpc_mode(RpcMode::Batched)
        .with_batch_limits(64, 2)
        .with_batch_max_wait(Duration::from_micros(50))
        .with_keyspace("orders")
        .upstream_routing();
    let json = serde_json::to_string(&config).unwrap();
    assert!(json.contains("\"rpc-mode\":\"batched\""), "{json}");
    assert!(json.contains("\"kind\":\"decorrelated-jitter\""), "{json}");
    let back: Config = serde_json::from_str(&json).unwrap();
    assert_eq!(back, config);
    let text = toml::to_string(&config).unwrap();
    let back: Config = toml::from_str(&text).unwrap();
    assert_eq!(back, config);
}

/// A loaded backoff starts afresh: the attempts a running backoff has spent
/// are not part of its schedule.
#[test]
fn a_backoff_is_written_as_its_schedule() {
    let mut used = Backoff::no_jitter_backoff(2, 500, 10);
    used.next_delay_duration().unwrap();
    let json = serde_json::to_string(&used).unwrap();
    let back: Backoff = serde_json::from_str(&json).unwrap();
    assert_eq!(back, Backoff::no_jitter_backoff(2, 500, 10));
    assert_eq!(back.current_attempts(), 0);
    let none: Backoff = serde_json::from_str(r#"{ "kind": "none" }"#).unwrap();
    assert!(none.is_none());
}

#[test]
fn a_bad_backoff_is_refused_with_a_sentence() {
    let err = serde_json::from_str::<Config>(
        r#"{ "region-backoff": { "kind": "no-jitter", "base-delay-ms": 100,
                                 "max-delay-ms": 10, "max-attempts": 3 } }"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("max-delay-ms (10) is below its base-delay-ms (100)"),
        "{err}"
    );
    let err = serde_json::from_str::<Backoff>(r#"{ "kind": "sometimes" }"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sometimes"), "{err}");
    let err = serde_json::from_str::<Backoff>(r#"{ "kind": "none", "base_delay": 1 }"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("base_delay"), "{err}");
}

#[test]
fn a_wrong_type_names_the_field() {
    let err = toml::from_str::<Config>("timeout = \"2s\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("timeout"), "{err}");
}

/// `Keyspace` and `KeyMode` use serde's default (externally tagged) form,
/// as client-rust's do.
#[test]
fn keyspace_and_key_mode_round_trip() {
    for keyspace in [
        Keyspace::Disable,
        Keyspace::Enable { keyspace_id: 42 },
        Keyspace::ApiV2NoPrefix,
    ] {
        let json = serde_json::to_string(&keyspace).unwrap();
        assert_eq!(serde_json::from_str::<Keyspace>(&json).unwrap(), keyspace);
    }
    assert_eq!(
        serde_json::to_string(&Keyspace::Enable { keyspace_id: 7 }).unwrap(),
        r#"{"Enable":{"keyspace_id":7}}"#
    );
    for mode in [KeyMode::Raw, KeyMode::Txn] {
        let json = serde_json::to_string(&mode).unwrap();
        assert_eq!(serde_json::from_str::<KeyMode>(&json).unwrap(), mode);
    }
    assert_eq!(serde_json::to_string(&KeyMode::Txn).unwrap(), r#""Txn""#);
}
