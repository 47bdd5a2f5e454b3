//! The steps of the retry stage that touch the caches and the routing
//! state: performing the engine's effects, and mapping a candidate to a
//! store client (directly or through a proxy).

use std::sync::Arc;

use tokio::time::Instant;

use super::{by_deadline, pd_cut_off};
use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::request::plan::retry::RetryableMultiRegion;
use crate::request::plan::stage::ShardStage;
use crate::request::plan::traits::{HasRegionError, Shardable};
use crate::request::routing::engine::scope::Deadline;
use crate::request::routing::engine::Effect;
use crate::request::routing::state::ProxyChange;
use crate::store::RegionStore;
use crate::Result;

/// A candidate the piece's request is aimed at: its store client set and
/// its context filled (`Shardable::apply_store`) when the candidate was
/// mapped, so the mapping's copy of the Region is not kept until the
/// dispatch.
pub(super) struct Target {
    pub(super) store_id: crate::region::StoreId,
    pub(super) region_id: crate::region::RegionId,
    /// How aiming the request went; an error fails the dispatch, unsent.
    pub(super) aimed: Result<()>,
}

impl Target {
    /// Aims `plan` at `store`.
    pub(super) fn aim<P: Shardable>(plan: &mut P, store: &RegionStore) -> Target {
        Target {
            store_id: store.store_id(),
            region_id: store.region_with_leader.id(),
            aimed: plan.apply_store(store),
        }
    }
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// Performs one effect the engine decided on.
    pub(super) async fn perform(&self, effect: Effect) {
        let routing = self.routing.as_deref();
        match effect {
            Effect::InvalidateStore(store_id) => {
                self.pd_client.invalidate_store_cache(store_id).await;
            }
            Effect::InvalidateRegion(ver_id) => {
                self.pd_client.invalidate_region_cache(ver_id).await;
            }
            Effect::InsertRegions(regions) => self.pd_client.add_regions(regions).await,
            Effect::UpdateLeader(ver_id, leader) => {
                if let Err(e) = self.pd_client.update_leader(ver_id, leader).await {
                    tracing::debug!(
                        "region {}: could not update the leader cache: {e}",
                        ver_id.id
                    );
                }
            }
            Effect::StoreFailed(store_id) => {
                if let Some(r) = routing {
                    r.store_failed(store_id);
                }
            }
            Effect::StoreTimedOut { store_id, sent_at } => {
                if let Some(r) = routing {
                    r.store_timed_out(store_id, sent_at);
                }
            }
            Effect::StoreAnswered { store_id, sent_at } => {
                if let Some(r) = routing {
                    r.store_answered(store_id, sent_at);
                }
            }
            Effect::Count(counter) => {
                if let Some(r) = routing {
                    r.count(counter);
                }
            }
            Effect::FinishProbe(ticket, outcome) => ticket.finish(outcome),
            Effect::ProxyWorked { target, proxy } => {
                if let Some(r) = &self.routing {
                    if r.proxy_worked(target, proxy) == ProxyChange::Began {
                        crate::request::plan::forward_probe::spawn(r, &self.pd_client, target);
                    }
                }
            }
            Effect::ProxyFailed { target, proxy } => {
                if let Some(r) = routing {
                    r.proxy_failed(target, proxy);
                }
            }
        }
    }

    /// Maps the cached leader `peer` to a client of the store `proxy` that
    /// forwards to the leader's store. A route not known to work yet is
    /// proven first with one cheap forwarded call, so that a request is
    /// never forwarded to a leader the proxy cannot reach (a write would
    /// then be undetermined for nothing): until it answers, nothing of the
    /// request is sent.
    async fn map_via(
        &self,
        region: &RegionWithLeader,
        peer: crate::proto::metapb::Peer,
        proxy: crate::region::StoreId,
        deadline: Option<Deadline>,
    ) -> Result<RegionStore> {
        let known = self
            .routing
            .as_ref()
            .is_some_and(|r| r.proxy_for(peer.store_id) == Some(proxy));
        let bound = self
            .policy
            .rpc_bound(deadline.map(|d| d.at.saturating_duration_since(Instant::now())));
        let bound = bound
            .bound
            .unwrap_or(crate::config::DEFAULT_REQUEST_TIMEOUT);
        let lookup = async {
            if !known {
                self.pd_client
                    .probe_store(peer.store_id, Some(proxy), bound)
                    .await?;
            }
            Arc::clone(&self.pd_client)
                .map_peer_through_proxy(region.clone(), peer, proxy)
                .await
        };
        match by_deadline(deadline, lookup).await {
            Some(mapped) => mapped,
            None => Err(pd_cut_off(
                format!("reaching store {} through store {proxy}", peer.store_id),
                deadline,
            )),
        }
    }

    /// Maps a candidate reached directly (a replica) to its store, behind
    /// the `before-map-store` fail point. A store the cache does not know is
    /// looked up in PD, cut off at the request's `deadline`: then the
    /// machine, past it, ends the shard with that as the last error.
    pub(super) async fn map_candidate(
        &self,
        region: &RegionWithLeader,
        peer: crate::proto::metapb::Peer,
        deadline: Option<Deadline>,
    ) -> Result<RegionStore> {
        match self.cached_client(peer.store_id, None)? {
            Some(client) => Ok(RegionStore::new(region.clone(), peer, client)),
            None => self.look_up_candidate(region, peer, None, deadline).await,
        }
    }

    /// The cached client of a candidate's store, behind the
    /// `before-map-store` fail point; `None` when the store must be looked
    /// up, or is reached through the proxy `via` (see
    /// [`look_up_candidate`](Self::look_up_candidate)).
    pub(super) fn cached_client(
        &self,
        store_id: crate::region::StoreId,
        via: Option<crate::region::StoreId>,
    ) -> Result<Option<Arc<dyn crate::store::KvClient + Send + Sync>>> {
        if via.is_some() {
            return Ok(None);
        }
        #[cfg(feature = "failpoints")]
        fail::fail_point!("tikv_plan::before_map_store", |arg| Err(
            super::fail_point_error("mapping", store_id, arg)
        ));
        Ok(self.pd_client.cached_store_client(store_id))
    }

    /// Maps a candidate whose store the cache does not answer: through the
    /// proxy `via`, or by looking the store up in PD, cut off at the
    /// request's `deadline`.
    pub(super) async fn look_up_candidate(
        &self,
        region: &RegionWithLeader,
        peer: crate::proto::metapb::Peer,
        via: Option<crate::region::StoreId>,
        deadline: Option<Deadline>,
    ) -> Result<RegionStore> {
        if let Some(proxy) = via {
            return self.map_via(region, peer, proxy, deadline).await;
        }
        let store_id = peer.store_id;
        let lookup = Arc::clone(&self.pd_client).map_peer_to_store(region.clone(), peer);
        match by_deadline(deadline, lookup).await {
            Some(mapped) => mapped,
            None => Err(pd_cut_off(format!("looking up store {store_id}"), deadline)),
        }
    }
}
