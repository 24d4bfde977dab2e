"""The reader's half of the region's seqlock (``crates/firn-local/src/seqlock.rs``): a run of
64-bit words whose word 0 is the sequence. The one writer (the node) makes the sequence odd,
writes the data, makes it even again; a reader copies the data between two reads of the
sequence and keeps the copy only if both were equal and even.

Loads: ``words`` is a ``memoryview`` of the mapping cast to native 64-bit words, so
``words[i]`` is one aligned 8-byte load (CPython copies the item with a fixed-size
``memcpy``, which compiles to a single load), never a byte-by-byte read that could tear.

Fences: the Rust reader puts an acquire fence between the data copy and the second read of
the sequence. Python has no fence. On x86-64 none is needed: loads are not reordered with
other loads (TSO), and the interpreter's opaque C calls keep the compiler from moving them.
On other CPUs :func:`fence` takes and drops a lock, whose atomic read-modify-write orders
the loads around it in practice; the Rust reader is the one to use where that is not
enough.
"""

from __future__ import annotations

import platform
import threading
from typing import Callable, Optional, Tuple, TypeVar

__all__ = ["READ_TRIES_MAX", "fence", "read", "unchanged", "load_bytes", "bytes_equal"]

T = TypeVar("T")

#: Most attempts on one guarded run before a reader reports contention (as the Rust one).
READ_TRIES_MAX = 64

_TSO = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
_fence_lock = threading.Lock()


def fence() -> None:
    """An acquire fence between two groups of loads (see the module's doc)."""
    if not _TSO:
        with _fence_lock:
            pass


def read(words: memoryview, at: int, copy: Callable[[int], T], tries: int = READ_TRIES_MAX) -> Optional[Tuple[T, int]]:
    """Copies the run at word ``at`` with ``copy(first data word)`` until the copy is
    consistent: ``(copy, sequence)``, or ``None`` when it kept changing for ``tries``."""
    for _ in range(tries):
        before = words[at]
        fence()
        if before & 1:
            continue  # a write is under way
        value = copy(at + 1)
        # The copy's loads happen before the second read of the sequence.
        fence()
        if words[at] == before:
            return value, before
    return None


def unchanged(words: memoryview, at: int, seq: int) -> bool:
    """Whether the run's sequence is still ``seq`` (after other loads)."""
    fence()
    return words[at] == seq


def load_bytes(words: memoryview, at: int, length: int, words_max: int) -> bytes:
    """``length`` bytes from the words at ``at`` (at most ``words_max`` words are read)."""
    n = min((length + 7) // 8, words_max)
    return words[at : at + n].tobytes()[:length]


def bytes_equal(words: memoryview, at: int, data: bytes) -> bool:
    """Whether the words at ``at`` hold exactly ``data`` (the last word zero-padded)."""
    n = (len(data) + 7) // 8
    return words[at : at + n].tobytes() == data.ljust(n * 8, b"\0")
