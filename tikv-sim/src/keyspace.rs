//! The simulated PD's keyspace service (`keyspacepb.Keyspace`): resolves a
//! keyspace name to its metadata, as PD does for API v2 clients.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Shared;
use crate::proto::keyspacepb::{self, keyspace_server::Keyspace};

/// The name of the keyspace PD creates by default (every simulated PD has it).
pub const DEFAULT_KEYSPACE_NAME: &str = "DEFAULT";
use crate::proto::pdpb;

/// The keyspace service of one PD member.
#[derive(Clone)]
pub(crate) struct KeyspaceService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) member: usize,
}

#[tonic::async_trait]
impl Keyspace for KeyspaceService {
    /// The keyspace named in the request; an unknown name is answered with
    /// an error header and no keyspace, as PD does.
    async fn load_keyspace(
        &self,
        request: Request<keyspacepb::LoadKeyspaceRequest>,
    ) -> Result<Response<keyspacepb::LoadKeyspaceResponse>, Status> {
        let req = request.into_inner();
        super::pd::count_pd_call(&self.shared, "LoadKeyspace");
        let state = self.shared.lock();
        if state.pd_leader != self.member {
            return Err(Status::unavailable("not leader"));
        }
        let found = state.keyspaces.iter().find(|k| k.name == req.name).cloned();
        let error = found.is_none().then(|| pdpb::Error {
            r#type: pdpb::ErrorType::Unknown as i32,
            message: format!("keyspace {:?} does not exist", req.name),
        });
        Ok(Response::new(keyspacepb::LoadKeyspaceResponse {
            header: Some(pdpb::ResponseHeader {
                cluster_id: state.cluster_id,
                error,
            }),
            keyspace: found,
        }))
    }
}
