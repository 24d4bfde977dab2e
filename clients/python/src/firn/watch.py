"""A watch: every committed version of a key or a prefix, as an iterator, read from the
node's Server-Sent Events endpoint ``GET /v1/watch``.

The node replays from ``from_version``/``from_time`` first, then follows live commits, from
every shard of the prefix. An ``event: error`` ends the stream and is raised
(``COMPACTED`` for a start below the retained history, ``TRYAGAIN`` for a watcher that fell
too far behind). Each event raises the client's causality token.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ._session import Session, SseStream, check_positive
from .errors import FirnError, error_from
from .models import WatchEvent
from .stamps import CommitTs, TimeLike, time_arg

__all__ = ["Watch"]


def _bytes_field(doc: Dict[str, Any], name: str) -> Optional[bytes]:
    if doc.get(name) is not None:
        return str(doc[name]).encode("utf-8")
    if doc.get(name + "_base64") is not None:
        return base64.b64decode(doc[name + "_base64"])
    return None


def event_from_json(kind: str, data: str) -> WatchEvent:
    doc = json.loads(data)
    key = _bytes_field(doc, "key")
    if key is None:
        raise FirnError(f"a watch event without a key: {data[:200]}", code="PROTOCOL")
    deleted = bool(doc.get("deleted", kind == "del"))
    return WatchEvent(
        kind=kind,
        key=key,
        version=int(doc["version"]),
        commit_ts=CommitTs.parse(doc["commit_ts"]),
        event_time=doc.get("event_time"),
        deleted=deleted,
        value=None if deleted else (_bytes_field(doc, "value") or b""),
    )


class Watch:
    """An open watch; iterate it for :class:`~firn.WatchEvent`. Use it as a context manager
    (or call :meth:`close`) to end it. The stream opens on the first ``next`` (or
    :meth:`open`); a start below the retained history raises there."""

    def __init__(
        self,
        session: Session,
        subject: bytes,
        *,
        prefix: bool,
        from_version: Optional[int],
        from_time: Optional[TimeLike],
        idle_timeout_s: Optional[float],
    ) -> None:
        if from_version is not None and from_time is not None:
            raise ValueError("give at most one of from_version and from_time")
        check_positive(from_version, "from_version")
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s is {idle_timeout_s}; it must be above 0")
        try:
            name = subject.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a watch over HTTP takes a UTF-8 key or prefix") from None
        query: List[Tuple[str, str]] = [("prefix" if prefix else "key", name)]
        if from_version is not None:
            query.append(("from_version", str(from_version)))
        if from_time is not None:
            query.append(("from_time", time_arg(from_time, "from_time")))
        self._session = session
        self._query = query
        self._idle_timeout_s = idle_timeout_s
        self._stream: Optional[SseStream] = None
        self._events: Optional[Iterator[Tuple[str, str, Optional[str]]]] = None

    def open(self) -> "Watch":
        """Opens the stream now (the node answers errors such as ``COMPACTED`` here)."""
        if self._stream is None:
            self._stream = self._session.http_stream("/v1/watch", self._query, self._idle_timeout_s)
            self._events = self._stream.events()
        return self

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> WatchEvent:
        self.open()
        assert self._events is not None
        for kind, data, _ in self._events:
            if kind == "error":
                self.close()
                raise _error_event(data)
            if kind not in ("put", "del"):
                continue
            ev = event_from_json(kind, data)
            self._session.observe(ev.commit_ts)
            return ev
        raise StopIteration

    def take(self, n: int) -> List[WatchEvent]:
        """The next ``n`` events (bounded by ``idle_timeout_s`` per event)."""
        check_positive(n, "n")
        out = []
        for ev in self:
            out.append(ev)
            if len(out) == n:
                break
        return out

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    def __enter__(self) -> "Watch":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_event(data: str) -> FirnError:
    try:
        doc = json.loads(data)
        return error_from(str(doc.get("error", "ERR")), str(doc.get("message", "")), doc)
    except (ValueError, AttributeError):
        return FirnError(f"the watch ended with an error: {data[:200]}")
