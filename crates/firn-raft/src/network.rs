//! Peer networking between replicas of a group. A single node is a cluster of one, so no RPC
//! is ever sent; every call answers "unreachable". The cluster work replaces this with one
//! multiplexed connection per peer node.

use std::future::Future;

use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkV2};

use crate::types::{FirnRaft, NodeId, Snapshot, SnapshotData, Vote};

#[derive(Clone, Default)]
pub struct PeerNetwork;

pub struct PeerClient {
    target: NodeId,
}

impl PeerClient {
    fn unreachable(&self) -> Unreachable<FirnRaft> {
        Unreachable::from_string(format!(
            "node {} is not reachable: peer networking is not enabled on this node",
            self.target
        ))
    }
}

impl RaftNetworkFactory<FirnRaft> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Self::Network {
        PeerClient { target }
    }
}

impl RaftNetworkV2<FirnRaft> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<FirnRaft>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<FirnRaft>, RPCError<FirnRaft>> {
        Err(RPCError::Unreachable(self.unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<FirnRaft>,
        _option: RPCOption,
    ) -> Result<VoteResponse<FirnRaft>, RPCError<FirnRaft>> {
        Err(RPCError::Unreachable(self.unreachable()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<FirnRaft>, StreamingError<FirnRaft>> {
        Err(StreamingError::Unreachable(self.unreachable()))
    }
}
