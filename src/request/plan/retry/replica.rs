//! The replica attempt of a read that may leave the leader ([routing.md,
//! "Replica and stale
//! reads"](crate::spec::routing#replica-and-stale-reads-beyond)): one
//! attempt at the replica [`replica_target`] picks, flagged as a replica or
//! stale read. A clean answer (no Region error) is the read's; anything
//! else (a Region error such as `DataIsNotReady` or `ReadIndexNotReady`, a
//! transport failure, a timeout, a store that cannot be mapped) sends the
//! read to the leader, as an ordinary leader request.

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::pd::PdClient;
use crate::region::RegionWithLeader;
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
    ) -> Option<P::Result> {
        let routing = self.routing.as_deref();
        let wanted = routing.map_or(&[][..], |r| r.local_labels());
        let pd = &*self.pd_client;
        let (peer, flags) = replica_target(
            region,
            self.policy.read,
            routing.map_or(0, |r| r.next_replica_spread()),
            |store_id| {
                if wanted.is_empty() {
                    return None;
                }
                pd.store_labels(store_id)
                    .map(|labels| labels_match(&labels, wanted))
            },
            |store_id| routing.is_some_and(|r| r.is_store_unreachable(store_id)),
        )?;
        let count = |counter| {
            if let Some(r) = routing {
                r.count(counter);
            }
        };
        count(Counter::ReplicaRead);
        let mut store = match self.map_candidate(region, peer, None, deadline).await {
            Ok(store) => store,
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
        };
        store.read = flags;
        *now = Instant::now();
        let left = deadline.map(|d| d.at.saturating_duration_since(*now));
        let (_, result) = self
            .dispatch_candidate(plan, &store, permits, left, deadline, false, now)
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
            peer.store_id
        );
        count(Counter::ReplicaFallback);
        None
    }
}
