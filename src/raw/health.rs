//! What the raw client tells of the stores' health feedback ([routing.md,
//! "Slow-store feedback"](crate::spec::routing#slow-store-feedback-beyond)).

use crate::pd::PdClient;
use crate::region::StoreId;

use super::client::RawClient;

impl<PdC: PdClient> RawClient<PdC> {
    /// **beyond** The slow score (1 healthy to 100; 80 and above is slow)
    /// each store last reported in its health feedback, by store id. TiKV
    /// sends it over BatchCommands streams, so a client in
    /// [`RpcMode::Batched`](crate::RpcMode) hears it; a score not refreshed
    /// for 15 s decays, as client-go's does.
    pub fn store_slow_scores(&self) -> Vec<(StoreId, u32)> {
        self.rpc
            .store_feedback()
            .map(|f| f.scores())
            .unwrap_or_default()
    }
}
