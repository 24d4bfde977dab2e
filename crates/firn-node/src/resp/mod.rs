//! The Redis protocol front end (RESP2 and RESP3): frames in, typed requests to the router,
//! replies out. Pipelined writes are proposed back to back and answered in order; a read
//! waits for the writes sent before it on the same connection. Commands are one family to
//! a file under `cmd/`, listed once in `registry.rs`; this file owns the connections: their
//! limit, pipelining, sessions (causality tokens), watches and blocked log reads; their
//! publish/subscribe side is `subscribed.rs`. It never parses a command's arguments or shows
//! its answer.

pub mod args;
mod auth;
mod client;
pub mod cmd;
pub mod command;
pub mod frame;
pub mod registry;
pub mod reply;
mod subscribed;
mod transaction;
mod watching;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use firn_model::limits::RESP_FRAME_BYTES_MAX;
use firn_model::{FirnError, KvRead, KvRequest, Pipelining, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use self::client::Client;
use self::cmd::{cluster, firn_watch, server};
use self::command::{Action, Render};
use self::frame::Frame;
use self::reply::{Reply, answered};
use crate::router::Router;
use crate::session::Started;
use crate::tls::{ClientListener, ClientStream, ClientTls};

/// Most replies a connection holds before it writes them out (a bound on pipelining memory).
const PIPELINE_DEPTH_MAX: usize = 1_024;
/// Encoded replies a connection holds before it hands them to the kernel, however many
/// commands its pipeline still holds: with [`PIPELINE_DEPTH_MAX`] alone, 1,024 replies of
/// 1 MiB values waited in memory at once. A connection reads no more requests while its
/// replies wait, so a client that never reads costs the node at most this plus one reply
/// (and what the kernel's socket buffers hold), until [`Bounds::output_stall_max`] closes it.
pub const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;
/// Reads a connection sends in a row share one read barrier, up to [`PIPELINE_DEPTH_MAX`];
/// but a batch holds every value it read until it is written out, so a batch is sized to
/// answer about this many bytes: it starts at [`READS_BATCH_FIRST`] reads, doubles while
/// its answers are smaller, and shrinks in proportion when they are larger (1 read of a
/// 1 MiB value at a time, 1,024 of a small one).
const READS_BATCH_BYTES_TARGET: usize = 1 << 20;
/// A connection's first batch of reads, before it knows how large its answers are.
const READS_BATCH_FIRST: usize = 16;
/// Output buffer capacity kept after a large reply went out: beyond it the buffer is
/// given back, so that one large value does not stay allocated for an idle connection.
const OUTPUT_KEPT_BYTES_MAX: usize = 1 << 20;
/// What a connection reads into at a time, once it has input.
const INPUT_BUFFER_BYTES: usize = 16 * 1024;
/// A connection idle this long gives its input and output buffers back (an idle connection
/// holds none), and takes an input buffer again only once
/// the client sends something.
const BUFFERS_RELEASED_AFTER: Duration = Duration::from_secs(1);
/// How long a stopping node waits for its RESP connections to end. Each answers what it has
/// read and ends when it next waits for input (a watching one at once); one still waiting
/// for the router after this long is closed without its answers (a write in flight may
/// still commit: its client sees the connection drop, as with any lost answer).
pub const SHUTDOWN_CONNECTIONS_WAIT: Duration = Duration::from_secs(2);
/// Redis's words for a node at its connection limit; the connection is then closed.
const MAX_CLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";
/// How long a refused connection is kept to read why it was refused.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);
/// Most refused connections kept at once to read why; past it one is closed unanswered,
/// so a flood of connections costs the node at most this many tasks beyond its limit.
const REFUSALS_IN_FLIGHT_MAX: usize = 256;

/// The bounds on the node's RESP connections (`NodeConfig`).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Most connections open at once (`--max-connections`).
    pub connections_max: usize,
    /// Longest a connection may take none of its replies while some wait to go out
    /// (`--max-output-stall`); it is closed then.
    pub output_stall_max: Duration,
}

/// What every connection of the node shares.
pub struct Shared {
    pub router: Arc<Router>,
    next_client_id: AtomicU64,
    /// One permit per connection the node may hold (`NodeConfig::resp_connections_max`).
    slots: Arc<Semaphore>,
    connections_max: usize,
    output_stall_max: Duration,
    started: Instant,
    resp_port: u16,
    /// Connections waiting in a blocking command now (`BLOCK`, a service's wait): INFO's
    /// `blocked_clients`.
    blocked: AtomicU64,
    /// This run of the node, as INFO's `run_id` names it: 40 hex digits, new at each start.
    run_id: String,
}

impl Shared {
    /// Connections open now.
    fn connected(&self) -> usize {
        self.connections_max - self.slots.available_permits()
    }
}

/// A connection counted as blocked while it lives.
struct Blocked<'a>(&'a AtomicU64);

impl<'a> Blocked<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Blocked(count)
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// 40 hex digits from the clock and the process: a run's id, as Redis's `run_id` is.
fn new_run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(40);
    while out.len() < 40 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out.truncate(40);
    out
}

/// Accepts RESP connections until `stop`, at most `bounds.connections_max` at once, then
/// waits up to [`SHUTDOWN_CONNECTIONS_WAIT`] for them to end.
pub async fn serve(
    listener: TcpListener,
    router: Arc<Router>,
    mut stop: watch::Receiver<bool>,
    bounds: Bounds,
    tls: ClientTls,
) {
    let Bounds {
        connections_max,
        output_stall_max,
    } = bounds;
    let slots = Arc::new(Semaphore::new(connections_max));
    let shared = Arc::new(Shared {
        router,
        next_client_id: AtomicU64::new(1),
        slots: slots.clone(),
        connections_max,
        output_stall_max,
        started: Instant::now(),
        resp_port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
        blocked: AtomicU64::new(0),
        run_id: new_run_id(),
    });
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    // Connection tasks are kept so that shutdown can wait for them (and end stragglers).
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        connections.spawn(serve_connection(stream, peer, shared.clone(), tls.clone(), stop.clone(), slot));
                    }
                    Err(_) => {
                        // Counted rather than logged: a flood would flood the log.
                        metrics::counter!("firn_resp_connections_refused_total").increment(1);
                        tracing::debug!(%peer, "refusing a RESP connection: {connections_max} are open");
                        if let Ok(permit) = refusals.clone().try_acquire_owned() {
                            connections.spawn(refuse(stream, tls.clone(), permit));
                        }
                    }
                },
                Err(e) => tracing::warn!("resp accept: {e}"),
            },
            // Ended connections are reaped as they go, so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    let all_ended = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_CONNECTIONS_WAIT, all_ended)
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "closing RESP connections that did not end within {SHUTDOWN_CONNECTIONS_WAIT:?}"
        );
        connections.shutdown().await;
    }
}

/// One connection, holding its slot until it ends (from before its TLS handshake).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    tls: ClientTls,
    stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    // A stopping node does not wait for a client that has not sent its first byte.
    let mut stopping = stop.clone();
    let stream = tokio::select! {
        s = tls.accept(stream, ClientListener::Resp) => s,
        _ = stopping.changed() => None,
    };
    let Some(stream) = stream else { return };
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let mut conn = Connection::new(stream, peer, id, shared, stop);
    if let Err(e) = conn.run().await {
        tracing::debug!(%peer, "resp connection ended: {e}");
    }
}

/// Tells a connection over the limit why, and closes it: over TLS when the client speaks
/// it (as Redis does), so that a TLS client reads the error rather than a failed handshake.
/// The handshake, too, must fit in [`REFUSAL_WAIT`].
async fn refuse(stream: TcpStream, tls: ClientTls, _permit: OwnedSemaphorePermit) {
    let told = async {
        let Some(mut stream) = tls.accept(stream, ClientListener::Resp).await else {
            return Ok(());
        };
        stream.write_all(MAX_CLIENTS_REACHED).await?;
        stream.shutdown().await?;
        // Read what the client sent until it closes: closing with unread input would reset
        // the connection, and the client could lose the error before reading it.
        let mut sink = [0u8; 512];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_WAIT, told).await;
}

/// One queued answer: ready, or a write still in flight.
enum Queued {
    Ready(Reply),
    Pending(Render, Started),
}

struct Connection {
    stream: ClientStream,
    peer: SocketAddr,
    /// What the connection-local commands act on: id, protocol, session, closing.
    client: Client,
    shared: Arc<Shared>,
    input: BytesMut,
    output: BytesMut,
    /// Set when a write failed or stalled: later writes fail at once (`flush`).
    output_failed: Option<std::io::ErrorKind>,
    queue: VecDeque<Queued>,
    /// Consecutive reads not yet executed: they share one read-index barrier.
    reads: Vec<(KvRead, Render)>,
    /// Most reads in the next batch (see [`READS_BATCH_BYTES_TARGET`]).
    reads_max: usize,
    /// Its subscriptions, while it has any (`subscribed.rs`).
    subscriber: Option<crate::pubsub::Subscriber>,
    /// Set when the node stops: the connection ends when it next waits for input, or at
    /// once while watching.
    stop: watch::Receiver<bool>,
    /// The commands queued since MULTI (`transaction.rs`).
    multi: Option<transaction::Multi>,
    /// Keys WATCHed, each with the stamp of its newest version then.
    watched: Vec<(firn_model::Key, firn_model::CommitTs)>,
}

/// Reads more of the client's input. A connection whose input buffer was given back waits
/// until the client sends something before it takes one again.
async fn read_input(stream: &mut ClientStream, input: &mut BytesMut) -> std::io::Result<usize> {
    if input.capacity() == 0 {
        stream.readable().await?;
        input.reserve(INPUT_BUFFER_BYTES);
    }
    stream.read_buf(input).await
}

impl Connection {
    fn new(
        stream: ClientStream,
        peer: SocketAddr,
        id: u64,
        shared: Arc<Shared>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let _ = stream.set_nodelay(true);
        Connection {
            stream,
            peer,
            client: Client::new(id, shared.clone()),
            shared,
            input: BytesMut::new(),
            output: BytesMut::new(),
            output_failed: None,
            queue: VecDeque::new(),
            reads: Vec::new(),
            reads_max: READS_BATCH_FIRST,
            subscriber: None,
            stop,
            multi: None,
            watched: Vec::new(),
        }
    }

    async fn run(&mut self) -> std::io::Result<()> {
        loop {
            while let Some(frame) = self.next_frame() {
                match frame {
                    // Boxed, as `settle`'s work is: a command's future is large, and the
                    // connection's task would hold its size even while idle.
                    Ok((name, items)) => Box::pin(self.handle(name, items)).await?,
                    Err(reply) => {
                        self.settle().await;
                        reply.encode(self.client.proto, &mut self.output);
                    }
                }
                if self.client.closing {
                    break;
                }
                if self.queue.len() + self.reads.len() >= PIPELINE_DEPTH_MAX
                    || self.reads.len() >= self.reads_max
                {
                    self.settle().await;
                }
            }
            self.settle().await;
            self.flush().await?;
            if self.client.closing {
                return Ok(());
            }
            if self.input.len() > RESP_FRAME_BYTES_MAX {
                let e = FirnError::BadArgument(format!(
                    "Protocol error: a request is larger than {RESP_FRAME_BYTES_MAX} bytes"
                ));
                Reply::error(&e).encode(self.client.proto, &mut self.output);
                self.flush().await?;
                return Ok(());
            }
            let idle = self.input.is_empty() && self.output.is_empty();
            let holds = self.input.capacity() > 0 || self.output.capacity() > 0;
            tokio::select! {
                n = read_input(&mut self.stream, &mut self.input) => {
                    if n? == 0 {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep(BUFFERS_RELEASED_AFTER), if idle && holds => {
                    self.input = BytesMut::new();
                    self.output = BytesMut::new();
                }
                _ = self.stop.changed() => return Ok(()),
                d = subscribed::next_delivery(&mut self.subscriber) => {
                    cmd::subscribe::delivery_reply(d).encode(self.client.proto, &mut self.output);
                }
            }
        }
    }

    /// Writes out the replies encoded so far. A client that takes none of them for
    /// [`Bounds::output_stall_max`] is closed (`firn_resp_clients_closed_total`), as is one
    /// whose socket failed; the connection then ends at its next `flush`.
    async fn flush(&mut self) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        if let Some(kind) = self.output_failed {
            self.output.clear();
            return Err(Error::new(kind, "an earlier write to the client failed"));
        }
        let stall_max = self.shared.output_stall_max;
        while !self.output.is_empty() {
            let written = match tokio::time::timeout(stall_max, self.stream.write(&self.output))
                .await
            {
                Ok(Ok(0)) => Err(Error::new(ErrorKind::WriteZero, "the client closed")),
                Ok(written) => written,
                Err(_) => {
                    metrics::counter!("firn_resp_clients_closed_total", "reason" => "output_stalled")
                        .increment(1);
                    tracing::info!(
                        peer = %self.peer,
                        waiting_bytes = self.output.len(),
                        "closing a RESP connection that took none of its replies for {stall_max:?}"
                    );
                    Err(Error::new(
                        ErrorKind::TimedOut,
                        "the client read no replies",
                    ))
                }
            };
            match written {
                Ok(n) => bytes::Buf::advance(&mut self.output, n),
                Err(e) => {
                    self.output_failed = Some(e.kind());
                    self.client.closing = true;
                    self.output.clear();
                    return Err(e);
                }
            }
        }
        if self.output.capacity() > OUTPUT_KEPT_BYTES_MAX {
            self.output = BytesMut::new();
        }
        Ok(())
    }

    /// Takes one complete command from the input, if there is one (see [`frame`]).
    fn next_frame(&mut self) -> Option<Result<Frame, Reply>> {
        frame::next_command(&mut self.input)
    }

    /// Runs the buffered reads and awaits the queued answers ([`Self::flush_reads`],
    /// [`Self::drain`]), each boxed: their futures are large (several KiB), and a
    /// connection's task holds the size of the largest future it awaits directly even while
    /// it waits for input.
    async fn settle(&mut self) {
        if !self.reads.is_empty() {
            Box::pin(self.flush_reads()).await;
        }
        if !self.queue.is_empty() {
            Box::pin(self.drain()).await;
        }
    }

    /// Awaits every queued answer, in order, into the output buffer; past
    /// [`OUTPUT_FLUSH_BYTES`] the buffer goes out first (a failed write ends the connection
    /// at its next `flush`, which reports it).
    async fn drain(&mut self) {
        while let Some(q) = self.queue.pop_front() {
            let reply = match q {
                Queued::Ready(r) => r,
                Queued::Pending(how, started) => {
                    // Refused for now, a write is sent again unless later ones wait behind it.
                    let last = !self.has_pending_writes();
                    let result = started.answer(&self.shared.router, last).await;
                    how.show(self.client.session.take(&self.shared.router, result).await)
                }
            };
            reply.encode(self.client.proto, &mut self.output);
            if self.output.len() >= OUTPUT_FLUSH_BYTES {
                let _ = self.flush().await;
            }
        }
    }

    /// Executes the buffered reads after the writes queued before them, with one barrier.
    async fn flush_reads(&mut self) {
        if self.reads.is_empty() {
            return;
        }
        if self.has_pending_writes() {
            // A read sees the writes this connection sent before it.
            self.drain().await;
        }
        let (reads, renders): (Vec<KvRead>, Vec<Render>) = self.reads.drain(..).unzip();
        let ctx = self.client.session.context();
        let results = self.shared.router.kernel().execute_reads(&ctx, reads).await;
        let (count, mut bytes) = (renders.len(), 0);
        for (how, result) in renders.into_iter().zip(results) {
            let reply = how.show(self.client.session.take(&self.shared.router, result).await);
            bytes += reply.payload_bytes();
            self.queue.push_back(Queued::Ready(reply));
        }
        self.reads_max = if bytes <= READS_BATCH_BYTES_TARGET {
            (count * 2).max(self.reads_max)
        } else {
            count * READS_BATCH_BYTES_TARGET / bytes
        }
        .clamp(1, PIPELINE_DEPTH_MAX);
    }

    fn has_pending_writes(&self) -> bool {
        self.queue.iter().any(|q| matches!(q, Queued::Pending(..)))
    }

    async fn handle(&mut self, name: String, items: VecDeque<Bytes>) -> std::io::Result<()> {
        self.take_delivered();
        if let Some(reply) = self.instead_while_subscribed(&name, &items) {
            self.flush_reads().await;
            self.queue.push_back(Queued::Ready(reply));
            return Ok(());
        }
        let items = match self.queue_in_multi(&name, items) {
            Ok(Some(reply)) => {
                self.flush_reads().await;
                self.queue.push_back(Queued::Ready(reply));
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Err(items) => items,
        };
        let action =
            match registry::dispatch(&name, items).and_then(|a| self.allowed(&a).map(|()| a)) {
                Ok(a) => a,
                Err(e) => {
                    self.flush_reads().await;
                    self.queue.push_back(Queued::Ready(Reply::error(&e)));
                    return Ok(());
                }
            };
        if let Action::Execute(request, how) = action {
            let request = request.acting_as(self.client.session.principal().user_name());
            return self.execute(request, how).await;
        }
        if let Action::Once(key, action) = action {
            return self.once(key, *action).await;
        }
        // Everything else answers in order after the reads before it.
        self.flush_reads().await;
        self.act(action).await
    }

    /// A write (`Execute`, `EXEC`, `FIRN.TXN`) with an idempotency key: its calls carry it.
    async fn once(&mut self, key: firn_model::IdemKey, action: Action) -> std::io::Result<()> {
        self.client.session.with_once(key);
        let ran = match action {
            Action::Execute(request, how) => self.execute(request, how).await,
            Action::Transaction(command) => self.transaction(command).await,
            _ => {
                let refused = Reply::Error("ERR IDMP takes a write".into());
                self.queue.push_back(Queued::Ready(refused));
                Ok(())
            }
        };
        self.client.session.without_once();
        ran
    }

    /// A request for the router, run as it says it runs among its neighbours
    /// ([`Request::pipelining`]).
    async fn execute(&mut self, request: Request, how: Render) -> std::io::Result<()> {
        match (request.pipelining(), request) {
            (Pipelining::Batched, Request::Kv(KvRequest::Read(read))) => {
                self.reads.push((read, how))
            }
            (Pipelining::Blocking, request) => self.may_block(request, true, how).await?,
            (Pipelining::AfterWrites, request) => self.may_block(request, false, how).await?,
            // Reads sent before this write must not see it.
            (_, write) => {
                self.flush_reads().await;
                let pending = self.client.session.submit(&self.shared.router, write).await;
                self.queue.push_back(Queued::Pending(how, pending));
            }
        }
        Ok(())
    }

    /// What the connection does itself, or asks the router for beside a request.
    async fn act(&mut self, action: Action) -> std::io::Result<()> {
        let reply = match action {
            Action::Execute(request, how) => return self.execute(request, how).await,
            Action::Reply(r) => r,
            Action::Client(command) => command.apply(&mut self.client),
            Action::RedisScan(scan) => {
                self.drain().await;
                scan.run(&self.shared, &mut self.client.session).await
            }
            Action::Info(section) => {
                Reply::Bulk(server::info_text(&self.shared, section.as_deref()).into())
            }
            Action::Cluster(sub) => {
                let view = self.shared.router.kernel().cluster_view().await;
                cluster::cluster_reply(&sub, &view, self.shared.router.kernel().node_id())
            }
            Action::ClusterRemove(node) => {
                answered(self.shared.router.kernel().remove_node(node).await)
            }
            Action::PubSub(action) => {
                self.pubsub(action).await;
                return Ok(());
            }
            Action::Service(action) => return self.service(action).await,
            Action::Transaction(command) => return self.transaction(command).await,
            Action::Once(key, action) => return Box::pin(self.once(key, *action)).await,
            Action::Unwatch => Reply::Error("ERR not watching".into()),
            Action::Watch(request) => return self.watch(request).await,
        };
        self.queue.push_back(Queued::Ready(reply));
        Ok(())
    }

    /// A service call: it may wait long (a worker's BLOCK, a request's TIMEOUT), so the
    /// answers before it go first.
    async fn service(&mut self, action: cmd::service::ServiceAction) -> std::io::Result<()> {
        self.drain().await;
        self.flush().await?;
        let router = self.shared.router.clone();
        let ctx = self.client.session.context();
        let consumer = format!("{}-{}", router.kernel().node_id(), self.client.id);
        let run = cmd::service::run(&router, &ctx, action, consumer.into());
        let shared = self.shared.clone();
        let _blocked = Blocked::new(&shared.blocked);
        if let Some(reply) = self.unless_gone(run).await? {
            self.queue.push_back(Queued::Ready(reply));
        }
        Ok(())
    }

    /// FIRN.WATCH: the connection becomes the watch's, until it ends.
    async fn watch(&mut self, request: firn_model::WatchRequest) -> std::io::Result<()> {
        self.drain().await;
        match self.shared.router.watches().watch(request.clone()).await {
            Err(e) => self.queue.push_back(Queued::Ready(Reply::error(&e))),
            Ok(mut stream) => {
                firn_watch::watching_reply(&request).encode(self.client.proto, &mut self.output);
                self.flush().await?;
                self.watch_loop(&mut stream).await?;
            }
        }
        Ok(())
    }

    /// A log read (or XREADGROUP), after the writes this connection sent before it. One that
    /// may wait for records (`BLOCK`) first sends the answers before it, as Redis does, and gives up when
    /// the client goes away or the node stops — so a client gone during `BLOCK 0` holds no
    /// connection slot. Commands sent meanwhile are kept (up to a frame's bound) for after.
    async fn may_block(
        &mut self,
        request: Request,
        blocks: bool,
        how: Render,
    ) -> std::io::Result<()> {
        self.flush_reads().await;
        if self.has_pending_writes() {
            self.drain().await;
        }
        if !blocks {
            let pending = self
                .client
                .session
                .submit(&self.shared.router, request)
                .await;
            self.queue.push_back(Queued::Pending(how, pending));
            return Ok(());
        }
        self.drain().await;
        self.flush().await?;
        let router = self.shared.router.clone();
        let ctx = self.client.session.context();
        let shared = self.shared.clone();
        let _blocked = Blocked::new(&shared.blocked);
        if let Some(result) = self.unless_gone(router.execute(&ctx, request)).await? {
            let reply = how.show(self.client.session.take(&router, result).await);
            self.queue.push_back(Queued::Ready(reply));
        }
        Ok(())
    }

    /// Awaits `work`, or drops it when the client goes away or the node stops (`None`;
    /// the connection then closes). Commands sent meanwhile are kept (up to a frame's bound).
    async fn unless_gone<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> std::io::Result<Option<T>> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => return Ok(Some(result)),
                _ = self.stop.changed() => {
                    self.client.closing = true;
                    return Ok(None);
                }
                n = self.stream.read_buf(&mut self.input), if self.input.len() <= RESP_FRAME_BYTES_MAX => {
                    if n? == 0 {
                        self.client.closing = true;
                        return Ok(None);
                    }
                }
            }
        }
    }
}
