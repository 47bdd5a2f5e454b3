//! Pessimistic locking (`get_for_update`, `batch_get_for_update`,
//! `lock_keys`): locks taken at a `for_update_ts`, retried at a fresh one
//! after a write conflict, and released again when a lock request fails.

use std::sync::Arc;

use tracing::{debug, warn};

use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::request::plan::call_deadline;
use crate::request::{CollectPieces, Plan, ResponseWithShard};
use crate::transaction::buffer::BufferedRead;
use crate::transaction::options::DEFAULT_LOCK_TTL;
use crate::transaction::requests::{as_key_error, LockItem};
use crate::transaction::TimestampExt;
use crate::{Error, Key, KvPair, Result, Value};

use super::Transaction;

/// How many times a pessimistic lock is tried at a fresh `for_update_ts`
/// after write conflicts (TiDB's `pessimistic-txn.max-retry-count`). Under
/// TiKV's lock waiting every waiter woken by a release gets a write
/// conflict, so a hot key needs many; the call's deadline bounds them too.
pub(super) const PESSIMISTIC_LOCK_ATTEMPTS: u32 = 256;

/// True for a write conflict, alone or among several errors: the key
/// errors of one request (`MultipleKeyErrors`, as when every Region of a
/// lock reports its conflict) or several shards' failures.
pub(super) fn is_write_conflict(e: &Error) -> bool {
    match e {
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            errors.iter().any(is_write_conflict)
        }
        e => as_key_error(e).is_some_and(|k| k.conflict.is_some()),
    }
}

impl<PdC: PdClient> Transaction<PdC> {
    /// Reads `key` and locks it: pessimistic transactions lock it now at a
    /// fresh `for_update_ts` and read its latest value; optimistic ones lock
    /// it at commit and read at the start ts.
    pub async fn get_for_update(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let key = self.wire_key(key);
            if !self.is_pessimistic() {
                self.buffer.lock(key.clone());
                if let BufferedRead::Known(v) = self.buffer.get(&key) {
                    return Ok(v);
                }
                let value = self.fetch_get(key.clone()).await?;
                self.buffer.cache(key, value.clone());
                return Ok(value);
            }
            let mut values = self.pessimistic_lock(vec![key.clone()], true).await?;
            let value = values.pop().and_then(|p| p.1);
            match self.buffer.written(&key) {
                BufferedRead::Known(v) => Ok(v),
                BufferedRead::Unknown => Ok(value),
            }
        })
        .await
    }

    /// [`get_for_update`](Self::get_for_update) for several keys: the pairs
    /// that exist.
    pub async fn batch_get_for_update(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<Vec<KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
            if !self.is_pessimistic() {
                for key in &keys {
                    let wire = self.wire_key(key.clone());
                    self.buffer.lock(wire);
                }
                return Ok(self.batch_get(keys).await?.collect());
            }
            let keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            let locked = self.pessimistic_lock(keys, true).await?;
            Ok(locked
                .into_iter()
                .filter_map(|(key, fetched)| {
                    let value = match self.buffer.written(&key) {
                        BufferedRead::Known(v) => v,
                        BufferedRead::Unknown => fetched,
                    };
                    value.map(|v| KvPair(key, v))
                })
                .map(|p| self.caller_pair(p))
                .collect())
        })
        .await
    }

    /// Locks keys without writing them: now in a pessimistic transaction,
    /// at commit (as write-conflict checks) in an optimistic one.
    pub async fn lock_keys(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            if self.is_pessimistic() {
                self.pessimistic_lock(keys, false).await?;
            } else {
                for key in keys {
                    self.buffer.lock(key);
                }
            }
            Ok(())
        })
        .await
    }

    /// Locks `keys` pessimistically; with `need_value`, returns each key's
    /// latest value, in the order of `keys` (repeats removed).
    ///
    /// A key this transaction already holds is never locked again
    /// ([txn.md](crate::spec::txn#behaviour-we-require)): a fresh lock at a
    /// newer `for_update_ts` would succeed past a write committed after the
    /// first lock was lost, and the commit would overwrite it. The prewrite's
    /// pessimistic check finds a lost lock instead. Its value, when asked
    /// for, is read at the transaction's latest `for_update_ts`: while the
    /// lock holds, nothing newer can have been committed.
    pub(super) async fn pessimistic_lock(
        &mut self,
        keys: Vec<Key>,
        need_value: bool,
    ) -> Result<Vec<(Key, Option<Value>)>> {
        let mut seen = std::collections::BTreeSet::new();
        let keys: Vec<Key> = keys
            .into_iter()
            .filter(|k| seen.insert(k.clone()))
            .collect();
        let fresh: Vec<Key> = keys
            .iter()
            .filter(|k| !self.pessimistic_locked.contains(*k))
            .cloned()
            .collect();
        let mut values: std::collections::BTreeMap<Key, Option<Value>> =
            self.lock_fresh_keys(fresh, need_value).await?;
        if need_value {
            for key in &keys {
                if values.contains_key(key) {
                    continue;
                }
                let value = match self.buffer.written(key) {
                    BufferedRead::Known(v) => v,
                    BufferedRead::Unknown => {
                        let v = self
                            .fetch_get_at(key.clone(), self.options.for_update_ts())
                            .await?;
                        self.buffer.lock_with_value(key.clone(), v.clone());
                        v
                    }
                };
                values.insert(key.clone(), value);
            }
        }
        Ok(keys
            .into_iter()
            .map(|k| {
                let v = values.remove(&k).flatten();
                (k, v)
            })
            .collect())
    }

    /// Sends `PessimisticLock` for keys this transaction does not hold yet,
    /// at a fresh `for_update_ts` (again after write conflicts). The first
    /// successful lock fixes the primary; a failed one leaves it unset and
    /// is rolled back with the `for_update_ts` it was sent with.
    pub(super) async fn lock_fresh_keys(
        &mut self,
        keys: Vec<Key>,
        need_value: bool,
    ) -> Result<std::collections::BTreeMap<Key, Option<Value>>> {
        let mut out = std::collections::BTreeMap::new();
        let Some(first) = keys.first() else {
            return Ok(out);
        };
        let fixed = self.buffer.primary_key().cloned();
        let first_lock = fixed.is_none();
        let primary = fixed.unwrap_or_else(|| first.clone());
        let mutations: Vec<kvrpcpb::Mutation> = keys
            .iter()
            .map(|k| kvrpcpb::Mutation {
                op: kvrpcpb::Op::PessimisticLock as i32,
                key: k.as_bytes().to_vec(),
                ..Default::default()
            })
            .collect();
        // A write committed after our for_update_ts (typically while we
        // waited for its lock) is a conflict TiKV reports; a pessimistic
        // transaction retries at a fresh for_update_ts instead of failing.
        // These keys were never held, so no read of ours is made stale.
        let mut attempts = 0;
        // The for_update_ts of the last attempt sent (0: none yet).
        let mut sent_at = 0;
        // When the last attempt left: the locks it took live
        // DEFAULT_LOCK_TTL from then at least.
        let mut sent = tokio::time::Instant::now();
        let (result, for_update_ts) = loop {
            attempts += 1;
            // A timestamp that cannot be had after an attempt was sent (the
            // call's deadline passed between attempts) ends the lock like a
            // failed attempt: what that attempt locked is released below.
            let for_update_ts = match self.shared.timestamp().await {
                Ok(ts) => ts.version(),
                Err(e) if sent_at == 0 => return Err(e),
                Err(e) => break (Err(e), sent_at),
            };
            sent_at = for_update_ts;
            sent = tokio::time::Instant::now();
            let request = kvrpcpb::PessimisticLockRequest {
                mutations: mutations.clone(),
                primary_lock: primary.as_bytes().to_vec(),
                start_version: self.start_ts(),
                // As long as a prewrite's lock outlives a dead holder (the
                // heartbeat keeps a live one's primary): a transaction killed
                // holding it costs the others 3 s, not client-go's 20 s.
                // TiKV measures the TTL from the start ts, hence the elapsed.
                lock_ttl: DEFAULT_LOCK_TTL
                    .saturating_add(self.start_instant.elapsed().as_millis() as u64),
                for_update_ts,
                is_first_lock: first_lock,
                // Fitted into each attempt's bound when sent.
                wait_timeout: self.options.lock_wait.wait_timeout(),
                return_values: need_value,
                min_commit_ts: for_update_ts + 1,
                ..Default::default()
            };
            let result = self
                .shared
                .builder(request, &self.options.wire_tags)
                .preserve_shard()
                .retry_multi_region(self.region_backoff())
                .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff())
                // Every attempt waits on the server: the lock backoff
                // bounds how many wait, and the sleeps between them.
                .live_locks_by_backoff()
                .merge(CollectPieces)
                .extract_error()
                .plan()
                .execute()
                .await;
            match result {
                Err(e) if attempts < PESSIMISTIC_LOCK_ATTEMPTS && is_write_conflict(&e) => {
                    debug!(
                        "pessimistic lock of transaction {}: {e}; retrying at a new for_update_ts",
                        self.start_ts()
                    );
                }
                result => break (result, for_update_ts),
            }
        };
        let pieces: Vec<ResponseWithShard<kvrpcpb::PessimisticLockResponse, Vec<LockItem>>> =
            match result {
                Ok(pieces) => pieces,
                Err(e) => {
                    // Release whatever this request locked, with the
                    // for_update_ts it was sent with (TiKV removes only
                    // pessimistic locks at or below it); the locks taken
                    // before stay.
                    let fresh: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
                    let shared = Arc::clone(&self.shared);
                    let (start_ts, backoff) = (self.start_ts(), self.region_backoff());
                    let tags = Arc::clone(&self.options.wire_tags);
                    self.beyond_the_call(async move {
                        let released = shared
                            .pessimistic_rollback(start_ts, backoff, &tags, fresh, for_update_ts)
                            .await;
                        if let Err(re) = released {
                            warn!("releasing pessimistic locks after a failed lock: {re}");
                        }
                    })
                    .await;
                    return Err(Error::PessimisticLockError {
                        inner: Box::new(e),
                        success_keys: Vec::new(),
                    });
                }
            };
        self.options.push_for_update_ts(for_update_ts);
        if first_lock {
            self.buffer.set_primary_if_unset(&primary);
        }
        for ResponseWithShard(response, items) in pieces {
            for (i, item) in items.into_iter().enumerate() {
                let key = Key::from(item.0.key);
                let value = if need_value {
                    let not_found = response.not_founds.get(i).copied().unwrap_or(false);
                    match response.values.get(i) {
                        Some(v) if !not_found => Some(v.clone()),
                        _ => None,
                    }
                } else {
                    None
                };
                self.pessimistic_locked.insert(key.clone());
                if need_value {
                    self.buffer.lock_with_value(key.clone(), value.clone());
                } else {
                    self.buffer.lock(key.clone());
                }
                out.insert(key, value);
            }
        }
        if let Some(primary) = self.buffer.primary_key().cloned() {
            // The lock may have been written any time during the request (a
            // server wait included): its TTL left is counted from the send.
            let left = DEFAULT_LOCK_TTL.saturating_sub(sent.elapsed().as_millis() as u64);
            self.start_auto_heartbeat(primary, left);
        }
        Ok(out)
    }

    /// Removes this transaction's pessimistic locks on `keys` taken at or
    /// below `for_update_ts`.
    pub(super) async fn pessimistic_rollback(
        &self,
        keys: Vec<Vec<u8>>,
        for_update_ts: u64,
    ) -> Result<()> {
        self.shared
            .pessimistic_rollback(
                self.start_ts(),
                self.region_backoff(),
                &self.options.wire_tags,
                keys,
                for_update_ts,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_conflict_is_seen_among_several_errors() {
        let conflict = || {
            Error::KeyError(Box::new(kvrpcpb::KeyError {
                conflict: Some(kvrpcpb::WriteConflict::default()),
                ..Default::default()
            }))
        };
        let locked = || {
            Error::KeyError(Box::new(kvrpcpb::KeyError {
                locked: Some(kvrpcpb::LockInfo::default()),
                ..Default::default()
            }))
        };
        assert!(is_write_conflict(&conflict()));
        assert!(!is_write_conflict(&locked()));
        // What `strongest_shard_error` makes of two Regions' conflicts: key
        // errors only, so `MultipleKeyErrors`.
        let two_regions = crate::request::strongest_shard_error(vec![conflict(), conflict()]);
        assert!(matches!(two_regions, Error::MultipleKeyErrors(_)));
        assert!(is_write_conflict(&two_regions));
        assert!(is_write_conflict(&Error::MultipleKeyErrors(vec![
            locked(),
            conflict()
        ])));
        assert!(!is_write_conflict(&Error::MultipleKeyErrors(vec![
            locked(),
            locked()
        ])));
        assert!(is_write_conflict(&Error::ExtractedErrors(vec![
            Error::InternalError {
                message: "x".to_owned()
            },
            conflict()
        ])));
    }
}
