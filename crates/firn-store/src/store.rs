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
pub mod group;
pub mod log;
mod once;
mod replay;
pub mod txn;
use apply::Txn;

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
            .map(|(_, v)| decode(v))
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

    /// The commit timestamp of the last applied write.
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

    /// Every committed version, as it is applied.
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
        let closed = self.closed_after(ts);
        self.closed.send_replace(closed);
        drop(state);
        if txn.keyspaces_changed {
            // Tells the sink itself (a reset), after the new keyspaces are in place.
            self.reload()?;
        }
        self.tell_sink(&txn.events, closed, flushed_all);
        for event in txn.events {
            // No receivers is fine: nobody is watching.
            let _ = self.events.send(event);
        }
        Ok(results)
    }

    // ---- reads -------------------------------------------------------------------------

    /// Calls `each` on every row of `table` whose key starts with `prefix`, in key order,
    /// reading a page of `WALK_PAGE` rows at a time (never the whole range at once).
    pub(crate) fn walk_prefix(
        &self,
        table: Table,
        prefix: &[u8],
        mut each: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), FirnError>,
    ) -> Result<(), FirnError> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(prefix), Bound::Excluded);
            let page = self
                .backend
                .range(table, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            let full = page.len() == WALK_PAGE;
            after = page.last().map(|(k, _)| k.clone());
            for (k, v) in page {
                each(k, v)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    pub fn meta(&self, key: &[u8]) -> Result<Option<KeyMeta>, FirnError> {
        self.backend
            .get(Table::KeyMeta, key)
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    fn record(&self, key: &[u8], version: Version) -> Result<Option<VersionRecord>, FirnError> {
        self.backend
            .get(Table::Versions, &version_key(key, version))
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    /// Stored versions of `key` in `[from, to]`, ascending (or descending), at most `limit`.
    fn records(
        &self,
        key: &[u8],
        from: Version,
        to: Version,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<VersionInfo>, FirnError> {
        if from > to {
            return Ok(Vec::new());
        }
        let (lo, hi) = (version_key(key, from), version_key(key, to));
        self.backend
            .range(
                Table::Versions,
                Bound::Included(&lo),
                Bound::Included(&hi),
                reverse,
                limit,
            )
            .map_err(io_err)?
            .into_iter()
            .map(|(k, v)| Ok(decode::<VersionRecord>(&v)?.into_info(version_of(&k))))
            .collect()
    }

    /// Visits the stored versions of `key` in `[from, to]`, ascending (or descending),
    /// reading at most [`HISTORY_PAGE_VERSIONS`] from storage at a time, until `visit`
    /// answers `false`.
    pub(crate) fn walk_records(
        &self,
        key: &[u8],
        mut from: Version,
        mut to: Version,
        reverse: bool,
        mut visit: impl FnMut(VersionInfo) -> Result<bool, FirnError>,
    ) -> Result<(), FirnError> {
        loop {
            let page = self.records(key, from, to, reverse, HISTORY_PAGE_VERSIONS)?;
            let full = page.len() == HISTORY_PAGE_VERSIONS;
            let Some(last) = page.last().map(|i| i.version) else {
                return Ok(());
            };
            for info in page {
                if !visit(info)? {
                    return Ok(());
                }
            }
            // The next page starts past the last version seen; an empty range ends it.
            match (full, reverse) {
                (false, _) => return Ok(()),
                (true, false) if last < to => from = last + 1,
                (true, true) if last > from => to = last - 1,
                _ => return Ok(()),
            }
        }
    }

    /// The version of `key` a read at `at` sees, tombstones included (the caller decides how
    /// a deleted key reads).
    pub fn get(&self, key: &[u8], at: ReadAt) -> Result<Option<VersionInfo>, FirnError> {
        self.in_lane(key)?;
        let Some(meta) = self.meta(key)? else {
            return Ok(None);
        };
        if meta.latest == 0 {
            return Ok(None);
        }
        match at {
            ReadAt::Latest => Ok(self
                .record(key, meta.latest)?
                .map(|r| r.into_info(meta.latest))),
            ReadAt::Version(v) => {
                if v == 0 || v > meta.latest {
                    return Ok(None);
                }
                if v < meta.oldest {
                    return Err(FirnError::Compacted {
                        oldest: meta.oldest,
                    });
                }
                Ok(self.record(key, v)?.map(|r| r.into_info(v)))
            }
            ReadAt::AsOf(t) => match self.search_as_of(key, &meta, t)? {
                Some(found) => Ok(found),
                None => self.scan_as_of(key, &meta, t),
            },
            ReadAt::EventTime(t) => {
                // Event times follow no order: every stored version is looked at.
                let mut best: Option<VersionInfo> = None;
                self.walk_records(key, meta.oldest, meta.latest, false, |info| {
                    let rank = |i: &VersionInfo| (i.event_time_us, i.version);
                    if info.event_time_us.is_some_and(|e| e <= t)
                        && best.as_ref().is_none_or(|b| rank(&info) > rank(b))
                    {
                        best = Some(info);
                    }
                    Ok(true)
                })?;
                Ok(best)
            }
        }
    }

    /// The newest version of `key` with `commit_ts ≤ t`, found by point reads: stamps grow
    /// with versions, so it gallops back from the newest and then bisects — O(log d) reads
    /// for a version d back, not the whole history. `None` when a version in the way is not
    /// stored (a `notify` keyspace); the caller then scans.
    fn search_as_of(
        &self,
        key: &[u8],
        meta: &KeyMeta,
        t: CommitTs,
    ) -> Result<Option<Option<VersionInfo>>, FirnError> {
        let at = |v: Version| self.record(key, v);
        // Invariant: the version `above` is stamped after t.
        let mut above = meta.latest;
        if meta.latest_ts <= t {
            return Ok(at(above)?.map(|r| Some(r.into_info(above))));
        }
        let mut step = 1;
        let (mut below, mut found) = loop {
            if above <= meta.oldest {
                // Nothing stored is old enough: unknowable if older versions were truncated.
                return if meta.oldest > 1 {
                    Err(FirnError::Compacted {
                        oldest: meta.oldest,
                    })
                } else {
                    Ok(Some(None))
                };
            }
            let v = above.saturating_sub(step).max(meta.oldest);
            match at(v)? {
                None => return Ok(None),
                Some(r) if r.commit_ts <= t => break (v, r),
                Some(_) => {
                    above = v;
                    step = step.saturating_mul(2);
                }
            }
        };
        while above - below > 1 {
            let mid = below + (above - below) / 2;
            match at(mid)? {
                None => return Ok(None),
                Some(r) if r.commit_ts <= t => (below, found) = (mid, r),
                Some(_) => above = mid,
            }
        }
        Ok(Some(Some(found.into_info(below))))
    }

    /// [`search_as_of`](Self::search_as_of) by reading every stored version, newest first.
    fn scan_as_of(
        &self,
        key: &[u8],
        meta: &KeyMeta,
        t: CommitTs,
    ) -> Result<Option<VersionInfo>, FirnError> {
        let mut found = None;
        self.walk_records(key, meta.oldest, meta.latest, true, |info| {
            if info.commit_ts <= t {
                found = Some(info);
                return Ok(false);
            }
            Ok(true)
        })?;
        if found.is_some() {
            return Ok(found);
        }
        // Nothing stored is old enough. If older versions were truncated, the answer is
        // unknowable rather than "absent".
        if meta.oldest > 1 {
            return Err(FirnError::Compacted {
                oldest: meta.oldest,
            });
        }
        Ok(None)
    }

    /// Like [`get`](Self::get), but a tombstone reads as absent.
    pub fn get_live(&self, key: &[u8], at: ReadAt) -> Result<Option<VersionInfo>, FirnError> {
        Ok(self.get(key, at)?.filter(|i| !i.deleted))
    }

    pub fn history(
        &self,
        key: &[u8],
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<CommitTs>,
    ) -> Result<Vec<VersionInfo>, FirnError> {
        self.in_lane(key)?;
        let Some(meta) = self.meta(key)? else {
            return Ok(Vec::new());
        };
        let mut to = to.unwrap_or(meta.latest).min(meta.latest);
        if let Some(t) = as_of {
            // Stamps grow with versions, so the history at T is a prefix: it ends at the
            // version a read at T sees. Nothing stored at or before T: an empty history.
            to = match self.get(key, ReadAt::AsOf(t)) {
                Ok(Some(seen)) => to.min(seen.version),
                Ok(None) | Err(FirnError::Compacted { .. }) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
        }
        self.records(key, from.max(meta.oldest), to, false, limit)
    }

    /// Live keys under `prefix` after `cursor`. Examines at most `limit` keys (Redis SCAN's
    /// COUNT semantics: a page may hold fewer matches than `limit`); returns the matches and
    /// the cursor to continue from, `None` when the prefix is exhausted.
    pub fn scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        limit: usize,
        pattern: Option<&[u8]>,
        at: ReadAt,
    ) -> Result<ScanPage, FirnError> {
        let end = prefix_end(prefix);
        let lower = match cursor {
            Some(c) if c >= prefix => Bound::Excluded(c),
            _ => Bound::Included(prefix),
        };
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let limit = limit.max(1);
        let page = self
            .backend
            .range(Table::KeyMeta, lower, upper, false, limit)
            .map_err(io_err)?;
        let next_cursor =
            (page.len() == limit).then(|| Bytes::from(page[page.len() - 1].0.clone()));
        let mut found = Vec::new();
        let mut seen_through = None;
        for (k, _) in page {
            // A key of the other durability's shards is theirs to show (here it could only
            // be one left behind by a definition that raced its write).
            if pattern.is_some_and(|p| !glob_match(p, &k)) || self.in_lane(&k).is_err() {
                continue;
            }
            let visible = match at {
                // Truncated history at T is skipped rather than failing the whole page.
                ReadAt::AsOf(_) | ReadAt::EventTime(_) => self.get(&k, at).unwrap_or(None),
                _ => self.get(&k, at)?,
            };
            if let Some(info) = visible {
                seen_through = seen_through.max(Some(info.commit_ts));
                if !info.deleted {
                    found.push((Key::new(k)?, info));
                }
            }
        }
        Ok(ScanPage {
            keys: found,
            next_cursor,
            seen_through,
        })
    }

    pub fn live_keys(&self) -> u64 {
        self.apply_state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .live_keys
    }
}
