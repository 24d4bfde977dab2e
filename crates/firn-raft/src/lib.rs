//! Firn's only contact with openraft. An openraft upgrade touches this crate and nothing else.
//!
//! A [`ShardReplica`] is one replica of one shard: an openraft group whose log lives in
//! fjall ([`log_store`]) and whose state machine is the versioned store ([`state_machine`]).
//! This crate must never parse client protocols or decide routing.

pub mod closer;
mod lease;
pub mod log_store;
mod log_tail;
pub mod network;
pub mod peer;
pub mod pipeline;
mod rpc_failure;
pub mod shard;
pub mod snapshot;
pub mod snapshot_transfer;
mod stages;
pub mod state_machine;
pub mod transport;
pub mod types;

pub use closer::ClosePolicy;
pub use shard::{ProposalOutcome, ShardConfig, ShardReplica, ShardStatus, leader_named};
pub use types::{FirnRaft, META_GROUP, NodeId, ShardId, group_name};
