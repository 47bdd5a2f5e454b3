//! The blocking clients from a plain `fn main`, with no async runtime in
//! the program's own code: raw reads and writes with `SyncRawClient`, a
//! transfer in a pessimistic transaction and a snapshot read with
//! `SyncTransactionClient`, and what a blocking call does on a thread that
//! is inside a Tokio runtime (a typed error, not a panic).
//!
//! With no arguments it starts a simulated cluster in-process, on a thread
//! of its own; `--pd HOST:PORT` runs against a real cluster instead.
//!
//! ```text
//! cargo run --example blocking
//! cargo run --example blocking -- --pd 127.0.0.1:2379
//! ```

use std::error::Error;
use std::sync::mpsc;

use tikv_plan::codec::encode_bytes;
use tikv_plan::{Failure, SyncRawClient, SyncTransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

/// Starts a simulated cluster on a thread that runs its own runtime, and
/// returns its PD address and a sender that stops it.
fn start_simulator() -> Result<(Vec<String>, mpsc::Sender<()>), Box<dyn Error>> {
    let (ready, endpoints) = mpsc::channel();
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Runtime::new() {
            Ok(runtime) => runtime,
            Err(e) => return drop(ready.send(Err(e.to_string()))),
        };
        runtime.block_on(async move {
            let started = SimCluster::builder()
                .stores(3)
                .replicas(3)
                // At an encoded key, as a cluster serving transactions
                // splits; raw keys route by themselves in API v1, so the
                // raw keys "apple" and "plum" fall on either side too.
                .split_keys(vec![encode_bytes(b"m")])
                .start()
                .await;
            match started {
                Ok(cluster) => {
                    let _ = ready.send(Ok(cluster.pd_endpoints()));
                    // Serve until main is done (or gone).
                    let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
                    cluster.shutdown().await;
                }
                Err(e) => drop(ready.send(Err(e.to_string()))),
            }
        });
    });
    let endpoints = endpoints.recv()??;
    Ok((endpoints, stop))
}

fn check(what: &str, ok: bool) -> Result<(), Box<dyn Error>> {
    println!("{}: {what}", if ok { "ok" } else { "FAILED" });
    if ok {
        Ok(())
    } else {
        Err(format!("broken expectation: {what}").into())
    }
}

fn raw(endpoints: Vec<String>) -> Result<(), Box<dyn Error>> {
    let client = SyncRawClient::new(endpoints)?;
    client.put("apple".to_owned(), "red".to_owned())?;
    client.batch_put(vec![
        ("banana".to_owned(), "yellow".to_owned()),
        ("plum".to_owned(), "purple".to_owned()),
    ])?;
    let got = client.get("apple".to_owned())?;
    check("raw get reads the put", got == Some(b"red".to_vec()))?;
    let pairs = client.scan("apple".to_owned()..="plum".to_owned(), 10)?;
    check("raw scan crosses the Region split", pairs.len() == 3)?;
    // A scan of any size, a page at a time, as a plain iterator.
    let streamed = client
        .scan_stream("apple".to_owned()..="plum".to_owned(), 2)
        .collect::<Result<Vec<_>, _>>()?;
    check("the scan stream reads every pair", streamed == pairs)?;
    client.delete("apple".to_owned())?;
    check("raw delete", client.get("apple".to_owned())?.is_none())?;
    Ok(())
}

fn transfer(client: &SyncTransactionClient, amount: u64) -> Result<(), Box<dyn Error>> {
    let mut txn = client.begin_pessimistic()?;
    let balance = |value: Option<Vec<u8>>| -> Result<u64, Box<dyn Error>> {
        Ok(String::from_utf8(value.unwrap_or_default())?.parse()?)
    };
    let from = balance(txn.get_for_update("alice".to_owned())?)?;
    let to = balance(txn.get_for_update("zoe".to_owned())?)?;
    if from < amount {
        txn.rollback()?;
        return Err("not enough money".into());
    }
    txn.put("alice".to_owned(), (from - amount).to_string())?;
    txn.put("zoe".to_owned(), (to + amount).to_string())?;
    txn.commit()?;
    Ok(())
}

fn transactions(endpoints: Vec<String>) -> Result<(), Box<dyn Error>> {
    let client = SyncTransactionClient::new(endpoints)?;
    let mut setup = client.begin_optimistic()?;
    setup.put("alice".to_owned(), "100".to_owned())?;
    setup.put("zoe".to_owned(), "0".to_owned())?;
    setup.commit()?;
    let before = client.current_timestamp()?;
    transfer(&client, 30)?;
    let mut now = client.snapshot(
        client.current_timestamp()?,
        TransactionOptions::new_optimistic(),
    );
    let mut then = client.snapshot(before, TransactionOptions::new_optimistic());
    check(
        "the transfer moved the money",
        now.get("alice".to_owned())? == Some(b"70".to_vec())
            && now.get("zoe".to_owned())? == Some(b"30".to_vec()),
    )?;
    check(
        "a snapshot from before sees the old balance",
        then.get("alice".to_owned())? == Some(b"100".to_vec()),
    )?;

    // On a thread inside a runtime a blocking call would stall it: it is
    // refused with a typed error naming the call, and nothing is sent.
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let refused = runtime.block_on(async { client.current_timestamp() });
    let refused = match refused {
        Err(e) => match e.failure() {
            Some(Failure::NestedRuntime { call }) => call.clone(),
            _ => return Err(e.into()),
        },
        Ok(ts) => return Err(format!("inside a runtime the call ran ({ts:?})").into()),
    };
    check(
        "inside a runtime the call is refused, naming it",
        refused == "SyncTransactionClient::current_timestamp",
    )?;
    // Dropping the client there is safe too.
    runtime.block_on(async move { drop(client) });
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (endpoints, _stop) = match args.iter().position(|a| a == "--pd") {
        Some(i) => {
            let pd = args.get(i + 1).ok_or("--pd needs HOST:PORT")?;
            (vec![pd.clone()], None)
        }
        None => {
            let (endpoints, stop) = start_simulator()?;
            (endpoints, Some(stop))
        }
    };
    raw(endpoints.clone())?;
    transactions(endpoints)?;
    Ok(())
}
