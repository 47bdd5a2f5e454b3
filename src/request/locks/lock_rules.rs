//! The pure rules for what TiKV's lock-status answers mean, shared by the
//! transactional client's lock resolver and GC's
//! [`LockResolver`](super::lock_resolver::LockResolver): lock expiry on the TSO's
//! physical clock, and what an async-commit transaction's secondaries say
//! (with the missing-lock rule of [txn.md, "Known upstream
//! defects"](crate::spec::txn#known-upstream-defects-not-to-copy-client-rust-040)).

use crate::proto::kvrpcpb;

/// The physical milliseconds of a timestamp version.
pub fn physical_ms(version: u64) -> u64 {
    version >> 18
}

/// How long until a lock taken at `lock_version` with `ttl_ms` expires, as
/// of `current_version` (0 when it has expired), on the TSO's physical
/// clock, as TiKV measures it.
pub fn lock_until_expired_ms(lock_version: u64, ttl_ms: u64, current_version: u64) -> u64 {
    // A wire TTL can be anything (u64::MAX included): it must not wrap
    // into "expired".
    physical_ms(lock_version)
        .saturating_add(ttl_ms)
        .saturating_sub(physical_ms(current_version))
}

/// What the secondaries of an async-commit transaction say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecondariesOutcome {
    /// A secondary is committed: the transaction committed at this ts.
    Committed(u64),
    /// A secondary has neither lock nor commit record (TiKV has now
    /// written a rollback there), so the transaction can never commit.
    RolledBack,
    /// Every secondary is locked by an async-commit prewrite: the
    /// transaction is committed at the largest `min_commit_ts`.
    AllLocked(u64),
    /// Some lock is not an async-commit lock or has no `min_commit_ts`
    /// (TiKV fell back to 2PC): the primary decides, as in 2PC.
    FellBack,
}

/// The missing-lock rule: compares, per Region, the keys sent with the
/// locks found ([txn.md, "Known upstream
/// defects"](crate::spec::txn#known-upstream-defects-not-to-copy-client-rust-040):
/// client-rust never does), and folds in the primary's own `min_commit_ts`.
pub fn secondaries_outcome(
    answers: &[(Vec<Vec<u8>>, kvrpcpb::CheckSecondaryLocksResponse)],
    primary_min_commit_ts: u64,
) -> SecondariesOutcome {
    let mut commit_ts = primary_min_commit_ts;
    let mut fell_back = primary_min_commit_ts == 0;
    for (keys, answer) in answers {
        if answer.commit_ts > 0 {
            return SecondariesOutcome::Committed(answer.commit_ts);
        }
        let found = |k: &Vec<u8>| answer.locks.iter().any(|l| &l.key == k);
        if !keys.iter().all(found) {
            return SecondariesOutcome::RolledBack;
        }
        for lock in &answer.locks {
            if !lock.use_async_commit || lock.min_commit_ts == 0 {
                fell_back = true;
            }
            commit_ts = commit_ts.max(lock.min_commit_ts);
        }
    }
    if fell_back {
        SecondariesOutcome::FellBack
    } else {
        SecondariesOutcome::AllLocked(commit_ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(key: &[u8], async_commit: bool, min_commit_ts: u64) -> kvrpcpb::LockInfo {
        kvrpcpb::LockInfo {
            key: key.to_vec(),
            use_async_commit: async_commit,
            min_commit_ts,
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_secondary_means_rolled_back_never_committed() {
        let answers = vec![(
            vec![b"a".to_vec(), b"b".to_vec()],
            kvrpcpb::CheckSecondaryLocksResponse {
                locks: vec![lock(b"a", true, 50)],
                ..Default::default()
            },
        )];
        assert_eq!(
            secondaries_outcome(&answers, 40),
            SecondariesOutcome::RolledBack
        );
    }

    #[test]
    fn all_locked_commits_at_the_largest_min_commit_ts() {
        let answers = vec![
            (
                vec![b"a".to_vec()],
                kvrpcpb::CheckSecondaryLocksResponse {
                    locks: vec![lock(b"a", true, 50)],
                    ..Default::default()
                },
            ),
            (
                vec![b"b".to_vec()],
                kvrpcpb::CheckSecondaryLocksResponse {
                    locks: vec![lock(b"b", true, 70)],
                    ..Default::default()
                },
            ),
        ];
        assert_eq!(
            secondaries_outcome(&answers, 60),
            SecondariesOutcome::AllLocked(70)
        );
        // A zero min_commit_ts is a fallback to 2PC, never "commit at 0".
        assert_eq!(
            secondaries_outcome(&answers, 0),
            SecondariesOutcome::FellBack
        );
        let committed = vec![(
            vec![b"a".to_vec()],
            kvrpcpb::CheckSecondaryLocksResponse {
                commit_ts: 90,
                ..Default::default()
            },
        )];
        assert_eq!(
            secondaries_outcome(&committed, 60),
            SecondariesOutcome::Committed(90)
        );
    }
}
