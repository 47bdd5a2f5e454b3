//! The commit point through the mock (no sockets): a lost answer to the
//! primary's commit stays undetermined across voter fallback, and a
//! definite answer from the voter that accepts clears it.
#![cfg(feature = "mock")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{accept, client_timeout, region_error, three_voters};
use tikv_plan::mock;
use tikv_plan::proto::{errorpb, kvrpcpb};
use tikv_plan::{
    Backoff, CheckLevel, Config, Error, RetryOptions, TransactionClient, TransactionOptions,
};

fn config() -> Config {
    Config::default()
        .with_region_backoff(Backoff::no_jitter_backoff(1, 4, 4))
        .with_request_deadline(Duration::from_secs(2))
}

fn not_leader_hinting(leader: u64, store: u64) -> errorpb::Error {
    errorpb::Error {
        not_leader: Some(errorpb::NotLeader {
            region_id: 1,
            leader: Some(mock::voter(leader, store)),
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_lost_primary_commit_stays_undetermined_across_voter_fallback() {
    let pd = three_voters();
    pd.set_dispatch_hook(|peer, request| {
        if request.as_any().is::<kvrpcpb::CommitRequest>() {
            // The leader receives the commit but its answer never comes;
            // the other voters say the leader is peer 11.
            return if peer.id == 11 {
                client_timeout()
            } else {
                region_error(request, not_leader_hinting(11, 1))
            };
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let options = TransactionOptions::new_optimistic().drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(matches!(err, Error::UndeterminedError(_)), "{err:?}");
    let commits: Vec<u64> = pd
        .dispatch_log()
        .iter()
        .filter(|d| d.label == "kv_commit")
        .map(|d| d.peer.id)
        .collect();
    assert!(commits.contains(&11), "{commits:?}");
    assert!(
        commits.iter().any(|p| *p != 11),
        "the voters were tried: {commits:?}"
    );
}

#[tokio::test]
async fn a_definite_answer_after_a_lost_one_clears_the_flag() {
    let pd = three_voters();
    let leader_commits = Arc::new(AtomicUsize::new(0));
    let seen = leader_commits.clone();
    pd.set_dispatch_hook(move |peer, request| {
        if request.as_any().is::<kvrpcpb::CommitRequest>() && peer.id == 11 {
            seen.fetch_add(1, Ordering::SeqCst);
            return client_timeout();
        }
        // Voter 12 accepts the commit as the new leader.
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    assert!(txn.commit().await.unwrap().is_some());
    assert_eq!(leader_commits.load(Ordering::SeqCst), 1);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
}

/// Every prewrite carries `min_commit_ts = start_ts + 1`, so a reader can
/// push the commit ts above its own start ts instead of waiting for the
/// lock; an optimistic primary's TTL covers the wait for its first
/// heartbeat.
#[tokio::test]
async fn prewrites_let_readers_push_and_ttls_outlast_the_first_heartbeat() {
    let pd = three_voters();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    pd.set_dispatch_hook(move |peer, request| {
        if let Some(p) = request.as_any().downcast_ref::<kvrpcpb::PrewriteRequest>() {
            log.lock()
                .unwrap()
                .push((p.start_version, p.min_commit_ts, p.lock_ttl));
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    for options in [
        TransactionOptions::new_optimistic(),
        TransactionOptions::new_pessimistic(),
    ] {
        let mut txn = client
            .begin_with_options(options.drop_check(CheckLevel::None))
            .await
            .unwrap();
        txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
        txn.commit().await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (start, min_commit_ts, ttl) in seen {
        assert_eq!(min_commit_ts, start + 1);
        assert!(ttl >= tikv_plan::transaction::DEFAULT_LOCK_TTL, "{ttl}");
    }
}

/// A commit that takes longer than half the optimistic lock TTL (3 s) sends
/// a heartbeat before the primary's lock can expire, not only after the
/// configured 10 s interval.
#[tokio::test(start_paused = true)]
async fn a_slow_optimistic_commit_heartbeats_before_its_lock_expires() {
    let pd = three_voters();
    let commits = Arc::new(AtomicUsize::new(0));
    let beats = Arc::new(std::sync::Mutex::new(Vec::new()));
    let prewritten = Arc::new(std::sync::Mutex::new(None));
    let (c, b, p) = (commits.clone(), beats.clone(), prewritten.clone());
    pd.set_dispatch_hook(move |peer, request| {
        let now = tokio::time::Instant::now();
        let any = request.as_any();
        if let Some(pw) = any.downcast_ref::<kvrpcpb::PrewriteRequest>() {
            *p.lock().unwrap() = Some((now, pw.lock_ttl));
        }
        if any.is::<kvrpcpb::TxnHeartBeatRequest>() {
            b.lock().unwrap().push(now);
        }
        // The first commits meet a Region in a merge: retried after a
        // backoff.
        if any.is::<kvrpcpb::CommitRequest>() && c.fetch_add(1, Ordering::SeqCst) < 3 {
            return region_error(
                request,
                errorpb::Error {
                    proposal_in_merging_mode: Some(errorpb::ProposalInMergingMode::default()),
                    ..Default::default()
                },
            );
        }
        accept(peer, request)
    });
    let config = Config::default().with_request_deadline(Duration::from_secs(30));
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config);
    let slow = Backoff::no_jitter_backoff(1000, 1000, 10);
    let mut txn = client
        .begin_with_options(
            TransactionOptions::new_optimistic()
                .drop_check(CheckLevel::None)
                .retry_options(RetryOptions::new(slow.clone(), slow)),
        )
        .await
        .unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    let (at, ttl) = prewritten.lock().unwrap().expect("a prewrite");
    let beats = beats.lock().unwrap().clone();
    let first = beats
        .first()
        .copied()
        .expect("a heartbeat during the slow commit");
    assert!(
        first < at + Duration::from_millis(ttl),
        "first heartbeat {:?} after the prewrite, TTL {ttl} ms",
        first - at
    );
}

/// When TiKV answers a 1PC prewrite as 2PC after an earlier attempt's answer
/// was lost (a re-sent prewrite of a transaction that attempt committed),
/// the primary's commit succeeds without writing: `commit()` returns the
/// commit ts on the primary's record, not the one it asked for.
#[tokio::test]
async fn a_fallback_after_a_lost_one_pc_answer_returns_the_stored_commit_ts() {
    const STORED: u64 = 777;
    let pd = three_voters();
    let prewrites = Arc::new(AtomicUsize::new(0));
    let seen = prewrites.clone();
    pd.set_dispatch_hook(move |peer, request| {
        let any = request.as_any();
        if any.is::<kvrpcpb::PrewriteRequest>() {
            // The first answer is lost after the store applied it (and
            // committed at STORED); the re-sent one says "2PC".
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                return client_timeout();
            }
            return Ok(Box::new(kvrpcpb::PrewriteResponse::default()));
        }
        if any.is::<kvrpcpb::CheckTxnStatusRequest>() {
            return Ok(Box::new(kvrpcpb::CheckTxnStatusResponse {
                commit_version: STORED,
                ..Default::default()
            }));
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let mut txn = client
        .begin_with_options(
            TransactionOptions::new_optimistic()
                .try_one_pc()
                .drop_check(CheckLevel::None),
        )
        .await
        .unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let ts = txn.commit().await.unwrap().expect("a commit ts");
    assert_eq!(prewrites.load(Ordering::SeqCst), 2);
    assert_eq!(tikv_plan::TimestampExt::version(&ts), STORED);
}

/// Two Regions, `[.., m)` (id 1) and `[m, ..)` (id 2) as transactions
/// see them (split at an encoded key), on the same three stores.
fn two_regions() -> Arc<mock::MockPdClient> {
    let peers = |base: u64| [base + 1, base + 2, base + 3].map(|id| mock::voter(id, id % 10));
    let m = tikv_plan::codec::encode_bytes(b"m");
    Arc::new(mock::MockPdClient::new(vec![
        mock::region(1, b"", &m, &peers(10), Some(11)),
        mock::region(2, &m, b"", &peers(20), Some(21)),
    ]))
}

/// A prewrite's answer: a write conflict on `key`.
fn prewrite_conflict(key: &[u8]) -> crate::common::Answer {
    Ok(Box::new(kvrpcpb::PrewriteResponse {
        errors: vec![kvrpcpb::KeyError {
            conflict: Some(kvrpcpb::WriteConflict {
                key: key.to_vec(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }))
}

/// Commits `a` and `z` (two Regions) with `options`, every store
/// accepting; PD stops giving timestamps once a request of type `R` is
/// sent.
async fn commit_cutting_pd_at<R: 'static>(
    options: TransactionOptions,
) -> (
    Arc<mock::MockPdClient>,
    tikv_plan::Result<Option<tikv_plan::Timestamp>>,
) {
    let pd = two_regions();
    let cut = pd.clone();
    pd.set_dispatch_hook(move |peer, request| {
        if request.as_any().is::<R>() {
            cut.fail_timestamps(true);
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let mut txn = client
        .begin_with_options(options.drop_check(CheckLevel::None))
        .await
        .unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    let committed = txn.commit().await;
    (pd, committed)
}

/// Once the primary's commit succeeded the transaction is committed: a
/// 1PC or async-commit transaction over two Regions (prewritten as 2PC)
/// reads back its commit ts without asking PD for a timestamp, so a PD
/// that stops answering right then cannot turn the commit into a plain
/// failure (which invites a rollback under a committed primary).
#[tokio::test]
async fn a_committed_primary_is_not_reported_failed_when_pd_stops_answering() {
    for options in [
        TransactionOptions::new_optimistic().try_one_pc(),
        TransactionOptions::new_optimistic().use_async_commit(),
    ] {
        // The primary commits; from now on PD is cut off.
        let (pd, committed) = commit_cutting_pd_at::<kvrpcpb::CommitRequest>(options).await;
        assert!(committed.is_ok(), "{committed:?}");
        assert!(pd.dispatch_log().iter().any(|d| d.label == "kv_commit"));
    }
}

/// A failed prewrite is rolled back primary first: when the primary's
/// rollback fails (here TiKV says it committed), the other keys are not
/// rolled back under it; readers settle them from the primary's record.
#[tokio::test]
async fn a_rollback_whose_primary_fails_leaves_the_secondaries_alone() {
    let pd = two_regions();
    pd.set_dispatch_hook(|peer, request| {
        let any = request.as_any();
        let region = request.context().map_or(0, |c| c.region_id);
        if any.is::<kvrpcpb::PrewriteRequest>() && region == 2 {
            return prewrite_conflict(b"z");
        }
        if any.is::<kvrpcpb::BatchRollbackRequest>() && region == 1 {
            return Ok(Box::new(kvrpcpb::BatchRollbackResponse {
                error: Some(kvrpcpb::KeyError {
                    abort: "transaction already committed".to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            }));
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let options = TransactionOptions::new_optimistic().drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(!matches!(err, Error::UndeterminedError(_)), "{err:?}");
    let rollbacks: Vec<u64> = pd
        .dispatch_log()
        .iter()
        .filter(|d| d.label == "kv_batch_rollback")
        .map(|d| d.context.region_id)
        .collect();
    assert_eq!(rollbacks, [1], "only the primary's Region is rolled back");
    // Not rolled back, so `rollback()` keeps failing (and trying the
    // primary) rather than reporting a committed transaction rolled back.
    assert!(txn.rollback().await.is_err());
    assert!(txn.rollback().await.is_err());
    let primary_rollbacks = pd
        .dispatch_log()
        .iter()
        .filter(|d| d.label == "kv_batch_rollback")
        .count();
    assert_eq!(primary_rollbacks, 3);
}

/// A transaction that asked for async commit or 1PC and was answered as
/// two-phase may be committed already (a re-sent prewrite of a committed
/// transaction can answer so): a commit timestamp PD does not give then
/// leaves the outcome undetermined. A plain two-phase transaction, which
/// cannot be, fails plainly.
#[tokio::test]
async fn no_commit_timestamp_after_a_two_phase_answer_to_async_commit_is_undetermined() {
    for (options, undetermined) in [
        (
            TransactionOptions::new_optimistic().use_async_commit(),
            true,
        ),
        (TransactionOptions::new_optimistic().try_one_pc(), true),
        (TransactionOptions::new_optimistic(), false),
    ] {
        // Prewritten (answered as two-phase); PD goes away.
        let (pd, committed) = commit_cutting_pd_at::<kvrpcpb::PrewriteRequest>(options).await;
        let err = committed.unwrap_err();
        assert_eq!(
            matches!(err, Error::UndeterminedError(_)),
            undetermined,
            "{err:?}"
        );
        assert!(!pd.dispatch_log().iter().any(|d| d.label == "kv_commit"));
    }
}

/// A key inserted and deleted again is only checked (`CheckNotExists`),
/// with no lock: async commit would count the transaction committed
/// without it, and a reader could commit the transaction before that
/// check fails; and a re-sent 1PC or async-commit prewrite of a committed
/// transaction is recognised only through the failing key's commit
/// record, which such a key never has. Such a transaction is prewritten
/// for two phases.
#[tokio::test]
async fn a_transaction_with_a_checked_only_key_does_not_use_async_commit() {
    let pd = two_regions();
    let async_prewrites = Arc::new(AtomicUsize::new(0));
    let prewrites = Arc::new(AtomicUsize::new(0));
    let (seen_async, seen) = (async_prewrites.clone(), prewrites.clone());
    pd.set_dispatch_hook(move |peer, request| {
        if let Some(prewrite) = request.as_any().downcast_ref::<kvrpcpb::PrewriteRequest>() {
            seen.fetch_add(1, Ordering::SeqCst);
            if prewrite.use_async_commit || prewrite.try_one_pc {
                seen_async.fetch_add(1, Ordering::SeqCst);
            }
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let options = TransactionOptions::new_optimistic()
        .use_async_commit()
        .drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options.clone()).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.insert("z".to_owned(), "2".to_owned()).await.unwrap();
    txn.delete("z".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(prewrites.load(Ordering::SeqCst), 2);
    assert_eq!(async_prewrites.load(Ordering::SeqCst), 0);
    // 1PC, with both keys in one Region: the same.
    let one_pc = TransactionOptions::new_optimistic()
        .try_one_pc()
        .drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(one_pc).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.insert("b".to_owned(), "2".to_owned()).await.unwrap();
    txn.delete("b".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(prewrites.load(Ordering::SeqCst), 3);
    assert_eq!(async_prewrites.load(Ordering::SeqCst), 0);
    assert!(pd.dispatch_log().iter().any(|d| d.label == "kv_commit"));
    // Without such a key, the same transaction uses async commit.
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(async_prewrites.load(Ordering::SeqCst), 2);
}

/// Only the shard whose attempt was lost is undetermined: when that
/// shard's re-sent prewrite succeeds and another shard, never in doubt,
/// meets a conflict, the transaction can never commit (that shard holds
/// no lock of it), so `commit()` fails plainly and rolls back.
#[tokio::test]
async fn a_conflict_in_a_shard_never_in_doubt_is_a_plain_failure() {
    let pd = two_regions();
    let lost = Arc::new(AtomicUsize::new(0));
    let seen = lost.clone();
    pd.set_dispatch_hook(move |peer, request| {
        let region = request.context().map_or(0, |c| c.region_id);
        if request.as_any().is::<kvrpcpb::PrewriteRequest>() {
            if region == 1 && seen.fetch_add(1, Ordering::SeqCst) == 0 {
                return client_timeout();
            }
            if region == 2 {
                return prewrite_conflict(b"z");
            }
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let options = TransactionOptions::new_optimistic()
        .use_async_commit()
        .drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(!matches!(err, Error::UndeterminedError(_)), "{err:?}");
    assert!(lost.load(Ordering::SeqCst) >= 2, "region 1 was sent again");
    assert!(pd
        .dispatch_log()
        .iter()
        .any(|d| d.label == "kv_batch_rollback"));
}

#[tokio::test]
async fn every_resent_attempt_is_marked_a_retry_and_the_first_is_not() {
    let pd = three_voters();
    // What each prewrite attempt said about itself, in order.
    let flags = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = flags.clone();
    pd.set_dispatch_hook(move |peer, request| {
        if let Some(prewrite) = request.as_any().downcast_ref::<kvrpcpb::PrewriteRequest>() {
            let retry = prewrite
                .context
                .as_ref()
                .is_some_and(|c| c.is_retry_request);
            let mut flags = seen.lock().unwrap_or_else(|e| e.into_inner());
            flags.push(retry);
            // The leader's first answer is lost: the prewrite goes again
            // (a prewrite is safe to re-send), to the next voter.
            if flags.len() == 1 {
                return client_timeout();
            }
        }
        accept(peer, request)
    });
    let client = TransactionClient::new_with_pd_client(pd.clone(), &config());
    let options = TransactionOptions::new_pessimistic().drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    let flags = flags.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(flags.len() >= 2, "{flags:?}");
    assert!(!flags[0], "the first attempt is no retry: {flags:?}");
    assert!(
        flags[1..].iter().all(|f| *f),
        "every later one is: {flags:?}"
    );
}
