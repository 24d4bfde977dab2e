//! The cluster as one node sees it: each node's own account of itself ([`NodeView`]), and
//! each shard's leader and replica lag assembled from those accounts ([`ClusterView`]).

use std::collections::BTreeMap;

use firn_model::Durability;
use firn_model::slot::Slot;
use firn_raft::{NodeId, ShardId};
use serde::{Deserialize, Serialize};

use crate::cluster::follow::FollowMove;
use crate::cluster::layout::{ClusterLayout, Move};

/// The peer call that asks a node for its [`NodeView`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Describe;

crate::rpc::rpc! {
    Describe => NodeView;
}

/// One node's own account of itself: where clients reach it and the replicas it holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeView {
    pub node_id: NodeId,
    pub resp_addr: String,
    pub http_addr: String,
    /// Whether the node answered (a node that did not is listed from the layout alone).
    pub up: bool,
    /// The node's part in the meta group (Leader, Follower, Learner, …).
    pub meta: String,
    pub replicas: Vec<ReplicaView>,
    /// The node's data disk (none for a node that did not answer).
    pub disk: Option<DiskView>,
    /// The node's clock against its peers' (none for a node that did not answer).
    #[serde(default)]
    pub clock: Option<crate::clock::ClockView>,
}

/// A node's data disk, as its last look found it (see `crate::disk`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiskView {
    pub free_bytes: u64,
    pub reserve_bytes: u64,
    /// Fewer bytes free than the reserve: writes that add data to the shards this node
    /// holds are refused.
    pub low: bool,
}

impl NodeView {
    /// A node that did not answer.
    pub fn down(node_id: NodeId) -> Self {
        NodeView {
            node_id,
            resp_addr: String::new(),
            http_addr: String::new(),
            up: false,
            meta: String::new(),
            replicas: Vec::new(),
            disk: None,
            clock: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplicaView {
    pub shard_id: ShardId,
    pub state: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_applied_index: Option<u64>,
    /// A memory replica catching up after a restart: it votes for nobody meanwhile.
    #[serde(default)]
    pub recovering: bool,
    /// How far behind the node's clock the replica's closed time is, in milliseconds: a
    /// read at a time older than that is answered here without waiting.
    #[serde(default)]
    pub closed_lag_ms: Option<u64>,
}

/// How far behind `now_us` a replica whose newest applied stamp is at `closed_wall_us` is, in
/// milliseconds; `None` for a replica that has applied no stamp yet (a new group), which no
/// read at a time is answered by without waiting (not a lag of 56 years since 1970).
pub fn closed_lag_ms(now_us: u64, closed_wall_us: u64) -> Option<u64> {
    (closed_wall_us > 0).then(|| now_us.saturating_sub(closed_wall_us) / 1000)
}

/// The whole cluster as one node sees it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterView {
    /// The cluster's id (32 hex digits; fixed when it was founded): what tells one cluster
    /// from another at the same address (a site checks its hub by it). `None` while this
    /// node does not know the layout yet.
    #[serde(default)]
    pub cluster_id: Option<String>,
    pub nodes: Vec<NodeView>,
    /// Nodes being removed (their replicas are moving elsewhere).
    pub leaving: Vec<NodeId>,
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
    /// How far each replica's closed time is behind its node's clock, in milliseconds.
    #[serde(default)]
    pub closed_lag_ms: BTreeMap<NodeId, u64>,
    /// A replica move in progress.
    pub moving: Option<Move>,
    /// The last move of this shard's leader (or a replica) toward its clients, or to a pin.
    pub followed: Option<FollowMove>,
    /// How its writes are acknowledged: `disk` or `memory`.
    #[serde(default)]
    pub durability: Durability,
}

impl ClusterView {
    /// The view of `layout` from the nodes' own accounts.
    pub fn assemble(layout: &ClusterLayout, nodes: Vec<NodeView>) -> Self {
        let shards = layout
            .shards
            .iter()
            .map(|s| {
                let reports: Vec<(NodeId, &ReplicaView)> = nodes
                    .iter()
                    .flat_map(|n| {
                        n.replicas
                            .iter()
                            .filter(|r| r.shard_id == s.id)
                            .map(move |r| (n.node_id, r))
                    })
                    .collect();
                // The leader as reported by a replica of the newest term.
                let leader = reports
                    .iter()
                    .filter(|(_, r)| r.leader.is_some())
                    .max_by_key(|(_, r)| r.term)
                    .and_then(|(_, r)| r.leader);
                let newest = reports
                    .iter()
                    .filter_map(|(_, r)| r.last_applied_index)
                    .max()
                    .unwrap_or(0);
                let replica_lag = reports
                    .iter()
                    .map(|(id, r)| (*id, newest - r.last_applied_index.unwrap_or(0)))
                    .collect();
                ShardView {
                    shard_id: s.id,
                    slots: (s.slots.start, s.slots.end.saturating_sub(1)),
                    replicas: s.replicas.clone(),
                    leader,
                    replica_lag,
                    closed_lag_ms: reports
                        .iter()
                        .filter_map(|(id, r)| Some((*id, r.closed_lag_ms?)))
                        .collect(),
                    moving: s.moving,
                    followed: layout.followed.get(&s.id).copied(),
                    durability: s.durability,
                }
            })
            .collect();
        ClusterView {
            cluster_id: layout.cluster_id.clone(),
            nodes,
            leaving: layout.leaving.iter().copied().collect(),
            shards,
        }
    }

    pub fn node(&self, id: NodeId) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.node_id == id)
    }

    /// The shards that own the slots as Redis Cluster clients see them: the disk shards
    /// (a memory shard covers the same slots again; a request for one of its keys reaches
    /// it from any node).
    pub fn slot_shards(&self) -> impl Iterator<Item = &ShardView> {
        self.shards
            .iter()
            .filter(|s| s.durability == Durability::Disk)
    }

    /// Whether every shard has a leader.
    pub fn healthy(&self) -> bool {
        self.shards.iter().all(|s| s.leader.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_closed_no_time_has_no_lag_to_show() {
        assert_eq!(closed_lag_ms(5_000_000, 0), None);
        assert_eq!(closed_lag_ms(5_000_000, 4_000_000), Some(1_000));
        // A stamp ahead of this node's clock (another node's clock runs ahead): no lag.
        assert_eq!(closed_lag_ms(5_000_000, 6_000_000), Some(0));
    }
}
