//! Who leads a replica's group, as this replica knows it.

use std::time::Duration;

use firn_model::FirnError;
use openraft::async_runtime::watch::WatchReceiver;

use super::ShardReplica;
use crate::types::NodeId;

/// A leader as an error message names it: `leader: node 2`, or `no leader known yet`.
pub fn leader_named(leader: Option<NodeId>) -> String {
    match leader {
        Some(node) => format!("leader: node {node}"),
        None => "no leader known yet".to_string(),
    }
}

impl ShardReplica {
    /// The current leader's node id, if one is known.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// Waits (at most `timeout`) until the group knows a leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, FirnError> {
        let m = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader is known")
            .await
            .map_err(|_| {
                FirnError::Unavailable(format!(
                    "shard {} has no leader (no quorum?)",
                    self.shard_id
                ))
            })?;
        m.current_leader
            .ok_or_else(|| FirnError::Unavailable(format!("shard {} has no leader", self.shard_id)))
    }

    /// Finishes, with the new leader, once this replica knows a leader other than `node`:
    /// a majority has then elected it in a later term, and `node` can commit nothing more
    /// of its own term. Never finishes while `node` leads, no leader is known, or the group
    /// has stopped. Watches openraft's server metrics, which change with the vote and the
    /// leader only, so a waiter is not woken by every commit.
    pub async fn leader_moved_from(&self, node: NodeId) -> NodeId {
        let mut server = self.raft.server_metrics();
        loop {
            let known = server.borrow_watched().current_leader;
            if let Some(leader) = known.filter(|l| *l != node) {
                return leader;
            }
            if server.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
