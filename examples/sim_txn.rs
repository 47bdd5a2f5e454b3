//! Percolator in the simulated cluster, step by step, with nothing but the
//! raw protobuf messages (no transactional client): a writer prewrites two
//! keys and dies before committing; a reader meets its lock, asks the
//! primary's status, waits out the TTL on the controllable TSO clock (no
//! real waiting), and rolls the writer back. Then a second writer commits,
//! but the response of its commit is dropped: the commit happened anyway.
//!
//! ```text
//! cargo run --example sim_txn
//! ```

use std::error::Error;
use std::time::Duration;

use tikv_plan::proto::kvrpcpb::{self, Action, Mutation, Op};
use tikv_sim::codec::encode_bytes;
use tikv_sim::control::escape_key;
use tikv_sim::SimCluster;

fn put(key: &[u8], value: &[u8]) -> Mutation {
    Mutation {
        op: Op::Put as i32,
        key: key.to_vec(),
        value: value.to_vec(),
        assertion: 0,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![encode_bytes(b"m")])
        .start()
        .await?;
    // "a" and "b" share the first Region (boundaries are encoded keys).
    let region = cluster
        .region_for_key(&encode_bytes(b"a"))
        .ok_or("no region for a")?;
    let store = cluster
        .leader_of(region.id)
        .ok_or("the region has no leader")?
        .store_id;
    let ctx = cluster
        .context(region.id, store)
        .ok_or("no peer on the leader store")?;
    let mut tikv = cluster.tikv_client(store).await?;
    println!(
        "region {} [\"\", \"{}\") led from store {store}",
        region.id,
        escape_key(&region.end_key)
    );

    // 1. A writer prewrites a (primary) and b with a 3 s TTL, then dies.
    let start = cluster.current_ts();
    let prewrite = tikv
        .kv_prewrite(kvrpcpb::PrewriteRequest {
            context: Some(ctx.clone()),
            mutations: vec![put(b"a", b"1"), put(b"b", b"1")],
            primary_lock: b"a".to_vec(),
            start_version: start,
            lock_ttl: 3_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    println!(
        "writer {start}: prewrite errors {:?}; locks now {:?}",
        prewrite.errors,
        cluster
            .locks(b"", b"")
            .iter()
            .map(|l| String::from_utf8_lossy(&l.key).into_owned())
            .collect::<Vec<_>>()
    );

    // 2. A reader meets the lock on b.
    let read_ts = cluster.current_ts();
    let get = |version| kvrpcpb::GetRequest {
        context: Some(ctx.clone()),
        key: b"b".to_vec(),
        version,
    };
    let blocked = tikv.kv_get(get(read_ts)).await?.into_inner();
    let lock = blocked
        .error
        .and_then(|e| e.locked)
        .ok_or("expected b to be locked")?;
    println!(
        "reader {read_ts}: b is locked by {} (primary {:?}, ttl {} ms)",
        lock.lock_version,
        String::from_utf8_lossy(&lock.primary_lock),
        lock.lock_ttl
    );

    // 3. It asks the primary's status: still alive.
    let check = |now| kvrpcpb::CheckTxnStatusRequest {
        context: Some(ctx.clone()),
        primary_key: lock.primary_lock.clone(),
        lock_ts: lock.lock_version,
        caller_start_ts: read_ts,
        current_ts: now,
        ..Default::default()
    };
    let alive = tikv
        .kv_check_txn_status(check(cluster.current_ts()))
        .await?
        .into_inner();
    println!("check status: lock_ttl {} -> still locked", alive.lock_ttl);

    // 4. The TSO clock moves past the TTL; the next check rolls it back.
    cluster.advance_tso_clock(Duration::from_millis(3_500));
    let expired = tikv
        .kv_check_txn_status(check(cluster.current_ts()))
        .await?
        .into_inner();
    println!(
        "3.5 s later on the TSO clock: action {:?}",
        Action::try_from(expired.action)?
    );
    let resolved = tikv
        .kv_resolve_lock(kvrpcpb::ResolveLockRequest {
            context: Some(ctx.clone()),
            start_version: lock.lock_version,
            commit_version: expired.commit_version,
            ..Default::default()
        })
        .await?
        .into_inner();
    let after = tikv.kv_get(get(cluster.current_ts())).await?.into_inner();
    println!(
        "resolve (commit ts {} = roll back): error {:?}; b not found: {}; history of b: {:?}",
        expired.commit_version,
        resolved.error,
        after.not_found,
        cluster.versions(b"b")
    );

    // 5. A second writer commits, but the commit's response is lost.
    let start = cluster.current_ts();
    tikv.kv_prewrite(kvrpcpb::PrewriteRequest {
        context: Some(ctx.clone()),
        mutations: vec![put(b"a", b"2")],
        primary_lock: b"a".to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        ..Default::default()
    })
    .await?;
    cluster.drop_next_response(store, "kv_commit")?;
    let commit_ts = cluster.current_ts();
    let lost = tikv
        .kv_commit(kvrpcpb::CommitRequest {
            context: Some(ctx.clone()),
            start_version: start,
            keys: vec![b"a".to_vec()],
            commit_version: commit_ts,
            ..Default::default()
        })
        .await;
    println!(
        "commit of {start} at {commit_ts}: {}; yet a's newest version is {:?}",
        match lost {
            Ok(_) => "answered".to_owned(),
            Err(status) => format!("transport error ({})", status.message()),
        },
        cluster.versions(b"a").first()
    );
    cluster.shutdown().await;
    Ok(())
}
