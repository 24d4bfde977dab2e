//! The openraft state machine: applies committed entries to the [`VersionedStore`], storing
//! the applied log position atomically with each entry's changes, and builds snapshots.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use firn_model::FirnError;
use firn_store::Command;
use firn_store::VersionedStore;
use firn_store::backend::{Dump, Table};
use futures::{FutureExt, Stream, TryStreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

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

const SYS_APPLIED: &[u8] = b"raft_applied";
const SYS_MEMBERSHIP: &[u8] = b"raft_membership";

fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    postcard::to_stdvec(v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn decode<T: for<'de> serde::Deserialize<'de>>(b: &[u8]) -> io::Result<T> {
    postcard::from_bytes(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn firn_to_io(e: FirnError) -> io::Error {
    io::Error::other(e.to_string())
}

#[derive(Clone)]
pub struct ShardStateMachine {
    store: Arc<VersionedStore>,
    /// Where the latest snapshot is kept (the whole encoded dump).
    snapshot_path: PathBuf,
}

impl ShardStateMachine {
    pub fn new(store: Arc<VersionedStore>, snapshot_path: PathBuf) -> Self {
        ShardStateMachine {
            store,
            snapshot_path,
        }
    }

    fn system_get<T: for<'de> serde::Deserialize<'de>>(&self, key: &[u8]) -> io::Result<Option<T>> {
        self.store
            .system_get(key)
            .map_err(firn_to_io)?
            .map(|b| decode(&b))
            .transpose()
    }

    fn write_snapshot_file(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let bytes = encode(&(meta, data))?;
        let tmp = self.snapshot_path.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.snapshot_path)?;
        if let Some(dir) = self.snapshot_path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    fn read_snapshot_file(&self) -> io::Result<Option<Snapshot>> {
        match std::fs::read(&self.snapshot_path) {
            Ok(bytes) => {
                let (meta, data): (SnapshotMeta, Vec<u8>) = decode(&bytes)?;
                Ok(Some(Snapshot {
                    meta,
                    snapshot: data,
                }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn dump_system<T: for<'de> serde::Deserialize<'de>>(
    dump: &Dump,
    key: &[u8],
) -> io::Result<Option<T>> {
    for (table, pairs) in &dump.tables {
        if *table == Table::System
            && let Some((_, v)) = pairs.iter().find(|(k, _)| k == key)
        {
            return Ok(Some(decode(v)?));
        }
    }
    Ok(None)
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
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let backend = this.store.backend();
            // The dump is a consistent cut: the applied position inside it matches its data.
            let dump = backend.dump()?;
            // Make the state machine durable before the log before it may be purged.
            backend.persist()?;
            let meta = SnapshotMeta {
                last_log_id: dump_system::<LogId>(&dump, SYS_APPLIED)?,
                last_membership: dump_system::<StoredMembership>(&dump, SYS_MEMBERSHIP)?
                    .unwrap_or_default(),
            };
            let data = encode(&dump)?;
            this.write_snapshot_file(&meta, &data)?;
            Ok(Snapshot {
                meta,
                snapshot: data,
            })
        })
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
        let this = self.clone();
        let meta = meta.clone();
        // Decoding and loading a dump of up to a frame's size is long work: off the worker.
        tokio::task::spawn_blocking(move || {
            let dump: Dump = decode(&snapshot)?;
            this.store.backend().load(dump)?;
            this.store.reload().map_err(firn_to_io)?;
            this.write_snapshot_file(&meta, &snapshot)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // The file holds a whole-state dump: read it off the worker.
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read_snapshot_file())
            .await
            .map_err(io::Error::other)?
    }
}
