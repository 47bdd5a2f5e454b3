//! The kinds of fault the injector applies, and their names.

use std::fmt;

/// Every fault the injector applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A store goes down (connections refused and reset), later back up,
    /// keeping its leaders meanwhile: the cold-Region case, where no
    /// follower campaigns.
    StoreDown,
    /// A store crashes, later restarts: its Regions elect new leaders among
    /// their live voters after an election timeout, losing the pessimistic
    /// locks the dead leaders kept in memory.
    Crash,
    /// A graceful restart: PD evicts every leader off a store, it goes
    /// down, comes back up, and the leaders return.
    Restart,
    /// A store's disk is full: the Regions it leads refuse writes
    /// (`DiskFull`).
    DiskFull,
    /// A store's proposals wait 5 to 50 ms before they apply: a leader
    /// change meanwhile makes them `StaleCommand`s.
    ProposeDelay,
    /// A merge that takes 100 to 1,000 ms between PrepareMerge and
    /// CommitMerge: writes to the source are refused
    /// (`ProposalInMergingMode`) meanwhile.
    SlowMerge,
    /// A store's network freezes ([`HangMode::Connect`]).
    HangConnect,
    /// A store receives requests and does not answer ([`HangMode::Respond`]).
    HangRespond,
    /// A store adds latency to every request.
    Slow,
    /// A store answers `ServerIsBusy` with a zero wait.
    BusyZero,
    /// A store answers `ServerIsBusy` with a non-zero wait.
    BusyWait,
    /// Leadership moves and PD learns of it.
    TransferFresh,
    /// Leadership moves and PD keeps naming the old leader.
    TransferStale,
    /// A Region loses its leader; a woken voter serves at once.
    ColdAccept,
    /// A Region loses its leader; a woken voter first answers `NotLeader`.
    ColdNotLeaderFirst,
    /// A Region splits.
    Split,
    /// A Region merges into its neighbour (PD's merge scheduler).
    Merge,
    /// A Region's peer moves to another store, or is replaced on its own,
    /// in three conf changes (add a learner, promote it, remove a peer).
    PeerMove,
    /// A store restarts at a new address (not on a simulated network).
    StoreMove,
    /// The client is cut off from a store (its connections refused, or
    /// silently dropped) while the store keeps leading and the other stores
    /// still reach it: the client must forward through a voter.
    CutClients,
    /// The response to the next `raw_put` is dropped after applying it.
    DropPut,
    /// The same for `raw_batch_put`.
    DropBatchPut,
    /// The same for `raw_delete`.
    DropDelete,
    /// The same for `raw_batch_delete`.
    DropBatchDelete,
    /// The same for `raw_delete_range`.
    DropDeleteRange,
    /// The same for `raw_compare_and_swap`.
    DropCas,
    /// PD leadership moves to another member.
    PdLeaderChange,
    /// A PD member goes down, later back up.
    PdMemberDown,
    /// PD's leader receives requests (TSO included) and answers none, later
    /// answers again; it stays leader meanwhile.
    PdHang,
    /// The TSO's physical clock jumps 1 to 30 seconds forward, so lock TTLs
    /// (measured on it) expire early. Transactional runs only.
    TsoJump,
    /// The response to the next `KvPrewrite` is dropped after applying it.
    DropPrewrite,
    /// The same for `KvCommit`.
    DropCommit,
    /// The same for `KvBatchRollback`.
    DropBatchRollback,
    /// The same for `KvResolveLock`.
    DropResolveLock,
    /// The same for `KvPessimisticLock`.
    DropPessimisticLock,
    /// The same for `KvPessimisticRollback`.
    DropPessimisticRollback,
    /// The same for `KvCheckTxnStatus`.
    DropCheckTxnStatus,
    /// The same for `KvCheckSecondaryLocks`.
    DropCheckSecondaryLocks,
    /// The same for `KvTxnHeartBeat` (a heartbeat that fails).
    DropTxnHeartBeat,
    /// A store's non-leader peers apply late (5 to 300 ms): a read served
    /// from their own state alone would be stale. Runs with replica reads
    /// only.
    Lag,
}

impl FaultKind {
    /// Every kind of the raw suite, in report order (the transactional
    /// kinds, [`FaultKind::TXN`], are not among them).
    pub const ALL: [FaultKind; 29] = [
        FaultKind::StoreDown,
        FaultKind::Crash,
        FaultKind::Restart,
        FaultKind::DiskFull,
        FaultKind::ProposeDelay,
        FaultKind::SlowMerge,
        FaultKind::HangConnect,
        FaultKind::HangRespond,
        FaultKind::Slow,
        FaultKind::BusyZero,
        FaultKind::BusyWait,
        FaultKind::TransferFresh,
        FaultKind::TransferStale,
        FaultKind::ColdAccept,
        FaultKind::ColdNotLeaderFirst,
        FaultKind::Split,
        FaultKind::Merge,
        FaultKind::PeerMove,
        FaultKind::StoreMove,
        FaultKind::CutClients,
        FaultKind::DropPut,
        FaultKind::DropBatchPut,
        FaultKind::DropDelete,
        FaultKind::DropBatchDelete,
        FaultKind::DropDeleteRange,
        FaultKind::DropCas,
        FaultKind::PdLeaderChange,
        FaultKind::PdMemberDown,
        FaultKind::PdHang,
    ];

    /// The dropped-response kinds.
    pub const DROPS: [FaultKind; 6] = [
        FaultKind::DropPut,
        FaultKind::DropBatchPut,
        FaultKind::DropDelete,
        FaultKind::DropBatchDelete,
        FaultKind::DropDeleteRange,
        FaultKind::DropCas,
    ];

    /// The kinds only transactional runs use, in report order.
    pub const TXN: [FaultKind; 10] = [
        FaultKind::TsoJump,
        FaultKind::DropPrewrite,
        FaultKind::DropCommit,
        FaultKind::DropBatchRollback,
        FaultKind::DropResolveLock,
        FaultKind::DropPessimisticLock,
        FaultKind::DropPessimisticRollback,
        FaultKind::DropCheckTxnStatus,
        FaultKind::DropCheckSecondaryLocks,
        FaultKind::DropTxnHeartBeat,
    ];

    /// The kinds only runs with replica reads use.
    pub const REPLICA: [FaultKind; 1] = [FaultKind::Lag];

    /// The name the report prints.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::StoreDown => "down",
            FaultKind::Crash => "crash",
            FaultKind::Restart => "restart",
            FaultKind::DiskFull => "disk_full",
            FaultKind::ProposeDelay => "propose_delay",
            FaultKind::SlowMerge => "slow_merge",
            FaultKind::HangConnect => "hang_connect",
            FaultKind::HangRespond => "hang_respond",
            FaultKind::Slow => "slow",
            FaultKind::BusyZero => "busy0",
            FaultKind::BusyWait => "busy_wait",
            FaultKind::TransferFresh => "transfer",
            FaultKind::TransferStale => "transfer_stale",
            FaultKind::ColdAccept => "cold_accept",
            FaultKind::ColdNotLeaderFirst => "cold_not_leader_first",
            FaultKind::Split => "split",
            FaultKind::Merge => "merge",
            FaultKind::PeerMove => "peer_move",
            FaultKind::StoreMove => "store_move",
            FaultKind::CutClients => "cut_clients",
            FaultKind::DropPut => "drop_put",
            FaultKind::DropBatchPut => "drop_batch_put",
            FaultKind::DropDelete => "drop_delete",
            FaultKind::DropBatchDelete => "drop_batch_delete",
            FaultKind::DropDeleteRange => "drop_delete_range",
            FaultKind::DropCas => "drop_cas",
            FaultKind::PdLeaderChange => "pd_leader",
            FaultKind::PdMemberDown => "pd_down",
            FaultKind::PdHang => "pd_hang",
            FaultKind::TsoJump => "tso_jump",
            FaultKind::DropPrewrite => "drop_prewrite",
            FaultKind::DropCommit => "drop_commit",
            FaultKind::DropBatchRollback => "drop_batch_rollback",
            FaultKind::DropResolveLock => "drop_resolve_lock",
            FaultKind::DropPessimisticLock => "drop_pessimistic_lock",
            FaultKind::DropPessimisticRollback => "drop_pessimistic_rollback",
            FaultKind::DropCheckTxnStatus => "drop_check_txn_status",
            FaultKind::DropCheckSecondaryLocks => "drop_check_secondary_locks",
            FaultKind::DropTxnHeartBeat => "drop_heartbeat",
            FaultKind::Lag => "lag",
        }
    }

    /// The store method whose response a drop kind drops.
    pub fn dropped_method(self) -> Option<&'static str> {
        match self {
            FaultKind::DropPut => Some("raw_put"),
            FaultKind::DropBatchPut => Some("raw_batch_put"),
            FaultKind::DropDelete => Some("raw_delete"),
            FaultKind::DropBatchDelete => Some("raw_batch_delete"),
            FaultKind::DropDeleteRange => Some("raw_delete_range"),
            FaultKind::DropCas => Some("raw_compare_and_swap"),
            FaultKind::DropPrewrite => Some("kv_prewrite"),
            FaultKind::DropCommit => Some("kv_commit"),
            FaultKind::DropBatchRollback => Some("kv_batch_rollback"),
            FaultKind::DropResolveLock => Some("kv_resolve_lock"),
            FaultKind::DropPessimisticLock => Some("kv_pessimistic_lock"),
            FaultKind::DropPessimisticRollback => Some("kv_pessimistic_rollback"),
            FaultKind::DropCheckTxnStatus => Some("kv_check_txn_status"),
            FaultKind::DropCheckSecondaryLocks => Some("kv_check_secondary_locks"),
            FaultKind::DropTxnHeartBeat => Some("kv_txn_heart_beat"),
            _ => None,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
