//! The openraft state machine: applies committed entries to the [`VersionedStore`], storing
//! the applied log position atomically with each entry's changes, and builds and installs
//! snapshots (files, streamed: [`crate::snapshot`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use firn_model::FirnError;
use firn_store::Command;
use firn_store::VersionedStore;
use futures::{FutureExt, Stream, TryStreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::snapshot::{self, SYS_APPLIED, SYS_MEMBERSHIP, SnapshotFile, decode, encode};
use crate::stages::{self, STAGES};
use crate::types::{
    FirnRaft, LogCommand, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
};

/// Most log entries applied in one storage batch: bounds the batch's memory and how long
/// proposers wait for the first of them to be answered.
const APPLY_BATCH_ENTRIES_MAX: usize = 1_024;
/// Most keys a batch of small writes may touch and still be applied on the async worker
/// (see `apply_pending`): a few hundred point writes take well under a millisecond.
pub const APPLY_INLINE_KEYS_MAX: usize = 256;

fn firn_to_io(e: FirnError) -> io::Error {
    io::Error::other(e.to_string())
}

#[derive(Clone)]
pub struct ShardStateMachine {
    store: Arc<VersionedStore>,
    /// Where the latest snapshot is kept (`<group>.snapshot`); files of snapshots being
    /// built or received sit beside it (`<group>.building`, `<group>.incoming.<n>`).
    snapshot_path: PathBuf,
}

impl ShardStateMachine {
    /// A state machine over `store`, its snapshot at `snapshot_path`. Files of snapshots a
    /// previous run was building or receiving when it stopped are removed.
    pub fn new(store: Arc<VersionedStore>, snapshot_path: PathBuf) -> Self {
        remove_unfinished(&snapshot_path);
        ShardStateMachine {
            store,
            snapshot_path,
        }
    }

    /// Where a snapshot being received (transfer `id`) is written.
    pub fn incoming_path(&self, id: u64) -> PathBuf {
        self.snapshot_path.with_extension(format!("incoming.{id}"))
    }

    fn system_get<T: for<'de> serde::Deserialize<'de>>(&self, key: &[u8]) -> io::Result<Option<T>> {
        self.store
            .system_get(key)
            .map_err(firn_to_io)?
            .map(|b| decode(&b))
            .transpose()
    }

    fn build(&self) -> io::Result<Snapshot> {
        let (meta, snapshot) = snapshot::build(self.store.backend().as_ref(), &self.snapshot_path)?;
        Ok(Snapshot { meta, snapshot })
    }

    /// The snapshot file, if there is one. A file in the format before snapshots streamed
    /// (one postcard blob, without the trailer) is replaced by a snapshot of the state now:
    /// the state is at least as new as any snapshot it wrote.
    fn current_snapshot(&self) -> io::Result<Option<Snapshot>> {
        match SnapshotFile::open(&self.snapshot_path) {
            Ok((meta, snapshot)) => Ok(Some(Snapshot { meta, snapshot })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                tracing::warn!("{e}; building a snapshot of the state in its place");
                self.build().map(Some)
            }
            Err(e) => Err(e),
        }
    }
}

/// Removes the files of snapshots left unfinished beside `snapshot_path` (built or received
/// by a run that stopped midway): nothing refers to them.
fn remove_unfinished(snapshot_path: &Path) {
    let (Some(dir), Some(stem)) = (snapshot_path.parent(), snapshot_path.file_stem()) else {
        return;
    };
    let stem = stem.to_string_lossy();
    let (building, incoming) = (format!("{stem}.building"), format!("{stem}.incoming."));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == building || name.starts_with(&incoming) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Log entries waiting to be applied together, with the proposers waiting for them.
type Pending = Vec<(LogId, LogCommand, Option<ApplyResponder<FirnRaft>>)>;

impl ShardStateMachine {
    /// Applies the collected commands as one storage batch and answers their proposers.
    ///
    /// A batch that may be long runs on tokio's blocking pool, not on the async worker: one
    /// command can be long (FLUSHALL, a prefix truncate, age retention walk many keys), and
    /// on the worker it would stall every task scheduled there — heartbeats, other groups,
    /// client connections. A batch of a few small writes (at most [`APPLY_INLINE_KEYS_MAX`]
    /// keys) is applied where it is: it takes microseconds, less than the two thread
    /// hand-offs of the pool (measured: those cost about a tenth of a 3-node cluster's put
    /// throughput on 2 cores). Awaiting each batch before the next keeps log order, and
    /// proposers are answered in that order after their batch commits.
    async fn apply_pending(&self, pending: &mut Pending) -> io::Result<()> {
        let Some((last_id, _, _)) = pending.last() else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        STAGES.apply_entries.record(pending.len() as f64);
        let system = vec![(SYS_APPLIED.to_vec(), encode(last_id)?)];
        let (cmds, responders): (Vec<Command>, Vec<_>) = pending
            .drain(..)
            .map(|(_, LogCommand(cmd), responder)| (cmd, responder))
            .unzip();
        let keys: usize = cmds
            .iter()
            .map(|c| c.op.keys_written().unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add);
        let results = if keys <= APPLY_INLINE_KEYS_MAX {
            let cmds: Vec<&Command> = cmds.iter().collect();
            self.store.apply_batch(&cmds, system)
        } else {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || {
                let cmds: Vec<&Command> = cmds.iter().collect();
                store.apply_batch(&cmds, system)
            })
            .await
            .map_err(io::Error::other)?
        }
        // A storage failure leaves the state unknown: stop this replica.
        .map_err(firn_to_io)?;
        stages::since(&STAGES.apply, started);
        for (responder, result) in responders.into_iter().zip(results) {
            if let Some(r) = responder {
                r.send(result);
            }
        }
        Ok(())
    }

    /// Stores bookkeeping alone (an entry without a command), off the async worker like
    /// every storage write of apply.
    async fn write_system(&self, system: Vec<(Vec<u8>, Vec<u8>)>) -> io::Result<()> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.write_system(system))
            .await
            .map_err(io::Error::other)?
            .map_err(firn_to_io)
    }
}

impl RaftSnapshotBuilder<FirnRaft> for ShardStateMachine {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        // The dump is a consistent cut (the applied position inside it matches its data),
        // written to the file as it is read: long work, off the async worker.
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.build())
            .await
            .map_err(io::Error::other)?
    }
}

impl RaftStateMachine<FirnRaft> for ShardStateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.system_get::<LogId>(SYS_APPLIED)?;
        let membership = self
            .system_get::<StoredMembership>(SYS_MEMBERSHIP)?
            .unwrap_or_default();
        Ok((applied, membership))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<FirnRaft>, io::Error>> + Unpin + OptionalSend,
    {
        // Entries already at hand are applied together: consecutive batchable commands share
        // one storage batch, which is most of the cost of applying a small write.
        let mut pending: Pending = Vec::new();
        loop {
            let next = match pending.len() {
                0 => entries.try_next().await?,
                n if n >= APPLY_BATCH_ENTRIES_MAX => {
                    self.apply_pending(&mut pending).await?;
                    continue;
                }
                // Wait for nothing: apply what is here when the stream has no more ready.
                _ => match entries.try_next().now_or_never() {
                    Some(next) => next?,
                    None => {
                        self.apply_pending(&mut pending).await?;
                        continue;
                    }
                },
            };
            let Some((entry, responder)) = next else {
                self.apply_pending(&mut pending).await?;
                return Ok(());
            };
            match entry.payload {
                EntryPayload::Normal(cmd) if cmd.0.op.is_batchable() => {
                    pending.push((entry.log_id, cmd, responder));
                }
                EntryPayload::Normal(cmd) => {
                    self.apply_pending(&mut pending).await?;
                    pending.push((entry.log_id, cmd, responder));
                    self.apply_pending(&mut pending).await?;
                }
                EntryPayload::Blank => {
                    self.apply_pending(&mut pending).await?;
                    let system = vec![(SYS_APPLIED.to_vec(), encode(&entry.log_id)?)];
                    self.write_system(system).await?;
                    if let Some(r) = responder {
                        r.send(Ok(firn_model::Response::Done));
                    }
                }
                EntryPayload::Membership(membership) => {
                    self.apply_pending(&mut pending).await?;
                    let stored = StoredMembership::new(Some(entry.log_id), membership);
                    let system = vec![
                        (SYS_APPLIED.to_vec(), encode(&entry.log_id)?),
                        (SYS_MEMBERSHIP.to_vec(), encode(&stored)?),
                    ];
                    self.write_system(system).await?;
                    if let Some(r) = responder {
                        r.send(Ok(firn_model::Response::Done));
                    }
                }
            }
        }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        // Loading a whole dump is long work: off the worker.
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            snapshot::install(
                this.store.backend().as_ref(),
                &snapshot,
                &this.snapshot_path,
            )?;
            this.store.reload().map_err(firn_to_io)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // Opening reads only the file's trailer (but an old-format file is rebuilt).
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.current_snapshot())
            .await
            .map_err(io::Error::other)?
    }
}
