//! The openraft type configuration.

use std::fmt;

use firn_model::{FirnError, Response};
use firn_store::Command;

pub type NodeId = u64;
pub type ShardId = u32;

/// The meta group's id among the node's groups (no shard has it: shards are numbered from 0
/// and a cluster has at most a few hundred).
pub const META_GROUP: ShardId = ShardId::MAX;

/// The name of a group's log and state in storage.
pub fn group_name(id: ShardId) -> String {
    if id == META_GROUP {
        "meta".to_string()
    } else {
        format!("shard{id}")
    }
}

/// The log payload must print itself for openraft's logs; keep it short (never the value).
pub struct CommandDisplay<'a>(pub &'a Command);

impl fmt::Display for CommandDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{}", std::mem::discriminant(&self.0.op), self.0.ts)
    }
}

/// A log entry's application data: the command, displayable for openraft.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogCommand(pub Command);

impl fmt::Display for LogCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        CommandDisplay(&self.0).fmt(f)
    }
}

/// What applying one entry answers to the proposer.
pub type ApplyResult = Result<Response, FirnError>;

openraft::declare_raft_types!(
    pub FirnRaft:
        D = LogCommand,
        R = ApplyResult,
        NodeId = NodeId,
        Node = openraft::BasicNode,
);

pub type Entry = openraft::alias::EntryOf<FirnRaft>;
pub type LogId = openraft::alias::LogIdOf<FirnRaft>;
pub type Vote = openraft::alias::VoteOf<FirnRaft>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<FirnRaft>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<FirnRaft>;
