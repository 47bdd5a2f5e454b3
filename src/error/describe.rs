//! Short human descriptions of the errors TiKV sends: what [`Error`](super::Error)'s
//! messages say about a key error or a Region error.

use crate::proto::{errorpb, kvrpcpb};

/// A short human description of a key error.
pub fn describe_key_error(e: &kvrpcpb::KeyError) -> String {
    let key = |k: &[u8]| crate::Key::from(k.to_vec());
    if let Some(lock) = &e.locked {
        format!(
            "key {:?} is locked by transaction {} (primary {:?}, TTL {} ms)",
            key(&lock.key),
            lock.lock_version,
            key(&lock.primary_lock),
            lock.lock_ttl
        )
    } else if let Some(c) = &e.conflict {
        format!(
            "write conflict on key {:?}: transaction {} conflicts with a write committed at {} by transaction {}; retry the transaction",
            key(&c.key),
            c.start_ts,
            c.conflict_commit_ts,
            c.conflict_ts
        )
    } else if let Some(a) = &e.already_exist {
        format!(
            "key {:?} already exists, so it cannot be inserted",
            key(&a.key)
        )
    } else if let Some(d) = &e.deadlock {
        format!(
            "deadlock: waiting for the lock on {:?} held by transaction {}; retry the transaction",
            key(&d.lock_key),
            d.lock_ts
        )
    } else if let Some(t) = &e.txn_not_found {
        format!(
            "transaction {} was not found at its primary {:?}: it was rolled back",
            t.start_ts,
            key(&t.primary_key)
        )
    } else if let Some(x) = &e.commit_ts_expired {
        format!(
            "commit ts {} of transaction {} is below the lock's min_commit_ts {}",
            x.attempted_commit_ts, x.start_ts, x.min_commit_ts
        )
    } else if let Some(x) = &e.commit_ts_too_large {
        format!(
            "the commit ts {} the store calculated exceeds the transaction's max_commit_ts",
            x.commit_ts
        )
    } else if let Some(x) = &e.assertion_failed {
        let wanted = kvrpcpb::Assertion::try_from(x.assertion)
            .map(|a| a.as_str_name())
            .unwrap_or("an unknown assertion");
        format!(
            "assertion {wanted} of transaction {} failed on key {:?} (a version started at {} and committed at {} is there)",
            x.start_ts,
            key(&x.key),
            x.existing_start_ts,
            x.existing_commit_ts
        )
    } else if let Some(x) = &e.primary_mismatch {
        let lock = x.lock_info.clone().unwrap_or_default();
        format!(
            "key {:?} is not the primary of transaction {} (its primary is {:?})",
            key(&lock.key),
            lock.lock_version,
            key(&lock.primary_lock)
        )
    } else if !e.retryable.is_empty() {
        format!("retryable key error: {}", e.retryable)
    } else if !e.abort.is_empty() {
        format!("aborted: {}", e.abort)
    } else {
        "key error".to_owned()
    }
}

/// A short human description of a Region error: its kind and message.
pub fn describe_region_error(e: &errorpb::Error) -> String {
    let kind = if let Some(nl) = &e.not_leader {
        match &nl.leader {
            Some(l) => format!(
                "not leader (leader is peer {} on store {})",
                l.id, l.store_id
            ),
            None => "not leader (leader unknown)".to_owned(),
        }
    } else if e.region_not_found.is_some() {
        "region not found".to_owned()
    } else if e.key_not_in_region.is_some() {
        "key not in region".to_owned()
    } else if e.epoch_not_match.is_some() {
        "epoch not match".to_owned()
    } else if let Some(b) = &e.server_is_busy {
        format!(
            "server is busy (reason {:?}, estimated wait {} ms)",
            b.reason, b.estimated_wait_ms
        )
    } else if e.stale_command.is_some() {
        "stale command".to_owned()
    } else if e.store_not_match.is_some() {
        "store not match".to_owned()
    } else if e.raft_entry_too_large.is_some() {
        "raft entry too large: make the request smaller".to_owned()
    } else if e.max_timestamp_not_synced.is_some() {
        "max timestamp not synced".to_owned()
    } else if e.read_index_not_ready.is_some() {
        "read index not ready".to_owned()
    } else if e.proposal_in_merging_mode.is_some() {
        "proposal in merging mode".to_owned()
    } else if e.data_is_not_ready.is_some() {
        "data is not ready".to_owned()
    } else if e.region_not_initialized.is_some() {
        "region not initialized".to_owned()
    } else if e.disk_full.is_some() {
        "disk full".to_owned()
    } else if e.recovery_in_progress.is_some() {
        "recovery in progress".to_owned()
    } else if e.flashback_in_progress.is_some() {
        "flashback in progress".to_owned()
    } else if e.flashback_not_prepared.is_some() {
        "flashback not prepared".to_owned()
    } else if e.is_witness.is_some() {
        "peer is a witness".to_owned()
    } else if e.mismatch_peer_id.is_some() {
        "mismatch peer id".to_owned()
    } else if e.bucket_version_not_match.is_some() {
        "bucket version not match".to_owned()
    } else {
        "unrecognised region error".to_owned()
    };
    if e.message.is_empty() {
        kind
    } else {
        format!("{kind}: {}", e.message)
    }
}
