//! Transactions never lose a committed update: each rule of
//! txn.md's "Behaviour we require" that a lost update hid behind, end to end
//! against the simulated cluster (real gRPC on 127.0.0.1; lock TTLs expire on
//! the simulated TSO clock, moved with `advance_tso_clock`).

use std::time::Duration;

use crate::support::{client, client_with, cluster, optimistic, pessimistic, read};
use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::{self, Mutation, Op};
use tikv_plan::transaction::{as_key_error, HeartbeatOption};
use tikv_plan::{Config, Error, TimestampExt, Transaction, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

async fn write(client: &TransactionClient, key: &str, value: &str) {
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.put(key.to_owned(), value.to_owned()).await.unwrap();
    txn.commit().await.unwrap();
}

/// The locks left anywhere in the cluster.
fn all_locks(cluster: &SimCluster) -> Vec<kvrpcpb::LockInfo> {
    cluster.locks(b"", b"")
}

fn key_error_text(e: &Error) -> String {
    fn find(e: &Error) -> Option<String> {
        if let Some(k) = as_key_error(e) {
            return Some(format!("{k:?}"));
        }
        match e {
            Error::PessimisticLockError { inner, .. } => find(inner),
            Error::ExtractedErrors(es) | Error::MultipleKeyErrors(es) => es.iter().find_map(find),
            _ => None,
        }
    }
    find(e).unwrap_or_else(|| e.to_string())
}

/// The reproduction, no faults needed: a pessimistic transaction
/// whose lock expired and was resolved away must not take the key again at
/// a newer `for_update_ts` and overwrite the update committed in between.
#[tokio::test]
async fn a_lost_pessimistic_lock_is_not_retaken_and_the_newer_commit_survives() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    write(&client, "acct", "100").await;

    // A: reads the balance under a pessimistic lock, and is slow (no
    // heartbeat keeps the lock alive).
    let mut a = client
        .begin_with_options(pessimistic().heartbeat_option(HeartbeatOption::NoHeartbeat))
        .await
        .unwrap();
    assert_eq!(
        a.get_for_update("acct".to_owned()).await.unwrap(),
        Some(b"100".to_vec())
    );
    // A's lock outlives its TTL; B meets it, resolves it away and commits
    // a withdrawal computed from the same 100.
    cluster.advance_tso_clock(Duration::from_secs(30));
    let mut b = client.begin_with_options(optimistic()).await.unwrap();
    assert_eq!(
        b.get("acct".to_owned()).await.unwrap(),
        Some(b"100".to_vec())
    );
    b.put("acct".to_owned(), "90".to_owned()).await.unwrap();
    b.commit().await.unwrap();

    // A writes what it computed from its stale read: the key is not locked
    // again, so the prewrite's pessimistic check finds the lost lock.
    a.put("acct".to_owned(), "95".to_owned()).await.unwrap();
    let err = a.commit().await.unwrap_err();
    assert!(!err.is_undetermined(), "{err:?}");
    assert!(
        key_error_text(&err).contains("PessimisticLockNotFound"),
        "{err:?}"
    );
    // B's withdrawal survives; nothing is left locked.
    assert_eq!(read(&client, "acct").await, Some(b"90".to_vec()));
    assert!(all_locks(&cluster).is_empty(), "{:?}", all_locks(&cluster));
    cluster.shutdown().await;
}

/// `get_for_update` of a key already held answers from the lock's
/// `for_update_ts` without sending another `PessimisticLock`.
#[tokio::test]
async fn a_held_key_is_locked_once_and_read_at_its_lock() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    write(&client, "k", "1").await;
    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    txn.lock_keys(vec!["k".to_owned()]).await.unwrap();
    let locks = || -> u64 {
        cluster
            .store_ids()
            .into_iter()
            .map(|s| {
                cluster
                    .counters(s)
                    .count("kv_pessimistic_lock", tikv_sim::Outcome::Ok)
            })
            .sum()
    };
    let before = locks();
    assert_eq!(
        txn.get_for_update("k".to_owned()).await.unwrap(),
        Some(b"1".to_vec())
    );
    txn.put("k".to_owned(), "2".to_owned()).await.unwrap();
    txn.delete("k".to_owned()).await.unwrap();
    assert_eq!(locks(), before, "no second PessimisticLock for a held key");
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "k").await, None);
    cluster.shutdown().await;
}

/// `{insert a; delete a; put b}`: `a` is a `CheckNotExists` mutation that
/// takes no lock, so it must not be the primary (2PC).
#[tokio::test]
async fn a_key_inserted_and_deleted_is_never_the_primary() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.insert("a".to_owned(), "x".to_owned()).await.unwrap();
    txn.delete("a".to_owned()).await.unwrap();
    txn.put("b".to_owned(), "v".to_owned()).await.unwrap();
    let ts = txn.commit().await.unwrap().expect("a commit ts");
    assert_eq!(read(&client, "a").await, None);
    assert_eq!(read(&client, "b").await, Some(b"v".to_vec()));
    let versions = cluster.versions(b"b");
    assert_eq!(versions[0].commit_ts, ts.version(), "{versions:?}");
    assert!(all_locks(&cluster).is_empty(), "{:?}", all_locks(&cluster));
    cluster.shutdown().await;
}

/// The same with async commit: `commit()` returning `Ok` is final, also
/// after the locks' TTL expired and a reader resolves what is left.
#[tokio::test]
async fn an_async_commit_with_a_check_not_exists_key_stays_committed() {
    let cluster = cluster(&["c"]).await;
    let client = client(&cluster).await;
    // `a` sorts first (the old primary choice), `e` is in the second Region
    // and is inserted then deleted too (once a secondary without a lock).
    let mut txn = client
        .begin_with_options(optimistic().use_async_commit())
        .await
        .unwrap();
    txn.insert("a".to_owned(), "x".to_owned()).await.unwrap();
    txn.delete("a".to_owned()).await.unwrap();
    txn.put("b".to_owned(), "v".to_owned()).await.unwrap();
    txn.insert("e".to_owned(), "y".to_owned()).await.unwrap();
    txn.delete("e".to_owned()).await.unwrap();
    txn.put("f".to_owned(), "w".to_owned()).await.unwrap();
    let ts = txn.commit().await.unwrap().expect("a commit ts");
    cluster.advance_tso_clock(Duration::from_secs(60));
    for (key, value) in [("b", Some(b"v".to_vec())), ("f", Some(b"w".to_vec()))] {
        assert_eq!(read(&client, key).await, value, "{key}");
        let versions = cluster.versions(key.as_bytes());
        assert_eq!(versions[0].commit_ts, ts.version(), "{key}: {versions:?}");
    }
    assert_eq!(read(&client, "a").await, None);
    assert_eq!(read(&client, "e").await, None);
    assert!(all_locks(&cluster).is_empty(), "{:?}", all_locks(&cluster));
    cluster.shutdown().await;
}

/// Only existence checks: nothing is written, but the check still runs.
#[tokio::test]
async fn a_transaction_of_only_existence_checks_writes_nothing_and_still_checks() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.insert("n".to_owned(), "x".to_owned()).await.unwrap();
    txn.delete("n".to_owned()).await.unwrap();
    assert_eq!(txn.commit().await.unwrap(), None);
    assert_eq!(read(&client, "n").await, None);
    assert!(all_locks(&cluster).is_empty());

    // The key exists by the time of the check: the commit fails.
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.insert("n".to_owned(), "x".to_owned()).await.unwrap();
    txn.delete("n".to_owned()).await.unwrap();
    write(&client, "n", "there").await;
    let err = txn.commit().await.unwrap_err();
    assert!(
        key_error_text(&err).contains("already_exist")
            || matches!(err, Error::DuplicateKeyInsertion),
        "{err:?}"
    );
    assert_eq!(read(&client, "n").await, Some(b"there".to_vec()));
    cluster.shutdown().await;
}

/// A pessimistic transaction's primary is fixed only once its lock
/// succeeded: a failed first lock does not make its key the primary of what
/// is locked later.
#[tokio::test]
async fn a_failed_first_pessimistic_lock_does_not_fix_the_primary() {
    let cluster = cluster(&["m"]).await;
    let short = Config::default().with_request_deadline(Duration::from_millis(600));
    let client = client_with(&cluster, short).await;
    // Another live transaction holds `a`.
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.lock_keys(vec!["a".to_owned()]).await.unwrap();

    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    let err = txn.lock_keys(vec!["a".to_owned()]).await.unwrap_err();
    assert!(matches!(err, Error::PessimisticLockError { .. }), "{err:?}");
    txn.put("z".to_owned(), "v".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "z").await, Some(b"v".to_vec()));
    holder.rollback().await.unwrap();
    assert!(all_locks(&cluster).is_empty(), "{:?}", all_locks(&cluster));
    cluster.shutdown().await;
}

/// A failed `PessimisticLock` is rolled back with the `for_update_ts` it was
/// sent with: the piece that succeeded does not stay locked for its TTL.
#[tokio::test]
async fn a_failed_pessimistic_lock_releases_the_keys_it_took() {
    let cluster = cluster(&["m"]).await;
    let short = Config::default().with_request_deadline(Duration::from_millis(600));
    let client = client_with(&cluster, short).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.lock_keys(vec!["z".to_owned()]).await.unwrap();

    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    // `a` (first Region) locks, `z` (second Region) cannot.
    let err = txn
        .lock_keys(vec!["a".to_owned(), "z".to_owned()])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PessimisticLockError { .. }), "{err:?}");
    let left: Vec<Vec<u8>> = all_locks(&cluster)
        .into_iter()
        .filter(|l| l.lock_version == txn.start_timestamp().version())
        .map(|l| l.key)
        .collect();
    assert!(left.is_empty(), "left locked: {left:?}");
    txn.rollback().await.unwrap();
    holder.rollback().await.unwrap();
    cluster.shutdown().await;
}

/// After `commit()` ended undetermined, neither `rollback()` nor a second
/// `commit()` is accepted, and dropping the transaction does not panic.
#[tokio::test]
async fn an_undetermined_commit_is_terminal() {
    let cluster = cluster(&["m"]).await;
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(2));
    let client = client_with(&cluster, config).await;
    // The default drop check panics on an unfinished transaction.
    let mut txn = client
        .begin_with_options(TransactionOptions::new_optimistic())
        .await
        .unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    for store in cluster.store_ids() {
        for _ in 0..200 {
            cluster.drop_next_response(store, "kv_commit").unwrap();
        }
    }
    let err = txn.commit().await.unwrap_err();
    assert!(matches!(err, Error::UndeterminedError(_)), "{err:?}");

    let again = txn.commit().await.unwrap_err();
    assert!(matches!(again, Error::UndeterminedError(_)), "{again:?}");
    assert!(again.to_string().contains("undetermined"), "{again}");
    let rollback = txn.rollback().await.unwrap_err();
    assert!(
        matches!(rollback, Error::UndeterminedError(_)),
        "{rollback:?}"
    );
    drop(txn);

    // The primary's commit was applied: both keys are committed, once, at
    // one timestamp.
    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"2".to_vec()));
    let a = cluster.versions(b"a");
    let z = cluster.versions(b"z");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(z.len(), 1, "{z:?}");
    assert_eq!(a[0].commit_ts, z[0].commit_ts);
    cluster.shutdown().await;
}

/// Sends a prewrite of `key` by hand (a writer whose other prewrites are in
/// flight), with `primary` as its primary.
async fn prewrite_by_hand(cluster: &SimCluster, key: &str, primary: &str, start: u64, ttl: u64) {
    let region = cluster
        .region_for_key(&encode_bytes(key.as_bytes()))
        .unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    let mut tikv = cluster.tikv_client(store).await.unwrap();
    let response = tikv
        .kv_prewrite(kvrpcpb::PrewriteRequest {
            context: cluster.context(region.id, store),
            mutations: vec![Mutation {
                op: Op::Put as i32,
                key: key.as_bytes().to_vec(),
                value: format!("by-hand-{key}").into_bytes(),
                ..Default::default()
            }],
            primary_lock: primary.as_bytes().to_vec(),
            start_version: start,
            lock_ttl: ttl,
            min_commit_ts: start + 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(response.errors.is_empty(), "{response:?}");
}

/// A reader that meets a live lock whose primary has not arrived yet (its
/// prewrite is in flight) must not roll the primary back: it waits, and the
/// writer can still commit.
#[tokio::test]
async fn a_missing_primary_is_not_rolled_back_before_the_lock_expires() {
    let cluster = cluster(&["m"]).await;
    let short = Config::default().with_request_deadline(Duration::from_millis(500));
    let client = client_with(&cluster, short).await;
    let start = cluster.current_ts();
    // The secondary `z` is prewritten; the primary `a` is not yet.
    prewrite_by_hand(&cluster, "z", "a", start, 10_000).await;
    let mut snapshot = client.snapshot(
        client.current_timestamp().await.unwrap(),
        TransactionOptions::new_optimistic(),
    );
    let err = snapshot.get("z".to_owned()).await.unwrap_err();
    assert!(!err.is_undetermined(), "{err:?}");
    // The primary's prewrite arrives: it must still be accepted (a rollback
    // record on `a` would reject it).
    prewrite_by_hand(&cluster, "a", "a", start, 10_000).await;
    let a_versions = cluster.versions(b"a");
    assert!(
        a_versions.iter().all(|v| v.kind != "rollback"),
        "{a_versions:?}"
    );
    cluster.shutdown().await;
}

/// Once the lock met has expired, a missing primary is rolled back and the
/// reader goes on.
#[tokio::test]
async fn a_missing_primary_is_rolled_back_once_the_lock_expired() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    let start = cluster.current_ts();
    prewrite_by_hand(&cluster, "z", "a", start, 3_000).await;
    cluster.advance_tso_clock(Duration::from_secs(10));
    assert_eq!(read(&client, "z").await, None);
    assert!(all_locks(&cluster).is_empty(), "{:?}", all_locks(&cluster));
    cluster.shutdown().await;
}

/// `commit()` returns the commit ts the stores wrote, also when the
/// answers to the commit point's first attempts were lost.
#[tokio::test]
async fn the_returned_commit_ts_is_the_stored_one_under_dropped_prewrites() {
    let cluster = cluster(&["m"]).await;
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(5));
    let client = client_with(&cluster, config).await;
    for (round, options) in [
        optimistic().try_one_pc(),
        optimistic().use_async_commit(),
        pessimistic().try_one_pc(),
        pessimistic().use_async_commit(),
    ]
    .into_iter()
    .enumerate()
    {
        let keys: Vec<String> = if round % 2 == 0 {
            vec![format!("a{round}")]
        } else {
            vec![format!("a{round}"), format!("z{round}")]
        };
        let mut txn = client.begin_with_options(options).await.unwrap();
        for key in &keys {
            txn.put(key.clone(), format!("v{round}")).await.unwrap();
        }
        // The first answer to the prewrite on each key's leader is lost
        // after it was applied.
        let mut leaders: Vec<u64> = keys
            .iter()
            .map(|k| {
                let region = cluster.region_for_key(&encode_bytes(k.as_bytes())).unwrap();
                cluster.leader_of(region.id).unwrap().store_id
            })
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for store in leaders {
            cluster.drop_next_response(store, "kv_prewrite").unwrap();
        }
        let result = txn.commit().await;
        cluster.advance_tso_clock(Duration::from_secs(60));
        match result {
            Ok(ts) => {
                let ts = ts.expect("a commit ts").version();
                for key in &keys {
                    assert_eq!(
                        read(&client, key).await,
                        Some(format!("v{round}").into_bytes()),
                        "round {round}"
                    );
                    let versions = cluster.versions(key.as_bytes());
                    let stored: Vec<u64> = versions
                        .iter()
                        .filter(|v| v.kind != "rollback")
                        .map(|v| v.commit_ts)
                        .collect();
                    assert_eq!(stored, vec![ts], "round {round} key {key}: {versions:?}");
                }
            }
            Err(e) => {
                // Never a plain failure after a lost answer, and all or
                // nothing.
                assert!(e.is_undetermined(), "round {round}: {e:?}");
                let seen: Vec<bool> = {
                    let mut seen = Vec::new();
                    for key in &keys {
                        seen.push(read(&client, key).await.is_some());
                    }
                    seen
                };
                assert!(
                    seen.iter().all(|s| *s == seen[0]),
                    "round {round}: {seen:?}"
                );
            }
        }
    }
    cluster.shutdown().await;
}

/// Every store of `cluster` down (connections refused).
/// Every store down, each keeping its leaders (no election: no quorum
/// would be left for one anyway), so they lead again once up.
async fn all_stores_down(cluster: &SimCluster) {
    for store in cluster.store_ids() {
        cluster.store_down_cold(store).await.unwrap();
    }
}

async fn all_stores_up(cluster: &SimCluster) {
    for store in cluster.store_ids() {
        cluster.store_up(store).await.unwrap();
    }
}

/// A client whose calls give up quickly once every store is down.
async fn impatient_client(cluster: &SimCluster) -> TransactionClient {
    let config = Config::default()
        .with_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(200))
        .with_request_deadline(Duration::from_millis(800));
    client_with(cluster, config).await
}

#[tokio::test]
async fn a_transaction_whose_rollback_failed_on_a_fault_drops_without_panicking() {
    let cluster = cluster(&[]).await;
    let client = impatient_client(&cluster).await;
    // The default drop check: `CheckLevel::Panic`.
    let mut txn = client
        .begin_with_options(TransactionOptions::new_pessimistic())
        .await
        .unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    assert_eq!(
        all_locks(&cluster).len(),
        1,
        "the put took a pessimistic lock"
    );
    all_stores_down(&cluster).await;
    let e = txn.rollback().await.unwrap_err();
    assert!(
        !e.is_undetermined(),
        "a failed rollback is an ordinary error: {e:?}"
    );
    // The rollback was asked for: dropping the transaction is the caller's
    // intent, not a forgotten transaction, whatever the rollback returned.
    drop(txn);
    all_stores_up(&cluster).await;
    // The lock left behind is a reader's to resolve once its TTL is over.
    cluster.advance_tso_clock(Duration::from_secs(60));
    write(&client, "k", "w").await;
    assert_eq!(read(&client, "k").await, Some(b"w".to_vec()));
    assert!(all_locks(&cluster).is_empty());
}

#[tokio::test]
async fn a_failed_rollback_can_be_retried_and_releases_the_locks() {
    let cluster = cluster(&[]).await;
    let client = impatient_client(&cluster).await;
    let mut txn = client
        .begin_with_options(TransactionOptions::new_pessimistic())
        .await
        .unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    all_stores_down(&cluster).await;
    assert!(txn.rollback().await.is_err());
    all_stores_up(&cluster).await;
    txn.rollback().await.unwrap();
    assert!(
        all_locks(&cluster).is_empty(),
        "the retried rollback released the lock"
    );
    assert_eq!(
        txn.status(),
        tikv_plan::transaction::TransactionStatus::Rolledback
    );
}

/// The end of README's quick-start loop: commit, and on an ordinary
/// failure `txn.rollback().await?; return Err(e)`.
async fn readme_commit_or_roll_back(mut txn: Transaction) -> tikv_plan::Result<()> {
    match txn.commit().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_undetermined() => Err(e),
        Err(e) => {
            txn.rollback().await?;
            Err(e)
        }
    }
}

#[tokio::test]
async fn the_readme_rollback_pattern_survives_every_store_down() {
    for options in [
        TransactionOptions::new_optimistic(),
        TransactionOptions::new_pessimistic(),
    ] {
        let cluster = cluster(&[]).await;
        let client = impatient_client(&cluster).await;
        // The default drop check (`CheckLevel::Panic`); a pessimistic put
        // takes its lock while the stores are up.
        let mut txn = client.begin_with_options(options).await.unwrap();
        txn.put("account".to_owned(), "10".to_owned())
            .await
            .unwrap();
        all_stores_down(&cluster).await;
        // The commit fails, the rollback fails too, `?` returns its error
        // and drops the transaction: no panic.
        let e = readme_commit_or_roll_back(txn).await.unwrap_err();
        assert!(!e.is_undetermined(), "no prewrite was answered: {e:?}");
        all_stores_up(&cluster).await;
    }
}
