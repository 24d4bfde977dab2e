//! The ceiling of the consensus library: what openraft alone costs a write, with every other
//! part of a Firn write replaced by a no-op — the log kept in memory (no storage, no fsync),
//! a state machine that only answers, and peers called in the same process (no sockets, no
//! encoding). Clients propose small writes through `client_write` for a fixed time; it
//! prints writes a second, the process's CPU a write, and the latency of one.
//!
//! ```text
//! cargo run --release -p firn-raft --example ceiling -- [NODES] [CLIENTS] [SECONDS] [FSYNC_DIR]
//! ```
//!
//! With `FSYNC_DIR`, each node's log is also written to a file there, fsync'd by a thread
//! that shares one fsync among every append queued meanwhile: the ceiling with the one part
//! of a durable write no design avoids.
//!
//! With 1 node it is the single-node path (propose, append, commit, apply, answer); with 3,
//! each write is replicated to two followers as well. A Firn put pays this and its storage,
//! its fsyncs, its apply into the store and its front end on top.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::io::{self, Cursor};
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, TryStreamExt};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::storage::{EntryResponder, IOFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, Config, EntryPayload, OptionalSend, Raft, RaftLogReader, RaftNetworkV2,
    RaftSnapshotBuilder, SnapshotPolicy,
};

openraft::declare_raft_types!(
    pub Ceiling:
        D = u64,
        R = u64,
        NodeId = u64,
        Node = BasicNode,
);

type Entry = openraft::alias::EntryOf<Ceiling>;
type LogId = openraft::alias::LogIdOf<Ceiling>;
type Vote = openraft::alias::VoteOf<Ceiling>;
type StoredMembership = openraft::alias::StoredMembershipOf<Ceiling>;
type SnapshotMeta = openraft::alias::SnapshotMetaOf<Ceiling>;
type Snapshot = openraft::alias::SnapshotOf<Ceiling, Cursor<Vec<u8>>>;

/// The log, in memory; with a [`GroupCommit`], each append is also written to a file and
/// reported flushed after an fsync shared with every append queued meanwhile.
#[derive(Clone, Default)]
struct MemLog(Arc<Mutex<LogInner>>, Option<GroupCommit>);

/// One thread writing and fsyncing the appends queued while it synced the ones before
/// (Firn's log does the same, in its storage engine's journal).
#[derive(Clone)]
struct GroupCommit(std::sync::mpsc::Sender<(Vec<u8>, IOFlushed<Ceiling>)>);

impl GroupCommit {
    fn start(path: &std::path::Path) -> GroupCommit {
        use std::io::Write;
        let mut file = std::fs::File::create(path).expect("the log file is created");
        let (tx, rx) = std::sync::mpsc::channel::<(Vec<u8>, IOFlushed<Ceiling>)>();
        std::thread::spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut queued = vec![first];
                queued.extend(rx.try_iter());
                for (bytes, _) in &queued {
                    file.write_all(bytes).expect("the log is written");
                }
                file.sync_data().expect("the log is synced");
                for (_, callback) in queued {
                    callback.io_completed(Ok(()));
                }
            }
        });
        GroupCommit(tx)
    }
}

#[derive(Default)]
struct LogInner {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
}

impl MemLog {
    fn inner(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.0.lock().unwrap()
    }
}

impl RaftLogReader<Ceiling> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self
            .inner()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.inner().vote)
    }
}

impl RaftLogStorage<Ceiling> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<Ceiling>, io::Error> {
        let inner = self.inner();
        let last = inner.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.purged,
            last_log_id: last.or(inner.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.inner().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.inner().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.inner().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<Ceiling>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut bytes = Vec::new();
        {
            let mut inner = self.inner();
            for entry in entries {
                if self.1.is_some() {
                    bytes.extend_from_slice(&entry.log_id.index.to_le_bytes());
                    if let EntryPayload::Normal(v) = &entry.payload {
                        bytes.extend_from_slice(&v.to_le_bytes());
                    }
                }
                inner.entries.insert(entry.log_id.index, entry);
            }
        }
        match &self.1 {
            Some(commit) => commit
                .0
                .send((bytes, callback))
                .map_err(|_| io::Error::other("the fsync thread stopped"))?,
            None => callback.io_completed(Ok(())),
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        let from = last.map_or(0, |id| id.index + 1);
        self.inner().entries.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut inner = self.inner();
        inner.purged = Some(log_id);
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        Ok(())
    }
}

/// A state machine that applies nothing: each write is answered with its own value.
#[derive(Clone, Default)]
struct Noop(Arc<Mutex<(Option<LogId>, StoredMembership)>>);

impl RaftSnapshotBuilder<Ceiling> for Noop {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (applied, membership) = self.0.lock().unwrap().clone();
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: applied,
                last_membership: membership,
            },
            snapshot: Cursor::new(Vec::new()),
        })
    }
}

impl RaftStateMachine<Ceiling> for Noop {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok(self.0.lock().unwrap().clone())
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<Ceiling>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let answer = match entry.payload {
                EntryPayload::Normal(v) => v,
                EntryPayload::Membership(m) => {
                    self.0.lock().unwrap().1 = StoredMembership::new(Some(entry.log_id), m);
                    0
                }
                EntryPayload::Blank => 0,
            };
            self.0.lock().unwrap().0 = Some(entry.log_id);
            if let Some(r) = responder {
                r.send(answer);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        _snapshot: Cursor<Vec<u8>>,
    ) -> Result<(), io::Error> {
        *self.0.lock().unwrap() = (meta.last_log_id, meta.last_membership.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(None)
    }
}

/// The nodes of the group, by id, called directly.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<u64, Raft<Ceiling, Noop>>>>);

impl Peers {
    fn get(&self, id: u64) -> Result<Raft<Ceiling, Noop>, RPCError<Ceiling>> {
        self.0
            .lock()
            .unwrap()
            .get(&id)
            .cloned()
            .ok_or_else(|| RPCError::Unreachable(Unreachable::from_string(format!("node {id}"))))
    }
}

struct Client {
    peers: Peers,
    target: u64,
}

impl RaftNetworkFactory<Ceiling> for Peers {
    type Network = Client;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Self::Network {
        Client {
            peers: self.clone(),
            target,
        }
    }
}

fn unreachable(e: impl std::fmt::Display) -> RPCError<Ceiling> {
    RPCError::Unreachable(Unreachable::from_string(e.to_string()))
}

impl RaftNetworkV2<Ceiling> for Client {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Ceiling>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<Ceiling>, RPCError<Ceiling>> {
        self.peers
            .get(self.target)?
            .append_entries(rpc)
            .await
            .map_err(unreachable)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<Ceiling>,
        _option: RPCOption,
    ) -> Result<VoteResponse<Ceiling>, RPCError<Ceiling>> {
        self.peers
            .get(self.target)?
            .vote(rpc)
            .await
            .map_err(unreachable)
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<Ceiling>,
        _option: RPCOption,
    ) -> Result<TransferLeaderResponse<Ceiling>, RPCError<Ceiling>> {
        self.peers
            .get(self.target)?
            .handle_transfer_leader(rpc)
            .await
            .map_err(unreachable)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<Ceiling>, StreamingError<Ceiling>> {
        let raft = self.peers.get(self.target).map_err(StreamingError::from)?;
        raft.install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::from(unreachable(e)))
    }
}

/// CPU seconds this process has used (user and system), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let (nodes, clients, seconds) = (arg(1, 1).max(1), arg(2, 50).max(1), arg(3, 5).max(1));
    // A fourth argument, a folder: each node's log is also written there and fsync'd.
    let fsync_dir = std::env::args().nth(4).map(std::path::PathBuf::from);
    let config = Arc::new(
        Config {
            // Firn's intervals are 100 and 300–500 ms; longer here, so that a loaded
            // process does not lose its leader mid-run (nothing here measures failover).
            heartbeat_interval: 500,
            election_timeout_min: 3_000,
            election_timeout_max: 5_000,
            snapshot_policy: SnapshotPolicy::Never,
            ..Default::default()
        }
        .validate()
        .expect("a valid openraft config"),
    );
    let peers = Peers::default();
    let mut rafts = Vec::new();
    for id in 1..=nodes {
        let raft = Raft::new(
            id,
            config.clone(),
            peers.clone(),
            MemLog(
                Arc::default(),
                fsync_dir
                    .as_ref()
                    .map(|d| GroupCommit::start(&d.join(format!("log-{id}")))),
            ),
            Noop::default(),
        )
        .await
        .expect("openraft starts");
        peers.0.lock().unwrap().insert(id, raft.clone());
        rafts.push(raft);
    }
    let members: BTreeMap<u64, BasicNode> =
        (1..=nodes).map(|id| (id, BasicNode::default())).collect();
    rafts[0].initialize(members).await.expect("the group forms");
    let leader = rafts[0].clone();
    leader
        .wait(Some(Duration::from_secs(10)))
        .current_leader(1, "node 1 leads")
        .await
        .expect("node 1 is elected");
    // A leader takes writes once a quorum has acknowledged it (its lease).
    leader
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.last_quorum_acked.is_some(),
            "a quorum acknowledged the leader",
        )
        .await
        .expect("the leader's lease starts");

    // Warm up, then measure.
    for v in 0..1_000 {
        leader.client_write(v).await.expect("a write commits");
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let leader = leader.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut v = c << 32;
                while Instant::now() < until {
                    let sent = Instant::now();
                    let answer = leader.client_write(v).await.expect("a write commits");
                    assert_eq!(answer.response(), &v, "the no-op answers the write's value");
                    latencies.push(sent.elapsed());
                    v += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("a client ran"));
    }
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    latencies.sort();
    let n = latencies.len();
    let pct = |p: f64| latencies[((n as f64 * p) as usize).min(n - 1)].as_micros();
    println!(
        "openraft ceiling: {nodes} node(s), {clients} clients, {seconds} s, {}: {:.0} writes/s, \
         {:.1} µs CPU a write ({:.2} cores), p50 {} µs, p99 {} µs",
        match fsync_dir {
            Some(_) => "log fsync'd",
            None => "log in memory",
        },
        n as f64 / wall,
        cpu / n as f64 * 1e6,
        cpu / wall,
        pct(0.5),
        pct(0.99),
    );
    for raft in rafts {
        let _ = raft.shutdown().await;
    }
}
