"""What the client's calls answer: plain frozen dataclasses, one per kind of answer.

Keys, tags and values are ``bytes`` as stored (Firn keeps any bytes); ``.text`` decodes a
value as UTF-8 where that is what was stored. Times are ``CommitTs`` stamps and integer
microseconds, with ``datetime`` properties beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

from .stamps import CommitTs, datetime_from_us

__all__ = [
    "WriteResult",
    "Version",
    "Snapshot",
    "SnapshotPage",
    "WatchEvent",
    "LogRecord",
    "LogInfo",
    "StreamEntry",
    "PendingSummary",
    "PendingEntry",
    "GroupInfo",
    "ConsumerInfo",
    "AutoClaimResult",
    "Keyspace",
    "TxnResult",
]


@dataclass(frozen=True)
class WriteResult:
    """A write's answer: the version it made and its commit stamp."""

    key: bytes
    version: int
    commit_ts: CommitTs


@dataclass(frozen=True)
class TxnResult:
    """What :meth:`firn.Client.txn` did: whether every compare held (the ``then`` commands
    ran) or not (the ``otherwise`` commands), and each command's reply in order — its Redis
    reply (``b"OK"``, an integer, bytes or ``None``), or the :class:`~firn.FirnError` of a
    command that failed and changed nothing."""

    succeeded: bool
    replies: List[Any]


@dataclass(frozen=True)
class FileVersion:
    """The version :meth:`firn.Client.get_file` wrote to a file: its details and how many
    bytes its value has (the bytes themselves are in the file)."""

    key: bytes
    version: int
    commit_ts: CommitTs
    event_time: Optional[int]
    size: int


@dataclass(frozen=True)
class Version:
    """One version of a key. ``value`` is ``None`` for a tombstone (``deleted``);
    ``event_time`` is the writer's own time in µs since the epoch, when it gave one."""

    key: bytes
    version: int
    commit_ts: CommitTs
    event_time: Optional[int]
    deleted: bool
    value: Optional[bytes]

    @property
    def commit_time(self) -> datetime:
        """When the version was committed (the stamp's wall clock), UTC."""
        return self.commit_ts.datetime

    @property
    def event_datetime(self) -> Optional[datetime]:
        return None if self.event_time is None else datetime_from_us(self.event_time)

    @property
    def text(self) -> Optional[str]:
        """The value decoded as UTF-8 (``None`` for a tombstone)."""
        return None if self.value is None else self.value.decode("utf-8")


@dataclass(frozen=True)
class Snapshot:
    """Keys read as of one time across every shard. ``values`` maps each key asked for, in
    order, to its version at ``at`` (``None``: absent or deleted then)."""

    at: CommitTs
    values: Dict[bytes, Optional[Version]]

    def __getitem__(self, key: bytes) -> Optional[Version]:
        return self.values[key]


@dataclass(frozen=True)
class SnapshotPage:
    """One page of a prefix read at ``at``; ``cursor`` is ``None`` on the last page."""

    at: CommitTs
    keys: List[Version]
    cursor: Optional[str]


@dataclass(frozen=True)
class WatchEvent:
    """One committed version, as a watch delivers it (``kind`` is ``"put"`` or ``"del"``)."""

    kind: str
    key: bytes
    version: int
    commit_ts: CommitTs
    event_time: Optional[int]
    deleted: bool
    value: Optional[bytes]

    @property
    def text(self) -> Optional[str]:
        return None if self.value is None else self.value.decode("utf-8")


@dataclass(frozen=True)
class LogRecord:
    """A record of the shared log: its seq (``<ms>-<n>``), tags, payload and commit stamp."""

    seq: str
    tags: List[bytes]
    value: bytes
    commit_ts: CommitTs


@dataclass(frozen=True)
class LogInfo:
    """A tag's records: how many are held, the first and last (``None`` when none), the trim
    point (``"0-0"``: never trimmed) and how many were ever appended with the tag."""

    length: int
    first_seq: Optional[str]
    last_seq: Optional[str]
    first_kept_seq: str
    entries_added: int


@dataclass(frozen=True)
class StreamEntry:
    """A stream entry as a consumer gets it: ``fields`` in the entry's order. A record
    appended to the stream's log with ``FIRN.LOG APPEND`` (no field list) has ``value``
    instead; an entry deleted from the stream since its delivery has ``deleted`` set."""

    id: str
    fields: Optional[List[Tuple[bytes, bytes]]]
    value: Optional[bytes] = None
    deleted: bool = False

    def as_dict(self) -> Dict[bytes, bytes]:
        """The fields as a dict (a repeated name keeps its last value)."""
        return dict(self.fields or [])


@dataclass(frozen=True)
class PendingSummary:
    """``XPENDING key group``: entries delivered and not acked."""

    count: int
    first: Optional[str]
    last: Optional[str]
    consumers: Dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingEntry:
    id: str
    consumer: str
    idle_ms: int
    deliveries: int


@dataclass(frozen=True)
class GroupInfo:
    """``XINFO GROUPS``: a group with Firn's delivery options."""

    name: str
    consumers: int
    pending: int
    last_delivered_id: str
    entries_read: Optional[int]
    lag: Optional[int]
    policy: str
    key: Optional[str]
    ack_wait_ms: Optional[int]
    max_deliver: Optional[int]
    dead_letter: Optional[str]
    liveness_ms: Optional[int]


@dataclass(frozen=True)
class ConsumerInfo:
    """``XINFO CONSUMERS``: ``inactive_ms`` is ``None`` when it never got anything."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: Optional[int]


@dataclass(frozen=True)
class AutoClaimResult:
    """``XAUTOCLAIM``: where to go on (``"0-0"``: the end), what was claimed, and ids that
    were deleted from the stream (they left the pending list)."""

    next_id: str
    entries: List[StreamEntry]
    deleted: List[str]


@dataclass(frozen=True)
class Keyspace:
    """A keyspace definition (``FIRN.KEYSPACE LIST``)."""

    prefix: bytes
    mode: str
    max_versions: Optional[int]
    max_age_us: Optional[int]
    durability: str
    local: bool
    follow: str


@dataclass(frozen=True)
class Twin:
    """A device twin as one read saw it (``FIRN.TWIN GET``): the documents at
    ``name/desired`` and ``name/reported`` at time ``at``, each with its version (``None``:
    the key has none), and ``delta`` — every member of ``desired`` that ``reported`` lacks
    or holds another value for (``{}``: the device has caught up)."""

    at: CommitTs
    desired: Dict[str, Any]
    reported: Dict[str, Any]
    delta: Dict[str, Any]
    desired_version: Optional[Version]
    reported_version: Optional[Version]


@dataclass(frozen=True)
class Watermark:
    """A keyspace's event-time watermark (``FIRN.WATERMARK``): every write with an event
    time at or below ``watermark`` (µs since the epoch; ``None``: none yet) has arrived.
    ``advanced``: the highest a writer moved it to; ``lateness_us``: the allowed lateness
    (the watermark is at least now minus it); ``late``: what a late write becomes
    (``keep``: a correction, ``refuse``: ``LATE``)."""

    prefix: bytes
    watermark: Optional[int]
    advanced: Optional[int]
    lateness_us: Optional[int]
    late: str
