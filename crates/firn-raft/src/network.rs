//! openraft's network for one shard's group, over the node's shared [`PeerPool`].

use std::future::Future;
use std::sync::Arc;

use futures::Stream;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use openraft::errors::{RPCError, ReplicationClosed, StreamingError};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory};
use openraft::raft::StreamAppendResult;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkV2};

/// One append's answer in openraft's stream of them.
type AppendAnswer = Result<StreamAppendResult<FirnRaft>, RPCError<FirnRaft>>;

use crate::peer::{PeerError, PeerPool, PeerRequest, PeerResponse};
use crate::pipeline::{self, Follower};
use crate::rpc_failure::{rpc_error, unreachable};
use crate::snapshot::{Snapshot, SnapshotData, SnapshotFile};
use crate::snapshot_transfer::{
    self, SNAPSHOT_CHUNK_TIMEOUT, SNAPSHOT_NO_ROOM_RETRY, Sending, SentSoFar, SnapshotChunk,
    SnapshotChunkAnswer, Transfer,
};
use crate::stages::{self, STAGES};
use crate::types::{FirnRaft, NodeId, ShardId, SnapshotMeta, Vote};

#[derive(Clone)]
pub struct PeerNetwork {
    /// This node.
    me: NodeId,
    shard: ShardId,
    pool: Arc<PeerPool>,
    /// How far each follower got with a snapshot transfer cut off part-way.
    sent: SentSoFar,
}

impl PeerNetwork {
    pub fn new(me: NodeId, shard: ShardId, pool: Arc<PeerPool>) -> Self {
        PeerNetwork {
            me,
            shard,
            pool,
            sent: SentSoFar::default(),
        }
    }
}

pub struct PeerClient {
    me: NodeId,
    shard: ShardId,
    target: NodeId,
    pool: Arc<PeerPool>,
    sent: SentSoFar,
}

impl PeerClient {
    /// One request of Raft's to the target (its failures as [`rpc_error`] says).
    async fn call(
        &self,
        action: RPCTypes,
        request: PeerRequest,
        option: &RPCOption,
    ) -> Result<PeerResponse, RPCError<FirnRaft>> {
        self.pool
            .call(self.target, request, option.hard_ttl())
            .await
            .map_err(|e| rpc_error(action, self.me, self.target, e))
    }
}

impl RaftNetworkFactory<FirnRaft> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        // The group's membership names each member's address; a member added at run time
        // is reached through it.
        self.pool.set_addr(target, &node.addr);
        PeerClient {
            me: self.me,
            shard: self.shard,
            target,
            pool: self.pool.clone(),
            sent: self.sent.clone(),
        }
    }
}

impl RaftNetworkV2<FirnRaft> for PeerClient {
    type SnapshotData = SnapshotData;

    /// One append on its own. openraft sends every append through [`Self::stream_append`]
    /// (heartbeats too, as one-request streams); this stays for the trait.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<FirnRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<FirnRaft>, RPCError<FirnRaft>> {
        // Heartbeats carry no entries: only the replication of writes is a stage of one.
        let sent = (!rpc.entries.is_empty()).then(std::time::Instant::now);
        let answer = self
            .call(
                RPCTypes::AppendEntries,
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

    /// Each append is sent as openraft produces it, not after the answer to the one before
    /// (see [`crate::pipeline`]).
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, AppendAnswer>, RPCError<FirnRaft>>>
    where
        S: Stream<Item = AppendEntriesRequest<FirnRaft>> + OptionalSend + Unpin + 'static,
    {
        let to = Follower {
            me: self.me,
            target: self.target,
            shard: self.shard,
            pool: self.pool.clone(),
        };
        let answers = pipeline::send_appends(to, input, option.hard_ttl());
        Box::pin(std::future::ready(Ok(answers)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<FirnRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<FirnRaft>, RPCError<FirnRaft>> {
        match self
            .call(
                RPCTypes::Vote,
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
                RPCTypes::TransferLeader,
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

    /// Sends the snapshot file in chunks of [`snapshot_transfer::chunk_bytes`], one request
    /// each, waiting for each to be stored before reading the next: one chunk in memory.
    /// Any failure ends the transfer and openraft sends the snapshot again; a transfer cut
    /// off part-way goes on from the receiver's last acknowledged chunk ([`SentSoFar`]).
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<FirnRaft>, StreamingError<FirnRaft>> {
        let Snapshot { meta, snapshot } = snapshot;
        let mut cancel = std::pin::pin!(cancel);
        let snapshot = tokio::select! {
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
            file = snapshot_file(snapshot, &meta) => file?,
        };
        let total_bytes = snapshot.bytes();
        let sending = Sending {
            vote,
            meta: meta.clone(),
            total_bytes,
        };
        let chunk_bytes = snapshot_transfer::chunk_bytes() as u64;
        let peer = format!("node {}", self.target);
        let mut offset = self.sent.resume_at(self.target, &sending);
        let mut going_on = offset > 0;
        let mut transfer = Transfer::start(true, self.shard, peer.clone(), total_bytes, offset);
        loop {
            let len = chunk_bytes.min(total_bytes - offset);
            let bytes = read_chunk(&snapshot, offset, len).await?;
            let last = offset + len == total_bytes;
            let chunk = SnapshotChunk {
                shard: self.shard,
                vote,
                meta: meta.clone(),
                total_bytes,
                offset,
                bytes,
            };
            // The last answer waits for the receiver to check and install the whole file.
            let timeout = match last {
                true => snapshot_transfer::last_chunk_timeout(total_bytes),
                false => SNAPSHOT_CHUNK_TIMEOUT,
            };
            let called = tokio::select! {
                closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                answer = self.pool.call(self.target, PeerRequest::SnapshotChunk(chunk), timeout) => answer,
            };
            let answer = match called {
                Ok(answer) => answer,
                Err(PeerError::Remote(_, why)) if going_on => {
                    // The receiver no longer holds the transfer this one went on from (it
                    // restarted, or dropped it as idle): from 0, at once.
                    transfer.finish(&format!("the receiver no longer had it: {why}"));
                    self.sent.forget(self.target);
                    (offset, going_on) = (0, false);
                    transfer = Transfer::start(true, self.shard, peer.clone(), total_bytes, 0);
                    continue;
                }
                Err(e) => {
                    // A refusal ends the transfer for good; a timeout or a lost connection
                    // leaves the mark, and the next transfer goes on from it.
                    if matches!(e, PeerError::Remote(..)) {
                        self.sent.forget(self.target);
                    }
                    let action = RPCTypes::InstallSnapshot;
                    return Err(rpc_error(action, self.me, self.target, e).into());
                }
            };
            going_on = false;
            match answer {
                // Usually the next chunk; further on when the receiver already had this one.
                PeerResponse::SnapshotChunk(SnapshotChunkAnswer::Continue { next_offset })
                    if !last && next_offset > offset && next_offset < total_bytes =>
                {
                    transfer.add(next_offset - offset);
                    self.sent.acknowledged(self.target, &sending, next_offset);
                    offset = next_offset;
                }
                PeerResponse::SnapshotChunk(SnapshotChunkAnswer::Done(response)) => {
                    self.sent.forget(self.target);
                    let outcome = match last {
                        true => {
                            transfer.add(len);
                            "installed"
                        }
                        false => "the receiver has a newer vote",
                    };
                    transfer.finish(outcome);
                    return Ok(response);
                }
                PeerResponse::SnapshotChunk(SnapshotChunkAnswer::NoRoom(why)) => {
                    self.sent.forget(self.target);
                    // Offered again later, not at openraft's next backoff (200 ms): the
                    // receiver's disk will not have changed by then.
                    transfer.finish(&format!(
                        "refused, offered again in {SNAPSHOT_NO_ROOM_RETRY:?}: {why}"
                    ));
                    tokio::select! {
                        closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                        () = tokio::time::sleep(SNAPSHOT_NO_ROOM_RETRY) => {}
                    }
                    return Err(StreamingError::Unreachable(unreachable(why)));
                }
                other => {
                    self.sent.forget(self.target);
                    return Err(StreamingError::Unreachable(unreachable(format!(
                        "unexpected answer to the snapshot chunk at {offset}: {other:?}"
                    ))));
                }
            }
        }
    }
}

/// The snapshot's file: a held cut is written out now (off the async worker), from the
/// cut the meta was read from.
async fn snapshot_file(
    snapshot: SnapshotData,
    meta: &SnapshotMeta,
) -> Result<SnapshotFile, StreamingError<FirnRaft>> {
    let held = match snapshot {
        SnapshotData::File(file) => return Ok(file),
        SnapshotData::Cut(held) => held,
    };
    let written = tokio::task::spawn_blocking(move || held.write_file())
        .await
        .map_err(|e| StreamingError::Unreachable(unreachable(e)))?;
    // As a file that cannot be read: this node's fault, the transfer given up and retried.
    let (written_meta, file) = written.map_err(|e| {
        StreamingError::Unreachable(unreachable(format!("writing the snapshot file: {e}")))
    })?;
    if &written_meta != meta {
        return Err(StreamingError::Unreachable(unreachable(format!(
            "the snapshot file written holds {written_meta}, but the snapshot is {meta}"
        ))));
    }
    Ok(file)
}

/// Reads `len` bytes of the snapshot from `offset`, off the async worker.
async fn read_chunk(
    snapshot: &SnapshotFile,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, StreamingError<FirnRaft>> {
    let snapshot = snapshot.clone();
    let read = tokio::task::spawn_blocking(move || {
        let mut bytes = vec![0u8; len as usize];
        snapshot.read_at(offset, &mut bytes).map(|_| bytes)
    })
    .await
    .map_err(|e| StreamingError::Unreachable(unreachable(e)))?;
    // A snapshot file that cannot be read is this node's fault: the transfer is given up
    // (and retried) rather than the leader stopped.
    read.map_err(|e| {
        StreamingError::Unreachable(unreachable(format!("reading the snapshot file: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    /// An empty AppendEntries (a heartbeat) from node 1 to node 2 at `addr`.
    async fn append_to(
        addr: String,
    ) -> Result<AppendEntriesResponse<FirnRaft>, RPCError<FirnRaft>> {
        let pool = Arc::new(PeerPool::new(1, HashMap::from([(2, addr.clone())])));
        let mut network = PeerNetwork::new(1, 0, pool);
        let mut client = network.new_client(2, &BasicNode::new(addr)).await;
        let rpc = AppendEntriesRequest {
            vote: Vote::new(1, 1),
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        };
        client
            .append_entries(rpc, RPCOption::new(Duration::from_millis(200)))
            .await
    }

    #[tokio::test]
    async fn a_peer_slower_than_the_rpc_is_a_timeout_and_one_not_there_is_unreachable() {
        // Takes the connection and reads, never answers: a follower busy for longer than
        // the heartbeat interval. openraft must not take it for one that is gone (which it
        // backs off from, 200 ms a try).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            while conn.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        });
        match append_to(addr).await {
            Err(RPCError::Timeout(t)) => {
                assert_eq!((t.id, t.target), (1, 2));
                assert_eq!(t.action, RPCTypes::AppendEntries);
            }
            other => panic!("a silent peer gave {other:?}"),
        }

        // Nothing listens at the address: unreachable.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        match append_to(closed).await {
            Err(RPCError::Unreachable(_)) => {}
            other => panic!("a closed port gave {other:?}"),
        }
    }
}
