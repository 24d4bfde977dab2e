//! The mount as FUSE sees it: a read-only tree whose directories are listings of the file
//! view and whose files are ranged reads of it. The live tree follows writes: a file's
//! attributes are asked again after [`LIVE_TTL`], and a file opened reads the version it
//! found at `open` to its end (pinned by its commit stamp), so `md5sum` never mixes two
//! versions. A tree at a time (`--at`, `DIR/@T/`) never changes, and the kernel keeps it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};

use super::remote::{Failure, Remote, Stat};
use super::tree::{Entry, Kind, ROOT, Tree, child_path};

/// How long the kernel may keep what the live tree showed before asking again.
pub const LIVE_TTL: Duration = Duration::from_secs(1);
/// The same for a tree at a time, which never changes.
const PINNED_TTL: Duration = Duration::from_secs(3600);

/// What an open handle reads.
enum Handle {
    /// A file's version, pinned by its commit stamp.
    File { path: String, at: String },
    /// A directory's children as one listing read them: (inode, kind, name).
    Directory(Vec<(u64, FileType, String)>),
}

pub struct FirnFs {
    remote: Remote,
    tree: Mutex<Tree>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    uid: u32,
    gid: u32,
    /// The directories' times: when the mount began.
    mounted: SystemTime,
}

impl FirnFs {
    pub fn new(remote: Remote, prefix: String, at: Option<String>) -> Self {
        let (uid, gid) = process_owner();
        FirnFs {
            remote,
            tree: Mutex::new(Tree::new(prefix, at)),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            uid,
            gid,
            mounted: SystemTime::now(),
        }
    }

    fn entry(&self, ino: u64) -> Option<Entry> {
        self.tree.lock().ok()?.get(ino).cloned()
    }

    fn insert(&self, path: String, at: Option<String>, kind: Kind) -> u64 {
        match self.tree.lock() {
            Ok(mut t) => t.insert(path, at, kind),
            Err(poisoned) => poisoned.into_inner().insert(path, at, kind),
        }
    }

    fn ttl(at: &Option<String>) -> Duration {
        if at.is_some() { PINNED_TTL } else { LIVE_TTL }
    }

    fn attr(&self, ino: u64, kind: &Kind) -> FileAttr {
        let (file_type, size, mtime, perm, nlink) = match kind {
            Kind::Directory => (FileType::Directory, 0, self.mounted, 0o555, 2),
            Kind::File(info) => (FileType::RegularFile, info.size, info.mtime(), 0o444, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind: file_type,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 64 * 1024,
            flags: 0,
        }
    }

    /// Asks the node again what a live file is now; a pinned one, or a directory, as it is.
    fn fresh(&self, ino: u64, entry: Entry) -> Result<Entry, Errno> {
        if entry.at.is_some() || entry.kind == Kind::Directory || ino == ROOT {
            return Ok(entry);
        }
        match self.remote.stat(&entry.path, None) {
            Ok(Stat::File(info)) => {
                self.insert(entry.path.clone(), None, Kind::File(info.clone()));
                Ok(Entry {
                    kind: Kind::File(info),
                    ..entry
                })
            }
            Ok(Stat::Directory) | Err(Failure::NotFound) => Err(Errno::ENOENT),
            Err(f) => Err(errno(f)),
        }
    }

    fn handle(&self, h: Handle) -> FileHandle {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut handles) = self.handles.lock() {
            handles.insert(fh, h);
        }
        FileHandle(fh)
    }
}

/// Whom the mount's files belong to: the user and group running it (the owner of the
/// process's `/proc` directory, so without a call into libc).
fn process_owner() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or((0, 0), |m| (m.uid(), m.gid()))
}

/// A failure as the file system call that met it answers.
fn errno(f: Failure) -> Errno {
    match f {
        Failure::NotFound => Errno::ENOENT,
        Failure::Denied(why) => {
            tracing::warn!("refused: {why}");
            Errno::EACCES
        }
        Failure::Other(why) => {
            tracing::warn!("the node did not answer: {why}");
            Errno::EIO
        }
    }
}

impl Filesystem for FirnFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(dir) = self.entry(parent.0) else {
            return reply.error(Errno::ENOENT);
        };
        if dir.kind != Kind::Directory {
            return reply.error(Errno::ENOTDIR);
        }
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        // `@T` under the mount's root: the whole tree as it was at T (not listed).
        if parent.0 == ROOT
            && let Some(time) = name.strip_prefix('@')
        {
            let Ok(t) = firn_model::time::parse_read_time(time) else {
                return reply.error(Errno::ENOENT);
            };
            let at = Some(t.to_string());
            let ino = self.insert(dir.path.clone(), at.clone(), Kind::Directory);
            return reply.entry(
                &Self::ttl(&at),
                &self.attr(ino, &Kind::Directory),
                Generation(0),
            );
        }
        let path = child_path(&dir.path, name, false);
        let kind = match self.remote.stat(&path, dir.at.as_deref()) {
            Ok(Stat::File(info)) => Kind::File(info),
            Ok(Stat::Directory) => Kind::Directory,
            Err(f) => return reply.error(errno(f)),
        };
        let path = child_path(&dir.path, name, kind == Kind::Directory);
        let ino = self.insert(path, dir.at.clone(), kind.clone());
        reply.entry(&Self::ttl(&dir.at), &self.attr(ino, &kind), Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(entry) = self.entry(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let at = entry.at.clone();
        match self.fresh(ino.0, entry) {
            Ok(e) => reply.attr(&Self::ttl(&at), &self.attr(ino.0, &e.kind)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(entry) = self.entry(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let pinned = entry.at.is_some();
        let entry = match self.fresh(ino.0, entry) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let Kind::File(info) = &entry.kind else {
            return reply.error(Errno::EISDIR);
        };
        let at = entry.at.clone().unwrap_or_else(|| info.commit_ts.clone());
        let fh = self.handle(Handle::File {
            path: entry.path.clone(),
            at,
        });
        // A live file's size may change from open to open: read through to the node (the
        // end is where its answers end); a pinned one never changes, and stays cached.
        let flags = if pinned {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_DIRECT_IO
        };
        reply.opened(fh, flags);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let target = match self.handles.lock().ok().and_then(|h| match h.get(&fh.0) {
            Some(Handle::File { path, at }) => Some((path.clone(), at.clone())),
            _ => None,
        }) {
            Some(t) => t,
            None => return reply.error(Errno::EBADF),
        };
        match self.remote.read(&target.0, &target.1, offset, size) {
            Ok(data) => reply.data(&data),
            Err(f) => reply.error(errno(f)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut h) = self.handles.lock() {
            h.remove(&fh.0);
        }
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(dir) = self.entry(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if dir.kind != Kind::Directory {
            return reply.error(Errno::ENOTDIR);
        }
        let (_cut, children) = match self.remote.list(&dir.path, dir.at.as_deref()) {
            Ok(listing) => listing,
            // A directory whose last key went away meanwhile: empty.
            Err(Failure::NotFound) => (String::new(), Vec::new()),
            Err(f) => return reply.error(errno(f)),
        };
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".to_string()),
            (ino.0, FileType::Directory, "..".to_string()),
        ];
        for child in children {
            let directory = child.file.is_none();
            let path = child_path(&dir.path, &child.name, directory);
            let (kind, file_type) = match child.file {
                Some(info) => (Kind::File(info), FileType::RegularFile),
                None => (Kind::Directory, FileType::Directory),
            };
            let child_ino = self.insert(path, dir.at.clone(), kind);
            entries.push((child_ino, file_type, child.name));
        }
        reply.opened(self.handle(Handle::Directory(entries)), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Ok(handles) = self.handles.lock() else {
            return reply.error(Errno::EIO);
        };
        let Some(Handle::Directory(entries)) = handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut h) = self.handles.lock() {
            h.remove(&fh.0);
        }
        reply.ok();
    }
}
