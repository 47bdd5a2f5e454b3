//! The identities of Regions and stores, below everything that names them
//! (errors, caches, routing state). Re-exported by [`region`](crate::region).

/// A Region's id.
pub type RegionId = u64;
/// A store's id.
pub type StoreId = u64;

/// A Region at one version: its id and epoch. Two Regions with the same id
/// but different epochs are different versions (after a split or a
/// membership change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionVerId {
    /// The Region id.
    pub id: RegionId,
    /// The configuration version of the epoch (membership changes).
    pub conf_ver: u64,
    /// The version of the epoch (splits and merges).
    pub ver: u64,
}
