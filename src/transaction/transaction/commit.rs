//! Commit and its outcome: two-phase commit (the primary, then the
//! secondaries in the background), and what a prewrite's answers mean for
//! async commit and 1PC.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::{debug, warn};

use crate::pd::{PdClient, Timestamp};
use crate::proto::kvrpcpb;
use crate::request::plan::call_deadline;
use crate::request::{CollectError, CollectSingle, Plan, ResponseWithShard};
use crate::transaction::buffer::choose_primary;
use crate::transaction::requests::{as_key_error, new_commit_request};
use crate::transaction::TimestampExt;
use crate::{Error, Key, Result};

use super::prewrite::*;
use super::{bump, Transaction, TransactionStatus};

/// How many times a secondary commit is tried in the background.
pub(super) const SECONDARY_COMMIT_ATTEMPTS: u32 = 3;

impl<PdC: PdClient> Transaction<PdC> {
    /// Commits. Returns the commit timestamp (`None` when there was nothing
    /// to write). Returns once the commit point is durable; the remaining
    /// keys are committed in the background (readers resolve them from the
    /// primary meanwhile).
    ///
    /// Errors: [`Error::UndeterminedError`] when the commit point may have
    /// been applied without an answer (read the keys in a new transaction
    /// before retrying); any other error means the transaction did not
    /// commit, and its locks were rolled back.
    pub async fn commit(&mut self) -> Result<Option<Timestamp>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.end_requested = true;
            self.refuse_if_undetermined("commit")?;
            match self.status {
                TransactionStatus::Active | TransactionStatus::StartedCommit => {}
                // Nothing to write: done.
                TransactionStatus::ReadOnly => {
                    self.finish(TransactionStatus::Committed);
                    return Ok(None);
                }
                _ => return Err(Error::OperationAfterCommitError),
            }
            self.status = TransactionStatus::StartedCommit;
            if !self.buffer.has_mutations() {
                self.finish(TransactionStatus::Committed);
                return Ok(None);
            }
            let result = self.two_phase_commit().await;
            match &result {
                Ok(_) => self.finish(TransactionStatus::Committed),
                // Undetermined is terminal: no second commit (it could commit
                // the keys at a second timestamp), no rollback (it could undo
                // part of a committed transaction), no heartbeat.
                Err(e) if e.undetermined_anywhere() => {
                    self.undetermined = Some(e.to_string());
                    let _ = self.ended.send(true);
                }
                // Failed, its locks rolled back: the heartbeat stops, and a
                // retried commit starts a new one.
                Err(_) => {
                    let _ = self.ended.send(true);
                    self.ended = watch::channel(false).0;
                    self.heartbeat_started = false;
                }
            }
            result
        })
        .await
    }

    pub(super) async fn two_phase_commit(&mut self) -> Result<Option<Timestamp>> {
        let locked = &self.pessimistic_locked;
        let mutations = self.buffer.mutations(|k| locked.contains(k));
        let Some(primary) = choose_primary(self.buffer.primary_key(), &mutations) else {
            // Only existence checks (keys inserted and deleted again): no
            // lock, nothing to commit; a prewrite still checks them.
            return self.check_not_exists(mutations).await;
        };
        let Prewritten {
            responses,
            async_commit,
            one_pc,
            keys,
        } = self.prewrite(mutations, &primary).await?;
        // client-rust's fail point: the client stops after prewriting, as if
        // it had crashed there; the locks stay for others to resolve.
        fail::fail_point!("after-prewrite", |_| Err(Error::StringError(
            "failpoint: after-prewrite return error".to_owned()
        )));
        let start_ts = self.start_ts();
        let outcome = prewrite_outcome(&responses, async_commit, one_pc);
        debug!("transaction {start_ts}: prewrite outcome {outcome:?}");
        match outcome {
            PrewriteOutcome::OnePc(commit_ts) => Ok(Some(Timestamp::from_version(commit_ts))),
            PrewriteOutcome::AsyncCommit(commit_ts) => {
                // Committed at `commit_ts` already; write it down everywhere.
                self.commit_in_background(secondaries_to_commit(keys), commit_ts);
                Ok(Some(Timestamp::from_version(commit_ts)))
            }
            PrewriteOutcome::TwoPhase => {
                // Asked for async commit or 1PC: the transaction may be
                // committed already (see below), so failing to get a commit
                // timestamp says nothing about it.
                let mut commit_ts = self
                    .commit_primary(&primary, async_commit || one_pc)
                    .await?;
                if async_commit || one_pc {
                    // Asked for async commit or 1PC and answered as 2PC: a
                    // re-sent prewrite of a transaction already committed
                    // (by an earlier attempt whose answer was lost, or by a
                    // reader resolving it) answers so too, and the primary's
                    // commit then succeeds without writing. The primary's
                    // record holds the real commit ts.
                    commit_ts = self.committed_ts(&primary, commit_ts).await?;
                }
                let secondaries: Vec<Vec<u8>> = secondaries_to_commit(keys)
                    .into_iter()
                    .filter(|k| k.as_slice() != primary.as_bytes())
                    .collect();
                self.commit_in_background(secondaries, commit_ts);
                Ok(Some(Timestamp::from_version(commit_ts)))
            }
        }
    }

    /// The commit ts the primary's commit record holds (`CheckTxnStatus`,
    /// which neither rolls back nor pushes anything here). `assumed` is
    /// kept when TiKV does not name one.
    ///
    /// The primary is committed when this runs, so no failure here may
    /// read as "not committed": every one is undetermined. No PD call
    /// either: `assumed`, a timestamp just taken, serves as the current
    /// one (it only measures lock TTLs, and the primary holds no lock).
    pub(super) async fn committed_ts(&self, primary: &Key, assumed: u64) -> Result<u64> {
        let request = kvrpcpb::CheckTxnStatusRequest {
            primary_key: primary.as_bytes().to_vec(),
            lock_ts: self.start_ts(),
            caller_start_ts: 0,
            current_ts: assumed,
            rollback_if_not_exist: false,
            ..Default::default()
        };
        let response = self
            .shared
            .builder(request, &self.options.wire_tags)
            .retry_multi_region(self.region_backoff())
            .merge(CollectSingle)
            .extract_error()
            .plan()
            .execute()
            .await
            .map_err(|e| {
                // The primary is committed, at a timestamp we cannot name:
                // reported as undetermined (read the keys to learn the
                // state), and no secondary is committed at a guess —
                // readers resolve them from the primary's record.
                Error::UndeterminedError(Box::new(Error::StringError(format!(
                    "transaction {} is committed, but reading back its commit timestamp failed: {e}",
                    self.start_ts()
                ))))
            })?;
        if response.commit_version > 0 && response.commit_version != assumed {
            debug!(
                "transaction {}: committed at {} by an earlier attempt, not {assumed}",
                self.start_ts(),
                response.commit_version
            );
            return Ok(response.commit_version);
        }
        Ok(assumed)
    }

    /// Commits the primary at a fresh timestamp: the commit point.
    /// With `maybe_committed` (the prewrite may have committed it
    /// already), a commit timestamp PD does not give is undetermined.
    pub(super) async fn commit_primary(&self, primary: &Key, maybe_committed: bool) -> Result<u64> {
        let start_ts = self.start_ts();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let commit_ts = match self.shared.timestamp().await {
                Ok(ts) => ts.version(),
                Err(e) if maybe_committed => {
                    return Err(Error::UndeterminedError(Box::new(Error::StringError(
                        format!(
                            "transaction {start_ts} asked for async commit or 1PC and may be committed already (its prewrite was answered as two-phase), and getting a commit timestamp to settle it failed: {e}"
                        ),
                    ))))
                }
                Err(e) => return Err(e),
            };
            let request =
                new_commit_request(vec![primary.as_bytes().to_vec()], start_ts, commit_ts);
            let result = self
                .shared
                .builder(request, &self.options.wire_tags)
                .commit_point()
                .retry_multi_region(self.region_backoff())
                .merge(CollectError)
                .extract_error()
                .plan()
                .execute()
                .await;
            match result {
                Ok(_) => return Ok(commit_ts),
                Err(e) if e.is_undetermined() => return Err(undetermined(e)),
                // A reader pushed min_commit_ts above our commit ts: a
                // definite answer, nothing was written; try a later ts.
                Err(e)
                    if attempts < 3
                        && as_key_error(&e).is_some_and(|k| k.commit_ts_expired.is_some()) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Commits `keys` at `commit_ts` on a background task, a bounded number
    /// of times, counting the outcome. Readers that meet the locks first
    /// resolve them from the primary.
    pub(super) fn commit_in_background(&self, keys: Vec<Vec<u8>>, commit_ts: u64) {
        if keys.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let start_ts = self.start_ts();
        let backoff = self.region_backoff();
        let tags = Arc::clone(&self.options.wire_tags);
        shared
            .counters
            .secondary_commits_pending
            .fetch_add(1, Ordering::Relaxed);
        let bound = shared.request_deadline;
        tokio::spawn(async move {
            let mut last = None;
            for _ in 0..SECONDARY_COMMIT_ATTEMPTS {
                let request = new_commit_request(keys.clone(), start_ts, commit_ts);
                let plan = shared
                    .builder(request, &tags)
                    .retry_multi_region(backoff.clone())
                    .merge(CollectError)
                    .extract_error()
                    .plan();
                match tokio::time::timeout(bound, plan.execute()).await {
                    Ok(Ok(_)) => {
                        last = None;
                        break;
                    }
                    Ok(Err(e)) => last = Some(e.to_string()),
                    Err(_) => last = Some(format!("no answer within {bound:?}")),
                }
            }
            match last {
                None => bump(&shared.counters.secondary_commits),
                Some(e) => {
                    bump(&shared.counters.secondary_commit_failures);
                    warn!(
                        "committing the secondaries of transaction {start_ts} at {commit_ts} failed: {e}; \
                         the transaction is committed and readers resolve the remaining locks"
                    );
                }
            }
            shared
                .counters
                .secondary_commits_pending
                .fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// The keys whose locks the commit goes on to commit after its commit
/// point: all of them, except where client-rust's fail point
/// `before-commit-secondary` (with the `integration-tests` feature, as in
/// client-rust) keeps only the first `percent`% of the transaction's keys
/// (none: the commit stops there). The transaction is committed either way;
/// readers resolve what is left.
#[cfg(feature = "integration-tests")]
fn secondaries_to_commit(keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    fail::fail_point!("before-commit-secondary", |percent: Option<String>| {
        let percent = percent.and_then(|p| p.trim().parse::<usize>().ok());
        let keep = keys.len() * percent.unwrap_or(100).min(100) / 100;
        keys.iter().take(keep).cloned().collect()
    });
    keys
}

/// The keys whose locks the commit goes on to commit after its commit
/// point: all of them.
#[cfg(not(feature = "integration-tests"))]
fn secondaries_to_commit(keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    keys
}

/// What the prewrite answers mean for the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PrewriteOutcome {
    /// 1PC succeeded: committed at this ts.
    OnePc(u64),
    /// Async commit succeeded: committed at the largest `min_commit_ts`.
    AsyncCommit(u64),
    /// Commit the primary (2PC, or TiKV fell back from async commit or 1PC:
    /// a `min_commit_ts` or `one_pc_commit_ts` of 0).
    TwoPhase,
}

pub(super) fn prewrite_outcome<S>(
    responses: &[ResponseWithShard<kvrpcpb::PrewriteResponse, S>],
    async_commit: bool,
    one_pc: bool,
) -> PrewriteOutcome {
    if one_pc && !responses.is_empty() && responses.iter().all(|r| r.0.one_pc_commit_ts > 0) {
        if let [only] = responses {
            return PrewriteOutcome::OnePc(only.0.one_pc_commit_ts);
        }
    }
    if async_commit && !responses.is_empty() && responses.iter().all(|r| r.0.min_commit_ts > 0) {
        let ts = responses
            .iter()
            .map(|r| r.0.min_commit_ts)
            .max()
            .unwrap_or(0);
        return PrewriteOutcome::AsyncCommit(ts);
    }
    PrewriteOutcome::TwoPhase
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(
        min_commit_ts: u64,
        one_pc_commit_ts: u64,
    ) -> ResponseWithShard<kvrpcpb::PrewriteResponse, ()> {
        ResponseWithShard(
            kvrpcpb::PrewriteResponse {
                min_commit_ts,
                one_pc_commit_ts,
                ..Default::default()
            },
            (),
        )
    }

    #[test]
    fn zero_timestamps_mean_fallback_to_two_phase() {
        assert_eq!(
            prewrite_outcome(&[answer(10, 0), answer(12, 0)], true, false),
            PrewriteOutcome::AsyncCommit(12)
        );
        assert_eq!(
            prewrite_outcome(&[answer(10, 0), answer(0, 0)], true, false),
            PrewriteOutcome::TwoPhase
        );
        assert_eq!(
            prewrite_outcome(&[answer(0, 9)], false, true),
            PrewriteOutcome::OnePc(9)
        );
        assert_eq!(
            prewrite_outcome(&[answer(0, 0)], false, true),
            PrewriteOutcome::TwoPhase
        );
        // 1PC over two shards would be two commits: never reported as 1PC.
        assert_eq!(
            prewrite_outcome(&[answer(0, 9), answer(0, 9)], false, true),
            PrewriteOutcome::TwoPhase
        );
    }
}
