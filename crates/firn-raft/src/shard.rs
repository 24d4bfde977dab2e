//! One replica of one shard: an openraft group over the fjall log and the versioned store.

use firn_store::SystemOp;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use firn_model::{Durability, FirnError, HybridClock, Response};
use firn_store::{Command, Op, StorageBackend, VersionedStore};
use fjall::Database;
use openraft::Instant as _;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, InitializeError, LinearizableReadError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::{BasicNode, ChangeMembers, Config, Raft, ReadPolicy, SnapshotPolicy};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::closer::{ClosePolicy, Demand};
use crate::log_store::{FjallLogStore, Flush};
use crate::network::PeerNetwork;
use crate::peer::{LocalGroups, PeerPool};
use crate::stages::{self, STAGES};
use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, LogCommand, NodeId, ShardId};

mod leadership;
pub use leadership::leader_named;
mod recovery;
mod refused;
use refused::write_refused;

/// A leader refuses writes when a majority has not acknowledged it for this long: longer
/// than the largest election timeout, so a new leader may exist elsewhere.
const QUORUM_ACK_STALE: Duration = Duration::from_millis(1_000);
/// Longest a proposer waits for its write to commit before answering UNCERTAIN.
const COMMIT_WAIT: Duration = Duration::from_secs(10);

/// Longest a membership change (a learner catching up, a joint change) may take.
const MEMBERSHIP_WAIT: Duration = Duration::from_secs(60);

/// Longest a new replica waits to elect itself before reporting that it cannot serve.
const ELECTION_WAIT: Duration = Duration::from_secs(30);

/// The longest election timeout, which is also openraft's leader lease: a follower that
/// heard from its leader within it refuses to vote for another.
pub(crate) const ELECTION_TIMEOUT_MAX_MS: u64 = 600;

pub struct ShardConfig {
    pub shard_id: ShardId,
    pub node_id: NodeId,
    /// The address peers use to reach this node.
    pub node_addr: String,
    /// The database holding this replica's log (shared by the node's groups of its
    /// durability).
    pub db: Database,
    /// The state machine's storage.
    pub backend: Arc<dyn StorageBackend>,
    /// When an append counts as flushed: after the node's group-commit fsync (`disk`), or
    /// once in memory (`memory`, fsync'd by the next checkpoint).
    pub flush: Flush,
    /// Where the replica keeps its latest snapshot.
    pub snapshot_dir: PathBuf,
    /// Build a snapshot (and purge the log before it) every this many entries.
    pub snapshot_every_entries: u64,
    /// Entries the purge leaves behind each snapshot, so that a follower at most this far
    /// behind catches up from the log rather than by a snapshot transfer.
    pub snapshot_catchup_entries: u64,
    /// How this replica, when it leads a shard without writes, closes time
    /// (`SystemOp::CloseTime` entries; see [`crate::closer`]). `None`: never (the meta group, or
    /// closing turned off).
    pub closing: Option<ClosePolicy>,
    /// The group's initial members (node id → peer address).
    pub members: BTreeMap<NodeId, BasicNode>,
    /// Whether this node forms the group with `members` (exactly one member does, once;
    /// a replica added later joins as a learner instead).
    pub initialize: bool,
    /// Connections to the other nodes.
    pub pool: Arc<PeerPool>,
    /// Where incoming Raft messages find this replica.
    pub groups: LocalGroups,
}

/// The outcome of a proposed write, resolved once it is durable and applied.
pub type ProposalOutcome = Pin<Box<dyn Future<Output = Result<Response, FirnError>> + Send>>;

/// What `/v1/cluster`, INFO and metrics report about a replica.
#[derive(Clone, Debug, Serialize)]
pub struct ShardStatus {
    pub shard_id: ShardId,
    pub node_id: NodeId,
    pub state: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    pub durability: Durability,
    /// A memory replica catching up after a restart (it votes for nobody meanwhile).
    pub recovering: bool,
}

pub struct ShardReplica {
    shard_id: ShardId,
    pub(crate) node_id: NodeId,
    pub(crate) raft: Raft<FirnRaft, ShardStateMachine>,
    store: Arc<VersionedStore>,
    pub(crate) clock: Arc<HybridClock>,
    read_rounds: Arc<Mutex<ReadRounds>>,
    closer: Option<tokio::task::JoinHandle<()>>,
    /// How the closer closes time (`None`: it does not).
    close_policy: Option<ClosePolicy>,
    /// When closed time was last wanted here, and asked for.
    demand: Arc<Demand>,
    /// Held while a [`close_through`](Self::close_through) entry is in flight.
    closing: tokio::sync::Mutex<()>,
    durability: Durability,
    /// A memory replica restarted: it may have lost entries it acknowledged from memory, so
    /// it refuses votes and does not stand for election until it has caught up (see
    /// [`recovered`](Self::recovered)).
    recovering: Arc<AtomicBool>,
    /// Set when the replica ended its recovery by the majority count (see
    /// [`recovered_by_count`](Self::recovered_by_count)) and cleared once it has seen a
    /// leader elected after its restart: meanwhile it still counts as restarted for the
    /// group's other recovering replicas.
    counted_out: AtomicBool,
    /// The term of the vote the replica found stored when it opened: a leader of a later
    /// term was elected after the restart.
    opened_in_term: u64,
}

/// Most linearizable reads waiting for the next ReadIndex round of a replica, and so the
/// most one round answers. A read arriving when that many wait is answered TryAgain at once
/// (the client retries, maybe elsewhere) rather than joining a queue that grows while a
/// round is stuck (no quorum, a slow apply). A waiting read costs a oneshot channel; 16,384
/// is well above what our benchmarks reach (64 connections pipelining 100 is 6,400).
pub const READ_ROUND_WAITERS_MAX: usize = 16_384;

/// Linearizable reads waiting for a ReadIndex round. One round runs at a time; the reads
/// that arrive while it runs wait for the next, which starts after they did and so covers
/// them all. Hundreds of concurrent reads then cost one leadership confirmation per round
/// trip instead of one each. At most [`READ_ROUND_WAITERS_MAX`] wait.
#[derive(Default)]
struct ReadRounds {
    waiting: Vec<oneshot::Sender<Result<(), FirnError>>>,
    running: bool,
}

impl ReadRounds {
    fn lock(rounds: &Mutex<ReadRounds>) -> std::sync::MutexGuard<'_, ReadRounds> {
        rounds.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs ReadIndex rounds while reads wait for one.
async fn run_read_rounds(
    raft: Raft<FirnRaft, ShardStateMachine>,
    shard_id: ShardId,
    rounds: Arc<Mutex<ReadRounds>>,
) {
    loop {
        let waiting = {
            let mut r = ReadRounds::lock(&rounds);
            if r.waiting.is_empty() {
                r.running = false;
                return;
            }
            std::mem::take(&mut r.waiting)
        };
        let result = raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|e| read_index_error(shard_id, e));
        for read in waiting {
            // A reader that gave up is not waiting any more.
            let _ = read.send(result.clone());
        }
    }
}

/// A failed ReadIndex: TRYAGAIN where the leader is elsewhere (the caller asks it), else the
/// shard is unavailable.
fn read_index_error(
    shard_id: ShardId,
    e: RaftError<FirnRaft, LinearizableReadError<FirnRaft>>,
) -> FirnError {
    match e {
        RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => {
            FirnError::TryAgain(format!(
                "this replica is not the leader of shard {shard_id} ({})",
                leader_named(f.leader_id)
            ))
        }
        e => unavailable(e),
    }
}

fn unavailable(e: impl std::fmt::Display) -> FirnError {
    FirnError::Unavailable(format!("shard unavailable: {e}"))
}

impl ShardReplica {
    /// Opens the replica, recovering its log and state, and — for a fresh single node —
    /// forms a group of one and waits until it leads.
    pub async fn open(cfg: ShardConfig, clock: Arc<HybridClock>) -> Result<Self, FirnError> {
        let durability = match cfg.flush {
            Flush::Fsync(_) => Durability::Disk,
            Flush::Memory(_) => Durability::Memory,
        };
        let store = Arc::new(VersionedStore::open_in_lane(
            cfg.backend.clone(),
            durability,
        )?);
        // Stamps after a restart stay above every stamp already applied.
        clock.observe(store.applied_ts());
        let group = crate::types::group_name(cfg.shard_id);
        let mut log = FjallLogStore::open(cfg.db.clone(), &group, cfg.flush.clone())
            .map_err(|e| FirnError::Internal(format!("opening the raft log: {e}")))?;
        // A memory replica that has voted before is restarting: what it held only in memory
        // may be gone.
        let restarted = openraft::RaftLogReader::read_vote(&mut log)
            .await
            .map_err(|e| FirnError::Internal(format!("reading the raft vote: {e}")))?
            .is_some();
        let recovering = Arc::new(AtomicBool::new(
            durability == Durability::Memory && restarted,
        ));
        std::fs::create_dir_all(&cfg.snapshot_dir)
            .map_err(|e| FirnError::Internal(e.to_string()))?;
        let sm = ShardStateMachine::new(
            store.clone(),
            cfg.snapshot_dir.join(format!("{group}.snapshot")),
        );
        let config = Config {
            cluster_name: format!("firn-{group}"),
            heartbeat_interval: 100,
            election_timeout_min: 300,
            election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_every_entries),
            max_in_snapshot_log_to_keep: cfg.snapshot_catchup_entries,
            // A memory replica's log may come back shorter than it acknowledged: its leader
            // then searches for the match again instead of treating it as corruption.
            allow_log_reversion: Some(durability == Durability::Memory),
            // A restarted leader must win an election rather than resume, whatever the
            // durability. Applying does not fsync the state, and the commit position is
            // stored lazily (`FjallLogStore::save_committed`): a leader that resumed would
            // serve reads (under a lease its followers still honoured) from a state behind
            // writes it had acknowledged before the crash — openraft's documented hazard,
            // and a stale read `tests/linearizability.rs` caught under leader kills. An
            // election makes the leader commit an entry of its new term first, and reads
            // wait for it.
            enable_leader_restore: Some(false),
            ..Default::default()
        }
        .validate()
        .map_err(|e| FirnError::Internal(format!("raft config: {e}")))?;
        let network = PeerNetwork::new(cfg.node_id, cfg.shard_id, cfg.pool.clone());
        let raft = Raft::new(cfg.node_id, Arc::new(config), network, log, sm)
            .await
            .map_err(unavailable)?;
        if recovering.load(Ordering::Acquire) {
            // Asked of the core itself: the metrics' copy may not hold the stored
            // membership yet.
            let voters: Vec<NodeId> = raft
                .with_raft_state(|st| st.membership_state.effective().voter_ids().collect())
                .await
                .map_err(unavailable)?;
            if voters == [cfg.node_id] {
                // A group of one has nobody to catch up from: it goes on from its disk.
                recovering.store(false, Ordering::Release);
            } else {
                raft.runtime_config().elect(false);
                tracing::info!(
                    shard = cfg.shard_id,
                    "memory replica restarted: recovering before it votes"
                );
            }
        }
        // Reachable by peers before anyone can send it a vote or entries.
        cfg.groups
            .insert(cfg.shard_id, raft.clone(), recovering.clone());
        let mut alone = false;
        if cfg.initialize {
            let mut members = cfg.members.clone();
            members.entry(cfg.node_id).or_insert_with(|| BasicNode {
                addr: cfg.node_addr.clone(),
            });
            alone = members.len() == 1;
            match raft.initialize(members).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(unavailable(e)),
            }
        }
        // A group of one (a single node) serves as soon as it has elected itself.
        if alone || raft.voter_ids().collect::<Vec<_>>() == [cfg.node_id] {
            raft.wait(Some(ELECTION_WAIT))
                .current_leader(cfg.node_id, "a single node elects itself")
                .await
                .map_err(unavailable)?;
        }
        let opened_in_term = raft.metrics().borrow_watched().current_term;
        let demand = Arc::new(Demand::default());
        let closer = cfg.closing.clone().map(|policy| {
            tokio::spawn(crate::closer::run(
                raft.clone(),
                cfg.node_id,
                store.clone(),
                clock.clone(),
                policy,
                demand.clone(),
            ))
        });
        Ok(ShardReplica {
            shard_id: cfg.shard_id,
            node_id: cfg.node_id,
            raft,
            store,
            clock,
            read_rounds: Arc::default(),
            closer,
            close_policy: cfg.closing,
            demand,
            closing: tokio::sync::Mutex::new(()),
            durability,
            recovering,
            counted_out: AtomicBool::new(false),
            opened_in_term,
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    pub fn shard_id(&self) -> ShardId {
        self.shard_id
    }

    /// Makes this replica's later stamps exceed `ts` (a causality token a client brought).
    pub fn observe(&self, ts: firn_model::CommitTs) {
        self.clock.observe(ts);
    }

    pub fn store(&self) -> &Arc<VersionedStore> {
        &self.store
    }

    /// Closes time through `t` here now rather than waiting for the closer or a write: on
    /// the leader, a `CloseTime` entry stamped above `t` (one at a time; a caller that finds
    /// `t` closed meanwhile proposes nothing). Returns once this replica has applied it. A
    /// follower does nothing (the caller waits for time to close). Either way the closer
    /// then closes every interval for a while ([`crate::closer::DEMAND_HOLDS`]).
    pub async fn close_through(&self, t: firn_model::CommitTs) -> Result<(), FirnError> {
        if self.leader() != Some(self.node_id) {
            return Ok(());
        }
        self.demand.want(firn_model::hlc::system_wall_us());
        let _one = self.closing.lock().await;
        if self.store.last_commit_ts() >= t {
            return Ok(());
        }
        self.clock.observe(t);
        self.write(Op::System(SystemOp::CloseTime))
            .await
            .map(|_| ())
    }

    /// Whether a reader here that waits for time to close should ask the shard's leader to
    /// close it ([`close_through`](Self::close_through) there): at most once an interval,
    /// and never where the shard's time is not closed by entries at all.
    pub fn may_ask_to_close(&self) -> bool {
        self.close_policy.as_ref().is_some_and(|p| {
            self.demand
                .may_ask(firn_model::hlc::system_wall_us(), p.every)
        })
    }

    /// How often time closes here while it is wanted (`None`: only writes close it).
    pub fn close_every(&self) -> Option<Duration> {
        self.close_policy.as_ref().map(|p| p.every)
    }

    /// Proposes a write, stamped now, and returns what applying it answered. Returns only
    /// after the entry is fsync'd on a majority and applied.
    pub async fn write(&self, op: Op) -> Result<Response, FirnError> {
        self.propose(op).await?.await
    }

    /// Hands a write to Raft and returns a future of its outcome. Proposals made one after
    /// another are appended in that order, so a client may pipeline writes and still see
    /// them applied in the order it sent them.
    pub async fn propose(&self, op: Op) -> Result<ProposalOutcome, FirnError> {
        self.check_quorum()?;
        // A node whose clock is beyond the bound on clock offsets stamps nothing.
        let stamp = self.clock.stamp()?;
        let cmd = Command { ts: stamp, op };
        let (responder, done) = ProgressResponder::complete_only();
        let proposed = std::time::Instant::now();
        self.raft
            .write(LogCommand(cmd))
            .responder(responder)
            .await
            .map_err(unavailable)?;
        let taken = stages::since(&STAGES.propose, proposed);
        let clock = self.clock.clone();
        let shard_id = self.shard_id;
        Ok(Box::pin(async move {
            let done = tokio::time::timeout(COMMIT_WAIT, done).await;
            stages::since(&STAGES.commit, taken);
            let Ok(done) = done else {
                return Err(FirnError::Indeterminate(format!(
                    "shard {shard_id} did not commit the write within {COMMIT_WAIT:?} (no quorum?); it may or may not be applied"
                )));
            };
            match done {
                Ok(Ok(resp)) => {
                    let mut stamped = stamp;
                    if let Ok(Response::Written(w)) = &resp.data
                        && let Some(last) = w.last()
                    {
                        clock.observe(last.commit_ts);
                        stamped = stamped.max(last.commit_ts);
                    }
                    // Acknowledged only once every peer's clock has passed the stamp.
                    if let Some(wait) = clock.commit_wait(stamped) {
                        tokio::time::sleep(wait).await;
                    }
                    resp.data
                }
                Ok(Err(e)) => Err(write_refused(shard_id, e)),
                // The entry may already be in the log of other replicas.
                Err(_) => Err(FirnError::Indeterminate(format!(
                    "shard {shard_id} stopped before the write completed; it may or may not be applied"
                ))),
            }
        }))
    }

    /// Waits until this replica has applied every write acknowledged before the call
    /// (ReadIndex: the leader confirms it still leads, then waits for apply). With `lease`,
    /// a leader whose lease holds skips the confirmation round trip.
    pub async fn linearizable_barrier(&self, lease: bool) -> Result<(), FirnError> {
        // A lease is only as good as the clocks that time it: none beyond the bound.
        if lease
            && self.clock.within_bound()
            && self
                .raft
                .ensure_linearizable(ReadPolicy::LeaseRead)
                .await
                .is_ok()
        {
            return Ok(());
        }
        let (read, ready) = oneshot::channel();
        let start = {
            let mut r = ReadRounds::lock(&self.read_rounds);
            if r.waiting.len() >= READ_ROUND_WAITERS_MAX {
                return Err(FirnError::Busy(format!(
                    "shard {}: {READ_ROUND_WAITERS_MAX} linearizable reads already wait for \
                     the next read-index round here, the limit; retry",
                    self.shard_id
                )));
            }
            r.waiting.push(read);
            !std::mem::replace(&mut r.running, true)
        };
        if start {
            tokio::spawn(run_read_rounds(
                self.raft.clone(),
                self.shard_id,
                self.read_rounds.clone(),
            ));
        }
        ready.await.unwrap_or_else(|_| {
            Err(unavailable(format!(
                "shard {} stopped before confirming the read",
                self.shard_id
            )))
        })
    }

    /// A leader that has not heard from a majority for longer than an election takes is
    /// probably cut off (a new leader may exist on the other side): refuse rather than wait.
    fn check_quorum(&self) -> Result<(), FirnError> {
        if self.raft.voter_ids().count() <= 1 {
            return Ok(());
        }
        // Only the one field, not a clone of all the metrics (membership included): this runs
        // for every proposal.
        let acked = self.raft.metrics().borrow_watched().last_quorum_acked;
        if let Some(acked) = acked {
            let since = acked.elapsed();
            if since > QUORUM_ACK_STALE {
                return Err(FirnError::Unavailable(format!(
                    "shard {}: this leader has not heard from a majority for {} ms (partitioned?)",
                    self.shard_id,
                    since.as_millis()
                )));
            }
        }
        Ok(())
    }

    /// On the leader: confirms leadership with a quorum (or, with `lease`, from its lease
    /// while it holds) and returns the log index a replica must have applied to serve a
    /// linearizable read begun now.
    pub async fn read_index(&self, lease: bool) -> Result<u64, FirnError> {
        if lease
            && self.clock.within_bound()
            && let Ok(l) = self.raft.get_read_linearizer(ReadPolicy::LeaseRead).await
        {
            return Ok(l.read_log_id().log_id().index);
        }
        self.raft
            .get_read_linearizer(ReadPolicy::ReadIndex)
            .await
            .map(|l| l.read_log_id().log_id().index)
            .map_err(|e| read_index_error(self.shard_id, e))
    }

    /// Waits (at most `timeout`) until this replica has applied `index`.
    /// Watches the apply progress alone: a waiter wakes when an apply lands, not on every
    /// change of the group's metrics, and copies no metrics when it does.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), FirnError> {
        let mut applied = self.raft.watch_apply_progress();
        let reached = applied.wait_until(|a| a.as_ref().is_some_and(|l| l.index() >= index));
        match tokio::time::timeout(timeout, reached).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(FirnError::TryAgain(format!(
                "replica of shard {} is still catching up",
                self.shard_id
            ))),
        }
    }

    /// The group's voters and learners, from the newest membership this replica knows.
    pub fn members(&self) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        (
            self.raft.voter_ids().collect(),
            self.raft.learner_ids().collect(),
        )
    }

    /// On the leader: adds `node` as a learner and, with `wait`, returns once it has caught
    /// up with the log (or `MEMBERSHIP_WAIT` passed).
    pub async fn add_learner(&self, node: NodeId, addr: &str, wait: bool) -> Result<(), FirnError> {
        let add = self.raft.add_learner(
            node,
            BasicNode {
                addr: addr.to_string(),
            },
            wait,
        );
        match tokio::time::timeout(MEMBERSHIP_WAIT, add).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.membership_error(e)),
            Err(_) => Err(FirnError::TryAgain(format!(
                "node {node} did not catch up with shard {} within {MEMBERSHIP_WAIT:?}",
                self.shard_id
            ))),
        }
    }

    /// On the leader: makes `voters` the group's voters (every one must already be a member);
    /// with `keep_learners`, members that stop voting stay as learners, else they leave.
    pub async fn set_voters(
        &self,
        voters: BTreeSet<NodeId>,
        keep_learners: bool,
    ) -> Result<(), FirnError> {
        self.change_members(ChangeMembers::ReplaceAllVoters(voters), keep_learners)
            .await
    }

    /// On the leader: removes members that are not voters.
    pub async fn remove_learners(&self, nodes: BTreeSet<NodeId>) -> Result<(), FirnError> {
        self.change_members(ChangeMembers::RemoveNodes(nodes), false)
            .await
    }

    /// A membership change, committed (joint, then final) within `MEMBERSHIP_WAIT`.
    async fn change_members(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
        retain: bool,
    ) -> Result<(), FirnError> {
        match tokio::time::timeout(MEMBERSHIP_WAIT, self.raft.change_membership(change, retain))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.membership_error(e)),
            Err(_) => Err(FirnError::Indeterminate(format!(
                "shard {}: membership change not committed within {MEMBERSHIP_WAIT:?}",
                self.shard_id
            ))),
        }
    }

    /// On the leader: hands leadership to `to` (a caught-up voter).
    pub async fn transfer_leader(&self, to: NodeId) -> Result<(), FirnError> {
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(unavailable)
    }

    fn membership_error(&self, e: RaftError<FirnRaft, ClientWriteError<FirnRaft>>) -> FirnError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                FirnError::TryAgain(format!(
                    "this replica is not the leader of group {} ({})",
                    self.shard_id,
                    leader_named(f.leader_id)
                ))
            }
            other => FirnError::TryAgain(format!(
                "group {}: membership change refused: {other}",
                self.shard_id
            )),
        }
    }

    /// Builds a snapshot now (and lets the log before it be purged).
    pub async fn snapshot_now(&self) -> Result<(), FirnError> {
        self.raft.trigger().snapshot().await.map_err(unavailable)
    }

    pub fn status(&self) -> ShardStatus {
        let m = self.raft.metrics().borrow_watched().clone();
        ShardStatus {
            shard_id: self.shard_id,
            node_id: self.node_id,
            state: format!("{:?}", m.state),
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            last_applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            durability: self.durability,
            recovering: self.is_recovering(),
        }
    }

    /// Resolves once the group's core has stopped: with the error if it stopped on a
    /// storage error (a write to its log or state failed: the disk is full or failing;
    /// openraft never goes on after one), `None` if it was shut down or dropped.
    pub fn storage_failure(&self) -> impl Future<Output = Option<String>> + Send + 'static {
        let mut metrics = self.raft.metrics();
        let group = match self.shard_id {
            crate::types::META_GROUP => "the meta group".to_string(),
            shard => format!("shard {shard}"),
        };
        async move {
            loop {
                match &metrics.borrow_watched().running_state {
                    Ok(()) => {}
                    Err(openraft::errors::Fatal::StorageError(e)) => {
                        return Some(format!("{group}'s storage failed: {e}"));
                    }
                    Err(_) => return None,
                }
                metrics.changed().await.ok()?;
            }
        }
    }

    pub async fn shutdown(&self) {
        if let Some(closer) = &self.closer {
            closer.abort();
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(shard = self.shard_id, "raft shutdown: {e}");
        }
    }
}
