//! The Redis protocol front end (RESP2 and RESP3): frames in, typed requests to the router,
//! replies out. Pipelined writes are proposed back to back and answered in order; a read
//! waits for the writes sent before it on the same connection.

pub mod args;
pub mod command;
pub mod reply;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use firn_model::limits::RESP_FRAME_BYTES_MAX;
use firn_model::{
    Answer, CommitTs, FirnError, KvRead, KvRequest, ReadAt, ReadConsistency, Request, Response,
    WatchEvent,
};
use redis_protocol::resp2;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use self::args::Args;
use self::command::{Action, Render, parse, render};
use self::reply::Reply;
use crate::cluster::view::{ClusterView, ShardView};
use crate::router::{Pending, Router};
use crate::session::Session;

/// Most replies a connection holds before it writes them out (a bound on pipelining memory).
const PIPELINE_DEPTH_MAX: usize = 1_024;
/// Most live SCAN cursors a node remembers; the oldest is forgotten first.
const SCAN_CURSORS_MAX: usize = 65_536;

/// Redis SCAN cursors are integers; Firn pages by key. The table maps one to the other,
/// node-wide, so a client may continue a scan on any of its pooled connections.
#[derive(Default)]
struct CursorTable {
    next_id: u64,
    by_id: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
}

impl CursorTable {
    fn insert(&mut self, key: Bytes) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_id.insert(id, key);
        self.order.push_back(id);
        while self.order.len() > SCAN_CURSORS_MAX {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
        id
    }
}

/// What every connection of the node shares.
pub struct Shared {
    pub router: Arc<Router>,
    cursors: Mutex<CursorTable>,
    next_client_id: AtomicU64,
    connected: AtomicU64,
    started: Instant,
    resp_port: u16,
}

pub async fn serve(listener: TcpListener, router: Arc<Router>, mut stop: watch::Receiver<bool>) {
    let shared = Arc::new(Shared {
        router,
        cursors: Mutex::default(),
        next_client_id: AtomicU64::new(1),
        connected: AtomicU64::new(0),
        started: Instant::now(),
        resp_port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
    });
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let shared = shared.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        shared.connected.fetch_add(1, Ordering::Relaxed);
                        let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
                        let mut conn = Connection::new(stream, peer, id, shared.clone());
                        if let Err(e) = conn.run(stop).await {
                            tracing::debug!(%peer, "resp connection ended: {e}");
                        }
                        shared.connected.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(e) => tracing::warn!("resp accept: {e}"),
            },
            _ = stop.changed() => return,
        }
    }
}

/// One queued answer: ready, or a write still in flight.
enum Queued {
    Ready(Reply),
    Pending(Render, Pending),
}

struct Connection {
    stream: TcpStream,
    #[allow(dead_code)]
    peer: SocketAddr,
    id: u64,
    proto: u8,
    shared: Arc<Shared>,
    input: BytesMut,
    output: BytesMut,
    queue: VecDeque<Queued>,
    /// Consecutive reads not yet executed: they share one read-index barrier.
    reads: Vec<(KvRead, Render)>,
    /// The connection's session: its causality token (what it sends comes after what it
    /// was shown or given) and its name.
    session: Session,
    closing: bool,
}

/// One command as received: its upper-cased name and arguments.
type Frame = (String, VecDeque<Bytes>);

impl Connection {
    fn new(stream: TcpStream, peer: SocketAddr, id: u64, shared: Arc<Shared>) -> Self {
        let _ = stream.set_nodelay(true);
        Connection {
            stream,
            peer,
            id,
            proto: 2,
            shared,
            input: BytesMut::with_capacity(16 * 1024),
            output: BytesMut::with_capacity(16 * 1024),
            queue: VecDeque::new(),
            reads: Vec::new(),
            session: Session::default(),
            closing: false,
        }
    }

    async fn run(&mut self, mut stop: watch::Receiver<bool>) -> std::io::Result<()> {
        loop {
            while let Some(frame) = self.next_frame() {
                match frame {
                    Ok((name, items)) => self.handle(name, items).await?,
                    Err(reply) => {
                        self.flush_reads().await;
                        self.drain().await;
                        reply.encode(self.proto, &mut self.output);
                    }
                }
                if self.closing {
                    break;
                }
                if self.queue.len() + self.reads.len() >= PIPELINE_DEPTH_MAX {
                    self.flush_reads().await;
                    self.drain().await;
                }
            }
            self.flush_reads().await;
            self.drain().await;
            self.flush().await?;
            if self.closing {
                return Ok(());
            }
            if self.input.len() > RESP_FRAME_BYTES_MAX {
                let e = FirnError::BadArgument(format!(
                    "Protocol error: a request is larger than {RESP_FRAME_BYTES_MAX} bytes"
                ));
                Reply::error(&e).encode(self.proto, &mut self.output);
                self.flush().await?;
                return Ok(());
            }
            tokio::select! {
                n = self.stream.read_buf(&mut self.input) => {
                    if n? == 0 {
                        return Ok(());
                    }
                }
                _ = stop.changed() => return Ok(()),
            }
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.output.is_empty() {
            self.stream.write_all(&self.output).await?;
            self.output.clear();
        }
        Ok(())
    }

    /// Takes one complete command from the input, if there is one. A malformed frame yields
    /// an error reply and the unparseable input is dropped, so the connection can go on.
    fn next_frame(&mut self) -> Option<Result<Frame, Reply>> {
        // Empty lines between commands are skipped, as Redis does (`redis-cli --pipe` sends
        // one before its closing ECHO).
        while self.input.first().is_some_and(|b| *b != b'*') {
            match self.next_inline()? {
                Some(frame) => return Some(Ok(frame)),
                None => continue,
            }
        }
        if self.input.is_empty() {
            return None;
        }
        match resp2::decode::decode_bytes_mut(&mut self.input) {
            Ok(Some((frame, _, _))) => Some(frame_to_command(frame)),
            Ok(None) => None,
            Err(e) => {
                self.input.clear();
                Some(Err(Reply::Error(format!(
                    "ERR Protocol error: {}",
                    e.details().replace(['\r', '\n'], " ")
                ))))
            }
        }
    }

    /// Inline commands (`PING\r\n`, as typed into telnet): `None` while the line is
    /// incomplete, `Some(None)` for an empty line (consumed).
    fn next_inline(&mut self) -> Option<Option<Frame>> {
        let end = self.input.iter().position(|&b| b == b'\n')?;
        let line = self.input.split_to(end + 1);
        let text = String::from_utf8_lossy(&line);
        let mut words = text
            .split_whitespace()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()));
        let Some(name) = words.next() else {
            return Some(None);
        };
        Some(Some((
            String::from_utf8_lossy(&name).to_ascii_uppercase(),
            words.collect(),
        )))
    }

    /// The answer as the client sees it, once the connection's token has risen to it.
    fn saw(&mut self, result: Result<Answer, FirnError>) -> Result<Answer, FirnError> {
        self.session.saw_result(result)
    }

    /// Awaits every queued answer, in order, into the output buffer.
    async fn drain(&mut self) {
        while let Some(q) = self.queue.pop_front() {
            let reply = match q {
                Queued::Ready(r) => r,
                Queued::Pending(how, pending) => {
                    let result = self.saw(pending.await);
                    render(how, result.map(|a| a.response))
                }
            };
            reply.encode(self.proto, &mut self.output);
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
        let ctx = self.session.context();
        let results = self.shared.router.execute_reads(&ctx, reads).await;
        for (how, result) in renders.into_iter().zip(results) {
            let result = self.saw(result);
            // A local FIRN.GET says how far behind it may be.
            let stale = match (&how, &result) {
                (Render::FirnValue, Ok(a)) => a.staleness,
                _ => None,
            };
            let mut reply = render(how, result.map(|a| a.response));
            if let (Reply::Map(fields), Some(stale)) = (&mut reply, stale) {
                fields.push((
                    Reply::text("applied_through"),
                    Reply::text(stale.applied_through.to_string()),
                ));
                fields.push((
                    Reply::text("stale_at_most_us"),
                    Reply::Int(stale.at_most_us as i64),
                ));
            }
            self.queue.push_back(Queued::Ready(reply));
        }
    }

    fn has_pending_writes(&self) -> bool {
        self.queue.iter().any(|q| matches!(q, Queued::Pending(..)))
    }

    async fn handle(&mut self, name: String, items: VecDeque<Bytes>) -> std::io::Result<()> {
        let action = match parse(&name, Args::new(name.clone(), items)) {
            Ok(a) => a,
            Err(e) => {
                self.flush_reads().await;
                self.queue.push_back(Queued::Ready(Reply::error(&e)));
                return Ok(());
            }
        };
        if let Action::Execute(request, how) = action {
            match request {
                Request::Kv(KvRequest::Read(read)) => self.reads.push((read, how)),
                // Reads sent before this write must not see it.
                write => {
                    self.flush_reads().await;
                    let pending = self.session.submit(&self.shared.router, write).await;
                    self.queue.push_back(Queued::Pending(how, pending));
                }
            }
            return Ok(());
        }
        // Everything else answers in order after the reads before it.
        self.flush_reads().await;
        match action {
            Action::Execute(..) => unreachable!("handled above"),
            Action::Reply(r) => self.queue.push_back(Queued::Ready(r)),
            Action::RedisScan {
                cursor,
                pattern,
                count,
                type_filter,
            } => {
                self.drain().await;
                let reply = self.redis_scan(cursor, pattern, count, type_filter).await;
                self.queue.push_back(Queued::Ready(reply));
            }
            Action::Hello { proto, setname } => {
                if let Some(p) = proto {
                    self.proto = p;
                }
                if let Some(name) = setname {
                    self.session.set_name(name);
                }
                let reply = self.hello_reply();
                self.queue.push_back(Queued::Ready(reply));
            }
            Action::ClientSetName(n) => {
                self.session.set_name(n);
                self.queue.push_back(Queued::Ready(Reply::Ok));
            }
            Action::ClientGetName => {
                let r = self.session.name().cloned().map_or(Reply::Nil, Reply::Bulk);
                self.queue.push_back(Queued::Ready(r));
            }
            Action::ClientId => self
                .queue
                .push_back(Queued::Ready(Reply::Int(self.id as i64))),
            Action::Info(section) => {
                let r = Reply::Bulk(self.info(section.as_deref()).into());
                self.queue.push_back(Queued::Ready(r));
            }
            Action::Cluster(sub) => {
                let view = self.shared.router.cluster_view().await;
                let reply = cluster_reply(&sub, &view, self.shared.router.node_id());
                self.queue.push_back(Queued::Ready(reply));
            }
            Action::After(t) => {
                self.session.advance(t);
                self.queue.push_back(Queued::Ready(Reply::Ok));
            }
            Action::Token => {
                let t = self.session.token().unwrap_or(CommitTs::ZERO);
                self.queue
                    .push_back(Queued::Ready(Reply::text(t.to_string())));
            }
            Action::ClusterRemove(node) => {
                let reply = match self.shared.router.remove_node(node).await {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::error(&e),
                };
                self.queue.push_back(Queued::Ready(reply));
            }
            Action::Quit => {
                self.queue.push_back(Queued::Ready(Reply::Ok));
                self.closing = true;
            }
            Action::Unwatch => self
                .queue
                .push_back(Queued::Ready(Reply::Error("ERR not watching".into()))),
            Action::Watch(request) => {
                self.drain().await;
                match self.shared.router.watch(request.clone()).await {
                    Err(e) => self.queue.push_back(Queued::Ready(Reply::error(&e))),
                    Ok(mut stream) => {
                        let subject = match &request.target {
                            firn_model::KeyRange::Key(k) => k.bytes().clone(),
                            firn_model::KeyRange::Prefix(p) => p.clone(),
                        };
                        Reply::Push(vec![Reply::text("watching"), Reply::Bulk(subject)])
                            .encode(self.proto, &mut self.output);
                        self.flush().await?;
                        self.watch_loop(&mut stream).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Streams events until the client sends FIRN.UNWATCH or QUIT, or the watch ends.
    async fn watch_loop(&mut self, stream: &mut crate::watch::WatchStream) -> std::io::Result<()> {
        loop {
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(e)) => {
                        event_reply(&e).encode(self.proto, &mut self.output);
                        self.flush().await?;
                    }
                    Some(Err(e)) => {
                        Reply::error(&e).encode(self.proto, &mut self.output);
                        self.flush().await?;
                        return Ok(());
                    }
                    None => return Ok(()),
                },
                n = self.stream.read_buf(&mut self.input) => {
                    if n? == 0 {
                        self.closing = true;
                        return Ok(());
                    }
                    while let Some(frame) = self.next_frame() {
                        let reply = match frame {
                            Ok((name, _)) => match name.as_str() {
                                "FIRN.UNWATCH" => {
                                    Reply::Ok.encode(self.proto, &mut self.output);
                                    self.flush().await?;
                                    return Ok(());
                                }
                                "QUIT" => {
                                    self.closing = true;
                                    Reply::Ok.encode(self.proto, &mut self.output);
                                    self.flush().await?;
                                    return Ok(());
                                }
                                "PING" => Reply::Simple("PONG".into()),
                                _ => Reply::Error("ERR only FIRN.UNWATCH, PING and QUIT are allowed while watching".into()),
                            },
                            Err(r) => r,
                        };
                        reply.encode(self.proto, &mut self.output);
                    }
                    self.flush().await?;
                }
            }
        }
    }

    async fn redis_scan(
        &mut self,
        cursor: u64,
        pattern: Option<Bytes>,
        count: usize,
        type_filter: Option<String>,
    ) -> Reply {
        let after = if cursor == 0 {
            None
        } else {
            match self
                .shared
                .cursors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .by_id
                .get(&cursor)
            {
                Some(k) => Some(k.clone()),
                None => return Reply::error(&FirnError::BadArgument("invalid cursor".into())),
            }
        };
        if type_filter.as_deref().is_some_and(|t| t != "string") {
            return Reply::Array(vec![Reply::text("0"), Reply::Array(vec![])]);
        }
        let request = KvRead::Scan {
            prefix: Bytes::new(),
            cursor: after,
            limit: count.clamp(1, firn_model::limits::PAGE_ITEMS_MAX),
            pattern,
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        };
        match self
            .session
            .execute(&self.shared.router, request.into())
            .await
            .map(|a| a.response)
        {
            Ok(Response::Scan { keys, next_cursor }) => {
                let next = match next_cursor {
                    Some(k) => self
                        .shared
                        .cursors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(k),
                    None => 0,
                };
                Reply::Array(vec![
                    Reply::text(next.to_string()),
                    Reply::Array(
                        keys.into_iter()
                            .map(|(k, _)| Reply::Bulk(k.bytes().clone()))
                            .collect(),
                    ),
                ])
            }
            Ok(other) => Reply::error(&FirnError::Internal(format!("scan answered {other:?}"))),
            Err(e) => Reply::error(&e),
        }
    }

    fn hello_reply(&self) -> Reply {
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("redis")),
            (Reply::text("version"), Reply::text(REDIS_COMPAT_VERSION)),
            (Reply::text("proto"), Reply::Int(self.proto as i64)),
            (Reply::text("id"), Reply::Int(self.id as i64)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text("master")),
            (Reply::text("modules"), Reply::Array(vec![])),
            (
                Reply::text("firn_version"),
                Reply::text(env!("CARGO_PKG_VERSION")),
            ),
        ])
    }

    fn info(&self, section: Option<&str>) -> String {
        let router = &self.shared.router;
        let status = router.replicas().status();
        let shard = status.first();
        let mut sections: Vec<(&str, String)> = vec![
            (
                "server",
                format!(
                    "redis_version:{REDIS_COMPAT_VERSION}\r\nfirn_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n",
                    env!("CARGO_PKG_VERSION"),
                    std::process::id(),
                    self.shared.resp_port,
                    self.shared.started.elapsed().as_secs()
                ),
            ),
            ("clients", format!("connected_clients:{}\r\n", self.shared.connected.load(Ordering::Relaxed))),
            ("persistence", "aof_enabled:0\r\nfirn_durability:raft-log-fsync\r\n".to_string()),
            ("replication", "role:master\r\nconnected_slaves:0\r\n".to_string()),
            (
                "raft",
                shard.map_or(String::new(), |s| {
                    format!(
                        "shard:{}\r\nnode_id:{}\r\nraft_state:{}\r\nleader:{}\r\nterm:{}\r\nlast_log_index:{}\r\nlast_applied_index:{}\r\nsnapshot_index:{}\r\n",
                        s.shard_id,
                        s.node_id,
                        s.state,
                        s.leader.map_or("none".into(), |l| l.to_string()),
                        s.term,
                        s.last_log_index.unwrap_or(0),
                        s.last_applied_index.unwrap_or(0),
                        s.snapshot_index.unwrap_or(0)
                    )
                }),
            ),
            ("keyspace", format!("db0:keys={},expires=0,avg_ttl=0\r\n", router.replicas().live_keys())),
        ];
        if let Some(wanted) = section.filter(|s| !matches!(*s, "all" | "default" | "everything")) {
            sections.retain(|(name, _)| *name == wanted);
        }
        sections
            .into_iter()
            .map(|(name, body)| {
                let mut title = name.to_string();
                title[..1].make_ascii_uppercase();
                format!("# {title}\r\n{body}")
            })
            .collect::<Vec<_>>()
            .join("\r\n")
    }
}

/// The Redis version Firn answers to HELLO and INFO: clients use it to pick features.
const REDIS_COMPAT_VERSION: &str = "7.2.0";

fn frame_to_command(frame: resp2::types::BytesFrame) -> Result<Frame, Reply> {
    use resp2::types::BytesFrame as F;
    let F::Array(parts) = frame else {
        return Err(Reply::Error(
            "ERR Protocol error: expected an array of bulk strings".into(),
        ));
    };
    let mut items = VecDeque::with_capacity(parts.len());
    for part in parts {
        match part {
            F::BulkString(b) | F::SimpleString(b) => items.push_back(b),
            F::Integer(i) => items.push_back(Bytes::from(i.to_string())),
            _ => {
                return Err(Reply::Error(
                    "ERR Protocol error: command arguments must be bulk strings".into(),
                ));
            }
        }
    }
    let Some(name) = items.pop_front() else {
        return Err(Reply::Error("ERR Protocol error: empty command".into()));
    };
    Ok((String::from_utf8_lossy(&name).to_ascii_uppercase(), items))
}

/// A node id as Redis Cluster shows them: 40 hex digits.
fn cluster_node_id(id: u64) -> String {
    format!("{id:040x}")
}

/// (ip, port) of a node's RESP address.
fn ip_port(addr: &str) -> (String, i64) {
    match addr.rsplit_once(':') {
        Some((ip, port)) => (ip.to_string(), port.parse().unwrap_or(0)),
        None => (addr.to_string(), 0),
    }
}

/// CLUSTER SLOTS / SHARDS / NODES / INFO / MYID and FIRN.CLUSTER. Each shard's Raft leader
/// is its master, its other replicas are replicas, so cluster-aware clients send writes
/// straight to leaders; anything sent elsewhere is forwarded.
fn cluster_reply(sub: &str, view: &ClusterView, me: u64) -> Reply {
    let addr = |id: u64| {
        view.node(id)
            .filter(|n| n.up)
            .map(|n| ip_port(&n.resp_addr))
    };
    // Master first (the leader, or the first replica while none is known), then the others.
    let ordered = |s: &ShardView| -> Vec<u64> {
        let master = s.leader.unwrap_or(s.replicas[0]);
        std::iter::once(master)
            .chain(s.replicas.iter().copied().filter(move |r| *r != master))
            .collect()
    };
    match sub {
        "MYID" => Reply::text(cluster_node_id(me)),
        "SLOTS" => Reply::Array(
            view.shards
                .iter()
                .map(|s| {
                    let mut entry =
                        vec![Reply::Int(s.slots.0 as i64), Reply::Int(s.slots.1 as i64)];
                    for id in ordered(s) {
                        if let Some((ip, port)) = addr(id) {
                            entry.push(Reply::Array(vec![
                                Reply::text(ip),
                                Reply::Int(port),
                                Reply::text(cluster_node_id(id)),
                            ]));
                        }
                    }
                    Reply::Array(entry)
                })
                .collect(),
        ),
        "SHARDS" => Reply::Array(
            view.shards
                .iter()
                .map(|s| {
                    let nodes = ordered(s)
                        .into_iter()
                        .enumerate()
                        .map(|(i, id)| {
                            let (ip, port) = addr(id).unwrap_or_default();
                            Reply::Map(vec![
                                (Reply::text("id"), Reply::text(cluster_node_id(id))),
                                (Reply::text("port"), Reply::Int(port)),
                                (Reply::text("ip"), Reply::text(&ip)),
                                (Reply::text("endpoint"), Reply::text(&ip)),
                                (
                                    Reply::text("role"),
                                    Reply::text(if i == 0 { "master" } else { "replica" }),
                                ),
                                (Reply::text("replication-offset"), Reply::Int(0)),
                                (
                                    Reply::text("health"),
                                    Reply::text(if addr(id).is_some() {
                                        "online"
                                    } else {
                                        "failed"
                                    }),
                                ),
                            ])
                        })
                        .collect();
                    Reply::Map(vec![
                        (
                            Reply::text("slots"),
                            Reply::Array(vec![
                                Reply::Int(s.slots.0 as i64),
                                Reply::Int(s.slots.1 as i64),
                            ]),
                        ),
                        (Reply::text("nodes"), Reply::Array(nodes)),
                    ])
                })
                .collect(),
        ),
        "NODES" => {
            let lines: Vec<String> = view
                .nodes
                .iter()
                .map(|n| {
                    let (ip, port) = ip_port(&n.resp_addr);
                    let mut flags = String::new();
                    if n.node_id == me {
                        flags.push_str("myself,");
                    }
                    flags.push_str("master");
                    if !n.up {
                        flags.push_str(",fail");
                    }
                    let slots: Vec<String> = view
                        .shards
                        .iter()
                        .filter(|s| s.leader == Some(n.node_id))
                        .map(|s| format!("{}-{}", s.slots.0, s.slots.1))
                        .collect();
                    format!(
                        "{} {ip}:{port}@{port} {flags} - 0 0 0 {} {}",
                        cluster_node_id(n.node_id),
                        if n.up { "connected" } else { "disconnected" },
                        slots.join(" ")
                    )
                    .trim_end()
                    .to_string()
                })
                .collect();
            Reply::Bulk(Bytes::from(lines.join("\n") + "\n"))
        }
        "INFO" => {
            let up = view.nodes.iter().filter(|n| n.up).count();
            let led = view.shards.iter().filter(|s| s.leader.is_some()).count();
            let slots_ok: u32 = view
                .shards
                .iter()
                .filter(|s| s.leader.is_some())
                .map(|s| (s.slots.1 - s.slots.0) as u32 + 1)
                .sum();
            Reply::Bulk(Bytes::from(format!(
                "cluster_enabled:1\r\ncluster_state:{}\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:{slots_ok}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_nodes_up:{up}\r\ncluster_shards_with_leader:{led}\r\n",
                if view.healthy() { "ok" } else { "fail" },
                16384 - slots_ok,
                view.nodes.len(),
                view.shards.len(),
            )))
        }
        _ => Reply::Bulk(Bytes::from(
            serde_json::to_string_pretty(view).unwrap_or_default(),
        )),
    }
}

fn event_reply(e: &WatchEvent) -> Reply {
    Reply::Push(vec![
        Reply::text("firn.watch"),
        Reply::Bulk(e.key.bytes().clone()),
        Reply::Int(e.info.version as i64),
        Reply::text(e.info.commit_ts.to_string()),
        e.info
            .event_time_us
            .map_or(Reply::Nil, |t| Reply::Int(t as i64)),
        Reply::text(if e.info.deleted { "del" } else { "put" }),
        e.info.value.clone().map_or(Reply::Nil, Reply::Bulk),
    ])
}
