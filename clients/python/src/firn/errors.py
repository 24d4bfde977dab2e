"""The client's one exception family: every error the server answers, by its code, and what
goes wrong on the client's side (a connection lost, a wait that ran out, a region refused).

A server error keeps its code (``CONFLICT``, ``TRYAGAIN``, …) and message; the codes a
caller acts on have their own class, with the detail the server sent (a conflict's current
version, a trim point) as attributes. Bad arguments caught before anything is sent raise
``ValueError`` or ``TypeError`` with what was wrong and what is allowed.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Type

__all__ = [
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
    "FirnConnectionError",
    "FirnTimeout",
    "RegionError",
    "AuthError",
    "PermissionDeniedError",
    "error_from",
]


class FirnError(Exception):
    """An error from Firn or from this client. ``code`` is the server's error code
    (``ERR``, ``CONFLICT``, …) or a client-side one (``CONNECTION``, ``TIMEOUT``, ``REGION``)."""

    code: str = "ERR"

    def __init__(self, message: str, *, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class RequestError(FirnError):
    """``ERR``: the request was refused as malformed or out of bounds; nothing changed."""


class LeaseNotFoundError(RequestError):
    """``ERR lease not found``: the lease expired, was revoked, or was never granted; its
    keys are gone. ``lease`` is its id when the client knows which it asked about."""

    def __init__(self, message: str, *, lease: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        self.lease = lease


class NotFoundError(FirnError):
    """HTTP 404 for a route or a key that is not there."""

    code = "NOTFOUND"


class ConflictError(FirnError):
    """``CONFLICT``: an ``if_version`` condition failed; nothing was written."""

    code = "CONFLICT"

    def __init__(self, message: str, *, current_version: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        if current_version is None:
            m = re.search(r"current version is (\d+)", message)
            current_version = int(m.group(1)) if m else None
        self.current_version = current_version


class CompactedError(FirnError):
    """``COMPACTED``: the versions asked for were truncated."""

    code = "COMPACTED"

    def __init__(self, message: str, *, oldest_version: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        if oldest_version is None:
            m = re.search(r"oldest available version is (\d+)", message)
            oldest_version = int(m.group(1)) if m else None
        self.oldest_version = oldest_version


class TrimmedError(FirnError):
    """``TRIMMED``: a log read started below its tag's trim point; read from ``first_kept``."""

    code = "TRIMMED"

    def __init__(self, message: str, *, first_kept: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message, code=code)
        if first_kept is None:
            m = re.search(r"first kept seq is (\d+-\d+)", message)
            first_kept = m.group(1) if m else None
        self.first_kept = first_kept


class NoLogError(FirnError):
    """``NOLOG``: nothing was ever appended to the log."""

    code = "NOLOG"


class NoGroupError(FirnError):
    """``NOGROUP``: the consumer group (or its stream) does not exist."""

    code = "NOGROUP"


class BusyGroupError(FirnError):
    """``BUSYGROUP``: the group already exists."""

    code = "BUSYGROUP"


class CrossSlotError(FirnError):
    """``CROSSSLOT``: keys that must share a shard do not."""

    code = "CROSSSLOT"


class TryAgainError(FirnError):
    """``TRYAGAIN``: transient (leader change, a peer unreachable, a time not closed yet);
    the request was not applied: retry."""

    code = "TRYAGAIN"


class UncertainError(FirnError):
    """``UNCERTAIN``: a write whose outcome is unknown. The client sends its writes again
    with their idempotency key (applied once); one still uncertain after that may or may
    not have applied."""

    code = "UNCERTAIN"


class ClusterDownError(FirnError):
    """``CLUSTERDOWN``: the shard cannot serve (no leader or quorum)."""

    code = "CLUSTERDOWN"


class NoSpaceError(FirnError):
    """``NOSPACE``: the data disk of the shard's leader is below its free-space reserve; the
    write was refused and nothing changed. Reads, deletes and truncations still run; writes
    are taken again once space is freed."""

    code = "NOSPACE"


class LateError(FirnError):
    """``LATE``: the write's event time is at or below its keyspace's watermark, and the
    keyspace refuses late writes; nothing was written."""

    code = "LATE"


class NotCompleteError(FirnError):
    """``NOTCOMPLETE``: the keyspace's watermark did not reach the event time asked for in
    time (a ``complete`` read, :meth:`~firn.Client.wait_watermark`); ask again later."""

    code = "NOTCOMPLETE"


class ClockSkewError(FirnError):
    """``CLOCKSKEW``: the node that would stamp the write has a clock beyond the cluster's
    bound on clock offsets; nothing was written. Retry at another node."""

    code = "CLOCKSKEW"


class ServiceTimeoutError(FirnError):
    """``TIMEOUT``: a service request got no reply in time."""

    code = "TIMEOUT"


class FirnConnectionError(FirnError, ConnectionError):
    """The node could not be reached, or the connection broke mid-request (a write sent
    then may or may not have been applied)."""

    code = "CONNECTION"


class FirnTimeout(FirnError, TimeoutError):
    """A wait on the client's side ran out (no reply, no watch event, no delivery)."""

    code = "TIMEOUT"


class RegionError(FirnError):
    """The shared-memory region cannot be used: not on this host, not a region, another
    layout version, another cluster, retired, or not the node's live region."""

    code = "REGION"


class AuthError(FirnError):
    """``NOAUTH`` (the node has users and this client gave no credentials) or ``WRONGPASS``
    (a wrong user name, password or token): see ``Client(username=, password=, token=)``."""

    code = "NOAUTH"


class PermissionDeniedError(FirnError):
    """``NOPERM``: the user lacks a permission the request needs (read, write or admin on
    the keys it names); nothing was read or written."""

    code = "NOPERM"


_BY_CODE: Dict[str, Type[FirnError]] = {
    "ERR": RequestError,
    "NOTFOUND": NotFoundError,
    "CONFLICT": ConflictError,
    "COMPACTED": CompactedError,
    "TRIMMED": TrimmedError,
    "NOLOG": NoLogError,
    "NOGROUP": NoGroupError,
    "BUSYGROUP": BusyGroupError,
    "CROSSSLOT": CrossSlotError,
    "TRYAGAIN": TryAgainError,
    "UNCERTAIN": UncertainError,
    "CLUSTERDOWN": ClusterDownError,
    "NOSPACE": NoSpaceError,
    "LATE": LateError,
    "NOTCOMPLETE": NotCompleteError,
    "CLOCKSKEW": ClockSkewError,
    "TIMEOUT": ServiceTimeoutError,
    "NOAUTH": AuthError,
    "WRONGPASS": AuthError,
    "NOPERM": PermissionDeniedError,
}


def error_from(code: str, message: str, detail: Optional[Dict[str, Any]] = None) -> FirnError:
    """The exception for a server error ``code`` (unknown codes: ``FirnError`` with that code)."""
    detail = detail or {}
    cls = _BY_CODE.get(code)
    if cls is ConflictError:
        v = detail.get("current_version")
        return ConflictError(message, current_version=int(v) if v is not None else None)
    if cls is CompactedError:
        v = detail.get("oldest_version")
        return CompactedError(message, oldest_version=int(v) if v is not None else None)
    if cls is TrimmedError:
        v = detail.get("first_kept")
        return TrimmedError(message, first_kept=str(v) if v is not None else None)
    if cls is RequestError and message.startswith("lease not found"):
        return LeaseNotFoundError(message, code=code)
    if cls is None:
        return FirnError(message, code=code)
    return cls(message, code=code)


def error_from_resp(text: str) -> FirnError:
    """An error line as the server sent it: ``CODE message`` (the session's parser keeps the
    code, ``ERR`` included)."""
    code, _, message = text.partition(" ")
    if code and code.isupper():
        return error_from(code, message)
    return RequestError(text)
