//! Requests sent to every store rather than to Regions (client-rust's
//! [`StoreRequest`] and [`RetryableAllStores`]), for store-wide operations.

use std::sync::Arc;

use async_trait::async_trait;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::store::Store;
use crate::{Error, Result};

use super::base::Dispatch;
use super::traits::Plan;
use super::traits::{HasKeyErrors, HasRegionError, KvRequest};

/// A request (or plan) aimed at one store.
pub trait StoreRequest {
    /// Aims it at `store`.
    fn apply_store(&mut self, store: &Store);
}

impl<Req: KvRequest + StoreRequest> StoreRequest for Dispatch<Req> {
    fn apply_store(&mut self, store: &Store) {
        self.kv_client = Some(Arc::clone(&store.client));
        self.request.apply_store(store);
    }
}

/// Runs the inner plan once per TiKV store PD knows (tombstones and
/// TiFlash stores excluded), all at once; a store answering a Region error
/// is retried after `backoff`. The result has one entry per store.
pub struct RetryableAllStores<P: Plan, PdC: PdClient> {
    /// The plan run on each store.
    pub(super) inner: P,
    /// Where the stores come from.
    pub pd_client: Arc<PdC>,
    /// Delays between attempts on one store.
    pub backoff: Backoff,
}

impl<P: Plan, PdC: PdClient> Clone for RetryableAllStores<P, PdC> {
    fn clone(&self) -> Self {
        RetryableAllStores {
            inner: self.inner.clone(),
            pd_client: Arc::clone(&self.pd_client),
            backoff: self.backoff.clone(),
        }
    }
}

#[async_trait]
impl<P: Plan + StoreRequest, PdC: PdClient> Plan for RetryableAllStores<P, PdC>
where
    P::Result: HasKeyErrors + HasRegionError,
{
    type Result = Vec<Result<P::Result>>;

    async fn execute(&self) -> Result<Self::Result> {
        let stores = self.pd_client.all_stores().await?;
        // The PD client leaves TiFlash stores out; a PdClient of the
        // caller's may not.
        let runs = stores.into_iter().filter(Store::is_tikv).map(|store| {
            let mut plan = self.inner.clone();
            plan.apply_store(&store);
            run_on_store(plan, self.backoff.clone())
        });
        Ok(futures::future::join_all(runs).await)
    }
}

async fn run_on_store<P: Plan>(plan: P, mut backoff: Backoff) -> Result<P::Result>
where
    P::Result: HasRegionError,
{
    loop {
        let mut result = plan.execute().await?;
        let Some(error) = result.region_error() else {
            return Ok(result);
        };
        match backoff.next_delay_duration() {
            Some(delay) => tokio::time::sleep(delay).await,
            None => return Err(Error::RegionError(Box::new(error))),
        }
    }
}
