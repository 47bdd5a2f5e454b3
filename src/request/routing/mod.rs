//! Routing, pure and synchronous: the shard's retry engine (one state
//! machine per shard, its transitions listed in `engine.rs`), the candidate
//! round, the Region-error table, and the client-wide routing state (store
//! health, the shared busy suspicion, the counters), and the choice of
//! replica for a read that may leave the leader. The plan stage that
//! drives it, [`RetryableMultiRegion`](crate::request::RetryableMultiRegion),
//! lives in `plan/`.

pub(crate) mod engine;
pub(crate) mod policy;
pub(crate) mod region_error;
pub(crate) mod replica;
pub(crate) mod round;
pub(crate) mod state;
