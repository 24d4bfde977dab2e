//! Apply of one command: its changes are buffered in a [`Txn`] and committed by
//! [`VersionedStore::apply_batch`](super::VersionedStore::apply_batch). Apply reads only the
//! store and the command (never a clock, the network or randomness), so every replica
//! reaches the same state.

use firn_model::KvWrite;
use std::collections::HashMap;
use std::ops::Bound;

use bytes::Bytes;
use firn_model::limits::KEYSPACES_MAX;
use firn_model::{
    CommitTs, FirnError, Key, KeyKind, KeyspaceMode, KeyspaceSpec, Lifetime, PutRequest, Response,
    Version, WatchEvent, WriteCondition, Written,
};

use super::expiry::Ends;
use super::{BULK_BATCH_WRITES_MAX, VersionedStore, WALK_PAGE, io_err, prefix_end};
use crate::backend::{Batch, Table};
use crate::command::{LogOp, Op, SystemOp};
use crate::record::{KeyMeta, Stored, VersionRecord, encode, version_key};

/// How far a batch's queued changes went, to drop what came after.
#[derive(Clone, Copy)]
pub(super) struct Mark {
    batch: usize,
    events: usize,
    live_delta: i64,
    held: usize,
    metas: usize,
}

/// One command's changes, buffered until they commit as one batch.
pub(super) struct Txn<'a> {
    pub(super) store: &'a VersionedStore,
    pub(super) ts: CommitTs,
    pub(super) batch: Batch,
    /// Metas changed by the batch's commands (and some read by them), read back before the
    /// batch commits.
    metas: HashMap<Vec<u8>, KeyMeta>,
    /// What each change to `metas` replaced, newest last: [`Txn::back_to`] undoes them.
    meta_undo: Vec<(Vec<u8>, Option<KeyMeta>)>,
    /// Inside a transaction (`KvWrite::Atomic`) only: the versions its steps wrote, by
    /// versions-table key, so that a later step reads them before they are in storage.
    /// Outside one, no command reads a version an earlier write of its batch made.
    pub(super) written: Option<HashMap<Vec<u8>, VersionRecord>>,
    /// Log tag metadata changed by this command (see [`super::log`]); `None`: removed.
    pub(super) tag_metas: HashMap<Vec<u8>, Option<super::log::TagMeta>>,
    /// Logs this command has marked as existing.
    pub(super) logs_noted: std::collections::HashSet<Vec<u8>>,
    pub(super) events: Vec<WatchEvent>,
    pub(super) live_delta: i64,
    pub(super) keyspaces_changed: bool,
    /// What the batch's commands changed in what transactions hold here (see
    /// [`super::txn`]); applied once the batch is written.
    pub(super) held_changes: Vec<super::txn::HeldChange>,
    /// `System` rows written (`None`: removed) that stay whatever a command's outcome (the
    /// answers of idempotent writes, see [`super::once`]), in view for the batch's later
    /// commands and added to the batch after them.
    pub(super) kept: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Whether the command may commit in several storage batches (a bulk delete; see
    /// [`BULK_BATCH_WRITES_MAX`]). Only a command applied alone may.
    pub(super) paged: bool,
    /// Inside a transaction's steps: log records given stamps so far (the first takes the
    /// transaction's stamp, each next one the logical tick after; see
    /// [`Txn::record_stamp`]).
    pub(super) records_stamped: u32,
}

impl<'a> Txn<'a> {
    /// `ts` is the stamp of the entry before; each command raises it.
    pub(super) fn new(store: &'a VersionedStore, ts: CommitTs) -> Self {
        Txn {
            store,
            ts,
            batch: Batch::default(),
            metas: HashMap::new(),
            meta_undo: Vec::new(),
            written: None,
            tag_metas: HashMap::new(),
            logs_noted: Default::default(),
            events: Vec::new(),
            live_delta: 0,
            keyspaces_changed: false,
            held_changes: Vec::new(),
            kept: HashMap::new(),
            paged: false,
            records_stamped: 0,
        }
    }

    /// A `System` row as this batch leaves it (its kept rows first).
    pub(super) fn system_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, FirnError> {
        match self.kept.get(key) {
            Some(row) => Ok(row.clone()),
            None => self.store.system_get(key),
        }
    }

    /// Keeps `System` row `key` = `value`, whatever the command's outcome.
    pub(super) fn system_put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.kept.insert(key, Some(value));
    }

    pub(super) fn system_remove(&mut self, key: Vec<u8>) {
        self.kept.insert(key, None);
    }

    /// The first `n` `System` rows under `prefix` (an index by age) after the one `cursor`
    /// names — where the last forgetting stopped, so that a walk never crosses the rows it
    /// removed before (deletions a table keeps until it compacts).
    pub(super) fn rows_after_cursor(
        &self,
        prefix: &[u8],
        cursor: &[u8],
        n: usize,
    ) -> Result<Vec<Vec<u8>>, FirnError> {
        let end = super::prefix_end(prefix).expect("an index prefix has an end");
        let after = self.system_get(cursor)?;
        let lower = after
            .as_deref()
            .map_or(Bound::Included(prefix), Bound::Excluded);
        Ok(self
            .store
            .backend
            .range(Table::System, lower, Bound::Excluded(&end), false, n)
            .map_err(super::io_err)?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    pub(super) fn meta(&self, key: &[u8]) -> Result<KeyMeta, FirnError> {
        if let Some(m) = self.metas.get(key) {
            return Ok(m.clone());
        }
        Ok(self.store.meta(key)?.unwrap_or(KeyMeta {
            oldest: 1,
            ..KeyMeta::default()
        }))
    }

    /// A stored version of `key`, as this command's writes so far leave it (a transaction's
    /// later step reads what an earlier one wrote, though it is not in storage yet).
    pub(super) fn record(
        &self,
        key: &[u8],
        version: Version,
    ) -> Result<Option<VersionRecord>, FirnError> {
        let written = self
            .written
            .as_ref()
            .and_then(|w| w.get(&version_key(key, version)));
        match written {
            Some(record) => Ok(Some(record.clone())),
            None => self.store.record(key, version),
        }
    }

    /// Queues `record` as `key`'s version `version` (and keeps it for later steps of a
    /// transaction).
    fn put_record(&mut self, key: &[u8], version: Version, record: &VersionRecord) {
        let at = version_key(key, version);
        if let Some(written) = self.written.as_mut() {
            written.insert(at.clone(), record.clone());
        }
        self.batch.put(Table::Versions, at, encode(record));
    }

    /// What a delete of a key with no live value answers: nothing written.
    pub(super) fn unwritten(&self, key: &Key, meta: &KeyMeta) -> Written {
        Written {
            key: key.clone(),
            version: meta.latest,
            commit_ts: meta.latest_ts,
            existed: false,
            previous: None,
            durability: self.store.keyspace_durability(key.as_bytes()),
        }
    }

    /// Where the command's queued changes stand, to go back to ([`Txn::back_to`]).
    pub(super) fn mark(&self) -> Mark {
        Mark {
            batch: self.batch.len(),
            events: self.events.len(),
            live_delta: self.live_delta,
            held: self.held_changes.len(),
            metas: self.meta_undo.len(),
        }
    }

    /// Drops every change queued since `mark` (but the kept rows: see [`Txn::kept`]).
    pub(super) fn back_to(&mut self, mark: Mark) {
        self.batch.truncate(mark.batch);
        self.events.truncate(mark.events);
        self.live_delta = mark.live_delta;
        self.held_changes.truncate(mark.held);
        while self.meta_undo.len() > mark.metas {
            let (key, before) = self.meta_undo.pop().expect("longer than the mark");
            match before {
                Some(meta) => self.metas.insert(key, meta),
                None => self.metas.remove(&key),
            };
        }
    }

    /// Runs `f`, then drops everything it queued: what a transaction's prepare learns
    /// (its steps' answers) without writing it.
    pub(super) fn dry_run<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let mark = self.mark();
        // What `back_to` does not undo: the stamp (raised past a transaction's records)
        // and the log's metadata in view (a tag's last seq, read by a stream's next id).
        let (ts, tag_metas) = (self.ts, self.tag_metas.clone());
        let out = f(self);
        self.back_to(mark);
        (self.ts, self.tag_metas) = (ts, tag_metas);
        out
    }

    /// Keeps `meta`, as read, in view for the batch's later reads of it (every change to
    /// it goes through [`Txn::set_meta`], which replaces it).
    pub(super) fn cache_meta(&mut self, key: &[u8], meta: KeyMeta) {
        let before = self.metas.insert(key.to_vec(), meta);
        self.meta_undo.push((key.to_vec(), before));
    }

    pub(super) fn set_meta(&mut self, key: &[u8], meta: KeyMeta) {
        self.batch.put(Table::KeyMeta, key.to_vec(), encode(&meta));
        self.cache_meta(key, meta);
    }

    pub(super) fn run(&mut self, op: &Op) -> Result<Response, FirnError> {
        self.paged = is_bulk(op);
        // Every key first: a refusal must come before anything is written.
        self.check_lanes(op)?;
        self.check_unheld(op)?;
        self.write_down_named(op)?;
        match op {
            Op::Kv(write) => self.kv(write),
            Op::Log(log) => self.log(log),
            Op::Group { key, group, change } => self.group_change(key, group, change),
            Op::System(system) => self.system(system),
            Op::Txn(txn) => self.txn(txn),
            Op::Once { key, op } => self.once(key, op),
        }
    }

    pub(super) fn kv(&mut self, write: &KvWrite) -> Result<Response, FirnError> {
        match write {
            KvWrite::Put(p) => self.put(p, Stored::Inline(p.value.clone())),
            KvWrite::Expire { key, to, only } => self.expire(key, *to, *only),
            KvWrite::Lease(lease) => self.lease(lease),
            KvWrite::PutBlob { put, blob } => self.put(put, Stored::Blob(blob.clone())),
            KvWrite::MSet { items } => self.mset(items),
            KvWrite::Change { key, change } => self.change(key, change),
            KvWrite::Atomic {
                compares,
                steps,
                otherwise,
            } => self.atomic(compares, steps, otherwise.as_deref()),
            KvWrite::Delete { keys } => self.delete(keys),
            KvWrite::Truncate { target, before } => self.truncate(target, *before),
            KvWrite::FlushAll => self.flush_all(),
        }
    }

    pub(super) fn log(&mut self, log: &LogOp) -> Result<Response, FirnError> {
        match log {
            LogOp::Append {
                log,
                home,
                records,
                stream,
            } => self.log_append(log, *home, records, stream.as_ref()),
            LogOp::Ensure { log, tag, home } => self.log_ensure(log, tag.as_ref(), *home),
            LogOp::Trim { log, tag, before } => self.log_trim(log, tag.as_ref(), *before),
            LogOp::StreamTrim { key, trim } => self.stream_trim(key, *trim),
            LogOp::StreamDel { key, ids } => self.stream_del(key, ids),
        }
    }

    fn system(&mut self, system: &SystemOp) -> Result<Response, FirnError> {
        match system {
            SystemOp::ExpireByAge => self.expire_by_age(),
            SystemOp::KeyspaceCreate(spec) => self.create_keyspace(spec),
            SystemOp::KeyspaceDrop { prefix } => self.drop_keyspace(prefix),
            SystemOp::CloseTime => Ok(Response::Done),
            SystemOp::ExpireDue => self.expire_due(),
            SystemOp::Watermark(op) => self.watermark(op),
        }
    }

    /// Refuses the command if any key it writes is routed to the wrong shard lane (see
    /// [`VersionedStore::in_lane`]).
    fn check_lanes(&self, op: &Op) -> Result<(), FirnError> {
        match op {
            Op::Kv(
                write @ (KvWrite::Put(_)
                | KvWrite::PutBlob { .. }
                | KvWrite::MSet { .. }
                | KvWrite::Change { .. }
                | KvWrite::Atomic { .. }
                | KvWrite::Delete { .. }
                | KvWrite::Expire { .. }
                | KvWrite::Lease(_)),
            ) => write
                .keys()
                .try_for_each(|key| self.store.in_lane(key.as_bytes())),
            _ => Ok(()),
        }
    }

    /// SET: one version of one key, under the request's condition.
    fn put(&mut self, put: &PutRequest, value: Stored) -> Result<Response, FirnError> {
        let w = self.write_version(
            &put.key,
            value,
            put.event_time_us,
            put.condition,
            put.return_previous,
            put.life,
        )?;
        Ok(Response::Written(vec![w]))
    }

    /// MSET: a version of each key, unconditionally.
    fn mset(&mut self, items: &[(Key, Bytes)]) -> Result<Response, FirnError> {
        let mut out = Vec::with_capacity(items.len());
        for (key, value) in items {
            out.push(self.write_version(
                key,
                Stored::Inline(value.clone()),
                None,
                WriteCondition::Always,
                false,
                Lifetime::Default,
            )?);
        }
        Ok(Response::Written(out))
    }

    /// DEL: a tombstone for each live key.
    fn delete(&mut self, keys: &[Key]) -> Result<Response, FirnError> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            // Deleting an absent key writes nothing (Redis DEL semantics).
            let meta = self.meta(key.as_bytes())?;
            if !meta.is_live() {
                out.push(self.unwritten(key, &meta));
                continue;
            }
            out.push(self.write_tombstone(key)?);
        }
        Ok(Response::Written(out))
    }

    /// Defines a keyspace, or redefines one, within [`KEYSPACES_MAX`].
    fn create_keyspace(&mut self, spec: &KeyspaceSpec) -> Result<Response, FirnError> {
        spec.validate()?;
        let existing = self.store.keyspaces();
        if !existing.iter().any(|s| s.prefix == spec.prefix) && existing.len() >= KEYSPACES_MAX {
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

    /// Drops a keyspace's definition (never the default one); its keys stay.
    fn drop_keyspace(&mut self, prefix: &str) -> Result<Response, FirnError> {
        if prefix.is_empty() {
            return Err(FirnError::Refused(
                "the default keyspace \"\" cannot be dropped".into(),
            ));
        }
        if !self.store.keyspaces().iter().any(|s| s.prefix == prefix) {
            return Err(FirnError::KeyspaceNotFound(prefix.to_owned()));
        }
        self.batch
            .remove(Table::Keyspaces, prefix.as_bytes().to_vec());
        self.drop_watermark(prefix)?;
        self.keyspaces_changed = true;
        Ok(Response::Done)
    }

    /// FLUSHALL. Metadata first: a key without it is gone for every read, and versions a
    /// crash leaves behind are removed when the entry is applied again. The log's records
    /// go too, as Redis's FLUSHALL drops streams; what survives is in
    /// `super::log::after_flush`.
    fn flush_all(&mut self) -> Result<Response, FirnError> {
        for table in [
            Table::KeyMeta,
            Table::Versions,
            Table::LogEntries,
            Table::LogTags,
            Table::Logs,
            Table::Groups,
            Table::GroupPending,
            Table::GroupConsumers,
            Table::GroupKeys,
            Table::EventIndex,
        ] {
            self.flush_table(table)?;
        }
        Ok(Response::Done)
    }

    /// Removes every row of `table` (or rewrites what `super::log::after_flush` keeps), a
    /// page at a time.
    fn flush_table(&mut self, table: Table) -> Result<(), FirnError> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let page = self
                .store
                .backend
                .range(table, lower, Bound::Unbounded, false, WALK_PAGE)
                .map_err(io_err)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, v) in page {
                self.make_room(1)?;
                match super::log::after_flush(table, &v)? {
                    Some(kept) => self.batch.put(table, k, kept),
                    None => self.batch.remove(table, k),
                }
            }
        }
    }

    /// Runs `each` on every key under `prefix` in key order, reading the keys a page at a
    /// time (never the whole keyspace at once); returns the sum of what `each` returned.
    pub(super) fn walk_keys_under(
        &mut self,
        prefix: &[u8],
        mut each: impl FnMut(&mut Self, &[u8]) -> Result<u64, FirnError>,
    ) -> Result<u64, FirnError> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut after: Option<Vec<u8>> = None;
        let mut total = 0;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(prefix), Bound::Excluded);
            let page = self
                .store
                .backend
                .range(Table::KeyMeta, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            let done = page.len() < WALK_PAGE;
            for (key, _) in &page {
                total += each(self, key)?;
            }
            match page.into_iter().next_back() {
                Some((last, _)) if !done => after = Some(last),
                _ => return Ok(total),
            }
        }
    }

    /// Makes room for `writes` more writes in the current storage batch, writing out what
    /// is queued when they would not fit. Only a bulk delete may commit in several batches:
    /// the caller's bookkeeping (the applied position) goes in the last one, so a crash in
    /// between applies the whole command again, and each batch leaves every key it touched
    /// consistent (its metadata names a stored oldest version), so that replay finds the
    /// same keys to finish.
    pub(super) fn make_room(&mut self, writes: usize) -> Result<(), FirnError> {
        assert!(self.paged, "only a bulk delete commits in several batches");
        assert!(writes <= BULK_BATCH_WRITES_MAX);
        if self.batch.len() + writes <= BULK_BATCH_WRITES_MAX {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.store.backend.write(batch).map_err(io_err)?;
        // What the overlay held is in storage now.
        self.metas.clear();
        self.meta_undo.clear();
        self.tag_metas.clear();
        Ok(())
    }

    /// A tombstone: the key's next version, deleting it, stamped at the entry's stamp.
    pub(super) fn write_tombstone(&mut self, key: &Key) -> Result<Written, FirnError> {
        self.write_version(
            key,
            Stored::Tombstone,
            None,
            WriteCondition::Always,
            false,
            Lifetime::Default,
        )
    }

    /// A new version of `key` stamped at the entry's stamp, ending as `life` says (a
    /// tombstone ends nothing), under `condition`.
    pub(super) fn write_version(
        &mut self,
        key: &Key,
        value: Stored,
        event_time_us: Option<u64>,
        condition: WriteCondition,
        return_previous: bool,
        life: Lifetime,
    ) -> Result<Written, FirnError> {
        let k = key.as_bytes();
        let spec = self.store.keyspace_for(k);
        let correction = self.check_late(&spec.prefix, event_time_us)?;
        let mut meta = self.meta(k)?;
        let existed = meta.is_live();
        let was = meta.live_kind();
        // `SET … GET` and `GETSET` read the value they replace: a key of another type has
        // none (Redis refuses them, and the write with them).
        if return_previous && was.is_some_and(|kind| kind != KeyKind::String) {
            return Err(FirnError::WrongType);
        }
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
                        .record(k, meta.latest)?
                        .map(|r| r.into_info(meta.latest)),
                    durability: spec.durability,
                });
            }
            return Err(FirnError::Conflict {
                current: meta.latest,
            });
        }
        let previous = if return_previous && stored_any {
            self.record(k, meta.latest)?
                .map(|r| r.into_info(meta.latest))
        } else {
            None
        };
        if was == Some(KeyKind::Stream) && value.kind() != KeyKind::Stream {
            // Any other version ends the stream (Redis's SET replaces a key of any type).
            self.drop_stream(key)?;
        }
        let was_ends = Ends {
            expires: meta.expires,
            lease: meta.lease,
        };
        let (value, ends) = match self.ends_of(&spec, &meta, life) {
            _ if value.is_tombstone() => (value, Ends::default()),
            Some(ends) => (value, ends),
            // An expiry at or before the write: the key is deleted (Redis's `SET … EXAT`).
            None => (Stored::Tombstone, Ends::default()),
        };
        self.index_ends(k, was_ends, ends);
        meta.expires = ends.expires;
        meta.lease = ends.lease;
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
                self.put_record(k, version, &record);
                self.index_event_time(k, version, record.event_time_us, correction);
                if let Some(max) = spec.max_versions
                    && version - meta.oldest + 1 > max
                {
                    let keep_from = version + 1 - max;
                    self.remove_indexed_versions(k, meta.oldest, keep_from - 1)?;
                    meta.oldest = keep_from;
                }
            }
            KeyspaceMode::Latest => {
                if stored_any {
                    self.remove_versions(k, meta.oldest, meta.latest);
                }
                meta.oldest = version;
                self.put_record(k, version, &record);
            }
            KeyspaceMode::Notify => {
                if stored_any {
                    self.remove_versions(k, meta.oldest, meta.latest);
                }
                meta.oldest = version + 1;
            }
        }
        let now_live = !record.value.is_tombstone();
        meta.latest = version;
        meta.latest_ts = self.ts;
        meta.latest_deleted = !now_live;
        meta.kind = record.value.kind();
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
            durability: spec.durability,
        })
    }

    pub(super) fn remove_versions(&mut self, key: &[u8], from: Version, to: Version) {
        for v in from..=to {
            self.batch.remove(Table::Versions, version_key(key, v));
        }
    }
}

/// Whether `op` is a bulk delete: it may touch every key of the shard, so it commits in
/// batches of at most [`BULK_BATCH_WRITES_MAX`] writes rather than in one.
fn is_bulk(op: &Op) -> bool {
    if let Op::Once { op, .. } = op {
        return is_bulk(op);
    }
    matches!(
        op,
        Op::Kv(KvWrite::FlushAll)
            | Op::Kv(KvWrite::Truncate { .. })
            | Op::System(SystemOp::ExpireByAge)
            | Op::Log(LogOp::Trim { .. })
            | Op::Log(LogOp::StreamTrim { .. })
    )
}
