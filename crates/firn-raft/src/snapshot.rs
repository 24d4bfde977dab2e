//! A shard's snapshot as a file: built from the store, opened after a restart, checked, and
//! loaded into the store — each by streaming, so memory stays at a few buffers
//! ([`SNAPSHOT_BUFFER_BYTES`]) whatever the shard's size. How a snapshot travels between
//! nodes is [`crate::snapshot_transfer`]'s.
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

use crc::{CRC_32_ISCSI, Crc};
use firn_store::StorageBackend;
use firn_store::backend::{Batch, Table};
use firn_store::dump::{self, DumpReader, DumpWriter};

use crate::types::{LogId, SnapshotMeta, StoredMembership};

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

/// Writes a snapshot of a consistent cut of `backend` to `path` (under a temporary name,
/// renamed into place once fsync'd), makes the state it covers durable, and opens it.
pub fn build(
    backend: &dyn StorageBackend,
    path: &Path,
) -> io::Result<(SnapshotMeta, SnapshotFile)> {
    let building = path.with_extension("building");
    let out = BufWriter::with_capacity(SNAPSHOT_BUFFER_BYTES, File::create(&building)?);
    let mut dump = DumpWriter::new(out)?;
    let mut last_log_id: Option<LogId> = None;
    let mut membership: Option<StoredMembership> = None;
    backend.dump_each(&mut |table, key, value| {
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
    drop(file);
    // The log before the snapshot may be purged once it exists: the state it covers must
    // be durable first (the state's journal is fsync'd by nothing else).
    backend.persist()?;
    std::fs::rename(&building, path)?;
    sync_parent(path)?;
    SnapshotFile::open(path)
}

/// Replaces `backend`'s tables with the snapshot's dump, pair by pair, then keeps the file
/// as `keep_at` (the replica's current snapshot).
///
/// The applied position is written last, after every other pair is durable: until then the
/// state holds none, so a crash midway leaves a state that claims no position (the next
/// start restores it from the replica's current snapshot and its log), never one that
/// claims a position its data does not hold. The file is renamed only after that.
pub fn install(
    backend: &dyn StorageBackend,
    snapshot: &SnapshotFile,
    keep_at: &Path,
) -> io::Result<()> {
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
    if snapshot.path() != keep_at {
        std::fs::rename(snapshot.path(), keep_at)?;
        sync_parent(keep_at)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_store::MemoryBackend;

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
