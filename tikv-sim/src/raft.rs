//! Raft as a client meets it: the leader elections that follow a store's
//! death, and the windows around leader changes, merges and new peers in
//! which TiKV answers with Region errors. The facts modelled, and where
//! they come from:
//!
//! * **Election timing.** raft-rs draws each follower's election timeout
//!   uniformly from `[min_election_tick, max_election_tick)`, by default
//!   `[election_tick, 2 × election_tick)` (`RaftCore::reset_randomized_election_timeout`
//!   in raft-rs `src/raft.rs`), counted in ticks since it last heard from
//!   the leader. TiKV ticks every `raftstore.raft-base-tick-interval`
//!   (1 s) with `raft-election-timeout-ticks` 10 and
//!   `raft-heartbeat-ticks` 2 (`components/raftstore/src/store/config.rs`).
//!   So the first follower campaigns between 10 and 20 s after the
//!   leader's last heartbeat, which came up to one heartbeat interval
//!   before the store died. TiKV runs Raft with pre-vote and check-quorum:
//!   a candidate wins only with a quorum of the Region's voters alive.
//!   Hibernated Regions are woken when their leader's store becomes
//!   unreachable (`on_store_unreachable` in raftstore's peer fsm), so they
//!   elect too.
//! * **The window.** Until a new leader is elected, followers still name
//!   the dead peer as leader (`NotLeader` with it as the hint), and a peer
//!   that restarted knows no leader (`NotLeader` without a hint). A Region
//!   without a quorum of live voters elects no one: every peer answers
//!   `NotLeader` without a hint.
//! * **After the election.** The new leader heartbeats PD at once, so PD
//!   reports it (unless the store is cut off from PD). It is not yet sure
//!   its max ts is above every timestamp the old leader served: until it
//!   has fetched a timestamp from PD (`txn_ext.max_ts_sync_status`, the
//!   pd worker's `UpdateMaxTimestamp` task), async-commit and 1PC
//!   prewrites (`commands/prewrite.rs`) and API v2 raw writes
//!   (`check_causal_ts_flushed` in `storage/mod.rs`) are refused with
//!   `MaxTimestampNotSynced`. This holds after any leader change, a
//!   transfer as much as an election.
//! * **A crash loses memory.** TiKV keeps pessimistic locks in the
//!   leader's memory (`pessimistic-txn.in-memory`, on by default) and
//!   moves them to the new leader only on a leader transfer; a crash loses
//!   them, and with them the lock-wait queues of the store.
//!
//! Time here is the cluster's Raft clock ([`RaftClock`]): tokio's clock
//! (paused in tests), or the clock a deterministic simulation gives.
//! Everything timed is settled lazily, when the state is next looked at
//! (every request and every PD call does), so no task runs in the
//! background and a run replays.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::counters::Outcome;
use crate::proto::errorpb;
use crate::proto::metapb::{self, PeerRole};
use crate::state::{ClusterState, Rejection, TsoClock};
use tikv_plan_proto::meta::can_become_leader;

/// Raft's timing as TiKV configures it, and how long a new leader takes to
/// sync its max ts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// `raftstore.raft-base-tick-interval`: one Raft tick.
    pub base_tick: Duration,
    /// `raftstore.raft-election-timeout-ticks`: the least election timeout,
    /// in ticks (raft-rs draws each from `[this, 2 × this)`).
    pub election_ticks: u32,
    /// `raftstore.raft-heartbeat-ticks`: how often a leader heartbeats.
    pub heartbeat_ticks: u32,
    /// How long a new leader takes to fetch a timestamp from PD and mark
    /// its max ts synced (PD must have a live leader by then).
    pub max_ts_sync: Duration,
}

impl RaftTiming {
    /// TiKV's defaults: a 1 s tick, elections after 10 to 20 s, heartbeats
    /// every 2 s; a new leader syncs its max ts in one PD round trip
    /// (taken as 1 ms).
    pub const fn tikv() -> Self {
        RaftTiming {
            base_tick: Duration::from_secs(1),
            election_ticks: 10,
            heartbeat_ticks: 2,
            max_ts_sync: Duration::from_millis(1),
        }
    }

    /// TiKV's tick counts on a shorter tick, for tests: with a 100 ms tick,
    /// elections come 1 to 2 s after a leader dies.
    pub const fn scaled(base_tick: Duration) -> Self {
        RaftTiming {
            base_tick,
            ..RaftTiming::tikv()
        }
    }

    /// With `max_ts_sync` as given.
    pub const fn with_max_ts_sync(mut self, max_ts_sync: Duration) -> Self {
        self.max_ts_sync = max_ts_sync;
        self
    }

    /// The least election timeout (`E`): followers campaign between `E`
    /// and `2E` after the leader's last heartbeat.
    pub fn election_timeout(&self) -> Duration {
        self.base_tick.saturating_mul(self.election_ticks)
    }

    fn heartbeat_interval(&self) -> Duration {
        self.base_tick.saturating_mul(self.heartbeat_ticks)
    }
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming::tikv()
    }
}

/// What the Raft side of the cluster has done, for tests and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RaftStats {
    /// Leaders elected after their Region's leader died.
    pub elections: u64,
    /// Elections that found no quorum of live voters (tried again later).
    pub no_quorum: u64,
    /// Pessimistic locks lost with a crashed leader.
    pub pessimistic_locks_lost: u64,
    /// Requests answered `MaxTimestampNotSynced`.
    pub max_ts_not_synced: u64,
    /// Writes answered `StaleCommand`.
    pub stale_commands: u64,
    /// Requests answered `ProposalInMergingMode`.
    pub proposals_in_merging_mode: u64,
    /// Requests answered `RegionNotInitialized`.
    pub region_not_initialized: u64,
    /// Writes answered `DiskFull`.
    pub disk_full: u64,
}

/// The clock Raft's timers run on: the time since the cluster was built.
#[derive(Debug)]
pub(crate) struct RaftClock {
    origin: tokio::time::Instant,
    /// The latest time read: the clock never goes back.
    last: Duration,
}

impl RaftClock {
    fn new() -> Self {
        RaftClock {
            origin: tokio::time::Instant::now(),
            last: Duration::ZERO,
        }
    }

    /// Now: the given clock's time when the cluster has one (a
    /// deterministic simulation's), else tokio's since the cluster was
    /// built; never earlier than a time read before.
    fn now(&mut self, given: &TsoClock) -> Duration {
        let read = given
            .given_since_epoch()
            .unwrap_or_else(|| self.origin.elapsed());
        self.last = self.last.max(read);
        self.last
    }
}

/// The Raft side of the cluster's state.
#[derive(Debug)]
pub(crate) struct RaftState {
    pub(crate) timing: RaftTiming,
    clock: RaftClock,
    rng: u64,
    /// Regions whose leader died with its store, and when their followers
    /// elect a new one. While a Region is here, no peer serves as leader.
    pub(crate) elections: BTreeMap<u64, Duration>,
    /// Stores whose Regions keep their leader on them however long they
    /// are dead: the cold-Region case, where no follower campaigns.
    pub(crate) keep_leaders: BTreeSet<u64>,
    /// New leaders still syncing their max ts, by Region: when they are
    /// done.
    pub(crate) max_ts_unsynced: BTreeMap<u64, Duration>,
    /// Regions in a merge, as source: the target, and when CommitMerge
    /// completes it.
    pub(crate) merging: BTreeMap<u64, (u64, Duration)>,
    /// Peers not yet initialized (no snapshot applied), by peer id: when
    /// they are.
    pub(crate) uninitialized: BTreeMap<u64, Duration>,
    /// Stores whose disk is full.
    pub(crate) disk_full: BTreeSet<u64>,
    /// By store: how long a write waits between its proposal and its
    /// apply (a leader change in between makes it a stale command).
    pub(crate) propose_delay: BTreeMap<u64, Duration>,
    pub(crate) stats: RaftStats,
}

impl RaftState {
    pub(crate) fn new(seed: u64) -> Self {
        RaftState {
            timing: RaftTiming::tikv(),
            clock: RaftClock::new(),
            rng: seed | 1,
            elections: BTreeMap::new(),
            keep_leaders: BTreeSet::new(),
            max_ts_unsynced: BTreeMap::new(),
            merging: BTreeMap::new(),
            uninitialized: BTreeMap::new(),
            disk_full: BTreeSet::new(),
            propose_delay: BTreeMap::new(),
            stats: RaftStats::default(),
        }
    }

    /// A uniform draw from `[0, bound)` (xorshift; seeded, so a run
    /// replays).
    fn below(&mut self, bound: u64) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        if bound == 0 {
            0
        } else {
            x % bound
        }
    }

    fn draw(&mut self, low: Duration, high: Duration) -> Duration {
        let span = u64::try_from(high.saturating_sub(low).as_micros()).unwrap_or(u64::MAX);
        low + Duration::from_micros(self.below(span))
    }

    /// When the first of `followers` live followers campaigns, counted
    /// from the leader's death: each drew a timeout in `[E, 2E)` from the
    /// last heartbeat it heard, which came up to one heartbeat interval
    /// before the death. Pre-vote makes the others grant it only once they
    /// too have not heard from the leader for `E`.
    fn election_delay(&mut self, followers: usize) -> Duration {
        let e = self.timing.election_timeout();
        let mut first = e.saturating_mul(2);
        for _ in 0..followers.max(1) {
            let timeout = self.draw(e, e.saturating_mul(2));
            let heard = self.draw(Duration::ZERO, self.timing.heartbeat_interval());
            first = first.min(timeout.saturating_sub(heard));
        }
        first.max(e.saturating_sub(self.timing.heartbeat_interval()))
    }

    /// Whether Region `region_id` has a leader that serves: none while its
    /// followers are yet to elect one.
    pub(crate) fn electing(&self, region_id: u64) -> bool {
        self.elections.contains_key(&region_id)
    }

    /// A Region's pending election, merge state and max ts follow it into
    /// the Region split off it.
    pub(crate) fn on_split(&mut self, parent: u64, child: u64) {
        if let Some(due) = self.elections.get(&parent).copied() {
            self.elections.insert(child, due);
        }
        if let Some(done) = self.max_ts_unsynced.get(&parent).copied() {
            self.max_ts_unsynced.insert(child, done);
        }
    }

    /// A Region's leader was set by hand (a transfer, a cold Region woken):
    /// no election is pending, and the new leader syncs its max ts.
    pub(crate) fn on_new_leader(&mut self, region_id: u64, now: Duration) {
        self.elections.remove(&region_id);
        self.max_ts_unsynced
            .insert(region_id, now + self.timing.max_ts_sync);
    }

    /// Whether Region `region_id` is in a merge, as its source or its
    /// target: it takes no split and no conf change until the merge is
    /// done (TiKV refuses them as proposals in merging mode; PD schedules
    /// none on a merging target).
    pub(crate) fn in_merge(&self, region_id: u64) -> bool {
        self.merging.contains_key(&region_id)
            || self
                .merging
                .values()
                .any(|(target, _)| *target == region_id)
    }

    /// `Err` naming the merge when Region `region_id` is in one.
    pub(crate) fn refuse_in_merge(&self, region_id: u64, what: &str) -> crate::Result<()> {
        if self.in_merge(region_id) {
            return Err(crate::Error::InvalidArgument(format!(
                "region {region_id} is merging: it takes no {what} until the merge is done"
            )));
        }
        Ok(())
    }

    /// The earliest time anything timed is due, if anything is.
    fn next_due(&self) -> Option<Duration> {
        let elections = self.elections.values();
        let synced = self.max_ts_unsynced.values();
        let merges = self.merging.values().map(|(_, at)| at);
        let inits = self.uninitialized.values();
        elections
            .chain(synced)
            .chain(merges)
            .chain(inits)
            .min()
            .copied()
    }
}

/// Whether `peer` votes in its Region's elections.
fn is_voter(peer: &metapb::Peer) -> bool {
    peer.role == PeerRole::Voter as i32
}

impl ClusterState {
    /// The Raft clock now.
    pub(crate) fn raft_now(&mut self) -> Duration {
        self.raft.clock.now(&self.clock)
    }

    /// Whether a store's peers take part in Raft: up and not hung.
    pub(crate) fn store_alive(&self, store_id: u64) -> bool {
        self.stores
            .get(&store_id)
            .is_some_and(|s| s.up && s.hang.is_none())
    }

    /// A store died (went down, or hung): the Regions it led lose their
    /// leader, and their followers elect after the election timeout,
    /// unless the store keeps its leaders (cold).
    pub(crate) fn store_died(&mut self, store_id: u64) {
        if self.raft.keep_leaders.contains(&store_id) {
            return;
        }
        let now = self.raft_now();
        let led: Vec<(u64, usize)> = self
            .regions
            .values()
            .filter(|r| r.led_from(store_id))
            .map(|r| {
                let followers = r
                    .meta
                    .peers
                    .iter()
                    .filter(|p| p.store_id != store_id && can_become_leader(p))
                    .count();
                (r.meta.id, followers)
            })
            .collect();
        for (region_id, followers) in led {
            if self.raft.elections.contains_key(&region_id) {
                continue;
            }
            let due = now + self.raft.election_delay(followers);
            self.raft.elections.insert(region_id, due);
        }
    }

    /// A hung store answers again before its Regions elected: its leaders
    /// heartbeat again, and the followers stop counting down.
    pub(crate) fn store_revived(&mut self, store_id: u64) {
        if !self.store_alive(store_id) {
            return;
        }
        let regions = &self.regions;
        self.raft
            .elections
            .retain(|region_id, _| !regions.get(region_id).is_some_and(|r| r.led_from(store_id)));
    }

    /// Settles whatever is due on the Raft clock: elections, max ts syncs,
    /// merges that commit, peers that finish initializing. Cheap when
    /// nothing is due.
    pub(crate) fn tick(&mut self) {
        let Some(due) = self.raft.next_due() else {
            return;
        };
        let now = self.raft_now();
        if now < due {
            return;
        }
        let elections: Vec<u64> = self
            .raft
            .elections
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for region_id in elections {
            self.elect(region_id, now);
        }
        let pd_serves = self
            .pd_members
            .get(self.pd_leader)
            .is_some_and(|m| m.up && !m.hung);
        let retry = now + self.raft.timing.max_ts_sync;
        self.raft
            .max_ts_unsynced
            .retain(|_, at| *at > now || !pd_serves);
        for at in self.raft.max_ts_unsynced.values_mut() {
            if *at <= now {
                // PD is not serving: the new leader asks again.
                *at = retry;
            }
        }
        self.raft.uninitialized.retain(|_, at| *at > now);
        let merges: Vec<(u64, u64)> = self
            .raft
            .merging
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(source, (target, _))| (*source, *target))
            .collect();
        for (source, target) in merges {
            self.raft.merging.remove(&source);
            if let Err(e) = self.commit_merge(source, target) {
                tracing::info!("simulated merge of region {source} into {target} gave up: {e}");
            }
        }
    }

    /// The followers of Region `region_id` elect a leader among the voters
    /// on live stores, if a quorum of its voters is alive; otherwise the
    /// Region has no leader and they try again after another timeout.
    fn elect(&mut self, region_id: u64, now: Duration) {
        let Some(region) = self.regions.get(&region_id) else {
            self.raft.elections.remove(&region_id);
            return;
        };
        let voters: Vec<metapb::Peer> = region
            .meta
            .peers
            .iter()
            .filter(|p| is_voter(p))
            .copied()
            .collect();
        let live = voters
            .iter()
            .filter(|p| self.store_alive(p.store_id))
            .count();
        let candidates: Vec<metapb::Peer> = voters
            .iter()
            .filter(|p| {
                self.store_alive(p.store_id)
                    && can_become_leader(p)
                    && !self.raft.uninitialized.contains_key(&p.id)
            })
            .copied()
            .collect();
        if live * 2 <= voters.len() || candidates.is_empty() {
            self.raft.stats.no_quorum += 1;
            if let Some(region) = self.regions.get_mut(&region_id) {
                region.leader = None;
                region.cold = None;
            }
            let again = now + self.raft.election_delay(candidates.len());
            self.raft.elections.insert(region_id, again);
            return;
        }
        let index = usize::try_from(self.raft.below(candidates.len() as u64)).unwrap_or(0);
        let Some(winner) = candidates.get(index).copied() else {
            return;
        };
        let reported = !self.cut_off_from_pd.contains(&winner.store_id);
        let mut lost = 0;
        if let Some(region) = self.regions.get_mut(&region_id) {
            region.leader = Some(winner.id);
            region.cold = None;
            if reported {
                region.pd_leader = Some(winner.id);
            }
            // The old leader's memory is gone: its pessimistic locks and
            // the requests that waited on them.
            lost = region.mvcc.drop_pessimistic_locks();
        }
        self.raft.stats.elections += 1;
        self.raft.stats.pessimistic_locks_lost += lost as u64;
        self.raft.on_new_leader(region_id, now);
        tracing::info!(
            "simulated region {region_id} elected peer {} on store {} ({lost} in-memory pessimistic locks lost)",
            winner.id,
            winner.store_id
        );
    }
}

fn region_error(message: String) -> errorpb::Error {
    errorpb::Error {
        message,
        ..Default::default()
    }
}

impl ClusterState {
    /// The refusals of a replica or stale read on `store_id`'s peer
    /// `peer_id` that TiKV gives past its not-leader check (which these
    /// reads skip): `RegionNotInitialized` on a peer that has not applied
    /// its first snapshot (`pre_propose_raft_command`), `ReadIndexNotReady`
    /// on a Region in a merge (its read index waits for no merge), and
    /// `DiskFull` for a follower read on a store whose disk is full.
    pub(crate) fn refuse_replica_read(
        &mut self,
        region_id: u64,
        peer_id: u64,
        store_id: u64,
        is_leader: bool,
    ) -> Result<(), Rejection> {
        if self.raft.uninitialized.contains_key(&peer_id) {
            self.raft.stats.region_not_initialized += 1;
            let mut e = region_error(format!(
                "region {region_id} is not initialized on peer {peer_id} (simulated snapshot pending)"
            ));
            e.region_not_initialized = Some(errorpb::RegionNotInitialized { region_id });
            return Err((Box::new(e), Outcome::RegionNotInitialized));
        }
        self.refuse_merging_read(region_id)?;
        if !is_leader && self.raft.disk_full.contains(&store_id) {
            self.raft.stats.disk_full += 1;
            let mut e = region_error(format!(
                "the disk of store {store_id} is full: its peer of region {region_id} serves no replica read"
            ));
            e.disk_full = Some(errorpb::DiskFull {
                store_id: vec![store_id],
                reason: format!("store {store_id} disk is already full (simulated)"),
            });
            return Err((Box::new(e), Outcome::DiskFull));
        }
        Ok(())
    }

    /// A read of a Region in a merge: PrepareMerge suspected the leader's
    /// lease, so the read needs a read index, which TiKV refuses while the
    /// Region merges.
    pub(crate) fn refuse_merging_read(&self, region_id: u64) -> Result<(), Rejection> {
        if !self.raft.merging.contains_key(&region_id) {
            return Ok(());
        }
        let mut e = region_error(format!(
            "region {region_id} is merging: can not read index due to merge"
        ));
        e.read_index_not_ready = Some(errorpb::ReadIndexNotReady {
            reason: "can not read index due to merge".to_owned(),
            region_id,
        });
        Err((Box::new(e), Outcome::ReadIndexNotReady))
    }

    /// The refusals of a write about to be proposed by the leader of
    /// Region `region_id` on `store_id`, in TiKV's order: the scheduler's
    /// max-ts check on the snapshot (`needs_max_ts`: an async-commit or
    /// 1PC prewrite, an API v2 raw write), then the proposal's: a Region
    /// in a merge (`ProposalInMergingMode`), a full disk (`DiskFull`).
    pub(crate) fn refuse_proposal(
        &mut self,
        region_id: u64,
        store_id: u64,
        needs_max_ts: bool,
    ) -> Result<(), Rejection> {
        if needs_max_ts && self.raft.max_ts_unsynced.contains_key(&region_id) {
            self.raft.stats.max_ts_not_synced += 1;
            let mut e = region_error(format!(
                "the new leader of region {region_id} has not synced its max ts from PD yet"
            ));
            e.max_timestamp_not_synced = Some(errorpb::MaxTimestampNotSynced::default());
            return Err((Box::new(e), Outcome::MaxTimestampNotSynced));
        }
        if self.raft.merging.contains_key(&region_id) {
            self.raft.stats.proposals_in_merging_mode += 1;
            let mut e = region_error(format!(
                "region {region_id} is merging: it takes no proposal until the merge is done"
            ));
            e.proposal_in_merging_mode = Some(errorpb::ProposalInMergingMode { region_id });
            return Err((Box::new(e), Outcome::ProposalInMergingMode));
        }
        // The leader's own disk full: it names itself. Otherwise a majority
        // of the peers' disks full: it names them.
        let peers: Vec<u64> = self
            .regions
            .get(&region_id)
            .map(|r| r.meta.peers.iter().map(|p| p.store_id).collect())
            .unwrap_or_default();
        let full: Vec<u64> = peers
            .iter()
            .copied()
            .filter(|s| self.raft.disk_full.contains(s))
            .collect();
        let named = if full.contains(&store_id) {
            vec![store_id]
        } else if full.len() * 2 > peers.len() {
            full
        } else {
            return Ok(());
        };
        self.raft.stats.disk_full += 1;
        let mut e = region_error(format!(
            "disk full on store(s) {named:?}: region {region_id} takes no write"
        ));
        e.disk_full = Some(errorpb::DiskFull {
            reason: format!("store(s) {named:?} disk is already full (simulated)"),
            store_id: named,
        });
        Err((Box::new(e), Outcome::DiskFull))
    }

    /// How long a write on `store_id` waits between its proposal and its
    /// apply, if it waits.
    pub(crate) fn propose_delay(&self, store_id: u64) -> Option<Duration> {
        self.raft
            .propose_delay
            .get(&store_id)
            .copied()
            .filter(|d| !d.is_zero())
    }

    /// After a write's proposal wait: `StaleCommand` when Region
    /// `region_id` is no longer led by `peer_id` (a leader change overtook
    /// the proposal, whose entry the new leader's log replaces: nothing of
    /// it is applied).
    pub(crate) fn refuse_stale(&mut self, region_id: u64, peer_id: u64) -> Result<(), Rejection> {
        let leads = self
            .regions
            .get(&region_id)
            .is_some_and(|r| r.leader == Some(peer_id) && !self.raft.electing(region_id));
        if leads {
            return Ok(());
        }
        self.raft.stats.stale_commands += 1;
        let mut e = region_error(format!(
            "the proposal to region {region_id} was overtaken by a leader change (stale command)"
        ));
        e.stale_command = Some(errorpb::StaleCommand::default());
        Err((Box::new(e), Outcome::StaleCommand))
    }
}
