//! openraft's network for one shard's group, over the node's shared [`PeerPool`].

use std::future::Future;
use std::sync::Arc;

use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkV2};

use crate::peer::{PeerError, PeerPool, PeerRequest, PeerResponse};
use crate::stages::{self, STAGES};
use crate::types::{FirnRaft, NodeId, ShardId, Snapshot, SnapshotData, Vote};

#[derive(Clone)]
pub struct PeerNetwork {
    shard: ShardId,
    pool: Arc<PeerPool>,
}

impl PeerNetwork {
    pub fn new(shard: ShardId, pool: Arc<PeerPool>) -> Self {
        PeerNetwork { shard, pool }
    }
}

pub struct PeerClient {
    shard: ShardId,
    target: NodeId,
    pool: Arc<PeerPool>,
}

fn unreachable(e: impl std::fmt::Display) -> Unreachable<FirnRaft> {
    Unreachable::from_string(e.to_string())
}

impl PeerClient {
    async fn call(
        &self,
        request: PeerRequest,
        option: &RPCOption,
    ) -> Result<PeerResponse, Unreachable<FirnRaft>> {
        self.pool
            .call(self.target, request, option.hard_ttl())
            .await
            .map_err(|e: PeerError| unreachable(e))
    }
}

impl RaftNetworkFactory<FirnRaft> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        // The group's membership names each member's address; a member added at run time
        // is reached through it.
        self.pool.set_addr(target, &node.addr);
        PeerClient {
            shard: self.shard,
            target,
            pool: self.pool.clone(),
        }
    }
}

impl RaftNetworkV2<FirnRaft> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<FirnRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<FirnRaft>, RPCError<FirnRaft>> {
        // Heartbeats carry no entries: only the replication of writes is a stage of one.
        let sent = (!rpc.entries.is_empty()).then(std::time::Instant::now);
        let answer = self
            .call(
                PeerRequest::Append {
                    shard: self.shard,
                    rpc,
                },
                &option,
            )
            .await?;
        if let Some(sent) = sent {
            stages::since(&STAGES.replicate, sent);
        }
        match answer {
            PeerResponse::Append(r) => Ok(r),
            other => Err(RPCError::Unreachable(unreachable(format!(
                "unexpected answer {other:?}"
            )))),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<FirnRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<FirnRaft>, RPCError<FirnRaft>> {
        match self
            .call(
                PeerRequest::Vote {
                    shard: self.shard,
                    rpc,
                },
                &option,
            )
            .await?
        {
            PeerResponse::Vote(r) => Ok(r),
            other => Err(RPCError::Unreachable(unreachable(format!(
                "unexpected answer {other:?}"
            )))),
        }
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<FirnRaft>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<FirnRaft>, RPCError<FirnRaft>> {
        match self
            .call(
                PeerRequest::TransferLeader {
                    shard: self.shard,
                    rpc,
                },
                &option,
            )
            .await?
        {
            PeerResponse::TransferLeader(r) => Ok(r),
            other => Err(RPCError::Unreachable(unreachable(format!(
                "unexpected answer {other:?}"
            )))),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<FirnRaft>, StreamingError<FirnRaft>> {
        let request = PeerRequest::Snapshot {
            shard: self.shard,
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        match self.call(request, &option).await? {
            PeerResponse::Snapshot(r) => Ok(r),
            other => Err(StreamingError::Unreachable(unreachable(format!(
                "unexpected answer {other:?}"
            )))),
        }
    }
}
