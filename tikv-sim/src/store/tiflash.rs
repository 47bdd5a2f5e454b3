//! A TiFlash store's gRPC server, as a TiKV client meets it.
//!
//! TiFlash serves `tikvpb.Tikv` too, but its `FlashService`
//! (`dbms/src/Flash/FlashService.h`) implements only the coprocessor, MPP,
//! disaggregated-storage and compaction methods; every other method, the
//! raw and transactional ones and the `BatchCommands` stream included, is
//! the generated C++ base class's, which answers gRPC `UNIMPLEMENTED` with
//! an empty message (TiFlash removed its `BatchCommands` handler in
//! pingcap/tiflash#4828). The wire protocol here carries none of the
//! methods TiFlash implements, so this server answers every call so,
//! forwarded or not (forwarding is TiKV's), counted under the method's
//! label with [`Outcome::Unimplemented`]. A hang holds the call first, as
//! on a TiKV store; the store's other faults (busy, slow, lag) are TiKV's
//! and change nothing here.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::NamedService;
use tonic::Status;

use super::StoreService;
use crate::counters::Outcome;
use crate::proto::tikvpb::tikv_server::TikvServer;
use tikv_plan_proto::methods::BATCH_COMMANDS_PATH;

/// `(gRPC path, counter label)` of every unary method of the wire table.
macro_rules! method_labels {
    ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
       [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {
        [$((concat!("/tikvpb.Tikv/", $grpc), stringify!($stub))),*]
    };
}

const METHOD_LABELS: &[(&str, &str)] = &tikv_plan_proto::kv_methods!(method_labels);

/// The counter label of the call to `path`: the method's label,
/// `batch_commands` for the stream, `unknown` for a path outside the
/// table.
pub(crate) fn method_label(path: &str) -> &'static str {
    if path == BATCH_COMMANDS_PATH {
        return "batch_commands";
    }
    METHOD_LABELS
        .iter()
        .find(|(p, _)| *p == path)
        .map_or("unknown", |(_, label)| label)
}

/// The `tikvpb.Tikv` service of one TiFlash store.
#[derive(Clone)]
pub(crate) struct TiFlashServer {
    service: StoreService,
}

impl TiFlashServer {
    pub(crate) fn new(service: StoreService) -> Self {
        TiFlashServer { service }
    }
}

impl NamedService for TiFlashServer {
    const NAME: &'static str = <TikvServer<StoreService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for TiFlashServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let label = method_label(req.uri().path());
        let service = self.service.clone();
        Box::pin(async move {
            if let Err(status) = service.wait_out_hang(label).await {
                return Ok(status.into_http());
            }
            if let Some(store) = service.shared.lock().stores.get_mut(&service.store_id) {
                store.counters.record(label, Outcome::Unimplemented);
            }
            tracing::debug!(
                "simulated TiFlash store {} answered {label} with Unimplemented",
                service.store_id
            );
            Ok(Status::unimplemented("").into_http())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_under_their_method_labels() {
        assert_eq!(method_label("/tikvpb.Tikv/RawGet"), "raw_get");
        assert_eq!(method_label("/tikvpb.Tikv/KvGC"), "kv_gc");
        assert_eq!(
            method_label("/tikvpb.Tikv/KVPessimisticRollback"),
            "kv_pessimistic_rollback"
        );
        assert_eq!(
            method_label("/tikvpb.Tikv/UnsafeDestroyRange"),
            "unsafe_destroy_range"
        );
        assert_eq!(method_label(BATCH_COMMANDS_PATH), "batch_commands");
        assert_eq!(method_label("/tikvpb.Tikv/DispatchMPPTask"), "unknown");
    }
}
