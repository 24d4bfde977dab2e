"""A reader of a node's region, ported from ``crates/firn-local/src/reader.rs``: maps the file
read-only and answers a key's newest version with the bound it holds to, or why the node
must be asked instead. It never writes the region and never blocks.

A read copies the key's entry (sequence e1), then its shard's row, then checks the entry's
sequence is still e1: the row was written after every entry of the batches it covers, so the
value is at least as new as the row's applied stamp, and at most ``now - closed`` stale; under
the node's leader lease (an expiry on the host's monotonic clock) it is linearizable.
"""

from __future__ import annotations

import enum
import mmap
import os
import sys
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from ..errors import RegionError
from ..stamps import CommitTs
from . import seqlock
from .layout import (
    LAYOUT_VERSION,
    MAGIC,
    PROBE_MAX,
    RegionConfig,
    cluster_id_hex,
    entry,
    header,
    key_hash,
    now_mono_ns,
    shard,
    system_wall_us,
)

__all__ = [
    "RemoteReason",
    "Linearizable",
    "Stale",
    "Remote",
    "LocalValue",
    "LocalRead",
    "RegionHeader",
    "RegionReader",
    "NotARegionError",
    "LayoutVersionError",
    "RegionSizeError",
    "RegionRetiredError",
    "OtherClusterError",
    "NotLiveRegionError",
]


class NotARegionError(RegionError):
    """The file is not a Firn local-read region (wrong magic, too short)."""


class LayoutVersionError(RegionError):
    def __init__(self, message: str, *, found: int, expected: int) -> None:
        super().__init__(message)
        self.found = found
        self.expected = expected


class RegionSizeError(RegionError):
    """The file's size is not the one its header states."""


class RegionRetiredError(RegionError):
    """The node replaced the region file: open it again."""


class OtherClusterError(RegionError):
    def __init__(self, message: str, *, found: str, expected: str) -> None:
        super().__init__(message)
        self.found = found
        self.expected = expected


class NotLiveRegionError(RegionError):
    """The file is not the node's live region (its incarnation differs from the node's)."""


class RemoteReason(enum.Enum):
    """Why the region cannot answer: ask the node."""

    NOT_PUBLISHED = "not_published"  # the key is not published here
    SHARD_NOT_HERE = "shard_not_here"  # this node holds no replica of the key's shard
    STALE = "stale"  # published before its shard was reset here: not trusted
    NOT_LOCAL = "not_local"  # the key's newest value is larger than an entry holds
    BEHIND_TOKEN = "behind_token"  # the replica has not reached the caller's token yet
    CONTENDED = "contended"  # the key's entry kept changing while it was read
    RETIRED = "retired"  # the node replaced the region file: open it again


@dataclass(frozen=True)
class Linearizable:
    """Read under the node's leader lease for the key's shard: the answer shows every write
    acknowledged before the read began. The lease had ``lease_left_ns`` left."""

    lease_left_ns: int


@dataclass(frozen=True)
class Stale:
    """Read from a replica: the answer holds every write to the key stamped up to
    ``at_least`` and misses at most those of the last ``staleness_us_max`` µs."""

    at_least: CommitTs
    staleness_us_max: int


@dataclass(frozen=True)
class Remote:
    """The region could not answer (``reason``); with ``BEHIND_TOKEN``, ``has`` is what the
    replica had."""

    reason: RemoteReason
    has: Optional[CommitTs] = None


@dataclass(frozen=True)
class LocalValue:
    """A key's newest version as the region holds it (``value`` ``None``: deleted)."""

    value: Optional[bytes]
    version: int
    commit_ts: CommitTs
    bound: Union[Linearizable, Stale]


LocalRead = Union[LocalValue, Remote]


@dataclass(frozen=True)
class RegionHeader:
    """The header, for diagnostics."""

    config: RegionConfig
    node_id: int
    incarnation: int
    cluster_id: str
    heartbeat_age_us: int


@dataclass(frozen=True)
class _Found:
    shard: int
    epoch: int
    flags: int
    version: int
    commit_ts: CommitTs
    value: bytes


_EMPTY = object()
_OTHER = object()


class RegionReader:
    """A node's region mapped read-only. :meth:`open` refuses a file that is not a region,
    of another layout version, of a size its header does not state, retired, or — with
    ``expect_cluster`` — of another cluster."""

    def __init__(self, path: str, config: RegionConfig, map_: mmap.mmap, words: memoryview) -> None:
        self.path = path
        self.config = config
        self._map = map_
        self._words = words

    @classmethod
    def open(cls, path: str, expect_cluster: Optional[str] = None) -> "RegionReader":
        if sys.byteorder != "little":
            raise RegionError(f"{path}: the region's words are little-endian; this host is {sys.byteorder}-endian")
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise RegionError(f"{path}: {e.strerror or e}") from e
        try:
            try:
                map_ = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:  # ValueError: an empty file
                raise NotARegionError(f"{path} is not a Firn local-read region ({e})") from e
        finally:
            os.close(fd)
        size = len(map_)
        if size < header.WORDS * 8:
            map_.close()
            raise NotARegionError(f"{path} is not a Firn local-read region (wrong magic)")
        words = memoryview(map_)[: size - size % 8].cast("Q")
        try:
            if words[header.MAGIC] != MAGIC:
                raise NotARegionError(f"{path} is not a Firn local-read region (wrong magic)")
            version = words[header.VERSION]
            if version != LAYOUT_VERSION:
                raise LayoutVersionError(
                    f"{path} has region layout {version}; this reader reads layout {LAYOUT_VERSION}",
                    found=version,
                    expected=LAYOUT_VERSION,
                )
            config = RegionConfig(
                entries=words[header.ENTRIES],
                key_bytes_max=words[header.KEY_BYTES_MAX],
                value_bytes_max=words[header.VALUE_BYTES_MAX],
                shards_max=words[header.SHARDS_MAX],
            )
            stated = words[header.FILE_BYTES]
            if config.problem() is not None or config.file_bytes() != size or stated != size:
                raise RegionSizeError(f"{path} is {size} bytes; its header says {stated}")
            if words[header.RETIRED] != 0:
                raise RegionRetiredError(f"{path} was replaced by its node (retired): open it again")
            reader = cls(path, config, map_, words)
            if expect_cluster is not None:
                found = reader.header().cluster_id
                if found != expect_cluster.lower():
                    raise OtherClusterError(
                        f"{path} belongs to cluster {found}, not {expect_cluster}", found=found, expected=expect_cluster
                    )
            return reader
        except BaseException:
            words.release()
            map_.close()
            raise

    def close(self) -> None:
        self._words.release()
        self._map.close()

    def __enter__(self) -> "RegionReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def header(self) -> RegionHeader:
        w = self._words
        copied = seqlock.read(w, header.CLUSTER, lambda d: (w[d], w[d + 1]))
        cluster = cluster_id_hex(copied[0]) if copied is not None else "0" * 32
        return RegionHeader(
            config=self.config,
            node_id=w[header.NODE_ID],
            incarnation=w[header.INCARNATION],
            cluster_id=cluster,
            heartbeat_age_us=max(0, system_wall_us() - w[header.HEARTBEAT_WALL_US]),
        )

    def get(self, key: bytes, after: Optional[CommitTs] = None) -> LocalRead:
        """``key``'s newest version, or why the node must be asked. With ``after`` (a
        causality token), an answer is at least that new."""
        if not isinstance(key, bytes):
            raise TypeError(f"key must be bytes, not {type(key).__name__}")
        if self._words[header.RETIRED] != 0:
            return Remote(RemoteReason.RETIRED)
        if len(key) > self.config.key_bytes_max:
            return Remote(RemoteReason.NOT_PUBLISHED)
        for _ in range(seqlock.READ_TRIES_MAX):
            read = self._try_get(key, after)
            if read is not None:
                return read
        return Remote(RemoteReason.CONTENDED)

    def _try_get(self, key: bytes, after: Optional[CommitTs]) -> Optional[LocalRead]:
        """One attempt; ``None`` when the entry changed while the shard row was read."""
        w = self._words
        found_at = self._find(key)
        if found_at is None:
            return Remote(RemoteReason.CONTENDED)
        slot_word, seq, found = found_at
        if found is None:
            return Remote(RemoteReason.NOT_PUBLISHED)
        s = found.shard
        if s >= self.config.shards_max:
            return Remote(RemoteReason.SHARD_NOT_HERE)
        # The shard's row after the entry, then the entry again: unchanged, the entry was
        # as copied when the row was read, so the row's stamps hold for it.
        row_at = self.config.shard_row(s)
        row = seqlock.read(
            w,
            row_at,
            lambda d: (
                w[d + shard.EPOCH - 1],
                w[d + shard.APPLIED_WALL - 1],
                w[d + shard.CLOSED_WALL - 1],
                w[d + shard.LOGICALS - 1],
                w[d + shard.LEASE_UNTIL_MONO_NS - 1],
            ),
        )
        if row is None:
            return Remote(RemoteReason.CONTENDED)
        if not seqlock.unchanged(w, slot_word, seq):
            return None
        epoch, applied_wall, closed_wall, logicals, lease_until = row[0]
        if epoch & shard.PRESENT == 0:
            return Remote(RemoteReason.SHARD_NOT_HERE)
        if epoch & 0xFFFF_FFFF != found.epoch:
            return Remote(RemoteReason.STALE)
        if found.flags & entry.NOT_LOCAL:
            return Remote(RemoteReason.NOT_LOCAL)
        applied = CommitTs(applied_wall, logicals & 0xFFFF_FFFF)
        closed = CommitTs(closed_wall, logicals >> 32)
        has = max(applied, closed)
        # Even under the lease: a token may carry a stamp another replica applied before
        # this one (a commit reaches replicas in any order).
        if after is not None and after > has:
            return Remote(RemoteReason.BEHIND_TOKEN, has)
        now_ns = now_mono_ns()
        bound: Union[Linearizable, Stale]
        if lease_until > now_ns:
            bound = Linearizable(lease_left_ns=lease_until - now_ns)
        else:
            bound = Stale(at_least=has, staleness_us_max=max(0, system_wall_us() - closed_wall))
        return LocalValue(
            value=None if found.flags & entry.DELETED else found.value,
            version=found.version,
            commit_ts=found.commit_ts,
            bound=bound,
        )

    def _find(self, key: bytes) -> Optional[Tuple[int, int, Optional[_Found]]]:
        """The key's entry word, the sequence it was copied at, and its fields (``None``
        inside: the key has no entry). ``None`` outside: contended."""
        w = self._words
        cfg = self.config
        h = key_hash(key)
        mask = cfg.entries - 1
        key_words = cfg.key_bytes_max // 8
        value_words = cfg.value_bytes_max // 8

        def copy(d: int) -> object:
            # d is the entry's first data word (field i is at d + i - 1).
            lens = w[d + entry.LENS - 1]
            flags = lens >> 48
            if flags & entry.OCCUPIED == 0:
                return _EMPTY
            if w[d + entry.HASH - 1] != h or lens & 0xFFFF != len(key):
                return _OTHER
            data = d + entry.FIXED_WORDS - 1
            if not seqlock.bytes_equal(w, data, key):
                return _OTHER
            value_len = (lens >> 16) & 0xFFFF_FFFF
            value = b"" if flags & entry.NOT_LOCAL else seqlock.load_bytes(w, data + key_words, value_len, value_words)
            shard_epoch = w[d + entry.SHARD_EPOCH - 1]
            return _Found(
                shard=shard_epoch >> 32,
                epoch=shard_epoch & 0xFFFF_FFFF,
                flags=flags,
                version=w[d + entry.VERSION - 1],
                commit_ts=CommitTs(w[d + entry.COMMIT_WALL - 1], w[d + entry.COMMIT_LOGICAL - 1] & 0xFFFF_FFFF),
                value=value,
            )

        for i in range(min(PROBE_MAX, cfg.entries)):
            slot = (h + i) & mask
            at = cfg.entry_at(slot)
            copied = seqlock.read(w, at, copy)
            if copied is None:
                return None
            probe, seq = copied
            if probe is _EMPTY:
                return at, seq, None
            if probe is _OTHER:
                continue
            assert isinstance(probe, _Found)
            return at, seq, probe
        return 0, 0, None
