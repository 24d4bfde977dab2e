//! A shard's snapshot: a held cut of its tables, or a file built from one, opened after a
//! restart, checked, and loaded into the store — each by streaming, so memory stays at a few
//! buffers ([`SNAPSHOT_BUFFER_BYTES`]) whatever the shard's size. How a snapshot travels
//! between nodes is [`crate::snapshot_transfer`]'s. openraft's [`Snapshot`] of this data is
//! declared here too, since the data is this module's.
//!
//! A state on disk (fjall) is its own snapshot: building one holds a cut of the tables and
//! makes the state durable ([`hold`]); the file is written from the cut only when the
//! snapshot is sent ([`HeldCut::write_file`]). A state in memory gets its file when the
//! snapshot is built ([`build`]): the file is what survives a restart.
//!
//! The file: a dump stream ([`firn_store::dump`]: every pair of a consistent cut of the
//! state machine's tables, with a count and checksum), then the snapshot's meta (postcard),
//! its CRC-32C (u32 LE), its length (u32 LE) and [`TRAILER_MAGIC`]. The meta comes last because it is read
//! from the cut itself (the applied position and membership in the system table) as the
//! dump passes them; a reader finds it from the file's end.
//!
//! A file is written under a temporary name, fsync'd, and renamed into place, so the
//! snapshot a replica holds is always a whole one.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crc::{CRC_32_ISCSI, Crc};
use firn_store::StorageBackend;
use firn_store::backend::{Batch, Table, TableCut};
use firn_store::dump::{self, DumpReader, DumpWriter};

use crate::types::{FirnRaft, LogId, SnapshotMeta, StoredMembership};

/// The bytes that end every snapshot file.
pub const TRAILER_MAGIC: &[u8; 8] = b"FIRNSNAP";
/// Largest encoded meta a file may hold: a membership of thousands of nodes fits, and a
/// damaged length is refused before it is allocated.
const META_BYTES_MAX: usize = 1024 * 1024;
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);
/// The meta's checksum and length, and the magic.
const TRAILER_BYTES: u64 = 4 + 4 + TRAILER_MAGIC.len() as u64;
/// The buffer of each file a snapshot is written through or read from.
pub const SNAPSHOT_BUFFER_BYTES: usize = 1024 * 1024;

/// The system-table keys the meta is read from (written by the state machine's apply).
pub(crate) const SYS_APPLIED: &[u8] = b"raft_applied";
pub(crate) const SYS_MEMBERSHIP: &[u8] = b"raft_membership";

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> io::Result<Vec<u8>> {
    postcard::to_stdvec(v).map_err(|e| invalid(e.to_string()))
}

pub(crate) fn decode<T: for<'de> serde::Deserialize<'de>>(b: &[u8]) -> io::Result<T> {
    postcard::from_bytes(b).map_err(|e| invalid(e.to_string()))
}

/// A snapshot as openraft holds it: its meta and its [`SnapshotData`].
pub type Snapshot = openraft::alias::SnapshotOf<FirnRaft, SnapshotData>;

/// A snapshot's data as openraft holds it: an open snapshot file or a held cut (never its
/// contents in memory).
#[derive(Clone, Debug)]
pub enum SnapshotData {
    /// A complete snapshot file: built from a state in memory, or received from a leader.
    File(SnapshotFile),
    /// A held cut of a state on disk: written out as a file only when it is sent.
    Cut(HeldCut),
}

/// A cut of a replica's tables held as its snapshot, with where to write it out.
#[derive(Clone)]
pub struct HeldCut {
    cut: Arc<dyn TableCut>,
    /// The replica's snapshot path: files written from the cut sit beside it.
    beside: PathBuf,
    /// Where the file written is kept for the transfers after this one.
    written: WrittenCuts,
}

/// The file last written from one of a replica's held cuts, kept while it still covers the
/// replica's latest snapshot: a follower's retry, or another follower, is sent it rather
/// than have the whole state written out again. Its space is held until a newer snapshot
/// supersedes it (or the replica closes).
#[derive(Clone, Default)]
pub struct WrittenCuts(Arc<std::sync::Mutex<Written>>);

#[derive(Default)]
struct Written {
    /// The latest snapshot's position: the leader's log may be purged up to it, so a file
    /// sent must reach it.
    floor: Option<LogId>,
    file: Option<(SnapshotMeta, SnapshotFile)>,
}

impl WrittenCuts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Written> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A snapshot was built at `at`: a kept file before it no longer serves.
    pub fn built(&self, at: Option<LogId>) {
        let mut written = self.lock();
        if written
            .file
            .as_ref()
            .is_some_and(|(m, _)| m.last_log_id < at)
        {
            written.file = None;
        }
        written.floor = at;
    }

    /// The kept file, if it reaches the latest snapshot.
    pub fn reusable(&self) -> Option<(SnapshotMeta, SnapshotFile)> {
        let written = self.lock();
        let floor = written.floor;
        written.file.clone().filter(|(m, _)| m.last_log_id >= floor)
    }

    fn keep(&self, meta: SnapshotMeta, file: SnapshotFile) {
        let mut written = self.lock();
        if written
            .file
            .as_ref()
            .is_none_or(|(m, _)| m.last_log_id <= meta.last_log_id)
        {
            written.file = Some((meta, file));
        }
    }
}

impl std::fmt::Debug for HeldCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldCut(beside {})", self.beside.display())
    }
}

/// Numbers the files written from held cuts, so that transfers to two followers at once
/// write files of their own.
static WRITTEN_FROM_CUTS: AtomicU64 = AtomicU64::new(0);

impl HeldCut {
    /// Writes the cut as a snapshot file, `<group>.sending.<n>` beside the replica's
    /// snapshot, opens it, and keeps it in [`WrittenCuts`] for the transfers after this one.
    /// The name is removed once the file is open: the handles read on, and the file's space
    /// is freed when the last of them is dropped (or, after a crash, the next time the
    /// replica opens: [`UNFINISHED_SUFFIXES`]).
    pub fn write_file(&self) -> io::Result<(SnapshotMeta, SnapshotFile)> {
        let n = WRITTEN_FROM_CUTS.fetch_add(1, Ordering::Relaxed);
        let path = self.beside.with_extension(format!("sending.{n}"));
        let written = write(self.cut.as_ref(), &path).and_then(|_| SnapshotFile::open(&path));
        let _ = std::fs::remove_file(&path);
        let (meta, file) = written?;
        self.written.keep(meta.clone(), file.clone());
        Ok((meta, file))
    }
}

/// The names (after `<group>.`) of the files a snapshot leaves only while it is built,
/// received or sent: any found when a replica opens are left from a run that stopped.
pub const UNFINISHED_SUFFIXES: [&str; 3] = ["building", "incoming.", "sending."];

/// A snapshot's data as openraft holds it: an open, complete snapshot file. The handle keeps
/// reading the file it opened even after a newer snapshot is renamed over its path, so a
/// transfer in progress is never mixed with a newer snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotFile {
    path: PathBuf,
    file: Arc<File>,
    /// The whole file's length, trailer included.
    bytes: u64,
    /// The dump stream's length: the file's start up to the meta.
    dump_bytes: u64,
}

impl SnapshotFile {
    /// Opens a complete snapshot file and reads its meta from the trailer.
    pub fn open(path: &Path) -> io::Result<(SnapshotMeta, SnapshotFile)> {
        let file = File::open(path)?;
        let bytes = file.metadata()?.len();
        let refuse = |why: &str| {
            invalid(format!(
                "{} is not a complete Firn snapshot: {why}",
                path.display()
            ))
        };
        if bytes < TRAILER_BYTES {
            return Err(refuse("it is shorter than its trailer"));
        }
        let mut trailer = [0u8; TRAILER_BYTES as usize];
        file.read_exact_at(&mut trailer, bytes - TRAILER_BYTES)?;
        if &trailer[8..] != TRAILER_MAGIC {
            return Err(refuse("it does not end with the snapshot trailer"));
        }
        let crc = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
        let meta_bytes = u32::from_le_bytes(trailer[4..8].try_into().expect("4 bytes")) as u64;
        if meta_bytes > META_BYTES_MAX as u64 || meta_bytes + TRAILER_BYTES > bytes {
            return Err(refuse("its meta's length is damaged"));
        }
        let dump_bytes = bytes - TRAILER_BYTES - meta_bytes;
        let mut meta = vec![0u8; meta_bytes as usize];
        file.read_exact_at(&mut meta, dump_bytes)?;
        if CRC32C.checksum(&meta) != crc {
            return Err(refuse("its meta's checksum differs: it is damaged"));
        }
        let meta: SnapshotMeta = decode(&meta).map_err(|e| refuse(&e.to_string()))?;
        let snapshot = SnapshotFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            bytes,
            dump_bytes,
        };
        Ok((meta, snapshot))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length: what a transfer sends.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Fills `buf` from `offset` (the last read of a file may fill less: the count is
    /// returned). Positioned reads: clones of a handle read independently.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.bytes.saturating_sub(offset)) as usize;
        self.file.read_exact_at(&mut buf[..want], offset)?;
        Ok(want)
    }

    /// The dump stream, read through a buffer.
    fn dump_reader(&self) -> io::Result<DumpReader<BufReader<impl Read + use<>>>> {
        let at = PositionedReader {
            file: self.file.clone(),
            offset: 0,
            end: self.dump_bytes,
        };
        DumpReader::new(BufReader::with_capacity(SNAPSHOT_BUFFER_BYTES, at))
    }

    /// Reads the whole dump, checking its records, count and checksum and that it ends where
    /// the meta begins: what a receiver does before it hands a snapshot to Raft.
    pub fn verify(&self) -> io::Result<()> {
        let at = PositionedReader {
            file: self.file.clone(),
            offset: 0,
            end: self.dump_bytes,
        };
        let summary = dump::verify(BufReader::with_capacity(SNAPSHOT_BUFFER_BYTES, at))?;
        if summary.bytes != self.dump_bytes {
            return Err(invalid(format!(
                "{}: the dump ends at byte {} but its meta begins at {}",
                self.path.display(),
                summary.bytes,
                self.dump_bytes
            )));
        }
        Ok(())
    }
}

/// Reads a shared file from a position of its own (the file's cursor is shared by clones).
struct PositionedReader {
    file: Arc<File>,
    offset: u64,
    end: u64,
}

impl Read for PositionedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.end - self.offset) as usize;
        let n = self.file.read_at(&mut buf[..want], self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Makes a rename in `path`'s directory durable.
fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// The meta a cut's snapshot carries: its applied position and membership, read from the
/// cut's system table.
pub fn meta_of(cut: &dyn TableCut) -> io::Result<SnapshotMeta> {
    let read = |key: &[u8]| cut.get(Table::System, key);
    Ok(SnapshotMeta {
        last_log_id: read(SYS_APPLIED)?.map(|v| decode(&v)).transpose()?,
        last_membership: read(SYS_MEMBERSHIP)?
            .map(|v| decode(&v))
            .transpose()?
            .unwrap_or_default(),
    })
}

/// A snapshot of a state on disk: a cut of `backend`'s tables, held, with the state it
/// covers made durable (the log before it may be purged once it exists; the state's
/// journal is fsync'd by nothing else). Nothing is copied: the cost is one fsync, whatever
/// the state's size. `beside` is the replica's snapshot path, `written` where a file
/// written from the cut is kept.
pub fn hold(
    backend: &dyn StorageBackend,
    beside: &Path,
    written: &WrittenCuts,
) -> io::Result<(SnapshotMeta, HeldCut)> {
    let cut = backend.cut()?;
    let meta = meta_of(cut.as_ref())?;
    backend.persist()?;
    let held = HeldCut {
        cut,
        beside: beside.to_path_buf(),
        written: written.clone(),
    };
    Ok((meta, held))
}

/// Writes a snapshot of a consistent cut of `backend` to `path` (under a temporary name,
/// renamed into place once fsync'd), makes the state it covers durable, and opens it.
pub fn build(
    backend: &dyn StorageBackend,
    path: &Path,
) -> io::Result<(SnapshotMeta, SnapshotFile)> {
    let building = path.with_extension("building");
    write(backend.cut()?.as_ref(), &building)?;
    // The log before the snapshot may be purged once it exists: the state it covers must
    // be durable first (the state's journal is fsync'd by nothing else).
    backend.persist()?;
    std::fs::rename(&building, path)?;
    sync_parent(path)?;
    SnapshotFile::open(path)
}

/// Writes `cut` as a snapshot file at `path`, fsync'd, and returns its meta.
fn write(cut: &dyn TableCut, path: &Path) -> io::Result<SnapshotMeta> {
    let out = BufWriter::with_capacity(SNAPSHOT_BUFFER_BYTES, File::create(path)?);
    let mut dump = DumpWriter::new(out)?;
    let mut last_log_id: Option<LogId> = None;
    let mut membership: Option<StoredMembership> = None;
    cut.dump_each(&mut |table, key, value| {
        if table == Table::System && key == SYS_APPLIED {
            last_log_id = Some(decode(value)?);
        } else if table == Table::System && key == SYS_MEMBERSHIP {
            membership = Some(decode(value)?);
        }
        dump.pair(table, key, value)
    })?;
    let (mut out, _) = dump.finish()?;
    let meta = SnapshotMeta {
        last_log_id,
        last_membership: membership.unwrap_or_default(),
    };
    let encoded = encode(&meta)?;
    out.write_all(&encoded)?;
    out.write_all(&CRC32C.checksum(&encoded).to_le_bytes())?;
    out.write_all(&(encoded.len() as u32).to_le_bytes())?;
    out.write_all(TRAILER_MAGIC)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(meta)
}

/// Keeps the (checked) file as `keep_at`, the replica's current snapshot, then replaces
/// `backend`'s tables with its dump, pair by pair.
///
/// The applied position is written last, after every other pair is durable: until then the
/// state holds none, so a crash midway leaves a state that claims no position, never one
/// that claims a position its data does not hold — and the next start finds the file newer
/// than the state and installs it again. (A state on disk, its own snapshot, has no other
/// file to fall back on: the one received is kept first.)
pub fn install(
    backend: &dyn StorageBackend,
    snapshot: &SnapshotFile,
    keep_at: &Path,
) -> io::Result<()> {
    if snapshot.path() != keep_at {
        std::fs::rename(snapshot.path(), keep_at)?;
        sync_parent(keep_at)?;
    }
    let mut reader = snapshot.dump_reader()?;
    let mut applied: Option<Vec<u8>> = None;
    backend.load_each(&mut || {
        loop {
            match reader.next_pair()? {
                Some((Table::System, key, value)) if key == SYS_APPLIED => applied = Some(value),
                other => return Ok(other),
            }
        }
    })?;
    if let Some(value) = applied {
        let mut batch = Batch::default();
        batch.put(Table::System, SYS_APPLIED.to_vec(), value);
        backend.write(batch)?;
        backend.persist()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_store::{FjallBackend, MemoryBackend};

    fn filled(pairs: usize) -> MemoryBackend {
        let backend = MemoryBackend::default();
        let mut batch = Batch::default();
        for i in 0..pairs {
            let table = Table::ALL[i % Table::ALL.len()];
            batch.put(
                table,
                format!("key{i}").into_bytes(),
                vec![i as u8; i % 300],
            );
        }
        batch.put(
            Table::System,
            SYS_APPLIED.to_vec(),
            encode(&applied()).unwrap(),
        );
        backend.write(batch).unwrap();
        backend
    }

    fn applied() -> LogId {
        use openraft::vote::RaftLeaderId;
        let leader = openraft::alias::CommittedLeaderIdOf::<crate::types::FirnRaft>::new(3, 1);
        LogId::new(leader, 42)
    }

    #[test]
    fn a_built_snapshot_installs_to_the_same_tables() {
        let dir = tempfile::tempdir().unwrap();
        let source = filled(5_000);
        let path = dir.path().join("shard0.snapshot");
        let (meta, file) = build(&source, &path).unwrap();
        assert_eq!(meta.last_log_id, Some(applied()));
        file.verify().unwrap();
        // Reopened as after a restart: the same meta, from the trailer.
        let (reopened, file) = SnapshotFile::open(&path).unwrap();
        assert_eq!(reopened, meta);

        let target = filled(10);
        install(&target, &file, &path).unwrap();
        assert_eq!(target.dump().unwrap(), source.dump().unwrap());
    }

    #[test]
    fn a_held_cut_writes_out_the_tables_as_they_were_when_it_was_held() {
        let dir = tempfile::tempdir().unwrap();
        let source = FjallBackend::open_path(&dir.path().join("state")).unwrap();
        source.load(filled(3_000).dump().unwrap()).unwrap();
        let before = source.dump().unwrap();
        let beside = dir.path().join("shard0.snapshot");
        let written = WrittenCuts::default();
        let (meta, held) = hold(&source, &beside, &written).unwrap();
        assert_eq!(meta.last_log_id, Some(applied()));

        // Written after the cut: neither the pairs nor a later applied position are seen.
        let mut later = Batch::default();
        later.put(Table::Versions, b"later".to_vec(), b"v".to_vec());
        later.remove(Table::KeyMeta, b"key0".to_vec());
        later.put(
            Table::System,
            SYS_APPLIED.to_vec(),
            b"not a log id".to_vec(),
        );
        source.write(later).unwrap();

        let (written_meta, file) = held.write_file().unwrap();
        assert_eq!(written_meta, meta);
        file.verify().unwrap();
        // The file's name is gone once it is open; nothing is left beside the snapshot.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let target = MemoryBackend::default();
        let mut reader = file.dump_reader().unwrap();
        target.load_each(&mut || reader.next_pair()).unwrap();
        assert_eq!(target.dump().unwrap(), before);

        // The file is kept for the next transfer while it reaches the latest snapshot.
        written.built(meta.last_log_id);
        assert_eq!(written.reusable().map(|(m, _)| m), Some(meta.clone()));
        let (_, newer) = hold(&source, &beside, &written).unwrap();
        drop(newer);
        let later = LogId::new(applied().leader_id, applied().index + 1);
        written.built(Some(later));
        assert!(
            written.reusable().is_none(),
            "a file older than the snapshot was kept"
        );
    }

    #[test]
    fn an_installed_snapshot_is_kept_under_the_replicas_name() {
        let dir = tempfile::tempdir().unwrap();
        let received = dir.path().join("shard0.incoming.1");
        let (_, file) = build(&filled(100), &received).unwrap();
        let current = dir.path().join("shard0.snapshot");
        install(&MemoryBackend::default(), &file, &current).unwrap();
        assert!(!received.exists());
        SnapshotFile::open(&current).unwrap();
    }

    #[test]
    fn a_snapshot_is_kept_under_the_replicas_name_before_it_is_loaded() {
        // A load that stops midway (here: a dump damaged after its trailer was checked)
        // leaves the file in place for the next start, which installs it again.
        let dir = tempfile::tempdir().unwrap();
        let received = dir.path().join("shard0.incoming.1");
        build(&filled(500), &received).unwrap();
        let mut bytes = std::fs::read(&received).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x41;
        std::fs::write(&received, &bytes).unwrap();
        let (_, file) = SnapshotFile::open(&received).unwrap();
        let current = dir.path().join("shard0.snapshot");
        install(&MemoryBackend::default(), &file, &current).unwrap_err();
        assert!(current.exists() && !received.exists());
    }

    #[test]
    fn a_truncated_or_damaged_snapshot_file_is_refused_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard0.snapshot");
        build(&filled(2_000), &path).unwrap();
        let whole = std::fs::read(&path).unwrap();
        let damaged = dir.path().join("damaged");
        let check = |bytes: &[u8]| -> io::Result<()> {
            std::fs::write(&damaged, bytes)?;
            SnapshotFile::open(&damaged)?.1.verify()
        };
        check(&whole).unwrap();
        for cut in [0, 5, whole.len() / 2, whole.len() - 13, whole.len() - 1] {
            let err = check(&whole[..cut]).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidData,
                "cut at {cut}: {err}"
            );
        }
        for at in [3, 20, whole.len() / 3, whole.len() - 30, whole.len() - 5] {
            let mut bytes = whole.clone();
            bytes[at] ^= 0x41;
            let err = check(&bytes).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "byte {at}: {err}");
        }
    }
}
