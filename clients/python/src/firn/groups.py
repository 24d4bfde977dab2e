"""Redis Streams and consumer groups on Firn's log, with Firn's delivery options
(``POLICY first|roundrobin|hrw``, ``ACKWAIT``, ``MAXDELIVER``/``DEADLETTER``, ``LIVENESS``).

Commands go over the client's RESP session; :meth:`Group.consume` follows a consumer's
deliveries through the node's Server-Sent Events endpoint (its pending entries first, then
new ones), at least once: an entry stays pending until it is acked.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._session import Session, as_bytes, check_positive, mapping_items, opt_int, parse_map, text
from .errors import FirnError, error_from
from .log import BLOCK_MS_MAX, seq_arg
from .models import AutoClaimResult, ConsumerInfo, GroupInfo, PendingEntry, PendingSummary, StreamEntry
from .stamps import CommitTs

__all__ = ["Streams", "Group"]

Bytesish = Union[str, bytes]
Fields = Union[Mapping[Bytesish, Bytesish], Sequence[Tuple[Bytesish, Bytesish]]]
POLICIES = ("first", "roundrobin", "hrw")
COUNT_MAX = 10_000


def entry_from(reply: Any) -> StreamEntry:
    ident, fields = reply
    if fields is None:
        return StreamEntry(id=text(ident) or "", fields=None, deleted=True)
    return StreamEntry(id=text(ident) or "", fields=[(fields[i], fields[i + 1]) for i in range(0, len(fields), 2)])


def entry_from_json(doc: Dict[str, Any]) -> StreamEntry:
    ident = str(doc["id"])
    if doc.get("deleted"):
        return StreamEntry(id=ident, fields=None, deleted=True)
    if doc.get("fields") is not None:
        return StreamEntry(id=ident, fields=[(k.encode(), str(v).encode()) for k, v in doc["fields"].items()])
    if doc.get("fields_base64") is not None:
        return StreamEntry(
            id=ident, fields=[(base64.b64decode(k), base64.b64decode(v)) for k, v in doc["fields_base64"]]
        )
    if doc.get("value") is not None:
        return StreamEntry(id=ident, fields=None, value=str(doc["value"]).encode())
    if doc.get("value_base64") is not None:
        return StreamEntry(id=ident, fields=None, value=base64.b64decode(doc["value_base64"]))
    raise FirnError(f"an entry of unknown shape: {json.dumps(doc)[:200]}", code="PROTOCOL")


def _id_arg(ident: Union[str, int], what: str) -> str:
    return seq_arg(ident, what, ends=False)


def _name(value: Bytesish, what: str) -> bytes:
    b = as_bytes(value, what)
    if not 1 <= len(b) <= 1024:
        raise ValueError(f"{what} is {len(b)} bytes; it must be 1 to 1024")
    return b


class Streams:
    """``client.streams``: stream entries (``XADD``, ``XRANGE``, ``XLEN``) and groups."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, stream: Bytesish, fields: Fields, *, id: str = "*") -> str:
        """``XADD``: appends an entry with ``fields`` (a dict or ``(name, value)`` pairs, in
        order); answers its id."""
        items = mapping_items(fields)
        if not items:
            raise ValueError("an entry needs at least one field")
        flat: List[bytes] = []
        for k, v in items:
            flat += [as_bytes(k, "field name"), as_bytes(v, "field value")]
        if id != "*":
            _id_arg(id, "id")
        ident, token = self._session.pipeline([["XADD", as_bytes(stream, "stream"), id, *flat], ["FIRN.TOKEN"]])
        self._session.seen_over_resp(CommitTs.parse(token))
        return text(ident) or ""

    def range(self, stream: Bytesish, start: str = "-", end: str = "+", *, count: Optional[int] = None) -> List[StreamEntry]:
        check_positive(count, "count")
        args: List[Any] = ["XRANGE", as_bytes(stream, "stream"), start, end]
        if count is not None:
            args += ["COUNT", count]
        return [entry_from(e) for e in self._session.call(*args)]

    def length(self, stream: Bytesish) -> int:
        return int(self._session.call("XLEN", as_bytes(stream, "stream")))

    def groups(self, stream: Bytesish) -> List[GroupInfo]:
        """``FIRN.GROUPS``: every group of the stream (``XINFO GROUPS``'s fields) with its
        delivery options."""
        out = []
        for r in self._session.call("FIRN.GROUPS", as_bytes(stream, "stream")):
            m = parse_map(r)
            out.append(
                GroupInfo(
                    name=text(m[b"name"]) or "",
                    consumers=int(m[b"consumers"]),
                    pending=int(m[b"pending"]),
                    last_delivered_id=text(m[b"last-delivered-id"]) or "0-0",
                    entries_read=opt_int(m.get(b"entries-read")),
                    lag=opt_int(m.get(b"lag")),
                    policy=text(m.get(b"policy")) or "first",
                    key=text(m.get(b"key")),
                    ack_wait_ms=opt_int(m.get(b"ack-wait-ms")),
                    max_deliver=opt_int(m.get(b"max-deliver")),
                    dead_letter=text(m.get(b"dead-letter")),
                    liveness_ms=opt_int(m.get(b"liveness-ms")),
                )
            )
        return out

    def group(self, stream: Bytesish, name: Bytesish) -> "Group":
        """A handle on group ``name`` of ``stream`` (nothing is sent until it is used)."""
        return Group(self._session, as_bytes(stream, "stream"), _name(name, "group name"))


class Group:
    """One consumer group. Create it with :meth:`create`; read with :meth:`read` or follow
    with :meth:`consume`; :meth:`ack` what was handled."""

    def __init__(self, session: Session, stream: bytes, name: bytes) -> None:
        self._session = session
        self.stream = stream
        self.name = name

    def _options(
        self,
        policy: Optional[str],
        key_field: Optional[Bytesish],
        key_tag: bool,
        ack_wait_ms: Optional[int],
        max_deliver: Optional[int],
        dead_letter: Optional[Bytesish],
        liveness_ms: Optional[int],
    ) -> List[Any]:
        args: List[Any] = []
        if policy is not None:
            if policy not in POLICIES:
                raise ValueError(f"no policy {policy!r}: use first, roundrobin or hrw")
            args += ["POLICY", policy]
        if (key_field is not None or key_tag) and policy != "hrw":
            raise ValueError("key_field and key_tag go with policy='hrw' only")
        if key_field is not None and key_tag:
            raise ValueError("give key_field or key_tag, not both")
        if key_field is not None:
            args += ["KEYFIELD", _name(key_field, "key_field")]
        if key_tag:
            args += ["KEYTAG"]
        check_positive(ack_wait_ms, "ack_wait_ms", high=86_400_000)
        if ack_wait_ms is not None:
            args += ["ACKWAIT", ack_wait_ms]
        if (max_deliver is None) != (dead_letter is None):
            raise ValueError("max_deliver and dead_letter go together")
        if max_deliver is not None:
            check_positive(max_deliver, "max_deliver", high=1_000_000)
            args += ["MAXDELIVER", max_deliver, "DEADLETTER", as_bytes(dead_letter, "dead_letter")]  # type: ignore[arg-type]
        check_positive(liveness_ms, "liveness_ms", high=86_400_000)
        if liveness_ms is not None:
            args += ["LIVENESS", liveness_ms]
        return args

    def create(
        self,
        start: str = "$",
        *,
        mkstream: bool = False,
        policy: Optional[str] = None,
        key_field: Optional[Bytesish] = None,
        key_tag: bool = False,
        ack_wait_ms: Optional[int] = None,
        max_deliver: Optional[int] = None,
        dead_letter: Optional[Bytesish] = None,
        liveness_ms: Optional[int] = None,
    ) -> None:
        """``XGROUP CREATE``: the group starts after ``start`` (``$``: the stream's last
        entry; ``0``: the whole stream). :class:`~firn.BusyGroupError` if it exists."""
        if start != "$":
            _id_arg(start, "start")
        args: List[Any] = ["XGROUP", "CREATE", self.stream, self.name, start]
        if mkstream:
            args.append("MKSTREAM")
        self._session.call(*args, *self._options(policy, key_field, key_tag, ack_wait_ms, max_deliver, dead_letter, liveness_ms))

    def configure(
        self,
        *,
        policy: Optional[str] = None,
        key_field: Optional[Bytesish] = None,
        key_tag: bool = False,
        ack_wait_ms: Optional[int] = None,
        max_deliver: Optional[int] = None,
        dead_letter: Optional[Bytesish] = None,
        liveness_ms: Optional[int] = None,
    ) -> None:
        """``XGROUP CONFIGURE``: replaces the delivery options (those left out go back to
        their defaults); the pending list stays."""
        opts = self._options(policy, key_field, key_tag, ack_wait_ms, max_deliver, dead_letter, liveness_ms)
        self._session.call("XGROUP", "CONFIGURE", self.stream, self.name, *opts)

    def destroy(self) -> bool:
        return int(self._session.call("XGROUP", "DESTROY", self.stream, self.name)) == 1

    def read(
        self,
        consumer: Bytesish,
        *,
        count: Optional[int] = None,
        block_ms: Optional[int] = None,
        noack: bool = False,
        id: str = ">",
    ) -> List[StreamEntry]:
        """``XREADGROUP``: with ``id=">"`` entries no consumer was given, now
        ``consumer``'s (pending unless ``noack``); with an id, its own pending entries
        after it. ``block_ms``: wait up to that long when there is nothing new."""
        check_positive(count, "count", high=COUNT_MAX)
        check_positive(block_ms, "block_ms", high=BLOCK_MS_MAX)
        if id != ">":
            _id_arg(id, "id")
        args: List[Any] = ["XREADGROUP", "GROUP", self.name, _name(consumer, "consumer name")]
        if count is not None:
            args += ["COUNT", count]
        if block_ms is not None:
            args += ["BLOCK", block_ms]
        if noack:
            args.append("NOACK")
        args += ["STREAMS", self.stream, id]
        reply = self._session.call(*args, wait_s=None if block_ms is None else block_ms / 1000)
        if not reply:
            return []
        if isinstance(reply, dict):
            entries = next(iter(reply.values()))
        else:
            entries = reply[0][1]
        return [entry_from(e) for e in entries or []]

    def ack(self, *ids: str) -> int:
        """``XACK``: how many of ``ids`` were pending."""
        if not ids:
            raise ValueError("ack needs at least one id")
        return int(self._session.call("XACK", self.stream, self.name, *[_id_arg(i, "id") for i in ids]))

    def pending(self) -> PendingSummary:
        """``XPENDING key group``: count, first and last id, and each consumer's count."""
        count, first, last, consumers = self._session.call("XPENDING", self.stream, self.name)
        return PendingSummary(
            count=int(count),
            first=text(first),
            last=text(last),
            consumers={text(c) or "": int(n) for c, n in (consumers or [])},
        )

    def pending_entries(
        self,
        start: str = "-",
        end: str = "+",
        count: int = 100,
        *,
        consumer: Optional[Bytesish] = None,
        min_idle_ms: Optional[int] = None,
    ) -> List[PendingEntry]:
        """``XPENDING key group [IDLE ms] start end count [consumer]``, in id order."""
        check_positive(count, "count", high=COUNT_MAX)
        check_positive(min_idle_ms, "min_idle_ms", low=0)
        args: List[Any] = ["XPENDING", self.stream, self.name]
        if min_idle_ms is not None:
            args += ["IDLE", min_idle_ms]
        args += [start, end, count]
        if consumer is not None:
            args.append(_name(consumer, "consumer name"))
        return [
            PendingEntry(id=text(i) or "", consumer=text(c) or "", idle_ms=int(idle), deliveries=int(n))
            for i, c, idle, n in self._session.call(*args)
        ]

    def claim(self, consumer: Bytesish, min_idle_ms: int, ids: Sequence[str]) -> List[StreamEntry]:
        """``XCLAIM``: the entries among ``ids`` idle at least ``min_idle_ms``, now
        ``consumer``'s."""
        check_positive(min_idle_ms, "min_idle_ms", low=0)
        if not ids:
            raise ValueError("claim needs at least one id")
        reply = self._session.call(
            "XCLAIM", self.stream, self.name, _name(consumer, "consumer name"), min_idle_ms,
            *[_id_arg(i, "id") for i in ids],
        )
        return [entry_from(e) for e in reply if e is not None]

    def autoclaim(self, consumer: Bytesish, min_idle_ms: int, start: str = "0", *, count: Optional[int] = None) -> AutoClaimResult:
        """``XAUTOCLAIM``: claims idle pending entries from ``start``."""
        check_positive(min_idle_ms, "min_idle_ms", low=0)
        check_positive(count, "count", high=COUNT_MAX)
        args: List[Any] = ["XAUTOCLAIM", self.stream, self.name, _name(consumer, "consumer name"), min_idle_ms, _id_arg(start, "start")]
        if count is not None:
            args += ["COUNT", count]
        nxt, entries, deleted = self._session.call(*args)
        return AutoClaimResult(
            next_id=text(nxt) or "0-0",
            entries=[entry_from(e) for e in entries if e is not None],
            deleted=[text(d) or "" for d in (deleted or [])],
        )

    def info(self) -> GroupInfo:
        """This group's row of ``XINFO GROUPS``; :class:`~firn.NoGroupError` if absent."""
        for g in Streams(self._session).groups(self.stream):
            if g.name.encode() == self.name:
                return g
        raise error_from("NOGROUP", f"No such consumer group '{self.name.decode(errors='replace')}' "
                         f"for key name '{self.stream.decode(errors='replace')}'")

    def consumers(self) -> List[ConsumerInfo]:
        out = []
        for r in self._session.call("XINFO", "CONSUMERS", self.stream, self.name):
            m = parse_map(r)
            inactive = opt_int(m.get(b"inactive"))
            out.append(
                ConsumerInfo(
                    name=text(m[b"name"]) or "",
                    pending=int(m[b"pending"]),
                    idle_ms=int(m[b"idle"]),
                    inactive_ms=None if inactive is None or inactive < 0 else inactive,
                )
            )
        return out

    def create_consumer(self, consumer: Bytesish) -> bool:
        return int(self._session.call("XGROUP", "CREATECONSUMER", self.stream, self.name, _name(consumer, "consumer name"))) == 1

    def delete_consumer(self, consumer: Bytesish) -> int:
        """``XGROUP DELCONSUMER``: the pending entries it had (they leave the pending list)."""
        return int(self._session.call("XGROUP", "DELCONSUMER", self.stream, self.name, _name(consumer, "consumer name")))

    def consume(
        self,
        consumer: Bytesish,
        *,
        count: Optional[int] = None,
        noack: bool = False,
        idle_timeout_s: Optional[float] = None,
    ) -> Iterator[StreamEntry]:
        """Follows ``consumer``'s deliveries (HTTP event stream): its pending entries first
        (what it was given and did not ack), then new ones as they are delivered. Each entry
        stays pending until :meth:`ack`-ed (at-least-once). ``count``: end after that many;
        ``idle_timeout_s``: raise :class:`~firn.FirnTimeout` when nothing came for that
        long (the server sends a keep-alive every 15 s, so use less than that)."""
        check_positive(count, "count")
        path = "/v1/streams/{}/groups/{}/consumers/{}/events".format(
            *(urllib.parse.quote(bytes(p), safe="") for p in (self.stream, self.name, _name(consumer, "consumer name")))
        )
        query = [("noack", "true" if noack else "false")]
        if count is not None:
            query.append(("count", str(count)))
        stream = self._session.http_stream(path, query, idle_timeout_s)
        try:
            for kind, data, _ in stream.events():
                if kind == "error":
                    doc = json.loads(data)
                    raise error_from(str(doc.get("error", "ERR")), str(doc.get("message", "")), doc)
                yield entry_from_json(json.loads(data))
        finally:
            stream.close()
