//! The peer transport: two TCP connections from a node to each peer, one per [`Lane`]. The
//! messages lane is shared by every Raft group and by the node's own requests (forwarded
//! writes, read indexes); the bulk lane carries large transfers (snapshot chunks, large
//! values' chunks), so that a 4 MiB frame on a slow link never holds a heartbeat up. Frames
//! are length-delimited postcard messages tagged with a request id, so many calls are in
//! flight on one connection at once.
//!
//! The serving side hands each group's appends to its Raft in the order a connection
//! delivered them (`appends`, the follower's end of [`crate::pipeline`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::Raft;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::snapshot_transfer::{
    IncomingSnapshots, SnapshotChunk, SnapshotChunkAnswer, SnapshotRoom,
};
use crate::state_machine::ShardStateMachine;
use crate::transport::{BoxedPeerStream, PeerTransport, PlainTcp};
use crate::types::{FirnRaft, NodeId, ShardId};

mod appends;
pub mod clock;
mod counts;
mod pool;
use appends::AppendStreams;
pub(crate) use appends::Covers;
pub use clock::{ClockOffset, ClockOffsets};
pub use pool::{APPENDS_IN_FLIGHT_MAX, Lane, PeerPool, SentCall};

/// Largest frame: an append of many large values fits. A snapshot travels in chunks far
/// smaller than this (`snapshot_transfer::SNAPSHOT_CHUNK_BYTES_MAX`).
pub const PEER_FRAME_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Frames queued for one connection's writer before callers wait.
const PEER_SEND_QUEUE: usize = 4_096;
/// A connection that has delivered nothing for this long while a call timed out is
/// abandoned and remade (heartbeats keep a healthy messages lane busier than this; a bulk
/// lane that silent while a transfer's call times out is as good as stalled).
const STALLED_AFTER: Duration = Duration::from_secs(1);
/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A peer connection whose other end takes none of an answer for this long is closed (its
/// answers would wait for ever, and its requests with them): a node that is alive reads
/// its answers within a Raft timeout; one paused or gone connects again when it is back.
pub const PEER_WRITE_STALL_MAX: Duration = Duration::from_secs(30);

/// Most requests of the node's own ([`PeerRequest::App`]: forwarded writes and reads) that
/// a node handles at once for its peers. Each holds its request (up to a value's size) and
/// a task until it is answered; without a bound a burst of forwarded requests took as much
/// memory and as many tasks as peers sent. Handlers mostly wait on Raft, so 1,024 at once
/// keep every shard's pipeline full.
pub const PEER_APP_CONCURRENCY_MAX: usize = 1_024;

/// Most App requests that wait for one of the [`PEER_APP_CONCURRENCY_MAX`] places. A request
/// past it is answered at once with an error starting [`PEER_BUSY`] — not handled, so the
/// caller may retry — because a connection's reader cannot wait for a place: the same
/// connection carries the Raft messages (appends, votes), which must never queue behind
/// the node's own requests. Raft messages have no bound of their own here: openraft keeps
/// at most one replication stream and one vote per group and peer in flight.
pub const PEER_APP_WAITING_MAX: usize = 8_192;

/// How a node's answer to an App request it was too busy to take begins.
pub const PEER_BUSY: &str = "busy";

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append {
        shard: ShardId,
        rpc: AppendEntriesRequest<FirnRaft>,
    },
    Vote {
        shard: ShardId,
        rpc: VoteRequest<FirnRaft>,
    },
    /// One piece of a snapshot, in order (see [`crate::snapshot_transfer`]).
    SnapshotChunk(SnapshotChunk),
    /// The leader hands leadership to this node's replica.
    TransferLeader {
        shard: ShardId,
        rpc: TransferLeaderRequest<FirnRaft>,
    },
    /// A request of the node's own, opaque here (the router gives it meaning).
    App(Vec<u8>),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(AppendEntriesResponse<FirnRaft>),
    Vote(VoteResponse<FirnRaft>),
    SnapshotChunk(SnapshotChunkAnswer),
    TransferLeader(TransferLeaderResponse<FirnRaft>),
    App(Vec<u8>),
    Error(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope<T> {
    pub(crate) id: u64,
    pub(crate) body: T,
    /// The sender's wall clock as it sent the frame: what the caller measures a peer's
    /// clock offset by (`clock`).
    pub(crate) wall_us: u64,
}

impl<T> Envelope<T> {
    pub(crate) fn new(id: u64, body: T) -> Self {
        Envelope {
            id,
            body,
            wall_us: firn_model::hlc::system_wall_us(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// A node known only by its address (a joining node's contact) could not be asked.
    #[error("{0}: {1}")]
    Contact(String, String),
    /// The request was not handled: no connection to the node, or the connection closed
    /// before the request was written to it. Nothing happened; retrying is safe.
    #[error("node {0} is unreachable: {1}")]
    Unreachable(NodeId, String),
    /// The node answered that it was too busy to take the request ([`PEER_BUSY`]). Nothing
    /// happened; retrying is safe, after a pause.
    #[error("node {0} is busy: {1}")]
    Busy(NodeId, String),
    /// The request was sent but the connection dropped before the answer came.
    #[error("the connection to node {0} dropped before it answered")]
    Lost(NodeId),
    #[error("node {0} did not answer within {1:?}")]
    Timeout(NodeId, Duration),
    #[error("node {0} refused: {1}")]
    Remote(NodeId, String),
}

/// How a peer connection cuts its stream into frames: a 4-byte big-endian length, then
/// that many bytes, at most [`PEER_FRAME_BYTES_MAX`].
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(PEER_FRAME_BYTES_MAX)
        .new_codec()
}

/// A frame as the serving end reads it: the request's id and the request; `None` for bytes
/// that are not one (the connection is then closed).
pub fn read_request(frame: &[u8]) -> Option<(u64, PeerRequest)> {
    let Envelope { id, body, .. } = postcard::from_bytes::<Envelope<PeerRequest>>(frame).ok()?;
    Some((id, body))
}

/// A frame as the calling end reads it: the id of the request it answers, the answer and
/// the sender's wall clock as it sent it; `None` for bytes that are not one.
pub fn read_response(frame: &[u8]) -> Option<(u64, PeerResponse, u64)> {
    let Envelope { id, body, wall_us } =
        postcard::from_bytes::<Envelope<PeerResponse>>(frame).ok()?;
    Some((id, body, wall_us))
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Option<Bytes> {
    postcard::to_stdvec(v).ok().map(Bytes::from)
}

/// Answers the node's own requests arriving from peers.
pub trait AppHandler: Send + Sync + 'static {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;
}

/// The Raft groups this node holds, by shard: where incoming Raft messages go, with the
/// snapshots being received for them.
#[derive(Clone, Default)]
pub struct LocalGroups {
    groups: Arc<RwLock<HashMap<ShardId, LocalGroup>>>,
    incoming: Arc<IncomingSnapshots>,
}

/// One group held here, as its incoming messages find it.
#[derive(Clone)]
struct LocalGroup {
    raft: Raft<FirnRaft, ShardStateMachine>,
    /// Set while the replica recovers what it held only in memory: it refuses every vote
    /// (see `ShardReplica::is_recovering`).
    recovering: Arc<AtomicBool>,
    /// Tells this replica from one of the same group held here before it (removed, then
    /// added again): a connection's append stream goes to the replica it was opened for.
    incarnation: u64,
}

/// Numbers the replicas added to any node's groups in this process.
static INCARNATIONS: AtomicU64 = AtomicU64::new(0);

impl LocalGroups {
    /// Groups whose replicas take a snapshot only when `room` says the disk can hold it.
    pub fn with_snapshot_room(room: Arc<dyn SnapshotRoom>) -> Self {
        LocalGroups {
            groups: Arc::default(),
            incoming: Arc::new(IncomingSnapshots::with_room(room)),
        }
    }

    pub fn insert(
        &self,
        shard: ShardId,
        raft: Raft<FirnRaft, ShardStateMachine>,
        recovering: Arc<AtomicBool>,
    ) {
        self.groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                shard,
                LocalGroup {
                    raft,
                    recovering,
                    incarnation: INCARNATIONS.fetch_add(1, Ordering::Relaxed),
                },
            );
    }

    /// Forgets a replica this node no longer holds (its messages are refused from now on,
    /// and a snapshot it was receiving is discarded).
    pub fn remove(&self, shard: ShardId) {
        self.groups
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&shard);
        self.incoming.discard(shard);
    }

    /// How many snapshot transfers this node has begun receiving, from offset 0 (a transfer
    /// that goes on where it was cut off is not a new one).
    pub fn snapshot_transfers_begun(&self) -> u64 {
        self.incoming.begun()
    }

    fn get(&self, shard: ShardId) -> Option<Raft<FirnRaft, ShardStateMachine>> {
        self.group(shard).map(|g| g.raft)
    }

    fn group(&self, shard: ShardId) -> Option<LocalGroup> {
        self.groups
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .cloned()
    }
}

/// Where a connection's answers go: its writer's queue, each under its request's id. A
/// send waits only while that queue is full.
#[derive(Clone)]
pub(crate) struct Replies(mpsc::Sender<Bytes>);

impl Replies {
    pub(crate) async fn send(&self, id: u64, body: PeerResponse) {
        if let Some(bytes) = encode(&Envelope::new(id, body)) {
            // A closed queue: the connection is gone, and the answer with it.
            let _ = self.0.send(bytes).await;
        }
    }
}

fn missing(shard: ShardId) -> PeerResponse {
    PeerResponse::Error(format!("no replica of shard {shard} on this node"))
}

async fn answer(
    groups: &LocalGroups,
    app: &Arc<dyn AppHandler>,
    request: PeerRequest,
) -> PeerResponse {
    match request {
        // `serve_connection` hands appends to their group's stream, in order; never here.
        PeerRequest::Append { shard, .. } => missing(shard),
        PeerRequest::Vote { shard, rpc } => match groups.group(shard) {
            // Viewstamped Replication's recovery rule: a replica that may have lost what it
            // acknowledged from memory grants no vote until it has caught up. The answer
            // carries the candidate's own vote (never a lower one) and no log id.
            Some(g) if g.recovering.load(Ordering::Acquire) => {
                tracing::info!(shard, candidate = %rpc.vote, "vote refused: recovering");
                metrics::counter!("firn_memory_votes_refused_total", "shard" => shard.to_string())
                    .increment(1);
                PeerResponse::Vote(VoteResponse::new(rpc.vote, None, false))
            }
            Some(g) => g
                .raft
                .vote(rpc)
                .await
                .map_or_else(|e| PeerResponse::Error(e.to_string()), PeerResponse::Vote),
            None => missing(shard),
        },
        PeerRequest::SnapshotChunk(chunk) => match groups.get(chunk.shard) {
            Some(raft) => groups
                .incoming
                .receive(&raft, chunk)
                .await
                .map_or_else(PeerResponse::Error, PeerResponse::SnapshotChunk),
            None => missing(chunk.shard),
        },
        PeerRequest::TransferLeader { shard, rpc } => match groups.get(shard) {
            Some(raft) => raft.handle_transfer_leader(rpc).await.map_or_else(
                |e| PeerResponse::Error(e.to_string()),
                PeerResponse::TransferLeader,
            ),
            None => missing(shard),
        },
        PeerRequest::App(payload) => PeerResponse::App(app.handle(payload).await),
    }
}

/// The node-wide bounds on App requests from peers, shared by every connection.
#[derive(Clone)]
struct AppLimits {
    /// Places for handling: [`PEER_APP_CONCURRENCY_MAX`].
    running: Arc<Semaphore>,
    /// Places for handling or waiting to: the sum of both bounds.
    admitted: Arc<Semaphore>,
}

impl AppLimits {
    fn new() -> Self {
        AppLimits {
            running: Arc::new(Semaphore::new(PEER_APP_CONCURRENCY_MAX)),
            admitted: Arc::new(Semaphore::new(
                PEER_APP_CONCURRENCY_MAX + PEER_APP_WAITING_MAX,
            )),
        }
    }
}

/// Accepts peer connections in plain TCP until `stop` fires.
pub async fn serve_peers(
    listener: TcpListener,
    groups: LocalGroups,
    app: Arc<dyn AppHandler>,
    stop: watch::Receiver<bool>,
) {
    serve_peers_over(listener, Arc::new(PlainTcp), groups, app, stop).await
}

/// Accepts peer connections until `stop` fires, each wrapped by `transport` first (a
/// connection it refuses is closed).
pub async fn serve_peers_over(
    listener: TcpListener,
    transport: Arc<dyn PeerTransport>,
    groups: LocalGroups,
    app: Arc<dyn AppHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let limits = AppLimits::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (transport, groups, app) = (transport.clone(), groups.clone(), app.clone());
                    let (limits, stop) = (limits.clone(), stop.clone());
                    // Wrapped in the connection's own task: a slow handshake holds up no other.
                    tokio::spawn(async move {
                        match transport.accept(stream).await {
                            Ok(stream) => serve_connection(stream, groups, app, limits, stop).await,
                            Err(e) => tracing::debug!(%peer, "peer connection refused: {e}"),
                        }
                    });
                }
                Err(e) => tracing::warn!("peer accept: {e}"),
            },
            _ = stop.changed() => return,
        }
    }
}

async fn serve_connection(
    stream: BoxedPeerStream,
    groups: LocalGroups,
    app: Arc<dyn AppHandler>,
    limits: AppLimits,
    mut stop: watch::Receiver<bool>,
) {
    let (mut sink, mut frames) = Framed::new(stream, codec()).split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(PEER_SEND_QUEUE);
    // Dropped when the writer stops: a connection whose answers cannot be sent is closed,
    // so that the calls waiting on it at the other end fail at once.
    let (writer_running, mut writer_stopped) = oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            match tokio::time::timeout(PEER_WRITE_STALL_MAX, sink.send(frame)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    metrics::counter!("firn_peer_connections_closed_total", "reason" => "output_stalled")
                        .increment(1);
                    tracing::warn!(
                        "closing a peer connection that took none of an answer for \
                         {PEER_WRITE_STALL_MAX:?}"
                    );
                    break;
                }
            }
        }
        drop(writer_running);
    });
    let replies = Replies(tx);
    // Appends go to their group's stream, in the order they arrived (see `appends`).
    let mut appends = AppendStreams::default();
    loop {
        let frame = tokio::select! {
            f = frames.next() => f,
            _ = stop.changed() => None,
            _ = &mut writer_stopped => None,
        };
        let Some(Ok(frame)) = frame else { break };
        let Some((id, body)) = read_request(&frame) else {
            tracing::warn!("peer sent an undecodable frame; closing the connection");
            break;
        };
        let body = match body {
            // Refusals are queued by the reader itself, as a busy answer is below.
            PeerRequest::Append { shard, rpc } => {
                let taken = match groups.group(shard) {
                    Some(g) => appends.take(&g.raft, g.incarnation, shard, id, rpc, &replies),
                    None => Err(missing(shard)),
                };
                if let Err(refused) = taken {
                    replies.send(id, refused).await;
                }
                continue;
            }
            body => body,
        };
        // An App request takes a place before it gets a task; with none left it is
        // answered busy at once, and the reader goes on to the next frame (maybe a Raft
        // message) without waiting.
        let admitted = match &body {
            PeerRequest::App(_) => match limits.admitted.clone().try_acquire_owned() {
                Ok(place) => Some(place),
                Err(_) => {
                    let busy = PeerResponse::Error(format!(
                        "{PEER_BUSY}: {} requests already run or wait on this node, the \
                         limit; retry",
                        PEER_APP_CONCURRENCY_MAX + PEER_APP_WAITING_MAX
                    ));
                    // Queued by the reader itself (no task per refusal): it waits only
                    // when the writer's queue is full, as every answer then does.
                    replies.send(id, busy).await;
                    continue;
                }
            },
            _ => None,
        };
        let (groups, app, replies) = (groups.clone(), app.clone(), replies.clone());
        let running = limits.running.clone();
        tokio::spawn(async move {
            // Both places are held until the answer is queued (the semaphores are never
            // closed, so acquiring cannot fail).
            let _running = match &admitted {
                Some(_) => Some(running.acquire_owned().await),
                None => None,
            };
            replies.send(id, answer(&groups, &app, body).await).await;
        });
    }
    // The streams' answer tasks hold the writer's sender until their last answer is out.
    drop((appends, replies));
    let _ = writer.await;
}
