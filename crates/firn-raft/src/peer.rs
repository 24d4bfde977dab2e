//! The peer transport: one TCP connection per pair of nodes, shared by every Raft group and
//! by the node's own requests (forwarded writes, read indexes). Frames are length-delimited
//! postcard messages tagged with a request id, so many calls are in flight on one
//! connection at once.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use openraft::Raft;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, NodeId, ShardId, Snapshot, SnapshotMeta, Vote};

/// Largest frame: a whole snapshot travels in one (see docs/architecture.md).
pub const PEER_FRAME_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Frames queued for one connection's writer before callers wait.
const PEER_SEND_QUEUE: usize = 4_096;
/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

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
    Snapshot {
        shard: ShardId,
        vote: Vote,
        meta: SnapshotMeta,
        data: Vec<u8>,
    },
    /// A request of the node's own, opaque here (the router gives it meaning).
    App(Vec<u8>),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(AppendEntriesResponse<FirnRaft>),
    Vote(VoteResponse<FirnRaft>),
    Snapshot(SnapshotResponse<FirnRaft>),
    App(Vec<u8>),
    Error(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct Envelope<T> {
    id: u64,
    body: T,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("node {0} is unreachable: {1}")]
    Unreachable(NodeId, String),
    /// The request was sent but the connection dropped before the answer came.
    #[error("the connection to node {0} dropped before it answered")]
    Lost(NodeId),
    #[error("node {0} did not answer within {1:?}")]
    Timeout(NodeId, Duration),
    #[error("node {0} refused: {1}")]
    Remote(NodeId, String),
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(PEER_FRAME_BYTES_MAX)
        .new_codec()
}

fn encode<T: Serialize>(v: &T) -> Option<Bytes> {
    postcard::to_stdvec(v).ok().map(Bytes::from)
}

/// Answers the node's own requests arriving from peers.
pub trait AppHandler: Send + Sync + 'static {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;
}

/// The Raft groups this node holds, by shard: where incoming Raft messages go.
#[derive(Clone, Default)]
pub struct LocalGroups(Arc<RwLock<HashMap<ShardId, Raft<FirnRaft, ShardStateMachine>>>>);

impl LocalGroups {
    pub fn insert(&self, shard: ShardId, raft: Raft<FirnRaft, ShardStateMachine>) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(shard, raft);
    }

    fn get(&self, shard: ShardId) -> Option<Raft<FirnRaft, ShardStateMachine>> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .cloned()
    }
}

async fn answer(
    groups: &LocalGroups,
    app: &Arc<dyn AppHandler>,
    request: PeerRequest,
) -> PeerResponse {
    let missing = |shard| PeerResponse::Error(format!("no replica of shard {shard} on this node"));
    match request {
        PeerRequest::Append { shard, rpc } => match groups.get(shard) {
            Some(raft) => raft
                .append_entries(rpc)
                .await
                .map_or_else(|e| PeerResponse::Error(e.to_string()), PeerResponse::Append),
            None => missing(shard),
        },
        PeerRequest::Vote { shard, rpc } => match groups.get(shard) {
            Some(raft) => raft
                .vote(rpc)
                .await
                .map_or_else(|e| PeerResponse::Error(e.to_string()), PeerResponse::Vote),
            None => missing(shard),
        },
        PeerRequest::Snapshot {
            shard,
            vote,
            meta,
            data,
        } => match groups.get(shard) {
            Some(raft) => raft
                .install_full_snapshot(
                    vote,
                    Snapshot {
                        meta,
                        snapshot: data,
                    },
                )
                .await
                .map_or_else(
                    |e| PeerResponse::Error(e.to_string()),
                    PeerResponse::Snapshot,
                ),
            None => missing(shard),
        },
        PeerRequest::App(payload) => PeerResponse::App(app.handle(payload).await),
    }
}

/// Accepts peer connections until `stop` fires.
pub async fn serve_peers(
    listener: TcpListener,
    groups: LocalGroups,
    app: Arc<dyn AppHandler>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, groups.clone(), app.clone(), stop.clone()));
                }
                Err(e) => tracing::warn!("peer accept: {e}"),
            },
            _ = stop.changed() => return,
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    groups: LocalGroups,
    app: Arc<dyn AppHandler>,
    mut stop: watch::Receiver<bool>,
) {
    let (mut sink, mut frames) = Framed::new(stream, codec()).split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(PEER_SEND_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if sink.send(frame).await.is_err() {
                return;
            }
        }
    });
    loop {
        let frame = tokio::select! {
            f = frames.next() => f,
            _ = stop.changed() => None,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(Envelope { id, body }) = postcard::from_bytes::<Envelope<PeerRequest>>(&frame)
        else {
            tracing::warn!("peer sent an undecodable frame; closing the connection");
            break;
        };
        let (groups, app, tx) = (groups.clone(), app.clone(), tx.clone());
        tokio::spawn(async move {
            let body = answer(&groups, &app, body).await;
            if let Some(bytes) = encode(&Envelope { id, body }) {
                let _ = tx.send(bytes).await;
            }
        });
    }
    drop(tx);
    let _ = writer.await;
}

/// One outgoing connection with its calls in flight.
struct PeerConn {
    tx: mpsc::Sender<Bytes>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<PeerResponse>>>>,
    alive: Arc<AtomicBool>,
}

impl PeerConn {
    async fn connect(addr: &str) -> std::io::Result<PeerConn> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let _ = stream.set_nodelay(true);
        let (mut sink, mut frames) = Framed::new(stream, codec()).split();
        let (tx, mut rx) = mpsc::channel::<Bytes>(PEER_SEND_QUEUE);
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<PeerResponse>>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let writer_alive = alive.clone();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if sink.send(frame).await.is_err() {
                    break;
                }
            }
            writer_alive.store(false, Ordering::Release);
        });
        let (reader_pending, reader_alive) = (pending.clone(), alive.clone());
        tokio::spawn(async move {
            while let Some(Ok(frame)) = frames.next().await {
                let Ok(Envelope { id, body }) =
                    postcard::from_bytes::<Envelope<PeerResponse>>(&frame)
                else {
                    break;
                };
                if let Some(waiter) = reader_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id)
                {
                    let _ = waiter.send(body);
                }
            }
            reader_alive.store(false, Ordering::Release);
            // Every call still waiting learns the connection is gone.
            reader_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
        });
        Ok(PeerConn { tx, pending, alive })
    }
}

/// Connections to every peer, made on first use and remade after a failure.
pub struct PeerPool {
    node_id: NodeId,
    addrs: RwLock<HashMap<NodeId, String>>,
    conns: tokio::sync::Mutex<HashMap<NodeId, Arc<PeerConn>>>,
    next_id: AtomicU64,
}

impl PeerPool {
    pub fn new(node_id: NodeId, addrs: HashMap<NodeId, String>) -> Self {
        PeerPool {
            node_id,
            addrs: RwLock::new(addrs),
            conns: Default::default(),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    pub fn set_addr(&self, node: NodeId, addr: String) {
        self.addrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node, addr);
    }

    async fn conn(&self, target: NodeId) -> Result<Arc<PeerConn>, PeerError> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(&target)
            && c.alive.load(Ordering::Acquire)
        {
            return Ok(c.clone());
        }
        let addr = self
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&target)
            .cloned()
            .ok_or_else(|| PeerError::Unreachable(target, "no address known".into()))?;
        let conn = Arc::new(
            PeerConn::connect(&addr)
                .await
                .map_err(|e| PeerError::Unreachable(target, format!("{addr}: {e}")))?,
        );
        conns.insert(target, conn.clone());
        Ok(conn)
    }

    /// Sends one request and waits for its answer, at most `timeout`.
    pub async fn call(
        &self,
        target: NodeId,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let conn = self.conn(target).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = encode(&Envelope { id, body: request })
            .ok_or_else(|| PeerError::Unreachable(target, "request could not be encoded".into()))?;
        let (done, answer) = oneshot::channel();
        conn.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, done);
        if conn.tx.send(bytes).await.is_err() {
            conn.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(PeerError::Unreachable(target, "connection closed".into()));
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(PeerResponse::Error(e))) => Err(PeerError::Remote(target, e)),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(PeerError::Lost(target)),
            Err(_) => {
                conn.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(PeerError::Timeout(target, timeout))
            }
        }
    }
}
