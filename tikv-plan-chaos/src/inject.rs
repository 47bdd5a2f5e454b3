//! The fault injector: a seeded loop that applies every fault the
//! simulated cluster has, heals each after a seeded while, and counts them.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use tikv_plan::proto::metapb::PeerRole;
use tikv_sim::{ColdMode, HangMode, SimCluster};

mod kinds;
mod network;
mod raft;
mod scheduler;

pub use kinds::FaultKind;
pub use scheduler::DEFAULT_SCHEDULER_PAUSE;

/// How the injector picks and paces faults.
#[derive(Debug, Clone)]
pub struct InjectorConfig {
    /// The seed of its random choices.
    pub seed: u64,
    /// The kinds it may apply, each with a weight.
    pub kinds: Vec<(FaultKind, u32)>,
    /// The pause between two injections is drawn from this range.
    pub interval: (Duration, Duration),
    /// How long a healable fault lasts is drawn from this range.
    pub duration: (Duration, Duration),
    /// The most Regions a split may bring the cluster to, above the count
    /// it started with (merges make room for more).
    pub max_splits: usize,
    /// PD's schedulers, for the whole run: the pause between two of their
    /// moves (a leader transfer, a merge, a split or a peer move, drawn
    /// evenly) is drawn from this range, apart from the faults' pacing.
    /// `None`: the cluster changes shape only by the faults drawn.
    pub scheduler: Option<(Duration, Duration)>,
    /// Keys it may split at and aim dropped responses at (the Region
    /// leader holding one of them gets the order). Region boundaries are
    /// wire keys: a transactional run passes its keys encoded
    /// ([`encode_bytes`](tikv_sim::codec::encode_bytes)).
    pub keys: Vec<Vec<u8>>,
}

impl InjectorConfig {
    /// Every kind with the default weights.
    pub fn all_kinds() -> Vec<(FaultKind, u32)> {
        FaultKind::ALL
            .iter()
            .map(|k| {
                let weight = match k {
                    FaultKind::Split | FaultKind::Merge | FaultKind::StoreMove => 1,
                    FaultKind::PeerMove => 2,
                    FaultKind::PdMemberDown | FaultKind::PdLeaderChange | FaultKind::PdHang => 2,
                    FaultKind::StoreDown | FaultKind::HangConnect | FaultKind::HangRespond => 3,
                    FaultKind::Crash | FaultKind::Restart | FaultKind::ProposeDelay => 2,
                    FaultKind::DiskFull | FaultKind::SlowMerge => 1,
                    k if k.dropped_method().is_some() => 4,
                    _ => 3,
                };
                (*k, weight)
            })
            .collect()
    }

    /// The kinds of a transactional run with their default weights: every
    /// raw kind except the raw dropped responses (no raw request is sent),
    /// plus [`FaultKind::TXN`]. Split keys must then be encoded keys.
    pub fn txn_kinds() -> Vec<(FaultKind, u32)> {
        let mut kinds: Vec<(FaultKind, u32)> = Self::all_kinds()
            .into_iter()
            .filter(|(k, _)| !FaultKind::DROPS.contains(k))
            .collect();
        kinds.extend(FaultKind::TXN.iter().map(|k| {
            let weight = match k {
                FaultKind::TsoJump => 3,
                FaultKind::DropCommit | FaultKind::DropPrewrite => 4,
                _ => 2,
            };
            (*k, weight)
        }));
        kinds
    }
}

/// One fault as applied: when, to what, and when it was lifted. Times are
/// microseconds since an origin the caller picks
/// ([`Injector::windows_since`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultWindow {
    /// The injection attempt that applied it ([`Injector::only`]).
    pub attempt: usize,
    /// The kind.
    pub kind: FaultKind,
    /// What it was applied to (`store 2`, `region 12 to store 3`, `PD
    /// member 1`, …).
    pub target: String,
    /// When it was applied.
    pub start: u64,
    /// When it was lifted: the same as `start` for a fault that is not
    /// healed (a leader transfer, a split, a dropped response order, a PD
    /// leader change, a TSO jump), and for a healable one the moment its
    /// heal ran (the last at the end of the run).
    pub end: u64,
    /// True for the kinds that last until healed.
    pub healable: bool,
}

/// A fault as the injector logs it, in its own clock.
#[derive(Debug, Clone)]
struct Applied {
    /// The injection attempt that applied it (see [`Injector::only`]).
    attempt: usize,
    kind: FaultKind,
    target: String,
    start: Instant,
    /// When its heal ran; `None` until then, and for kinds not healed.
    end: Option<Instant>,
    healable: bool,
}

/// A fault that is undone later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heal {
    StoreUp(u64),
    Unhang(u64),
    Unslow(u64),
    Unbusy(u64),
    PdUp(usize),
    PdUnhang(usize),
    Warm(u64),
    Uncut(u64),
    Unlag(u64),
    /// A crashed store restarts.
    Restarted(u64),
    /// A gracefully restarted store comes back and takes its leaders back.
    Returned(u64),
    DiskFree(u64),
    Unpropose(u64),
}

impl Heal {
    /// Store faults that stop a store serving: at most one at a time.
    fn stops_store(self) -> bool {
        matches!(
            self,
            Heal::StoreUp(_) | Heal::Unhang(_) | Heal::Restarted(_) | Heal::Returned(_)
        )
    }
}

/// The injector's state.
pub struct Injector {
    rng: fastrand::Rng,
    config: InjectorConfig,
    counts: BTreeMap<FaultKind, u64>,
    /// Faults to heal: when, how, and the index of the fault in `log`.
    active: Vec<(Instant, Heal, usize)>,
    /// Every fault applied, in order.
    log: Vec<Applied>,
    /// The Region count when the run started.
    base_regions: Option<usize>,
    /// Kinds not applied yet: tried first, in turn, so a short run still
    /// applies every kind.
    untried: std::collections::VecDeque<FaultKind>,
    /// Injection attempts so far.
    attempts: usize,
    /// When set, only these attempts apply their fault.
    only: Option<std::collections::BTreeSet<usize>>,
    /// The Regions whose leaders a graceful restart moved off each store,
    /// to move back once it is up.
    evicted: BTreeMap<u64, Vec<u64>>,
}

impl Injector {
    /// A new injector.
    pub fn new(config: InjectorConfig) -> Self {
        Injector {
            rng: fastrand::Rng::with_seed(config.seed),
            untried: config
                .kinds
                .iter()
                .filter(|(_, w)| *w > 0)
                .map(|(k, _)| *k)
                .collect(),
            config,
            counts: BTreeMap::new(),
            active: Vec::new(),
            log: Vec::new(),
            base_regions: None,
            attempts: 0,
            only: None,
            evicted: BTreeMap::new(),
        }
    }

    /// Applies only the faults of these injection attempts (numbered from
    /// 0 in the order the injector makes them); the others are drawn and
    /// dropped. Same seed, same set: the same run, with fewer faults. What
    /// a shrinking search narrows down.
    pub fn only(&mut self, attempts: std::collections::BTreeSet<usize>) {
        self.only = Some(attempts);
    }

    /// The injection attempts that applied a fault, in order.
    pub fn applied_attempts(&self) -> Vec<usize> {
        self.log.iter().map(|a| a.attempt).collect()
    }

    /// Faults applied so far, by kind.
    pub fn counts(&self) -> &BTreeMap<FaultKind, u64> {
        &self.counts
    }

    /// Every fault applied so far, in order, with times in microseconds
    /// since `origin` (a fault applied before it starts at 0). A healable
    /// fault not healed yet ends when it started.
    pub fn windows_since(&self, origin: Instant) -> Vec<FaultWindow> {
        let micros = |at: Instant| {
            u64::try_from(at.saturating_duration_since(origin).as_micros()).unwrap_or(u64::MAX)
        };
        self.log
            .iter()
            .map(|a| FaultWindow {
                attempt: a.attempt,
                kind: a.kind,
                target: a.target.clone(),
                start: micros(a.start),
                end: micros(a.end.unwrap_or(a.start)).max(micros(a.start)),
                healable: a.healable,
            })
            .collect()
    }

    fn draw(&mut self, range: (Duration, Duration)) -> Duration {
        let (low, high) = (range.0.as_millis() as u64, range.1.as_millis() as u64);
        Duration::from_millis(self.rng.u64(low..=high.max(low)))
    }

    /// Applies and heals faults until `stop`, then heals everything.
    /// The scheduler ([`InjectorConfig::scheduler`]) runs between them.
    pub async fn run(&mut self, cluster: &SimCluster, stop: Instant) {
        self.base_regions.get_or_insert(cluster.regions().len());
        let mut next_move = self.next_scheduler_move();
        while Instant::now() < stop {
            let pause = self.draw(self.config.interval);
            let wake = (Instant::now() + pause).min(stop);
            while let Some(at) = next_move.filter(|at| *at < wake) {
                tokio::time::sleep_until(at).await;
                self.scheduler_move(cluster).await;
                next_move = self.next_scheduler_move();
            }
            tokio::time::sleep_until(wake).await;
            self.heal_due(cluster, false).await;
            if Instant::now() >= stop {
                break;
            }
            self.inject_one(cluster).await;
        }
        self.heal_all(cluster).await;
    }

    async fn heal_due(&mut self, cluster: &SimCluster, everything: bool) {
        let now = Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) = self
            .active
            .drain(..)
            .partition(|(at, _, _)| everything || *at <= now);
        self.active = keep;
        for (_, heal, index) in due {
            match heal {
                Heal::StoreUp(s) => {
                    if let Err(e) = cluster.store_up(s).await {
                        tracing::warn!("chaos: store {s} did not come back up: {e}");
                    }
                }
                Heal::Unhang(s) => cluster.store_unhang(s),
                Heal::Unslow(s) => cluster.store_slow(s, Duration::ZERO),
                Heal::Unlag(s) => {
                    let _ = cluster.store_lag(s, None);
                }
                Heal::Unbusy(s) => cluster.store_busy(s, None),
                Heal::Uncut(s) => {
                    let _ = cluster.cut_store_from_clients(s, None);
                }
                Heal::PdUp(m) => {
                    if let Err(e) = cluster.pd_member_up(m).await {
                        tracing::warn!("chaos: PD member {m} did not come back up: {e}");
                    }
                }
                Heal::PdUnhang(m) => {
                    if let Err(e) = cluster.pd_member_unhang(m) {
                        tracing::warn!("chaos: PD member {m} stayed hung: {e}");
                    }
                }
                Heal::Restarted(_) | Heal::Returned(_) | Heal::DiskFree(_) | Heal::Unpropose(_) => {
                    self.heal_raft(cluster, heal).await;
                }
                Heal::Warm(region) => {
                    if cluster.region(region).is_some() && cluster.leader_of(region).is_none() {
                        if let Some(store) = voter_stores(cluster, region).first() {
                            let _ = cluster.transfer_leader(region, *store, true);
                        }
                    }
                }
            }
            if let Some(applied) = self.log.get_mut(index) {
                applied.end = Some(Instant::now());
            }
        }
    }

    /// Lifts every fault: stores up and serving at full speed, PD members
    /// up, every Region led with PD told who leads.
    pub async fn heal_all(&mut self, cluster: &SimCluster) {
        self.heal_due(cluster, true).await;
        for store in cluster.store_ids() {
            if let Err(e) = cluster.store_up(store).await {
                tracing::warn!("chaos: store {store} did not come back up: {e}");
            }
            cluster.store_unhang(store);
            cluster.store_slow(store, Duration::ZERO);
            cluster.store_busy(store, None);
            let _ = cluster.cut_store_from_clients(store, None);
            let _ = cluster.store_disk_full(store, false);
            let _ = cluster.store_propose_delay(store, Duration::ZERO);
        }
        for member in 0..cluster.pd_endpoints().len() {
            if let Err(e) = cluster.pd_member_up(member).await {
                tracing::warn!("chaos: PD member {member} did not come back up: {e}");
            }
            let _ = cluster.pd_member_unhang(member);
        }
        for region in cluster.regions() {
            let leader = cluster.leader_of(region.id).map(|p| p.store_id);
            let target = leader.or_else(|| voter_stores(cluster, region.id).first().copied());
            if let Some(store) = target {
                let _ = cluster.transfer_leader(region.id, store, true);
            }
        }
    }

    fn pick_kind(&mut self) -> Option<FaultKind> {
        if let Some(kind) = self.untried.pop_front() {
            // Back of the queue until it is applied once.
            self.untried.push_back(kind);
            return Some(kind);
        }
        let total: u64 = self.config.kinds.iter().map(|(_, w)| u64::from(*w)).sum();
        if total == 0 {
            return None;
        }
        let mut ticket = self.rng.u64(0..total);
        for (kind, weight) in &self.config.kinds {
            if ticket < u64::from(*weight) {
                return Some(*kind);
            }
            ticket -= u64::from(*weight);
        }
        None
    }

    fn store_is_free(&self, store: u64, same: fn(Heal, u64) -> bool) -> bool {
        !self.active.iter().any(|(_, h, _)| same(*h, store))
    }

    /// A random TiKV store: a fault on the TiFlash store would change
    /// nothing a TiKV client meets.
    fn random_store(&mut self, cluster: &SimCluster) -> Option<u64> {
        let stores = cluster.tikv_store_ids();
        if stores.is_empty() {
            return None;
        }
        stores.get(self.rng.usize(0..stores.len())).copied()
    }

    fn random_region(&mut self, cluster: &SimCluster) -> Option<u64> {
        let regions = cluster.regions();
        if regions.is_empty() {
            return None;
        }
        regions.get(self.rng.usize(0..regions.len())).map(|r| r.id)
    }

    fn random_key(&mut self) -> Option<Vec<u8>> {
        if self.config.keys.is_empty() {
            return None;
        }
        self.config
            .keys
            .get(self.rng.usize(0..self.config.keys.len()))
            .cloned()
    }

    async fn inject_one(&mut self, cluster: &SimCluster) {
        if let Some(kind) = self.pick_kind() {
            self.apply(cluster, kind).await;
        }
    }

    /// Applies one fault of `kind` (one injection attempt).
    async fn apply(&mut self, cluster: &SimCluster, kind: FaultKind) {
        let heal_at = Instant::now() + self.draw(self.config.duration);
        let attempt = self.attempts;
        self.attempts += 1;
        if self
            .only
            .as_ref()
            .is_some_and(|only| !only.contains(&attempt))
        {
            return;
        }
        // The fault's index in the log, should it be applied.
        let index = self.log.len();
        let started = Instant::now();
        // What the fault was applied to; `None`: not applied.
        let target: Option<String> = match kind {
            FaultKind::StoreDown | FaultKind::HangConnect | FaultKind::HangRespond => {
                if self.active.iter().any(|(_, h, _)| h.stops_store()) {
                    None
                } else if let Some(store) = self.random_store(cluster) {
                    let heal = match kind {
                        FaultKind::StoreDown => {
                            // Its leaders kept: the cold case. A crash whose
                            // Regions elect is `FaultKind::Crash`.
                            if cluster.store_down_cold(store).await.is_err() {
                                return;
                            }
                            Heal::StoreUp(store)
                        }
                        FaultKind::HangConnect => {
                            cluster.store_hang(store, HangMode::Connect);
                            Heal::Unhang(store)
                        }
                        _ => {
                            cluster.store_hang(store, HangMode::Respond);
                            Heal::Unhang(store)
                        }
                    };
                    self.active.push((heal_at, heal, index));
                    Some(format!("store {store}"))
                } else {
                    None
                }
            }
            FaultKind::Lag => match self.random_store(cluster) {
                Some(store) if self.store_is_free(store, |h, s| h == Heal::Unlag(s)) => {
                    let lag = Duration::from_millis(self.rng.u64(5..=300));
                    match cluster.store_lag(store, Some(lag)) {
                        Ok(()) => {
                            self.active.push((heal_at, Heal::Unlag(store), index));
                            Some(format!("store {store} applies {} ms late", lag.as_millis()))
                        }
                        Err(_) => None,
                    }
                }
                _ => None,
            },
            FaultKind::Slow => match self.random_store(cluster) {
                Some(store) if self.store_is_free(store, |h, s| h == Heal::Unslow(s)) => {
                    let delay = Duration::from_millis(self.rng.u64(5..=80));
                    cluster.store_slow(store, delay);
                    self.active.push((heal_at, Heal::Unslow(store), index));
                    Some(format!("store {store} +{} ms", delay.as_millis()))
                }
                _ => None,
            },
            FaultKind::BusyZero | FaultKind::BusyWait => match self.random_store(cluster) {
                Some(store) if self.store_is_free(store, |h, s| h == Heal::Unbusy(s)) => {
                    let wait = if kind == FaultKind::BusyZero {
                        0
                    } else {
                        self.rng.u32(10..=300)
                    };
                    cluster.store_busy(store, Some(wait));
                    self.active.push((heal_at, Heal::Unbusy(store), index));
                    Some(format!("store {store} wait {wait} ms"))
                }
                _ => None,
            },
            FaultKind::TransferFresh | FaultKind::TransferStale => {
                let Some(region) = self.random_region(cluster) else {
                    return;
                };
                let leader = cluster.leader_of(region).map(|p| p.store_id);
                let others: Vec<u64> = voter_stores(cluster, region)
                    .into_iter()
                    .filter(|s| Some(*s) != leader)
                    .collect();
                if others.is_empty() {
                    None
                } else {
                    let to = others[self.rng.usize(0..others.len())];
                    cluster
                        .transfer_leader(region, to, kind == FaultKind::TransferFresh)
                        .is_ok()
                        .then(|| format!("region {region} to store {to}"))
                }
            }
            FaultKind::ColdAccept | FaultKind::ColdNotLeaderFirst => {
                let Some(region) = self.random_region(cluster) else {
                    return;
                };
                let mode = if kind == FaultKind::ColdAccept {
                    ColdMode::AcceptAtOnce
                } else {
                    ColdMode::NotLeaderFirst
                };
                let done = cluster.make_cold(region, mode).is_ok();
                if done {
                    self.active.push((heal_at, Heal::Warm(region), index));
                }
                done.then(|| format!("region {region}"))
            }
            FaultKind::Split => {
                let regions = cluster.regions().len();
                let base = *self.base_regions.get_or_insert(regions);
                if regions >= base + self.config.max_splits {
                    None
                } else {
                    match self.random_key() {
                        Some(key) => cluster
                            .split_region(&key)
                            .is_ok()
                            .then(|| format!("at {}", key.escape_ascii())),
                        None => None,
                    }
                }
            }
            FaultKind::Merge => self.merge(cluster).await,
            FaultKind::Crash | FaultKind::Restart => {
                self.crash_or_restart(cluster, kind, heal_at, index).await
            }
            FaultKind::DiskFull | FaultKind::ProposeDelay => {
                self.disk_or_proposals(cluster, kind, heal_at, index)
            }
            FaultKind::SlowMerge => {
                let window = Duration::from_millis(self.rng.u64(100..=1_000));
                self.merge_in(cluster, Some(window)).await
            }
            FaultKind::PeerMove => self.peer_move(cluster).await,
            FaultKind::StoreMove => self.store_move(cluster).await,
            FaultKind::CutClients => self.cut_clients(cluster, heal_at, index),
            FaultKind::PdLeaderChange => {
                let members = cluster.pd_endpoints().len();
                let leader = cluster.pd_leader_index();
                let candidates: Vec<usize> = (0..members)
                    .filter(|m| {
                        *m != leader && !self.active.iter().any(|(_, h, _)| *h == Heal::PdUp(*m))
                    })
                    .collect();
                if candidates.is_empty() {
                    None
                } else {
                    let to = candidates[self.rng.usize(0..candidates.len())];
                    cluster
                        .pd_transfer_leader(to)
                        .is_ok()
                        .then(|| format!("PD member {to}"))
                }
            }
            FaultKind::PdHang => {
                let pd_fault = self
                    .active
                    .iter()
                    .any(|(_, h, _)| matches!(h, Heal::PdUp(_) | Heal::PdUnhang(_)));
                if pd_fault {
                    None
                } else {
                    let member = cluster.pd_leader_index();
                    let done = cluster.pd_member_hang(member).is_ok();
                    if done {
                        self.active.push((heal_at, Heal::PdUnhang(member), index));
                    }
                    done.then(|| format!("PD member {member}"))
                }
            }
            FaultKind::PdMemberDown => {
                let members = cluster.pd_endpoints().len();
                let any_down = self
                    .active
                    .iter()
                    .any(|(_, h, _)| matches!(h, Heal::PdUp(_) | Heal::PdUnhang(_)));
                if members < 2 || any_down {
                    None
                } else {
                    let member = self.rng.usize(0..members);
                    let done = cluster.pd_member_down(member).await.is_ok();
                    if done {
                        self.active.push((heal_at, Heal::PdUp(member), index));
                    }
                    done.then(|| format!("PD member {member}"))
                }
            }
            FaultKind::TsoJump => {
                let by = Duration::from_secs(self.rng.u64(1..=30));
                cluster.advance_tso_clock(by);
                Some(format!("+{} s", by.as_secs()))
            }
            drop_kind => {
                let method = drop_kind.dropped_method().unwrap_or("raw_put");
                let store = match self.random_key() {
                    Some(key) => cluster
                        .region_for_key(&key)
                        .and_then(|r| cluster.leader_of(r.id))
                        .map(|p| p.store_id),
                    None => None,
                };
                let store = match store {
                    Some(s) => Some(s),
                    None => self.random_store(cluster),
                };
                match store {
                    Some(s) => cluster
                        .drop_next_response(s, method)
                        .is_ok()
                        .then(|| format!("store {s}")),
                    None => None,
                }
            }
        };
        if let Some(target) = target {
            *self.counts.entry(kind).or_insert(0) += 1;
            self.untried.retain(|k| *k != kind);
            // A healable fault's end is set when its heal runs.
            let healable = self.active.iter().any(|(_, _, i)| *i == index);
            self.log.push(Applied {
                attempt,
                kind,
                target,
                start: started,
                end: None,
                healable,
            });
        }
    }
}

/// The stores of a Region's voters that can lead, in peer order.
fn voter_stores(cluster: &SimCluster, region: u64) -> Vec<u64> {
    cluster
        .region(region)
        .map(|r| {
            r.peers
                .iter()
                .filter(|p| p.role == PeerRole::Voter as i32 && !p.is_witness)
                .map(|p| p.store_id)
                .collect()
        })
        .unwrap_or_default()
}
