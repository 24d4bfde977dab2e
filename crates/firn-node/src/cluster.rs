//! The cluster's shape: which nodes exist, how the 16,384 slots split into shards, and which
//! nodes hold each shard's replicas.
//!
//! In this release the layout is static: every node derives the same layout from the same
//! `--peers`, `--shards` and `--replication` flags (the meta group that changes it at run
//! time comes later). A node without `--peers` is a cluster of one with one shard.

use std::collections::BTreeMap;
use std::ops::Range;

use firn_model::slot::{SLOT_COUNT, Slot, slot_of};
use firn_model::{FirnError, Request, Response};
use firn_raft::{NodeId, ShardId};
use serde::{Deserialize, Serialize};

/// Most shards a cluster may have: each is a Raft group with its own log and tasks.
pub const SHARDS_MAX: u32 = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLayout {
    pub id: ShardId,
    /// Slots `start..end` belong to this shard.
    pub slots: Range<Slot>,
    /// Replica nodes; the first forms the group.
    pub replicas: Vec<NodeId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterLayout {
    /// Node id → peer address.
    pub nodes: BTreeMap<NodeId, String>,
    pub shards: Vec<ShardLayout>,
}

impl ClusterLayout {
    /// `shard_count` shards over `nodes`, each on `replication` nodes (capped by the node
    /// count), spread round-robin so replicas and first replicas are even.
    pub fn new(
        nodes: BTreeMap<NodeId, String>,
        shard_count: u32,
        replication: usize,
    ) -> Result<Self, FirnError> {
        if nodes.is_empty() {
            return Err(FirnError::BadArgument(
                "a cluster needs at least one node".into(),
            ));
        }
        if shard_count == 0 || shard_count > SHARDS_MAX {
            return Err(FirnError::BadArgument(format!(
                "shards must be 1..={SHARDS_MAX}, got {shard_count}"
            )));
        }
        if shard_count as u16 > SLOT_COUNT {
            return Err(FirnError::BadArgument("more shards than slots".into()));
        }
        let ids: Vec<NodeId> = nodes.keys().copied().collect();
        let r = replication.clamp(1, ids.len());
        let shards = (0..shard_count)
            .map(|s| {
                let start = (s as u64 * SLOT_COUNT as u64 / shard_count as u64) as Slot;
                let end = ((s as u64 + 1) * SLOT_COUNT as u64 / shard_count as u64) as Slot;
                let replicas = (0..r).map(|j| ids[(s as usize + j) % ids.len()]).collect();
                ShardLayout {
                    id: s,
                    slots: start..end,
                    replicas,
                }
            })
            .collect();
        Ok(ClusterLayout { nodes, shards })
    }

    /// A cluster of one: one node, one shard.
    pub fn single(node_id: NodeId, peer_addr: String) -> Self {
        Self::new(BTreeMap::from([(node_id, peer_addr)]), 1, 1).expect("a one-node layout is valid")
    }

    pub fn shard_of_slot(&self, slot: Slot) -> ShardId {
        // Shards hold contiguous slot ranges in order: the first whose range ends after `slot`.
        let i = self.shards.partition_point(|s| s.slots.end <= slot);
        self.shards[i.min(self.shards.len() - 1)].id
    }

    pub fn shard_of_key(&self, key: &[u8]) -> ShardId {
        self.shard_of_slot(slot_of(key))
    }

    pub fn shard(&self, id: ShardId) -> &ShardLayout {
        &self.shards[id as usize]
    }

    pub fn shard_ids(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.shards.iter().map(|s| s.id)
    }
}

/// What nodes ask each other (carried opaquely by the peer transport).
/// One node's own account of itself: where clients reach it and the replicas it holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeView {
    pub node_id: NodeId,
    pub resp_addr: String,
    pub http_addr: String,
    /// Whether the node answered (a node that did not is listed from the layout alone).
    pub up: bool,
    pub replicas: Vec<ReplicaView>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplicaView {
    pub shard_id: ShardId,
    pub state: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_applied_index: Option<u64>,
}

/// The whole cluster as one node sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
    pub shards: Vec<ShardView>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShardView {
    pub shard_id: ShardId,
    /// First and last slot, inclusive.
    pub slots: (Slot, Slot),
    pub replicas: Vec<NodeId>,
    pub leader: Option<NodeId>,
    /// How many log entries each replica is behind the most advanced one.
    pub replica_lag: BTreeMap<NodeId, u64>,
}

impl ClusterView {
    pub fn node(&self, id: NodeId) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.node_id == id)
    }

    /// Whether every shard has a leader.
    pub fn healthy(&self) -> bool {
        self.shards.iter().all(|s| s.leader.is_some())
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub enum NodeRpc {
    /// Execute a request on this node's replica of `shard` (proposing if it leads).
    Execute {
        shard: ShardId,
        request: Request,
        hops: u8,
    },
    /// As the shard's leader, confirm leadership and return the read index.
    ReadIndex { shard: ShardId },
    /// Describe yourself.
    Describe,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum NodeRpcReply {
    Executed(Result<Response, FirnError>),
    ReadIndex(Result<u64, FirnError>),
    Described(NodeView),
}

/// Parses `--peers 1=127.0.0.1:7381,2=127.0.0.1:7391`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, FirnError> {
    let mut nodes = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| FirnError::BadArgument(format!("peer '{part}' is not ID=HOST:PORT")))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| FirnError::BadArgument(format!("node id '{id}' is not a number")))?;
        if id == 0 {
            return Err(FirnError::BadArgument("node ids start at 1".into()));
        }
        if nodes.insert(id, addr.trim().to_string()).is_some() {
            return Err(FirnError::BadArgument(format!("node {id} is listed twice")));
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> BTreeMap<NodeId, String> {
        parse_peers("1=a:1,2=b:2,3=c:3").unwrap()
    }

    #[test]
    fn slots_are_split_evenly_and_every_slot_has_exactly_one_shard() {
        let layout = ClusterLayout::new(three(), 5, 3).unwrap();
        let mut covered = 0u32;
        for s in &layout.shards {
            covered += (s.slots.end - s.slots.start) as u32;
            assert_eq!(s.replicas.len(), 3);
        }
        assert_eq!(covered, SLOT_COUNT as u32);
        for slot in 0..SLOT_COUNT {
            let shard = layout.shard_of_slot(slot);
            assert!(layout.shard(shard).slots.contains(&slot), "slot {slot}");
        }
    }

    #[test]
    fn replicas_and_first_replicas_spread_over_nodes() {
        let layout = ClusterLayout::new(three(), 3, 2).unwrap();
        let firsts: Vec<NodeId> = layout.shards.iter().map(|s| s.replicas[0]).collect();
        assert_eq!(firsts, vec![1, 2, 3]);
        let capped = ClusterLayout::new(three(), 1, 9).unwrap();
        assert_eq!(
            capped.shards[0].replicas.len(),
            3,
            "replication is capped by the node count"
        );
    }

    #[test]
    fn bad_peer_lists_are_refused() {
        assert!(parse_peers("1=a:1,1=b:2").is_err());
        assert!(parse_peers("x=a:1").is_err());
        assert!(parse_peers("0=a:1").is_err());
        assert!(parse_peers("1").is_err());
        assert!(ClusterLayout::new(three(), 0, 3).is_err());
    }
}
