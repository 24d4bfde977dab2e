//! The region's one writer (the node): creates or reuses the file, publishes entries and
//! shard rows under their seqlocks. Never read by the node itself for answers — it only
//! keeps its own copy of the shard epochs to decide which slots are stale.

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;

use firn_model::CommitTs;
use memmap2::MmapMut;

use crate::access::RegionReaders;
use crate::error::RegionError;
use crate::layout::{
    self, LAYOUT_VERSION, MAGIC, PROBE_MAX, RegionConfig, Words, entry, header, key_hash, shard,
};
use crate::seqlock;

/// A shard's row as the writer states it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardState {
    /// The stamp of the newest entry this replica has applied.
    pub applied: CommitTs,
    /// Time closed through: this replica holds every write of the shard stamped up to it.
    pub closed: CommitTs,
    /// Host monotonic nanoseconds until which this node holds the shard's leader lease
    /// (0: no lease).
    pub lease_until_mono_ns: u64,
}

/// What [`RegionWriter::publish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    Stored,
    /// The value is too large for an entry: the key's entry now says "read from the node".
    Invalidated,
    /// Not published: the value or key is too large and the key has no entry, or the shard
    /// is not open here.
    Skipped,
    /// No free or stale slot within the key's probe window.
    Full,
}

#[derive(Clone, Copy, Default)]
struct ShardSlot {
    epoch: u32,
    present: bool,
}

pub struct RegionWriter {
    config: RegionConfig,
    map: MmapMut,
    /// Held open with an exclusive lock for as long as this writer lives: a second writer
    /// of the same file (two nodes given one path) would corrupt every entry.
    _lock: std::fs::File,
    shards: Vec<ShardSlot>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegionError + '_ {
    move |source| RegionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An exclusive lock beside the region (`<path>.lock`): the region itself is replaced by
/// rename when its size changes, so the lock lives in a file that never is. The node's
/// user's alone, whoever reads the region: anyone who could open it could take the lock
/// first and keep the node from starting.
fn lock_writer(path: &Path) -> Result<std::fs::File, RegionError> {
    let lock_path = path.with_extension("region-lock");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    // One an older build made may be open to others.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(&lock_path))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(RegionError::InUse {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

fn map_rw(path: &Path) -> Result<MmapMut, RegionError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    // SAFETY: the file is this node's; readers map it read-only and every access to the
    // mapping goes through atomics.
    unsafe { MmapMut::map_mut(&file) }.map_err(io(path))
}

impl RegionWriter {
    /// Opens the region at `path`, readable by `readers`: the file there if it has this
    /// layout and `config` and grants exactly `readers` (reused in place, so readers that
    /// map it see this run's writes), else a new one. Either way nothing published before
    /// is trusted: every shard is absent until [`open_shard`](Self::open_shard), under a
    /// new epoch.
    pub fn open(
        path: &Path,
        config: RegionConfig,
        node_id: u64,
        readers: RegionReaders,
    ) -> Result<Self, RegionError> {
        config.validate()?;
        let lock = lock_writer(path)?;
        // A file that grants other readers is replaced, not changed in place: a process
        // that mapped it while it was open to it keeps the mapping whatever the mode, so
        // only a new file (and the old one retired) shuts it out.
        let granted = readers.granted_by(path);
        let reusable = match map_rw(path) {
            Ok(map) if map.len() >= header::WORDS * 8 => {
                let words = Self::words_of(&map);
                let same = words[header::MAGIC].load(Ordering::Relaxed) == MAGIC
                    && words[header::VERSION].load(Ordering::Relaxed) == LAYOUT_VERSION
                    && layout::config_of(words) == config
                    && map.len() as u64 == config.file_bytes()
                    && granted;
                if !same && words[header::MAGIC].load(Ordering::Relaxed) == MAGIC {
                    // Readers of the old file must reopen.
                    words[header::RETIRED].store(1, Ordering::Release);
                }
                same.then_some(map)
            }
            _ => None,
        };
        let map = match reusable {
            Some(map) => map,
            None => Self::create(path, &config, readers)?,
        };
        let mut writer = RegionWriter {
            _lock: lock,
            shards: vec![ShardSlot::default(); config.shards_max as usize],
            config,
            map,
        };
        writer.start_run(node_id);
        Ok(writer)
    }

    /// A new zeroed file of `config`'s size with its header, readable by `readers`, moved
    /// into place whole.
    fn create(
        path: &Path,
        config: &RegionConfig,
        readers: RegionReaders,
    ) -> Result<MmapMut, RegionError> {
        let tmp = path.with_extension("region-new");
        // One left by a run that died mid-create may have been opened by anyone its mode
        // let in: a file made anew is open to nobody but its creator until `apply`.
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
            _ => {}
        }
        {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(&tmp))?;
            readers.apply(&file, &tmp)?;
            file.set_len(config.file_bytes()).map_err(io(&tmp))?;
        }
        let map = map_rw(&tmp)?;
        let words = Self::words_of(&map);
        let set = |i: usize, v: u64| words[i].store(v, Ordering::Relaxed);
        set(header::VERSION, LAYOUT_VERSION);
        set(header::ENTRIES, config.entries as u64);
        set(header::KEY_BYTES_MAX, config.key_bytes_max as u64);
        set(header::VALUE_BYTES_MAX, config.value_bytes_max as u64);
        set(header::SHARDS_MAX, config.shards_max as u64);
        set(header::FILE_BYTES, config.file_bytes());
        // The magic last: a file cut short before this is not a region.
        words[header::MAGIC].store(MAGIC, Ordering::Release);
        std::fs::rename(&tmp, path).map_err(io(path))?;
        Ok(map)
    }

    fn words_of(map: &MmapMut) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: a mapping is page-aligned and lives as long as `map`; every access to
        // it, here and in readers, is atomic.
        unsafe { layout::as_words(map.as_ptr(), map.len()) }
    }

    fn words(&self) -> Words<'_> {
        Words {
            words: Self::words_of(&self.map),
            config: &self.config,
        }
    }

    /// This run's start: a new incarnation, and every shard absent under a new epoch
    /// (epochs continue from the file, so no earlier entry matches one again).
    fn start_run(&mut self, node_id: u64) {
        let w = self.words();
        w.words[header::NODE_ID].store(node_id, Ordering::Relaxed);
        let incarnation = w.load(header::INCARNATION).wrapping_add(1);
        w.words[header::INCARNATION].store(incarnation, Ordering::Release);
        w.words[header::RETIRED].store(0, Ordering::Release);
        for s in 0..self.config.shards_max {
            let epoch = (self.words().shard_row(s)[shard::EPOCH].load(Ordering::Relaxed) as u32)
                .wrapping_add(1);
            self.shards[s as usize] = ShardSlot {
                epoch,
                present: false,
            };
            self.write_shard(s, ShardState::default());
        }
        self.heartbeat();
    }

    pub fn incarnation(&self) -> u64 {
        self.words().load(header::INCARNATION)
    }

    pub fn cluster_id(&self) -> [u8; 16] {
        let c = self.words().cluster();
        layout::cluster_id([c[1].load(Ordering::Relaxed), c[2].load(Ordering::Relaxed)])
    }

    /// Names the cluster the region belongs to (readers may insist on it).
    pub fn set_cluster_id(&mut self, id: [u8; 16]) {
        if self.cluster_id() == id {
            return;
        }
        let words = layout::cluster_words(id);
        seqlock::write(self.words().cluster(), |data| {
            data[0].store(words[0], Ordering::Relaxed);
            data[1].store(words[1], Ordering::Relaxed);
        });
    }

    /// Tells readers the node is alive (wall-clock µs).
    pub fn heartbeat(&mut self) {
        self.words().words[header::HEARTBEAT_WALL_US]
            .store(firn_model::hlc::system_wall_us(), Ordering::Relaxed);
    }

    fn valid_shard(&self, s: u32) -> bool {
        s < self.config.shards_max
    }

    /// The shard is served here from now on, under a new epoch.
    pub fn open_shard(&mut self, s: u32) {
        self.set_presence(s, true);
    }

    /// The shard is no longer here: readers go remote for its keys.
    pub fn close_shard(&mut self, s: u32) {
        self.set_presence(s, false);
    }

    /// Everything published for the shard so far is stale (its contents changed wholesale).
    pub fn invalidate_shard(&mut self, s: u32) {
        if self.valid_shard(s) {
            let present = self.shards[s as usize].present;
            self.set_presence(s, present);
        }
    }

    fn set_presence(&mut self, s: u32, present: bool) {
        if !self.valid_shard(s) {
            return;
        }
        let slot = &mut self.shards[s as usize];
        slot.epoch = slot.epoch.wrapping_add(1);
        slot.present = present;
        let state = self.shard_state(s);
        self.write_shard(
            s,
            ShardState {
                lease_until_mono_ns: if present {
                    state.lease_until_mono_ns
                } else {
                    0
                },
                ..state
            },
        );
    }

    fn shard_state(&self, s: u32) -> ShardState {
        let row = self.words().shard_row(s);
        let w = |i: usize| row[i].load(Ordering::Relaxed);
        let logicals = w(shard::LOGICALS);
        ShardState {
            applied: layout::commit_ts(w(shard::APPLIED_WALL), logicals & 0xffff_ffff),
            closed: layout::commit_ts(w(shard::CLOSED_WALL), logicals >> 32),
            lease_until_mono_ns: w(shard::LEASE_UNTIL_MONO_NS),
        }
    }

    /// States the shard's applied stamp, closed time and lease. Publish a batch's entries
    /// first, then this: a reader that sees this row then sees every entry before it.
    pub fn set_shard_state(&mut self, s: u32, state: ShardState) {
        if self.valid_shard(s) && self.shards[s as usize].present {
            self.write_shard(s, state);
        }
    }

    fn write_shard(&self, s: u32, state: ShardState) {
        let slot = self.shards[s as usize];
        let epoch = slot.epoch as u64 | if slot.present { shard::PRESENT } else { 0 };
        seqlock::write(self.words().shard_row(s), |row| {
            // `row` starts after the sequence word.
            let set = |i: usize, v: u64| row[i - 1].store(v, Ordering::Relaxed);
            set(shard::EPOCH, epoch);
            set(shard::APPLIED_WALL, state.applied.wall_us);
            set(shard::CLOSED_WALL, state.closed.wall_us);
            set(
                shard::LOGICALS,
                state.applied.logical as u64 | (state.closed.logical as u64) << 32,
            );
            set(shard::LEASE_UNTIL_MONO_NS, state.lease_until_mono_ns);
        });
    }

    /// Publishes `key`'s newest version in shard `s` (`value` `None`: deleted).
    pub fn publish(
        &mut self,
        s: u32,
        key: &[u8],
        value: Option<&[u8]>,
        version: u64,
        commit_ts: CommitTs,
    ) -> Published {
        self.publish_entry(s, key, value, version, commit_ts, true)
    }

    /// A version whose value is never held here (a large value, kept beside the log): the
    /// key's entry, if it has one, says "not local", so readers ask the node.
    pub fn publish_not_local(
        &mut self,
        s: u32,
        key: &[u8],
        version: u64,
        commit_ts: CommitTs,
    ) -> Published {
        self.publish_entry(s, key, Some(&[]), version, commit_ts, false)
    }

    fn publish_entry(
        &mut self,
        s: u32,
        key: &[u8],
        value: Option<&[u8]>,
        version: u64,
        commit_ts: CommitTs,
        may_fit: bool,
    ) -> Published {
        if !self.valid_shard(s) || !self.shards[s as usize].present {
            return Published::Skipped;
        }
        let fits = may_fit
            && key.len() <= self.config.key_bytes_max as usize
            && value.is_none_or(|v| v.len() <= self.config.value_bytes_max as usize);
        let hash = key_hash(key);
        let (slot, found) = match self.find_slot(key, hash) {
            Some(x) => x,
            None if fits => return Published::Full,
            None => return Published::Skipped,
        };
        if !fits && !found {
            return Published::Skipped;
        }
        let epoch = self.shards[s as usize].epoch;
        let (key_len, value_len) = (key.len() as u64, value.map_or(0, |v| v.len()) as u64);
        let flags = entry::OCCUPIED
            | if value.is_none() { entry::DELETED } else { 0 }
            | if fits { 0 } else { entry::NOT_LOCAL };
        let key_words = (self.config.key_bytes_max / 8) as usize;
        let words = self.words();
        seqlock::write(words.entry(slot), |e| {
            let set = |i: usize, v: u64| e[i - 1].store(v, Ordering::Relaxed);
            set(entry::HASH, hash);
            set(entry::SHARD_EPOCH, (s as u64) << 32 | epoch as u64);
            set(entry::VERSION, version);
            set(entry::COMMIT_WALL, commit_ts.wall_us);
            set(entry::COMMIT_LOGICAL, commit_ts.logical as u64);
            let data = &e[entry::FIXED_WORDS - 1..];
            if fits {
                set(entry::LENS, key_len | value_len << 16 | flags << 48);
                seqlock::store_bytes(&data[..key_words], key);
                seqlock::store_bytes(&data[key_words..], value.unwrap_or_default());
            } else {
                // The key stays (readers must find it, to learn it is not local).
                set(entry::LENS, key_len | flags << 48);
            }
        });
        if fits {
            Published::Stored
        } else {
            Published::Invalidated
        }
    }

    /// The key's slot (`true`: it has one) or, if it has none, the slot to give it: the
    /// first stale one in its probe window, else the first empty one. The whole window is
    /// searched first, so a key never has two live slots.
    fn find_slot(&self, key: &[u8], hash: u64) -> Option<(usize, bool)> {
        let words = self.words();
        let mask = self.config.entries as usize - 1;
        let key_words = (self.config.key_bytes_max / 8) as usize;
        let mut free = None;
        for i in 0..PROBE_MAX.min(self.config.entries as usize) {
            let slot = (hash as usize + i) & mask;
            let e = words.entry(slot);
            let lens = e[entry::LENS].load(Ordering::Relaxed);
            if lens >> 48 & entry::OCCUPIED == 0 {
                return Some(free.unwrap_or((slot, false)));
            }
            let same = e[entry::HASH].load(Ordering::Relaxed) == hash
                && (lens & 0xffff) as usize == key.len()
                && key.len() <= self.config.key_bytes_max as usize
                && seqlock::bytes_equal(
                    &e[entry::FIXED_WORDS..entry::FIXED_WORDS + key_words],
                    key,
                );
            if same {
                return Some((slot, true));
            }
            if free.is_none() && self.is_stale(e[entry::SHARD_EPOCH].load(Ordering::Relaxed)) {
                free = Some((slot, false));
            }
        }
        free
    }

    fn is_stale(&self, shard_epoch: u64) -> bool {
        let s = (shard_epoch >> 32) as usize;
        self.shards
            .get(s)
            .is_none_or(|slot| !slot.present || slot.epoch != shard_epoch as u32)
    }
}

impl Drop for RegionWriter {
    /// A node that stops tells readers so: every shard is absent, reads go to the node.
    fn drop(&mut self) {
        for s in 0..self.config.shards_max {
            if self.shards[s as usize].present {
                self.close_shard(s);
            }
        }
    }
}
