"""Commit stamps and the time forms Firn accepts.

A commit stamp (`CommitTs`) is the hybrid-logical-clock stamp of one write, printed by the
server as ``WALL_US-LOGICAL`` (``1795319950123456-0``). It is also what a causality token is.
Where the server takes a time (``as_of``, ``event_time``, a snapshot's ``at``, a watch's
``from_time``), this module turns the Python forms into the forms the server parses:

* ``int``: microseconds since the Unix epoch (includes every write stamped within it);
* ``datetime.datetime`` (timezone-aware): converted to whole microseconds;
* ``CommitTs``: an exact commit stamp;
* ``str``: passed through (RFC 3339, microseconds, or ``W-L``); the server checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import ClassVar, Union

__all__ = ["CommitTs", "TimeLike", "time_arg", "datetime_from_us", "us_from_datetime"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_STAMP = re.compile(r"^(\d{1,20})-(\d{1,10})$")
_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1


@dataclass(frozen=True, order=True)
class CommitTs:
    """A commit stamp: wall-clock microseconds, then a logical counter. Orders as the
    server orders stamps (wall first, then logical)."""

    wall_us: int
    logical: int = 0
    ZERO: ClassVar["CommitTs"]

    def __post_init__(self) -> None:
        if not isinstance(self.wall_us, int) or not isinstance(self.logical, int):
            raise TypeError("CommitTs takes two integers (wall_us, logical)")
        if not 0 <= self.wall_us <= _U64_MAX:
            raise ValueError(f"wall_us {self.wall_us} is out of range 0..2^64-1")
        if not 0 <= self.logical <= _U32_MAX:
            raise ValueError(f"logical {self.logical} is out of range 0..2^32-1")

    @classmethod
    def parse(cls, text: Union[str, bytes]) -> "CommitTs":
        """Parses ``W-L`` as the server prints it; ``ValueError`` for anything else."""
        if isinstance(text, bytes):
            text = text.decode("ascii", "replace")
        m = _STAMP.match(text)
        if m is None:
            raise ValueError(f"{text!r} is not a commit stamp; a stamp is WALL_US-LOGICAL, e.g. 1795319950123456-0")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def datetime(self) -> datetime:
        """The wall-clock part as an aware UTC datetime."""
        return datetime_from_us(self.wall_us)

    def __str__(self) -> str:
        return f"{self.wall_us}-{self.logical}"


CommitTs.ZERO = CommitTs(0, 0)

TimeLike = Union[int, datetime, CommitTs, str]


def datetime_from_us(us: int) -> datetime:
    """Microseconds since the Unix epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=us)


def us_from_datetime(dt: datetime) -> int:
    """An aware datetime as whole microseconds since the Unix epoch (exact, no float)."""
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(
            f"datetime {dt.isoformat()} has no timezone; give an aware datetime "
            "(e.g. datetime.now(timezone.utc)) so the instant is unambiguous"
        )
    return (dt - _EPOCH) // timedelta(microseconds=1)


def time_arg(value: TimeLike, what: str = "time") -> str:
    """A time as the server's argument text; ``TypeError``/``ValueError`` for bad input."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int (µs), an aware datetime, a CommitTs or a str, not bool")
    if isinstance(value, CommitTs):
        return str(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} {value} is negative; times are microseconds since the Unix epoch")
        return str(value)
    if isinstance(value, datetime):
        return str(us_from_datetime(value))
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{what} is an empty string")
        return value
    raise TypeError(
        f"{what} must be an int (µs), an aware datetime, a CommitTs or a str, not {type(value).__name__}"
    )
