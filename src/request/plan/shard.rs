//! The sharding shapes raw and transactional requests share: one key (one
//! shard, answered from the Region cache when it can be), a set of keys
//! (sorted, deduplicated, grouped by Region and, for transactional
//! requests, cut into batches of at most a size), and a list of key ranges
//! (cut at Region boundaries). Each is a macro that implements
//! [`Shardable`](super::traits::Shardable) for the request types given to it; the
//! work is in the functions below, written once.

use std::sync::Arc;

use super::traits::Batchable;
use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::region::RegionWithLeader;
use crate::{Error, Result};

/// The one shard of a single-key request.
pub(crate) async fn key_shard<PdC: PdClient>(
    pd_client: &Arc<PdC>,
    key: &[u8],
) -> Result<Vec<(Vec<u8>, RegionWithLeader)>> {
    let region = pd_client.region_for_key(key).await?;
    Ok(vec![(key.to_vec(), region)])
}

/// The one shard of a single-key request, if its Region is cached.
pub(crate) fn cached_key_shard<PdC: PdClient>(
    pd_client: &PdC,
    key: &[u8],
) -> Option<Vec<(Vec<u8>, RegionWithLeader)>> {
    let region = pd_client.cached_region_for_key(key)?;
    Some(vec![(key.to_vec(), region)])
}

/// Keys as a batchable item: their size is their length.
pub(crate) struct KeyItems;

impl Batchable for KeyItems {
    type Item = Vec<u8>;

    fn item_size(item: &Vec<u8>) -> u64 {
        item.len() as u64
    }
}

/// The shards of a request over `keys`: sorted, without repeats, one group
/// per Region, each cut into batches of at most `batch_size` bytes of keys
/// when a size is given.
pub(crate) async fn key_set_shards<PdC: PdClient>(
    pd_client: &Arc<PdC>,
    keys: &[Vec<u8>],
    batch_size: Option<u64>,
) -> Result<Vec<(Vec<Vec<u8>>, RegionWithLeader)>> {
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    let groups = pd_client.group_keys_by_region(keys).await?;
    let mut shards = Vec::with_capacity(groups.len());
    for (region, keys) in groups {
        match batch_size {
            Some(size) => {
                for batch in KeyItems::batches(keys, size) {
                    shards.push((batch, region.clone()));
                }
            }
            None => shards.push((keys, region)),
        }
    }
    Ok(shards)
}

/// The shards of a request over key ranges: each range cut at Region
/// boundaries, the pieces grouped by Region.
pub(crate) async fn key_range_shards<PdC: PdClient>(
    pd_client: &Arc<PdC>,
    ranges: &[kvrpcpb::KeyRange],
) -> Result<Vec<(Vec<kvrpcpb::KeyRange>, RegionWithLeader)>> {
    let ranges = ranges
        .iter()
        .map(|r| (r.start_key.clone(), r.end_key.clone()))
        .collect();
    let groups = pd_client.group_ranges_by_region(ranges).await?;
    Ok(groups
        .into_iter()
        .map(|(region, pieces)| {
            let pieces = pieces
                .into_iter()
                .map(|(start_key, end_key)| kvrpcpb::KeyRange { start_key, end_key })
                .collect();
            (pieces, region)
        })
        .collect())
}

/// The shards of a request over one key range: the range cut at Region
/// boundaries, one shard per piece.
pub(crate) async fn range_shards<PdC: PdClient>(
    pd_client: &Arc<PdC>,
    start: &[u8],
    end: &[u8],
) -> Result<Vec<((Vec<u8>, Vec<u8>), RegionWithLeader)>> {
    let groups = pd_client
        .group_ranges_by_region(vec![(start.to_vec(), end.to_vec())])
        .await?;
    Ok(groups
        .into_iter()
        .flat_map(|(region, pieces)| pieces.into_iter().map(move |piece| (piece, region.clone())))
        .collect())
}

/// The one Region piece a scan serves next, as `(start_key, end_key)` in
/// the request's own convention: forward, the first Region of
/// `[start, end)`; in reverse (`start` the exclusive upper bound, `end` the
/// lower), the last Region of `[end, start)`. The caller continues from the
/// piece's end.
pub(crate) async fn scan_piece<PdC: PdClient>(
    pd_client: &Arc<PdC>,
    start: &[u8],
    end: &[u8],
    reverse: bool,
) -> Result<Vec<((Vec<u8>, Vec<u8>), RegionWithLeader)>> {
    if !reverse {
        let region = pd_client.region_for_key(start).await?;
        let piece = crate::region::clip_to_region(start, end, &region);
        return Ok(vec![(piece, region)]);
    }
    let (lower, upper) = (end.to_vec(), start.to_vec());
    let regions = pd_client
        .regions_for_range(lower.clone(), upper.clone())
        .await?;
    let region = regions
        .into_iter()
        .last()
        .ok_or_else(|| Error::InternalError {
            message: "PD returned no Region for a scan range".to_owned(),
        })?;
    let (lo, hi) = crate::region::clip_to_region(&lower, &upper, &region);
    Ok(vec![((hi, lo), region)])
}

/// `Shardable` for requests on one key: `Request => key_field`, and, where
/// given, `keeping { fields }`: every other field but `context`, so a
/// shard's request is built with one copy of the key, not two.
macro_rules! single_key_shardable {
    ($($req:ty => $key:ident $(keeping { $($field:ident),* })?),* $(,)?) => {$(
        #[::async_trait::async_trait]
        impl $crate::request::Shardable for $req {
            type Shard = Vec<u8>;

            async fn shards<PdC: $crate::pd::PdClient>(
                &self,
                pd_client: &::std::sync::Arc<PdC>,
            ) -> $crate::Result<Vec<(Self::Shard, $crate::region::RegionWithLeader)>> {
                $crate::request::plan::shard::key_shard(pd_client, &self.$key).await
            }

            fn apply_shard(&mut self, shard: Self::Shard) {
                self.$key = shard;
            }

            $(
                fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
                    Self {
                        context: self.context.clone(),
                        $key: shard,
                        $($field: self.$field.clone(),)*
                    }
                }
            )?

            fn apply_store(&mut self, store: &$crate::store::RegionStore) -> $crate::Result<()> {
                $crate::request::set_context_for_store(self, store);
                Ok(())
            }
        }

        impl $crate::request::ShardPayload for $req {
            fn cached_shards<PdC: $crate::pd::PdClient>(
                &self,
                pd_client: &PdC,
            ) -> Option<Vec<(Self::Shard, $crate::region::RegionWithLeader)>> {
                $crate::request::plan::shard::cached_key_shard(pd_client, &self.$key)
            }

        }
    )*};
}

/// `Shardable` for requests on a set of keys (`keys`): `Request { every
/// field but context and keys }`, cut into batches of at most `batch_size`
/// bytes of keys when one is given.
macro_rules! key_set_shardable {
    (batch_size: $size:expr; $($req:ty { $($field:ident),* }),* $(,)?) => {$(
        #[::async_trait::async_trait]
        impl $crate::request::Shardable for $req {
            type Shard = Vec<Vec<u8>>;

            async fn shards<PdC: $crate::pd::PdClient>(
                &self,
                pd_client: &::std::sync::Arc<PdC>,
            ) -> $crate::Result<Vec<(Self::Shard, $crate::region::RegionWithLeader)>> {
                $crate::request::plan::shard::key_set_shards(pd_client, &self.keys, $size).await
            }

            fn apply_shard(&mut self, shard: Self::Shard) {
                self.keys = shard;
            }

            #[allow(clippy::clone_on_copy)]
            fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
                Self {
                    context: self.context.clone(),
                    keys: shard,
                    $($field: self.$field.clone(),)*
                }
            }

            fn apply_store(&mut self, store: &$crate::store::RegionStore) -> $crate::Result<()> {
                $crate::request::set_context_for_store(self, store);
                Ok(())
            }
        }

        impl $crate::request::ShardPayload for $req {}
    )*};
}

/// `Shardable` for requests over key ranges (`ranges`): `Request { every
/// field but context and ranges }`.
macro_rules! key_ranges_shardable {
    ($($req:ty { $($field:ident),* }),* $(,)?) => {$(
        #[::async_trait::async_trait]
        impl $crate::request::Shardable for $req {
            type Shard = Vec<$crate::proto::kvrpcpb::KeyRange>;

            async fn shards<PdC: $crate::pd::PdClient>(
                &self,
                pd_client: &::std::sync::Arc<PdC>,
            ) -> $crate::Result<Vec<(Self::Shard, $crate::region::RegionWithLeader)>> {
                $crate::request::plan::shard::key_range_shards(pd_client, &self.ranges).await
            }

            fn apply_shard(&mut self, shard: Self::Shard) {
                self.ranges = shard;
            }

            #[allow(clippy::clone_on_copy)]
            fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
                Self {
                    context: self.context.clone(),
                    ranges: shard,
                    $($field: self.$field.clone(),)*
                }
            }

            fn apply_store(&mut self, store: &$crate::store::RegionStore) -> $crate::Result<()> {
                $crate::request::set_context_for_store(self, store);
                Ok(())
            }
        }

        impl $crate::request::ShardPayload for $req {}
    )*};
}

pub(crate) use {key_ranges_shardable, key_set_shardable, single_key_shardable};
