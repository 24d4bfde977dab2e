//! The shard replicas a node holds ([`Replicas`]: opened and closed as the layout says,
//! their leaders, their status) and how each Raft group is opened ([`ReplicaFactory`]: the
//! meta group and the shard replicas, each with its log and its state in the log and state
//! databases of its [`Stripe`]).

use firn_store::SystemOp;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use firn_model::{Durability, FirnError, HybridClock};
use firn_raft::log_store::{Checkpoints, Flush, GroupCommit};
use firn_raft::peer::{LocalGroups, PeerPool};
use firn_raft::{META_GROUP, NodeId, ShardConfig, ShardId, ShardReplica, ShardStatus, group_name};
use firn_store::{FjallBackend, MemoryBackend, Op, StorageBackend};

use crate::cluster::layout::ClusterLayout;
use crate::local::LocalRegion;
use crate::rpc::PeerClient;
use openraft::BasicNode;

pub struct ReplicaFactory {
    pub node_id: NodeId,
    pub peer_addr: String,
    /// Where the node's groups keep their logs (disk groups) and states; never empty.
    pub stripes: Vec<Stripe>,
    /// The Raft logs of the node's memory groups (fsync'd by `checkpoints`): apart from the
    /// disk groups' log, whose fsync would otherwise hold their appends.
    pub memory_db: fjall::Database,
    pub checkpoints: Arc<Checkpoints>,
    /// Asks peers while a memory replica recovers.
    pub peers: PeerClient,
    pub data_dir: PathBuf,
    pub snapshot_every_entries: u64,
    pub snapshot_catchup_entries: u64,
    pub close_time_every: std::time::Duration,
    pub close_time_idle_every: std::time::Duration,
    /// Set while this node publishes `LOCAL` keyspaces in its region, whose readers ask
    /// nothing: its replicas then close time every `close_time_every` when they lead.
    pub close_always: Arc<std::sync::atomic::AtomicBool>,
    pub in_memory: bool,
    pub pool: Arc<PeerPool>,
    pub groups: LocalGroups,
    pub clock: Arc<HybridClock>,
    /// Told why, when a replica's group stops on a storage error: the node then stops.
    pub failures: Arc<tokio::sync::watch::Sender<Option<String>>>,
    /// The data disk, whose free space a storage failure's reason states.
    pub disk: Arc<crate::disk::DiskSpace>,
}

/// A log database with its group commit, and a state database: the groups whose id picks
/// this stripe keep their disk log and their state here (see `STRIPES_DEFAULT` in `node.rs`).
pub struct Stripe {
    /// The Raft logs of the stripe's disk groups (fsync'd by `commit`).
    pub log: fjall::Database,
    /// The state machines of the stripe's groups (either durability).
    pub state: fjall::Database,
    /// The folder `state` was opened at.
    pub state_dir: PathBuf,
    pub commit: Arc<GroupCommit>,
    /// Keeps `state`'s unsynced journal small (none on an in-memory node).
    pub writeback: Option<Arc<firn_store::journal_sync::Writeback>>,
}

impl ReplicaFactory {
    fn stripe(&self, id: ShardId) -> &Stripe {
        &self.stripes[id as usize % self.stripes.len()]
    }

    /// Opens (recovering) this node's replica of group `id`. With `form`, this node forms
    /// the group with `members` (node id → peer address) unless it already exists. A
    /// memory replica that restarted recovers (see [`crate::recovery`]) before it votes.
    pub async fn open(
        &self,
        id: ShardId,
        members: &BTreeMap<NodeId, String>,
        form: bool,
        durability: Durability,
    ) -> Result<Arc<ShardReplica>, FirnError> {
        let (db, flush) = match durability {
            Durability::Disk => {
                let stripe = self.stripe(id);
                (stripe.log.clone(), Flush::Fsync(stripe.commit.clone()))
            }
            Durability::Memory => (
                self.memory_db.clone(),
                Flush::Memory(self.checkpoints.clone()),
            ),
        };
        let backend: Arc<dyn StorageBackend> = if self.in_memory {
            Arc::new(MemoryBackend::default())
        } else {
            Arc::new(
                FjallBackend::open(
                    self.stripe(id).state.clone(),
                    &self.stripe(id).state_dir,
                    &group_name(id),
                )
                .map_err(|e| {
                    FirnError::Internal(format!("opening the state of {}: {e}", group_name(id)))
                })?,
            )
        };
        let replica = ShardReplica::open(
            ShardConfig {
                shard_id: id,
                node_id: self.node_id,
                node_addr: self.peer_addr.clone(),
                db,
                backend,
                flush,
                snapshot_dir: self.data_dir.join("snapshots"),
                snapshot_every_entries: self.snapshot_every_entries,
                snapshot_catchup_entries: self.snapshot_catchup_entries,
                // The meta group's state is the layout: nobody reads it at a time.
                closing: (id != META_GROUP && !self.close_time_every.is_zero()).then(|| {
                    firn_raft::ClosePolicy {
                        every: self.close_time_every,
                        idle_every: self.close_time_idle_every.max(self.close_time_every),
                        always: self.close_always.clone(),
                    }
                }),
                members: members
                    .iter()
                    .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                    .collect(),
                initialize: form,
                pool: self.pool.clone(),
                groups: self.groups.clone(),
            },
            self.clock.clone(),
        )
        .await?;
        let replica = Arc::new(replica);
        let failed = replica.storage_failure();
        let (failures, disk) = (self.failures.clone(), self.disk.clone());
        tokio::spawn(async move {
            if let Some(why) = failed.await {
                // The engine's own error may only say that an earlier failure (of a flush,
                // say) poisoned it: the free space says whether the disk is why.
                let free = match disk.refresh() {
                    Ok(bytes) => format!("the data disk has {} MiB free", bytes >> 20),
                    Err(e) => format!("the data disk's free space is unknown ({e})"),
                };
                tracing::error!("{why}; {free}: the node stops");
                failures.send_replace(Some(format!(
                    "{why}; {free}. The node stops rather than serve without the shard; \
                     nothing acknowledged is lost. Free space on the data disk (or replace \
                     it) and start the node again."
                )));
            }
        });
        if replica.is_recovering() {
            tokio::spawn(crate::recovery::run(
                Arc::downgrade(&replica),
                self.peers.clone(),
            ));
        }
        Ok(replica)
    }

    /// Stops a replica this node no longer holds; peers' messages for it are refused.
    pub async fn close(&self, id: ShardId, replica: &ShardReplica) {
        self.groups.remove(id);
        replica.shutdown().await;
    }
}

/// How long a request waits for a shard to have a leader before it is refused.
pub const LEADER_WAIT: Duration = Duration::from_secs(5);

/// The shard replicas this node holds, opened and closed as the layout says.
pub struct Replicas {
    node_id: NodeId,
    factory: ReplicaFactory,
    held: RwLock<HashMap<ShardId, Arc<ShardReplica>>>,
    /// Serialises layout changes (replicas opened and closed).
    applying: tokio::sync::Mutex<()>,
    /// Where the replicas held here publish for local reads (none: local reads are off).
    local: Option<Arc<LocalRegion>>,
    /// Where each replica tells the blobs its versions name (see `crate::blob::repair`).
    blob_repairs: crate::blob::repair::RepairIntake,
}

impl crate::blob::HeldReplicas for Replicas {
    fn held(&self, shard: ShardId) -> Option<Arc<ShardReplica>> {
        self.get(shard)
    }
}

impl Replicas {
    pub fn new(
        factory: ReplicaFactory,
        local: Option<Arc<LocalRegion>>,
        blob_repairs: crate::blob::repair::RepairIntake,
    ) -> Self {
        Replicas {
            node_id: factory.node_id,
            factory,
            held: RwLock::default(),
            applying: tokio::sync::Mutex::new(()),
            local,
            blob_repairs,
        }
    }

    /// This node's shared-memory region, if local reads are on.
    pub fn local_region(&self) -> Option<&Arc<LocalRegion>> {
        self.local.as_ref()
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// This node's replica of `shard`, if it holds one.
    pub fn get(&self, shard: ShardId) -> Option<Arc<ShardReplica>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<ShardReplica>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The replica of `shard`, or why this node cannot serve it.
    pub fn require(&self, shard: ShardId) -> Result<Arc<ShardReplica>, FirnError> {
        self.get(shard).ok_or_else(|| {
            FirnError::TryAgain(format!(
                "no replica of shard {shard} on node {}",
                self.node_id
            ))
        })
    }

    /// The replica of `shard` if this node leads it.
    pub fn require_leader(&self, shard: ShardId) -> Result<Arc<ShardReplica>, FirnError> {
        let replica = self.require(shard)?;
        if replica.leader() != Some(self.node_id) {
            return Err(FirnError::TryAgain(format!(
                "node {} does not lead shard {shard} ({})",
                self.node_id,
                firn_raft::leader_named(replica.leader())
            )));
        }
        Ok(replica)
    }

    /// The leader of `shard` as this node's replica knows it, without waiting.
    pub fn known_leader(&self, shard: ShardId) -> Option<NodeId> {
        self.get(shard).and_then(|r| r.leader())
    }

    /// The leader of a shard held here, waiting for one (at most `LEADER_WAIT`); `None`
    /// when this node holds no replica of it.
    pub async fn leader_of(&self, shard: ShardId) -> Option<Result<NodeId, FirnError>> {
        let replica = self.get(shard)?;
        Some(match replica.leader() {
            Some(l) => Ok(l),
            None => replica.wait_for_leader(LEADER_WAIT).await,
        })
    }

    /// The replicas this node holds.
    pub fn status(&self) -> Vec<ShardStatus> {
        let mut s: Vec<ShardStatus> = self.all().iter().map(|r| r.status()).collect();
        s.sort_by_key(|s| s.shard_id);
        s
    }

    /// Live keys in the replicas this node holds (INFO's view; DBSIZE asks every shard).
    pub fn live_keys(&self) -> u64 {
        self.all().iter().map(|r| r.store().live_keys()).sum()
    }

    /// Follows a new layout: peer addresses, then the replicas this node should hold —
    /// opening the ones added here, closing the ones moved away.
    pub async fn follow(&self, layout: &ClusterLayout) -> Result<(), FirnError> {
        let _one_at_a_time = self.applying.lock().await;
        for (id, addr) in &layout.nodes {
            self.factory.pool.set_addr(*id, addr);
        }
        if let Some(local) = &self.local {
            local.set_layout(Arc::new(layout.clone()));
            // The region's readers send nothing: time must keep closing for their bounds.
            let published = layout.placements.values().any(|p| p.local);
            self.factory
                .close_always
                .store(published, std::sync::atomic::Ordering::Relaxed);
        }
        let me = self.node_id;
        let held: Vec<ShardId> = self
            .held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        let mut result = Ok(());
        for shard in layout.shards.iter().filter(|s| layout.holds(s, me)) {
            if held.contains(&shard.id) {
                continue;
            }
            let members: BTreeMap<NodeId, String> = shard
                .replicas
                .iter()
                .filter_map(|n| layout.nodes.get(n).map(|a| (*n, a.clone())))
                .collect();
            let form = shard.formed_by == Some(me);
            match self
                .factory
                .open(shard.id, &members, form, shard.durability)
                .await
            {
                Ok(replica) => {
                    tracing::info!(shard = shard.id, form, "opened a replica");
                    replica.store().set_sink(
                        crate::blob::repair::SINK_NAME,
                        Some(Arc::new(self.blob_repairs.sink(shard.id))),
                    );
                    if let Some(local) = &self.local {
                        local.attach(shard.id, &replica);
                    }
                    self.held
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(shard.id, replica);
                    // Held now, so the repair task finds it.
                    self.blob_repairs.resume(shard.id);
                }
                Err(e) => result = Err(e),
            }
        }
        for id in held {
            if layout
                .shards
                .iter()
                .any(|s| s.id == id && layout.holds(s, me))
            {
                continue;
            }
            let replica = self
                .held
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            if let Some(r) = replica {
                if let Some(local) = &self.local {
                    local.detach(id, &r);
                }
                self.factory.close(id, &r).await;
                tracing::info!(shard = id, "closed a replica moved elsewhere");
            }
        }
        result
    }

    /// As the leader of `shard`: makes `voters` its voters, new ones caught up first, and
    /// its only members: a shard's group has learners only while a move adds one, so a
    /// learner left from an abandoned move (its node removed before it caught up) goes.
    pub async fn set_voters(
        &self,
        shard: ShardId,
        voters: BTreeMap<NodeId, String>,
    ) -> Result<(), FirnError> {
        let replica = self.require_leader(shard)?;
        let (current, learners) = replica.members();
        for (id, addr) in voters.iter().filter(|(id, _)| !current.contains(id)) {
            replica.add_learner(*id, addr, true).await?;
        }
        let voters: BTreeSet<NodeId> = voters.into_keys().collect();
        replica.set_voters(voters.clone(), false).await?;
        // Learners from before this change that it did not make voters.
        let strays: BTreeSet<NodeId> = learners.difference(&voters).copied().collect();
        if strays.is_empty() {
            return Ok(());
        }
        replica.remove_learners(strays).await
    }

    /// As the leader of `shard`: hands leadership to `to`.
    pub async fn transfer_leader(&self, shard: ShardId, to: NodeId) -> Result<(), FirnError> {
        let replica = self.require_leader(shard)?;
        // The new leader may be elected before this node's lease would run out.
        if let Some(local) = &self.local {
            local.revoke_lease(shard);
        }
        replica.transfer_leader(to).await
    }

    /// Proposes age-based retention on the shards this node leads, if a keyspace has a max
    /// age.
    pub async fn expire_by_age(&self) -> Result<(), FirnError> {
        for replica in self.all() {
            if replica.leader() == Some(self.node_id)
                && replica
                    .store()
                    .keyspaces()
                    .iter()
                    .any(|k| k.max_age_us.is_some())
            {
                replica.write(Op::System(SystemOp::ExpireByAge)).await?;
            }
        }
        Ok(())
    }

    /// Stops every replica, then makes the memory groups' log durable: a clean stop
    /// leaves nothing acknowledged to a later crash of the machine (a `kill -9` skips this,
    /// and loses nothing either while the machine stays up: the OS holds the log).
    pub async fn shutdown(&self) {
        for r in self.all() {
            r.shutdown().await;
        }
        let checkpoints = self.factory.checkpoints.clone();
        match tokio::task::spawn_blocking(move || checkpoints.checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("the last checkpoint of the memory log failed: {e}"),
            Err(e) => tracing::error!("the last checkpoint of the memory log did not run: {e}"),
        }
    }
}
