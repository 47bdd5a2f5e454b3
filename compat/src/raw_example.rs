//! client-rust's raw example as a user ports it: the imports name
//! `tikv_client`, the body is the example's, the PD address comes from the
//! caller instead of the command line.

use std::path::PathBuf;

use tikv_client::Config;
use tikv_client::IntoOwnedRange;
use tikv_client::Key;
use tikv_client::KvPair;
use tikv_client::RawClient as Client;
use tikv_client::Result;
use tikv_client::Value;

const KEY: &str = "TiKV";
const VALUE: &str = "Rust";

/// What the example reads from its command line.
#[derive(Debug, Clone, Default)]
pub struct CommandArgs {
    /// PD endpoints.
    pub pd: Vec<String>,
    /// CA certificate path (TLS with `cert` and `key`).
    pub ca: Option<PathBuf>,
    /// Client certificate path.
    pub cert: Option<PathBuf>,
    /// Client key path.
    pub key: Option<PathBuf>,
}

/// The example's `main`, step by step.
pub async fn run(args: CommandArgs) -> Result<()> {
    // Plain or TLS, always in the default keyspace (API v2).
    let config = if let (Some(ca), Some(cert), Some(key)) = (args.ca, args.cert, args.key) {
        Config::default().with_security(ca, cert, key)
    } else {
        Config::default()
    }
    .with_default_keyspace();

    let client = Client::new_with_config(args.pd, config).await?;

    // Put one key, read it back, delete it.
    client.put(KEY.to_owned(), VALUE.to_owned()).await?;
    println!("Put key {KEY:?}, value {VALUE:?}.");

    let value: Option<Value> = client.get(KEY.to_owned()).await?;
    assert_eq!(value, Some(Value::from(VALUE.to_owned())));
    println!("Get key `{KEY}` returned value {value:?}.");

    client.delete(KEY.to_owned()).await?;
    println!("Key: `{KEY}` deleted");

    let value: Option<Value> = client.get(KEY.to_owned()).await?;
    assert!(value.is_none());

    // Three pairs in one batch, two read back in one batch.
    let pairs = vec![
        KvPair::from(("k1".to_owned(), "v1".to_owned())),
        KvPair::from(("k2".to_owned(), "v2".to_owned())),
        KvPair::from(("k3".to_owned(), "v3".to_owned())),
    ];
    client.batch_put(pairs).await?;

    let keys = vec![Key::from("k1".to_owned()), Key::from("k2".to_owned())];
    let values = client.batch_get(keys.clone()).await?;
    println!("Found values: {values:?} for keys: {keys:?}");

    // A scan of borrowed bounds, owned with `into_owned`.
    let start = "k1";
    let end = "k2";
    let pairs = client.scan((start..=end).into_owned(), 10).await?;
    let keys: Vec<_> = pairs.into_iter().map(|p| p.key().clone()).collect();
    assert_eq!(
        &keys,
        &[Key::from("k1".to_owned()), Key::from("k2".to_owned())]
    );
    println!("Scanning from {start:?} to {end:?} gives: {keys:?}");

    // Overlapping ranges: each answered in turn, duplicates included.
    let k1 = "k1";
    let k2 = "k2";
    let k3 = "k3";
    let batch_scan_keys = vec![
        (k1.to_owned()..=k2.to_owned()),
        (k2.to_owned()..=k3.to_owned()),
        (k1.to_owned()..=k3.to_owned()),
    ];
    let kv_pairs = client.batch_scan(batch_scan_keys.to_owned(), 10).await?;
    let vals: Vec<_> = kv_pairs
        .into_iter()
        .map(|p| String::from_utf8(p.1).unwrap())
        .collect();
    assert_eq!(
        &vals,
        &["v1", "v2", "v2", "v3", "v1", "v2", "v3"].map(str::to_owned)
    );
    println!("Scanning batch scan from {batch_scan_keys:?} gives: {vals:?}");

    // An empty range end means "to the end": this clears the keyspace.
    client.delete_range("".to_owned().."".to_owned()).await?;
    assert!(client.scan(.., 10).await?.is_empty());

    Ok(())
}
