//! Making a fjall database's journal durable without holding its lock through the fsync.
//!
//! fjall's `Database::persist(SyncAll)` keeps the journal's lock while it fsyncs, and every
//! write to the database takes that lock: Raft appends (from a group's core task) waited
//! out each group commit's fsync, and so did the tokio worker running them; applies waited
//! out a snapshot's fsync of the state database. Here the lock is held only to hand the
//! journal's buffered bytes to the OS (`PersistMode::Buffer`, a `write`), and the fsync runs
//! on a descriptor of our own for the same file, while writes go on.
//!
//! Why that is as durable: `fdatasync` makes durable every byte the OS holds for the file,
//! whichever descriptor wrote it, with what reading them back needs (the file's size and
//! blocks; not its times). fjall writes its journal to `<db>/N.jnl`, the highest `N`
//! being the active one; it moves to `N + 1` only after fsyncing `N` (with the lock held)
//! and the folder. So the bytes handed over are either in the file found active just after
//! (fsync'd here) or in one fjall fsync'd when it moved on.
//! `tests::the_sync_follows_the_journal_across_rotations` checks the layout this relies on.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fjall::{Database, PersistMode};

/// Most bytes of journal a database keeps (fjall's default is 512 MiB). fjall deletes a
/// journal file (64 MB) only once every keyspace written in it has written out its memtable,
/// and a node's small tables (a group's vote and commit, a shard's applied position) fill
/// theirs rarely: the files piled up to the bound in every database, up to 4.5 GiB on a node
/// of 4 stripes. A restart reads them all back, from the oldest: a node of 2.4M puts took
/// 11.2 s from a cold page cache to its first write with 512 MiB of journals, 4.7 s with this
/// bound (1.5 s with 128 MiB, but then the versions table's memtables were written out early
/// too, and puts cost up to 9% more CPU; at 256 MiB the first 1.2M puts cost what they did,
/// and later ones are not settled: docs/benchmarks.md, "Journals"). Past the bound, fjall
/// writes out the memtables that hold the oldest file.
pub const JOURNAL_BYTES_MAX: u64 = 256 << 20;

/// Opens (or creates) the fjall database at `path` the way a node keeps its logs and states:
/// its journal written out only when asked ([`JournalSync`], the group commit, snapshots)
/// and kept within [`JOURNAL_BYTES_MAX`].
pub fn open_database(path: &Path) -> fjall::Result<Database> {
    open_database_within(path, JOURNAL_BYTES_MAX)
}

fn open_database_within(path: &Path, journal_bytes_max: u64) -> fjall::Result<Database> {
    Database::builder(path)
        .manual_journal_persist(true)
        .max_journaling_size(journal_bytes_max)
        .open()
}

/// The journal of one fjall database, made durable on demand.
pub struct JournalSync {
    db: Database,
    dir: PathBuf,
    /// The journal file fsync'd last: its number and a descriptor of it.
    active: Option<(u64, File)>,
}

impl JournalSync {
    /// `dir` is the folder `db` was opened at.
    pub fn new(db: Database, dir: impl Into<PathBuf>) -> Self {
        JournalSync {
            db,
            dir: dir.into(),
            active: None,
        }
    }

    /// Makes durable everything written to the database before the call.
    pub fn sync(&mut self) -> io::Result<()> {
        self.db
            .persist(PersistMode::Buffer)
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.active_file()?.sync_data()
    }

    /// The number of the journal file fjall writes now.
    #[cfg(test)]
    fn active_journal(&mut self) -> io::Result<u64> {
        self.active_file()?;
        Ok(self.active.as_ref().map_or(0, |(n, _)| *n))
    }

    fn path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{n}.jnl"))
    }

    fn active_file(&mut self) -> io::Result<&File> {
        let mut n = match &self.active {
            Some((n, _)) => *n,
            None => self.newest()?,
        };
        // Rotations since the last look (each fsync'd the file before it).
        while self.path(n + 1).try_exists()? {
            n += 1;
        }
        if self.active.as_ref().map(|(open, _)| *open) != Some(n) {
            self.active = Some((n, File::open(self.path(n))?));
        }
        Ok(&self.active.as_ref().expect("just opened").1)
    }

    fn newest(&self) -> io::Result<u64> {
        let mut newest = None;
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let n = name
                .to_str()
                .and_then(|s| s.strip_suffix(".jnl"))
                .and_then(|s| s.parse::<u64>().ok());
            newest = newest.max(n);
        }
        newest.ok_or_else(|| {
            io::Error::other(format!("no journal (N.jnl) in {}", self.dir.display()))
        })
    }
}

/// Journal bytes (as fjall's write buffer counts them) written to a database whose journal
/// nothing fsyncs often (a node's state: only snapshots make it durable), past which
/// [`Writeback`] fsyncs it.
pub const WRITEBACK_BYTES: u64 = 4 << 20;

/// How often [`Writeback`] looks at what was written.
pub const WRITEBACK_EVERY: Duration = Duration::from_millis(50);

/// Keeps the unsynced part of a database's journal small, for a database no group commit
/// fsyncs (the state: durable through the log, synced by snapshots).
///
/// Before each memtable flush, fjall fsyncs the journal *with its lock held*
/// (`worker_pool.rs`, fjall issue 329), and every write to the database takes that lock. A
/// state journal synced by nothing else then holds up to 64 MB (fjall's journal file size)
/// of unsynced bytes at that moment: every apply of the database's groups waited out their
/// writeback (applies asleep on the lock up to 225 ms on the busy 2-core machine; fjall's
/// fsync itself up to 64 ms, 8.7 ms with this thread — docs/benchmarks.md). Fsynced here
/// (outside the lock, [`JournalSync`]) whenever about [`WRITEBACK_BYTES`] have been written
/// since, the flush's own fsync finds little to write.
pub struct Writeback {
    syncs: AtomicU64,
}

impl Writeback {
    /// Starts the thread for `db`, opened at `dir`; it stops when the returned handle is
    /// dropped.
    pub fn start(db: Database, dir: impl Into<PathBuf>) -> io::Result<Arc<Writeback>> {
        let this = Arc::new(Writeback {
            syncs: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&this);
        let mut journal = JournalSync::new(db, dir);
        std::thread::Builder::new()
            .name("writeback".into())
            .spawn(move || {
                let (mut seen, mut unsynced) = (journal.db.write_buffer_size(), 0u64);
                while let Some(this) = weak.upgrade() {
                    // The write buffer grows with each write and drops when memtables are
                    // written out: its growth since the last look is what was written
                    // (less, across a flush).
                    let now = journal.db.write_buffer_size();
                    unsynced += now.saturating_sub(seen);
                    seen = now;
                    if unsynced >= WRITEBACK_BYTES {
                        unsynced = 0;
                        match journal.sync() {
                            Ok(()) => {
                                this.syncs.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tracing::warn!("writing back the state journal: {e}"),
                        }
                    }
                    drop(this);
                    std::thread::sleep(WRITEBACK_EVERY);
                }
            })?;
        Ok(this)
    }

    /// The fsyncs made so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use fjall::KeyspaceCreateOptions;

    use super::*;

    /// A database in a new folder whose journal only a sync makes durable, with one keyspace.
    fn open_db() -> (tempfile::TempDir, Database, fjall::Keyspace) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder(dir.path())
            .manual_journal_persist(true)
            .open()
            .unwrap();
        let ks = db.keyspace("ks", KeyspaceCreateOptions::default).unwrap();
        (dir, db, ks)
    }

    /// Journal bytes in the database's folder.
    fn journal_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jnl"))
            .map(|e| e.metadata().map_or(0, |m| m.len()))
            .sum()
    }

    /// A database keeps its journals within its bound (and the file being written) while a
    /// table written once, at the start, never fills its memtable and so holds the oldest
    /// file: fjall writes that table out to let the file go. (fjall's smallest bound, 64 MiB,
    /// keeps the test short; a node's is [`JOURNAL_BYTES_MAX`].) With fjall's own bound
    /// (512 MiB) every file written stays.
    #[test]
    fn journals_stay_within_their_bound_while_a_small_table_holds_the_oldest() {
        const BOUND: u64 = 64 << 20;
        let dir = tempfile::tempdir().unwrap();
        let db = open_database_within(dir.path(), BOUND).unwrap();
        let small = db
            .keyspace("small", KeyspaceCreateOptions::default)
            .unwrap();
        small.insert("applied", "1").unwrap();
        let big = db
            .keyspace("big", || {
                KeyspaceCreateOptions::default().max_memtable_size(16 << 20)
            })
            .unwrap();
        // Incompressible values (the journal compresses larger ones), twice the bound and
        // then some: the files that must go.
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let value: Vec<u8> = (0..64 * 1024 / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        let written = 3 * BOUND;
        for i in 0..written / value.len() as u64 {
            let mut v = value.clone();
            v[..8].copy_from_slice(&i.to_le_bytes());
            big.insert(i.to_be_bytes(), v).unwrap();
            if i % 64 == 0 {
                db.persist(PersistMode::Buffer).unwrap();
            }
        }
        db.persist(PersistMode::Buffer).unwrap();
        // fjall lets files go from its workers, after the flushes: wait for them (bounded).
        let bound = BOUND + (64 << 20);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while journal_bytes(dir.path()) > bound && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let kept = journal_bytes(dir.path());
        assert!(
            kept <= bound,
            "{} MiB of journal kept after {} MiB written; the bound is {} MiB and one file",
            kept >> 20,
            written >> 20,
            BOUND >> 20
        );
        assert_eq!(small.get("applied").unwrap().as_deref(), Some(&b"1"[..]));
    }

    /// The writeback fsyncs the journal once about [`WRITEBACK_BYTES`] have been written
    /// since its last fsync, and not before.
    #[test]
    fn the_writeback_syncs_after_its_bytes_and_not_before() {
        let (dir, db, ks) = open_db();
        let writeback = Writeback::start(db.clone(), dir.path()).unwrap();
        let write = |from: u32, bytes: usize| {
            for i in 0..(bytes / 1024) as u32 {
                ks.insert((from + i).to_be_bytes(), vec![7u8; 1024])
                    .unwrap();
            }
        };
        let wait = |what: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !what() && std::time::Instant::now() < deadline {
                std::thread::sleep(WRITEBACK_EVERY);
            }
        };
        write(0, WRITEBACK_BYTES as usize / 2);
        std::thread::sleep(WRITEBACK_EVERY * 6);
        assert_eq!(writeback.syncs(), 0, "synced before its bytes were written");
        write(1 << 20, WRITEBACK_BYTES as usize);
        wait(&|| writeback.syncs() >= 1);
        assert_eq!(
            writeback.syncs(),
            1,
            "no sync (or more than one) after its bytes"
        );
        std::thread::sleep(WRITEBACK_EVERY * 6);
        assert_eq!(writeback.syncs(), 1, "synced again with nothing written");
    }

    /// The layout the sync relies on: fjall writes to the highest-numbered `N.jnl` of its
    /// folder, and a rotation starts `N + 1` (the sync then moves to it). Fails if a fjall
    /// upgrade changes either.
    #[test]
    fn the_sync_follows_the_journal_across_rotations() {
        let (dir, db, ks) = open_db();
        let mut sync = JournalSync::new(db.clone(), dir.path());
        // Bytes that do not compress (the journal may compress values), and a test for them
        // in a journal file (preallocated, so look for the bytes, not the length).
        let noise = |seed: u64| -> Vec<u8> {
            let mut x = seed;
            (0..100_000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let holds = |n: u64, value: &[u8]| {
            let bytes = std::fs::read(dir.path().join(format!("{n}.jnl"))).unwrap();
            bytes.windows(64).any(|w| w == &value[5_000..5_064])
        };

        let first = sync.active_journal().unwrap();
        let a = noise(7);
        let mut batch = db.batch();
        batch.insert(&ks, "a", a.clone());
        batch.commit().unwrap();
        sync.sync().unwrap();
        assert!(
            holds(first, &a),
            "the write is not in journal {first}, which the sync fsyncs"
        );

        // fjall moves to a new journal when one holds over 64 MB and a memtable is written
        // out: fill it past that, then write the memtable out.
        let filler = noise(3);
        for i in 0..700u32 {
            ks.insert(i.to_be_bytes(), filler.clone()).unwrap();
        }
        ks.rotate_memtable_and_wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !dir.path().join(format!("{}.jnl", first + 1)).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "fjall started no journal after {first}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let b = noise(9);
        let mut batch = db.batch();
        batch.insert(&ks, "b", b.clone());
        batch.commit().unwrap();
        sync.sync().unwrap();
        let now = sync.active_journal().unwrap();
        assert!(
            now > first,
            "a rotation did not start journal {}",
            first + 1
        );
        assert!(
            holds(now, &b),
            "the write after the rotation is not in journal {now}, which the sync fsyncs"
        );
    }
}
