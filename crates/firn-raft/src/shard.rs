//! One replica of one shard: an openraft group over the fjall log and the versioned store.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use firn_model::{FirnError, HybridClock, Response};
use firn_store::{Command, Op, StorageBackend, VersionedStore};
use fjall::Database;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, InitializeError, LinearizableReadError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::{BasicNode, Config, Raft, ReadPolicy, SnapshotPolicy};
use serde::Serialize;

use crate::log_store::{FjallLogStore, Fsync};
use crate::network::PeerNetwork;
use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, LogCommand, NodeId, ShardId};

/// Longest a new replica waits to elect itself before reporting that it cannot serve.
const ELECTION_WAIT: Duration = Duration::from_secs(30);

pub struct ShardConfig {
    pub shard_id: ShardId,
    pub node_id: NodeId,
    /// The address peers use to reach this node.
    pub node_addr: String,
    /// The database holding this replica's log (shared by the node's groups).
    pub db: Database,
    /// The state machine's storage.
    pub backend: Arc<dyn StorageBackend>,
    pub fsync: Fsync,
    /// Where the replica keeps its latest snapshot.
    pub snapshot_dir: PathBuf,
    /// Build a snapshot (and purge the log before it) every this many entries.
    pub snapshot_every_entries: u64,
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
}

pub struct ShardReplica {
    shard_id: ShardId,
    node_id: NodeId,
    raft: Raft<FirnRaft, ShardStateMachine>,
    store: Arc<VersionedStore>,
    clock: Arc<HybridClock>,
}

fn unavailable(e: impl std::fmt::Display) -> FirnError {
    FirnError::Unavailable(format!("shard unavailable: {e}"))
}

impl ShardReplica {
    /// Opens the replica, recovering its log and state, and — for a fresh single node —
    /// forms a group of one and waits until it leads.
    pub async fn open(cfg: ShardConfig, clock: Arc<HybridClock>) -> Result<Self, FirnError> {
        let store = Arc::new(VersionedStore::open(cfg.backend.clone())?);
        // Stamps after a restart stay above every stamp already applied.
        clock.observe(store.last_commit_ts());
        let group = format!("shard{}", cfg.shard_id);
        let log = FjallLogStore::open(cfg.db.clone(), &group, cfg.fsync)
            .map_err(|e| FirnError::Internal(format!("opening the raft log: {e}")))?;
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
            election_timeout_max: 600,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_every_entries),
            max_in_snapshot_log_to_keep: 0,
            ..Default::default()
        }
        .validate()
        .map_err(|e| FirnError::Internal(format!("raft config: {e}")))?;
        let raft = Raft::new(cfg.node_id, Arc::new(config), PeerNetwork, log, sm)
            .await
            .map_err(unavailable)?;
        let members = BTreeMap::from([(
            cfg.node_id,
            BasicNode {
                addr: cfg.node_addr.clone(),
            },
        )]);
        match raft.initialize(members).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
            Err(e) => return Err(unavailable(e)),
        }
        raft.wait(Some(ELECTION_WAIT))
            .current_leader(cfg.node_id, "a single node elects itself")
            .await
            .map_err(unavailable)?;
        Ok(ShardReplica {
            shard_id: cfg.shard_id,
            node_id: cfg.node_id,
            raft,
            store,
            clock,
        })
    }

    pub fn store(&self) -> &Arc<VersionedStore> {
        &self.store
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
        let cmd = Command {
            ts: self.clock.now(),
            op,
        };
        let (responder, done) = ProgressResponder::complete_only();
        self.raft
            .write(LogCommand(cmd))
            .responder(responder)
            .await
            .map_err(unavailable)?;
        let clock = self.clock.clone();
        let shard_id = self.shard_id;
        Ok(Box::pin(async move {
            match done.await {
                Ok(Ok(resp)) => {
                    if let Ok(Response::Written(w)) = &resp.data
                        && let Some(last) = w.last()
                    {
                        clock.observe(last.commit_ts);
                    }
                    resp.data
                }
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(FirnError::TryAgain(format!(
                    "this replica is not the leader of shard {shard_id} (leader: {:?})",
                    f.leader_id
                ))),
                Ok(Err(e)) => Err(FirnError::TryAgain(format!(
                    "write not applied, retry: {e}"
                ))),
                Err(_) => Err(unavailable(
                    "the raft group stopped before the write completed",
                )),
            }
        }))
    }

    /// Waits until this replica has applied every write acknowledged before the call
    /// (ReadIndex: the leader confirms it still leads, then waits for apply).
    pub async fn linearizable_barrier(&self) -> Result<(), FirnError> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                Err(FirnError::TryAgain(format!(
                    "this replica is not the leader of shard {} (leader: {:?})",
                    self.shard_id, f.leader_id
                )))
            }
            Err(e) => Err(unavailable(e)),
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
        }
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(shard = self.shard_id, "raft shutdown: {e}");
        }
    }
}
