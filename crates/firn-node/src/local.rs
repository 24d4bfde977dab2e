//! The node's side of local reads: it owns this node's shared-memory region (a
//! [`firn_local::RegionWriter`]) and keeps it true. Each shard replica held here gets a
//! [`ShardSink`] that publishes, inside apply, the newest versions of `LOCAL` keyspaces and
//! then the time the shard is closed through; while some keyspace is `LOCAL`, a task
//! publishes the leader lease of every shard this node leads. It never answers requests
//! (the router does) and never decides what a read means (the reader in `firn-local` does,
//! from what is published here).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use firn_local::{Published, RegionConfig, RegionReaders, RegionWriter, ShardState};
use firn_model::{CommitTs, FirnError, KeyKind, KeyspaceMode, LocalRegionInfo, WatchEvent};
use firn_raft::{ShardId, ShardReplica};
use firn_store::{AppliedSink, VersionedStore};

use crate::cluster::layout::ClusterLayout;

/// How often the lease task renews the published leases: well inside the lease (the
/// election timeout less a margin, 480 ms), so a leader's local reads stay linearizable
/// without gaps while it keeps its quorum.
pub const LEASE_PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// After this node hands a shard's leadership over, it publishes no lease for that shard
/// for this long: the longest a lease it published before could still run.
const LEASE_QUIET_AFTER_TRANSFER: Duration = Duration::from_millis(600);

/// Where a node's region lives, how large it is, and who besides the node's user may read
/// it (whoever reads it reads every `LOCAL` keyspace, past the prefixes users are granted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalRegionSetting {
    /// `local.region` in the data directory. (A file rewritten continuously is written
    /// back to disk by the kernel now and then; `At` a path in /dev/shm avoids that.)
    Default(RegionConfig, RegionReaders),
    /// At this path.
    At(PathBuf, RegionConfig, RegionReaders),
    /// No region: local reads are off on this node.
    Off,
}

impl Default for LocalRegionSetting {
    /// In the data directory, the node's user's alone.
    fn default() -> Self {
        LocalRegionSetting::Default(RegionConfig::default(), RegionReaders::Owner)
    }
}

/// The file name of the region in a node's data directory.
pub const REGION_FILE: &str = "local.region";

/// A shard's row as this node last published it.
#[derive(Clone, Copy, Default)]
struct ShardRow {
    closed: CommitTs,
    lease_until_mono_ns: u64,
    /// No lease is published before this (set when leadership is handed over).
    quiet_until: Option<Instant>,
}

struct Writer {
    region: RegionWriter,
    shards: HashMap<ShardId, ShardRow>,
}

impl Writer {
    fn write_row(&mut self, shard: ShardId) {
        let row = self.shards.get(&shard).copied().unwrap_or_default();
        self.region.set_shard_state(
            shard,
            ShardState {
                applied: row.closed,
                closed: row.closed,
                lease_until_mono_ns: row.lease_until_mono_ns,
            },
        );
    }
}

/// The name the region's sink is attached under in each store.
const SINK_NAME: &str = "local-region";

/// This node's region, shared by every replica's sink and the lease task.
pub struct LocalRegion {
    path: PathBuf,
    config: RegionConfig,
    node_id: u64,
    writer: Mutex<Writer>,
    /// The layout the sinks look placements up in, and the `LOCAL` prefixes it had.
    layout: RwLock<(Arc<ClusterLayout>, BTreeSet<String>)>,
    /// Whether some keyspace is `LOCAL` (the lease task runs only then).
    publishing: tokio::sync::watch::Sender<bool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LocalRegion {
    /// Opens (or creates) the region at `path`, readable by `readers`; everything a
    /// previous run published there is invalidated.
    pub fn open(
        path: &Path,
        config: RegionConfig,
        readers: RegionReaders,
        node_id: u64,
    ) -> Result<Arc<Self>, FirnError> {
        let region = RegionWriter::open(path, config.clone(), node_id, readers).map_err(|e| {
            FirnError::Internal(format!(
                "opening the local-read region {}: {e}",
                path.display()
            ))
        })?;
        // Announced to clients in other working directories: absolute.
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        tracing::info!(path = %path.display(), ?readers, "local-read region open");
        Ok(Arc::new(LocalRegion {
            path,
            config,
            node_id,
            writer: Mutex::new(Writer {
                region,
                shards: HashMap::new(),
            }),
            layout: RwLock::new((Arc::new(ClusterLayout::empty()), BTreeSet::new())),
            publishing: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// What a client needs to open the region (FIRN.LOCAL, `GET /v1/local`).
    pub fn info(&self) -> LocalRegionInfo {
        let w = lock(&self.writer);
        LocalRegionInfo {
            path: self.path.display().to_string(),
            node_id: self.node_id,
            cluster_id: firn_local::cluster_id_hex(&w.region.cluster_id()),
            incarnation: w.region.incarnation(),
            entries: self.config.entries as u64,
            key_bytes_max: self.config.key_bytes_max as u64,
            value_bytes_max: self.config.value_bytes_max as u64,
        }
    }

    /// Follows a new layout: its cluster id, and which keyspaces are `LOCAL`. When that set
    /// changes, everything published is invalidated (a keyspace no longer local must not be
    /// served from the region; one newly local is published from its next write on).
    pub fn set_layout(&self, layout: Arc<ClusterLayout>) {
        let local: BTreeSet<String> = layout
            .placements
            .iter()
            .filter(|(_, p)| p.local)
            .map(|(prefix, _)| prefix.clone())
            .collect();
        let id = layout.cluster_id();
        let publishing = !local.is_empty();
        let changed = {
            let mut current = self.layout.write().unwrap_or_else(|p| p.into_inner());
            let changed = current.1 != local;
            *current = (layout, local);
            changed
        };
        let mut w = lock(&self.writer);
        if let Some(id) = id {
            w.region.set_cluster_id(id);
        }
        if changed {
            let shards: Vec<ShardId> = w.shards.keys().copied().collect();
            for shard in shards {
                w.region.invalidate_shard(shard);
            }
            metrics::counter!("firn_local_invalidations_total").increment(1);
        }
        drop(w);
        self.publishing
            .send_if_modified(|p| std::mem::replace(p, publishing) != publishing);
    }

    /// Starts publishing `replica`'s shard: a new epoch, then its applies through a sink.
    pub fn attach(self: &Arc<Self>, shard: ShardId, replica: &ShardReplica) {
        let store = replica.store();
        // The sink first: an apply between the two is not published (the shard is not open
        // yet), so its keys read as "go remote" until their next write — never stale.
        store.set_sink(
            SINK_NAME,
            Some(Arc::new(ShardSink {
                shard,
                region: self.clone(),
            })),
        );
        let mut w = lock(&self.writer);
        w.region.open_shard(shard);
        w.shards.insert(
            shard,
            ShardRow {
                closed: store.last_commit_ts(),
                ..ShardRow::default()
            },
        );
        w.write_row(shard);
    }

    /// Stops publishing a shard this node no longer holds: readers go remote for its keys.
    pub fn detach(&self, shard: ShardId, replica: &ShardReplica) {
        replica.store().set_sink(SINK_NAME, None);
        let mut w = lock(&self.writer);
        w.shards.remove(&shard);
        w.region.close_shard(shard);
    }

    /// Before this node hands `shard`'s leadership over: its lease is withdrawn now and not
    /// published again until any lease it gave out has run out.
    pub fn revoke_lease(&self, shard: ShardId) {
        let mut w = lock(&self.writer);
        if let Some(row) = w.shards.get_mut(&shard) {
            row.lease_until_mono_ns = 0;
            row.quiet_until = Some(Instant::now() + LEASE_QUIET_AFTER_TRANSFER);
            w.write_row(shard);
        }
    }

    /// Publishes `shard`'s lease (`None`: no lease).
    fn set_lease(&self, shard: ShardId, until: Option<Instant>) {
        let mut w = lock(&self.writer);
        let Some(row) = w.shards.get_mut(&shard) else {
            return;
        };
        let quiet = row.quiet_until.is_some_and(|q| Instant::now() < q);
        let until_ns = until.filter(|_| !quiet).map_or(0, mono_ns_of);
        if row.lease_until_mono_ns == until_ns {
            return;
        }
        row.lease_until_mono_ns = until_ns;
        w.write_row(shard);
    }

    /// The layout, while some keyspace is `LOCAL`; `None`: nothing is published (the region
    /// holds no entry trusted then — the set's last change invalidated them), so apply
    /// leaves the region alone.
    fn local_layout(&self) -> Option<Arc<ClusterLayout>> {
        let l = self.layout.read().unwrap_or_else(|p| p.into_inner());
        (!l.1.is_empty()).then(|| l.0.clone())
    }

    /// Publishes one applied batch of `shard` (see [`AppliedSink`]).
    fn publish(
        &self,
        shard: ShardId,
        store: &VersionedStore,
        versions: &[WatchEvent],
        closed: CommitTs,
        reset: bool,
    ) {
        let Some(layout) = self.local_layout() else {
            return;
        };
        let mut w = lock(&self.writer);
        if !w.shards.contains_key(&shard) {
            return;
        }
        if reset {
            w.region.invalidate_shard(shard);
        }
        let mut outcomes = [0u64; 4];
        for v in versions {
            let key = v.key.as_bytes();
            // A notify keyspace stores no value: GET answers nothing, and so must the region.
            if !layout.placement_for(key).local || store.keyspace_mode(key) == KeyspaceMode::Notify
            {
                continue;
            }
            // A large value, and a key of another type than a string, are read at the node.
            let outcome = if v.info.blob.is_some() || v.info.kind != KeyKind::String {
                w.region
                    .publish_not_local(shard, key, v.info.version, v.info.commit_ts)
            } else {
                let value = if v.info.deleted {
                    None
                } else {
                    Some(v.info.value.as_deref().unwrap_or_default())
                };
                w.region
                    .publish(shard, key, value, v.info.version, v.info.commit_ts)
            };
            outcomes[outcome as usize] += 1;
        }
        if let Some(row) = w.shards.get_mut(&shard) {
            row.closed = closed;
        }
        w.write_row(shard);
        drop(w);
        count(outcomes);
    }

    /// Renews the leases of the shards held here, and the region's heartbeat, every
    /// [`LEASE_PUBLISH_EVERY`] while some keyspace is `LOCAL`, until `stop` changes. While
    /// none is, nobody reads the region (every read goes to the node), so nothing is renewed
    /// (each renewal asks every group this node leads for its read index: work for nobody);
    /// the leases published before run out by themselves. When a keyspace becomes `LOCAL`
    /// they are renewed at once (a read before that finds no lease, and answers as a
    /// follower's would).
    pub async fn run_leases(
        self: Arc<Self>,
        held: impl Fn() -> Vec<Arc<ShardReplica>> + Send + 'static,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut publishing = self.publishing.subscribe();
        let mut ticks = tokio::time::interval(LEASE_PUBLISH_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let on = *publishing.borrow_and_update();
            tokio::select! {
                _ = ticks.tick(), if on => {}
                changed = publishing.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    ticks.reset_immediately();
                    continue;
                }
                _ = stop.changed() => return,
            }
            for replica in held() {
                let lease = replica.confirmed_lease().await;
                self.set_lease(replica.shard_id(), lease);
            }
            lock(&self.writer).region.heartbeat();
        }
    }
}

/// Counts a batch's publications, `outcomes` indexed by [`Published`]: one metrics lookup
/// per outcome and batch, not per version.
fn count(outcomes: [u64; 4]) {
    const NAMES: [(Published, &str); 4] = [
        (Published::Stored, "stored"),
        (Published::Invalidated, "too_large"),
        (Published::Skipped, "skipped"),
        (Published::Full, "full"),
    ];
    for (outcome, name) in NAMES {
        let n = outcomes[outcome as usize];
        if n > 0 {
            metrics::counter!("firn_local_publishes_total", "outcome" => name).increment(n);
        }
    }
}

/// An instant as nanoseconds of the host's monotonic clock, the clock readers compare
/// lease expiries with (std's `Instant` is that clock, but opaque).
fn mono_ns_of(t: Instant) -> u64 {
    let now = Instant::now();
    let now_ns = firn_local::now_mono_ns();
    if t >= now {
        now_ns.saturating_add((t - now).as_nanos() as u64)
    } else {
        now_ns.saturating_sub((now - t).as_nanos() as u64)
    }
}

/// One replica's publisher: what its store calls after each applied batch.
pub struct ShardSink {
    shard: ShardId,
    region: Arc<LocalRegion>,
}

impl AppliedSink for ShardSink {
    fn applied(
        &self,
        store: &VersionedStore,
        versions: &[WatchEvent],
        closed: CommitTs,
        reset: bool,
    ) {
        self.region
            .publish(self.shard, store, versions, closed, reset);
    }
}
