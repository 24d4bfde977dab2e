//! The versioned store of one shard: deterministic apply of [`Command`]s and the reads
//! (latest, by version, as of a commit time, by event time, history, scan, watch replay).
//!
//! Apply runs one command at a time (the Raft state machine task); reads run concurrently
//! straight against the backend. Each command commits as one atomic backend batch together
//! with the caller's bookkeeping (the applied log position), so a crash never applies half a
//! command or applies one twice. The exception is a bulk delete (FLUSHALL, truncate, age
//! retention), which may touch every key: it commits in batches of at most
//! [`BULK_BATCH_WRITES_MAX`] writes, the bookkeeping in the last, so a crash part-way
//! applies it again from the start — it is idempotent — and readers may see it half done.

use firn_model::KvWrite;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use firn_model::limits::WATCH_BUFFER_EVENTS;
use firn_model::{
    CommitTs, Durability, FirnError, Key, KeyspaceMode, KeyspaceSpec, ReadAt, Response, Version,
    VersionInfo, WatchEvent,
};
use tokio::sync::{broadcast, watch};

use crate::backend::{Batch, StorageBackend, Table};
use crate::command::{Command, Op};
use crate::glob::glob_match;
use crate::record::{KeyMeta, VersionRecord, decode, encode, version_key, version_of};
use crate::sink::AppliedSink;

mod apply;
mod atomic;
mod blobs;
mod change;
mod changes;
mod event_index;
pub mod expiry;
pub mod group;
pub mod lease;
pub mod log;
mod once;
mod read;
mod replay;
mod truncate;
pub mod txn;
pub mod watermark;

use apply::Txn;
pub use changes::ChangePosition;

const SYS_LAST_TS: &[u8] = b"last_ts";
const SYS_LIVE_KEYS: &[u8] = b"live_keys";

/// Keys examined per page when a command walks a prefix (truncate, retention, flush).
const WALK_PAGE: usize = 1_024;

/// Most writes in one storage batch of a bulk delete (FLUSHALL, a truncate, age retention),
/// which otherwise removes every key and version it touches in one batch held in memory.
/// The state database is shared by every replica on the node, and fjall commits a batch
/// whole: 4,096 removals (tens of KiB for typical keys, at most 32 MiB of 8 KiB keys) keep
/// the memory bounded and let other replicas' applies in between batches.
pub const BULK_BATCH_WRITES_MAX: usize = 4_096;

/// Most versions read from storage at once while a read or a command walks a key's whole
/// history (reads by event time, replay of a watch, truncate by time): the walk then holds
/// one page, however long the history. A page holds the versions' values, so 64 is at most
/// 64 MiB with the default 1 MiB value limit and a few KiB with typical values, while a
/// history of 10,000 versions still takes only ~160 range reads.
pub const HISTORY_PAGE_VERSIONS: usize = 64;

fn io_err(e: io::Error) -> FirnError {
    FirnError::Internal(format!("storage: {e}"))
}

/// The exclusive upper bound of all keys starting with `prefix` (`None`: no bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A page of a scan.
#[derive(Debug)]
pub struct ScanPage {
    /// Live keys with their visible version, in key order.
    pub keys: Vec<(Key, VersionInfo)>,
    /// Where to continue; `None` when the prefix is exhausted.
    pub next_cursor: Option<Bytes>,
    /// The newest stamp of the versions the page looked at, tombstones included: what a
    /// reader of the page has seen, also of the keys it found deleted.
    pub seen_through: Option<CommitTs>,
}

/// State only apply touches.
#[derive(Debug, Default)]
struct ApplyState {
    last_ts: CommitTs,
    live_keys: u64,
}

pub struct VersionedStore {
    backend: Arc<dyn StorageBackend>,
    /// Registered keyspaces, longest prefix first; always contains the default `""`.
    keyspaces: RwLock<Vec<KeyspaceSpec>>,
    /// Each keyspace's event-time watermark and late policy, by prefix (see [`watermark`]).
    watermarks: RwLock<std::collections::HashMap<String, firn_model::WatermarkState>>,
    /// The durability of the shards this store serves the keys of (see [`Self::in_lane`]).
    lane: Durability,
    apply_state: Mutex<ApplyState>,
    events: broadcast::Sender<WatchEvent>,
    /// Closed time: every version of the shard with `commit_ts ≤` it is here. The newest
    /// stamp applied (every entry applied later is stamped above it), held below the
    /// oldest transaction part prepared here and not yet resolved (see [`txn`]).
    closed: watch::Sender<CommitTs>,
    /// What transactions being committed hold here, and a count of its changes.
    held: RwLock<txn::Held>,
    held_changes: watch::Sender<u64>,
    /// Told of every applied batch (see [`AppliedSink`]), each under its name; none until
    /// the node attaches some.
    sinks: RwLock<Vec<(&'static str, Arc<dyn AppliedSink>)>>,
}

impl VersionedStore {
    pub fn open(backend: Arc<dyn StorageBackend>) -> Result<Self, FirnError> {
        Self::open_in_lane(backend, Durability::Disk)
    }

    /// A store for a shard of `lane` durability: it serves only the keys of keyspaces of
    /// that durability, refusing others as misrouted.
    pub fn open_in_lane(
        backend: Arc<dyn StorageBackend>,
        lane: Durability,
    ) -> Result<Self, FirnError> {
        let (events, _) = broadcast::channel(WATCH_BUFFER_EVENTS);
        let store = VersionedStore {
            backend,
            keyspaces: RwLock::new(Vec::new()),
            watermarks: RwLock::new(Default::default()),
            lane,
            apply_state: Mutex::new(ApplyState::default()),
            events,
            closed: watch::Sender::new(CommitTs::default()),
            held: RwLock::new(txn::Held::default()),
            held_changes: watch::Sender::new(0),
            sinks: RwLock::new(Vec::new()),
        };
        store.reload()?;
        Ok(store)
    }

    /// Re-reads the in-memory caches from the backend (after open or a snapshot install).
    pub fn reload(&self) -> Result<(), FirnError> {
        let mut specs: Vec<KeyspaceSpec> = self
            .backend
            .range(
                Table::Keyspaces,
                Bound::Unbounded,
                Bound::Unbounded,
                false,
                usize::MAX,
            )
            .map_err(io_err)?
            .iter()
            .map(|(_, v)| crate::record::decode_keyspace(v))
            .collect::<Result<_, _>>()?;
        if !specs.iter().any(|s| s.prefix.is_empty()) {
            specs.push(KeyspaceSpec::default_keyspace());
        }
        specs.sort_by(|a, b| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then(a.prefix.cmp(&b.prefix))
        });
        *self.keyspaces.write().unwrap_or_else(|p| p.into_inner()) = specs;
        *self.watermarks.write().unwrap_or_else(|p| p.into_inner()) = watermark::load(self)?;
        self.ensure_event_index()?;

        let last_ts = self
            .system_get(SYS_LAST_TS)?
            .map(|b| decode(&b))
            .transpose()?
            .unwrap_or_default();
        let live_keys = self
            .system_get(SYS_LIVE_KEYS)?
            .map(|b| decode(&b))
            .transpose()?
            .unwrap_or(0);
        *self.apply_state.lock().unwrap_or_else(|p| p.into_inner()) =
            ApplyState { last_ts, live_keys };
        self.reload_held()?;
        let closed = self.closed_after(last_ts);
        self.closed.send_replace(closed);
        self.tell_sink(&[], closed, true);
        Ok(())
    }

    /// Attaches the observer of applied batches named `name` (replacing the one of that
    /// name before it), or with `None` detaches it.
    pub fn set_sink(&self, name: &'static str, sink: Option<Arc<dyn AppliedSink>>) {
        let mut sinks = self.sinks.write().unwrap_or_else(|p| p.into_inner());
        sinks.retain(|(n, _)| *n != name);
        sinks.extend(sink.map(|s| (name, s)));
    }

    fn tell_sink(&self, versions: &[WatchEvent], closed: CommitTs, reset: bool) {
        let sinks = self.sinks.read().unwrap_or_else(|p| p.into_inner()).clone();
        for (_, sink) in sinks {
            sink.applied(self, versions, closed, reset);
        }
    }

    pub fn backend(&self) -> &Arc<dyn StorageBackend> {
        &self.backend
    }

    /// Bookkeeping that the caller (the Raft glue) stores beside the data.
    pub fn system_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, FirnError> {
        self.backend.get(Table::System, key).map_err(io_err)
    }

    /// Waits (at most `timeout`) until this replica has closed time `t`: it holds every
    /// version with `commit_ts ≤ t` that the shard will ever have, so a read as of `t` gives
    /// the same answer on every replica, every time.
    pub async fn wait_closed(
        &self,
        t: CommitTs,
        timeout: std::time::Duration,
    ) -> Result<(), FirnError> {
        let mut closed = self.closed.subscribe();
        let reached = tokio::time::timeout(timeout, closed.wait_for(|c| *c >= t))
            .await
            .is_ok_and(|r| r.is_ok());
        if reached {
            return Ok(());
        }
        Err(FirnError::TryAgain(format!(
            "time {t} is not closed here yet (closed through {}); retry, or read at an earlier time",
            *closed.borrow()
        )))
    }

    /// Closed time here: the stamp of the newest applied entry, or below the oldest
    /// transaction part held undecided. Read from the watch channel, so a read never waits
    /// for the apply lock (held while a batch writes).
    pub fn last_commit_ts(&self) -> CommitTs {
        *self.closed.borrow()
    }

    /// The stamp of the newest applied entry (later entries are stamped above it), whether
    /// or not time is closed through it.
    pub fn applied_ts(&self) -> CommitTs {
        self.apply_state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_ts
    }

    fn closed_after(&self, applied: CommitTs) -> CommitTs {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .closed(applied)
    }

    /// Changes after every applied batch (to the newest applied stamp): what a blocked log
    /// read waits on.
    pub fn applied_watch(&self) -> watch::Receiver<CommitTs> {
        self.closed.subscribe()
    }

    /// Every committed version, as it is applied (sent before the closed time passes it).
    pub fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// The keyspace `key` belongs to: the longest registered prefix.
    pub fn keyspace_for(&self, key: &[u8]) -> KeyspaceSpec {
        self.with_keyspace(key, KeyspaceSpec::clone)
    }

    /// The mode of the keyspace `key` belongs to, without copying its spec.
    pub fn keyspace_mode(&self, key: &[u8]) -> KeyspaceMode {
        self.with_keyspace(key, |s| s.mode)
    }

    /// The durability of the keyspace `key` belongs to.
    pub fn keyspace_durability(&self, key: &[u8]) -> Durability {
        self.with_keyspace(key, |s| s.durability)
    }

    /// Refuses a key whose keyspace is of another durability than this store's shard: the
    /// request was routed by a layout older than the keyspace's definition (which every
    /// shard has applied before the definition is answered). Nothing is read or written;
    /// the client retries, by then routed right.
    pub fn in_lane(&self, key: &[u8]) -> Result<(), FirnError> {
        let durability = self.keyspace_durability(key);
        if durability == self.lane {
            return Ok(());
        }
        Err(FirnError::TryAgain(format!(
            "the key is in a {durability} keyspace and this shard holds {} keys: the request \
             was routed before this node learned of the keyspace; retry",
            self.lane
        )))
    }

    fn with_keyspace<T>(&self, key: &[u8], f: impl FnOnce(&KeyspaceSpec) -> T) -> T {
        let specs = self.keyspaces.read().unwrap_or_else(|p| p.into_inner());
        match specs.iter().find(|s| key.starts_with(s.prefix.as_bytes())) {
            Some(spec) => f(spec),
            None => f(&KeyspaceSpec::default_keyspace()),
        }
    }

    pub fn keyspaces(&self) -> Vec<KeyspaceSpec> {
        let mut specs = self
            .keyspaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        specs.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        specs
    }

    /// Stores bookkeeping alone (for log entries that carry no command).
    pub fn write_system(&self, system: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), FirnError> {
        let mut batch = Batch::default();
        for (k, v) in system {
            batch.put(Table::System, k, v);
        }
        self.backend.write(batch).map_err(io_err)
    }

    /// Applies one command, atomically with `system` bookkeeping. A rejected command (failed
    /// condition, bad keyspace) changes no data; its bookkeeping is still written.
    pub fn apply(
        &self,
        cmd: &Command,
        system: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Response, FirnError> {
        self.apply_batch(&[cmd], system)?
            .pop()
            .expect("one result per command")
    }

    /// Applies several commands in log order as one atomic storage batch, with `system`
    /// bookkeeping (the caller's applied position after the last of them). Each command gets
    /// its own result; a rejected one changes nothing. Several commands may share a batch
    /// only if each [`Op::is_batchable`]: they read nothing but key metadata, which the batch
    /// keeps in view. A bulk delete is applied alone and may commit in several batches,
    /// `system` in the last (see the module doc). An `Err` is a storage failure: the state
    /// is then unknown.
    pub fn apply_batch(
        &self,
        cmds: &[&Command],
        system: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<Result<Response, FirnError>>, FirnError> {
        assert!(
            cmds.len() <= 1 || cmds.iter().all(|c| c.op.is_batchable()),
            "only batchable commands may share a storage batch"
        );
        let mut state = self.apply_state.lock().unwrap_or_else(|p| p.into_inner());
        let mut txn = Txn::new(self, state.last_ts);
        let mut results = Vec::with_capacity(cmds.len());
        let mut flushed_all = false;
        for cmd in cmds {
            // Deterministic HLC rule: within a shard stamps only grow.
            txn.ts = cmd.ts.max(txn.ts.successor());
            let mark = txn.mark();
            let outcome = txn.run(&cmd.op);
            match &outcome {
                Err(FirnError::Internal(e)) => return Err(FirnError::Internal(e.clone())),
                Err(_) => {
                    // Rejections happen before a command changes anything it could leave
                    // behind in the overlay; drop whatever it queued.
                    txn.back_to(mark);
                }
                Ok(_) => flushed_all |= matches!(cmd.op, Op::Kv(KvWrite::FlushAll)),
            }
            results.push(outcome);
        }
        let live_keys = if flushed_all {
            0
        } else {
            (state.live_keys as i64 + txn.live_delta).max(0) as u64
        };
        let ts = txn.ts;
        if txn.paged {
            // The bookkeeping shares the last batch of a bulk delete, within its bound.
            txn.make_room(2 + system.len())?;
        }
        let mut batch = std::mem::take(&mut txn.batch);
        for (k, row) in std::mem::take(&mut txn.kept) {
            match row {
                Some(v) => batch.put(Table::System, k, v),
                None => batch.remove(Table::System, k),
            }
        }
        batch.put(Table::System, SYS_LAST_TS.to_vec(), encode(&ts));
        batch.put(Table::System, SYS_LIVE_KEYS.to_vec(), encode(&live_keys));
        for (k, v) in system {
            batch.put(Table::System, k, v);
        }
        self.backend.write(batch).map_err(io_err)?;
        state.last_ts = ts;
        state.live_keys = live_keys;
        if !txn.held_changes.is_empty() {
            self.change_held(std::mem::take(&mut txn.held_changes));
        }
        // Versions are sent before time closes over them: a subscriber that reads the closed
        // time and then takes what its receiver holds has every version stamped up to it.
        if self.events.receiver_count() > 0 {
            for event in &txn.events {
                // A receiver dropped meanwhile is fine: nobody is watching.
                let _ = self.events.send(event.clone());
            }
        }
        let closed = self.closed_after(ts);
        self.closed.send_replace(closed);
        drop(state);
        if txn.keyspaces_changed {
            // Tells the sink itself (a reset), after the new keyspaces are in place.
            self.reload()?;
        }
        self.tell_sink(&txn.events, closed, flushed_all);
        Ok(results)
    }
}
