//! The replica attempt of a read that may leave the leader ([routing.md,
//! "Replica and stale
//! reads"](crate::spec::routing#replica-and-stale-reads-beyond)): one
//! attempt at the replica [`replica_target`] picks, flagged as a replica or
//! stale read. A clean answer (no Region error) is the read's; anything
//! else (a Region error such as `DataIsNotReady` or `ReadIndexNotReady`, a
//! transport failure, a timeout, a store that cannot be mapped) sends the
//! read to the leader, as an ordinary leader request. A TiFlash store is
//! never the replica: one its labels name is not chosen, and one the
//! mapping refuses (its labels were not known yet) is replaced by another
//! choice.

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::pd::PdClient;
use crate::region::store_engine::{is_not_tikv_refusal, known_not_tikv};
use crate::region::{RegionWithLeader, StoreId};
use crate::request::plan::retry::RetryableMultiRegion;
use crate::request::plan::stage::ShardStage;
use crate::request::plan::traits::HasRegionError;
use crate::request::routing::engine::scope::Deadline;
use crate::request::routing::replica::{labels_match, replica_target};
use crate::telemetry::Counter;

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// Sends `plan` once to the replica its read mode picks in `region`.
    /// `Some` is the replica's clean answer; `None` when the read goes to
    /// the leader (no replica was picked, or the attempt failed: the caller
    /// then clears the read flags on the leader attempts).
    pub(super) async fn try_replica(
        &self,
        plan: &mut P,
        region: &RegionWithLeader,
        permits: Option<&Semaphore>,
        deadline: Option<Deadline>,
        now: &mut Instant,
    ) -> Option<Box<P::Result>> {
        let routing = self.routing.as_deref();
        let wanted = routing.map_or(&[][..], |r| r.local_labels());
        let pd = &*self.pd_client;
        let count = |counter| {
            if let Some(r) = routing {
                r.count(counter);
            }
        };
        let spread = routing.map_or(0, |r| r.next_replica_spread());
        let feedback = pd
            .store_feedback()
            .filter(|_| routing.is_some_and(|r| r.avoids_slow_stores()));
        if !wanted.is_empty() {
            self.resolve_labels(region, deadline).await;
            *now = Instant::now();
        }
        // Stores whose mapping refused them as TiFlash in this read (the
        // PD client's labels know them too, once looked up).
        let mut refused: Vec<StoreId> = Vec::new();
        let store = loop {
            let (peer, flags) = replica_target(
                region,
                self.policy.read,
                spread,
                |store_id| {
                    if wanted.is_empty() {
                        return None;
                    }
                    pd.store_labels(store_id)
                        .map(|labels| labels_match(&labels, wanted))
                },
                |store_id| routing.is_some_and(|r| r.is_store_unreachable(store_id)),
                |store_id| {
                    refused.contains(&store_id)
                        || known_not_tikv(pd.store_labels(store_id).as_deref())
                },
                |store_id| feedback.is_some_and(|f| f.is_slow(store_id)),
            )?;
            let mapped = self.map_candidate(region, peer, deadline).await;
            if !matches!(&mapped, Err(error) if is_not_tikv_refusal(error)) {
                count(Counter::ReplicaRead);
            }
            match mapped {
                Ok(mut store) => {
                    store.read = flags;
                    break store;
                }
                // A store not known to be TiFlash until looked up: choose
                // again without it (each store once, so this ends).
                Err(error) if is_not_tikv_refusal(&error) => {
                    tracing::debug!(
                        "region {}: store {} is not TiKV; choosing another replica",
                        region.id(),
                        peer.store_id
                    );
                    refused.push(peer.store_id);
                }
                Err(error) => {
                    *now = Instant::now();
                    tracing::debug!(
                        "region {}: the replica on store {} could not be mapped ({error}); reading from the leader",
                        region.id(),
                        peer.store_id
                    );
                    count(Counter::ReplicaFallback);
                    return None;
                }
            }
        };
        let (flags, store_id) = (store.read, store.store_id());
        let target = super::steps::Target::aim(plan, &store);
        drop(store);
        *now = Instant::now();
        let left = deadline.map(|d| d.at.saturating_duration_since(*now));
        let (_, result) = self
            .dispatch_candidate(plan, target, permits, left, deadline, false, now)
            .await;
        let why = match result {
            Ok(mut answer) => match answer.region_error() {
                None => return Some(answer),
                Some(error) => format!("Region error {}", error.message),
            },
            Err(error) => error.to_string(),
        };
        tracing::debug!(
            "region {}: the {flags:?} read on store {} failed ({why}); reading from the leader",
            region.id(),
            store_id
        );
        count(Counter::ReplicaFallback);
        None
    }

    /// Looks up from PD the labels of the Region's stores this client has
    /// not cached yet, all at once and within the read's deadline, so the
    /// choice knows which replicas are in the client's zone before its
    /// first request ([routing.md, "Replica and stale
    /// reads"](crate::spec::routing#replica-and-stale-reads-beyond)). A
    /// store PD could not describe in time stays unknown and ranks as
    /// outside the zone.
    async fn resolve_labels(&self, region: &RegionWithLeader, deadline: Option<Deadline>) {
        let pd = &*self.pd_client;
        let mut unknown: Vec<StoreId> = region
            .region
            .peers
            .iter()
            .map(|p| p.store_id)
            .filter(|s| pd.store_labels(*s).is_none())
            .collect();
        unknown.dedup();
        if unknown.is_empty() {
            return;
        }
        let loads = futures::future::join_all(unknown.iter().map(|s| pd.load_store_labels(*s)));
        let results = match deadline {
            Some(d) => match tokio::time::timeout_at(d.at, loads).await {
                Ok(results) => results,
                Err(_) => {
                    tracing::debug!(
                        "region {}: the labels of stores {unknown:?} were not known by the deadline",
                        region.id()
                    );
                    return;
                }
            },
            None => loads.await,
        };
        for (store_id, result) in unknown.iter().zip(results) {
            if let Err(error) = result {
                tracing::debug!("the labels of store {store_id} could not be loaded: {error}");
            }
        }
    }
}
