//! Firn's domain model: the vocabulary every other crate speaks.
//!
//! This crate owns keys, versions, hybrid-logical-clock commit timestamps, the stated limits,
//! keyspace definitions, the typed [`Request`] that both front ends parse into, and the
//! user-facing [`FirnError`]. It must never do I/O, read a clock outside [`hlc::HybridClock`],
//! or know about Raft, disks or sockets.

pub mod blob;
pub mod error;
pub mod hlc;
pub mod key;
pub mod keyspace;
pub mod lease;
pub mod limits;
pub mod log;
pub mod request;
pub mod slot;
pub mod time;
pub mod watermark;

pub use blob::BlobRef;
pub use error::FirnError;
pub use hlc::{CommitTs, HybridClock};
pub use key::{Key, KeyKind, Version};
pub use keyspace::{
    Durability, Follow, KeyspaceDef, KeyspaceMode, KeyspacePlacement, KeyspaceSpec,
};
pub use lease::{LeaseChange, LeaseId, LeaseInfo, LeaseWrite, lease_key};
pub use limits::Limits;
pub use log::{Appended, LogRecord, LogSeq, NewRecord, StreamId, StreamTrim, TagInfo, TagListing};
pub use request::*;
pub use watermark::{LatePolicy, WatermarkInfo, WatermarkPolicy, WatermarkRequest, WatermarkState};
