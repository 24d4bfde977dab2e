//! The peer transport: two TCP connections from a node to each peer, one per [`Lane`]. The
//! messages lane is shared by every Raft group and by the node's own requests (forwarded
//! writes, read indexes); the bulk lane carries large transfers (snapshot chunks, large
//! values' chunks), so that a 4 MiB frame on a slow link never holds a heartbeat up. Frames
//! are length-delimited postcard messages tagged with a request id, so many calls are in
//! flight on one connection at once.

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
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::snapshot_transfer::{
    IncomingSnapshots, SnapshotChunk, SnapshotChunkAnswer, SnapshotRoom,
};
use crate::state_machine::ShardStateMachine;
use crate::transport::{BoxedPeerStream, PeerTransport, PlainTcp};
use crate::types::{FirnRaft, NodeId, ShardId};

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
struct Envelope<T> {
    id: u64,
    body: T,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// A node known only by its address (a joining node's contact) could not be asked.
    #[error("{0}: {1}")]
    Contact(String, String),
    /// The request was not handled: the node could not be reached, or it answered that it
    /// was too busy to take the request ([`PEER_BUSY`]). Nothing happened; retrying is safe.
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
}

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
            .insert(shard, LocalGroup { raft, recovering });
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
                    if let Some(bytes) = encode(&Envelope { id, body: busy }) {
                        let _ = tx.send(bytes).await;
                    }
                    continue;
                }
            },
            _ => None,
        };
        let (groups, app, tx) = (groups.clone(), app.clone(), tx.clone());
        let running = limits.running.clone();
        tokio::spawn(async move {
            // Both places are held until the answer is queued (the semaphores are never
            // closed, so acquiring cannot fail).
            let _running = match &admitted {
                Some(_) => Some(running.acquire_owned().await),
                None => None,
            };
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
    /// When the last frame arrived: a connection silent this long while calls time out is
    /// stalled (a partition drops packets without resetting the connection) and is replaced.
    last_frame_at: Arc<Mutex<std::time::Instant>>,
}

impl PeerConn {
    /// Connects to `addr`, from `local_ip` when given, so that a node's peer traffic carries
    /// its own address (which is what lets a test cut one node off with firewall rules).
    async fn connect(
        addr: &str,
        local_ip: Option<IpAddr>,
        transport: &dyn PeerTransport,
    ) -> std::io::Result<PeerConn> {
        let connect = async {
            let target = tokio::net::lookup_host(addr)
                .await?
                .next()
                .ok_or_else(|| std::io::Error::other(format!("{addr} resolves to nothing")))?;
            let socket = if target.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            if let Some(ip) =
                local_ip.filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == target.is_ipv4())
            {
                // An address announced for the node (`--advertise-host`) need not be one of
                // this machine's (a NAT's, say): then the system picks the source.
                if let Err(e) = socket.bind(SocketAddr::new(ip, 0))
                    && e.kind() != std::io::ErrorKind::AddrNotAvailable
                {
                    return Err(e);
                }
            }
            let stream = socket.connect(target).await?;
            let _ = stream.set_nodelay(true);
            transport.connect(stream, addr).await
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
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
        let last_frame_at = Arc::new(Mutex::new(std::time::Instant::now()));
        let reader_last = last_frame_at.clone();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = frames.next().await {
                *reader_last.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
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
        Ok(PeerConn {
            tx,
            pending,
            alive,
            last_frame_at,
        })
    }
}

/// Which of a node's connections to a peer a call goes over. Frames on one connection go
/// out one after the other, so a frame waits for every frame queued before it to cross the
/// link: 4 MiB take 3 s at 10 Mbit/s, and a heartbeat behind them would be late for every
/// follower's election timeout (300–600 ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Raft's messages and the node's own requests: small, and waited for.
    Messages,
    /// Large transfers: snapshot chunks, and the chunks of large values and their reads.
    Bulk,
}

impl Lane {
    /// The lane a request of this crate's goes over ([`PeerRequest::App`] requests say
    /// their own, see [`PeerPool::call_on`]).
    fn of(request: &PeerRequest) -> Lane {
        match request {
            PeerRequest::SnapshotChunk(_) => Lane::Bulk,
            _ => Lane::Messages,
        }
    }
}

/// A peer's connection, if made; locked while (re)connecting.
type ConnSlot = Arc<tokio::sync::Mutex<Option<Arc<PeerConn>>>>;

/// Connections to every peer, made on first use and remade after a failure.
pub struct PeerPool {
    /// The address this node's outgoing peer connections come from.
    local_ip: Option<IpAddr>,
    /// What connections run over (plain TCP unless [`PeerPool::with_transport`] says).
    transport: Arc<dyn PeerTransport>,
    addrs: RwLock<HashMap<NodeId, String>>,
    /// One slot per peer and lane; connecting to one never blocks calls over another.
    conns: Mutex<HashMap<(NodeId, Lane), ConnSlot>>,
    next_id: AtomicU64,
}

impl PeerPool {
    pub fn new(node_id: NodeId, addrs: HashMap<NodeId, String>) -> Self {
        let local_ip = addrs
            .get(&node_id)
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .map(|a| a.ip());
        PeerPool {
            local_ip,
            transport: Arc::new(PlainTcp),
            addrs: RwLock::new(addrs),
            conns: Default::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// The pool with its connections made over `transport`.
    pub fn with_transport(self, transport: Arc<dyn PeerTransport>) -> Self {
        PeerPool { transport, ..self }
    }

    /// Sets (or changes) where `node` is reached; a changed address drops the old connection.
    pub fn set_addr(&self, node: NodeId, addr: &str) {
        let changed = {
            let mut addrs = self.addrs.write().unwrap_or_else(|p| p.into_inner());
            addrs
                .insert(node, addr.to_string())
                .is_some_and(|old| old != addr)
        };
        if changed {
            self.conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(n, _), _| *n != node);
        }
    }

    /// One request to a node known only by its address (a node joining asks a member):
    /// a connection made for this call alone.
    pub async fn call_addr(
        &self,
        addr: &str,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let unreachable = |e: String| PeerError::Contact(addr.to_string(), e);
        let conn = tokio::time::timeout(
            timeout,
            PeerConn::connect(addr, self.local_ip, &*self.transport),
        )
        .await
        .map_err(|_| unreachable("connect timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
        let bytes = encode(&Envelope {
            id: 1,
            body: request,
        })
        .ok_or_else(|| unreachable("request could not be encoded".into()))?;
        let (done, answer) = oneshot::channel();
        conn.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(1, done);
        conn.tx
            .send(bytes)
            .await
            .map_err(|_| unreachable("connection closed".into()))?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(PeerResponse::Error(e))) => Err(unreachable(format!("refused: {e}"))),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(unreachable(
                "the connection dropped before an answer".into(),
            )),
            Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
        }
    }

    async fn conn(&self, target: NodeId, lane: Lane) -> Result<Arc<PeerConn>, PeerError> {
        let slot = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((target, lane))
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref()
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
            PeerConn::connect(&addr, self.local_ip, &*self.transport)
                .await
                .map_err(|e| PeerError::Unreachable(target, format!("{addr}: {e}")))?,
        );
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Sends one request over the lane its kind goes by and waits for its answer, at most
    /// `timeout`.
    pub async fn call(
        &self,
        target: NodeId,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        self.call_on(Lane::of(&request), target, request, timeout)
            .await
    }

    /// Sends one request over `lane` (the answer comes back over it too) and waits for its
    /// answer, at most `timeout`.
    pub async fn call_on(
        &self,
        lane: Lane,
        target: NodeId,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        // The connect counts against the call's time too.
        let started = std::time::Instant::now();
        let conn = tokio::time::timeout(timeout, self.conn(target, lane))
            .await
            .map_err(|_| {
                PeerError::Unreachable(target, format!("could not connect within {timeout:?}"))
            })??;
        let timeout = timeout.saturating_sub(started.elapsed());
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
            // Not handled: safe to retry, like a request that never left.
            Ok(Ok(PeerResponse::Error(e))) if e.starts_with(PEER_BUSY) => {
                Err(PeerError::Unreachable(target, e))
            }
            Ok(Ok(PeerResponse::Error(e))) => Err(PeerError::Remote(target, e)),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(PeerError::Lost(target)),
            Err(_) => {
                conn.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                let silent = conn
                    .last_frame_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .elapsed();
                if silent > STALLED_AFTER {
                    conn.alive.store(false, Ordering::Release);
                }
                Err(PeerError::Timeout(target, timeout))
            }
        }
    }
}
