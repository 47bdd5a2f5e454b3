//! Reads served by replicas, as TiKV serves them: replicas that lag, read
//! index for `replica_read`, and safe-ts for `stale_read`.
//!
//! * **Lag.** A store given a lag applies late: each of its non-leader
//!   peers reads from a copy of its Region (data, locks, versions) taken
//!   when the lag began and taken again once `lag` has passed since, so
//!   its applied state is up to `lag` old. The leader serves from the
//!   Region itself; a peer that stops leading starts a copy then. (Kinder
//!   than TiKV in one place: a Region split off while a peer lags has its
//!   first copy taken at the peer's first read of it, current then, where
//!   TiKV's peer would not have the Region yet.) Every command applied to a Region that is not a read
//!   moves its apply index by one (TiKV's applied index, counted in
//!   writes).
//! * **Replica read** (`Context.replica_read`, TiKV's read index,
//!   `raftstore/peer.rs`): a non-leader peer asks the leader for its commit
//!   point and answers once it has applied it. No leader: `NotLeader`
//!   without a hint. A leader whose store is down or hung: the read waits
//!   (the client's deadline ends it). Applied 100 writes or more behind:
//!   `ReadIndexNotReady`. Otherwise it waits for its next apply, then
//!   serves from the Region's state then, which holds every write that
//!   finished before the read arrived. A replica read that reaches the
//!   leader is served as a leader read.
//! * **Stale read** (`Context.stale_read`, `worker/read.rs::
//!   check_stale_read_safe`): served from the peer's applied state when its
//!   safe-ts is at or above the read's ts (raw reads carry ts 0 and always
//!   pass), else `DataIsNotReady` carrying the safe-ts. The leader checks
//!   too, and when the check fails serves it as a normal read (its lease
//!   is always valid here).
//! * **Safe-ts** (`resolved_ts/resolver.rs`, `advance.rs`): every
//!   `advance-ts-interval` (TiKV's default 20 s) a Region's resolved ts
//!   becomes min(PD's ts at that tick, the oldest lock's start ts), never
//!   moving back, and the tick raises `max_ts` first so that an async-commit
//!   or 1PC transaction commits above it. A peer's safe-ts is the resolved
//!   ts of the state it has applied.
//! * **Naive replica reads** (a switch for checking checkers): a replica
//!   read is served from the peer's applied state at once, without read
//!   index: what a follower read that skips read index would return.

use std::time::Duration;

use tokio::time::Instant;

use super::counters::Outcome;
use super::state::{ClusterState, Rejection, SimRegion};
use crate::proto::{errorpb, kvrpcpb};

/// TiKV's `raftstore.follower-read-max-log-gap`: a replica this many
/// writes or more behind its read index answers `ReadIndexNotReady`.
pub(crate) const MAX_READ_INDEX_GAP: u64 = 100;

/// TiKV's default `resolved-ts.advance-ts-interval`.
pub(crate) const DEFAULT_RESOLVED_TS_INTERVAL: Duration = Duration::from_secs(20);

/// What a lagging peer has applied: a copy of its Region.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    pub(crate) taken_at: Instant,
    /// The Region as it was then (the apply index and resolved ts with it).
    pub(crate) region: SimRegion,
}

/// How a store serves a read it admitted.
#[derive(Debug)]
pub(crate) enum ReadPlan {
    /// From the Region's current state: a leader read, or a replica read
    /// whose read index the peer has applied.
    Current(u64),
    /// From what peer `store_id` of Region `region_id` has applied (a stale
    /// read, or a naive replica read).
    Applied {
        /// The Region.
        region_id: u64,
        /// The store of the peer.
        store_id: u64,
    },
    /// Not yet: try again after this long (a replica waiting to apply its
    /// read index, or for a leader it cannot reach).
    Wait(Duration),
}

/// How long a replica read polls for a leader it cannot reach.
const LEADER_POLL: Duration = Duration::from_millis(20);

fn region_version(state: &ClusterState, region_id: u64) -> u64 {
    state.regions.get(&region_id).map_or(0, SimRegion::version)
}

fn region_error(message: String) -> errorpb::Error {
    errorpb::Error {
        message,
        ..Default::default()
    }
}

impl ClusterState {
    /// Admits a request that may be a read served by a replica: `read_ts`
    /// is the read's timestamp (`Some(0)` for a raw read), `None` for a
    /// command that is not a read (the flags are then ignored, as TiKV
    /// proposes it and only a leader can), and `arrived` is when the store
    /// received it (a replica read waits until it has applied what was
    /// committed then).
    pub(crate) fn admit_read(
        &mut self,
        store_id: u64,
        ctx: Option<&kvrpcpb::Context>,
        key_outside: &dyn Fn(&crate::proto::metapb::Region) -> Option<Vec<u8>>,
        read_ts: Option<u64>,
        arrived: Instant,
    ) -> Result<ReadPlan, Rejection> {
        let (replica_read, stale_read) =
            ctx.map_or((false, false), |c| (c.replica_read, c.stale_read));
        let Some(read_ts) = read_ts.filter(|_| replica_read || stale_read) else {
            return self
                .admit(store_id, ctx, key_outside)
                .map(ReadPlan::Current);
        };
        let (region_id, local) = self.admit_peer(store_id, ctx, key_outside)?;
        let now = Instant::now();
        let leads = self
            .regions
            .get(&region_id)
            .is_some_and(|r| r.leader == Some(local.id));
        let is_leader = leads && !self.raft.electing(region_id);
        // Past the not-leader check, which these reads skip: a peer not yet
        // initialized, a Region in a merge, a full disk under a replica.
        self.refuse_replica_read(region_id, local.id, store_id, is_leader)?;
        let Some(region) = self.regions.get(&region_id) else {
            return self
                .admit(store_id, ctx, key_outside)
                .map(ReadPlan::Current);
        };
        if local.is_witness {
            let mut e = region_error(format!(
                "peer {} of region {region_id} is a witness",
                local.id
            ));
            e.is_witness = Some(errorpb::IsWitness { region_id });
            return Err((Box::new(e), Outcome::IsWitness));
        }
        if stale_read {
            let safe_ts = self.safe_ts(region_id, store_id, now);
            let version = region_version(self, region_id);
            let copy = self.applied.get(&(region_id, store_id));
            let applied_version = copy.map_or(version, |a| a.region.version());
            if !is_leader && applied_version != version {
                // It has not applied the split or merge the request's
                // epoch names: its own epoch does not match.
                let mut e = region_error(format!(
                    "peer {} of region {region_id} has not applied version {version} (it is at {applied_version})",
                    local.id
                ));
                let current_regions = copy
                    .map(|a| vec![a.region.meta.clone()])
                    .unwrap_or_default();
                e.epoch_not_match = Some(errorpb::EpochNotMatch { current_regions });
                return Err((Box::new(e), Outcome::EpochNotMatch));
            }
            if safe_ts >= read_ts {
                return Ok(if is_leader {
                    ReadPlan::Current(region_id)
                } else {
                    ReadPlan::Applied {
                        region_id,
                        store_id,
                    }
                });
            }
            if is_leader {
                // The check failed; a leader in its lease serves it as a
                // normal read.
                return Ok(ReadPlan::Current(region_id));
            }
            let mut e = region_error(format!(
                "peer {} of region {region_id} has safe ts {safe_ts}, below the stale read's {read_ts}",
                local.id
            ));
            e.data_is_not_ready = Some(errorpb::DataIsNotReady {
                region_id,
                peer_id: local.id,
                safe_ts,
            });
            return Err((Box::new(e), Outcome::DataIsNotReady));
        }
        // A replica read (read index).
        if is_leader {
            return Ok(ReadPlan::Current(region_id));
        }
        if self.naive_replica_reads {
            return Ok(ReadPlan::Applied {
                region_id,
                store_id,
            });
        }
        let Some(leader) = region.leader.and_then(|id| region.peer(id)) else {
            let mut e = region_error(format!(
                "peer {} of region {region_id} knows no leader to ask for a read index",
                local.id
            ));
            e.not_leader = Some(errorpb::NotLeader {
                region_id,
                leader: None,
            });
            return Err((Box::new(e), Outcome::NotLeader));
        };
        let leader_reachable = self
            .stores
            .get(&leader.store_id)
            .is_some_and(|s| s.up && s.hang.is_none())
            && !self.raft.electing(region_id);
        if !leader_reachable {
            return Ok(ReadPlan::Wait(LEADER_POLL));
        }
        let Some(lag) = self.lag_of(store_id) else {
            return Ok(ReadPlan::Current(region_id));
        };
        let index = region.applied_index;
        let version = region.version();
        let applied = self.applied(region_id, store_id, now);
        let (taken_at, applied_index, applied_version) = match applied {
            Some(a) => (a.taken_at, a.region.applied_index, a.region.version()),
            None => return Ok(ReadPlan::Current(region_id)),
        };
        if applied_version != version {
            let mut e = region_error(format!(
                "peer {} of region {region_id} is applying a split or merge",
                local.id
            ));
            e.read_index_not_ready = Some(errorpb::ReadIndexNotReady {
                reason: "can not read index due to split".to_owned(),
                region_id,
            });
            return Err((Box::new(e), Outcome::ReadIndexNotReady));
        }
        if applied_index + MAX_READ_INDEX_GAP <= index {
            let mut e = region_error(format!(
                "peer {} of region {region_id} applied {applied_index}, {} writes behind its read index {index}",
                local.id,
                index - applied_index
            ));
            e.read_index_not_ready = Some(errorpb::ReadIndexNotReady {
                reason: "applied index fall behind read index too long".to_owned(),
                region_id,
            });
            return Err((Box::new(e), Outcome::ReadIndexNotReady));
        }
        if taken_at >= arrived || applied_index >= index {
            return Ok(ReadPlan::Current(region_id));
        }
        Ok(ReadPlan::Wait(
            (taken_at + lag).saturating_duration_since(now),
        ))
    }

    /// The state a command admitted with `plan` on `store_id` is served
    /// from, and whether a replica serves it (a read on a peer that does
    /// not lead); `Err` is how long to wait before admitting it again, and
    /// `Ok(None)` a Region that vanished. A command that is not a read
    /// moves the Region's apply index.
    pub(crate) fn read_view(
        &mut self,
        plan: ReadPlan,
        store_id: u64,
        is_read: bool,
        now: Instant,
    ) -> Result<Option<(&mut SimRegion, bool)>, Duration> {
        // Whether a replica serves it: by the Region's leader now, not by
        // the leader a lagging copy remembers.
        let replica = is_read
            && match &plan {
                ReadPlan::Current(id) | ReadPlan::Applied { region_id: id, .. } => {
                    self.regions.get(id).is_some_and(|r| {
                        r.leader.and_then(|l| r.peer(l)).map(|p| p.store_id) != Some(store_id)
                    })
                }
                ReadPlan::Wait(_) => false,
            };
        let region = match plan {
            ReadPlan::Wait(wait) => return Err(wait),
            ReadPlan::Current(region_id) => {
                let region = self.regions.get_mut(&region_id);
                if let Some(region) = region {
                    if !is_read {
                        region.applied_index += 1;
                    }
                    Some(region)
                } else {
                    None
                }
            }
            ReadPlan::Applied {
                region_id,
                store_id,
            } => {
                if self.lag_of(store_id).is_some() {
                    self.applied(region_id, store_id, now)
                        .map(|applied| &mut applied.region)
                } else {
                    self.regions.get_mut(&region_id)
                }
            }
        };
        Ok(region.map(|region| (region, replica)))
    }

    /// The lag of `store_id`'s peers, if it has one.
    fn lag_of(&self, store_id: u64) -> Option<Duration> {
        self.stores.get(&store_id).and_then(|s| s.lag)
    }

    /// What peer `store_id` of Region `region_id` has applied, taken again
    /// when its lag has passed (or the Region changed shape): `None` when
    /// the store does not lag.
    pub(crate) fn applied(
        &mut self,
        region_id: u64,
        store_id: u64,
        now: Instant,
    ) -> Option<&mut Applied> {
        let lag = self.lag_of(store_id)?;
        let region = self.regions.get(&region_id)?;
        // A leader has applied everything; a peer that leads now starts
        // its copy afresh, so what it has applied never goes back.
        let leads = region
            .leader
            .and_then(|id| region.peer(id))
            .map(|p| p.store_id)
            == Some(store_id);
        // A copy taken while the store led is retaken once it follows: it
        // had applied everything then.
        let stale = leads
            || self.applied.get(&(region_id, store_id)).is_none_or(|a| {
                let led = a.region.leader.and_then(|id| a.region.peer(id));
                now >= a.taken_at + lag || led.map(|p| p.store_id) == Some(store_id)
            });
        if stale {
            // Taken with the safe-ts of that moment.
            self.advance_resolved_ts(region_id);
            let region = self.regions.get(&region_id)?.clone();
            self.applied.insert(
                (region_id, store_id),
                Applied {
                    taken_at: now,
                    region,
                },
            );
        }
        self.applied.get_mut(&(region_id, store_id))
    }

    /// The safe-ts of peer `store_id` of Region `region_id`: the resolved
    /// ts of what it has applied.
    pub(crate) fn safe_ts(&mut self, region_id: u64, store_id: u64, now: Instant) -> u64 {
        if self.lag_of(store_id).is_some() {
            let is_leader = self.regions.get(&region_id).is_some_and(|r| {
                r.leader.and_then(|id| r.peer(id)).map(|p| p.store_id) == Some(store_id)
            });
            if !is_leader {
                return self
                    .applied(region_id, store_id, now)
                    .map_or(0, |a| a.region.resolved_ts);
            }
        }
        self.advance_resolved_ts(region_id)
    }

    /// Advances Region `region_id`'s resolved ts to the last tick of
    /// `advance-ts-interval`, and returns it: min(PD's ts at the tick, the
    /// oldest lock's start ts), never lower than before. The tick's ts is
    /// composed from the TSO clock at the tick; `max_ts` is raised to it
    /// first, so a transaction prewritten from now on commits above it.
    fn advance_resolved_ts(&mut self, region_id: u64) -> u64 {
        // Without a leader that can reach PD and its peers, nothing
        // advances it (TiKV's leader publishes it through CheckLeader).
        let leader_store = self
            .regions
            .get(&region_id)
            .and_then(|r| r.leader.and_then(|id| r.peer(id)))
            .map(|p| p.store_id);
        let leader_live = leader_store
            .and_then(|s| self.stores.get(&s))
            .is_some_and(|s| s.up && s.hang.is_none());
        if !leader_live {
            return self.regions.get(&region_id).map_or(0, |r| r.resolved_ts);
        }
        let interval = i64::try_from(self.resolved_ts_interval.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let now_ms = self.clock_ms();
        let tick_ms = now_ms - now_ms.rem_euclid(interval);
        let tick_ts = u64::try_from(tick_ms).unwrap_or(0) << super::state::TSO_LOGICAL_BITS;
        let Some(region) = self.regions.get_mut(&region_id) else {
            return 0;
        };
        region.mvcc.observe_read_ts(tick_ts);
        let candidate = region
            .mvcc
            .oldest_lock_start_ts()
            .map_or(tick_ts, |oldest| oldest.min(tick_ts));
        region.resolved_ts = region.resolved_ts.max(candidate);
        region.resolved_ts
    }

    /// Drops what peers of `store_id` had applied (its lag ended: they
    /// caught up).
    pub(crate) fn drop_applied(&mut self, store_id: u64) {
        self.applied.retain(|(_, store), _| *store != store_id);
    }
}
