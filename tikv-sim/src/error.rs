//! The simulator's error: what went wrong setting up or driving the cluster
//! (a bad argument, an address it cannot listen on, an unknown store or
//! Region). Requests served to clients never fail this way: they get the
//! Region error, key error or gRPC status real TiKV would give.

/// An error of the simulator's own API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument the simulator cannot act on; the message says which and
    /// why.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Listening on, or connecting to, an address failed.
    #[error("{address}: {message}")]
    Connect {
        /// The address.
        address: String,
        /// What failed.
        message: String,
        /// The underlying I/O or transport error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// No store of the simulated cluster has this id.
    #[error("the simulated cluster has no store {store_id}")]
    StoreNotFound {
        /// The id asked for.
        store_id: u64,
    },
    /// No Region of the simulated cluster has this id.
    #[error("the simulated cluster has no Region {region_id}")]
    RegionNotFound {
        /// The id asked for.
        region_id: u64,
    },
}

/// The simulator's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
