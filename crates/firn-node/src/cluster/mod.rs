//! The cluster part: the layout and placement ([`layout`]), the meta group that holds it
//! ([`meta`]), the meta leader's steward that moves replicas and leaders ([`steward`]) —
//! leaders toward their clients too ([`follow`]) —, and
//! the follower that applies each new layout on this node and publishes it on a channel
//! ([`follower`]). It reaches the shards only through the narrow [`ShardHost`] trait, never
//! the router itself.

pub mod follow;
pub mod follower;
pub mod layout;
pub mod meta;
pub mod steward;
pub mod view;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use firn_model::{FirnError, Response};
use firn_raft::{NodeId, ShardId};

use self::follow::OriginReport;
use self::layout::ClusterLayout;
use crate::cluster::view::ClusterView;
use crate::rpc::ShardPart;

/// A future the host answers with.
pub type HostFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the cluster part needs of the shards: to hold the replicas a layout gives this node,
/// to run a part on a shard wherever it is served, to see who leads, and to have a shard's
/// leader change its voters or its leadership.
pub trait ShardHost: Send + Sync + 'static {
    /// Opens and closes this node's replicas as `layout` says.
    fn follow<'a>(&'a self, layout: &'a ClusterLayout) -> HostFuture<'a, Result<(), FirnError>>;
    /// Runs `part` on `shard`, wherever it is served.
    fn run_on(
        &self,
        shard: ShardId,
        part: ShardPart,
    ) -> HostFuture<'_, Result<Response, FirnError>>;
    /// The leader of `shard` as this node's replica knows it, without waiting.
    fn known_leader(&self, shard: ShardId) -> Option<NodeId>;
    /// The whole cluster, every node asked briefly.
    fn cluster_view(&self) -> HostFuture<'_, ClusterView>;
    /// Where clients' requests came from: every node's origin counts, asked briefly (a node
    /// that does not answer is left out).
    fn origin_counts(&self) -> HostFuture<'_, Vec<OriginReport>>;
    /// Has `leader` (this node or another) make `voters` the voters of `shard`.
    fn set_voters(
        &self,
        leader: NodeId,
        shard: ShardId,
        voters: BTreeMap<NodeId, String>,
    ) -> HostFuture<'_, Result<(), FirnError>>;
    /// Has `leader` (this node or another) hand the leadership of `shard` to `to`.
    fn transfer_leader(
        &self,
        leader: NodeId,
        shard: ShardId,
        to: NodeId,
    ) -> HostFuture<'_, Result<(), FirnError>>;
}
