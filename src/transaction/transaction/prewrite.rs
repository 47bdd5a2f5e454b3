//! The prewrite: which keys lock, the primary, async commit and 1PC as
//! asked, the lock TTL, and what a failed prewrite leaves (undetermined, or
//! rolled back).

use crate::pd::{PdClient, Timestamp};
use crate::proto::kvrpcpb;
use crate::request::{CollectError, CollectPieces, Plan, ResponseWithShard};
use crate::transaction::buffer::takes_lock;
use crate::transaction::options::DEFAULT_LOCK_TTL;
use crate::{Error, Key, Result};

use super::Transaction;
use crate::transaction::requests::*;

/// A prewrite's answers, with what it asked for.
pub(super) struct Prewritten {
    /// The answers, one per piece, in key order.
    pub(super) responses: Vec<ResponseWithShard<kvrpcpb::PrewriteResponse, Vec<PrewriteItem>>>,
    /// Async commit, as asked (off for a transaction with a checked-only key).
    pub(super) async_commit: bool,
    /// 1PC, likewise.
    pub(super) one_pc: bool,
    /// The keys that hold a lock once prewritten.
    pub(super) keys: Vec<Vec<u8>>,
}

impl<PdC: PdClient> Transaction<PdC> {
    /// Prewrites `mutations` with `primary` as the primary lock, starting
    /// the heartbeat first. A failure that may have been applied everywhere
    /// is undetermined; any other failure rolls the prewritten keys back
    /// (primary first) before it is returned.
    pub(super) async fn prewrite(
        &mut self,
        mutations: Vec<kvrpcpb::Mutation>,
        primary: &Key,
    ) -> Result<Prewritten> {
        let start_ts = self.start_ts();
        // Async commit counts a transaction committed once every key that
        // takes a lock is prewritten, and a reader meeting its locks may
        // commit it then. A `CheckNotExists` key (inserted and deleted
        // again) takes none, so its check could still fail after that.
        // And a re-sent async-commit or 1PC prewrite of a committed
        // transaction is answered as done only through the commit record
        // of the key it fails on, which a checked-only key never has. Such
        // a transaction commits in two phases instead.
        let has_checked_only_key = !mutations.iter().all(takes_lock);
        let async_commit = self.options.async_commit && !has_checked_only_key;
        let one_pc = self.options.try_one_pc && !has_checked_only_key;
        // The keys that hold a lock once prewritten: the commit batches,
        // the async-commit secondaries and the rollback use only these
        // (a `CheckNotExists` key listed as a secondary has no lock, and a
        // resolver would take it for a rolled-back transaction).
        let keys: Vec<Vec<u8>> = mutations
            .iter()
            .filter(|m| takes_lock(m))
            .map(|m| m.key.clone())
            .collect();
        let pessimistic_actions = if self.is_pessimistic() {
            mutations
                .iter()
                .map(|m| {
                    if self.pessimistic_locked.contains(&Key::from(m.key.clone())) {
                        kvrpcpb::PessimisticAction::DoPessimisticCheck as i32
                    } else {
                        kvrpcpb::PessimisticAction::SkipPessimisticCheck as i32
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let secondaries = if async_commit {
            keys.iter()
                .filter(|k| k.as_slice() != primary.as_bytes())
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        // How long a lock outlives its holder: a live holder keeps its
        // primary alive with heartbeats (the first within half of this), so
        // only the locks of a holder that died are waited out this long.
        // Every kind gets client-go's (and client-rust's) 3 s; async-commit
        // locks, which readers cannot push past, had 20 s. (The keys of a
        // pessimistic transaction keep their lock's longer TTL: TiKV never
        // shortens it.)
        let ttl = DEFAULT_LOCK_TTL;
        let lock_ttl = ttl.saturating_add(self.start_instant.elapsed().as_millis() as u64);
        // The heartbeat must come before the prewrite locks expire.
        self.start_auto_heartbeat(primary.clone(), ttl);
        let request = kvrpcpb::PrewriteRequest {
            txn_size: mutations.len() as u64,
            mutations,
            primary_lock: primary.as_bytes().to_vec(),
            start_version: start_ts,
            lock_ttl,
            pessimistic_actions,
            for_update_ts: self.options.for_update_ts(),
            // Readers may push the commit ts above their own start ts
            // instead of waiting for the lock (TiKV's rule for every
            // prewrite, not only async commit).
            min_commit_ts: start_ts + 1,
            use_async_commit: async_commit,
            secondaries,
            try_one_pc: one_pc,
            ..Default::default()
        };
        let mut builder = self.shared.builder(request, &self.options.wire_tags);
        if async_commit || one_pc {
            // A commit point, but not `terminal_on_dispatch_error`: prewrite
            // is idempotent, so fallback may re-send it; only the outcome
            // must not be hidden. (A key error on a re-sent prewrite is a
            // definite answer: TiKV looks for the transaction's commit
            // record on the failing key before it answers a conflict, and
            // every key here takes a lock, so has one once committed.)
            builder = builder.commit_point();
        }
        let builder = builder
            .preserve_shard()
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff())
            // Wait-die: waiting for an older transaction's lock may close a
            // cycle that nobody else can see.
            .live_locks_yielding_to_older(start_ts);
        let prewritten = builder
            .merge(CollectPieces)
            .extract_error()
            .plan()
            .execute()
            .await;
        let responses = match prewritten {
            Ok(responses) => responses,
            // Every failed piece may have been applied: unknown. (A piece
            // that failed for certain means an async-commit or 1PC
            // transaction can never commit: a resolver finds that key
            // without a lock and rolls the transaction back.)
            Err(e) if all_undetermined(&e) => return Err(undetermined(e)),
            Err(e) => {
                let rolled_back = self
                    .rollback_after_failed_prewrite(primary.clone(), keys)
                    .await;
                // An async-commit or 1PC transaction commits by its
                // prewrites alone, and a copy of one sent earlier (an
                // attempt that was given up, or timed out, before a later
                // one was answered) may still arrive and lock its key, so
                // that a reader then finds every key locked and commits it
                // (1PC: the copy commits). Only its rollback, answered,
                // rules that out; without it the outcome is unknown.
                if (async_commit || one_pc) && !rolled_back {
                    return Err(undetermined(e));
                }
                return Err(e);
            }
        };
        Ok(Prewritten {
            responses,
            async_commit,
            one_pc,
            keys,
        })
    }

    /// A transaction whose only mutations are `CheckNotExists` (keys it
    /// inserted and deleted again) writes nothing; one prewrite checks the
    /// keys (`AlreadyExist` fails the commit) and leaves no lock.
    pub(super) async fn check_not_exists(
        &mut self,
        mutations: Vec<kvrpcpb::Mutation>,
    ) -> Result<Option<Timestamp>> {
        let Some(first) = mutations.first().map(|m| m.key.clone()) else {
            return Ok(None);
        };
        let request = kvrpcpb::PrewriteRequest {
            txn_size: mutations.len() as u64,
            mutations,
            primary_lock: first,
            start_version: self.start_ts(),
            lock_ttl: DEFAULT_LOCK_TTL,
            for_update_ts: self.options.for_update_ts(),
            min_commit_ts: self.start_ts() + 1,
            ..Default::default()
        };
        self.shared
            .builder(request, &self.options.wire_tags)
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff())
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(None)
    }
}

/// True when every failure in `e` is undetermined: each failed piece may
/// have been applied. One certain failure among them (a piece that was
/// never applied) is enough to know an async-commit or 1PC transaction did
/// not commit.
pub(super) fn all_undetermined(e: &Error) -> bool {
    match e {
        e if e.is_undetermined() => true,
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            !errors.is_empty() && errors.iter().all(all_undetermined)
        }
        _ => false,
    }
}

/// client-rust's undetermined error around the plan's.
pub(super) fn undetermined(e: Error) -> Error {
    match e {
        Error::UndeterminedError(_) => e,
        e => Error::UndeterminedError(Box::new(e)),
    }
}
