//! Connections to TiKV stores: the [`KvClient`] a plan dispatches through,
//! the [`KvConnect`] that opens one, and [`RegionStore`], a Region paired with
//! the client of the peer a request targets.

mod batch;
mod client;
mod health;
mod request;
mod server_wait;
pub(crate) mod shared_timer;
mod typed;

pub(crate) use batch::BatchOptions;
#[cfg(feature = "unstable-internals")]
pub use client::set_typed_path;
pub(crate) use client::KvRpcClient;
pub use client::TikvConnect;
pub(crate) use client::{
    batched_client, call_timeout, send_batched, timeout_as_error, typed_channel, with_backstop,
    BACKSTOP_SLACK,
};
pub use health::{StoreFeedback, DECAY_AFTER, SLOW_SCORE_THRESHOLD};
#[cfg(test)]
mod tests;
pub(crate) use request::liveness_probe;
pub use request::Request;
pub(crate) use server_wait::fit_server_wait;
pub(crate) use typed::send_typed;
pub(crate) use typed::GrpcChannel;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::proto::metapb;
use crate::region::{RegionWithLeader, StoreId};
use crate::Failure;
use crate::Result;

/// Sends one request to one store and returns its response, type-erased.
/// The plan downcasts the response back to the request's response type.
/// (`Any`: a client is an owned value; the crate's own gRPC client is
/// recognised by its type.)
#[async_trait]
pub trait KvClient: Any {
    /// Sends `req` and waits for its response.
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>>;

    /// Sends `req`, bounded by `bound` as well as by the client's own
    /// timeout, with one timer for the RPC. The default bounds
    /// [`dispatch`](Self::dispatch) with a timer, failing with
    /// [`Failure::Timeout`]; a client with a timeout of
    /// its own (the gRPC client) overrides it to use the smaller of the two.
    async fn dispatch_within(
        &self,
        req: &dyn Request,
        bound: Option<Duration>,
    ) -> Result<Box<dyn Any + Send>> {
        match bound {
            None => self.dispatch(req).await,
            Some(bound) => match tokio::time::timeout(bound, self.dispatch(req)).await {
                Ok(result) => result,
                Err(_) => Err(crate::Error::from(Failure::Timeout {
                    what: format!("the {} request", req.label()),
                    after: bound,
                })),
            },
        }
    }
}

/// Opens a [`KvClient`] to a store address.
#[async_trait]
pub trait KvConnect: Sized + Send + Sync + 'static {
    /// The client it opens.
    type KvClient: KvClient + Clone + Send + Sync + 'static;

    /// Opens a client to `address`, bounded by the connect timeout.
    async fn connect(&self, address: &str) -> Result<Self::KvClient>;

    /// Opens a client to the store at `proxy` whose every call asks that
    /// store to forward it to the store at `target` (TiKV's
    /// `tikv-forwarded-host`, [routing.md,
    /// "Forwarding"](crate::spec::routing#forwarding-beyond)). The default
    /// cannot forward: it fails without sending anything, and the routing
    /// round goes on as if the proxy could not be reached.
    async fn connect_forwarded(&self, proxy: &str, target: &str) -> Result<Self::KvClient> {
        Err(crate::Error::from(Failure::Connect {
            address: proxy.to_owned(),
            message: format!(
                "this connector cannot forward calls (to {target}) through another store"
            ),
            source: None,
        }))
    }

    /// **beyond** The health feedback the stores this connector reaches
    /// send (TiKV's `HealthFeedback`, over BatchCommands streams), shared by
    /// all its clients ([routing.md, "Slow-store
    /// feedback"](crate::spec::routing#slow-store-feedback-beyond)). `None`
    /// (the default): this connector hears none.
    fn store_feedback(&self) -> Option<&StoreFeedback> {
        None
    }
}

/// A client to one TiKV store, as returned by `PdClient::all_stores`.
#[derive(Clone)]
pub struct Store {
    /// The store's metadata.
    pub meta: metapb::Store,
    /// A client connected to it.
    pub client: Arc<dyn KvClient + Send + Sync>,
}

impl Store {
    /// True when the store runs TiKV: store-wide requests go only to
    /// these, whatever the [`PdClient`](crate::pd::PdClient) handed out
    /// ([routing.md, "TiFlash"](crate::spec::routing#tiflash-stores-and-peers)).
    pub(crate) fn is_tikv(&self) -> bool {
        crate::region::store_engine::StoreEngine::of_store(&self.meta).is_tikv()
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

/// A Region, the peer a request targets in it, and a client connected to
/// that peer's store. The target is the cached leader on the fast path and
/// another voter during fallback; the Region (id, epoch) is always the cached
/// one ([routing.md,
/// "Invariants"](crate::spec::routing#invariants-never-broken)).
#[derive(Clone)]
pub struct RegionStore {
    /// The cached Region, with the cached leader.
    pub region_with_leader: RegionWithLeader,
    /// The peer the request is sent to.
    pub target_peer: metapb::Peer,
    /// A client connected to the target peer's store.
    pub client: Arc<dyn KvClient + Send + Sync>,
    /// The read flags this attempt sets (a replica or stale read, or a
    /// leader read after one); by default the request's own are kept.
    pub(crate) read: crate::request::routing::replica::ReadFlags,
}

impl RegionStore {
    /// Pairs a Region and a target peer with a connected client.
    pub fn new(
        region_with_leader: RegionWithLeader,
        target_peer: metapb::Peer,
        client: Arc<dyn KvClient + Send + Sync>,
    ) -> Self {
        RegionStore {
            region_with_leader,
            target_peer,
            client,
            read: Default::default(),
        }
    }

    /// The store the request goes to.
    pub fn store_id(&self) -> StoreId {
        self.target_peer.store_id
    }
}

impl std::fmt::Debug for RegionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionStore")
            .field("region", &self.region_with_leader.ver_id())
            .field("target_peer", &self.target_peer)
            .finish_non_exhaustive()
    }
}
