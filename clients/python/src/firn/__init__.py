"""Firn's Python client: versioned keys with reads in the past, history, snapshots (one cut
across shards), watches, the shared log, consumer groups, causality tokens, and reads of a
node's shared-memory region; leases, and a lock and a leader election built on them
(:mod:`firn.concurrency`).

>>> import firn                                  # doctest: +SKIP
>>> with firn.Client("127.0.0.1:7379", "127.0.0.1:7380") as c:
...     w = c.put("sensor/7", "21.5")
...     c.get("sensor/7", version=w.version).text
'21.5'
"""

from .client import Client
from .concurrency import Election, Lease, Lock
from .errors import (
    AuthError,
    BusyGroupError,
    ClusterDownError,
    NoSpaceError,
    LateError,
    NotCompleteError,
    ClockSkewError,
    CompactedError,
    ConflictError,
    CrossSlotError,
    FirnConnectionError,
    FirnError,
    FirnTimeout,
    LeaseNotFoundError,
    NoGroupError,
    NoLogError,
    NotFoundError,
    PermissionDeniedError,
    RegionError,
    RequestError,
    ServiceTimeoutError,
    TrimmedError,
    TryAgainError,
    UncertainError,
)
from .groups import Group, Streams
from .log import Log, next_seq
from .models import (
    AutoClaimResult,
    ConsumerInfo,
    FileVersion,
    GroupInfo,
    Keyspace,
    LogInfo,
    Twin,
    Watermark,
    LogRecord,
    PendingEntry,
    PendingSummary,
    Snapshot,
    SnapshotPage,
    StreamEntry,
    Version,
    WatchEvent,
    TxnResult,
    WriteResult,
)
from .stamps import CommitTs, TimeLike
from .watch import Watch

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Lease",
    "Lock",
    "Election",
    "CommitTs",
    "TimeLike",
    "Version",
    "TxnResult",
    "WriteResult",
    "Snapshot",
    "SnapshotPage",
    "Watch",
    "WatchEvent",
    "Log",
    "LogRecord",
    "LogInfo",
    "next_seq",
    "Streams",
    "Group",
    "StreamEntry",
    "PendingSummary",
    "PendingEntry",
    "GroupInfo",
    "ConsumerInfo",
    "FileVersion",
    "AutoClaimResult",
    "Keyspace",
    "Twin",
    "Watermark",
    "FirnError",
    "RequestError",
    "LeaseNotFoundError",
    "NotFoundError",
    "ConflictError",
    "CompactedError",
    "TrimmedError",
    "NoLogError",
    "NoGroupError",
    "BusyGroupError",
    "CrossSlotError",
    "TryAgainError",
    "UncertainError",
    "ClusterDownError",
    "NoSpaceError",
    "LateError",
    "NotCompleteError",
    "ClockSkewError",
    "ServiceTimeoutError",
    "AuthError",
    "PermissionDeniedError",
    "FirnConnectionError",
    "FirnTimeout",
    "RegionError",
]
