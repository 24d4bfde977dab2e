//! The calling side of the peer transport: a node's connections to its peers, one per
//! peer and [`Lane`], made on first use and remade after a failure, with the calls in
//! flight on each.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::clock::{ClockOffset, ClockOffsets};
use super::counts;
use super::{
    CONNECT_TIMEOUT, Envelope, PEER_BUSY, PEER_SEND_QUEUE, PeerError, PeerRequest, PeerResponse,
    STALLED_AFTER, codec, encode,
};
use crate::transport::{PeerTransport, PlainTcp};
use crate::types::NodeId;

/// Most appends of one stream a node may keep sent and not yet answered
/// (`--appends-in-flight`): each carries every entry submitted since the one before, so a
/// few cover a round trip at any rate; the bound keeps a follower's queue
/// (`FOLLOWER_QUEUE_MAX`) from ever filling.
pub const APPENDS_IN_FLIGHT_MAX: usize = 32;

/// What a call waiting on a connection hears: the peer's answer, or that its request never
/// left (the connection ended with the request still queued), which makes the call safe to
/// retry. A call whose request did leave and that hears nothing is lost: the peer may have
/// handled it.
enum Heard {
    /// The answer, and the peer's wall clock when it sent it.
    Answer(PeerResponse, u64),
    NotSent,
}

/// The TCP socket under a connection (under TLS, if any), to ask the kernel whether the
/// peer has closed it: its FIN arrives before the reader task gets to run and see it.
#[derive(Clone, Copy)]
struct PeerSocket(#[cfg(target_os = "linux")] std::os::fd::RawFd);

impl PeerSocket {
    fn of(stream: &tokio::net::TcpStream) -> Self {
        #[cfg(target_os = "linux")]
        return PeerSocket(std::os::fd::AsRawFd::as_raw_fd(stream));
        #[cfg(not(target_os = "linux"))]
        return PeerSocket();
    }

    /// Whether the peer has closed its end: the socket is in `CLOSE_WAIT` (its FIN came) or
    /// `CLOSE` (reset). A peer closes a connection only whole (`serve_connection` drops it;
    /// it never shuts down one direction), so a request written after that is never read.
    /// Asked only while the connection's writer holds the socket open.
    fn peer_closed(self) -> bool {
        #[cfg(target_os = "linux")]
        {
            // linux/tcp_states.h
            const TCP_CLOSE: u8 = 7;
            const TCP_CLOSE_WAIT: u8 = 8;
            // SAFETY: `tcp_info` is plain integers, valid zeroed; `getsockopt` writes at
            // most `len` bytes into it. The descriptor is the connection's socket, open for
            // as long as the writer task asking holds its half of the stream.
            let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let rc = unsafe {
                libc::getsockopt(
                    self.0,
                    libc::IPPROTO_TCP,
                    libc::TCP_INFO,
                    (&mut info as *mut libc::tcp_info).cast(),
                    &mut len,
                )
            };
            rc == 0 && matches!(info.tcpi_state, TCP_CLOSE | TCP_CLOSE_WAIT)
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

/// The calls waiting on a connection, by id.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Heard>>>>;

/// One outgoing connection with its calls in flight.
struct PeerConn {
    /// Requests to write, with their calls' ids.
    tx: mpsc::Sender<(u64, Bytes)>,
    pending: Waiting,
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
            let socket = PeerSocket::of(&stream);
            Ok((transport.connect(stream, addr).await?, socket))
        };
        let (stream, socket) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        let (mut sink, mut frames) = Framed::new(stream, codec()).split();
        let (tx, mut rx) = mpsc::channel::<(u64, Bytes)>(PEER_SEND_QUEUE);
        let pending: Waiting = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        // Cancelled when either half stops (a failed write, the connection no longer used, the
        // peer gone): the other half then stops too, so the calls waiting on it fail at once,
        // and the socket closes, which ends the peer's end of it.
        let ended = CancellationToken::new();
        let (writer_pending, writer_alive, writer_ended) =
            (pending.clone(), alive.clone(), ended.clone());
        // Dropped when the writer has told the calls whose requests never left.
        let (writer_running, writer_stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            // A request taken from the queue that never left, if any.
            let mut unsent = None;
            loop {
                let next = tokio::select! {
                    biased;
                    _ = writer_ended.cancelled() => None,
                    next = rx.recv() => next,
                };
                let Some((id, frame)) = next else { break };
                // The peer closed the connection before this request left: it is never read
                // there, so its call may be retried (a peer that died a moment ago, its
                // close not yet seen by the reader below, is not a lost call).
                if socket.peer_closed() {
                    unsent = Some(id);
                    break;
                }
                // A write cut short may have left part of the request, or all of it: its
                // call is lost, not unsent.
                let written = tokio::select! {
                    written = sink.send(frame) => written.is_ok(),
                    _ = writer_ended.cancelled() => false,
                };
                if !written {
                    break;
                }
            }
            writer_alive.store(false, Ordering::Release);
            writer_ended.cancel();
            rx.close();
            let queued = std::iter::from_fn(|| rx.try_recv().ok().map(|(id, _)| id));
            for id in unsent.into_iter().chain(queued) {
                let waiter = writer_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Heard::NotSent);
                }
            }
            drop(writer_running);
        });
        let (reader_pending, reader_alive) = (pending.clone(), alive.clone());
        let last_frame_at = Arc::new(Mutex::new(std::time::Instant::now()));
        let reader_last = last_frame_at.clone();
        tokio::spawn(async move {
            loop {
                let frame = tokio::select! {
                    frame = frames.next() => frame,
                    _ = ended.cancelled() => None,
                };
                let Some(Ok(frame)) = frame else { break };
                *reader_last.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
                let Some((id, body, wall_us)) = super::read_response(&frame) else {
                    break;
                };
                if let Some(waiter) = reader_pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id)
                {
                    let _ = waiter.send(Heard::Answer(body, wall_us));
                }
            }
            reader_alive.store(false, Ordering::Release);
            ended.cancel();
            // Once the writer has told the calls whose requests never left, every call still
            // waiting learns its request was lost.
            let _ = writer_stopped.await;
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
    /// Appends of one replication stream sent before their answers (see `crate::pipeline`).
    appends_in_flight: usize,
    /// Each peer's clock offset, measured on the answers to this node's calls.
    offsets: Arc<ClockOffsets>,
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
            appends_in_flight: 1,
            offsets: Arc::default(),
        }
    }

    /// The pool with up to `n` appends of a replication stream sent before their answers
    /// (1, the default: each waits for the answer to the one before), within
    /// 1..=[`APPENDS_IN_FLIGHT_MAX`].
    pub fn with_appends_in_flight(self, n: usize) -> Self {
        PeerPool {
            appends_in_flight: n.clamp(1, APPENDS_IN_FLIGHT_MAX),
            ..self
        }
    }

    /// Each peer's clock offset from this node's, as the answers to its calls measure it.
    pub fn clock_offsets(&self) -> Vec<(NodeId, ClockOffset)> {
        self.offsets.estimates()
    }

    /// How many appends of a replication stream go out before their answers.
    pub fn appends_in_flight(&self) -> usize {
        self.appends_in_flight
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
        let bytes = encode(&Envelope::new(1, request))
            .ok_or_else(|| unreachable("request could not be encoded".into()))?;
        let (done, answer) = oneshot::channel();
        conn.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(1, done);
        conn.tx
            .send((1, bytes))
            .await
            .map_err(|_| unreachable("connection closed".into()))?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(Heard::Answer(PeerResponse::Error(e), _))) => {
                Err(unreachable(format!("refused: {e}")))
            }
            Ok(Ok(Heard::Answer(response, _))) => Ok(response),
            Ok(Ok(Heard::NotSent)) => Err(unreachable("connection closed".into())),
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
        counts::connected(target, lane);
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
        self.send_on(lane, target, request, timeout)
            .await?
            .answer()
            .await
    }

    /// Queues one request on `lane`'s connection to `target` and returns without waiting for
    /// its answer: requests sent one after the other reach the peer in that order. The
    /// answer is due within `timeout` of this call (the connect counts too).
    pub async fn send_on(
        &self,
        lane: Lane,
        target: NodeId,
        request: PeerRequest,
        timeout: Duration,
    ) -> Result<SentCall, PeerError> {
        let sent = async {
            let deadline = tokio::time::Instant::now() + timeout;
            let conn = tokio::time::timeout_at(deadline, self.conn(target, lane))
                .await
                .map_err(|_| {
                    let why = format!("could not connect within {timeout:?}");
                    PeerError::Unreachable(target, why)
                })??;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let bytes = encode(&Envelope::new(id, request)).ok_or_else(|| {
                PeerError::Unreachable(target, "request could not be encoded".into())
            })?;
            let (done, answer) = oneshot::channel();
            conn.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, done);
            let (sent_wall_us, sent_at) =
                (firn_model::hlc::system_wall_us(), std::time::Instant::now());
            let sent_steps = firn_model::hlc::wall::steps();
            if conn.tx.send((id, bytes)).await.is_err() {
                conn.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                return Err(PeerError::Unreachable(target, "connection closed".into()));
            }
            Ok(SentCall {
                target,
                conn,
                id,
                answer,
                deadline,
                timeout,
                sent: ((sent_wall_us, sent_steps), sent_at, self.offsets.clone()),
            })
        };
        counts::counted(target, sent.await)
    }
}

/// A request on its way to a peer ([`PeerPool::send_on`]), its answer still to come.
pub struct SentCall {
    target: NodeId,
    conn: Arc<PeerConn>,
    id: u64,
    answer: oneshot::Receiver<Heard>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    /// When it was sent, by this node's wall clock (and the steps that clock had taken) and
    /// by the monotonic one, and where the clock offset its answer measures goes.
    sent: ((u64, u64), std::time::Instant, Arc<ClockOffsets>),
}

impl SentCall {
    /// The peer's answer, or why there is none by the call's deadline.
    pub async fn answer(self) -> Result<PeerResponse, PeerError> {
        let target = self.target;
        counts::counted(target, self.wait().await)
    }

    async fn wait(self) -> Result<PeerResponse, PeerError> {
        let (target, conn, id, timeout) = (self.target, self.conn, self.id, self.timeout);
        let heard = tokio::time::timeout_at(self.deadline, self.answer).await;
        if let Ok(Ok(Heard::Answer(_, peer_wall_us))) = &heard {
            let (sent, sent_at, offsets) = self.sent;
            offsets.record(target, sent, sent_at.elapsed(), *peer_wall_us);
        }
        match heard {
            // Not handled: safe to retry, like a request that never left.
            Ok(Ok(Heard::Answer(PeerResponse::Error(e), _))) if e.starts_with(PEER_BUSY) => {
                let why = e[PEER_BUSY.len()..].trim_start_matches(':').trim_start();
                Err(PeerError::Busy(target, why.to_string()))
            }
            Ok(Ok(Heard::Answer(PeerResponse::Error(e), _))) => Err(PeerError::Remote(target, e)),
            Ok(Ok(Heard::Answer(response, _))) => Ok(response),
            Ok(Ok(Heard::NotSent)) => Err(PeerError::Unreachable(
                target,
                "the connection closed before the request was sent".into(),
            )),
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
