//! Interop check: the standard Rust TiKV client (`tikv-client` from
//! crates.io) bootstraps from a PD address and runs every raw KV operation
//! against it, checking each result.
//!
//! ```text
//! tikv-plan-interop --pd HOST:PORT [--keyspace NAME]
//! ```
//!
//! Meant for a fresh `tikv-sim --regions 4` (Regions split at the
//! memcomparable encodings of `8P`, `P` and `gP`, which a raw client sees
//! as plain keys just above those): the keys below sit in all four Regions, so batch operations,
//! scans and range deletes cross Region boundaries. The program first
//! clears the key range it uses, so it can also be rerun against the same
//! cluster. It prints one line per operation and exits non-zero on the
//! first error or mismatch.
//!
//! With `--keyspace NAME` the client works in that API v2 keyspace
//! (`Config::with_keyspace`), which tikv-client 0.4.0 routes by the
//! memcomparable encoding of each prefixed key; `run.sh` runs it against an
//! API v2 `tikv-sim` whose keyspace is split at the encodings of the same
//! three keys.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use tikv_client::{Config, KvPair, RawClient};

/// Upper bound for one client call, retries included.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One key per Region of `tikv-sim --regions 4`, two in the first and last.
const KEYS: [&str; 6] = ["1-one", "5-five", "A-alpha", "Z-zulu", "k-kilo", "x-xray"];

/// A failed check: what was done and what went wrong.
struct Failure(String);

type Check = Result<(), Failure>;

fn value_of(key: &str) -> Vec<u8> {
    format!("value-of-{key}").into_bytes()
}

fn pairs_to_map(pairs: Vec<KvPair>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    pairs
        .into_iter()
        .map(|pair| (Vec::<u8>::from(pair.0), pair.1))
        .collect()
}

fn pairs_to_list(pairs: Vec<KvPair>) -> Vec<(Vec<u8>, Vec<u8>)> {
    pairs
        .into_iter()
        .map(|pair| (Vec::<u8>::from(pair.0), pair.1))
        .collect()
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs one client call with a deadline; an error or timeout is a failure.
async fn call<T, E: Debug>(
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Failure(format!("{what}: client error: {error:?}"))),
        Err(_) => Err(Failure(format!(
            "{what}: no answer within {CALL_TIMEOUT:?}"
        ))),
    }
}

fn expect_eq<T: PartialEq + Debug>(what: &str, got: T, want: T) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(Failure(format!("{what}: got {got:?}, want {want:?}")))
    }
}

fn ok(operation: &str, detail: impl AsRef<str>) {
    println!("ok   {operation:<16} {}", detail.as_ref());
}

async fn run(pd: &str, keyspace: Option<&str>) -> Check {
    let config = match keyspace {
        Some(name) => Config::default().with_keyspace(name),
        None => Config::default(),
    };
    let connect = RawClient::new_with_config(vec![pd.to_owned()], config);
    let client = call("connect", connect).await?;
    let atomic = client.with_atomic_for_cas();
    let space = keyspace.map_or(String::new(), |name| format!(", keyspace {name}"));
    ok("connect", format!("bootstrapped from PD {pd}{space}"));

    // Setup: an empty key range, whatever ran before.
    call(
        "setup delete_range",
        client.delete_range("0".to_owned()..="z".to_owned()),
    )
    .await?;

    // put + get
    call("put", client.put("A-alpha".to_owned(), b"first".to_vec())).await?;
    let got = call("get after put", client.get("A-alpha".to_owned())).await?;
    expect_eq("get after put A-alpha", got, Some(b"first".to_vec()))?;
    ok("put", "A-alpha = first");
    call(
        "put overwrite",
        client.put("A-alpha".to_owned(), b"second".to_vec()),
    )
    .await?;
    let got = call("get after overwrite", client.get("A-alpha".to_owned())).await?;
    expect_eq("get after overwrite A-alpha", got, Some(b"second".to_vec()))?;
    let missing = call("get missing", client.get("k-missing".to_owned())).await?;
    expect_eq("get k-missing", missing, None)?;
    ok("get", "A-alpha = second (overwritten), k-missing = none");

    // batch_put across all four Regions, then batch_get with a missing key.
    let batch: Vec<(Vec<u8>, Vec<u8>)> = KEYS
        .iter()
        .map(|key| (key.as_bytes().to_vec(), value_of(key)))
        .collect();
    call("batch_put", client.batch_put(batch.clone())).await?;
    for (key, value) in &batch {
        let got = call("get after batch_put", client.get(key.clone())).await?;
        expect_eq(
            &format!("get {} after batch_put", show(key)),
            got,
            Some(value.clone()),
        )?;
    }
    ok("batch_put", format!("{} keys over 4 Regions", batch.len()));

    let mut wanted_keys: Vec<Vec<u8>> = batch.iter().map(|(key, _)| key.clone()).collect();
    wanted_keys.push(b"Z-missing".to_vec());
    let got = call("batch_get", client.batch_get(wanted_keys)).await?;
    let want: BTreeMap<Vec<u8>, Vec<u8>> = batch.iter().cloned().collect();
    expect_eq("batch_get", pairs_to_map(got), want.clone())?;
    ok(
        "batch_get",
        format!("{} found over 4 Regions, 1 missing left out", want.len()),
    );

    // scan: the whole range (in key order, across every boundary), a limit
    // that stops inside the second Region, and a range from Region 1 into
    // Region 3.
    //
    // tikv-client 0.4.0 walks a scan Region by Region and stops when the
    // range's end is at or before the end of the Region just scanned. The
    // last Region's end is empty (unbounded), which that comparison never
    // takes as reached: a scan whose range ends in the last Region only
    // stops once `limit` pairs are collected, and otherwise starts over at
    // the empty key (duplicates, or no end when nothing matches). That is
    // the client's doing, the same against real TiKV, so scans that reach
    // the last Region here ask for exactly as many pairs as exist.
    let want_all: Vec<(Vec<u8>, Vec<u8>)> = want.clone().into_iter().collect();
    let all = want_all.len() as u32;
    let got = call("scan", client.scan("0".to_owned()..="z".to_owned(), all)).await?;
    expect_eq("scan 0..=z", pairs_to_list(got), want_all.clone())?;
    let got = call(
        "scan limit",
        client.scan("0".to_owned()..="z".to_owned(), 3),
    )
    .await?;
    expect_eq(
        "scan 0..=z limit 3",
        pairs_to_list(got),
        want_all[..3].to_vec(),
    )?;
    let got = call(
        "scan range",
        client.scan("2".to_owned().."a".to_owned(), 100),
    )
    .await?;
    let want_part: Vec<(Vec<u8>, Vec<u8>)> = want_all
        .iter()
        .filter(|(key, _)| key.as_slice() >= b"2".as_slice() && key.as_slice() < b"a".as_slice())
        .cloned()
        .collect();
    expect_eq("scan 2..a", pairs_to_list(got), want_part.clone())?;
    ok(
        "scan",
        format!(
            "0..=z: {} pairs in order over 4 Regions; limit 3 -> first 3; 2..a -> {} over Regions 1-3",
            want_all.len(),
            want_part.len()
        ),
    );

    // delete
    call("delete", client.delete("5-five".to_owned())).await?;
    let got = call("get after delete", client.get("5-five".to_owned())).await?;
    expect_eq("get 5-five after delete", got, None)?;
    call(
        "delete missing",
        client.delete("5-never-written".to_owned()),
    )
    .await?;
    ok("delete", "5-five gone; deleting a missing key succeeds");

    // batch_delete across Regions 1 and 4
    call(
        "batch_delete",
        client.batch_delete(vec!["1-one".to_owned(), "x-xray".to_owned()]),
    )
    .await?;
    let got = call(
        "batch_get after batch_delete",
        client.batch_get(vec![
            "1-one".to_owned(),
            "x-xray".to_owned(),
            "k-kilo".to_owned(),
        ]),
    )
    .await?;
    let mut want_left = BTreeMap::new();
    want_left.insert(b"k-kilo".to_vec(), value_of("k-kilo"));
    expect_eq("batch_get after batch_delete", pairs_to_map(got), want_left)?;
    ok(
        "batch_delete",
        "1-one, x-xray gone (Regions 1 and 4); k-kilo kept",
    );

    // delete_range across the 8P and P boundaries: A-alpha, Z-zulu go; k-kilo stays.
    call(
        "delete_range",
        client.delete_range("3".to_owned().."h".to_owned()),
    )
    .await?;
    let got = call(
        "scan after delete_range",
        client.scan("0".to_owned().."a".to_owned(), 100),
    )
    .await?;
    expect_eq(
        "scan 0..a after delete_range 3..h",
        pairs_to_list(got),
        vec![],
    )?;
    let got = call(
        "scan after delete_range",
        client.scan("0".to_owned()..="z".to_owned(), 1),
    )
    .await?;
    expect_eq(
        "scan 0..=z limit 1 after delete_range 3..h",
        pairs_to_list(got),
        vec![(b"k-kilo".to_vec(), value_of("k-kilo"))],
    )?;
    let got = call(
        "batch_get after delete_range",
        client.batch_get(KEYS.map(str::to_owned)),
    )
    .await?;
    let mut want_left = BTreeMap::new();
    want_left.insert(b"k-kilo".to_vec(), value_of("k-kilo"));
    expect_eq("batch_get after delete_range", pairs_to_map(got), want_left)?;
    ok("delete_range", "3..h over Regions 1-3 emptied; k-kilo kept");

    // compare_and_swap (atomic mode), one key in each Region.
    for key in ["2-cas", "B-cas", "Q-cas", "m-cas"] {
        let (previous, swapped) = call(
            "compare_and_swap absent",
            atomic.compare_and_swap(key.to_owned(), None::<Vec<u8>>, b"v1".to_vec()),
        )
        .await?;
        expect_eq(
            &format!("cas {key} None -> v1"),
            (previous, swapped),
            (None, true),
        )?;

        let (previous, swapped) = call(
            "compare_and_swap wrong",
            atomic.compare_and_swap(key.to_owned(), Some(b"wrong".to_vec()), b"v2".to_vec()),
        )
        .await?;
        expect_eq(
            &format!("cas {key} wrong -> v2"),
            (previous, swapped),
            (Some(b"v1".to_vec()), false),
        )?;

        let (previous, swapped) = call(
            "compare_and_swap right",
            atomic.compare_and_swap(key.to_owned(), Some(b"v1".to_vec()), b"v3".to_vec()),
        )
        .await?;
        expect_eq(
            &format!("cas {key} v1 -> v3"),
            (previous, swapped),
            (Some(b"v1".to_vec()), true),
        )?;

        let (previous, swapped) = call(
            "compare_and_swap absent on present",
            atomic.compare_and_swap(key.to_owned(), None::<Vec<u8>>, b"v4".to_vec()),
        )
        .await?;
        expect_eq(
            &format!("cas {key} None -> v4 on present"),
            (previous, swapped),
            (Some(b"v3".to_vec()), false),
        )?;

        let got = call("get after cas", atomic.get(key.to_owned())).await?;
        expect_eq(&format!("get {key} after cas"), got, Some(b"v3".to_vec()))?;
    }
    ok(
        "compare_and_swap",
        "4 Regions: None->v1 swaps, wrong->v2 refused, v1->v3 swaps, None->v4 refused; value v3",
    );

    // Leave the range empty for the next run.
    call(
        "cleanup delete_range",
        client.delete_range("0".to_owned()..="z".to_owned()),
    )
    .await?;
    Ok(())
}

/// The PD address and the keyspace, if any.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(String, Option<String>), String> {
    let (mut pd, mut keyspace) = (None, None);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--pd" => pd = Some(args.next().ok_or("--pd needs HOST:PORT")?),
            "--keyspace" => keyspace = Some(args.next().ok_or("--keyspace needs a name")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let pd = pd.ok_or_else(|| "missing --pd HOST:PORT".to_owned())?;
    Ok((pd, keyspace))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (pd, keyspace) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{message}\nusage: tikv-plan-interop --pd HOST:PORT [--keyspace NAME]");
            return ExitCode::from(2);
        }
    };
    match run(&pd, keyspace.as_deref()).await {
        Ok(()) => {
            println!("interop: all raw operations of tikv-client passed against {pd}");
            ExitCode::SUCCESS
        }
        Err(Failure(message)) => {
            println!("FAIL {message}");
            ExitCode::FAILURE
        }
    }
}
