//! The raw key-value client and its requests.

mod requests;

pub use requests::*;
