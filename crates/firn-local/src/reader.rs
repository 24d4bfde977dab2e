//! A reader of a node's region (any process on the host): maps it read-only and answers a
//! key's newest version with the bound it holds to, or why the node must be asked instead.
//! It never writes the region and never blocks.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use firn_model::CommitTs;
use memmap2::Mmap;

use crate::error::RegionError;
use crate::layout::{
    self, LAYOUT_VERSION, MAGIC, PROBE_MAX, RegionConfig, Words, entry, header, key_hash,
    now_mono_ns, shard,
};
use crate::seqlock::{self, Read};

/// How fresh a local answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Read under the node's leader lease for the key's shard: the answer shows every
    /// write acknowledged before the read began. The lease had this long left.
    Linearizable { lease_left_ns: u64 },
    /// Read from a replica: the answer holds every write to the key stamped up to
    /// `at_least`, and misses at most those of the last `staleness_us_max` µs.
    Stale {
        at_least: CommitTs,
        staleness_us_max: u64,
    },
}

/// A key's newest version, as the region holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalValue {
    /// `None`: the key is deleted. (With [`RegionReader::get_into`], the bytes are in the
    /// caller's buffer and this is `Some(empty)` for a live key.)
    pub value: Option<Vec<u8>>,
    pub version: u64,
    pub commit_ts: CommitTs,
    pub bound: Bound,
}

/// Why the region cannot answer: ask the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteReason {
    /// The key is not published here.
    NotPublished,
    /// This node holds no replica of the key's shard.
    ShardNotHere,
    /// Published before its shard was reset here: not trusted.
    Stale,
    /// The key's newest value is larger than an entry holds.
    NotLocal,
    /// The replica has not reached the caller's causality token yet.
    BehindToken { has: CommitTs },
    /// The key's entry kept changing while it was read.
    Contended,
    /// The node replaced the region file: open it again.
    Retired,
}

/// A local read's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalRead {
    Hit(LocalValue),
    Remote(RemoteReason),
}

/// The header, for diagnostics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    pub config: RegionConfig,
    pub node_id: u64,
    pub incarnation: u64,
    pub cluster_id: [u8; 16],
    /// Microseconds since the node last refreshed its heartbeat.
    pub heartbeat_age_us: u64,
}

pub struct RegionReader {
    path: PathBuf,
    config: RegionConfig,
    map: Mmap,
}

impl RegionReader {
    /// Maps the region at `path` read-only. Refuses a file that is not a region, of another
    /// layout version, of a size its header does not state, retired, or — with
    /// `expect_cluster` — of another cluster.
    pub fn open(path: &Path, expect_cluster: Option<[u8; 16]>) -> Result<Self, RegionError> {
        let io = |source| RegionError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the mapping is only ever read, through atomics (the node writes it).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        if map.len() < header::WORDS * 8 {
            return Err(RegionError::NotARegion {
                path: path.to_path_buf(),
            });
        }
        // SAFETY: page-aligned, lives as long as `map`, accessed atomically.
        let words = unsafe { layout::as_words(map.as_ptr(), map.len()) };
        let word = |i: usize| words[i].load(Ordering::Acquire);
        if word(header::MAGIC) != MAGIC {
            return Err(RegionError::NotARegion {
                path: path.to_path_buf(),
            });
        }
        if word(header::VERSION) != LAYOUT_VERSION {
            return Err(RegionError::LayoutVersion {
                path: path.to_path_buf(),
                found: word(header::VERSION),
                expected: LAYOUT_VERSION,
            });
        }
        let config = layout::config_of(words);
        if config.validate().is_err()
            || config.file_bytes() != map.len() as u64
            || word(header::FILE_BYTES) != map.len() as u64
        {
            return Err(RegionError::Size {
                path: path.to_path_buf(),
                actual: map.len() as u64,
                expected: word(header::FILE_BYTES),
            });
        }
        if word(header::RETIRED) != 0 {
            return Err(RegionError::Retired {
                path: path.to_path_buf(),
            });
        }
        let reader = RegionReader {
            path: path.to_path_buf(),
            config,
            map,
        };
        if let Some(expected) = expect_cluster {
            let found = reader.header().cluster_id;
            if found != expected {
                return Err(RegionError::OtherCluster {
                    path: path.to_path_buf(),
                    found: layout::cluster_id_hex(&found),
                    expected: layout::cluster_id_hex(&expected),
                });
            }
        }
        Ok(reader)
    }

    fn words(&self) -> Words<'_> {
        Words {
            // SAFETY: as in `open`.
            words: unsafe { layout::as_words(self.map.as_ptr(), self.map.len()) },
            config: &self.config,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> RegionHeader {
        let w = self.words();
        let cluster = match seqlock::read(w.cluster(), |c| {
            [c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)]
        }) {
            Read::Copied(words, _) => layout::cluster_id(words),
            Read::Contended => [0; 16],
        };
        RegionHeader {
            config: self.config.clone(),
            node_id: w.load(header::NODE_ID),
            incarnation: w.load(header::INCARNATION),
            cluster_id: cluster,
            heartbeat_age_us: firn_model::hlc::system_wall_us()
                .saturating_sub(w.load(header::HEARTBEAT_WALL_US)),
        }
    }

    /// `key`'s newest version, or why the node must be asked. With `after` (a causality
    /// token), an answer is at least that new.
    pub fn get(&self, key: &[u8], after: Option<CommitTs>) -> LocalRead {
        let mut buf = Vec::new();
        match self.get_into(key, after, &mut buf) {
            LocalRead::Hit(v) => LocalRead::Hit(LocalValue {
                value: v.value.map(|_| buf),
                ..v
            }),
            remote => remote,
        }
    }

    /// [`get`](Self::get) with the value's bytes in `buf` (no allocation when it has room);
    /// the answer's `value` is then `Some(empty)` for a live key, `None` for a deleted one.
    pub fn get_into(&self, key: &[u8], after: Option<CommitTs>, buf: &mut Vec<u8>) -> LocalRead {
        let w = self.words();
        if w.words[header::RETIRED].load(Ordering::Relaxed) != 0 {
            return LocalRead::Remote(RemoteReason::Retired);
        }
        if key.len() > self.config.key_bytes_max as usize {
            return LocalRead::Remote(RemoteReason::NotPublished);
        }
        for _ in 0..seqlock::READ_TRIES_MAX {
            match self.try_get(w, key, after, buf) {
                Attempt::Done(read) => return read,
                Attempt::Moved => continue,
            }
        }
        LocalRead::Remote(RemoteReason::Contended)
    }

    fn try_get(
        &self,
        w: Words<'_>,
        key: &[u8],
        after: Option<CommitTs>,
        buf: &mut Vec<u8>,
    ) -> Attempt {
        let Some((slot, seq, found)) = self.find(w, key, buf) else {
            return Attempt::Done(LocalRead::Remote(RemoteReason::Contended));
        };
        let Some(found) = found else {
            return Attempt::Done(LocalRead::Remote(RemoteReason::NotPublished));
        };
        let s = found.shard;
        if s >= self.config.shards_max {
            return Attempt::Done(LocalRead::Remote(RemoteReason::ShardNotHere));
        }
        // The shard's row after the entry, then the entry again: unchanged, the entry was
        // as copied when the row was read, so the row's stamps hold for it.
        let row = match seqlock::read(w.shard_row(s), |r| {
            let v = |i: usize| r[i - 1].load(Ordering::Relaxed);
            (
                v(shard::EPOCH),
                v(shard::APPLIED_WALL),
                v(shard::CLOSED_WALL),
                v(shard::LOGICALS),
                v(shard::LEASE_UNTIL_MONO_NS),
            )
        }) {
            Read::Copied(row, _) => row,
            Read::Contended => return Attempt::Done(LocalRead::Remote(RemoteReason::Contended)),
        };
        if !seqlock::unchanged(w.entry(slot), seq) {
            return Attempt::Moved;
        }
        let (epoch, applied_wall, closed_wall, logicals, lease_until) = row;
        if epoch & shard::PRESENT == 0 {
            return Attempt::Done(LocalRead::Remote(RemoteReason::ShardNotHere));
        }
        if epoch as u32 != found.epoch {
            return Attempt::Done(LocalRead::Remote(RemoteReason::Stale));
        }
        if found.flags & entry::NOT_LOCAL != 0 {
            return Attempt::Done(LocalRead::Remote(RemoteReason::NotLocal));
        }
        let applied = layout::commit_ts(applied_wall, logicals & 0xffff_ffff);
        let closed = layout::commit_ts(closed_wall, logicals >> 32);
        let has = applied.max(closed);
        // Even under the lease: a token may carry a stamp another replica applied before
        // this one (a commit reaches replicas in any order).
        if after.is_some_and(|t| t > has) {
            return Attempt::Done(LocalRead::Remote(RemoteReason::BehindToken { has }));
        }
        let now_ns = now_mono_ns();
        let bound = if lease_until > now_ns {
            Bound::Linearizable {
                lease_left_ns: lease_until - now_ns,
            }
        } else {
            Bound::Stale {
                at_least: has,
                staleness_us_max: firn_model::hlc::system_wall_us().saturating_sub(closed_wall),
            }
        };
        Attempt::Done(LocalRead::Hit(LocalValue {
            value: (found.flags & entry::DELETED == 0).then(Vec::new),
            version: found.version,
            commit_ts: found.commit_ts,
            bound,
        }))
    }

    /// The key's slot and the sequence it was copied at, with its fields (the value in
    /// `buf`), or `None` inside when the key has no entry. `None` outside: contended.
    fn find(
        &self,
        w: Words<'_>,
        key: &[u8],
        buf: &mut Vec<u8>,
    ) -> Option<(usize, u64, Option<Found>)> {
        let hash = key_hash(key);
        let mask = self.config.entries as usize - 1;
        let key_words = (self.config.key_bytes_max / 8) as usize;
        for i in 0..PROBE_MAX.min(self.config.entries as usize) {
            let slot = (hash as usize + i) & mask;
            let e = w.entry(slot);
            let copied = seqlock::read(e, |d| {
                let v = |i: usize| d[i - 1].load(Ordering::Relaxed);
                let lens = v(entry::LENS);
                let flags = lens >> 48;
                if flags & entry::OCCUPIED == 0 {
                    return Probe::Empty;
                }
                if v(entry::HASH) != hash || (lens & 0xffff) as usize != key.len() {
                    return Probe::Other;
                }
                let data = &d[entry::FIXED_WORDS - 1..];
                if !seqlock::bytes_equal(&data[..key_words], key) {
                    return Probe::Other;
                }
                let value_len = ((lens >> 16) & 0xffff_ffff) as usize;
                if flags & entry::NOT_LOCAL == 0 {
                    seqlock::load_bytes(&data[key_words..], value_len, buf);
                }
                let shard_epoch = v(entry::SHARD_EPOCH);
                Probe::Mine(Found {
                    shard: (shard_epoch >> 32) as u32,
                    epoch: shard_epoch as u32,
                    flags,
                    version: v(entry::VERSION),
                    commit_ts: layout::commit_ts(v(entry::COMMIT_WALL), v(entry::COMMIT_LOGICAL)),
                })
            });
            match copied {
                Read::Contended => return None,
                Read::Copied(Probe::Empty, seq) => return Some((slot, seq, None)),
                Read::Copied(Probe::Other, _) => continue,
                Read::Copied(Probe::Mine(found), seq) => return Some((slot, seq, Some(found))),
            }
        }
        Some((0, 0, None))
    }
}

enum Attempt {
    Done(LocalRead),
    /// The entry changed while the shard row was read: read again.
    Moved,
}

enum Probe {
    Empty,
    Other,
    Mine(Found),
}

struct Found {
    shard: u32,
    epoch: u32,
    flags: u64,
    version: u64,
    commit_ts: CommitTs,
}
