//! [`TimestampExt`]: a TSO timestamp as one `u64` version.

use super::Timestamp;

/// Timestamps as one `u64` version: `physical << 18 | logical`
/// (client-rust's `TimestampExt`).
///
/// ```
/// use tikv_plan::transaction::{Timestamp, TimestampExt};
/// let ts = Timestamp::from_version((5 << 18) | 3);
/// assert_eq!((ts.physical, ts.logical), (5, 3));
/// assert_eq!(ts.version(), (5 << 18) | 3);
/// assert_eq!(Timestamp::try_from_version(0), None);
/// ```
pub trait TimestampExt: Sized {
    /// The timestamp as a version.
    fn version(&self) -> u64;
    /// A timestamp from a version.
    fn from_version(version: u64) -> Self;
    /// A timestamp from a version; `None` for 0 (no timestamp).
    fn try_from_version(version: u64) -> Option<Self>;
}

const PHYSICAL_SHIFT_BITS: u32 = 18;
const LOGICAL_MASK: u64 = (1 << PHYSICAL_SHIFT_BITS) - 1;

impl TimestampExt for Timestamp {
    fn version(&self) -> u64 {
        // Negative parts never come from a TSO; they clamp to 0.
        let physical = u64::try_from(self.physical).unwrap_or(0);
        let logical = u64::try_from(self.logical).unwrap_or(0);
        (physical << PHYSICAL_SHIFT_BITS) | (logical & LOGICAL_MASK)
    }

    fn from_version(version: u64) -> Self {
        Timestamp {
            physical: (version >> PHYSICAL_SHIFT_BITS) as i64,
            logical: (version & LOGICAL_MASK) as i64,
            ..Default::default()
        }
    }

    fn try_from_version(version: u64) -> Option<Self> {
        (version != 0).then(|| Self::from_version(version))
    }
}
