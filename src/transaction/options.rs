//! [`TransactionOptions`] and the small types around it, with client-rust
//! 0.4.0's names: [`TransactionKind`], [`RetryOptions`], [`CheckLevel`],
//! [`HeartbeatOption`], [`Mutation`].

use std::time::Duration;

use crate::backoff::Backoff;
use crate::pd::Timestamp;
use crate::request::{EncodeKeyspace, KeyMode, Keyspace};
use crate::{Key, Value};

use super::TimestampExt;

/// The TTL of a transaction's locks in milliseconds while it is alive
/// (kept up by heartbeats); TiDB's `ManagedLockTTL`.
pub const MAX_TTL: u64 = 20_000;
/// The TTL of an optimistic transaction's prewrite locks in milliseconds.
pub const DEFAULT_LOCK_TTL: u64 = 3_000;
/// How often heartbeats are sent by default.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(MAX_TTL / 2);

/// Optimistic or pessimistic.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum TransactionKind {
    /// Conflicts are found at commit (prewrite).
    Optimistic,
    /// Keys are locked as they are written; the argument is the
    /// transaction's latest `for_update_ts`.
    Pessimistic(Timestamp),
}

pub use crate::request::RetryOptions;

/// What happens when a transaction that wrote or locked something is
/// dropped without `commit` or `rollback`.
#[derive(Clone, Eq, PartialEq, Debug)]
pub enum CheckLevel {
    /// Panic (client-rust's default), unless the thread is already
    /// panicking.
    Panic,
    /// Log a warning.
    Warn,
    /// Nothing.
    None,
}

/// Whether the transaction keeps its primary lock alive with heartbeats.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum HeartbeatOption {
    /// No heartbeats: long transactions' locks expire after their TTL.
    NoHeartbeat,
    /// A heartbeat every this long while the transaction holds locks.
    FixedTime(Duration),
}

impl HeartbeatOption {
    /// True unless heartbeats are off.
    pub fn is_auto_heartbeat(&self) -> bool {
        !matches!(self, HeartbeatOption::NoHeartbeat)
    }
}

/// One write of [`Transaction::batch_mutate`](super::Transaction::batch_mutate).
#[derive(Clone, Eq, PartialEq, Debug)]
pub enum Mutation {
    /// Set the key to the value.
    Put(Key, Value),
    /// Delete the key.
    Delete(Key),
}

/// The mutation's key gets the prefix; a value is not a key.
impl EncodeKeyspace for Mutation {
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        match self {
            Mutation::Put(key, value) => {
                Mutation::Put(key.encode_keyspace(keyspace, key_mode), value)
            }
            Mutation::Delete(key) => Mutation::Delete(key.encode_keyspace(keyspace, key_mode)),
        }
    }
}

impl Mutation {
    /// The key it writes.
    pub fn key(&self) -> &Key {
        match self {
            Mutation::Put(key, _) | Mutation::Delete(key) => key,
        }
    }
}

/// The key it writes (client-rust's `AsRef<Key>`).
impl AsRef<Key> for Mutation {
    fn as_ref(&self) -> &Key {
        self.key()
    }
}

/// How long a pessimistic transaction's lock request waits on the server
/// for another transaction's lock (an extension; client-rust always asks
/// for the server's default). TiKV holds the request until the lock is
/// released or the wait runs out, and detects deadlocks among waiting
/// transactions (see [`Error::deadlock`](crate::Error::deadlock)).
///
/// The client fits the wait into each RPC: at most half of its bound (the
/// per-RPC timeout, or what is left of the call's deadline when that is
/// shorter), so a request that waits as asked is answered by the server
/// and never mistaken for a dead store. For waits longer than half of
/// [`Config::timeout`](crate::Config::timeout), raise the timeout.
///
/// ```
/// use std::time::Duration;
/// use tikv_plan::transaction::{LockWait, TransactionOptions};
/// let options = TransactionOptions::new_pessimistic()
///     .lock_wait(LockWait::Timeout(Duration::from_millis(200)));
/// assert_eq!(options.lock_wait_policy(), LockWait::Timeout(Duration::from_millis(200)));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LockWait {
    /// The server's `wait-for-lock-timeout` (TiKV's default: 1 s), as
    /// client-rust asks (`wait_timeout` 0).
    #[default]
    ServerDefault,
    /// No wait: a locked key is answered at once (`KeyIsLocked`), and the
    /// client resolves or polls the lock itself.
    NoWait,
    /// Up to this long (the server caps it at its own setting).
    Timeout(Duration),
}

impl LockWait {
    /// The request's `wait_timeout` field: 0 for the server's default, -1
    /// for no wait, else milliseconds (at least one).
    pub fn wait_timeout(self) -> i64 {
        match self {
            LockWait::ServerDefault => 0,
            LockWait::NoWait => -1,
            LockWait::Timeout(wait) => i64::try_from(wait.as_millis()).unwrap_or(i64::MAX).max(1),
        }
    }
}

/// Options of a transaction, builder style.
///
/// ```
/// use tikv_plan::transaction::{CheckLevel, TransactionOptions};
/// let options = TransactionOptions::new_optimistic()
///     .use_async_commit()
///     .drop_check(CheckLevel::Warn);
/// assert!(!options.is_pessimistic());
/// ```
#[derive(Clone, PartialEq, Debug)]
pub struct TransactionOptions {
    pub(crate) kind: TransactionKind,
    pub(crate) try_one_pc: bool,
    pub(crate) async_commit: bool,
    pub(crate) read_only: bool,
    pub(crate) retry_options: RetryOptions,
    pub(crate) check_level: CheckLevel,
    pub(crate) heartbeat_option: HeartbeatOption,
    pub(crate) lock_wait: LockWait,
    pub(crate) replica_read: crate::ReplicaRead,
    pub(crate) stale_read: bool,
    /// The transaction's own tags; the client's fill the unset ones when
    /// the transaction begins.
    pub(crate) tags: crate::RequestTags,
    /// `tags` as context fields, built once when the transaction begins.
    pub(crate) wire_tags: std::sync::Arc<crate::config::WireTags>,
}

impl Default for TransactionOptions {
    /// Pessimistic, as in client-rust.
    fn default() -> TransactionOptions {
        Self::new_pessimistic()
    }
}

impl TransactionOptions {
    /// The defaults of an optimistic transaction.
    pub fn new_optimistic() -> TransactionOptions {
        TransactionOptions {
            kind: TransactionKind::Optimistic,
            try_one_pc: false,
            async_commit: false,
            read_only: false,
            retry_options: RetryOptions::default_optimistic(),
            check_level: CheckLevel::Panic,
            heartbeat_option: HeartbeatOption::FixedTime(DEFAULT_HEARTBEAT_INTERVAL),
            lock_wait: LockWait::ServerDefault,
            replica_read: crate::ReplicaRead::Leader,
            stale_read: false,
            tags: crate::RequestTags::default(),
            wire_tags: Default::default(),
        }
    }

    /// The defaults of a pessimistic transaction.
    pub fn new_pessimistic() -> TransactionOptions {
        TransactionOptions {
            kind: TransactionKind::Pessimistic(Timestamp::from_version(0)),
            retry_options: RetryOptions::default_pessimistic(),
            ..Self::new_optimistic()
        }
    }

    /// Commits with async commit: the prewrite is the commit point.
    #[must_use]
    pub fn use_async_commit(mut self) -> TransactionOptions {
        self.async_commit = true;
        self
    }

    /// Tries one-phase commit when every mutation lies in one Region.
    #[must_use]
    pub fn try_one_pc(mut self) -> TransactionOptions {
        self.try_one_pc = true;
        self
    }

    /// Makes the transaction read only: writes are
    /// [`Error::InvalidTransactionType`](crate::Error::InvalidTransactionType).
    #[must_use]
    pub fn read_only(mut self) -> TransactionOptions {
        self.read_only = true;
        self
    }

    /// **beyond** Lets the transaction's reads at its start timestamp go
    /// to a replica `replica` chooses first, through TiKV's read index
    /// (the snapshot is the same as the leader's), and to the leader when
    /// the replica does not answer cleanly ([routing.md, "Replica and stale
    /// reads"](crate::spec::routing#replica-and-stale-reads-beyond)).
    /// Locks, writes, and reads at a pessimistic `for_update_ts` always go
    /// to the leader.
    #[must_use]
    pub fn replica_read(mut self, replica: crate::ReplicaRead) -> TransactionOptions {
        self.replica_read = replica;
        self
    }

    /// **beyond** Makes the transaction's reads at its start timestamp
    /// stale reads: any replica whose safe-ts has reached that timestamp
    /// serves them (spread over the replicas unless
    /// [`replica_read`](Self::replica_read) says otherwise), and one that
    /// has not answers `DataIsNotReady`, after which the leader serves the
    /// read at the same timestamp. Meant for snapshots at a timestamp in
    /// the past ([`TransactionClient::stale_snapshot`](crate::TransactionClient::stale_snapshot)):
    /// a fresh timestamp is rarely below any replica's safe-ts.
    #[must_use]
    pub fn stale_read(mut self) -> TransactionOptions {
        self.stale_read = true;
        self
    }

    /// Does not resolve locks: a read or write that meets another
    /// transaction's lock fails with
    /// [`Error::ResolveLockError`](crate::Error::ResolveLockError), which
    /// carries the locks (client-rust's meaning; it sets the lock backoff to
    /// none).
    #[must_use]
    pub fn no_resolve_locks(mut self) -> TransactionOptions {
        self.retry_options.lock_backoff = Backoff::no_backoff();
        self
    }

    /// Does not retry Region errors.
    #[must_use]
    pub fn no_resolve_regions(mut self) -> TransactionOptions {
        self.retry_options.region_backoff = Backoff::no_backoff();
        self
    }

    /// Sets the retry options.
    #[must_use]
    pub fn retry_options(mut self, options: RetryOptions) -> TransactionOptions {
        self.retry_options = options;
        self
    }

    /// Sets what a drop without commit or rollback does.
    #[must_use]
    pub fn drop_check(mut self, level: CheckLevel) -> TransactionOptions {
        self.check_level = level;
        self
    }

    /// Sets the heartbeat behaviour.
    #[must_use]
    pub fn heartbeat_option(mut self, heartbeat_option: HeartbeatOption) -> TransactionOptions {
        self.heartbeat_option = heartbeat_option;
        self
    }

    /// Sets how long lock requests wait on the server for other
    /// transactions' locks (default: the server's default).
    #[must_use]
    pub fn lock_wait(mut self, wait: LockWait) -> TransactionOptions {
        self.lock_wait = wait;
        self
    }

    /// **beyond** Charges the transaction's requests to TiKV resource group
    /// `name` (`Context.resource_control_context`), in place of the
    /// client's ([`Config::with_resource_group`](crate::Config::with_resource_group)).
    ///
    /// ```
    /// use tikv_plan::{RequestSource, TransactionOptions};
    /// let options = TransactionOptions::new_optimistic()
    ///     .resource_group("reports")
    ///     .request_source(RequestSource::external("Select"))
    ///     .txn_source(1);
    /// assert_eq!(options.request_tags().resource_group.as_deref(), Some("reports"));
    /// ```
    #[must_use]
    pub fn resource_group(mut self, name: impl Into<String>) -> TransactionOptions {
        self.tags.resource_group = Some(name.into());
        self
    }

    /// **beyond** Names where the transaction's requests come from
    /// (`Context.request_source`), in place of the client's.
    #[must_use]
    pub fn request_source(mut self, source: crate::RequestSource) -> TransactionOptions {
        self.tags.request_source = Some(source);
        self
    }

    /// **beyond** Sets the transaction's source (`Context.txn_source`, a
    /// u64 TiCDC reads to tell replicated writes apart; 0 is not sent).
    #[must_use]
    pub fn txn_source(mut self, source: u64) -> TransactionOptions {
        self.tags.txn_source = source;
        self
    }

    /// **beyond** Sets the opaque tag the transaction's requests carry
    /// (`Context.resource_group_tag`).
    #[must_use]
    pub fn resource_group_tag(mut self, tag: impl Into<Vec<u8>>) -> TransactionOptions {
        self.tags.resource_group_tag = Some(tag.into());
        self
    }

    /// **beyond** Sets every tag of the transaction at once.
    #[must_use]
    pub fn request_tags_from(mut self, tags: crate::RequestTags) -> TransactionOptions {
        self.tags = tags;
        self
    }

    /// **beyond** The tags set on these options (the client's are added
    /// to the unset ones when the transaction begins).
    pub fn request_tags(&self) -> &crate::RequestTags {
        &self.tags
    }

    /// How long lock requests wait on the server (see [`LockWait`]).
    pub fn lock_wait_policy(&self) -> LockWait {
        self.lock_wait
    }

    /// True for a pessimistic transaction.
    pub fn is_pessimistic(&self) -> bool {
        matches!(self.kind, TransactionKind::Pessimistic(_))
    }

    pub(crate) fn push_for_update_ts(&mut self, for_update_ts: u64) {
        if let TransactionKind::Pessimistic(old) = &mut self.kind {
            if for_update_ts > old.version() {
                *old = Timestamp::from_version(for_update_ts);
            }
        }
    }

    pub(crate) fn for_update_ts(&self) -> u64 {
        match &self.kind {
            TransactionKind::Pessimistic(ts) => ts.version(),
            TransactionKind::Optimistic => 0,
        }
    }
}
