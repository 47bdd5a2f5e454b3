//! Reads at the start timestamp: the buffer first, then the store
//! (`get`, `batch_get` and the scans, which merge the buffer's writes into
//! what the store returns).

use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::request::plan::call_deadline;
use crate::request::plan::scan::{page_of, scan_pages, ScanPiece};
use crate::request::{CollectError, CollectPieces, CollectSingle, Plan};
use crate::request::{EncodeKeyspace, KeyMode};
use crate::request::{FastDispatch, PlanBuilder, TypedCall};
use crate::transaction::buffer::BufferedRead;
use crate::transaction::requests::{new_batch_get_request, new_get_request, new_scan_request};
use crate::transaction::CodecPdClient;
use crate::Failure;
use crate::{BoundRange, Error, Key, KvPair, Result, Value};

use super::{Transaction, MAX_TXN_SCAN_LIMIT};

impl<PdC: PdClient> Transaction<PdC> {
    /// The value of `key`, or `None` when it does not exist.
    pub async fn get(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            let key = self.wire_key(key);
            if let BufferedRead::Known(v) = self.buffer.get(&key) {
                return Ok(v);
            }
            let value = self.fetch_get(key.clone()).await?;
            self.buffer.cache(key, value.clone());
            Ok(value)
        })
        .await
    }

    /// True when `key` exists.
    pub async fn key_exists(&mut self, key: impl Into<Key>) -> Result<bool> {
        Ok(self.get(key).await?.is_some())
    }

    /// The values of the keys that exist, in key order.
    pub async fn batch_get(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<impl Iterator<Item = KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            let mut keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            keys.sort();
            keys.dedup();
            let mut out = Vec::new();
            let mut missing = Vec::new();
            for key in keys {
                match self.buffer.get(&key) {
                    BufferedRead::Known(Some(v)) => out.push(KvPair(key, v)),
                    BufferedRead::Known(None) => {}
                    BufferedRead::Unknown => missing.push(key),
                }
            }
            if !missing.is_empty() {
                let fetched = self.fetch_batch_get(&missing).await?;
                let mut found = std::collections::BTreeMap::new();
                for p in fetched {
                    found.insert(p.0, p.1);
                }
                for key in missing {
                    let value = found.remove(&key);
                    self.buffer.cache(key.clone(), value.clone());
                    if let Some(v) = value {
                        out.push(KvPair(key, v));
                    }
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            let out: Vec<KvPair> = out.into_iter().map(|p| self.caller_pair(p)).collect();
            Ok(out.into_iter())
        })
        .await
    }

    /// Up to `limit` pairs in `range`, in key order, with this
    /// transaction's writes applied.
    pub async fn scan(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        Ok(self
            .scan_inner(range.into(), limit, false)
            .await?
            .into_iter())
    }

    /// Up to `limit` keys in `range`, in key order.
    pub async fn scan_keys(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        Ok(self
            .scan_inner(range.into(), limit, false)
            .await?
            .into_iter()
            .map(KvPair::into_key))
    }

    /// Up to `limit` pairs in `range`, in reverse key order.
    pub async fn scan_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        Ok(self
            .scan_inner(range.into(), limit, true)
            .await?
            .into_iter())
    }

    /// Up to `limit` keys in `range`, in reverse key order.
    pub async fn scan_keys_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        Ok(self
            .scan_inner(range.into(), limit, true)
            .await?
            .into_iter()
            .map(KvPair::into_key))
    }

    /// The builder of a read at the start timestamp: it may go to a
    /// replica first, or be a stale read, as the options say.
    fn read_builder<Req: TypedCall>(
        &self,
        request: Req,
    ) -> PlanBuilder<CodecPdClient<PdC>, FastDispatch<Req>> {
        let builder = self
            .shared
            .builder(request, &self.options.wire_tags)
            .replica_read(self.options.replica_read);
        if self.options.stale_read {
            builder.stale_read()
        } else {
            builder
        }
    }

    pub(super) async fn fetch_get(&self, key: Key) -> Result<Option<Value>> {
        self.fetch_get_at(key, self.start_ts()).await
    }

    /// Reads `key` at `ts` (the start ts, or a `for_update_ts` for a key
    /// this transaction holds locked).
    pub(super) async fn fetch_get_at(&self, key: Key, ts: u64) -> Result<Option<Value>> {
        let request = new_get_request(key.into(), ts);
        let builder = if ts == self.start_ts() {
            self.read_builder(request)
        } else {
            self.shared.builder(request, &self.options.wire_tags)
        };
        let response = builder
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
            .merge(CollectSingle)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok((!response.not_found).then_some(response.value))
    }

    pub(super) async fn fetch_batch_get(&self, keys: &[Key]) -> Result<Vec<KvPair>> {
        let ts = self.start_ts();
        let keys = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        let responses = self
            .read_builder(new_batch_get_request(keys, ts))
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(responses
            .into_iter()
            .flat_map(|r| r.pairs)
            .map(|p| KvPair(p.key.into(), p.value))
            .collect())
    }

    pub(super) async fn scan_inner(
        &mut self,
        range: BoundRange,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            if limit > MAX_TXN_SCAN_LIMIT {
                return Err(Error::from(Failure::InvalidArgument(format!(
                    "scan limit {limit} exceeds the maximum {MAX_TXN_SCAN_LIMIT}; scan in pages"
                ))));
            }
            let range = range.encode_keyspace(self.shared.keyspace, KeyMode::Txn);
            let (start, end) = range.into_key_range()?;
            if limit == 0 || (!end.is_empty() && start == end) {
                return Ok(Vec::new());
            }
            // Fetch enough that the local deletes cannot starve the limit.
            let fetch_limit = limit.saturating_add(self.buffer.deletes_in(&start, &end));
            let fetched = self
                .fetch_scan(start.as_bytes(), end.as_bytes(), fetch_limit, reverse)
                .await?;
            let merged = self
                .buffer
                .merge_scan(fetched, &start, &end, limit, reverse);
            Ok(merged.into_iter().map(|p| self.caller_pair(p)).collect())
        })
        .await
    }

    pub(super) async fn fetch_scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<KvPair>> {
        let ts = self.start_ts();
        scan_pages(start, end, limit, reverse, |cursor, remaining| async move {
            // Reverse: from the cursor (the upper bound) down to the start.
            let bound = if reverse { start } else { end };
            let request = new_scan_request(cursor, bound.to_vec(), ts, remaining, false, reverse);
            let pieces: Vec<ScanPiece<kvrpcpb::ScanResponse>> = self
                .read_builder(request)
                .preserve_shard()
                .retry_multi_region(self.region_backoff())
                .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
                .merge(CollectPieces)
                .plan()
                .execute()
                .await?;
            page_of(pieces, |response| {
                let pairs = response.pairs.into_iter();
                pairs.map(|p| KvPair(p.key.into(), p.value)).collect()
            })
        })
        .await
    }
}
