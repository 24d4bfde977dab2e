//! Leases, as etcd has them: a TTL that keys attach to (`SET … LEASE id`), kept alive by its
//! holder; when it runs out or is revoked, every key attached to it is deleted, all at one
//! stamp (docs/architecture.md, "Leases").

use serde::{Deserialize, Serialize};

use crate::hlc::CommitTs;
use crate::key::Key;

/// A lease's number, chosen at random by the node that grants it (never 0).
pub type LeaseId = u64;

/// The key a lease's record is routed by: the shard of its slot keeps the record. Never
/// stored as a key (no read or scan sees it); it names the record for routing and for the
/// transactions that hold it (an attach compares it, a revoke ends it).
pub fn lease_key(id: LeaseId) -> Key {
    Key::new(format!("\0lease\0{id:016x}")).expect("a lease's routing key is a valid key")
}

/// A change to a lease, on the shard that keeps its record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseWrite {
    /// [`lease_key`] of `id`.
    pub key: Key,
    pub id: LeaseId,
    pub change: LeaseChange,
}

impl LeaseWrite {
    pub fn new(id: LeaseId, change: LeaseChange) -> Self {
        LeaseWrite {
            key: lease_key(id),
            id,
            change,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseChange {
    /// A new lease that runs out `ttl_s` seconds after the write's stamp unless kept alive
    /// (refused if the id is taken).
    Grant { ttl_s: u64 },
    /// The lease runs `ttl_s` more seconds from the write's stamp (refused once it ran out).
    KeepAlive,
    /// The lease's record goes; the keys attached to it go in the same transaction.
    End,
}

/// A live lease, as its record holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub id: LeaseId,
    pub ttl_s: u64,
    /// When it runs out unless kept alive.
    pub expires: CommitTs,
}
