"""``firn.Client``: one session with a Firn node — versioned keys, reads in the past, history,
snapshots, watches, the log, consumer groups and keyspaces, with one causality token.

Everything that RESP carries goes over RESP (``FIRN.*``, ``X*``); watches and consumer
event streams, which are Server-Sent Events, go over HTTP. Both carry the same token, so a
watch opened after a write sees it, and a read after a watched event shows at least it.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
import shutil
import urllib.parse
from typing import (
    TYPE_CHECKING,
    Any,
    BinaryIO,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._session import STREAM_BLOCK_BYTES, Session, as_bytes, check_positive, opt_int, parse_map, split_addr, text
from .errors import (
    ClusterDownError,
    FirnConnectionError,
    FirnError,
    LeaseNotFoundError,
    NotFoundError,
    TryAgainError,
    UncertainError,
    error_from_resp,
)
from .groups import Streams
from .log import Log
from .models import FileVersion, Keyspace, Snapshot, SnapshotPage, Twin, TxnResult, Version, Watermark, WriteResult
from .stamps import CommitTs, TimeLike, time_arg
from .watch import Watch

if TYPE_CHECKING:  # pragma: no cover
    from .local.client import LocalClient

__all__ = ["Client", "KeyLike", "CONSISTENCIES", "PUT_MANY_MAX"]

KeyLike = Union[str, bytes]
CONSISTENCIES = ("linearizable", "lease", "local")
KEY_BYTES_MAX = 8192
HISTORY_LIMIT_MAX = 10_000
# Most writes in one put_many: one round trip's commands, all held in memory at once.
PUT_MANY_MAX = 10_000
# How long a write is sent again with its idempotency key while it may be.
RESEND_FOR_S = 20.0
# A lease's TTL, in whole seconds: 1 s to a year.
LEASE_TTL_S_MAX = 31_536_000


def key_bytes(key: KeyLike, what: str = "key") -> bytes:
    b = as_bytes(key, what)
    if not b:
        raise ValueError(f"{what} is empty; keys are 1 to {KEY_BYTES_MAX} bytes")
    if len(b) > KEY_BYTES_MAX:
        raise ValueError(f"{what} is {len(b)} bytes; the limit is {KEY_BYTES_MAX}")
    return b


def version_from(key: Optional[bytes], reply: Any) -> Optional[Version]:
    """A version from a ``FIRN.GET``-style map (``None`` for nil)."""
    if reply is None:
        return None
    m = parse_map(reply)
    k = m.get(b"key", key)
    if k is None:
        raise FirnError(f"a version without its key: {reply!r:.200}", code="PROTOCOL")
    return Version(
        key=k,
        version=int(m[b"version"]),
        commit_ts=CommitTs.parse(m[b"commit_ts"]),
        event_time=opt_int(m.get(b"event_time")),
        deleted=bool(int(m.get(b"deleted", 0) or 0)),
        value=m.get(b"value"),
    )


def lease_ttl_s(ttl_s: Union[int, float]) -> int:
    """A lease's TTL as sent: whole seconds, a part rounded up, 1 to a year."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)):
        raise TypeError(f"ttl_s must be a number of seconds, not {type(ttl_s).__name__}")
    if not 1 <= ttl_s <= LEASE_TTL_S_MAX:
        raise ValueError(f"ttl_s is {ttl_s}; a lease lives 1 to {LEASE_TTL_S_MAX} s")
    return int(-(-ttl_s // 1))


def _watermark_from(reply: Any) -> Watermark:
    m = parse_map(reply)
    return Watermark(
        prefix=m[b"prefix"],
        watermark=opt_int(m.get(b"watermark")),
        advanced=opt_int(m.get(b"advanced")),
        lateness_us=opt_int(m.get(b"lateness_us")),
        late=text(m.get(b"late")) or "keep",
    )


def _one_read_at(version: Optional[int], as_of: Optional[TimeLike], event_time: Optional[TimeLike]) -> List[Any]:
    given = [n for n, v in (("version", version), ("as_of", as_of), ("event_time", event_time)) if v is not None]
    if len(given) > 1 and given != ["as_of", "event_time"]:
        raise ValueError(
            f"give at most one of version, as_of and event_time (or event_time with as_of), not {' and '.join(given)}"
        )
    if as_of is not None and event_time is not None:
        # Bitemporal: the value at that event time as it was known at as_of.
        return ["EVENTTIME", time_arg(event_time, "event_time"), "ASOF", time_arg(as_of, "as_of")]
    if version is not None:
        check_positive(version, "version")
        return ["VERSION", version]
    if as_of is not None:
        return ["ASOF", time_arg(as_of, "as_of")]
    if event_time is not None:
        return ["EVENTTIME", time_arg(event_time, "event_time")]
    return []


def _write_words(if_version: Optional[int], event_time: Optional[TimeLike]) -> List[Any]:
    """FIRN.PUT's words for a write's condition and event time."""
    words: List[Any] = []
    if if_version is not None:
        check_positive(if_version, "if_version", low=0)
        words += ["IFVERSION", if_version]
    if event_time is not None:
        words += ["EVENTTIME", time_arg(event_time, "event_time")]
    return words


def _consistency(consistency: Optional[str]) -> List[Any]:
    if consistency is None:
        return []
    if consistency not in CONSISTENCIES:
        raise ValueError(f"unknown consistency {consistency!r}; use linearizable, lease or local")
    return ["CONSISTENCY", consistency]


class Client:
    """A session with one Firn node.

    ``addr`` is the node's RESP address (``firn serve --resp-addr``), ``http_addr`` its HTTP
    address (``--http-addr``; used by watches and consumer event streams). ``timeout_s``
    bounds every wait for an answer (a blocking read waits its block time on top).

    The client keeps one causality token (:attr:`token`): every answer it sees raises it,
    and every request it sends comes after it, so a client reads its own writes and never
    reads backwards, on any node. Hand a token to another process with :meth:`after`.
    A client is safe to share between threads (requests take turns on its connection).

    >>> with Client("127.0.0.1:7379") as c:      # doctest: +SKIP
    ...     w = c.put("sensor/7", "21.5")
    ...     c.get("sensor/7").value
    b'21.5'
    """

    def __init__(
        self,
        addr: str = "127.0.0.1:7379",
        http_addr: Optional[str] = None,
        *,
        timeout_s: float = 10.0,
        username: Optional[str] = None,
        password: Optional[str] = None,
        token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        producer: Optional[str] = None,
    ) -> None:
        """On a node with users (``firn serve --users``), ``username`` and ``password`` sign
        the RESP connection in (``AUTH``; without a username: ``default``), and ``token`` is
        the bearer token sent on HTTP calls. A refusal raises
        :class:`firn.errors.AuthError` (``NOAUTH``, ``WRONGPASS``) or
        :class:`firn.errors.PermissionDeniedError` (``NOPERM``). ``tls_ca``: a CA file (PEM);
        with it both RESP and HTTP go over TLS to a node started with ``--tls-cert``, whose
        certificate must be signed by that CA and name the host dialled.

        Every write carries an idempotency key — ``producer`` (random unless given) and a
        counter — and is sent again with it while its answer is ``UNCERTAIN``, ``TRYAGAIN``
        or ``CLUSTERDOWN``, or the connection failed, for up to 20 s: it is applied once,
        whichever try got through (docs/api.md, "Exactly once"). Give ``producer`` a name
        that survives the process (a device id) only with ids kept apart across its runs."""
        host, _ = split_addr(addr, "addr")
        self._producer = producer or f"py-{uuid.uuid4().hex[:16]}"
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        if http_addr is None:
            http_addr = f"{host}:7380"
        self._session = Session(addr, http_addr, timeout_s, username, password, token, tls_ca)
        self.log = Log(self._session)
        """The shared log (``FIRN.LOG``): :class:`firn.log.Log`."""
        self.streams = Streams(self._session)
        """Redis Streams and consumer groups: :class:`firn.groups.Streams`."""

    # -- session ----------------------------------------------------------------------

    @property
    def token(self) -> CommitTs:
        """The newest commit stamp this client has seen (its causality token)."""
        return self._session.token

    def after(self, token: Union[CommitTs, str]) -> None:
        """Makes everything this client sends from now come after ``token`` (a stamp
        another session saw: its :attr:`token`). Never lowers the token."""
        stamp = token if isinstance(token, CommitTs) else CommitTs.parse(token)
        self._session.observe(stamp)
        # Tell the connection now, so a malformed or refused token fails here.
        self._session.call("FIRN.TOKEN")

    def sync_token(self) -> CommitTs:
        """Raises the token to what the RESP connection holds (``FIRN.TOKEN``): commands
        whose answers show no stamp (``XADD``, plain Redis reads) raise the connection's."""
        stamp = CommitTs.parse(self._session.call("FIRN.TOKEN"))
        self._session.seen_over_resp(stamp)
        return self.token

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> bool:
        return self._session.call("PING") in (b"PONG", "PONG")

    # -- exactly once ----------------------------------------------------------------

    @property
    def producer(self) -> str:
        """The producer name this client's writes carry in their idempotency keys."""
        return self._producer

    def _key_words(self) -> List[Any]:
        with self._ids_lock:
            return ["IDMP", self._producer, str(next(self._ids))]

    def _write(self, *args: Any) -> Any:
        """One write with the next idempotency key, sent again with it while it may be."""
        words = self._key_words() + list(args)
        deadline = time.monotonic() + RESEND_FOR_S
        while True:
            try:
                return self._session.call(*words)
            except (UncertainError, TryAgainError, ClusterDownError, FirnConnectionError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    # -- keys -------------------------------------------------------------------------

    def put(
        self,
        key: KeyLike,
        value: Union[str, bytes],
        *,
        if_version: Optional[int] = None,
        event_time: Optional[TimeLike] = None,
        lease: Optional[int] = None,
    ) -> WriteResult:
        """Writes a new version of ``key``. ``if_version``: only if the key's current
        version is that (0: absent), else :class:`~firn.ConflictError`. ``event_time``: the
        writer's own time for the version (read back with ``get(event_time=…)``).
        ``lease``: attaches the key to that lease (:meth:`lease_grant`), so that it is
        deleted when the lease ends; :class:`~firn.LeaseNotFoundError` once it has."""
        k = key_bytes(key)
        args = ["FIRN.PUT", k, as_bytes(value, "value")] + _write_words(if_version, event_time)
        if lease is not None:
            check_positive(lease, "lease")
            args += ["LEASE", lease]
        try:
            version, stamp = self._write(*args)
        except LeaseNotFoundError as e:
            e.lease = lease
            raise
        ts = CommitTs.parse(stamp)
        self._session.seen_over_resp(ts)
        return WriteResult(k, int(version), ts)

    def put_many(
        self,
        items: Union[Mapping[KeyLike, Union[str, bytes]], Iterable[Tuple[KeyLike, Union[str, bytes]]]],
        *,
        event_time: Optional[TimeLike] = None,
    ) -> List[WriteResult]:
        """Writes several keys in one round trip: a ``FIRN.PUT`` each, pipelined, in the
        order given (1 to :data:`PUT_MANY_MAX` items). Each is a version of its own, as
        from :meth:`put`, but the cluster pays far less for each than for one ``put`` at a
        time (docs/benchmarks.md measures a put pipelined 16 deep at about half the CPU).
        Each carries an idempotency key, but none is sent again here. Not atomic: when a
        write fails, every reply is still read and the first failure is
        raised, its ``results`` attribute holding each item's :class:`WriteResult` or
        :class:`FirnError` in order (the others were applied). An error passing the
        session's token on (``FIRN.AFTER``) is raised as it is, without ``results``."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        if not 1 <= len(pairs) <= PUT_MANY_MAX:
            raise ValueError(f"put_many takes 1 to {PUT_MANY_MAX} items; got {len(pairs)}")
        words = _write_words(None, event_time)
        keys = [key_bytes(k) for k, _ in pairs]
        commands = [
            self._key_words() + ["FIRN.PUT", k, as_bytes(v, "value")] + words for k, (_, v) in zip(keys, pairs)
        ]
        results: List[Union[WriteResult, FirnError]] = []
        for k, reply in zip(keys, self._session.pipeline(commands, errors_in_place=True)):
            if isinstance(reply, FirnError):
                results.append(reply)
                continue
            version, stamp = reply
            ts = CommitTs.parse(stamp)
            self._session.seen_over_resp(ts)
            results.append(WriteResult(k, int(version), ts))
        failed = next((r for r in results if isinstance(r, FirnError)), None)
        if failed is not None:
            failed.results = results  # type: ignore[attr-defined]
            raise failed
        return results  # type: ignore[return-value]

    def get(
        self,
        key: KeyLike,
        *,
        version: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        event_time: Optional[TimeLike] = None,
        complete: bool = False,
        consistency: Optional[str] = None,
    ) -> Optional[Version]:
        """The key's newest version, or the one at ``version``, or the newest committed at
        or before ``as_of``, or the one with the greatest event time at or before
        ``event_time`` — with ``as_of`` too, among the versions committed by then: the value
        at that event time as it was known at ``as_of``. With ``complete=True`` (and
        ``event_time``): the final value at that event time, once the keyspace's watermark
        has passed it (waits up to 10 s, then :class:`~firn.NotCompleteError`). ``None``
        when absent (or deleted) there."""
        k = key_bytes(key)
        at = _one_read_at(version, as_of, event_time)
        if complete:
            if event_time is None or as_of is not None:
                raise ValueError("complete=True goes with event_time, and not with as_of (it chooses the time)")
            at.append("COMPLETE")
        args = ["FIRN.GET", k] + at + _consistency(consistency)
        v = version_from(k, self._session.call(*args))
        if v is not None:
            self._session.seen_over_resp(v.commit_ts)
        return v

    # -- large values, streamed over HTTP ----------------------------------------------

    def put_file(
        self,
        key: KeyLike,
        source: Union[str, "os.PathLike[str]", BinaryIO],
        *,
        if_version: Optional[int] = None,
        event_time: Optional[TimeLike] = None,
    ) -> WriteResult:
        """Writes a new version of ``key`` whose value is ``source``'s bytes: a file's path,
        or a binary file object read from where it stands to its end. The bytes stream over
        HTTP (``PUT /v1/kv/{key}``), never whole in memory, up to 16 GiB (RESP carries at
        most 64 MiB); a value above the node's inline limit (1 MiB by default) is stored
        beside the log. ``if_version`` and ``event_time`` as for :meth:`put`. The key goes
        in the URL, so it must be UTF-8 here."""
        query = _as_query(_write_words(if_version, event_time))
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as fh:
                return self._put_stream(key, fh, query)
        return self._put_stream(key, source, query)

    def _put_stream(self, key: KeyLike, body: BinaryIO, query: List[Any]) -> WriteResult:
        k = key_bytes(key)
        length: Optional[int] = None
        try:
            length = os.fstat(body.fileno()).st_size - body.tell()
        except (AttributeError, OSError, ValueError):
            pass  # not a file on disk: sent chunked
        resp, conn = self._session.http_open("PUT", _kv_path(k), query, body, length)
        try:
            answer = json.loads(resp.read())
        finally:
            conn.close()
        ts = CommitTs.parse(answer["commit_ts"])
        self._session.observe(ts)
        return WriteResult(k, int(answer["version"]), ts)

    def get_file(
        self,
        key: KeyLike,
        dest: Union[str, "os.PathLike[str]", BinaryIO],
        *,
        version: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        event_time: Optional[TimeLike] = None,
        consistency: Optional[str] = None,
    ) -> Optional[FileVersion]:
        """Streams the value of ``key`` (the version :meth:`get` would answer) into
        ``dest``: a path (created, or truncated), or a binary file object written from where
        it stands. Over HTTP (``GET /v1/kv/{key}``), never whole in memory. The version's
        details and size; ``None`` when the key is absent or deleted there (``dest`` is then
        not touched)."""
        k = key_bytes(key)
        # The read's words as for FIRN.GET (checked the same way), as query parameters.
        query = _as_query(_one_read_at(version, as_of, event_time) + _consistency(consistency))
        try:
            resp, conn = self._session.http_open("GET", _kv_path(k), query, None)
        except NotFoundError:
            return None
        try:
            if isinstance(dest, (str, os.PathLike)):
                with open(dest, "wb") as fh:
                    shutil.copyfileobj(resp, fh, STREAM_BLOCK_BYTES)
            else:
                shutil.copyfileobj(resp, dest, STREAM_BLOCK_BYTES)
        finally:
            conn.close()
        event = resp.getheader("Firn-Event-Time")
        return FileVersion(
            key=k,
            version=int(resp.getheader("Firn-Version") or 0),
            commit_ts=CommitTs.parse(resp.getheader("Firn-Commit-Ts") or "0-0"),
            event_time=None if event is None else int(event),
            size=int(resp.getheader("Content-Length") or 0),
        )

    def get_many(
        self,
        keys: Iterable[KeyLike],
        *,
        as_of: Optional[TimeLike] = None,
        event_time: Optional[TimeLike] = None,
        consistency: Optional[str] = None,
    ) -> Dict[bytes, Optional[Version]]:
        """Several keys (``FIRN.MGET``): each shard read linearizably, or all at ``as_of``.
        For one cut across shards at the newest closed time, use :meth:`snapshot`."""
        ks = [key_bytes(k) for k in keys]
        if not ks:
            raise ValueError("get_many needs at least one key")
        args = ["FIRN.MGET"] + _one_read_at(None, as_of, event_time) + _consistency(consistency) + ks
        replies = self._session.call(*args)
        out: Dict[bytes, Optional[Version]] = {}
        for k, r in zip(ks, replies):
            v = version_from(k, r)
            if v is not None:
                self._session.seen_over_resp(v.commit_ts)
            out[k] = v
        return out

    def delete(self, key: KeyLike) -> Optional[WriteResult]:
        """Writes a tombstone version; ``None`` when the key did not exist."""
        k = key_bytes(key)
        reply = self._write("FIRN.DEL", k)
        if reply is None:
            return None
        version, stamp = reply
        ts = CommitTs.parse(stamp)
        self._session.seen_over_resp(ts)
        return WriteResult(k, int(version), ts)

    def txn(
        self,
        *,
        compare: Sequence[Tuple[KeyLike, str, str, Any]] = (),
        then: Sequence[Sequence[Any]] = (),
        otherwise: Sequence[Sequence[Any]] = (),
    ) -> TxnResult:
        """Compare, then write, as one transaction across shards (``FIRN.TXN``, etcd's Txn):
        when every compare holds the ``then`` commands run, else the ``otherwise`` ones —
        all of them or none, at one commit stamp.

        A compare is ``(key, target, op, operand)``: target ``"version"`` (the key's newest
        version while it has a value, 0 when none), ``"value"``, ``"exists"`` (a bool, with
        ``"="`` or ``"!="``) or ``"stamp"`` (a :class:`CommitTs`); op ``=``, ``!=``, ``<``,
        ``<=``, ``>``, ``>=``. A command is its words, as a ``MULTI`` would queue it:
        ``("SET", "k", "v")``, ``("INCRBY", "n", 2)``, ``("GET", "k")``, ``("DEL", "k")``,
        ``("FIRN.LOG", "APPEND", "log", "TAGS", 1, "tag", payload)`` (its reply: the seqs).

        >>> c.txn(compare=[("lock", "exists", "=", False)],          # doctest: +SKIP
        ...       then=[("SET", "lock", "me"), ("INCR", "fence")],
        ...       otherwise=[("GET", "lock")])
        TxnResult(succeeded=True, replies=[b'OK', 1])
        """
        args: List[Any] = ["FIRN.TXN"]
        for key, target, op, operand in compare:
            kind = target.upper()
            if kind == "EXISTS":
                operand = 1 if operand else 0
            elif kind == "STAMP":
                operand = str(operand)
            elif kind == "VALUE":
                operand = as_bytes(operand, "value")
            args += ["IF", key_bytes(key), kind, op, operand]
        for word, commands in (("THEN", then), ("ELSE", otherwise)):
            for command in commands:
                if not command:
                    raise ValueError("an empty command")
                args += [word, len(command), *command]
        succeeded, replies = self._write(*args)
        # The transaction's stamp is the connection's now: the session carries it on.
        self.sync_token()
        return TxnResult(
            bool(succeeded),
            [error_from_resp(str(r)) if isinstance(r, Exception) else r for r in replies],
        )

    # -- leases ---------------------------------------------------------------------------

    def _lease_call(self, lease: Optional[int], *words: Any) -> Any:
        """``FIRN.LEASE words…``, sent again while the node refuses for now (nothing was
        applied); a lease the node does not know raises :class:`~firn.LeaseNotFoundError`
        naming ``lease``."""
        deadline = time.monotonic() + RESEND_FOR_S
        while True:
            try:
                return self._session.call("FIRN.LEASE", *words)
            except (TryAgainError, ClusterDownError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
            except LeaseNotFoundError as e:
                e.lease = lease
                raise

    def lease_grant(self, ttl_s: Union[int, float]) -> int:
        """Grants a lease of ``ttl_s`` seconds (whole seconds, a part rounded up; 1 to
        31,536,000) and answers its id. Keys written with ``put(…, lease=id)`` are deleted
        when it ends: revoked, or not kept alive (:meth:`lease_keepalive`) for its TTL.
        :class:`firn.concurrency.Lease` keeps one alive from a thread of its own."""
        ttl = lease_ttl_s(ttl_s)
        return int(self._lease_call(None, "GRANT", ttl))

    def lease_keepalive(self, lease: int) -> int:
        """Grants ``lease`` its TTL again from now; answers that TTL in seconds."""
        check_positive(lease, "lease")
        return int(self._lease_call(lease, "KEEPALIVE", lease))

    def lease_revoke(self, lease: int) -> None:
        """Ends ``lease`` now: every key attached to it is deleted, all at one stamp."""
        check_positive(lease, "lease")
        self._lease_call(lease, "REVOKE", lease)

    def lease_ttl(self, lease: int) -> float:
        """The seconds ``lease`` has left unless kept alive (to the millisecond)."""
        check_positive(lease, "lease")
        return int(self._lease_call(lease, "TTL", lease)) / 1000

    def history(
        self,
        key: KeyLike,
        *,
        from_version: Optional[int] = None,
        to_version: Optional[int] = None,
        limit: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        corrections: bool = False,
        consistency: Optional[str] = None,
    ) -> List[Version]:
        """The key's versions, oldest first, tombstones included (``deleted``). ``limit``
        defaults to the server's 100 (at most 10,000); ``as_of``: only versions committed at
        or before it; ``corrections``: only the versions written late (an event time at or
        below the keyspace's watermark) and kept."""
        k = key_bytes(key)
        args: List[Any] = ["FIRN.HISTORY", k]
        check_positive(from_version, "from_version")
        check_positive(to_version, "to_version")
        check_positive(limit, "limit", high=HISTORY_LIMIT_MAX)
        if from_version is not None:
            args += ["FROM", from_version]
        if to_version is not None:
            args += ["TO", to_version]
        if limit is not None:
            args += ["LIMIT", limit]
        if as_of is not None:
            args += ["ASOF", time_arg(as_of, "as_of")]
        if corrections:
            args.append("CORRECTIONS")
        args += _consistency(consistency)
        versions = [v for v in (version_from(k, r) for r in self._session.call(*args)) if v is not None]
        if versions:
            self._session.seen_over_resp(max(v.commit_ts for v in versions))
        return versions

    def scan(
        self,
        prefix: KeyLike = b"",
        *,
        match: Optional[str] = None,
        count: Optional[int] = None,
        as_of: Optional[TimeLike] = None,
        event_time: Optional[TimeLike] = None,
    ) -> Iterator[bytes]:
        """The live keys under ``prefix`` (``FIRN.SCAN``, every page). Not one cut: for
        that, :meth:`snapshot_prefix`."""
        p = as_bytes(prefix, "prefix")
        check_positive(count, "count")
        cursor: bytes = b""
        while True:
            args: List[Any] = ["FIRN.SCAN", p]
            if cursor:
                args += ["CURSOR", cursor]
            if count is not None:
                args += ["COUNT", count]
            if match is not None:
                args += ["MATCH", match]
            args += _one_read_at(None, as_of, event_time)
            nxt, keys = self._session.call(*args)
            yield from keys
            if not nxt:
                return
            cursor = nxt

    # -- snapshots --------------------------------------------------------------------

    def snapshot(self, keys: Sequence[KeyLike], *, at: Optional[TimeLike] = None) -> Snapshot:
        """``keys`` read as of one time across every shard (``FIRN.SNAPSHOT``): at ``at``,
        or at the newest time every shard involved has closed."""
        ks = [key_bytes(k) for k in keys]
        if not ks:
            raise ValueError("snapshot needs at least one key")
        args: List[Any] = ["FIRN.SNAPSHOT"]
        if at is not None:
            args += ["AT", time_arg(at, "at")]
        m = parse_map(self._session.call(*args, "KEYS", *ks))
        stamp = CommitTs.parse(m[b"at"])
        values = {k: version_from(k, r) for k, r in zip(ks, m[b"values"])}
        self._observe_versions(values.values())
        return Snapshot(at=stamp, values=values)

    def snapshot_page(
        self,
        prefix: KeyLike,
        *,
        at: Optional[TimeLike] = None,
        cursor: Optional[str] = None,
        count: Optional[int] = None,
    ) -> SnapshotPage:
        """One page of the keys under ``prefix`` as of one time. Pass the page's ``at`` and
        ``cursor`` back for the next page of the same cut."""
        check_positive(count, "count")
        args: List[Any] = ["FIRN.SNAPSHOT"]
        if at is not None:
            args += ["AT", time_arg(at, "at")]
        args += ["PREFIX", as_bytes(prefix, "prefix")]
        if cursor:
            args += ["CURSOR", cursor]
        if count is not None:
            args += ["COUNT", count]
        m = parse_map(self._session.call(*args))
        keys = [v for v in (version_from(None, r) for r in m[b"keys"]) if v is not None]
        self._observe_versions(keys)
        return SnapshotPage(at=CommitTs.parse(m[b"at"]), keys=keys, cursor=text(m.get(b"cursor")) or None)

    def snapshot_prefix(self, prefix: KeyLike, *, at: Optional[TimeLike] = None, count: int = 1000) -> Snapshot:
        """Every key under ``prefix`` as of one time (all pages read at the first page's
        time, so the whole answer is one cut)."""
        page = self.snapshot_page(prefix, at=at, count=count)
        values: Dict[bytes, Optional[Version]] = {v.key: v for v in page.keys}
        while page.cursor:
            page = self.snapshot_page(prefix, at=page.at, cursor=page.cursor, count=count)
            values.update((v.key, v) for v in page.keys)
        return Snapshot(at=page.at, values=values)

    def _observe_versions(self, versions: Iterable[Optional[Version]]) -> None:
        stamps = [v.commit_ts for v in versions if v is not None]
        if stamps:
            self._session.seen_over_resp(max(stamps))

    # -- device twins -----------------------------------------------------------------

    def twin(self, name: KeyLike, *, at: Optional[TimeLike] = None) -> Twin:
        """Device twin ``name``: the JSON objects at ``name/desired`` and ``name/reported``
        read in one snapshot — at ``at``, or at the time of the call (every write
        acknowledged before it included) — and their delta (``FIRN.TWIN GET``)."""
        args: List[Any] = ["FIRN.TWIN", "GET", key_bytes(name, "twin name")]
        if at is not None:
            args += ["ASOF", time_arg(at, "at")]
        m = parse_map(self._session.call(*args))
        n = key_bytes(name, "twin name")
        desired = version_from(n + b"/desired", m[b"desired"])
        reported = version_from(n + b"/reported", m[b"reported"])
        self._observe_versions([desired, reported])

        def document(v: Optional[Version]) -> Dict[str, Any]:
            return {} if v is None or v.value is None else json.loads(v.value)

        return Twin(
            at=CommitTs.parse(m[b"at"]),
            desired=document(desired),
            reported=document(reported),
            delta=json.loads(m[b"delta"]),
            desired_version=desired,
            reported_version=reported,
        )

    def twin_desire(self, name: KeyLike, patch: Mapping[str, Any]) -> WriteResult:
        """Merges ``patch`` (a JSON merge patch: members set, ``None`` removes one) into the
        twin's desired document, over its newest version."""
        return self._twin_patch("DESIRE", name, "desired", patch)

    def twin_report(self, name: KeyLike, patch: Mapping[str, Any]) -> WriteResult:
        """Merges ``patch`` into the twin's reported document (what the device says)."""
        return self._twin_patch("REPORT", name, "reported", patch)

    def _twin_patch(self, verb: str, name: KeyLike, side: str, patch: Mapping[str, Any]) -> WriteResult:
        if not isinstance(patch, Mapping):
            raise TypeError(f"a twin patch is a mapping (a JSON object), not {type(patch).__name__}")
        n = key_bytes(name, "twin name")
        # Not under an idempotency key: a merge patch applied again leaves the document as
        # it was (a version more).
        version, stamp = self._session.call("FIRN.TWIN", verb, n, json.dumps(patch, separators=(",", ":")))
        ts = CommitTs.parse(stamp)
        self._session.seen_over_resp(ts)
        return WriteResult(n + b"/" + side.encode(), int(version), ts)

    # -- watch ------------------------------------------------------------------------

    def watch(
        self,
        key: KeyLike,
        *,
        prefix: bool = False,
        from_version: Optional[int] = None,
        from_time: Optional[TimeLike] = None,
        idle_timeout_s: Optional[float] = None,
    ) -> Watch:
        """Every committed version of ``key`` (or of every key under it, ``prefix=True``),
        as an iterator of :class:`~firn.WatchEvent` — from ``from_version`` or
        ``from_time`` (replayed first), else from now. ``idle_timeout_s``: raise
        :class:`~firn.FirnTimeout` when nothing arrives for that long (default: wait)."""
        return Watch(self._session, key_bytes(key, "key or prefix") if not prefix else as_bytes(key, "prefix"),
                     prefix=prefix, from_version=from_version, from_time=from_time, idle_timeout_s=idle_timeout_s)

    # -- keyspaces --------------------------------------------------------------------

    def create_keyspace(
        self,
        prefix: KeyLike,
        *,
        mode: Optional[str] = None,
        max_versions: Optional[int] = None,
        max_age: Optional[Union[int, str]] = None,
        durability: Optional[str] = None,
        local: Optional[bool] = None,
        follow: Optional[Union[str, int]] = None,
    ) -> None:
        """Defines (or redefines) the keyspace of keys under ``prefix``: ``mode``
        (versioned, latest, notify), ``max_versions``, ``max_age`` (seconds or ``"7d"``),
        ``durability`` (disk, memory), ``local`` (publish in the shared-memory region),
        ``follow`` (on, off, or a node id)."""
        args: List[Any] = ["FIRN.KEYSPACE", "CREATE", as_bytes(prefix, "prefix")]
        if mode is not None:
            if mode not in ("versioned", "latest", "notify"):
                raise ValueError(f"unknown keyspace mode {mode!r}; use versioned, latest or notify")
            args += ["MODE", mode]
        if max_versions is not None:
            check_positive(max_versions, "max_versions")
            args += ["MAXVERSIONS", max_versions]
        if max_age is not None:
            args += ["MAXAGE", str(max_age)]
        if durability is not None:
            if durability not in ("disk", "memory"):
                raise ValueError(f"unknown durability {durability!r}; use disk or memory")
            args += ["DURABILITY", durability]
        if local is not None:
            args += ["LOCAL", "on" if local else "off"]
        if follow is not None:
            args += ["FOLLOW", str(follow)]
        self._session.call(*args)

    def keyspaces(self) -> List[Keyspace]:
        out = []
        for r in self._session.call("FIRN.KEYSPACE", "LIST"):
            m = parse_map(r)
            out.append(
                Keyspace(
                    prefix=m[b"prefix"],
                    mode=text(m[b"mode"]) or "",
                    max_versions=opt_int(m.get(b"max_versions")),
                    max_age_us=opt_int(m.get(b"max_age_us")),
                    durability=text(m.get(b"durability")) or "disk",
                    local=text(m.get(b"local")) == "on",
                    follow=text(m.get(b"follow")) or "off",
                )
            )
        return out

    def watermark(self, prefix: KeyLike) -> Watermark:
        """The event-time watermark of the keyspace ``prefix`` names (``""``: the default)."""
        return _watermark_from(self._session.call("FIRN.WATERMARK", as_bytes(prefix, "prefix")))

    def wait_watermark(self, prefix: KeyLike, event_time: TimeLike, *, timeout_ms: int = 5_000) -> Watermark:
        """The keyspace's watermark once it has reached ``event_time``;
        :class:`~firn.NotCompleteError` after ``timeout_ms`` (at most 60,000)."""
        check_positive(timeout_ms, "timeout_ms", high=60_000)
        reply = self._session.call(
            "FIRN.WATERMARK", as_bytes(prefix, "prefix"), "WAIT", time_arg(event_time, "event_time"),
            "TIMEOUT", timeout_ms,
        )
        return _watermark_from(reply)

    def advance_watermark(self, prefix: KeyLike, to: TimeLike) -> None:
        """Moves the keyspace's watermark up to ``to``: every write with an event time at or
        below it has arrived. A lower one than the current is refused, nothing changed."""
        self._session.call("FIRN.WATERMARK", as_bytes(prefix, "prefix"), "ADVANCE", time_arg(to, "to"))

    def set_watermark_policy(
        self, prefix: KeyLike, *, lateness: Optional[Union[int, str]] = None, late: str = "keep"
    ) -> None:
        """Sets the keyspace's allowed lateness (seconds, or ``"500ms"``, ``"5s"``; ``None``:
        none) and what a late write becomes: ``keep`` (a correction) or ``refuse``
        (:class:`~firn.LateError`)."""
        if late not in ("keep", "refuse"):
            raise ValueError(f"unknown late policy {late!r}; use keep or refuse")
        args: List[Any] = ["FIRN.WATERMARK", as_bytes(prefix, "prefix"), "POLICY", "LATE", late]
        if lateness is not None:
            args += ["LATENESS", f"{lateness}s" if isinstance(lateness, int) else str(lateness)]
        self._session.call(*args)

    def drop_keyspace(self, prefix: KeyLike) -> None:
        self._session.call("FIRN.KEYSPACE", "DROP", as_bytes(prefix, "prefix"))

    def truncate(
        self,
        *,
        key: Optional[KeyLike] = None,
        prefix: Optional[KeyLike] = None,
        before_version: Optional[int] = None,
        before_time: Optional[TimeLike] = None,
    ) -> int:
        """Removes a key's (or a prefix's) versions below ``before_version`` or committed
        before ``before_time``; the newest version is always kept. Answers how many went."""
        if (key is None) == (prefix is None):
            raise ValueError("give exactly one of key and prefix")
        if (before_version is None) == (before_time is None):
            raise ValueError("give exactly one of before_version and before_time")
        args: List[Any] = ["FIRN.TRUNCATE"]
        args += ["KEY", key_bytes(key)] if key is not None else ["PREFIX", as_bytes(prefix, "prefix")]  # type: ignore[arg-type]
        if before_version is not None:
            check_positive(before_version, "before_version")
            args += ["VERSION", before_version]
        else:
            args += ["TIME", time_arg(before_time, "before_time")]  # type: ignore[arg-type]
        return int(self._session.call(*args))

    # -- local reads ------------------------------------------------------------------

    def local(self) -> "LocalClient":
        """The node's shared-memory region for reads of ``LOCAL`` keyspaces with no request
        (the node must be on this host): :class:`firn.local.LocalClient`, sharing this
        client's token."""
        from .local.client import LocalClient

        return LocalClient.open(self)


#: FIRN.PUT's and FIRN.GET's words, as the query parameters of `/v1/kv` name them.
_HTTP_PARAMS = {
    "IFVERSION": "if_version",
    "EVENTTIME": "event_time",
    "VERSION": "version",
    "ASOF": "as_of",
    "CONSISTENCY": "consistency",
}


def _as_query(words: List[Any]) -> List[Any]:
    """RESP words (name, value pairs) as `/v1/kv` query parameters."""
    return [(_HTTP_PARAMS[w], str(v)) for w, v in zip(words[::2], words[1::2])]


def _kv_path(key: bytes) -> str:
    """``/v1/kv/{key}``, the key percent-encoded (every byte but letters, digits and
    ``_.-~``)."""
    return "/v1/kv/" + urllib.parse.quote(key, safe="")
