//! Firn's shared-memory region: how a node publishes the newest values of `LOCAL`
//! keyspaces so that a process on the same host reads them with no request, no system call
//! and no server thread (DAL's "1 µs data access").
//!
//! One file per node, fixed in size: a header, one seqlocked row per shard (present,
//! epoch, applied stamp, closed time, leader-lease expiry) and an open-addressing table of
//! fixed-size seqlocked entries. The node is the one [`RegionWriter`]; any number of
//! [`RegionReader`]s map it read-only. A read copies the key's entry, then its shard's row,
//! then checks the entry did not change — so every answer carries a [`Bound`] that holds:
//! linearizable under the node's lease, else "at least as new as the row's stamp, at most
//! this stale". The file is the node's user's alone unless a group of readers is named
//! ([`RegionReaders`]): whoever reads it reads every `LOCAL` keyspace. This crate knows
//! nothing of Raft or sockets.

mod access;
mod error;
mod layout;
mod reader;
mod seqlock;
mod writer;

pub use access::RegionReaders;
pub use error::RegionError;
pub use layout::{
    ENTRIES_MAX, KEY_BYTES_MAX_CEILING, LAYOUT_VERSION, PROBE_MAX, RegionConfig,
    VALUE_BYTES_MAX_CEILING, cluster_id_hex, now_mono_ns, parse_cluster_id,
};
pub use reader::{Bound, LocalRead, LocalValue, RegionHeader, RegionReader, RemoteReason};
pub use writer::{Published, RegionWriter, ShardState};
