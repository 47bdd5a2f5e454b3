//! Per-store request counters, by method and outcome.

use std::collections::BTreeMap;

/// What a simulated store did with one request. Each request is counted
/// once with its final outcome; a request that hit a hang is also counted
/// as [`Outcome::Hung`] when it starts waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Served (the response may still carry a key error, see
    /// [`Outcome::KeyError`]).
    Ok,
    /// Served, but the response carries a key-level `error` string.
    KeyError,
    /// Answered `NotLeader` (with or without a hint).
    NotLeader,
    /// Answered `ServerIsBusy`.
    ServerIsBusy,
    /// Answered `RegionNotFound`.
    RegionNotFound,
    /// Answered `StoreNotMatch`.
    StoreNotMatch,
    /// Answered `MismatchPeerId`.
    MismatchPeerId,
    /// Answered `EpochNotMatch`.
    EpochNotMatch,
    /// Answered `KeyNotInRegion`.
    KeyNotInRegion,
    /// Answered `IsWitness`.
    IsWitness,
    /// Answered `ReadIndexNotReady` (a replica read).
    ReadIndexNotReady,
    /// Answered `DataIsNotReady` (a stale read above the peer's safe-ts).
    DataIsNotReady,
    /// Answered `RaftEntryTooLarge` (a write over the Raft entry limit,
    /// refused before anything was applied).
    RaftEntryTooLarge,
    /// Answered `MaxTimestampNotSynced` (an async-commit or 1PC prewrite,
    /// or an API v2 raw write, on a new leader still syncing its max ts).
    MaxTimestampNotSynced,
    /// Answered `StaleCommand` (a write whose proposal a leader change
    /// overtook; nothing of it was applied).
    StaleCommand,
    /// Answered `ProposalInMergingMode` (a write to a Region being merged).
    ProposalInMergingMode,
    /// Answered `RegionNotInitialized` (a peer not yet initialized).
    RegionNotInitialized,
    /// Answered `DiskFull` (a write to a Region whose store's disk is full).
    DiskFull,
    /// Applied, then the response was dropped and the connections reset.
    Dropped,
    /// Started waiting in a `HangMode::Respond` hang.
    Hung,
    /// Rejected with a gRPC status (malformed request).
    Invalid,
    /// Answered gRPC `Unimplemented`: a TiFlash store asked for a TiKV
    /// method (the method is counted by its label, `batch_commands` for
    /// the stream).
    Unimplemented,
}

impl Outcome {
    /// The outcome's name as the control interface prints it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::KeyError => "key_error",
            Outcome::NotLeader => "not_leader",
            Outcome::ServerIsBusy => "server_is_busy",
            Outcome::RegionNotFound => "region_not_found",
            Outcome::StoreNotMatch => "store_not_match",
            Outcome::MismatchPeerId => "mismatch_peer_id",
            Outcome::EpochNotMatch => "epoch_not_match",
            Outcome::KeyNotInRegion => "key_not_in_region",
            Outcome::IsWitness => "is_witness",
            Outcome::ReadIndexNotReady => "read_index_not_ready",
            Outcome::DataIsNotReady => "data_is_not_ready",
            Outcome::RaftEntryTooLarge => "raft_entry_too_large",
            Outcome::MaxTimestampNotSynced => "max_timestamp_not_synced",
            Outcome::StaleCommand => "stale_command",
            Outcome::ProposalInMergingMode => "proposal_in_merging_mode",
            Outcome::RegionNotInitialized => "region_not_initialized",
            Outcome::DiskFull => "disk_full",
            Outcome::Dropped => "dropped",
            Outcome::Hung => "hung",
            Outcome::Invalid => "invalid",
            Outcome::Unimplemented => "unimplemented",
        }
    }
}

/// A snapshot of one store's counters. Method names are the labels of
/// `tikv_plan::store::Request` (`raw_get`, `raw_batch_put`,
/// `raw_compare_and_swap`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreCounters {
    by_method: BTreeMap<(String, Outcome), u64>,
    replica_reads: u64,
    stale_reads: u64,
    served_as_replica: u64,
    batch_streams: u64,
    batch_messages: u64,
    batch_requests: u64,
    forwarded: u64,
    forward_failures: u64,
    tagged: BTreeMap<RequestTag, u64>,
    read_deadlines: BTreeMap<String, (u64, u64)>,
    deadline_drops: u64,
}

/// The tags TiKV reads from a request's `Context`, as one request carried
/// them: the method (a `tikv_plan::store::Request` label), its resource
/// group (`resource_control_context.resource_group_name`, empty when the
/// request carries no resource control context), `request_source`,
/// `txn_source` and `resource_group_tag` (empty when unset).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestTag {
    /// The method's label (`raw_get`, `kv_prewrite`, ...).
    pub method: String,
    /// The resource group name.
    pub resource_group: String,
    /// The request source (`external_Get`, ...).
    pub request_source: String,
    /// The transaction source.
    pub txn_source: u64,
    /// The resource group tag's bytes.
    pub resource_group_tag: Vec<u8>,
}

impl RequestTag {
    /// The tags of a `method` request with `context`.
    pub fn of(method: &str, context: Option<&crate::proto::kvrpcpb::Context>) -> Self {
        let default = crate::proto::kvrpcpb::Context::default();
        let context = context.unwrap_or(&default);
        RequestTag {
            method: method.to_owned(),
            resource_group: context
                .resource_control_context
                .as_ref()
                .map(|r| r.resource_group_name.clone())
                .unwrap_or_default(),
            request_source: context.request_source.clone(),
            txn_source: context.txn_source,
            resource_group_tag: context.resource_group_tag.clone(),
        }
    }
}

impl std::fmt::Display for RequestTag {
    /// As the control interface prints it:
    /// `METHOD group=G source=S txn_source=N tag=HEX` (`-` for an empty
    /// field).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or_dash = |s: &str| {
            if s.is_empty() {
                "-".to_owned()
            } else {
                s.to_owned()
            }
        };
        let tag: String = if self.resource_group_tag.is_empty() {
            "-".to_owned()
        } else {
            self.resource_group_tag
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        write!(
            f,
            "{} group={} source={} txn_source={} tag={}",
            self.method,
            or_dash(&self.resource_group),
            or_dash(&self.request_source),
            self.txn_source,
            tag
        )
    }
}

impl StoreCounters {
    /// How many `method` requests ended with `outcome`.
    pub fn count(&self, method: &str, outcome: Outcome) -> u64 {
        self.by_method
            .get(&(method.to_owned(), outcome))
            .copied()
            .unwrap_or(0)
    }

    /// How many `method` requests were received (all outcomes except
    /// [`Outcome::Hung`], which is counted in addition to the final one).
    pub fn total(&self, method: &str) -> u64 {
        self.by_method
            .iter()
            .filter(|((m, o), _)| m == method && *o != Outcome::Hung)
            .map(|(_, n)| n)
            .sum()
    }

    /// How many requests of any method ended with `outcome`.
    pub fn count_outcome(&self, outcome: Outcome) -> u64 {
        self.by_method
            .iter()
            .filter(|((_, o), _)| *o == outcome)
            .map(|(_, n)| n)
            .sum()
    }

    /// How many requests this store received, all methods and outcomes
    /// (hangs not counted twice).
    pub fn total_requests(&self) -> u64 {
        self.by_method
            .iter()
            .filter(|((_, o), _)| *o != Outcome::Hung)
            .map(|(_, n)| n)
            .sum()
    }

    /// How many requests arrived with `Context.replica_read` set.
    pub fn replica_reads(&self) -> u64 {
        self.replica_reads
    }

    /// How many requests arrived with `Context.stale_read` set.
    pub fn stale_reads(&self) -> u64 {
        self.stale_reads
    }

    /// How many reads a non-leader peer of this store served (replica and
    /// stale reads; a read index counted once, when served).
    pub fn served_as_replica(&self) -> u64 {
        self.served_as_replica
    }

    pub(crate) fn record_served_as_replica(&mut self) {
        self.served_as_replica += 1;
    }

    /// Every non-zero counter as `(method, outcome, count)`, sorted.
    pub fn entries(&self) -> Vec<(String, Outcome, u64)> {
        self.by_method
            .iter()
            .map(|((m, o), n)| (m.clone(), *o, *n))
            .collect()
    }

    pub(crate) fn record(&mut self, method: &str, outcome: Outcome) {
        *self
            .by_method
            .entry((method.to_owned(), outcome))
            .or_insert(0) += 1;
    }

    /// How many BatchCommands streams clients opened to this store.
    pub fn batch_streams(&self) -> u64 {
        self.batch_streams
    }

    /// How many `BatchCommandsRequest` messages arrived on those streams.
    pub fn batch_messages(&self) -> u64 {
        self.batch_messages
    }

    /// How many sub-requests those messages carried (each also counted by
    /// its method and outcome, like a unary request).
    pub fn batch_requests(&self) -> u64 {
        self.batch_requests
    }

    /// How many calls this store proxied to another store because their
    /// metadata named it in `tikv-forwarded-host` (a BatchCommands stream
    /// counts once), and, apart from those, how many it could not get
    /// through to the target.
    pub fn forwarded(&self) -> (u64, u64) {
        (self.forwarded, self.forward_failures)
    }

    pub(crate) fn record_forward(&mut self, failed: bool) {
        if failed {
            self.forward_failures += 1;
        } else {
            self.forwarded += 1;
        }
    }

    pub(crate) fn record_batch_stream(&mut self) {
        self.batch_streams += 1;
    }

    pub(crate) fn record_batch_message(&mut self, requests: usize) {
        self.batch_messages += 1;
        self.batch_requests += requests as u64;
    }

    /// How many requests arrived with each set of tags (every request is
    /// counted once, whatever its outcome, untagged ones included).
    pub fn tagged(&self) -> &BTreeMap<RequestTag, u64> {
        &self.tagged
    }

    /// How many `method` requests arrived in resource group `group` from
    /// source `source` (either empty for none), whatever their other tags.
    pub fn count_tagged(&self, method: &str, group: &str, source: &str) -> u64 {
        self.tagged
            .iter()
            .filter(|(t, _)| {
                t.method == method && t.resource_group == group && t.request_source == source
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// For `method`: how many requests carried a deadline
    /// (`max_execution_duration_ms` above 0), and the largest one, in ms.
    pub fn deadlines(&self, method: &str) -> (u64, u64) {
        self.read_deadlines.get(method).copied().unwrap_or((0, 0))
    }

    /// How many reads this store dropped because their deadline passed
    /// before it read (each also counted as `server_is_busy`).
    pub fn deadline_drops(&self) -> u64 {
        self.deadline_drops
    }

    pub(crate) fn record_arrival(
        &mut self,
        method: &str,
        context: Option<&crate::proto::kvrpcpb::Context>,
    ) {
        *self
            .tagged
            .entry(RequestTag::of(method, context))
            .or_insert(0) += 1;
        let ms = context.map_or(0, |c| c.max_execution_duration_ms);
        if ms > 0 {
            let entry = self
                .read_deadlines
                .entry(method.to_owned())
                .or_insert((0, 0));
            entry.0 += 1;
            entry.1 = entry.1.max(ms);
        }
    }

    pub(crate) fn record_deadline_drop(&mut self) {
        self.deadline_drops += 1;
    }

    pub(crate) fn record_context_flags(&mut self, replica_read: bool, stale_read: bool) {
        if replica_read {
            self.replica_reads += 1;
        }
        if stale_read {
            self.stale_reads += 1;
        }
    }
}
