//! `TransactionClient` step by step against the in-process simulated
//! cluster: what the client did and what the cluster holds after each step.
//!
//! 1. A transfer between two accounts in two Regions (two-phase commit).
//! 2. Two transactions write the same key: the later committer gets a write
//!    conflict, and its locks are rolled back at once.
//! 3. The leader's store of a Region goes down (PD still names it): the
//!    commit goes through voter fallback.
//! 4. A pessimistic transaction locks a key; another waits, then proceeds
//!    once the first rolls back.
//! 5. Every commit response is lost: `commit` reports the outcome as
//!    undetermined, and a later read shows the truth.
//!
//! ```text
//! cargo run --example txn
//! ```

use std::error::Error;
use std::time::Duration;

use tikv_plan::codec::encode_bytes;
use tikv_plan::{CheckLevel, Config, TimestampExt, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

async fn balance(client: &TransactionClient, key: &str) -> Result<String, Box<dyn Error>> {
    let mut snapshot = client.snapshot(
        client.current_timestamp().await?,
        TransactionOptions::new_optimistic(),
    );
    let value = snapshot.get(key.to_owned()).await?;
    Ok(value
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_else(|| "(none)".to_owned()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // Transactional keys are split at their memcomparable encoding.
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![encode_bytes(b"m")])
        .start()
        .await?;
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(2));
    let client = TransactionClient::new_with_config(cluster.pd_endpoints(), config).await?;

    println!("== 1. A transfer across two Regions");
    let mut txn = client.begin_optimistic().await?;
    txn.put("alice".to_owned(), "100".to_owned()).await?;
    txn.put("zoe".to_owned(), "0".to_owned()).await?;
    txn.commit().await?;
    let mut txn = client.begin_optimistic().await?;
    txn.put("alice".to_owned(), "70".to_owned()).await?;
    txn.put("zoe".to_owned(), "30".to_owned()).await?;
    let commit_ts = txn.commit().await?.ok_or("nothing was written")?;
    println!(
        "committed at {} (start {}); alice = {}, zoe = {}; versions of zoe: {:?}",
        commit_ts.version(),
        txn.start_timestamp().version(),
        balance(&client, "alice").await?,
        balance(&client, "zoe").await?,
        cluster
            .versions(b"zoe")
            .iter()
            .map(|v| v.kind)
            .collect::<Vec<_>>()
    );

    println!("== 2. A write conflict");
    let mut first = client.begin_optimistic().await?;
    let mut second = client.begin_optimistic().await?;
    first.put("alice".to_owned(), "60".to_owned()).await?;
    second.put("alice".to_owned(), "50".to_owned()).await?;
    second.put("bob".to_owned(), "10".to_owned()).await?;
    first.commit().await?;
    match second.commit().await {
        Err(e) => println!("the later committer failed: {e}"),
        Ok(_) => println!("unexpected: the later committer succeeded"),
    }
    second.rollback().await?;
    println!(
        "locks left behind: {} (a failed prewrite is rolled back); rollbacks sent: {}",
        cluster.locks(b"", b"").len(),
        client.stats().prewrite_rollbacks
    );

    println!("== 3. The leader's store is down");
    let region = cluster
        .region_for_key(&encode_bytes(b"zoe"))
        .ok_or("no region")?;
    let leader = cluster.leader_of(region.id).ok_or("no leader")?.store_id;
    cluster.store_down_cold(leader).await?;
    let next = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != leader)
        .ok_or("no other store")?;
    cluster.transfer_leader(region.id, next, false)?;
    let mut txn = client.begin_optimistic().await?;
    txn.put("zoe".to_owned(), "31".to_owned()).await?;
    txn.commit().await?;
    println!(
        "store {leader} down, Raft leader now on store {next}, PD not told: committed; zoe = {}; fallback successes: {}",
        balance(&client, "zoe").await?,
        client.routing_stats().fallback_successes
    );
    cluster.store_up(leader).await?;

    println!("== 4. Pessimistic locking");
    let options = TransactionOptions::new_pessimistic().drop_check(CheckLevel::Warn);
    let mut holder = client.begin_with_options(options.clone()).await?;
    let seen = holder.get_for_update("alice".to_owned()).await?;
    println!(
        "holder locked alice (value {:?}); locks now: {}",
        seen.map(|v| String::from_utf8_lossy(&v).into_owned()),
        cluster.locks(b"", b"").len()
    );
    let waiter_client = client.clone();
    let waiter = tokio::spawn(async move {
        let mut txn = waiter_client.begin_with_options(options).await?;
        txn.put("alice".to_owned(), "1000".to_owned()).await?;
        txn.commit().await?;
        Ok::<_, tikv_plan::Error>(())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    holder.rollback().await?;
    waiter.await??;
    println!(
        "the holder rolled back; the waiter then locked, wrote and committed: alice = {}",
        balance(&client, "alice").await?
    );
    println!("== 5. Every commit response is lost");
    let mut txn = client
        .begin_with_options(TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn))
        .await?;
    txn.put("alice".to_owned(), "59".to_owned()).await?;
    txn.put("zoe".to_owned(), "32".to_owned()).await?;
    for store in cluster.store_ids() {
        for _ in 0..100 {
            cluster.drop_next_response(store, "kv_commit")?;
        }
    }
    match txn.commit().await {
        Err(e) if e.is_undetermined() => println!("commit: {e}"),
        other => println!("unexpected: {other:?}"),
    }
    println!(
        "the truth, read afterwards: alice = {}, zoe = {} (the commit was applied)",
        balance(&client, "alice").await?,
        balance(&client, "zoe").await?
    );

    println!("transaction stats: {:?}", client.stats());
    cluster.shutdown().await;
    Ok(())
}
