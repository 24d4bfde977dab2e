//! The kernel as the cluster part's [`ShardHost`]: this node's account of itself, the
//! cluster view (every node asked concurrently), and the shard-side steps of replica and
//! leader moves, run here or on the shard's leader.

use std::collections::BTreeMap;
use std::time::Duration;

use firn_model::{CallContext, FirnError, Response};
use firn_raft::{NodeId, ShardId};

use super::Kernel;
use crate::cluster::follow::OriginCounts;
use crate::cluster::follow::OriginReport;
use crate::cluster::layout::ClusterLayout;
use crate::cluster::view::Describe;
use crate::cluster::view::{ClusterView, NodeView, ReplicaView};
use crate::cluster::{HostFuture, ShardHost};
use crate::rpc::{Rpc, SetReplicas, ShardPart, TransferLeader};

/// How long a node waits for a peer to describe itself (or report its origin counts):
/// describing is a glance, and a node that does not answer at once is shown down.
const DESCRIBE_TIMEOUT: Duration = Duration::from_millis(500);

impl Kernel {
    /// This node's own view of itself.
    pub fn describe(&self) -> NodeView {
        let now_us = firn_model::hlc::system_wall_us();
        NodeView {
            node_id: self.node_id,
            resp_addr: self.client_addrs.0.clone(),
            http_addr: self.client_addrs.1.clone(),
            up: true,
            meta: self.meta.meta().replica().status().state,
            replicas: self
                .replicas
                .status()
                .into_iter()
                .map(|s| ReplicaView {
                    shard_id: s.shard_id,
                    state: s.state,
                    leader: s.leader,
                    term: s.term,
                    last_applied_index: s.last_applied_index,
                    recovering: s.recovering,
                    closed_lag_ms: self.replicas.get(s.shard_id).and_then(|r| {
                        crate::cluster::view::closed_lag_ms(
                            now_us,
                            r.store().last_commit_ts().wall_us,
                        )
                    }),
                })
                .collect(),
            disk: Some(self.disk.view()),
            clock: Some(self.clock.view()),
        }
    }

    /// The whole cluster: every node asked for its own view, all at once and briefly (a
    /// node that does not answer is shown down), and each shard's leader and replica lag
    /// from those views.
    pub async fn cluster_view(&self) -> ClusterView {
        let layout = self.layout();
        let nodes = self
            .ask_every_node(&layout, || Describe, Self::describe)
            .await
            .into_iter()
            .map(|(id, view)| view.unwrap_or_else(|| NodeView::down(id)))
            .collect();
        ClusterView::assemble(&layout, nodes)
    }

    /// Where this node's clients sent requests lately.
    pub fn origin_report(&self) -> OriginReport {
        self.origins.report(self.node_id)
    }

    /// Asks every node of `layout` (this one directly, with `here`) all at once and briefly:
    /// `None` from a node that did not answer within [`DESCRIBE_TIMEOUT`].
    async fn ask_every_node<R: Rpc>(
        &self,
        layout: &ClusterLayout,
        call: impl Fn() -> R,
        here: impl Fn(&Self) -> R::Reply,
    ) -> Vec<(NodeId, Option<R::Reply>)> {
        futures::future::join_all(layout.nodes.keys().map(|&id| {
            let call = (id != self.node_id).then(&call);
            let here = &here;
            async move {
                match call {
                    None => (id, Some(here(self))),
                    Some(call) => (
                        id,
                        self.peers
                            .call_within(id, call, DESCRIBE_TIMEOUT)
                            .await
                            .ok(),
                    ),
                }
            }
        }))
        .await
    }

    /// Starts removing `node` from the cluster (its replicas move first).
    pub async fn remove_node(&self, node: NodeId) -> Result<(), FirnError> {
        self.meta
            .change(crate::rpc::MetaChange::Remove { node })
            .await
    }
}

impl ShardHost for Kernel {
    fn follow<'a>(&'a self, layout: &'a ClusterLayout) -> HostFuture<'a, Result<(), FirnError>> {
        Box::pin(self.replicas.follow(layout))
    }

    fn run_on(
        &self,
        shard: ShardId,
        part: ShardPart,
    ) -> HostFuture<'_, Result<Response, FirnError>> {
        Box::pin(async move {
            let answer = self
                .on_shard(shard, part, CallContext::default(), 0)
                .await
                .await?;
            Ok(answer.response)
        })
    }

    fn known_leader(&self, shard: ShardId) -> Option<NodeId> {
        self.replicas.known_leader(shard)
    }

    fn cluster_view(&self) -> HostFuture<'_, ClusterView> {
        Box::pin(Kernel::cluster_view(self))
    }

    fn origin_counts(&self) -> HostFuture<'_, Vec<OriginReport>> {
        Box::pin(async move {
            let layout = self.layout();
            self.ask_every_node(&layout, || OriginCounts, Self::origin_report)
                .await
                .into_iter()
                .filter_map(|(_, report)| report)
                .collect()
        })
    }

    fn set_voters(
        &self,
        leader: NodeId,
        shard: ShardId,
        voters: BTreeMap<NodeId, String>,
    ) -> HostFuture<'_, Result<(), FirnError>> {
        Box::pin(async move {
            if leader == self.node_id {
                return self.replicas.set_voters(shard, voters).await;
            }
            self.peers
                .call(leader, SetReplicas { shard, voters })
                .await?
        })
    }

    fn transfer_leader(
        &self,
        leader: NodeId,
        shard: ShardId,
        to: NodeId,
    ) -> HostFuture<'_, Result<(), FirnError>> {
        Box::pin(async move {
            if leader == self.node_id {
                return self.replicas.transfer_leader(shard, to).await;
            }
            self.peers
                .call(leader, TransferLeader { shard, to })
                .await?
        })
    }
}
