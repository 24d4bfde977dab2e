//! Opening the Raft groups a node holds: the meta group and its shard replicas, each with
//! its log in the node's log database and its state in the node's state database.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use firn_model::{FirnError, HybridClock};
use firn_raft::log_store::GroupCommit;
use firn_raft::peer::{LocalGroups, PeerPool};
use firn_raft::{META_GROUP, NodeId, ShardConfig, ShardId, ShardReplica, group_name};
use firn_store::{FjallBackend, MemoryBackend, StorageBackend};
use openraft::BasicNode;

pub struct ReplicaFactory {
    pub node_id: NodeId,
    pub peer_addr: String,
    /// The Raft logs of every group on the node (fsync'd by `commit`).
    pub db: fjall::Database,
    /// The state machines of every group on the node.
    pub state_db: fjall::Database,
    pub commit: Arc<GroupCommit>,
    pub data_dir: PathBuf,
    pub snapshot_every_entries: u64,
    pub close_time_every: std::time::Duration,
    pub in_memory: bool,
    pub pool: Arc<PeerPool>,
    pub groups: LocalGroups,
    pub clock: Arc<HybridClock>,
}

impl ReplicaFactory {
    /// Opens (recovering) this node's replica of group `id`. With `form`, this node forms
    /// the group with `members` (node id → peer address) unless it already exists.
    pub async fn open(
        &self,
        id: ShardId,
        members: &BTreeMap<NodeId, String>,
        form: bool,
    ) -> Result<Arc<ShardReplica>, FirnError> {
        let backend: Arc<dyn StorageBackend> = if self.in_memory {
            Arc::new(MemoryBackend::default())
        } else {
            Arc::new(
                FjallBackend::open(self.state_db.clone(), &group_name(id)).map_err(|e| {
                    FirnError::Internal(format!("opening the state of {}: {e}", group_name(id)))
                })?,
            )
        };
        let replica = ShardReplica::open(
            ShardConfig {
                shard_id: id,
                node_id: self.node_id,
                node_addr: self.peer_addr.clone(),
                db: self.db.clone(),
                backend,
                commit: self.commit.clone(),
                snapshot_dir: self.data_dir.join("snapshots"),
                snapshot_every_entries: self.snapshot_every_entries,
                // The meta group's state is the layout: nobody reads it at a time.
                close_time_every: (id != META_GROUP && !self.close_time_every.is_zero())
                    .then_some(self.close_time_every),
                members: members
                    .iter()
                    .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                    .collect(),
                initialize: form,
                pool: self.pool.clone(),
                groups: self.groups.clone(),
            },
            self.clock.clone(),
        )
        .await?;
        Ok(Arc::new(replica))
    }

    /// Stops a replica this node no longer holds; peers' messages for it are refused.
    pub async fn close(&self, id: ShardId, replica: &ShardReplica) {
        self.groups.remove(id);
        replica.shutdown().await;
    }
}
