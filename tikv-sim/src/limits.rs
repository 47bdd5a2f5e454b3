//! The sizes real TiKV and PD accept, and the simulator with them: gRPC
//! message limits on every server, and the Raft entry limit a store puts
//! on a write.
//!
//! * TiKV's gRPC server takes and sends messages of any size: its
//!   `ServerBuilder` gets `max_receive_message_len(-1)` and
//!   `max_send_message_len(-1)` (`src/server/server.rs`,
//!   `Server::create_builder`; gRPC's -1 is "no limit"). Its
//!   `server.max-grpc-send-msg-len` (10 MiB) bounds only the Raft messages
//!   one store batches to another (`src/server/raft_client.rs`), never an
//!   answer to a client. So whether a large answer arrives is the
//!   client's receive limit to decide (tonic's default is 4 MiB).
//! * PD's gRPC server is etcd's (`etcdCfg.ServiceRegister` in PD's
//!   `server/server.go`), built by etcd's `v3rpc.Server` with
//!   `grpc.MaxRecvMsgSize(MaxRequestBytes + 512 KiB)` and
//!   `grpc.MaxSendMsgSize(math.MaxInt32)` (etcd v3.5's
//!   `server/etcdserver/api/v3rpc/grpc.go`), where PD sets
//!   `MaxRequestBytes` to its `max-request-bytes`, 150 MiB by default
//!   (`server/config/config.go`, `defaultMaxRequestBytes`).
//! * A store refuses to propose a Raft entry larger than
//!   `raftstore.raft-entry-max-size`, 8 MiB by default
//!   (`components/raftstore/src/store/config.rs`), with the Region error
//!   `RaftEntryTooLarge { region_id, entry_size }`, the entry's size being
//!   the length of the serialized `RaftCmdRequest` it would propose
//!   (`Peer::propose_normal` in `components/raftstore/src/store/peer.rs`;
//!   `propose_with_ctx` in raftstore-v2). Nothing of the write is applied.

use crate::counters::Outcome;
use crate::proto::errorpb;
use crate::state::Rejection;

/// The largest gRPC message a simulated store takes or sends: no limit,
/// as TiKV's server.
pub const STORE_GRPC_MAX_MESSAGE_SIZE: usize = usize::MAX;

/// The largest gRPC message a simulated PD member takes: PD's default
/// `max-request-bytes` (150 MiB) plus the 512 KiB etcd's gRPC server
/// allows on top.
pub const PD_GRPC_MAX_RECV_MESSAGE_SIZE: usize = 150 * 1024 * 1024 + 512 * 1024;

/// The largest gRPC message a simulated PD member sends: etcd's
/// `math.MaxInt32`.
pub const PD_GRPC_MAX_SEND_MESSAGE_SIZE: usize = i32::MAX as usize;

/// TiKV's default `raftstore.raft-entry-max-size`, 8 MiB: a write whose
/// Raft entry would be larger is refused with `RaftEntryTooLarge`
/// ([`SimClusterBuilder::raft_entry_max_size`](crate::SimClusterBuilder::raft_entry_max_size)
/// sets another).
pub const DEFAULT_RAFT_ENTRY_MAX_SIZE: u64 = 8 * 1024 * 1024;

/// Refuses a write to Region `region_id` whose Raft entry would be
/// `entry_size` bytes when that is more than `limit`, as TiKV's raftstore
/// does before it proposes: the Region error `RaftEntryTooLarge`, with
/// TiKV's message.
///
/// The simulator has no `RaftCmdRequest` to measure; it takes the encoded
/// size of the client's request, which carries the same keys, values and
/// column families plus a context about as large as the command's header.
pub(crate) fn check_entry_size(
    region_id: u64,
    entry_size: usize,
    limit: u64,
) -> Result<(), Rejection> {
    let entry_size = u64::try_from(entry_size).unwrap_or(u64::MAX);
    if entry_size <= limit {
        return Ok(());
    }
    let error = errorpb::Error {
        message: format!("raft entry is too large, region {region_id}, entry size {entry_size}"),
        raft_entry_too_large: Some(errorpb::RaftEntryTooLarge {
            region_id,
            entry_size,
        }),
        ..Default::default()
    };
    Err((Box::new(error), Outcome::RaftEntryTooLarge))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_at_the_limit_is_proposed_one_byte_more_is_not() {
        assert!(check_entry_size(7, 100, 100).is_ok());
        let (error, outcome) = check_entry_size(7, 101, 100).unwrap_err();
        assert_eq!(outcome, Outcome::RaftEntryTooLarge);
        assert_eq!(
            error.raft_entry_too_large,
            Some(errorpb::RaftEntryTooLarge {
                region_id: 7,
                entry_size: 101
            })
        );
        assert_eq!(
            error.message,
            "raft entry is too large, region 7, entry size 101"
        );
    }

    #[test]
    fn the_pd_limits_are_etcds() {
        assert_eq!(PD_GRPC_MAX_RECV_MESSAGE_SIZE, 157_810_688);
        assert_eq!(PD_GRPC_MAX_SEND_MESSAGE_SIZE, 2_147_483_647);
    }
}
