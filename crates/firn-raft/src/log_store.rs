//! The Raft log on fjall. A disk group's log commits in groups: appends go to fjall's
//! journal at once, and one syncer thread fsyncs for every append that arrived while the
//! previous fsync ran, then reports them all flushed; a write is acknowledged only after its
//! entry's fsync. A memory group's log reports an append flushed as soon as it is in memory
//! (fjall's memtable, and the journal handed to the OS without an fsync), and a checkpoint
//! thread fsyncs its database in the background (see [`Checkpoints`]).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_store::journal_sync::JournalSync;
use firn_store::memtable_reaper::{self, MemtableWatch};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use openraft::alias::OneshotOf;
use openraft::async_runtime::Oneshot;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use tokio::sync::mpsc;

use crate::log_tail::LogTail;
use crate::stages::{self, STAGES};
use crate::types::{Entry, FirnRaft, LogId, Vote};

const META_VOTE: &[u8] = b"vote";
const META_COMMITTED: &[u8] = b"committed";
const META_LAST_PURGED: &[u8] = b"last_purged";

/// Most log entries one batch of a purge removes (see `purge` below): a batch holds the log
/// database's journal lock while its tombstones go in (a memtable insert each, about a
/// microsecond: `firn-store`'s `examples/apply_cost`).
const PURGE_BATCH_ENTRIES: usize = 1_024;

/// One purge at a time in the process removes entries, each taking at most half a core (it
/// sleeps after each batch as long as the batch took). Purges are background work, and under
/// an even load every group of a node reaches its snapshot at once: on the 2-core machine
/// nine purges at once (3 groups on each of 3 nodes) held puts for up to ~300 ms.
static PURGE_TURN: Mutex<()> = Mutex::new(());

/// Largest memtable of a group's log before fjall writes it out (its default is 64 MiB per
/// group; entries are purged after each snapshot anyway).
const LOG_MEMTABLE_BYTES_MAX: u64 = 16 * 1024 * 1024;

fn fjall_err(e: fjall::Error) -> io::Error {
    io::Error::other(e.to_string())
}

fn codec_err(e: postcard::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Whether the log store fsyncs. Only `--in-memory` test nodes turn it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    Always,
    Never,
}

#[derive(Clone)]
pub struct FjallLogStore {
    db: Database,
    log: Keyspace,
    meta: Keyspace,
    flush: Flush,
    /// The newest entries, shared with this log's readers: an append adds its entries just
    /// before they go into the database, a truncation cuts them (its lock held while the
    /// database changes), a purge drops them.
    tail: Arc<Mutex<LogTail>>,
    /// The committed log id openraft last reported and no append has written yet (see
    /// [`RaftLogStorage::save_committed`] below).
    unsaved_committed: Option<Option<LogId>>,
    /// The log's memtables are freed off fjall's locks while a clone of this store lives.
    _memtables: Arc<MemtableWatch>,
}

/// When a group's appends count as flushed (and so may be acknowledged).
#[derive(Clone)]
pub enum Flush {
    /// After the group commit's fsync (`disk` durability).
    Fsync(Arc<GroupCommit>),
    /// Once in memory; fsync'd by the next checkpoint (`memory` durability).
    Memory(Arc<Checkpoints>),
}

/// The background fsync of the memory groups' log database: every `every`, if anything was
/// appended since the last one. Each append is handed to the OS as it is made, so a killed
/// process loses nothing; a crash of the machine (power, kernel) loses at most what was
/// appended since the last checkpoint began. `firn_memory_checkpoint_seconds` times each.
pub struct Checkpoints {
    dirty: AtomicBool,
    /// Makes the memory log database's journal durable: each checkpoint and each vote call
    /// it (see [`Checkpoints::sync_now`]).
    sync: Mutex<Box<dyn FnMut() -> io::Result<()> + Send>>,
}

impl Checkpoints {
    /// `dir` is the folder `db` was opened at.
    /// With `Fsync::Never` (an in-memory node) there is nothing to make durable: no thread
    /// runs, and no checkpoint is timed.
    pub fn start(db: Database, dir: &Path, every: Duration, fsync: Fsync) -> io::Result<Arc<Self>> {
        match fsync {
            Fsync::Always => {
                let mut journal = JournalSync::new(db, dir);
                Self::start_with(every, move || journal.sync())
            }
            Fsync::Never => Ok(Arc::new(Checkpoints {
                dirty: AtomicBool::new(false),
                sync: Mutex::new(Box::new(|| Ok(()))),
            })),
        }
    }

    /// Starts the checkpoint thread, which calls `sync` every `every` if anything was
    /// appended since the last call.
    fn start_with(
        every: Duration,
        sync: impl FnMut() -> io::Result<()> + Send + 'static,
    ) -> io::Result<Arc<Self>> {
        let this = Arc::new(Checkpoints {
            dirty: AtomicBool::new(false),
            sync: Mutex::new(Box::new(sync)),
        });
        let weak = Arc::downgrade(&this);
        std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(move || {
                while let Some(this) = weak.upgrade() {
                    if this.dirty.swap(false, Ordering::AcqRel) {
                        let started = Instant::now();
                        if let Err(e) = this.sync_now() {
                            tracing::error!("memory log checkpoint failed: {e}");
                            this.dirty.store(true, Ordering::Release);
                        }
                        stages::since(&STAGES.checkpoint, started);
                    }
                    drop(this);
                    std::thread::sleep(every);
                }
            })?;
        Ok(this)
    }

    /// One checkpoint now, whether or not anything was appended since the last: what a
    /// clean stop runs last, so that nothing it acknowledged waits on the thread.
    pub fn checkpoint(&self) -> io::Result<()> {
        self.dirty.store(false, Ordering::Release);
        self.sync_now()
    }

    fn appended(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Makes everything written to the memory log database so far durable, now. Not fjall's
    /// `persist(SyncAll)`, which holds the journal's lock through the fsync and so every
    /// memory group's appends with it (many groups vote at once when a node restarts).
    fn sync_now(&self) -> io::Result<()> {
        (self.sync.lock().unwrap_or_else(|p| p.into_inner()))()
    }
}

/// Most appends waiting for the next fsync, across the node's groups. Past it an append
/// waits for room (backpressure on the group's Raft core) rather than queueing without
/// bound: appends that arrive faster than the disk syncs only grow the queue and the
/// latency of every write behind them. One fsync commits them all, so 4,096 is far more
/// than a node sees in one fsync time (a few ms) at any load it can serve.
pub const GROUP_COMMIT_QUEUE_MAX: usize = 4_096;

/// Group commit for one database: every Raft group on the node appends to the same fjall
/// journal, so one thread fsyncs once for all the appends that arrived (from any group)
/// while its previous fsync ran, then reports them all flushed. Appends do not wait for an
/// fsync in progress (see [`JournalSync`]).
pub struct GroupCommit {
    tx: mpsc::Sender<Queued>,
}

/// An append's flush callback, with when it was queued.
type Queued = (Instant, IOFlushed<FirnRaft>);

impl GroupCommit {
    /// `dir` is the folder `db` was opened at.
    pub fn start(db: Database, dir: &Path, fsync: Fsync) -> io::Result<Arc<Self>> {
        let mut journal = JournalSync::new(db, dir);
        Self::start_with(move || match fsync {
            Fsync::Always => journal.sync(),
            Fsync::Never => Ok(()),
        })
    }

    /// Starts the fsync thread, which calls `sync` once for every group of appends.
    fn start_with(
        mut sync: impl FnMut() -> io::Result<()> + Send + 'static,
    ) -> io::Result<Arc<Self>> {
        let name = "fsync".to_string();
        let (tx, mut rx) = mpsc::channel::<Queued>(GROUP_COMMIT_QUEUE_MAX);
        std::thread::Builder::new().name(name).spawn(move || {
            while let Some(first) = rx.blocking_recv() {
                let mut waiting = vec![first];
                // At most a queue's worth: appends arriving while this drains go next time.
                while waiting.len() < GROUP_COMMIT_QUEUE_MAX
                    && let Ok(next) = rx.try_recv()
                {
                    waiting.push(next);
                }
                let synced = Instant::now();
                let result = sync();
                let done = stages::since(&STAGES.fsync, synced);
                STAGES.fsync_appends.record(waiting.len() as f64);
                for (queued, callback) in waiting {
                    STAGES
                        .fsync_wait
                        .record(done.duration_since(queued).as_secs_f64());
                    let r = match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    };
                    callback.io_completed(r);
                }
            }
        })?;
        Ok(Arc::new(GroupCommit { tx }))
    }

    /// Queues `callback` for the next fsync, waiting while the queue is full.
    async fn enqueue(&self, callback: IOFlushed<FirnRaft>) -> io::Result<()> {
        self.tx
            .send((Instant::now(), callback))
            .await
            .map_err(|_| io::Error::other("the fsync thread has stopped"))
    }
}

impl FjallLogStore {
    /// Opens the log of one Raft group; `group` names its keyspaces so that several groups
    /// can share one database.
    pub fn open(db: Database, group: &str, flush: Flush) -> io::Result<Self> {
        let log = db
            .keyspace(&format!("raft_log_{group}"), || {
                KeyspaceCreateOptions::default().max_memtable_size(LOG_MEMTABLE_BYTES_MAX)
            })
            .map_err(fjall_err)?;
        let meta = db
            .keyspace(
                &format!("raft_meta_{group}"),
                KeyspaceCreateOptions::default,
            )
            .map_err(fjall_err)?;
        let _memtables = Arc::new(memtable_reaper::watch([log.clone(), meta.clone()]));
        Ok(FjallLogStore {
            db,
            log,
            meta,
            flush,
            tail: Arc::default(),
            unsaved_committed: None,
            _memtables,
        })
    }

    fn get_meta<T: for<'de> serde::Deserialize<'de>>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.meta.get(key).map_err(fjall_err)? {
            Some(bytes) => Ok(Some(postcard::from_bytes(&bytes).map_err(codec_err)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, key: &[u8], value: &T) -> io::Result<()> {
        let bytes = postcard::to_stdvec(value).map_err(codec_err)?;
        self.meta.insert(key, bytes).map_err(fjall_err)
    }

    /// The tail, locked. Its methods leave it whole at every point they could panic, so a
    /// poisoned lock (a panic elsewhere while held) still guards a consistent tail.
    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lowest and highest indexes stored at or before `upto`.
    fn stored_through(&self, upto: u64) -> io::Result<Option<(u64, u64)>> {
        let mut stored = self.log.range(..=upto.to_be_bytes());
        let index_of = |guard: fjall::Guard| -> io::Result<u64> {
            let key = guard.key().map_err(fjall_err)?;
            let bytes = key.as_ref().try_into();
            Ok(u64::from_be_bytes(
                bytes.map_err(|_| io::Error::other("bad log key"))?,
            ))
        };
        let Some(first) = stored.next().map(index_of).transpose()? else {
            return Ok(None);
        };
        let last = stored.next_back().map(index_of).transpose()?;
        Ok(Some((first, last.unwrap_or(first))))
    }

    /// Removes the entries stored at or before `upto`, in batches of [`PURGE_BATCH_ENTRIES`]
    /// paced by [`PURGE_TURN`]. A log is contiguous, so the batches name the indexes from the
    /// first stored to the last rather than read the entries to find them.
    fn remove_through(&self, upto: u64) -> io::Result<()> {
        let _turn = PURGE_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let Some((first, last)) = self.stored_through(upto)? else {
            return Ok(());
        };
        let mut next = first;
        while next <= last {
            let started = Instant::now();
            let end = last.min(next + PURGE_BATCH_ENTRIES as u64 - 1);
            let mut batch = self.db.batch();
            for index in next..=end {
                batch.remove(&self.log, index.to_be_bytes());
            }
            batch.commit().map_err(fjall_err)?;
            next = end + 1;
            std::thread::sleep(started.elapsed());
        }
        Ok(())
    }

    /// Removes every log entry from index `lower` on, in one batch (a truncation: the
    /// entries a new leader replaces).
    fn remove_from(&self, lower: u64) -> io::Result<()> {
        let mut batch = self.db.batch();
        for guard in self.log.range(lower.to_be_bytes()..) {
            batch.remove(&self.log, guard.key().map_err(fjall_err)?);
        }
        batch.commit().map_err(fjall_err)
    }
}

fn decode_entry(bytes: &[u8]) -> io::Result<Entry> {
    postcard::from_bytes(bytes).map_err(codec_err)
}

/// The entry stored at `index`. Read back what was written: the stored index must match.
fn decode_at(index: u64, bytes: &[u8]) -> io::Result<Entry> {
    let entry = decode_entry(bytes)?;
    assert_eq!(
        entry.log_id.index, index,
        "log entry stored under the wrong index"
    );
    Ok(entry)
}

impl RaftLogReader<FirnRaft> for FjallLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let in_tail = self.tail().get(&range);
        if let Some(stored) = in_tail {
            return stored
                .iter()
                .map(|(index, bytes)| decode_at(*index, bytes))
                .collect();
        }
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x + 1,
            Bound::Unbounded => 0,
        };
        let mut entries = Vec::new();
        for guard in self.log.range(start.to_be_bytes()..) {
            let (key, value) = guard.into_inner().map_err(fjall_err)?;
            let index = u64::from_be_bytes(
                key.as_ref()
                    .try_into()
                    .map_err(|_| io::Error::other("bad log key"))?,
            );
            if !range.contains(&index) {
                break;
            }
            entries.push(decode_at(index, &value)?);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(META_VOTE)
    }
}

impl RaftLogStorage<FirnRaft> for FjallLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<FirnRaft>, io::Error> {
        let last_purged: Option<LogId> = self.get_meta(META_LAST_PURGED)?;
        let last = match self.log.last_key_value() {
            Some(guard) => {
                let (_, value) = guard.into_inner().map_err(fjall_err)?;
                Some(decode_entry(&value)?.log_id)
            }
            None => None,
        };
        // Entries at or before the purge point may still be stored (a purge removes them
        // after recording it); they do not count.
        let last = last.filter(|l| last_purged.is_none_or(|p| l.index > p.index));
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.put_meta(META_VOTE, vote)?;
        // A vote must be durable before it is acted on, or a node could vote twice in a term.
        match &self.flush {
            // By the next group commit, like an append. fjall's `persist(SyncAll)` would hold
            // the journal lock through its fsync, and every append of the stripe's groups
            // with it (many groups vote at once when a node restarts).
            Flush::Fsync(commit) => {
                let (tx, rx) = <OneshotOf<FirnRaft> as Oneshot>::channel();
                commit.enqueue(IOFlushed::signal(tx)).await?;
                rx.await
                    .map_err(|_| io::Error::other("the fsync thread has stopped"))?
            }
            Flush::Memory(checkpoints) => {
                let checkpoints = checkpoints.clone();
                tokio::task::spawn_blocking(move || checkpoints.sync_now())
                    .await
                    .map_err(io::Error::other)?
            }
        }
    }

    /// Kept until the next append, which writes it in its own batch. Writing it here, once
    /// for every advance of commit, took the log database's journal lock (then held through
    /// each group commit's fsync) and a system call of its own from the group's Raft core:
    /// 2.9% of a replicated put's CPU (`bench/profile set`). What is stored may so trail the true commit by
    /// the last appends (a leader that idles appends a time close within the close
    /// interval): after a restart this replica re-applies up to what is stored at once, and
    /// the rest once it hears the leader's commit (reads wait for that: a linearizable read
    /// for the leader's commit, a read at a time for the replica's closed time). openraft
    /// raises a stored commit below the state's applied position to it.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.unsaved_committed = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        if let Some(committed) = self.unsaved_committed {
            return Ok(committed);
        }
        Ok(self.get_meta::<Option<LogId>>(META_COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<FirnRaft>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let mut batch = self.db.batch();
        let mut appended = Vec::new();
        for entry in entries {
            let stored = bytes::Bytes::from(postcard::to_stdvec(&entry).map_err(codec_err)?);
            let index = entry.log_id.index;
            batch.insert(&self.log, index.to_be_bytes(), stored.as_ref());
            appended.push((index, stored));
        }
        if let Some(committed) = self.unsaved_committed.take() {
            let bytes = postcard::to_stdvec(&committed).map_err(codec_err)?;
            batch.insert(&self.meta, META_COMMITTED, bytes);
        }
        // Into the tail first, then the database: a reader never waits on the database's
        // journal lock (the group commit holds it while it hands the journal to the OS).
        // Until the batch is in, the tail holds entries the database does not yet: no one
        // reads them before this append returns, and if it fails openraft stops the group.
        {
            let mut tail = self.tail();
            for (index, stored) in appended {
                tail.push(index, stored);
            }
        }
        batch.commit().map_err(fjall_err)?;
        stages::since(&STAGES.log_append, started);
        match &self.flush {
            Flush::Fsync(commit) => commit.enqueue(callback).await,
            Flush::Memory(checkpoints) => {
                // Handed to the OS (a write, no fsync) before it is reported flushed, so it
                // is there before its apply reaches the state database: a killed process
                // loses none of it, and its state is never ahead of its log.
                self.db.persist(PersistMode::Buffer).map_err(fjall_err)?;
                checkpoints.appended();
                callback.io_completed(Ok(()));
                Ok(())
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index + 1);
        let mut tail = self.tail();
        // One batch, whatever its size: removed in parts, a crash could leave a hole.
        self.remove_from(from)?;
        tail.truncate_after(last_log_id.map(|id| id.index));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // Record the purge point first: entries at or before it are ignored from then on, so
        // they may go later and in parts (a crash midway leaves only ignored ones, and the
        // next purge starts again from the first). A purge follows each snapshot and covers
        // about as many entries as it (100,000 by default): removed here in one batch, it
        // held this group's Raft core for the whole of it, and the log database's journal
        // lock — every append of the stripe's groups — too. So they go in the background,
        // in batches of `PURGE_BATCH_ENTRIES`, one purge at a time and paced (`PURGE_TURN`).
        self.put_meta(META_LAST_PURGED, &log_id)?;
        self.tail().purge(log_id.index);
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = this.remove_through(log_id.index) {
                tracing::warn!("purging the log through {log_id}: {e} (the next purge retries)");
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
