//! What a deterministic run varies by kind: the workloads it drives and
//! the faults of the simulated network its driver schedules.

/// Which workloads a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DstWorkload {
    /// The raw workload alone (linearizability check).
    Raw,
    /// The transactional workloads alone (list-append, bank and long
    /// pessimistic transactions; anomaly check).
    Txn,
    /// Both at once, on disjoint keys of the same cluster.
    Mixed,
}

impl DstWorkload {
    /// Its name in summaries and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DstWorkload::Raw => "raw",
            DstWorkload::Txn => "txn",
            DstWorkload::Mixed => "mixed",
        }
    }

    /// The workload named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [DstWorkload::Raw, DstWorkload::Txn, DstWorkload::Mixed]
            .into_iter()
            .find(|w| w.name() == name)
    }

    /// Whether the raw workload runs.
    pub fn raw(self) -> bool {
        self != DstWorkload::Txn
    }

    /// Whether the transactional workloads run.
    pub fn txn(self) -> bool {
        self != DstWorkload::Raw
    }
}

/// A fault of the simulated network, scheduled by the driver between
/// simulation steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetFault {
    /// The client and one store lose every message between them.
    PartitionStore,
    /// The client's messages to one store are lost; the store's arrive.
    OneWayToStore,
    /// One store's messages to the client are lost; the client's arrive.
    OneWayFromStore,
    /// The client and PD lose every message between them.
    PartitionPd,
    /// Messages between the client and one store are held, then all
    /// delivered when the fault ends: a latency spike on one link.
    HoldStore,
    /// Every link's latency may reach 50–400 ms for a while.
    LatencySpike,
    /// One store's host crashes (its connections die with it) and restarts
    /// when the fault ends, serving the data it had.
    CrashStore,
    /// One store and PD lose every message between them. The simulated
    /// stores share PD's state rather than send it heartbeats, so the
    /// partition acts as the cluster models it
    /// (`SimCluster::set_store_cut_off_from_pd`): a leader moving to the
    /// store is not reported to PD until the partition heals.
    PartitionStorePd,
}

impl NetFault {
    /// Every kind.
    pub const ALL: [NetFault; 8] = [
        NetFault::PartitionStore,
        NetFault::OneWayToStore,
        NetFault::OneWayFromStore,
        NetFault::PartitionPd,
        NetFault::HoldStore,
        NetFault::LatencySpike,
        NetFault::CrashStore,
        NetFault::PartitionStorePd,
    ];

    /// Its name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            NetFault::PartitionStore => "partition_store",
            NetFault::OneWayToStore => "one_way_to_store",
            NetFault::OneWayFromStore => "one_way_from_store",
            NetFault::PartitionPd => "partition_pd",
            NetFault::HoldStore => "hold_store",
            NetFault::LatencySpike => "latency_spike",
            NetFault::CrashStore => "crash_store",
            NetFault::PartitionStorePd => "partition_store_pd",
        }
    }
}
