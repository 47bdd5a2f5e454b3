//! The raw key-value client (in progress).
