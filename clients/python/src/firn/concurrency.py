"""Leases and what is built on them, as etcd's ``concurrency`` package has them: a
:class:`Lease` kept alive by a thread of its own, a :class:`Lock` whose fencing token grows
with every holder, and an :class:`Election`.

A lock (or a leadership) is a key written only when absent (``IFVERSION 0``) and attached to
a lease: when its holder releases it, or stops keeping the lease alive (the process died,
paused, lost its node), the key is deleted and a waiter takes it. The version the write
answered is the fencing token: a key's versions only grow, across deletes too, so each
holder's token is greater than every earlier holder's. A holder can lose the lock without
knowing it yet; pass the token to whatever the lock guards, and have it refuse a token
smaller than the greatest it has seen.

This module waits by looking at the key again after a pause that grows to
:data:`POLL_MAX_S`; it writes no key but the lock's or the election's.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Optional, Union

from ._session import as_bytes
from .client import key_bytes, lease_ttl_s
from .errors import ConflictError, FirnConnectionError, FirnError, LeaseNotFoundError
from .models import Version

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, KeyLike

__all__ = ["Lease", "Lock", "Election", "LEASE_ENDED", "LEASE_UNANSWERED", "POLL_MAX_S"]

#: Why a lease was lost: the node no longer knows it (it expired, or someone revoked it).
LEASE_ENDED = "ended"
#: Why a lease was lost: no keepalive was answered within its TTL (the node has ended it, or
#: is about to).
LEASE_UNANSWERED = "unanswered"

#: First pause between looks at a taken key; each look doubles it, up to POLL_MAX_S.
POLL_FIRST_S = 0.02
#: Longest pause between looks at a taken key: how late after its deletion a waiter may
#: notice it, at worst.
POLL_MAX_S = 0.25
#: Pause before asking again after a keepalive that got no answer (a broken connection, a
#: leader change); asked again until the TTL has run out.
KEEPALIVE_RETRY_S = 0.1


class Lease:
    """A lease of ``ttl_s`` seconds (1 to a year), granted now and kept alive by a daemon
    thread — a keepalive every third of its TTL — until :meth:`revoke` or :meth:`close`.
    Keys written with ``client.put(…, lease=lease.id)`` are deleted when it ends.

    :meth:`close` (or the process ending) stops the keepalives: the lease then ends within
    its TTL. As a context manager it is revoked on leaving the block. A lease can be lost
    while its holder still runs: :attr:`loss` says why (``None`` while it is kept alive),
    :meth:`wait_lost` waits for it.

    The keepalives share the client's connection: a call on it that blocks (a blocking log
    read, say) delays them, and must not block for as long as the TTL.
    """

    def __init__(self, client: "Client", ttl_s: Union[int, float]) -> None:
        asked = time.monotonic()
        self._client = client
        self.id = client.lease_grant(ttl_s)
        """The lease's id, as the node granted it."""
        self.ttl_s = lease_ttl_s(ttl_s)
        """The TTL it was granted, in whole seconds."""
        self._loss: Optional[str] = None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._keep_alive, args=(asked + self.ttl_s,), name=f"firn-lease-{self.id}", daemon=True
        )
        self._thread.start()

    @property
    def loss(self) -> Optional[str]:
        """:data:`LEASE_ENDED` or :data:`LEASE_UNANSWERED` once lost; ``None`` while kept alive."""
        return self._loss

    def wait_lost(self, timeout_s: Optional[float] = None) -> Optional[str]:
        """Waits until the lease is lost (at most ``timeout_s``) and says why; ``None`` if
        it still is not."""
        self._lost.wait(timeout_s)
        return self._loss

    def _keep_alive(self, expires: float) -> None:
        try:
            self._keep_alive_until_lost(expires)
        finally:
            # Whatever ended the thread, nothing keeps the lease alive any more.
            self._mark_lost(LEASE_UNANSWERED)

    def _keep_alive_until_lost(self, expires: float) -> None:
        """``expires`` is the soonest the node may end the lease: a TTL counted from when
        the last answered keepalive was sent, since the node counts from when it took it."""
        while not self._stop.wait(self.ttl_s / 3):
            while True:
                sent = time.monotonic()
                if sent >= expires:
                    return self._mark_lost(LEASE_UNANSWERED)
                try:
                    granted = self._client.lease_keepalive(self.id)
                except LeaseNotFoundError:
                    return self._mark_lost(LEASE_ENDED)
                except FirnError:
                    if self._stop.wait(KEEPALIVE_RETRY_S):
                        return None
                    continue
                if self._stop.is_set():
                    return None
                expires = sent + granted
                break
        return None

    def _mark_lost(self, why: str) -> None:
        """Says the lease is lost (the first reason given stays), unless it was closed."""
        if self._stop.is_set() or self._lost.is_set():
            return
        self._loss = why
        self._lost.set()

    def close(self) -> None:
        """Stops the keepalives (the lease ends within its TTL)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def revoke(self) -> None:
        """Ends the lease now: every key attached to it is deleted, all at one stamp. A lease
        that had already ended is fine too (its keys are gone either way)."""
        self.close()
        try:
            self._client.lease_revoke(self.id)
        except LeaseNotFoundError:
            pass

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.revoke()

    def __repr__(self) -> str:
        return f"Lease(id={self.id}, ttl_s={self.ttl_s}, loss={self._loss!r})"


def _take(client: "Client", key: bytes, value: bytes, lease: Lease, deadline: Optional[float]) -> Optional[Version]:
    """Writes ``key = value`` under ``lease`` once the key is absent; ``None`` if that was
    not before ``deadline`` (a ``time.monotonic()``; ``None``: no limit). Raises when the
    lease is lost meanwhile."""
    pause = POLL_FIRST_S
    while True:
        try:
            w = client.put(key, value, if_version=0, lease=lease.id)
            return Version(key=key, version=w.version, commit_ts=w.commit_ts, event_time=None, deleted=False, value=value)
        except ConflictError:
            pass
        while True:
            wait = pause if deadline is None else min(pause, deadline - time.monotonic())
            if wait <= 0:
                return None
            if lease.wait_lost(wait) is not None:
                _raise_lost(lease)
            pause = min(pause * 2, POLL_MAX_S)
            if client.get(key) is None:
                break


def _raise_lost(lease: Lease) -> None:
    if lease.loss == LEASE_ENDED:
        raise LeaseNotFoundError(f"lease not found: {lease.id} ended while waiting", lease=lease.id)
    raise FirnConnectionError(f"lease {lease.id} was not kept alive within its TTL of {lease.ttl_s} s while waiting")


def _deadline(timeout_s: Optional[float]) -> Optional[float]:
    if timeout_s is None:
        return None
    if timeout_s < 0:
        raise ValueError(f"timeout_s is {timeout_s}; it must be 0 or more (None: wait as long as it takes)")
    return time.monotonic() + timeout_s


class Lock:
    """A lock on the key ``name``, held under a lease of ``ttl_s`` seconds of its own.

    >>> with firn.concurrency.Lock(client, "locks/report", ttl_s=10) as lock:  # doctest: +SKIP
    ...     storage.write(report, fencing_token=lock.token)

    While another holds it, :meth:`acquire` looks at the key again after a pause that grows
    to :data:`POLL_MAX_S`. The lock is held until :meth:`release`, or until its lease is
    lost (:attr:`lease`): the holder stopped keeping it alive for its TTL. A process that
    dies holding it frees it once its TTL has run out.
    """

    def __init__(self, client: "Client", name: "KeyLike", ttl_s: Union[int, float] = 10) -> None:
        self._client = client
        self.name = key_bytes(name, "name")
        self.ttl_s = lease_ttl_s(ttl_s)
        self.lease: Optional[Lease] = None
        """The lease the lock is held under, while held."""
        self.token: Optional[int] = None
        """The fencing token while held: the version this holder wrote the key at, greater
        than every earlier holder's."""

    @property
    def holder(self) -> Optional[str]:
        """What the key holds while this holder has it: the client's producer and the lease."""
        return None if self.lease is None else f"{self._client.producer}/lease-{self.lease.id}"

    def acquire(self, timeout_s: Optional[float] = None) -> bool:
        """Waits until this client holds the lock (at most ``timeout_s``; 0: only if free
        now) and answers whether it does. The fencing token is then :attr:`token`."""
        if self.lease is not None:
            raise RuntimeError(f"the lock {self.name!r} is held already; release it first")
        deadline = _deadline(timeout_s)
        lease = Lease(self._client, self.ttl_s)
        try:
            took = _take(self._client, self.name, f"{self._client.producer}/lease-{lease.id}".encode(), lease, deadline)
        except BaseException:
            lease.revoke()
            raise
        if took is None:
            lease.revoke()
            return False
        self.lease, self.token = lease, took.version
        return True

    def release(self) -> None:
        """Frees the lock: revokes its lease, which deletes the key. Fine also when the lock
        had been lost already."""
        lease, self.lease, self.token = self.lease, None, None
        if lease is not None:
            lease.revoke()

    def __enter__(self) -> "Lock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Election:
    """Leader election on the key ``name``: the leader is whoever wrote it when it was
    absent, under a lease of ``ttl_s`` seconds of its own; the key's value is what the
    leader proclaims. A leader that resigns, or stops keeping its lease alive (it died),
    leaves the key deleted, and a waiting candidate takes it.

    >>> e = firn.concurrency.Election(client, "elections/scheduler", ttl_s=5)  # doctest: +SKIP
    >>> e.campaign(b"node-a:9000")              # blocks until this candidate leads
    True
    >>> e.leader().value
    b'node-a:9000'
    """

    def __init__(self, client: "Client", name: "KeyLike", ttl_s: Union[int, float] = 10) -> None:
        self._client = client
        self.name = key_bytes(name, "name")
        self.ttl_s = lease_ttl_s(ttl_s)
        self.lease: Optional[Lease] = None
        """The lease this candidate leads under, while it leads."""
        self.term: Optional[int] = None
        """While leading: the key's version that made this candidate leader, a fencing token
        greater than any earlier leader's."""
        self._version: Optional[int] = None

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads, as far as it knows (its lease not lost)."""
        return self.lease is not None and self.lease.loss is None

    def campaign(self, value: Union[str, bytes], timeout_s: Optional[float] = None) -> bool:
        """Waits until this candidate leads, proclaiming ``value`` (at most ``timeout_s``)
        and answers whether it does."""
        if self.lease is not None:
            raise RuntimeError(f"already leading {self.name!r}; resign first")
        deadline = _deadline(timeout_s)
        lease = Lease(self._client, self.ttl_s)
        try:
            took = _take(self._client, self.name, as_bytes(value, "value"), lease, deadline)
        except BaseException:
            lease.revoke()
            raise
        if took is None:
            lease.revoke()
            return False
        self.lease, self.term, self._version = lease, took.version, took.version
        return True

    def proclaim(self, value: Union[str, bytes]) -> None:
        """Proclaims ``value`` as leader, without another election: written only over this
        leader's own last version. :class:`~firn.ConflictError` says this candidate leads no
        more (its lease ended and another took the key); nothing is then written."""
        if self.lease is None or self._version is None:
            raise RuntimeError(f"not leading {self.name!r}; campaign first")
        w = self._client.put(self.name, value, if_version=self._version, lease=self.lease.id)
        self._version = w.version

    def leader(self) -> Optional[Version]:
        """Who leads now (a linearizable read of the key: its value and version), or
        ``None`` while nobody does."""
        return self._client.get(self.name)

    def resign(self) -> None:
        """Steps down: revokes the lease, which deletes the key, so a waiting candidate
        leads next. Fine also when leadership had been lost already."""
        lease, self.lease, self.term, self._version = self.lease, None, None, None
        if lease is not None:
            lease.revoke()

    def __enter__(self) -> "Election":
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()

