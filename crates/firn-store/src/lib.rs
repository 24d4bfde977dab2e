//! Firn's versioned, temporal state machine.
//!
//! This crate owns what a shard stores — every version of every key with its HLC commit
//! timestamp and event time, the keyspaces and their retention — and the deterministic apply
//! of log [`Command`]s. Apply never reads a clock, the network or randomness: time arrives in
//! the command. Storage is reached only through [`StorageBackend`].

pub mod backend;
pub mod command;
pub mod dump;
pub mod glob;
pub mod journal_sync;
pub mod memtable_reaper;
pub mod record;
pub mod sink;
pub mod store;

pub use backend::{FjallBackend, MemoryBackend, StorageBackend};
pub use command::{Command, LogOp, Op, SystemOp, TxnOp, TxnPart, WatermarkOp};
pub use sink::AppliedSink;
pub use store::expiry::EXPIRE_DUE_MAX;
pub use store::{ChangePosition, VersionedStore};
