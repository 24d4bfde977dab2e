//! The small storage trait the state machine runs on, with two implementations: fjall (on
//! disk, the default) and an ordered in-memory map (tests and `--in-memory`).
//!
//! A backend stores ordered byte tables and applies a [`Batch`] atomically. It knows nothing
//! of versions, keys or Raft.

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, Readable};
use serde::{Deserialize, Serialize};

use crate::journal_sync::JournalSync;
use crate::memtable_reaper::{self, MemtableWatch};

/// The state machine's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Table {
    /// user key → [`crate::record::KeyMeta`]
    KeyMeta,
    /// encoded (key, version) → [`crate::record::VersionRecord`]
    Versions,
    /// keyspace prefix → [`firn_model::KeyspaceSpec`]
    Keyspaces,
    /// bookkeeping: applied log position, last commit timestamp, live key count
    System,
    /// encoded (log, tag, seq) → [`crate::store::log::StoredEntry`]: a record's copy under
    /// each of its tags, in the shard that stores it
    LogEntries,
    /// encoded (log, tag) → [`crate::store::log::TagMeta`]
    LogTags,
    /// log name → [`crate::store::log::LogMeta`]
    Logs,
    /// encoded (stream, group) → [`crate::store::group::GroupMeta`]
    Groups,
    /// encoded (stream, group, seq) → [`crate::store::group::PendingEntry`]: a group's
    /// pending entries list, in id order
    GroupPending,
    /// encoded (stream, group, consumer) → [`crate::store::group::ConsumerMeta`]
    GroupConsumers,
    /// encoded (stream, group, key hash) → [`crate::store::group::KeyHolder`]: which
    /// consumer of an `hrw` group holds entries of a key, and how many
    GroupKeys,
    /// encoded (key, event time, version) → nothing: the versions of a versioned keyspace's
    /// keys that carry an event time, in event-time order (`crate::store::event_index`)
    EventIndex,
}

/// How many tables a state machine has.
pub const TABLES: usize = 12;

impl Table {
    pub const ALL: [Table; TABLES] = [
        Table::KeyMeta,
        Table::Versions,
        Table::Keyspaces,
        Table::System,
        Table::LogEntries,
        Table::LogTags,
        Table::Logs,
        Table::Groups,
        Table::GroupPending,
        Table::GroupConsumers,
        Table::GroupKeys,
        Table::EventIndex,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// The table's tag in a dump stream.
    pub(crate) fn tag(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_tag(tag: u8) -> Option<Table> {
        Table::ALL.get(usize::from(tag)).copied()
    }

    /// The fjall keyspace holding this table for the state machine `namespace` (one per
    /// shard replica, so that several share a database).
    fn fjall_name(self, namespace: &str) -> String {
        let table = match self {
            Table::KeyMeta => "key_meta",
            Table::Versions => "versions",
            Table::Keyspaces => "keyspaces",
            Table::System => "system",
            Table::LogEntries => "log_entries",
            Table::LogTags => "log_tags",
            Table::Logs => "logs",
            Table::Groups => "groups",
            Table::GroupPending => "group_pending",
            Table::GroupConsumers => "group_consumers",
            Table::GroupKeys => "group_keys",
            Table::EventIndex => "event_index",
        };
        format!("{namespace}_{table}")
    }
}

/// Writes applied together or not at all.
#[derive(Debug, Default)]
pub struct Batch {
    ops: Vec<(Table, Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    pub fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push((table, key, Some(value)));
    }

    pub fn remove(&mut self, table: Table, key: Vec<u8>) {
        self.ops.push((table, key, None));
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// The keys of `table` starting with `prefix` that this batch puts (a removal queued
    /// after them included: removing one twice is harmless).
    pub fn queued_puts_under(&self, table: Table, prefix: &[u8]) -> Vec<Vec<u8>> {
        self.ops
            .iter()
            .filter(|(t, k, v)| *t == table && v.is_some() && k.starts_with(prefix))
            .map(|(_, k, _)| k.clone())
            .collect()
    }

    /// Drops every write queued after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.ops.truncate(len);
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

pub type Pair = (Vec<u8>, Vec<u8>);

/// A whole-state copy held in memory: for tests and small comparisons. A Raft snapshot
/// never takes this form; it streams through [`StorageBackend::dump_each`] and
/// [`StorageBackend::load_each`].
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    pub tables: Vec<(Table, Vec<Pair>)>,
}

/// One pair of a table, as a dump carries it.
pub type TablePair = (Table, Vec<u8>, Vec<u8>);

/// What [`StorageBackend::dump_each`] hands each pair to (table, key, value).
pub type PairVisitor<'a> = dyn FnMut(Table, &[u8], &[u8]) -> io::Result<()> + 'a;

/// Most bytes (keys and values) one write of [`StorageBackend::load_each`] holds: bounds a
/// load's memory whatever the dump's size, and is large enough that a batch's fixed cost
/// is small beside its writes.
pub const LOAD_BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

/// A consistent cut of a backend's tables: it reads them as they were when it was taken,
/// however long it is held and whatever is written since. While held it keeps what it sees
/// from being dropped (fjall keeps the versions it covers through compactions), so it is
/// held only while it is read: a snapshot being sent.
pub trait TableCut: Send + Sync + 'static {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>>;

    /// Hands `visit` every pair of the cut, table by table in [`Table::ALL`] order,
    /// ascending.
    fn dump_each(&self, visit: &mut PairVisitor<'_>) -> io::Result<()>;
}

/// Ordered byte tables with atomic batches.
pub trait StorageBackend: Send + Sync + 'static {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>>;

    /// Up to `limit` pairs in `(lower, upper)`, ascending, or descending when `reverse`.
    fn range(
        &self,
        table: Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> io::Result<Vec<Pair>>;

    fn write(&self, batch: Batch) -> io::Result<()>;

    /// Makes every write so far durable (fsync).
    fn persist(&self) -> io::Result<()>;

    /// Whether the tables outlive the process once [`Self::persist`]ed. A Raft snapshot of
    /// such tables is the tables themselves: no copy is written until one is sent.
    fn is_durable(&self) -> bool;

    /// A consistent cut of the tables, held to be read now or later.
    fn cut(&self) -> io::Result<Arc<dyn TableCut>>;

    /// Hands `visit` every pair of a consistent cut of the tables, table by table in
    /// [`Table::ALL`] order, ascending: the cut is taken when the walk starts, and writes
    /// made during it are not seen.
    fn dump_each(&self, visit: &mut PairVisitor<'_>) -> io::Result<()> {
        self.cut()?.dump_each(visit)
    }

    /// Replaces every table with the pairs `next` yields until it yields `None`, written in
    /// batches of at most [`LOAD_BATCH_BYTES_MAX`], then made durable. An error from `next`
    /// stops the load with the tables part-written: the caller checks the source first.
    fn load_each(&self, next: &mut dyn FnMut() -> io::Result<Option<TablePair>>) -> io::Result<()>;

    /// Every table in memory (tests and small comparisons).
    fn dump(&self) -> io::Result<Dump> {
        let mut tables: Vec<(Table, Vec<Pair>)> =
            Table::ALL.iter().map(|t| (*t, Vec::new())).collect();
        self.dump_each(&mut |table, k, v| {
            tables[table.index()].1.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        Ok(Dump { tables })
    }

    /// Replaces every table with an in-memory dump's contents (tests).
    fn load(&self, dump: Dump) -> io::Result<()> {
        let mut pairs = dump
            .tables
            .into_iter()
            .flat_map(|(t, pairs)| pairs.into_iter().map(move |(k, v)| (t, k, v)));
        self.load_each(&mut || Ok(pairs.next()))
    }
}

/// Ordered in-memory tables; nothing survives a restart.
#[derive(Default)]
pub struct MemoryBackend {
    tables: RwLock<[BTreeMap<Vec<u8>, Vec<u8>>; TABLES]>,
}

fn owned(bound: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(b) => Bound::Included(b.to_vec()),
        Bound::Excluded(b) => Bound::Excluded(b.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `BTreeMap::range` panics on an empty or inverted range; an empty result is the answer.
fn is_empty_range(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l), Bound::Excluded(u))
        | (Bound::Excluded(l), Bound::Included(u))
        | (Bound::Excluded(l), Bound::Excluded(u)) => l >= u,
        _ => false,
    }
}

impl StorageBackend for MemoryBackend {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let tables = self.tables.read().unwrap_or_else(|p| p.into_inner());
        Ok(tables[table.index()].get(key).cloned())
    }

    fn range(
        &self,
        table: Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> io::Result<Vec<Pair>> {
        let (lower, upper) = (owned(lower), owned(upper));
        if is_empty_range(&lower, &upper) {
            return Ok(Vec::new());
        }
        let tables = self.tables.read().unwrap_or_else(|p| p.into_inner());
        let iter = tables[table.index()].range((lower, upper));
        let pairs = if reverse {
            iter.rev()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        } else {
            iter.take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        Ok(pairs)
    }

    fn write(&self, batch: Batch) -> io::Result<()> {
        let mut tables = self.tables.write().unwrap_or_else(|p| p.into_inner());
        for (table, key, value) in batch.ops {
            match value {
                Some(v) => tables[table.index()].insert(key, v),
                None => tables[table.index()].remove(&key),
            };
        }
        Ok(())
    }

    fn persist(&self) -> io::Result<()> {
        Ok(())
    }

    fn is_durable(&self) -> bool {
        false
    }

    fn cut(&self) -> io::Result<Arc<dyn TableCut>> {
        // A copy taken under the lock: everything here is in memory already, and writers
        // must not wait while the cut is read (written out as a snapshot's file).
        let tables = self
            .tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(Arc::new(MemoryCut(tables)))
    }

    fn load_each(&self, next: &mut dyn FnMut() -> io::Result<Option<TablePair>>) -> io::Result<()> {
        let mut tables = self.tables.write().unwrap_or_else(|p| p.into_inner());
        for t in tables.iter_mut() {
            t.clear();
        }
        while let Some((table, k, v)) = next()? {
            tables[table.index()].insert(k, v);
        }
        Ok(())
    }
}

/// A copy of a [`MemoryBackend`]'s tables.
struct MemoryCut([BTreeMap<Vec<u8>, Vec<u8>>; TABLES]);

impl TableCut for MemoryCut {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        Ok(self.0[table.index()].get(key).cloned())
    }

    fn dump_each(&self, visit: &mut PairVisitor<'_>) -> io::Result<()> {
        for t in Table::ALL {
            for (k, v) in &self.0[t.index()] {
                visit(t, k, v)?;
            }
        }
        Ok(())
    }
}

/// The state machine's tables as fjall keyspaces in a database shared with the Raft log.
pub struct FjallBackend {
    db: Database,
    keyspaces: [Keyspace; TABLES],
    /// Makes the database's journal durable (see [`JournalSync`]).
    journal: Mutex<JournalSync>,
    /// The tables' memtables are freed off fjall's locks while this lives.
    _memtables: MemtableWatch,
}

/// Largest memtable of one table before fjall writes it out (its default is 64 MiB; a node
/// holds ten tables for each replica, so memory would grow with the replicas it holds).
const MEMTABLE_BYTES_MAX: u64 = 16 * 1024 * 1024;

fn fjall_err(e: fjall::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl FjallBackend {
    /// The tables of the state machine `namespace` in `db`, opened at `dir`.
    pub fn open(db: Database, dir: &Path, namespace: &str) -> io::Result<Self> {
        let options = || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES_MAX);
        let open = |t: Table| {
            db.keyspace(&t.fjall_name(namespace), options)
                .map_err(fjall_err)
        };
        let keyspaces = [
            open(Table::KeyMeta)?,
            open(Table::Versions)?,
            open(Table::Keyspaces)?,
            open(Table::System)?,
            open(Table::LogEntries)?,
            open(Table::LogTags)?,
            open(Table::Logs)?,
            open(Table::Groups)?,
            open(Table::GroupPending)?,
            open(Table::GroupConsumers)?,
            open(Table::GroupKeys)?,
            open(Table::EventIndex)?,
        ];
        let journal = Mutex::new(JournalSync::new(db.clone(), dir));
        let _memtables = memtable_reaper::watch(keyspaces.iter().cloned());
        Ok(FjallBackend {
            db,
            keyspaces,
            journal,
            _memtables,
        })
    }

    /// Opens (or creates) a database of its own at `path`; used by tests.
    pub fn open_path(path: &Path) -> io::Result<Self> {
        let db = Database::builder(path).open().map_err(fjall_err)?;
        Self::open(db, path, "test")
    }

    fn ks(&self, table: Table) -> &Keyspace {
        &self.keyspaces[table.index()]
    }

    /// Waits (a bounded time) while the database's memtables not yet written out hold more
    /// than [`LOAD_UNFLUSHED_BYTES_MAX`]. fjall bounds no total of its own: a load writes
    /// faster than memtables are flushed, and without this a 600 MiB load held about a
    /// quarter of it in memory (measured), growing with the dump.
    fn wait_for_flushes(&self) {
        let deadline = std::time::Instant::now() + LOAD_FLUSH_WAIT_MAX;
        while self.db.write_buffer_size() > LOAD_UNFLUSHED_BYTES_MAX
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Most bytes of memtables a load lets wait to be flushed before it writes more: a few
/// memtables ([`MEMTABLE_BYTES_MAX`]), so the flush threads always have work.
const LOAD_UNFLUSHED_BYTES_MAX: u64 = 4 * MEMTABLE_BYTES_MAX;
/// Longest a load waits for flushes after one batch: a flush of a memtable takes
/// milliseconds, so a wait this long means none is coming and the load goes on.
const LOAD_FLUSH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

impl StorageBackend for FjallBackend {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        Ok(self
            .ks(table)
            .get(key)
            .map_err(fjall_err)?
            .map(|v| v.to_vec()))
    }

    fn range(
        &self,
        table: Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> io::Result<Vec<Pair>> {
        let (lower, upper) = (owned(lower), owned(upper));
        if is_empty_range(&lower, &upper) {
            return Ok(Vec::new());
        }
        let iter = self.ks(table).range::<Vec<u8>, _>((lower, upper));
        let mut pairs = Vec::new();
        let mut push = |guard: fjall::Guard| -> io::Result<bool> {
            let (k, v) = guard.into_inner().map_err(fjall_err)?;
            pairs.push((k.to_vec(), v.to_vec()));
            Ok(pairs.len() < limit)
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        if reverse {
            for g in iter.rev() {
                if !push(g)? {
                    break;
                }
            }
        } else {
            for g in iter {
                if !push(g)? {
                    break;
                }
            }
        }
        Ok(pairs)
    }

    fn write(&self, batch: Batch) -> io::Result<()> {
        let mut wb = self.db.batch();
        for (table, key, value) in batch.ops {
            match value {
                Some(v) => wb.insert(self.ks(table), key, v),
                None => wb.remove(self.ks(table), key),
            }
        }
        wb.commit().map_err(fjall_err)
    }

    fn persist(&self) -> io::Result<()> {
        // Not `persist(SyncAll)`: that holds the journal's lock through the fsync, and every
        // apply of the database's groups would wait it out (a snapshot's fsync writes out all
        // the state applied since the last one).
        self.journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sync()
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn cut(&self) -> io::Result<Arc<dyn TableCut>> {
        Ok(Arc::new(FjallCut {
            snapshot: self.db.snapshot(),
            keyspaces: self.keyspaces.clone(),
        }))
    }

    fn load_each(&self, next: &mut dyn FnMut() -> io::Result<Option<TablePair>>) -> io::Result<()> {
        for t in Table::ALL {
            self.ks(t).clear().map_err(fjall_err)?;
        }
        let mut wb = self.db.batch();
        let mut batch_bytes = 0usize;
        while let Some((table, k, v)) = next()? {
            batch_bytes += k.len() + v.len();
            wb.insert(self.ks(table), k, v);
            if batch_bytes >= LOAD_BATCH_BYTES_MAX {
                std::mem::replace(&mut wb, self.db.batch())
                    .commit()
                    .map_err(fjall_err)?;
                batch_bytes = 0;
                self.wait_for_flushes();
            }
        }
        wb.commit().map_err(fjall_err)?;
        self.persist()
    }
}

/// A fjall snapshot (a sequence number the database's reads stop at) of a backend's
/// keyspaces.
struct FjallCut {
    snapshot: fjall::Snapshot,
    keyspaces: [Keyspace; TABLES],
}

impl TableCut for FjallCut {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        Ok(self
            .snapshot
            .get(&self.keyspaces[table.index()], key)
            .map_err(fjall_err)?
            .map(|v| v.to_vec()))
    }

    fn dump_each(&self, visit: &mut PairVisitor<'_>) -> io::Result<()> {
        for t in Table::ALL {
            for guard in self.snapshot.iter(&self.keyspaces[t.index()]) {
                let (k, v) = guard.into_inner().map_err(fjall_err)?;
                visit(t, &k, &v)?;
            }
        }
        Ok(())
    }
}
