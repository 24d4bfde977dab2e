//! The region file's layout: a header, a table of shard rows, a table of entries — all
//! little-endian 64-bit words, reached only as atomics. The writer and every reader use
//! these offsets and nothing else; `LAYOUT_VERSION` changes with any of them.

use std::sync::atomic::{AtomicU64, Ordering};

use firn_model::CommitTs;

use crate::error::RegionError;

/// "FIRNLOC1" read as a little-endian word: the first word of every region file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FIRNLOC1");
/// Bumped with any change of what follows; a reader refuses a file of another version.
pub const LAYOUT_VERSION: u64 = 1;

/// Slots looked at for one key (from its hash on, linear probing): bounds a read's work,
/// and a key that finds no slot within it is not published.
pub const PROBE_MAX: usize = 32;

/// Header words.
pub mod header {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const ENTRIES: usize = 2;
    pub const KEY_BYTES_MAX: usize = 3;
    pub const VALUE_BYTES_MAX: usize = 4;
    pub const SHARDS_MAX: usize = 5;
    pub const FILE_BYTES: usize = 6;
    pub const NODE_ID: usize = 7;
    pub const INCARNATION: usize = 8;
    pub const RETIRED: usize = 9;
    pub const HEARTBEAT_WALL_US: usize = 10;
    /// A seqlocked run: sequence, then the cluster id's two words.
    pub const CLUSTER: usize = 11;
    pub const CLUSTER_WORDS: usize = 3;
    /// The header's size in words (the rest reserved).
    pub const WORDS: usize = 32;
}

/// A shard row's words: the sequence (word 0), then the fields.
pub mod shard {
    /// Epoch in the low 32 bits; bit 32: present.
    pub const EPOCH: usize = 1;
    pub const APPLIED_WALL: usize = 2;
    pub const CLOSED_WALL: usize = 3;
    /// Applied's logical part in the low 32 bits, closed's in the high.
    pub const LOGICALS: usize = 4;
    pub const LEASE_UNTIL_MONO_NS: usize = 5;
    pub const WORDS: usize = 8;
    pub const PRESENT: u64 = 1 << 32;
}

/// An entry's words: the sequence (word 0), the fields, then the key's and the value's
/// words.
pub mod entry {
    pub const HASH: usize = 1;
    /// Shard in the high 32 bits, the shard's epoch when written in the low.
    pub const SHARD_EPOCH: usize = 2;
    /// Key length in bits 0..16, value length in 16..48, flags in 48..64.
    pub const LENS: usize = 3;
    pub const VERSION: usize = 4;
    pub const COMMIT_WALL: usize = 5;
    pub const COMMIT_LOGICAL: usize = 6;
    pub const FIXED_WORDS: usize = 7;
    pub const OCCUPIED: u64 = 1;
    pub const DELETED: u64 = 2;
    /// The key's newest value is too large for an entry: read it from the node.
    pub const NOT_LOCAL: u64 = 4;
}

/// The region's sizes. The file is sized for them up front; pages are touched as used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Entries in the table, a power of two: at most this many keys are published.
    pub entries: u32,
    /// Longest key published (a multiple of 8).
    pub key_bytes_max: u32,
    /// Largest value published (a multiple of 8); a larger one is read from the node.
    pub value_bytes_max: u32,
    /// Shard ids below this can be published (Firn has at most 256 shards of each
    /// durability: 512 ids).
    pub shards_max: u32,
}

/// Most entries a region may have: 16 M (tens of GiB of address space at the largest sizes).
pub const ENTRIES_MAX: u32 = 1 << 24;
/// Largest value an entry may hold: a local read copies the value, and entries are sized
/// for the largest, so large values belong to a read from the node.
pub const VALUE_BYTES_MAX_CEILING: u32 = 64 * 1024;
/// Longest key an entry may hold (Firn's own key limit).
pub const KEY_BYTES_MAX_CEILING: u32 = 8 * 1024;

impl Default for RegionConfig {
    /// 65,536 entries of up to 256-byte keys and 1 KiB values: 84 MiB of address space.
    fn default() -> Self {
        RegionConfig {
            entries: 1 << 16,
            key_bytes_max: 256,
            value_bytes_max: 1024,
            shards_max: 512,
        }
    }
}

impl RegionConfig {
    pub fn validate(&self) -> Result<(), RegionError> {
        let bad = |what: String| Err(RegionError::BadConfig(what));
        if !self.entries.is_power_of_two() || self.entries > ENTRIES_MAX {
            return bad(format!(
                "entries must be a power of two up to {ENTRIES_MAX}, not {}",
                self.entries
            ));
        }
        if self.key_bytes_max == 0
            || !self.key_bytes_max.is_multiple_of(8)
            || self.key_bytes_max > KEY_BYTES_MAX_CEILING
        {
            return bad(format!(
                "the key size must be a multiple of 8 from 8 to {KEY_BYTES_MAX_CEILING}, not {}",
                self.key_bytes_max
            ));
        }
        if !self.value_bytes_max.is_multiple_of(8) || self.value_bytes_max > VALUE_BYTES_MAX_CEILING
        {
            return bad(format!(
                "the value size must be a multiple of 8 up to {VALUE_BYTES_MAX_CEILING}, not {}",
                self.value_bytes_max
            ));
        }
        if self.shards_max == 0 || self.shards_max > 65_536 {
            return bad(format!(
                "shards_max must be 1..=65536, not {}",
                self.shards_max
            ));
        }
        Ok(())
    }

    pub(crate) fn entry_words(&self) -> usize {
        entry::FIXED_WORDS + (self.key_bytes_max / 8) as usize + (self.value_bytes_max / 8) as usize
    }

    pub(crate) fn shards_offset(&self) -> usize {
        header::WORDS
    }

    pub(crate) fn entries_offset(&self) -> usize {
        header::WORDS + self.shards_max as usize * shard::WORDS
    }

    /// The file's size in bytes.
    pub fn file_bytes(&self) -> u64 {
        (self.entries_offset() + self.entries as usize * self.entry_words()) as u64 * 8
    }
}

/// A view of a mapped region as words.
#[derive(Clone, Copy)]
pub(crate) struct Words<'a> {
    pub words: &'a [AtomicU64],
    pub config: &'a RegionConfig,
}

impl<'a> Words<'a> {
    pub fn load(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }

    pub fn shard_row(&self, shard: u32) -> &'a [AtomicU64] {
        let at = self.config.shards_offset() + shard as usize * shard::WORDS;
        &self.words[at..at + shard::WORDS]
    }

    pub fn entry(&self, slot: usize) -> &'a [AtomicU64] {
        let n = self.config.entry_words();
        let at = self.config.entries_offset() + slot * n;
        &self.words[at..at + n]
    }

    pub fn cluster(&self) -> &'a [AtomicU64] {
        &self.words[header::CLUSTER..header::CLUSTER + header::CLUSTER_WORDS]
    }
}

/// The slot a key's probe starts at, and its hash (stored in the entry to skip most key
/// comparisons).
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

pub(crate) fn commit_ts(wall: u64, logical: u64) -> CommitTs {
    CommitTs::new(wall, logical as u32)
}

/// The cluster id as two words and back.
pub(crate) fn cluster_words(id: [u8; 16]) -> [u64; 2] {
    let v = u128::from_be_bytes(id);
    [(v >> 64) as u64, v as u64]
}

pub(crate) fn cluster_id(words: [u64; 2]) -> [u8; 16] {
    (((words[0] as u128) << 64) | words[1] as u128).to_be_bytes()
}

/// A cluster id as users see it: 32 hex digits.
pub fn cluster_id_hex(id: &[u8; 16]) -> String {
    format!("{:032x}", u128::from_be_bytes(*id))
}

/// A cluster id from its 32 hex digits (`None`: not that).
pub fn parse_cluster_id(hex: &str) -> Option<[u8; 16]> {
    (hex.len() == 32)
        .then(|| u128::from_str_radix(hex, 16).ok())
        .flatten()
        .map(u128::to_be_bytes)
}

/// Reads the config a header states.
pub(crate) fn config_of(words: &[AtomicU64]) -> RegionConfig {
    let w = |i: usize| words[i].load(Ordering::Relaxed);
    RegionConfig {
        entries: w(header::ENTRIES) as u32,
        key_bytes_max: w(header::KEY_BYTES_MAX) as u32,
        value_bytes_max: w(header::VALUE_BYTES_MAX) as u32,
        shards_max: w(header::SHARDS_MAX) as u32,
    }
}

/// A mapping's bytes as atomic words.
///
/// # Safety
/// `ptr` must be 8-byte aligned (a page-aligned mapping is), valid for `len` bytes for
/// as long as the returned slice is used, and accessed by other threads or processes only
/// through atomics.
pub(crate) unsafe fn as_words<'a>(ptr: *const u8, len: usize) -> &'a [AtomicU64] {
    debug_assert_eq!(ptr as usize % 8, 0);
    // SAFETY: as the caller promises; AtomicU64 has the layout of u64.
    unsafe { std::slice::from_raw_parts(ptr as *const AtomicU64, len / 8) }
}

/// The host's monotonic clock in nanoseconds (CLOCK_MONOTONIC, shared by every process on
/// the host): what lease expiries are stated in.
pub fn now_mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
