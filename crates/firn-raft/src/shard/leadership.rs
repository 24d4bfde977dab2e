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

impl ShardReplica {
    /// Follows the node's clock against the bound on clock offsets: beyond it, this replica
    /// stands for no election and, while it leads, hands leadership to the voter among
    /// `within` (the nodes whose clocks are within the bound) that has replicated the most;
    /// back within it, it stands again (unless it is recovering). Called every time the node
    /// looks at its clock; a transfer that fails is tried again then.
    pub async fn follow_clock_bound(&self, within: &[NodeId]) {
        let in_bound = self.clock.within_bound();
        self.raft
            .runtime_config()
            .elect(in_bound && !self.is_recovering());
        if in_bound || self.leader() != Some(self.node_id) {
            return;
        }
        let to = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
            m.replication.as_ref().and_then(|replication| {
                replication
                    .iter()
                    .filter(|(n, _)| {
                        **n != self.node_id && voters.contains(n) && within.contains(n)
                    })
                    .max_by_key(|(_, matched)| matched.as_ref().map(|l| l.index))
                    .map(|(n, _)| *n)
            })
        };
        if let Some(to) = to {
            tracing::warn!(
                shard = self.shard_id,
                to,
                "this node's clock is beyond the bound on clock offsets: handing leadership away"
            );
            let _ = self.transfer_leader(to).await;
        }
    }
}
