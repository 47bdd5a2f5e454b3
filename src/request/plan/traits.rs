//! The traits of a plan and of the requests that travel through one.

use std::sync::Arc;

use async_trait::async_trait;

use crate::pd::PdClient;
use crate::proto::{errorpb, kvrpcpb};
use crate::region::RegionWithLeader;
use crate::store::{RegionStore, Request};
use crate::{Error, Result};

/// A stage of a request plan. Executing it runs the request to completion.
#[async_trait]
pub trait Plan: Sized + Clone + Sync + Send + 'static {
    /// What the plan produces.
    type Result: Send;

    /// Runs the plan.
    async fn execute(&self) -> Result<Self::Result>;

    /// What the plan sends, for errors that must name it (an undetermined
    /// write names its keys or range).
    fn describe(&self) -> String {
        "the request".to_owned()
    }

    /// The request's method name (`raw_get`, ...) for metrics and spans.
    fn label(&self) -> &'static str {
        "request"
    }
}

/// A TiKV request with a typed response, ready for a plan.
pub trait KvRequest: Request + Sized + Clone + Sync + Send + 'static {
    /// The response the store sends back.
    type Response: HasRegionError + HasKeyErrors + Send + 'static;

    /// True when replaying the request after it may have reached a server is
    /// unsafe (every raw write: with two writers a re-sent or late copy of
    /// an old write overwrites a newer one): dispatch errors then end the
    /// request as [`Failure::Undetermined`](crate::Failure::Undetermined) ([routing.md, "Replay
    /// safety"](crate::spec::routing#replay-safety)).
    fn terminal_on_dispatch_error(&self) -> bool {
        false
    }

    /// The request's kind and its keys or range, for errors that must name
    /// them (default: the label).
    fn describe(&self) -> String {
        self.label().to_owned()
    }
}

/// A request that can be split by Region into shards.
#[async_trait]
pub trait Shardable {
    /// One Region's part of the request (keys, pairs or ranges).
    type Shard: Clone + Send + Sync + 'static;

    /// Splits the request by Region, in key order.
    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>>;

    /// Narrows the request to one shard.
    fn apply_shard(&mut self, shard: Self::Shard);

    /// A copy of the request narrowed to `shard` (client-rust's method):
    /// what the retry stage sends for each shard. The default copies the
    /// whole request and applies the shard; the crate's requests with a
    /// large payload (batches of keys, pairs, mutations, ranges) build the
    /// copy without it, so a request is copied neither per shard nor per
    /// attempt.
    fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self
    where
        Self: Sized + Clone,
    {
        let mut request = self.clone();
        request.apply_shard(shard);
        request
    }

    /// Targets the request at a Region's candidate peer: sets the context's
    /// region id, epoch and peer, keeping every other context field.
    fn apply_store(&mut self, store: &RegionStore) -> Result<()>;
}

/// Items that are split into batches by size (after being split by Region).
pub trait Batchable {
    /// One item (a key, a pair).
    type Item;

    /// The size of an item in bytes, as counted against the batch limit.
    fn item_size(item: &Self::Item) -> u64;

    /// Splits `items` into batches of at most `batch_size` bytes each (an
    /// item larger than the limit gets a batch of its own), keeping order.
    fn batches(items: Vec<Self::Item>, batch_size: u64) -> Vec<Vec<Self::Item>> {
        let mut batches = Vec::new();
        let mut current = Vec::new();
        let mut current_size = 0u64;
        for item in items {
            let size = Self::item_size(&item);
            if !current.is_empty() && current_size.saturating_add(size) > batch_size {
                batches.push(std::mem::take(&mut current));
                current_size = 0;
            }
            current_size = current_size.saturating_add(size);
            current.push(item);
        }
        if !current.is_empty() {
            batches.push(current);
        }
        batches
    }
}

/// A response that may carry a Region error.
pub trait HasRegionError {
    /// Takes the Region error out of the response, if there is one.
    fn region_error(&mut self) -> Option<errorpb::Error>;
}

/// A response that may carry key-level errors.
pub trait HasKeyErrors {
    /// Takes the key errors out of the response, if there are any.
    fn key_errors(&mut self) -> Option<Vec<Error>>;
}

impl<T: HasKeyErrors> HasKeyErrors for Vec<T> {
    fn key_errors(&mut self) -> Option<Vec<Error>> {
        let errors: Vec<Error> = self
            .iter_mut()
            .filter_map(HasKeyErrors::key_errors)
            .flatten()
            .collect();
        (!errors.is_empty()).then_some(errors)
    }
}

/// A result's errors are its value's (a failed result has no response to
/// take them from; its error travels as the `Err`).
impl<T: HasKeyErrors> HasKeyErrors for Result<T> {
    fn key_errors(&mut self) -> Option<Vec<Error>> {
        self.as_mut().ok().and_then(HasKeyErrors::key_errors)
    }
}

/// See the `HasKeyErrors` impl for `Result`.
impl<T: HasRegionError> HasRegionError for Result<T> {
    fn region_error(&mut self) -> Option<errorpb::Error> {
        self.as_mut().ok().and_then(HasRegionError::region_error)
    }
}

/// Sets a request's context to target `store`'s peer: region id, epoch and
/// peer change; `replica_read` and `stale_read` are set only by a replica
/// or stale read's first attempt and cleared by the leader attempts after
/// it (fallback never sets them); every other field stays as the caller
/// left it.
pub fn set_context_for_store<R: Request>(request: &mut R, store: &RegionStore) {
    let aim = |context: &mut kvrpcpb::Context| {
        let region = &store.region_with_leader;
        context.region_id = region.id();
        context.region_epoch = Some(region.epoch());
        context.peer = Some(store.target_peer);
        if let Some((replica_read, stale_read)) = store.read.context_flags() {
            context.replica_read = replica_read;
            context.stale_read = stale_read;
        }
    };
    // In place when the request lends its context (every request of the
    // wire protocol does): no copy of the context per attempt.
    if let Some(context) = request.context_mut() {
        aim(context);
        return;
    }
    let mut context: kvrpcpb::Context = request.context().cloned().unwrap_or_default();
    aim(&mut context);
    request.set_context(context);
}

/// Turns a raw response's `error` string into a key error, if it is set.
pub(crate) fn string_key_error(error: &mut String) -> Option<Vec<Error>> {
    if error.is_empty() {
        return None;
    }
    Some(vec![Error::KvError {
        message: std::mem::take(error),
    }])
}

/// Turns the `KeyError`s of pairs into errors.
pub(crate) fn pair_key_errors(pairs: &mut [kvrpcpb::KvPair]) -> Option<Vec<Error>> {
    let errors: Vec<Error> = pairs
        .iter_mut()
        // Checked before taking: a take moves the whole (large) option,
        // on every pair of a scan.
        .filter(|p| p.error.is_some())
        .filter_map(|p| p.error.take())
        .map(|e| Error::KeyError(Box::new(e)))
        .collect();
    (!errors.is_empty()).then_some(errors)
}

/// The response, or its key errors as one error (the strongest, or
/// client-rust's `MultipleKeyErrors`).
pub(crate) fn no_key_errors<R: HasKeyErrors>(mut response: R) -> Result<R> {
    match response.key_errors() {
        Some(errors) => Err(strongest_shard_error(errors)),
        None => Ok(response),
    }
}

/// [`no_key_errors`] on a result in place: the response, checked, by
/// reference. A response is large (its Region error field alone is some
/// 600 bytes) and is read where it is, not moved out to be read.
pub(crate) fn checked<R: HasKeyErrors>(input: &mut Result<R>) -> Result<&mut R> {
    match input {
        Ok(response) => match response.key_errors() {
            Some(errors) => Err(strongest_shard_error(errors)),
            None => Ok(response),
        },
        // Taken out; the result is not read again.
        Err(error) => Err(std::mem::replace(
            error,
            Error::InternalError {
                message: String::new(),
            },
        )),
    }
}

pub(crate) fn strongest_shard_error(mut errors: Vec<Error>) -> Error {
    if let Some(pos) = errors.iter().position(Error::is_undetermined) {
        return errors.swap_remove(pos);
    }
    if errors.len() == 1 {
        if let Some(e) = errors.pop() {
            return e;
        }
    }
    if errors.is_empty() {
        return Error::InternalError {
            message: "a failed request reported no error".to_owned(),
        };
    }
    // client-rust's two names for several errors: key errors of one
    // request, or the failures of several shards.
    if errors.iter().all(|e| matches!(e, Error::KeyError(_))) {
        Error::MultipleKeyErrors(errors)
    } else {
        Error::ExtractedErrors(errors)
    }
}
