"""The shared log (``FIRN.LOG``): records with 1 to 16 tags, read back by tag in one order
across shards. A seq is ``<ms>-<n>`` (as a Redis stream id); ``<ms>`` alone, ``-`` (the first)
and ``+`` (the last) are taken where the server takes them.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from ._session import Session, as_bytes, check_positive, opt_int, parse_map, text
from .models import LogInfo, LogRecord
from .stamps import CommitTs, TimeLike, time_arg

__all__ = ["Log", "next_seq"]

TAGS_MAX = 16
RECORDS_MAX = 1000
BLOCK_MS_MAX = 3_600_000
_SEQ = re.compile(r"^\d{1,20}(-\d{1,20})?$")
Bytesish = Union[str, bytes]


def seq_arg(seq: Union[str, int], what: str, ends: bool = True) -> str:
    """A seq as the server's argument; ``ValueError`` for a malformed one."""
    if isinstance(seq, bool):
        raise TypeError(f"{what} must be a seq string or an int (ms), not bool")
    if isinstance(seq, int):
        if seq < 0:
            raise ValueError(f"{what} {seq} is negative")
        return str(seq)
    if not isinstance(seq, str):
        raise TypeError(f"{what} must be a seq string or an int (ms), not {type(seq).__name__}")
    if (ends and seq in ("-", "+")) or _SEQ.match(seq):
        return seq
    raise ValueError(f"{what} {seq!r} is not a seq; a seq is <ms>-<n> (two whole numbers), <ms>, '-' or '+'")


def next_seq(seq: str) -> str:
    """The seq right after ``seq`` (``ms-n`` → ``ms-(n+1)``): where to read on from."""
    ms, _, n = seq_arg(seq, "seq", ends=False).partition("-")
    return f"{ms}-{int(n or 0) + 1}"


def record_from(reply: Any) -> Optional[LogRecord]:
    if reply is None:
        return None
    seq, tags, payload, stamp = reply
    return LogRecord(seq=text(seq) or "", tags=list(tags), value=payload, commit_ts=CommitTs.parse(stamp))


def _read_opts(as_of: Optional[TimeLike], consistency: Optional[str]) -> List[Any]:
    args: List[Any] = []
    if as_of is not None:
        args += ["ASOF", time_arg(as_of, "as_of")]
    if consistency is not None:
        if consistency not in ("linearizable", "lease", "local"):
            raise ValueError(f"unknown consistency {consistency!r}; use linearizable, lease or local")
        args += ["CONSISTENCY", consistency]
    return args


def _tags(tags: Sequence[Bytesish]) -> List[bytes]:
    if isinstance(tags, (str, bytes)):
        raise TypeError("tags must be a list of tags, not one string")
    out = [as_bytes(t, "tag") for t in tags]
    if not 1 <= len(out) <= TAGS_MAX:
        raise ValueError(f"a record has {len(out)} tags; records carry 1 to {TAGS_MAX}")
    if any(not t for t in out):
        raise ValueError("a tag is empty; tags are 1 to 8192 bytes")
    return out


class Log:
    """``client.log``: appends and reads of the shared log, in the client's session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def append(self, log: Bytesish, value: Bytesish, tags: Sequence[Bytesish]) -> str:
        """Appends one record with ``tags``; answers its seq."""
        return self.append_many(log, [(tags, value)])[0]

    def append_many(self, log: Bytesish, records: Sequence[Tuple[Sequence[Bytesish], Bytesish]]) -> List[str]:
        """Appends ``(tags, value)`` records in one batch (all or none, 1 to 1,000);
        answers their seqs, in order."""
        if not 1 <= len(records) <= RECORDS_MAX:
            raise ValueError(f"{len(records)} records in one append; an append takes 1 to {RECORDS_MAX}")
        args: List[Any] = ["FIRN.LOG", "APPEND", as_bytes(log, "log")]
        for tags, value in records:
            t = _tags(tags)
            args += ["TAGS", len(t), *t, as_bytes(value, "value")]
        # FIRN.TOKEN beside it: the append's answer has seqs, not stamps.
        seqs, token = self._session.pipeline([args, ["FIRN.TOKEN"]])
        self._session.seen_over_resp(CommitTs.parse(token))
        return [text(s) or "" for s in seqs]

    def next(
        self,
        log: Bytesish,
        tag: Bytesish,
        min_seq: Union[str, int] = "0",
        *,
        block_ms: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        consistency: Optional[str] = None,
    ) -> Optional[LogRecord]:
        """The first record of ``tag`` with seq ≥ ``min_seq``; ``block_ms``: wait up to that
        long for one to be committed. ``None`` when there is none."""
        args: List[Any] = ["FIRN.LOG", "NEXT", as_bytes(log, "log"), as_bytes(tag, "tag"), seq_arg(min_seq, "min_seq")]
        check_positive(block_ms, "block_ms", high=BLOCK_MS_MAX)
        if block_ms is not None:
            if as_of is not None:
                raise ValueError("a read at a time cannot block: nothing new arrives in the past")
            args += ["BLOCK", block_ms]
        args += _read_opts(as_of, consistency)
        return self._record(self._session.call(*args, wait_s=None if block_ms is None else block_ms / 1000))

    def prev(
        self,
        log: Bytesish,
        tag: Bytesish,
        max_seq: Union[str, int] = "+",
        *,
        as_of: Optional[TimeLike] = None,
        consistency: Optional[str] = None,
    ) -> Optional[LogRecord]:
        """The last record of ``tag`` with seq ≤ ``max_seq``."""
        args: List[Any] = ["FIRN.LOG", "PREV", as_bytes(log, "log"), as_bytes(tag, "tag"), seq_arg(max_seq, "max_seq")]
        return self._record(self._session.call(*args, *_read_opts(as_of, consistency)))

    def tail(
        self, log: Bytesish, tag: Bytesish, *, as_of: Optional[TimeLike] = None, consistency: Optional[str] = None
    ) -> Optional[LogRecord]:
        """The newest record of ``tag``."""
        args: List[Any] = ["FIRN.LOG", "TAIL", as_bytes(log, "log"), as_bytes(tag, "tag")]
        return self._record(self._session.call(*args, *_read_opts(as_of, consistency)))

    def range(
        self,
        log: Bytesish,
        tag: Bytesish,
        from_seq: Union[str, int] = "-",
        to_seq: Union[str, int] = "+",
        *,
        limit: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        consistency: Optional[str] = None,
    ) -> List[LogRecord]:
        """Records of ``tag`` with ``from_seq`` ≤ seq ≤ ``to_seq``, oldest first (``limit``
        defaults to the server's 100, at most 10,000)."""
        check_positive(limit, "limit", high=10_000)
        args: List[Any] = [
            "FIRN.LOG", "RANGE", as_bytes(log, "log"), as_bytes(tag, "tag"),
            seq_arg(from_seq, "from_seq"), seq_arg(to_seq, "to_seq"),
        ]
        if limit is not None:
            args += ["LIMIT", limit]
        records = [r for r in (record_from(x) for x in self._session.call(*args, *_read_opts(as_of, consistency))) if r]
        if records:
            self._session.seen_over_resp(max(r.commit_ts for r in records))
        return records

    def follow(
        self, log: Bytesish, tag: Bytesish, from_seq: Union[str, int] = "0", *, block_ms: int = 1000,
        idle_timeout_s: Optional[float] = None,
    ) -> Iterator[LogRecord]:
        """Every record of ``tag`` from ``from_seq`` on, then each as it is committed (a
        blocking ``NEXT`` per record). ``idle_timeout_s``: stop when none came for that long."""
        min_seq = seq_arg(from_seq, "from_seq", ends=False)
        idle_since = time.monotonic()
        while True:
            rec = self.next(log, tag, min_seq, block_ms=block_ms)
            if rec is None:
                if idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                    return
                continue
            idle_since = time.monotonic()
            yield rec
            min_seq = next_seq(rec.seq)

    def trim(self, log: Bytesish, before: Union[str, int], *, tag: Optional[Bytesish] = None) -> int:
        """Drops the records (of ``tag``, or of every tag) below ``before``; reads below it
        then raise :class:`~firn.TrimmedError`. Answers how many went."""
        args: List[Any] = ["FIRN.LOG", "TRIM", as_bytes(log, "log")]
        if tag is not None:
            args += ["TAG", as_bytes(tag, "tag")]
        args += ["BEFORE", seq_arg(before, "before", ends=False)]
        return int(self._session.call(*args))

    def info(self, log: Bytesish, tag: Bytesish, *, consistency: Optional[str] = None) -> LogInfo:
        m = parse_map(self._session.call("FIRN.LOG", "INFO", as_bytes(log, "log"), as_bytes(tag, "tag"),
                                         *_read_opts(None, consistency)))
        return LogInfo(
            length=int(m[b"length"]),
            first_seq=text(m.get(b"first-seq")),
            last_seq=text(m.get(b"last-seq")),
            first_kept_seq=text(m.get(b"first-kept-seq")) or "0-0",
            entries_added=opt_int(m.get(b"entries-added")) or 0,
        )

    def _record(self, reply: Any) -> Optional[LogRecord]:
        rec = record_from(reply)
        if rec is not None:
            self._session.seen_over_resp(rec.commit_ts)
        return rec
