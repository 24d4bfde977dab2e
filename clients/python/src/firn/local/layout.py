"""The region file's layout, as ``crates/firn-local/src/layout.rs`` defines it: a header, a
table of shard rows, a table of entries — all little-endian 64-bit words. The offsets here
must match the Rust ones word for word; ``LAYOUT_VERSION`` changes with any of them, and a
reader refuses a file of another version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import xxhash

#: "FIRNLOC1" read as a little-endian word: the first word of every region file.
MAGIC = int.from_bytes(b"FIRNLOC1", "little")
#: The layout this reader understands.
LAYOUT_VERSION = 1
#: Slots looked at for one key (from its hash on, linear probing).
PROBE_MAX = 32

ENTRIES_MAX = 1 << 24
VALUE_BYTES_MAX_CEILING = 64 * 1024
KEY_BYTES_MAX_CEILING = 8 * 1024


class header:
    """Header words."""

    MAGIC = 0
    VERSION = 1
    ENTRIES = 2
    KEY_BYTES_MAX = 3
    VALUE_BYTES_MAX = 4
    SHARDS_MAX = 5
    FILE_BYTES = 6
    NODE_ID = 7
    INCARNATION = 8
    RETIRED = 9
    HEARTBEAT_WALL_US = 10
    #: A seqlocked run: sequence, then the cluster id's two words.
    CLUSTER = 11
    CLUSTER_WORDS = 3
    WORDS = 32


class shard:
    """A shard row's words: the sequence (word 0), then the fields."""

    #: Epoch in the low 32 bits; bit 32: present.
    EPOCH = 1
    APPLIED_WALL = 2
    CLOSED_WALL = 3
    #: Applied's logical part in the low 32 bits, closed's in the high.
    LOGICALS = 4
    LEASE_UNTIL_MONO_NS = 5
    WORDS = 8
    PRESENT = 1 << 32


class entry:
    """An entry's words: the sequence (word 0), the fields, then the key's and the value's
    words."""

    HASH = 1
    #: Shard in the high 32 bits, the shard's epoch when written in the low.
    SHARD_EPOCH = 2
    #: Key length in bits 0..16, value length in 16..48, flags in 48..64.
    LENS = 3
    VERSION = 4
    COMMIT_WALL = 5
    COMMIT_LOGICAL = 6
    FIXED_WORDS = 7
    OCCUPIED = 1
    DELETED = 2
    #: The key's newest value is too large for an entry: read it from the node.
    NOT_LOCAL = 4


@dataclass(frozen=True)
class RegionConfig:
    """The region's sizes, as its header states them."""

    entries: int
    key_bytes_max: int
    value_bytes_max: int
    shards_max: int

    def problem(self) -> "str | None":
        """What is wrong with these sizes (``RegionConfig::validate``), or ``None``."""
        if self.entries <= 0 or self.entries & (self.entries - 1) or self.entries > ENTRIES_MAX:
            return f"entries must be a power of two up to {ENTRIES_MAX}, not {self.entries}"
        if self.key_bytes_max == 0 or self.key_bytes_max % 8 or self.key_bytes_max > KEY_BYTES_MAX_CEILING:
            return f"the key size must be a multiple of 8 from 8 to {KEY_BYTES_MAX_CEILING}, not {self.key_bytes_max}"
        if self.value_bytes_max % 8 or self.value_bytes_max > VALUE_BYTES_MAX_CEILING:
            return f"the value size must be a multiple of 8 up to {VALUE_BYTES_MAX_CEILING}, not {self.value_bytes_max}"
        if self.shards_max == 0 or self.shards_max > 65_536:
            return f"shards_max must be 1..=65536, not {self.shards_max}"
        return None

    @property
    def entry_words(self) -> int:
        return entry.FIXED_WORDS + self.key_bytes_max // 8 + self.value_bytes_max // 8

    @property
    def shards_offset(self) -> int:
        return header.WORDS

    @property
    def entries_offset(self) -> int:
        return header.WORDS + self.shards_max * shard.WORDS

    def file_bytes(self) -> int:
        return (self.entries_offset + self.entries * self.entry_words) * 8

    def shard_row(self, s: int) -> int:
        """The word index of shard ``s``'s row."""
        return self.shards_offset + s * shard.WORDS

    def entry_at(self, slot: int) -> int:
        """The word index of entry ``slot``."""
        return self.entries_offset + slot * self.entry_words


def key_hash(key: bytes) -> int:
    """The slot a key's probe starts at, and its stored hash: xxh3-64, seed 0 (as
    ``xxhash_rust::xxh3::xxh3_64``)."""
    return xxhash.xxh3_64_intdigest(key)


def cluster_id_hex(words: "tuple[int, int]") -> str:
    """The cluster id's two words (high, low) as 32 hex digits, as users see it."""
    return f"{(words[0] << 64) | words[1]:032x}"


def now_mono_ns() -> int:
    """The host's CLOCK_MONOTONIC in ns, shared by every process: what lease expiries are
    stated in."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def system_wall_us() -> int:
    return time.time_ns() // 1000
