//! Deterministic simulation, the network half: the simulated cluster's PD
//! and stores run as [`turmoil`] hosts, and clients dial them through
//! turmoil's simulated network instead of TCP, in virtual time. Turmoil
//! runs every host on one thread from one seed, and its network can
//! partition, hold and lose messages between any two hosts, or crash and
//! restart one.
//!
//! PD member `m` is the host `pd{m}` on port [`PD_PORT`]; store `s` is the
//! host `store{s}` on port [`STORE_PORT`]. The cluster's state
//! ([`SimCluster`]) outlives its hosts: a restarted store serves it again.

mod kinds;
mod log;
mod report;
mod run;
mod shrink;

pub use kinds::{DstWorkload, NetFault};
pub use log::SimLog;
pub use report::DstReport;
pub use run::{run, state_faults, DstConfig, CLIENT};
pub use shrink::{shrink, Shrunk};

use futures::stream::{FuturesUnordered, StreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use tikv_plan::__internals::{Io, Transport};

use tikv_sim::{ForwardDial, ForwardStream, SimCluster, SimClusterBuilder};
use tonic::service::Routes;

use crate::Result;

/// The port PD members listen on.
pub const PD_PORT: u16 = 2379;
/// The port stores listen on.
pub const STORE_PORT: u16 = 20160;

/// The host name of store `store_id`.
pub fn store_host(store_id: u64) -> String {
    format!("store{store_id}")
}

/// The host name of PD member `member`.
pub fn pd_host(member: usize) -> String {
    format!("pd{member}")
}

/// Builds the cluster `builder` describes and adds its PD members and
/// stores to `sim` as hosts serving it; returns the cluster (its state,
/// for checks and leader moves) and the PD endpoints for clients.
pub fn host_cluster(
    sim: &mut turmoil::Sim<'_>,
    builder: SimClusterBuilder,
) -> Result<(SimCluster, Vec<String>)> {
    // A store forwards a call (tikv-forwarded-host) over the simulated
    // network, dialling from its own host.
    let dial: ForwardDial = Arc::new(|address: String| {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(address).await?;
            Ok(Box::new(stream) as Box<dyn ForwardStream>)
        })
    });
    let (cluster, servers) = builder.forward_dial(dial).build_hosted(
        |m| format!("{}:{PD_PORT}", pd_host(m)),
        |s| format!("{}:{STORE_PORT}", store_host(s)),
    )?;
    let mut endpoints = Vec::new();
    for (member, (address, routes)) in servers.pd.into_iter().enumerate() {
        endpoints.push(address);
        sim.host(pd_host(member), move || serve(routes.clone(), PD_PORT));
    }
    for (store_id, _, routes) in servers.stores {
        sim.host(store_host(store_id), move || {
            serve(routes.clone(), STORE_PORT)
        });
    }
    Ok((cluster, endpoints))
}

/// The transport clients use inside the simulation: a dial is a turmoil
/// connect to the host and port of the address.
pub fn transport() -> Transport {
    Transport::new(|host, port| {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(format!("{host}:{port}")).await?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    })
}

/// Serves `routes` over HTTP/2 on `port` of the current host until the
/// host stops. Two things tonic's server would do differently, each of
/// which would make a run depend on more than its seed:
///
/// * hyper serves each connection without a `date` header: the header
///   carries the machine's wall-clock second, and its encoding would vary
///   the traffic with the time of day;
/// * the connections are served inside this one task, not a task each: a
///   crashed host drops them (closing each socket) in the order they
///   came, where a runtime dropping its tasks goes by task ids, which
///   count across the whole process.
async fn serve(routes: Routes, port: u16) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
    let mut connections = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let service = TowerToHyperService::new(routes.clone());
                connections.push(async move {
                    let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .auto_date_header(false)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!("a simulated server connection ended: {e}");
                    }
                });
            }
            Some(()) = connections.next(), if !connections.is_empty() => {}
        }
    }
}
