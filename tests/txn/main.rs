//! Transactions: optimistic and pessimistic, async commit and 1PC, locks and
//! their resolution, timestamps, safety on drop, the bank invariant.
//!
//! One test binary of several modules, each the file of its name.

#[path = "../common/mod.rs"]
mod common;
mod support;

mod txn_bank;
mod txn_client;
mod txn_dead_holder;
mod txn_deadline;
mod txn_forward;
mod txn_keyspace;
mod txn_lock_backoff;
mod txn_lock_wait;
mod txn_locks;
mod txn_mock;
mod txn_modes;
mod txn_raft;
mod txn_replica;
mod txn_safety;
mod txn_shape;
mod txn_tags;
mod txn_tso;
