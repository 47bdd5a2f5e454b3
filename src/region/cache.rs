//! Region and store caches (in progress).

/// Cache of Regions ordered by start key (in progress).
#[derive(Debug, Default)]
pub struct RegionCache {}

/// Cache of store metadata (in progress).
#[derive(Debug, Default)]
pub struct StoreCache {}
