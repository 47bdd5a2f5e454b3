//! Transactions with the standard Rust TiKV client (`tikv-client` 0.4.0,
//! unchanged) against `tikv-sim`: bootstrap, locate Regions (whose
//! boundaries a transactional client decodes as memcomparable keys), then
//! optimistic, pessimistic, async-commit and 1PC transactions across
//! Regions, snapshot reads, a write conflict, a duplicate insert, scans,
//! GC and an unsafe range destroy, each result checked.
//!
//! ```text
//! tikv-plan-interop-txn --pd HOST:PORT
//! ```
//!
//! Meant for a fresh `tikv-sim --regions 4`; it clears the range it uses
//! first, so it can run again against the same cluster. It prints one line
//! per check and exits non-zero on the first error or mismatch.

use std::fmt::Debug;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use tikv_client::{TimestampExt, TransactionClient, TransactionOptions};

/// Upper bound for one client call, retries included.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One key per Region of `tikv-sim --regions 4` (split near `8P`, `P`,
/// `gP`), two in the first and last.
const KEYS: [&str; 6] = ["1-one", "5-five", "A-alpha", "Z-zulu", "k-kilo", "x-xray"];

/// A failed check: what was done and what went wrong.
struct Failure(String);

type Check = Result<(), Failure>;

fn value_of(key: &str, round: &str) -> Vec<u8> {
    format!("{round}-{key}").into_bytes()
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

/// Runs one client call that must fail; returns the error's text.
async fn call_err<T: Debug, E: Debug>(
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<String, Failure> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(value)) => Err(Failure(format!("{what}: expected an error, got {value:?}"))),
        Ok(Err(error)) => Ok(format!("{error:?}")),
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

fn expect(what: &str, condition: bool, detail: impl Debug) -> Check {
    if condition {
        Ok(())
    } else {
        Err(Failure(format!("{what}: {detail:?}")))
    }
}

fn ok(operation: &str, detail: impl AsRef<str>) {
    println!("ok   {operation:<16} {}", detail.as_ref());
}

/// Writes `round` values for every key in one transaction with `options`;
/// returns the commit timestamp's version.
async fn write_all(
    client: &TransactionClient,
    options: TransactionOptions,
    round: &str,
) -> Result<u64, Failure> {
    let mut txn = call("begin", client.begin_with_options(options)).await?;
    for key in KEYS {
        call("put", txn.put(key.to_owned(), value_of(key, round))).await?;
    }
    let committed = call("commit", txn.commit()).await?;
    committed
        .map(|ts| ts.version())
        .ok_or_else(|| Failure(format!("commit of round {round}: no commit timestamp")))
}

/// Reads every key at the newest snapshot and compares with `round`.
async fn read_all(client: &TransactionClient, round: &str) -> Check {
    let mut txn = call("begin read", client.begin_optimistic()).await?;
    for key in KEYS {
        let got = call("get", txn.get(key.to_owned())).await?;
        expect_eq(&format!("get {key}"), got, Some(value_of(key, round)))?;
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = call(
        "batch_get",
        txn.batch_get(KEYS.iter().map(|k| k.to_string())),
    )
    .await?
    .map(|pair| (Vec::<u8>::from(pair.0), pair.1))
    .collect();
    expect_eq("batch_get count", got.len(), KEYS.len())?;
    call("rollback read", txn.rollback()).await?;
    Ok(())
}

async fn run(pd: &str) -> Check {
    let client = call("connect", TransactionClient::new(vec![pd.to_owned()])).await?;
    ok("connect", format!("bootstrapped from PD {pd}"));
    call(
        "setup unsafe_destroy_range",
        client.unsafe_destroy_range("0".to_owned()..="z".to_owned()),
    )
    .await?;
    ok("destroy range", "0..=z cleared on every store");

    // Optimistic two-phase commit across all four Regions.
    let first = write_all(&client, TransactionOptions::new_optimistic(), "opt").await?;
    read_all(&client, "opt").await?;
    ok(
        "optimistic",
        format!("6 keys in 4 Regions committed at {first}"),
    );

    // Snapshot isolation: a snapshot at `first` keeps seeing round "opt".
    let before = call("timestamp", client.current_timestamp()).await?;
    write_all(&client, TransactionOptions::new_pessimistic(), "pes").await?;
    let mut snapshot = client.snapshot(before, TransactionOptions::new_optimistic());
    let old = call("snapshot get", snapshot.get("k-kilo".to_owned())).await?;
    expect_eq("snapshot get k-kilo", old, Some(value_of("k-kilo", "opt")))?;
    read_all(&client, "pes").await?;
    ok(
        "pessimistic",
        "committed; an older snapshot still reads the old round",
    );

    // Scans across Region boundaries, forward and reverse.
    let mut txn = call("begin scan", client.begin_optimistic()).await?;
    let keys: Vec<Vec<u8>> = call("scan", txn.scan("0".to_owned().."y".to_owned(), 100))
        .await?
        .map(|pair| Vec::<u8>::from(pair.0))
        .collect();
    let want: Vec<Vec<u8>> = KEYS.iter().map(|k| k.as_bytes().to_vec()).collect();
    expect_eq("scan 0..y", keys, want.clone())?;
    let reversed: Vec<Vec<u8>> = call(
        "scan_reverse",
        txn.scan_reverse("0".to_owned().."y".to_owned(), 100),
    )
    .await?
    .map(|pair| Vec::<u8>::from(pair.0))
    .collect();
    let mut want_reversed = want;
    want_reversed.reverse();
    expect_eq("scan_reverse 0..y", reversed, want_reversed)?;
    call("rollback scan", txn.rollback()).await?;
    ok("scan", "forward and reverse across every Region");

    // Async commit and 1PC.
    write_all(
        &client,
        TransactionOptions::new_optimistic().use_async_commit(),
        "async",
    )
    .await?;
    read_all(&client, "async").await?;
    ok("async commit", "committed across Regions");
    let mut one = call(
        "begin 1pc",
        client.begin_with_options(TransactionOptions::new_optimistic().try_one_pc()),
    )
    .await?;
    call("put 1pc", one.put("A-alpha".to_owned(), b"one-pc".to_vec())).await?;
    call("commit 1pc", one.commit()).await?;
    let mut check = call("begin check", client.begin_optimistic()).await?;
    let got = call("get 1pc", check.get("A-alpha".to_owned())).await?;
    expect_eq("get A-alpha after 1PC", got, Some(b"one-pc".to_vec()))?;
    call("rollback check", check.rollback()).await?;
    ok("1pc", "single-Region transaction committed in its prewrite");

    // A write conflict: two optimistic transactions write one key; the
    // second to commit fails.
    let mut a = call("begin a", client.begin_optimistic()).await?;
    let mut b = call("begin b", client.begin_optimistic()).await?;
    call("put a", a.put("Z-zulu".to_owned(), b"a".to_vec())).await?;
    call("put b", b.put("Z-zulu".to_owned(), b"b".to_vec())).await?;
    call("commit a", a.commit()).await?;
    let error = call_err("commit b", b.commit()).await?;
    expect(
        "commit b fails with a write conflict",
        error.contains("WriteConflict") || error.contains("conflict"),
        &error,
    )?;
    ok("write conflict", "the second writer of Z-zulu is refused");

    // A duplicate insert.
    let mut dup = call("begin insert", client.begin_optimistic()).await?;
    call("insert", dup.insert("k-kilo".to_owned(), b"dup".to_vec())).await?;
    let error = call_err("commit insert", dup.commit()).await?;
    expect(
        "a duplicate insert fails with AlreadyExist",
        error.contains("AlreadyExist") || error.contains("already"),
        &error,
    )?;
    ok("insert", "inserting an existing key is refused");

    // Delete, then GC at a fresh safe point.
    let mut del = call("begin delete", client.begin_optimistic()).await?;
    call("delete", del.delete("x-xray".to_owned())).await?;
    call("commit delete", del.commit()).await?;
    let mut check = call("begin check", client.begin_optimistic()).await?;
    let gone = call("get deleted", check.get("x-xray".to_owned())).await?;
    expect_eq("get x-xray after delete", gone, None)?;
    call("rollback check", check.rollback()).await?;
    let safepoint = call("timestamp", client.current_timestamp()).await?;
    let updated = call("gc", client.gc(safepoint)).await?;
    expect_eq("gc moved PD's safe point to the one given", updated, true)?;
    ok("gc", "locks resolved, safe point published");

    call(
        "cleanup unsafe_destroy_range",
        client.unsafe_destroy_range("0".to_owned()..="z".to_owned()),
    )
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let pd = match (args.next().as_deref(), args.next()) {
        (Some("--pd"), Some(pd)) => pd,
        _ => {
            eprintln!("usage: tikv-plan-interop-txn --pd HOST:PORT");
            return ExitCode::from(2);
        }
    };
    match run(&pd).await {
        Ok(()) => {
            println!("all transactional checks passed");
            ExitCode::SUCCESS
        }
        Err(Failure(message)) => {
            println!("FAIL {message}");
            ExitCode::FAILURE
        }
    }
}
