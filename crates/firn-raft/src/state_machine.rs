//! The openraft state machine: applies committed entries to the [`VersionedStore`], storing
//! the applied log position atomically with each entry's changes, and builds and installs
//! snapshots (held cuts of a state on disk, files of a state in memory: [`crate::snapshot`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use firn_model::FirnError;
use firn_store::Command;
use firn_store::VersionedStore;
use futures::{FutureExt, Stream, TryStreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::snapshot::{
    self, SYS_APPLIED, SYS_MEMBERSHIP, Snapshot, SnapshotData, SnapshotFile, UNFINISHED_SUFFIXES,
    decode, encode,
};
use crate::stages::{self, STAGES};
use crate::types::{FirnRaft, LogCommand, LogId, SnapshotMeta, StoredMembership};

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
    /// Where the snapshot file is kept (`<group>.snapshot`): a state in memory's latest, or
    /// one received; files of snapshots being built, received or sent sit beside it
    /// (`<group>.building`, `<group>.incoming.<n>`, `<group>.sending.<n>`).
    snapshot_path: PathBuf,
    /// The file last written from a held cut, for the transfers after it.
    written: snapshot::WrittenCuts,
}

impl ShardStateMachine {
    /// A state machine over `store`, its snapshot file at `snapshot_path`. Files of
    /// snapshots a previous run was building, receiving or sending when it stopped are
    /// removed.
    pub fn new(store: Arc<VersionedStore>, snapshot_path: PathBuf) -> Self {
        remove_unfinished(&snapshot_path);
        ShardStateMachine {
            store,
            snapshot_path,
            written: Default::default(),
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

    /// A snapshot of the state now: a held cut of a state on disk (whose file, from an
    /// earlier snapshot or one received, is then stale and removed), a file of one in
    /// memory.
    fn build(&self) -> io::Result<Snapshot> {
        let backend = self.store.backend();
        if !backend.is_durable() {
            let (meta, file) = snapshot::build(backend.as_ref(), &self.snapshot_path)?;
            return Ok(Snapshot {
                meta,
                snapshot: SnapshotData::File(file),
            });
        }
        let (meta, held) = snapshot::hold(backend.as_ref(), &self.snapshot_path, &self.written)?;
        self.written.built(meta.last_log_id);
        self.file_newer_than(&meta)?;
        Ok(Snapshot {
            meta,
            snapshot: SnapshotData::Cut(held),
        })
    }

    /// The replica's snapshot file, if there is one. A file in the format before snapshots
    /// streamed (one postcard blob, without the trailer) is removed and counts as none: the
    /// state is at least as new as any snapshot it wrote.
    fn snapshot_file(&self) -> io::Result<Option<Snapshot>> {
        match SnapshotFile::open(&self.snapshot_path) {
            Ok((meta, file)) => Ok(Some(Snapshot {
                meta,
                snapshot: SnapshotData::File(file),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                tracing::warn!("{e}; the state stands in for it");
                remove_file(&self.snapshot_path)?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The replica's current snapshot. A file newer than the state is one whose install did
    /// not finish (the state claims an older position, or none): it is the snapshot, and
    /// the next start installs it again. Otherwise a state on disk is its own snapshot,
    /// held as a cut of it now (and made durable: openraft may purge the log up to it) — or,
    /// when a cut was written out for a transfer since the latest snapshot, that file; a
    /// state in memory has only its file, if any.
    fn current_snapshot(&self) -> io::Result<Option<Snapshot>> {
        if !self.store.backend().is_durable() {
            return self.snapshot_file();
        }
        let backend = self.store.backend();
        let (meta, held) = snapshot::hold(backend.as_ref(), &self.snapshot_path, &self.written)?;
        if let Some(file) = self.file_newer_than(&meta)? {
            return Ok(Some(file));
        }
        if let Some((meta, file)) = self.written.reusable() {
            return Ok(Some(Snapshot {
                meta,
                snapshot: SnapshotData::File(file),
            }));
        }
        Ok(meta.last_log_id.is_some().then_some(Snapshot {
            meta,
            snapshot: SnapshotData::Cut(held),
        }))
    }

    /// The replica's snapshot file if it is newer than the state on disk (`state`): one whose
    /// install did not finish. One not newer is stale, the state covering it, and is removed
    /// (a transfer reading it reads on).
    fn file_newer_than(&self, state: &SnapshotMeta) -> io::Result<Option<Snapshot>> {
        match self.snapshot_file()? {
            Some(file) if file.meta.last_log_id > state.last_log_id => Ok(Some(file)),
            Some(_) => remove_file(&self.snapshot_path).map(|()| None),
            None => Ok(None),
        }
    }
}

/// Removes a file, and makes the removal durable; a file already gone is not an error.
fn remove_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => match path.parent() {
            Some(dir) => std::fs::File::open(dir)?.sync_all(),
            None => Ok(()),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the files of snapshots left unfinished beside `snapshot_path` (built, received
/// or sent by a run that stopped midway): nothing refers to them.
fn remove_unfinished(snapshot_path: &Path) {
    let (Some(dir), Some(stem)) = (snapshot_path.parent(), snapshot_path.file_stem()) else {
        return;
    };
    let stem = stem.to_string_lossy();
    let unfinished: Vec<String> = UNFINISHED_SUFFIXES
        .iter()
        .map(|suffix| format!("{stem}.{suffix}"))
        .collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if unfinished.iter().any(|u| name.starts_with(u.as_str())) {
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
        // A cut (the applied position inside it matches its data) and an fsync, or for a
        // state in memory its dump written to a file: off the async worker.
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
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        // The log is purged up to the installed snapshot: a file written from a cut before
        // it (when this replica led) can no longer serve a follower.
        self.written.built(meta.last_log_id);
        let SnapshotData::File(file) = snapshot else {
            // A held cut is this replica's own state, never handed back to install (its
            // current snapshot is a file whenever it is newer than the state).
            return Err(io::Error::other(
                "a held cut of the state is not a snapshot to install",
            ));
        };
        // Loading a whole dump is long work: off the worker.
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            snapshot::install(this.store.backend().as_ref(), &file, &this.snapshot_path)?;
            this.store.reload().map_err(firn_to_io)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // Reads a file's trailer, or takes a cut and fsyncs: short, but blocking.
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.current_snapshot())
            .await
            .map_err(io::Error::other)?
    }
}
