//! A node's blob files: `<data-dir>/blobs/<shard>/<id>`, one per large value of a shard this
//! node holds a replica of. A file is written chunk by chunk as `<id>.part`, then sealed:
//! its chunks' digests checked against the manifest, fsync'd, renamed to `<id>`, and the
//! directory fsync'd. Only a sealed file is ever read. Each file starts with a header
//! naming its key, so that the sweeper can ask the shard whether a version still uses it.
//!
//! Everything here blocks on the disk: callers run it on the blocking pool.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use firn_model::blob::{BLOB_CHUNK_BYTES, blob_name};
use firn_model::limits::KEY_BYTES_MAX;
use firn_model::{BlobRef, FirnError};
use firn_raft::ShardId;
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"FIRNBLB1";
const PART: &str = "part";
/// The file that says a shard's blobs are to be listed again (see [`BlobFiles::rescan`]);
/// not a blob's name, so [`BlobFiles::list`] passes over it.
const RESCAN: &str = ".rescan";
/// Bytes written to an upload between fsyncs, so that sealing waits for little.
const SYNC_EVERY_BYTES: u64 = 64 << 20;

/// A chunk's digest.
pub fn digest(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// The header a blob file starts with: the magic, the key's length and the key.
fn header(key: &[u8]) -> Vec<u8> {
    let mut header = Vec::with_capacity(MAGIC.len() + 2 + key.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(key.len() as u16).to_be_bytes());
    header.extend_from_slice(key);
    header
}

/// An upload being written here.
struct Upload {
    file: File,
    len: u64,
    digests: Vec<[u8; 32]>,
    unsynced: u64,
    touched: Instant,
}

/// A blob this node is writing: open for chunks, or busy — claimed by one writer (a chunk
/// being appended, a fetch taking its part file up, a seal), which works on the file outside
/// the lock. A part file has one writer at a time: a fetch that took up a file while a
/// chunk was still being appended to it (a dropped holder's last chunk, finishing after it
/// thawed) or while it was sealed would cut it back to its whole chunks under the other
/// writer, and the blob would be sealed short or with a hole.
enum Slot {
    Open(Upload),
    Busy,
}

/// One file found in a shard's directory.
pub struct Found {
    pub id: u128,
    /// Still being uploaded (or abandoned).
    pub part: bool,
    pub modified: SystemTime,
}

pub struct BlobFiles {
    root: PathBuf,
    uploads: Mutex<HashMap<(ShardId, u128), Slot>>,
}

fn busy(id: u128) -> FirnError {
    FirnError::TryAgain(format!(
        "blob {} is being written here by another transfer",
        blob_name(id)
    ))
}

fn io(what: &str, path: &Path, e: io::Error) -> FirnError {
    FirnError::Internal(format!("{what} {}: {e}", path.display()))
}

impl BlobFiles {
    pub fn new(root: PathBuf) -> Self {
        BlobFiles {
            root,
            uploads: Mutex::default(),
        }
    }

    fn dir(&self, shard: ShardId) -> PathBuf {
        self.root.join(shard.to_string())
    }

    /// Where blob `id` of `shard` lies once sealed.
    pub fn path(&self, shard: ShardId, id: u128) -> PathBuf {
        self.dir(shard).join(blob_name(id))
    }

    /// Where blob `id` of `shard` is written before it is sealed.
    pub fn part_path(&self, shard: ShardId, id: u128) -> PathBuf {
        self.dir(shard).join(format!("{}.{PART}", blob_name(id)))
    }

    fn uploads(&self) -> std::sync::MutexGuard<'_, HashMap<(ShardId, u128), Slot>> {
        self.uploads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims blob `id`'s slot for one writer: marks it busy and returns the upload open
    /// there, if any; `TryAgain` while another writer has it.
    fn claim(&self, shard: ShardId, id: u128) -> Result<Option<Upload>, FirnError> {
        match self.uploads().insert((shard, id), Slot::Busy) {
            Some(Slot::Busy) => Err(busy(id)),
            Some(Slot::Open(upload)) => Ok(Some(upload)),
            None => Ok(None),
        }
    }

    /// Ends a claim: the upload open again, or (`None`) the slot free.
    fn release(&self, shard: ShardId, id: u128, upload: Option<Upload>) {
        let mut uploads = self.uploads();
        match upload {
            Some(upload) => {
                uploads.insert((shard, id), Slot::Open(upload));
            }
            None => {
                if let Some(Slot::Busy) = uploads.get(&(shard, id)) {
                    uploads.remove(&(shard, id));
                }
            }
        }
    }

    /// Runs `work` on blob `id`'s slot, claimed: given the upload open there, it returns
    /// the upload to leave open (or none). Its error frees the slot.
    fn claimed(
        &self,
        shard: ShardId,
        id: u128,
        work: impl FnOnce(Option<Upload>) -> Result<Option<Upload>, FirnError>,
    ) -> Result<(), FirnError> {
        let held = self.claim(shard, id)?;
        match work(held) {
            Ok(upload) => {
                self.release(shard, id, upload);
                Ok(())
            }
            Err(e) => {
                self.release(shard, id, None);
                Err(e)
            }
        }
    }

    /// Appends a chunk at `offset` to an upload; offset 0 starts it (again), with `key`.
    /// Chunks come in order, each full-size but the last.
    pub fn write_chunk(
        &self,
        shard: ShardId,
        id: u128,
        key: &[u8],
        offset: u64,
        data: &[u8],
    ) -> Result<(), FirnError> {
        if data.is_empty() || data.len() > BLOB_CHUNK_BYTES {
            return Err(FirnError::BadArgument(format!(
                "a blob chunk holds 1 to {BLOB_CHUNK_BYTES} bytes, not {}",
                data.len()
            )));
        }
        self.claimed(shard, id, |held| {
            let upload = if offset == 0 {
                drop(held);
                self.start(shard, id, key)?
            } else {
                held.ok_or_else(|| {
                    FirnError::TryAgain(format!("no upload of blob {} here", blob_name(id)))
                })?
            };
            self.append(shard, id, upload, offset, data).map(Some)
        })
    }

    fn append(
        &self,
        shard: ShardId,
        id: u128,
        mut upload: Upload,
        offset: u64,
        data: &[u8],
    ) -> Result<Upload, FirnError> {
        let in_order = upload.len == offset && upload.len.is_multiple_of(BLOB_CHUNK_BYTES as u64);
        if !in_order {
            let _ = fs::remove_file(self.part_path(shard, id));
            return Err(FirnError::BadArgument(format!(
                "blob {} chunk at offset {offset}: the upload holds {} bytes",
                blob_name(id),
                upload.len
            )));
        }
        let path = self.part_path(shard, id);
        upload
            .file
            .write_all(data)
            .map_err(|e| io("writing", &path, e))?;
        upload.digests.push(digest(data));
        upload.len += data.len() as u64;
        upload.unsynced += data.len() as u64;
        if upload.unsynced >= SYNC_EVERY_BYTES {
            upload
                .file
                .sync_data()
                .map_err(|e| io("syncing", &path, e))?;
            upload.unsynced = 0;
        }
        upload.touched = Instant::now();
        Ok(upload)
    }

    /// Marks `blob`, the value of `key`, as wanted here, durably: when this node has neither
    /// its file nor a part file of it, an empty part file (the header alone) that a restart
    /// finds ([`super::repair`]) and a fetch takes up. A part file that exists is left as it
    /// is (an upload or a fetch writes it). Returns whether it made one.
    pub fn want(&self, blob: &BlobRef, key: &[u8]) -> Result<bool, FirnError> {
        let (shard, id) = (blob.shard, blob.id);
        if self.has(shard, id) {
            return Ok(false);
        }
        let path = self.new_part_path(shard, id, key)?;
        let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(io("creating", &path, e)),
        };
        if self.has(shard, id) {
            // Sealed meanwhile (its part file renamed): this one is not wanted.
            let _ = fs::remove_file(&path);
            return Ok(false);
        }
        file.write_all(&header(key))
            .and_then(|()| file.sync_all())
            .map_err(|e| io("writing", &path, e))?;
        self.sync_dir(shard)?;
        Ok(true)
    }

    /// Makes durable what was created, renamed or removed in `shard`'s folder.
    fn sync_dir(&self, shard: ShardId) -> Result<(), FirnError> {
        let dir = self.dir(shard);
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("syncing", &dir, e))
    }

    fn rescan_path(&self, shard: ShardId) -> PathBuf {
        self.dir(shard).join(RESCAN)
    }

    /// Notes, durably, that every blob `shard`'s versions name must be looked for here (a
    /// snapshot was installed), until [`BlobFiles::rescanned`] says it was.
    pub fn rescan(&self, shard: ShardId) -> Result<(), FirnError> {
        let dir = self.dir(shard);
        fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
        let path = self.rescan_path(shard);
        File::create(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("creating", &path, e))?;
        self.sync_dir(shard)
    }

    /// Whether [`BlobFiles::rescan`] was noted for `shard` and not yet done.
    pub fn rescan_due(&self, shard: ShardId) -> bool {
        self.rescan_path(shard).is_file()
    }

    /// The blobs `shard` names were each marked wanted or found here.
    pub fn rescanned(&self, shard: ShardId) {
        let _ = fs::remove_file(self.rescan_path(shard));
    }

    /// Marks a fetch of `blob` for `key` as under way: its `.part` file exists (with its
    /// header, durably) before any chunk is asked for, so that a restart finds it and goes
    /// on ([`super::repair`]). An upload open here already is left as it is; a part file left
    /// by an earlier run is taken up as far as its chunks match the manifest
    /// ([`BlobFiles::chunks_held`] then counts them). A part file another writer has (a
    /// chunk still being appended, a seal under way) is not touched: `TryAgain`.
    pub fn begin(&self, blob: &BlobRef, key: &[u8]) -> Result<(), FirnError> {
        let (shard, id) = (blob.shard, blob.id);
        self.claimed(shard, id, |held| {
            if held.is_some() {
                return Ok(held);
            }
            let path = self.part_path(shard, id);
            let upload = match self.reopen(blob, key) {
                Ok(upload) => upload,
                Err(e) => {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::warn!(path = %path.display(), error = %e, "a blob's part file could not be taken up; starting it again");
                    }
                    self.start(shard, id, key)?
                }
            };
            upload
                .file
                .sync_all()
                .map_err(|e| io("syncing", &path, e))?;
            self.sync_dir(shard)?;
            Ok(Some(upload))
        })
    }

    /// Closes an upload open here and keeps its part file: a fetch that failed holds no file
    /// descriptor while it waits to be tried again (many may wait), and
    /// [`BlobFiles::begin`] takes the file up again.
    pub fn close(&self, shard: ShardId, id: u128) {
        let mut uploads = self.uploads();
        if let Some(Slot::Open(_)) = uploads.get(&(shard, id)) {
            uploads.remove(&(shard, id));
        }
    }

    /// The part file of `blob` an earlier run (or a closed fetch) left, open at the end of the chunks it holds
    /// that match the manifest (whole chunks only; anything after them is cut off).
    fn reopen(&self, blob: &BlobRef, key: &[u8]) -> io::Result<Upload> {
        let path = self.part_path(blob.shard, blob.id);
        let mut file = OpenOptions::new().read(true).write(true).open(&path)?;
        let header = header(key);
        let mut head = vec![0u8; header.len()];
        file.read_exact(&mut head)?;
        if head != header {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not this blob's part file",
            ));
        }
        let mut digests = Vec::new();
        let mut chunk = vec![0u8; BLOB_CHUNK_BYTES];
        while let Some(wanted) = blob.digests.get(digests.len()) {
            match file.read_exact(&mut chunk) {
                Ok(()) if digest(&chunk) == *wanted => digests.push(*wanted),
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
        }
        let len = digests.len() as u64 * BLOB_CHUNK_BYTES as u64;
        let end = header.len() as u64 + len;
        file.set_len(end)?;
        file.seek(SeekFrom::Start(end))?;
        Ok(Upload {
            file,
            len,
            digests,
            unsynced: 0,
            touched: Instant::now(),
        })
    }

    /// Where the part file of blob `id` for `key` goes, its folder made; refuses a key out
    /// of bounds (it goes in the file's header).
    fn new_part_path(&self, shard: ShardId, id: u128, key: &[u8]) -> Result<PathBuf, FirnError> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err(FirnError::BadArgument(
                "a blob's key is 1 B to 8 KiB".into(),
            ));
        }
        let dir = self.dir(shard);
        fs::create_dir_all(&dir).map_err(|e| io("creating", &dir, e))?;
        Ok(self.part_path(shard, id))
    }

    fn start(&self, shard: ShardId, id: u128, key: &[u8]) -> Result<Upload, FirnError> {
        let path = self.new_part_path(shard, id, key)?;
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io("creating", &path, e))?;
        file.write_all(&header(key))
            .map_err(|e| io("writing", &path, e))?;
        Ok(Upload {
            file,
            len: 0,
            digests: Vec::new(),
            unsynced: 0,
            touched: Instant::now(),
        })
    }

    /// Seals an upload that matches `blob` exactly: durable, then visible under its name.
    /// Sealing a blob already sealed here succeeds.
    pub fn seal(&self, blob: &BlobRef) -> Result<(), FirnError> {
        match self.take_for_seal(blob)? {
            Some(upload) => self.finish_seal(blob, upload),
            None => Ok(()),
        }
    }

    /// The first half of [`BlobFiles::seal`]: the open upload, its slot claimed; `None`
    /// when the blob is sealed here already.
    fn take_for_seal(&self, blob: &BlobRef) -> Result<Option<Upload>, FirnError> {
        let (shard, id) = (blob.shard, blob.id);
        match self.claim(shard, id)? {
            Some(upload) => Ok(Some(upload)),
            None => {
                self.release(shard, id, None);
                if self.has(shard, id) {
                    Ok(None)
                } else {
                    Err(FirnError::TryAgain(format!(
                        "no upload of blob {} here",
                        blob.name()
                    )))
                }
            }
        }
    }

    /// The second half of [`BlobFiles::seal`], outside the lock: checked against the
    /// manifest, fsync'd, renamed; then the slot is free, whatever the outcome.
    fn finish_seal(&self, blob: &BlobRef, upload: Upload) -> Result<(), FirnError> {
        let sealed = self.write_seal(blob, upload);
        self.release(blob.shard, blob.id, None);
        sealed
    }

    fn write_seal(&self, blob: &BlobRef, upload: Upload) -> Result<(), FirnError> {
        let (shard, id) = (blob.shard, blob.id);
        let part = self.part_path(shard, id);
        if upload.len != blob.size || upload.digests != blob.digests {
            let _ = fs::remove_file(&part);
            return Err(FirnError::Internal(format!(
                "blob {}: {} bytes arrived here, not the manifest's {} (or a chunk differs)",
                blob.name(),
                upload.len,
                blob.size
            )));
        }
        upload
            .file
            .sync_all()
            .map_err(|e| io("syncing", &part, e))?;
        fs::rename(&part, self.path(shard, id)).map_err(|e| io("sealing", &part, e))?;
        self.sync_dir(shard)
    }

    /// Drops an upload and its file (sealed or not).
    pub fn discard(&self, shard: ShardId, id: u128) {
        self.uploads().remove(&(shard, id));
        let _ = fs::remove_file(self.part_path(shard, id));
        let _ = fs::remove_file(self.path(shard, id));
    }

    /// Whether blob `id` is sealed here.
    pub fn has(&self, shard: ShardId, id: u128) -> bool {
        self.path(shard, id).is_file()
    }

    /// Opens a sealed blob: the file, positioned at its first byte of data, and its key.
    fn open(&self, shard: ShardId, id: u128) -> io::Result<(File, Vec<u8>)> {
        let path = if self.has(shard, id) {
            self.path(shard, id)
        } else {
            self.part_path(shard, id)
        };
        let mut file = File::open(path)?;
        let mut head = [0u8; MAGIC.len() + 2];
        file.read_exact(&mut head)?;
        if &head[..MAGIC.len()] != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a blob file",
            ));
        }
        let mut key = vec![0u8; u16::from_be_bytes([head[8], head[9]]) as usize];
        file.read_exact(&mut key)?;
        Ok((file, key))
    }

    /// `len` bytes of sealed blob `id` from `offset`.
    pub fn read(&self, shard: ShardId, id: u128, offset: u64, len: usize) -> io::Result<Bytes> {
        if !self.has(shard, id) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("blob {} is not sealed here", blob_name(id)),
            ));
        }
        let (mut file, _) = self.open(shard, id)?;
        file.seek(SeekFrom::Current(offset as i64))?;
        let mut buf = vec![0u8; len];
        file.read_exact(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// The key a blob file (sealed or not) was uploaded for.
    pub fn key_of(&self, shard: ShardId, id: u128) -> io::Result<Vec<u8>> {
        self.open(shard, id).map(|(_, key)| key)
    }

    /// The shards with a directory here.
    pub fn shards(&self) -> Vec<ShardId> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// The blob files of `shard`.
    pub fn list(&self, shard: ShardId) -> Vec<Found> {
        let Ok(entries) = fs::read_dir(self.dir(shard)) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let (hex, part) = match name.split_once('.') {
                    Some((hex, PART)) => (hex.to_string(), true),
                    Some(_) => return None,
                    None => (name, false),
                };
                Some(Found {
                    id: u128::from_str_radix(&hex, 16).ok()?,
                    part,
                    modified: e.metadata().ok()?.modified().ok()?,
                })
            })
            .collect()
    }

    /// Whether an upload of blob `id` is open here and was written to within `within`.
    pub fn uploading(&self, shard: ShardId, id: u128, within: std::time::Duration) -> bool {
        match self.uploads().get(&(shard, id)) {
            Some(Slot::Open(u)) => u.touched.elapsed() < within,
            Some(Slot::Busy) => true,
            None => false,
        }
    }

    /// How many of `blob`'s chunks an upload of it open here already holds, in order and as
    /// the manifest has them: a fetch that failed part way goes on from there. 0 when there
    /// is none (or its chunks differ: the fetch then starts the file again).
    pub fn chunks_held(&self, blob: &BlobRef) -> usize {
        match self.uploads().get(&(blob.shard, blob.id)) {
            Some(Slot::Open(u))
                if blob.digests.starts_with(&u.digests)
                    && u.len == u.digests.len() as u64 * BLOB_CHUNK_BYTES as u64 =>
            {
                u.digests.len()
            }
            _ => 0,
        }
    }

    /// Removes a shard's directory (a replica moved elsewhere).
    pub fn remove_shard(&self, shard: ShardId) {
        self.uploads().retain(|(s, _), _| *s != shard);
        let _ = fs::remove_dir_all(self.dir(shard));
    }
}

#[cfg(test)]
mod tests;
