//! The TiKV and PD wire protocol: the messages and gRPC client stubs of the
//! [`tikv-plan-proto`](tikv_plan_proto) crate, which follow kvproto's package
//! names, message names and field numbers (see
//! [wire.md](crate::spec::wire)).

pub use tikv_plan_proto::{
    deadlock, encryptionpb, errorpb, keyspacepb, kvrpcpb, metapb, pdpb, resource_manager, tikvpb,
    tracepb,
};
