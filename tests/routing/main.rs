//! Routing: leader-first rounds with voter fallback, Region errors, store
//! health, the busy probe, replay safety and the plan stages, against the
//! mock cluster and the simulator.
//!
//! One test binary of several modules, each the file of its name.

#[path = "../common/mod.rs"]
mod common;

mod plan_cancel;
mod plan_mock;
mod plan_multi;
mod plan_properties;
mod plan_replay;
mod plan_stages;
mod routing_busy;
mod routing_election;
mod routing_fallback;
mod routing_forward;
mod routing_liveness;
mod routing_liveness_sim;
mod routing_mapping;
mod routing_raft_errors;
mod routing_region_error;
mod routing_replica;
mod routing_shape;
mod routing_sim;
mod routing_slow_store;
mod routing_store_health;
mod routing_tiflash;
mod routing_transport;
mod routing_unreachable_leader;
mod write_replay;
