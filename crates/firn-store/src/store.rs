//! The versioned store of one shard: deterministic apply of [`Command`]s and the reads
//! (latest, by version, as of a commit time, by event time, history, scan, watch replay).
//!
//! Apply runs one command at a time (the Raft state machine task); reads run concurrently
//! straight against the backend. Each command commits as one atomic backend batch together
//! with the caller's bookkeeping (the applied log position), so a crash never applies half a
//! command or applies one twice.

use std::collections::HashMap;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use firn_model::limits::{KEYSPACES_MAX, WATCH_BUFFER_EVENTS, WATCH_REPLAY_MAX};
use firn_model::{
    CommitTs, FirnError, Key, KeyRange, KeyspaceMode, KeyspaceSpec, ReadAt, Response,
    TruncateBefore, Version, VersionInfo, WatchEvent, WatchFrom, WriteCondition, Written,
};
use tokio::sync::{broadcast, watch};

use crate::backend::{Batch, StorageBackend, Table};
use crate::command::{Command, Op};
use crate::glob::glob_match;
use crate::record::{KeyMeta, VersionRecord, decode, encode, version_key, version_of};

const SYS_LAST_TS: &[u8] = b"last_ts";
const SYS_LIVE_KEYS: &[u8] = b"live_keys";

/// Keys examined per page when a command walks a prefix (truncate, retention, flush).
const WALK_PAGE: usize = 1_024;

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
    apply_state: Mutex<ApplyState>,
    events: broadcast::Sender<WatchEvent>,
    /// The newest stamp applied: every entry applied later is stamped above it, so this
    /// replica holds every version of the shard with `commit_ts ≤` it (time is closed).
    closed: watch::Sender<CommitTs>,
}

impl VersionedStore {
    pub fn open(backend: Arc<dyn StorageBackend>) -> Result<Self, FirnError> {
        let (events, _) = broadcast::channel(WATCH_BUFFER_EVENTS);
        let store = VersionedStore {
            backend,
            keyspaces: RwLock::new(Vec::new()),
            apply_state: Mutex::new(ApplyState::default()),
            events,
            closed: watch::Sender::new(CommitTs::default()),
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
        self.closed.send_replace(last_ts);
        Ok(())
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

    /// The stamp of the newest applied entry: time is closed through it here. Read from the
    /// watch channel, so a read never waits for the apply lock (held while a batch writes).
    pub fn last_commit_ts(&self) -> CommitTs {
        *self.closed.borrow()
    }

    /// Every committed version, as it is applied.
    pub fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// The keyspace `key` belongs to: the longest registered prefix.
    pub fn keyspace_for(&self, key: &[u8]) -> KeyspaceSpec {
        let specs = self.keyspaces.read().unwrap_or_else(|p| p.into_inner());
        specs
            .iter()
            .find(|s| key.starts_with(s.prefix.as_bytes()))
            .cloned()
            .unwrap_or_else(KeyspaceSpec::default_keyspace)
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
    /// keeps in view. An `Err` is a storage failure: the state is then unknown.
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
            let mark = (txn.batch.len(), txn.events.len(), txn.live_delta);
            let outcome = txn.run(&cmd.op);
            match &outcome {
                Err(FirnError::Internal(e)) => return Err(FirnError::Internal(e.clone())),
                Err(_) => {
                    // Rejections happen before a command changes anything it could leave
                    // behind in the overlay; drop whatever it queued.
                    txn.batch.truncate(mark.0);
                    txn.events.truncate(mark.1);
                    txn.live_delta = mark.2;
                }
                Ok(_) => flushed_all |= matches!(cmd.op, Op::FlushAll),
            }
            results.push(outcome);
        }
        let live_keys = if flushed_all {
            0
        } else {
            (state.live_keys as i64 + txn.live_delta).max(0) as u64
        };
        let ts = txn.ts;
        let mut batch = std::mem::take(&mut txn.batch);
        batch.put(Table::System, SYS_LAST_TS.to_vec(), encode(&ts));
        batch.put(Table::System, SYS_LIVE_KEYS.to_vec(), encode(&live_keys));
        for (k, v) in system {
            batch.put(Table::System, k, v);
        }
        self.backend.write(batch).map_err(io_err)?;
        state.last_ts = ts;
        state.live_keys = live_keys;
        self.closed.send_replace(ts);
        drop(state);
        if txn.keyspaces_changed {
            self.reload()?;
        }
        for event in txn.events {
            // No receivers is fine: nobody is watching.
            let _ = self.events.send(event);
        }
        Ok(results)
    }

    // ---- reads -------------------------------------------------------------------------

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

    /// The version of `key` a read at `at` sees, tombstones included (the caller decides how
    /// a deleted key reads).
    pub fn get(&self, key: &[u8], at: ReadAt) -> Result<Option<VersionInfo>, FirnError> {
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
                let all = self.records(key, meta.oldest, meta.latest, false, usize::MAX)?;
                Ok(all
                    .into_iter()
                    .filter(|i| i.event_time_us.is_some_and(|e| e <= t))
                    .max_by_key(|i| (i.event_time_us, i.version)))
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
        let mut newest_first = self.records(key, meta.oldest, meta.latest, true, usize::MAX)?;
        if let Some(pos) = newest_first.iter().position(|i| i.commit_ts <= t) {
            return Ok(Some(newest_first.swap_remove(pos)));
        }
        // Nothing stored is old enough. If older versions were truncated, the answer is
        // unknowable rather than "absent".
        if meta.oldest > 1
            && newest_first
                .last()
                .is_none_or(|oldest| oldest.commit_ts > t)
        {
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
            if pattern.is_some_and(|p| !glob_match(p, &k)) {
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

    /// The committed versions a watch starting at `from` replays, in commit order.
    pub fn replay(&self, target: &KeyRange, from: WatchFrom) -> Result<Vec<WatchEvent>, FirnError> {
        if from == WatchFrom::Now {
            return Ok(Vec::new());
        }
        let keys: Vec<Vec<u8>> = match target {
            KeyRange::Key(k) => vec![k.as_bytes().to_vec()],
            KeyRange::Prefix(p) => {
                let end = prefix_end(p);
                let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                self.backend
                    .range(
                        Table::KeyMeta,
                        Bound::Included(p),
                        upper,
                        false,
                        WATCH_REPLAY_MAX + 1,
                    )
                    .map_err(io_err)?
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect()
            }
        };
        let mut events = Vec::new();
        for key in keys {
            let Some(meta) = self.meta(&key)? else {
                continue;
            };
            if meta.latest == 0 || self.keyspace_for(&key).mode == KeyspaceMode::Notify {
                continue;
            }
            let infos = match from {
                WatchFrom::Now => unreachable!("handled above"),
                WatchFrom::Version(v) => {
                    if v < meta.oldest && v <= meta.latest {
                        return Err(FirnError::Compacted {
                            oldest: meta.oldest,
                        });
                    }
                    self.records(
                        &key,
                        v.max(meta.oldest),
                        meta.latest,
                        false,
                        WATCH_REPLAY_MAX + 1,
                    )?
                }
                WatchFrom::Time(t) => {
                    let stored = self.records(&key, meta.oldest, meta.latest, false, usize::MAX)?;
                    if meta.oldest > 1 && stored.first().is_some_and(|first| first.commit_ts > t) {
                        return Err(FirnError::Compacted {
                            oldest: meta.oldest,
                        });
                    }
                    stored.into_iter().filter(|i| i.commit_ts >= t).collect()
                }
            };
            let key = Key::new(key)?;
            events.extend(infos.into_iter().map(|info| WatchEvent {
                key: key.clone(),
                info,
            }));
            if events.len() > WATCH_REPLAY_MAX {
                return Err(FirnError::BadArgument(format!(
                    "the replay holds more than {WATCH_REPLAY_MAX} versions; start the watch \
                     later or page through history first"
                )));
            }
        }
        events.sort_by(|a, b| {
            a.info
                .commit_ts
                .cmp(&b.info.commit_ts)
                .then(a.key.cmp(&b.key))
        });
        Ok(events)
    }
}

/// One command's changes, buffered until they commit as one batch.
struct Txn<'a> {
    store: &'a VersionedStore,
    ts: CommitTs,
    batch: Batch,
    /// Metas changed by this command, read back before the batch commits.
    metas: HashMap<Vec<u8>, KeyMeta>,
    events: Vec<WatchEvent>,
    live_delta: i64,
    keyspaces_changed: bool,
}

impl<'a> Txn<'a> {
    /// `ts` is the stamp of the entry before; each command raises it.
    fn new(store: &'a VersionedStore, ts: CommitTs) -> Self {
        Txn {
            store,
            ts,
            batch: Batch::default(),
            metas: HashMap::new(),
            events: Vec::new(),
            live_delta: 0,
            keyspaces_changed: false,
        }
    }

    fn meta(&self, key: &[u8]) -> Result<KeyMeta, FirnError> {
        if let Some(m) = self.metas.get(key) {
            return Ok(m.clone());
        }
        Ok(self.store.meta(key)?.unwrap_or(KeyMeta {
            oldest: 1,
            ..KeyMeta::default()
        }))
    }

    fn set_meta(&mut self, key: &[u8], meta: KeyMeta) {
        self.batch.put(Table::KeyMeta, key.to_vec(), encode(&meta));
        self.metas.insert(key.to_vec(), meta);
    }

    fn run(&mut self, op: &Op) -> Result<Response, FirnError> {
        match op {
            Op::Put(p) => {
                let w = self.write_version(
                    &p.key,
                    Some(p.value.clone()),
                    p.event_time_us,
                    p.condition,
                    p.return_previous,
                )?;
                Ok(Response::Written(vec![w]))
            }
            Op::MSet { items } => {
                let mut out = Vec::with_capacity(items.len());
                for (key, value) in items {
                    out.push(self.write_version(
                        key,
                        Some(value.clone()),
                        None,
                        WriteCondition::Always,
                        false,
                    )?);
                }
                Ok(Response::Written(out))
            }
            Op::Delete { keys } => {
                let mut out = Vec::with_capacity(keys.len());
                for key in keys {
                    // Deleting an absent key writes nothing (Redis DEL semantics).
                    if !self.meta(key.as_bytes())?.is_live() {
                        let meta = self.meta(key.as_bytes())?;
                        out.push(Written {
                            key: key.clone(),
                            version: meta.latest,
                            commit_ts: meta.latest_ts,
                            existed: false,
                            previous: None,
                        });
                        continue;
                    }
                    out.push(self.write_version(key, None, None, WriteCondition::Always, false)?);
                }
                Ok(Response::Written(out))
            }
            Op::Truncate { target, before } => {
                let removed = match target {
                    KeyRange::Key(k) => self.truncate_key(k.as_bytes(), *before)?,
                    KeyRange::Prefix(p) => {
                        let mut removed = 0;
                        for key in self.keys_under(p)? {
                            removed += self.truncate_key(&key, *before)?;
                        }
                        removed
                    }
                };
                Ok(Response::Truncated {
                    versions_removed: removed,
                })
            }
            Op::ExpireByAge => {
                let mut removed = 0;
                for spec in self.store.keyspaces() {
                    let Some(max_age) = spec.max_age_us else {
                        continue;
                    };
                    let cutoff = CommitTs::new(self.ts.wall_us.saturating_sub(max_age), 0);
                    for key in self.keys_under(spec.prefix.as_bytes())? {
                        if self.store.keyspace_for(&key).prefix == spec.prefix {
                            removed += self.truncate_key(&key, TruncateBefore::Time(cutoff))?;
                        }
                    }
                }
                Ok(Response::Truncated {
                    versions_removed: removed,
                })
            }
            Op::KeyspaceCreate(spec) => {
                spec.validate()?;
                let existing = self.store.keyspaces();
                if !existing.iter().any(|s| s.prefix == spec.prefix)
                    && existing.len() >= KEYSPACES_MAX
                {
                    return Err(FirnError::Refused(format!(
                        "there are already {KEYSPACES_MAX} keyspaces, the limit"
                    )));
                }
                self.batch.put(
                    Table::Keyspaces,
                    spec.prefix.as_bytes().to_vec(),
                    encode(spec),
                );
                self.keyspaces_changed = true;
                Ok(Response::Done)
            }
            Op::KeyspaceDrop { prefix } => {
                if prefix.is_empty() {
                    return Err(FirnError::Refused(
                        "the default keyspace \"\" cannot be dropped".into(),
                    ));
                }
                if !self.store.keyspaces().iter().any(|s| &s.prefix == prefix) {
                    return Err(FirnError::KeyspaceNotFound(prefix.clone()));
                }
                self.batch
                    .remove(Table::Keyspaces, prefix.as_bytes().to_vec());
                self.keyspaces_changed = true;
                Ok(Response::Done)
            }
            Op::CloseTime => Ok(Response::Done),
            Op::FlushAll => {
                for table in [Table::KeyMeta, Table::Versions] {
                    let mut after: Option<Vec<u8>> = None;
                    loop {
                        let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                        let page = self
                            .store
                            .backend
                            .range(table, lower, Bound::Unbounded, false, WALK_PAGE)
                            .map_err(io_err)?;
                        let Some((last, _)) = page.last() else { break };
                        after = Some(last.clone());
                        for (k, _) in page {
                            self.batch.remove(table, k);
                        }
                    }
                }
                Ok(Response::Done)
            }
        }
    }

    fn keys_under(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, FirnError> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut keys = Vec::new();
        let mut lower_key = prefix.to_vec();
        let mut inclusive = true;
        loop {
            let lower = if inclusive {
                Bound::Included(&lower_key[..])
            } else {
                Bound::Excluded(&lower_key[..])
            };
            let page = self
                .store
                .backend
                .range(Table::KeyMeta, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            let done = page.len() < WALK_PAGE;
            if let Some((last, _)) = page.last() {
                lower_key = last.clone();
                inclusive = false;
            }
            keys.extend(page.into_iter().map(|(k, _)| k));
            if done {
                return Ok(keys);
            }
        }
    }

    fn write_version(
        &mut self,
        key: &Key,
        value: Option<Bytes>,
        event_time_us: Option<u64>,
        condition: WriteCondition,
        return_previous: bool,
    ) -> Result<Written, FirnError> {
        let k = key.as_bytes();
        let spec = self.store.keyspace_for(k);
        let mut meta = self.meta(k)?;
        let existed = meta.is_live();
        let condition_holds = match condition {
            WriteCondition::Always => true,
            WriteCondition::IfVersion(0) => !existed,
            WriteCondition::IfVersion(v) => meta.latest == v,
            WriteCondition::IfPresent => existed,
        };
        let stored_any = meta.latest > 0 && meta.oldest <= meta.latest;
        if !condition_holds {
            // Redis `SET … NX GET` on a present key writes nothing and answers the current
            // value, not a conflict.
            if return_previous && condition == WriteCondition::IfVersion(0) {
                return Ok(Written {
                    key: key.clone(),
                    version: meta.latest,
                    commit_ts: meta.latest_ts,
                    existed,
                    previous: self
                        .store
                        .record(k, meta.latest)?
                        .map(|r| r.into_info(meta.latest)),
                });
            }
            return Err(FirnError::Conflict {
                current: meta.latest,
            });
        }
        let previous = if return_previous && stored_any {
            self.store
                .record(k, meta.latest)?
                .map(|r| r.into_info(meta.latest))
        } else {
            None
        };
        let version = meta.latest + 1;
        let record = VersionRecord {
            commit_ts: self.ts,
            event_time_us,
            value,
        };
        match spec.mode {
            KeyspaceMode::Versioned => {
                if !stored_any {
                    meta.oldest = version;
                }
                self.batch
                    .put(Table::Versions, version_key(k, version), encode(&record));
                if let Some(max) = spec.max_versions {
                    while version - meta.oldest + 1 > max {
                        self.batch
                            .remove(Table::Versions, version_key(k, meta.oldest));
                        meta.oldest += 1;
                    }
                }
            }
            KeyspaceMode::Latest => {
                if stored_any {
                    self.remove_versions(k, meta.oldest, meta.latest);
                }
                meta.oldest = version;
                self.batch
                    .put(Table::Versions, version_key(k, version), encode(&record));
            }
            KeyspaceMode::Notify => {
                if stored_any {
                    self.remove_versions(k, meta.oldest, meta.latest);
                }
                meta.oldest = version + 1;
            }
        }
        let now_live = record.value.is_some();
        meta.latest = version;
        meta.latest_ts = self.ts;
        meta.latest_deleted = !now_live;
        self.set_meta(k, meta);
        self.live_delta += now_live as i64 - existed as i64;
        self.events.push(WatchEvent {
            key: key.clone(),
            info: record.into_info(version),
        });
        Ok(Written {
            key: key.clone(),
            version,
            commit_ts: self.ts,
            existed,
            previous,
        })
    }

    fn remove_versions(&mut self, key: &[u8], from: Version, to: Version) {
        for v in from..=to {
            self.batch.remove(Table::Versions, version_key(key, v));
        }
    }

    /// Drops stored versions before `before`, never the newest.
    fn truncate_key(&mut self, key: &[u8], before: TruncateBefore) -> Result<u64, FirnError> {
        let mut meta = self.meta(key)?;
        if meta.latest == 0 || meta.oldest >= meta.latest {
            return Ok(0);
        }
        let bound = match before {
            TruncateBefore::Version(v) => v.min(meta.latest),
            TruncateBefore::Time(t) => {
                let older =
                    self.store
                        .records(key, meta.oldest, meta.latest - 1, false, usize::MAX)?;
                older
                    .iter()
                    .take_while(|i| i.commit_ts < t)
                    .last()
                    .map_or(meta.oldest, |i| i.version + 1)
            }
        };
        if bound <= meta.oldest {
            return Ok(0);
        }
        let removed = bound - meta.oldest;
        self.remove_versions(key, meta.oldest, bound - 1);
        meta.oldest = bound;
        self.set_meta(key, meta);
        Ok(removed)
    }
}
