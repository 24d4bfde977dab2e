"""A client object's session: its causality token, and the two transports that carry it.

The token is the newest commit stamp the client has seen (its writes, the versions its reads
returned, what a watch delivered, what another session handed over). It only grows.

* RESP keeps a token per connection. The session has one RESP connection; before a
  command, if the client's token is above what that connection has been told, ``FIRN.AFTER``
  goes first in the same round trip; a new connection (after a reconnect) is told the token
  as it opens, so a reconnect never loses the session.
* HTTP keeps no state: each request carries ``Firn-After: token`` and each answer's
  ``Firn-Token`` header raises the token.

This module owns the sockets and the token; it knows no command.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .errors import FirnConnectionError, FirnError, FirnTimeout, RequestError, error_from, error_from_resp
from .stamps import CommitTs

try:  # redis-py >= 5: a parser that keeps every error's code (ERR, TRYAGAIN, …) as sent.
    from redis._parsers import _RESP2Parser

    class _FirnParser(_RESP2Parser):
        EXCEPTION_CLASSES: Dict[str, Any] = {}

    _PARSER: Optional[type] = _FirnParser
except ImportError:  # pragma: no cover - older layouts: errors mapped by their text
    _PARSER = None

Arg = Union[str, bytes, int]


def split_addr(addr: str, what: str) -> Tuple[str, int]:
    """``HOST:PORT`` as a pair; ``ValueError`` naming the address otherwise."""
    if not isinstance(addr, str):
        raise TypeError(f"{what} must be a 'HOST:PORT' string, not {type(addr).__name__}")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{what} {addr!r} is not HOST:PORT (e.g. 127.0.0.1:7379)")
    return host.strip("[]"), int(port)


class Session:
    """One client's token and its RESP connection and HTTP endpoint."""

    def __init__(
        self,
        addr: str,
        http_addr: str,
        timeout_s: float,
        username: Optional[str] = None,
        password: Optional[str] = None,
        token: Optional[str] = None,
        tls_ca: Optional[str] = None,
    ) -> None:
        if password is None and username is not None:
            raise ValueError("username given without a password")
        self._credentials = (username or "default", password) if password is not None else None
        self._bearer = token
        # TLS to a node started with --tls-cert: its certificate checked against this CA file.
        self._tls: Optional[ssl.SSLContext] = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
        if timeout_s <= 0:
            raise ValueError(f"timeout_s is {timeout_s}; it must be above 0")
        self.host, self.port = split_addr(addr, "addr")
        self.http_host, self.http_port = split_addr(http_addr, "http_addr")
        self.timeout_s = timeout_s
        self._token = CommitTs.ZERO
        self._token_lock = threading.Lock()
        # What the RESP connection is known to have: below the token, FIRN.AFTER goes first.
        self._told = CommitTs.ZERO
        self._lock = threading.RLock()
        kwargs: Dict[str, Any] = dict(
            host=self.host,
            port=self.port,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            protocol=2,
            # A write whose answer was lost must not be sent again behind the caller's back.
            retry=Retry(NoBackoff(), 0),
        )
        if _PARSER is not None:
            kwargs["parser_class"] = _PARSER
        connection_class: Any = redis.Connection  # redis-py ships no types for it
        if tls_ca:
            connection_class = redis.SSLConnection
            kwargs.update(ssl_ca_certs=tls_ca, ssl_cert_reqs="required")
        self._conn: Any = connection_class(**kwargs)
        self._conn.register_connect_callback(self._on_connect)

    # -- the token --------------------------------------------------------------------

    @property
    def token(self) -> CommitTs:
        with self._token_lock:
            return self._token

    def observe(self, stamp: Optional[CommitTs]) -> None:
        """Raises the token to ``stamp`` (never lowers it)."""
        if stamp is None:
            return
        with self._token_lock:
            if stamp > self._token:
                self._token = stamp

    def _on_connect(self, conn: Any) -> None:
        # Runs inside redis-py's connect(), before any command on the new socket.
        if self._credentials is not None:
            conn.send_command("AUTH", *self._credentials)
            try:
                conn.read_response()
            except ResponseError as e:
                # Not left half signed in: the next call connects (and signs in) again.
                conn.disconnect()
                raise error_from_resp(str(e)) from None
        token = self.token
        self._told = CommitTs.ZERO
        if token > CommitTs.ZERO:
            conn.send_command("FIRN.AFTER", str(token))
            try:
                conn.read_response()
            except ResponseError:
                # Left untold: the next command sends FIRN.AFTER in band, where its error
                # reaches the caller as a FirnError.
                return
            self._told = token

    # -- RESP -------------------------------------------------------------------------

    def call(self, *args: Arg, wait_s: Optional[float] = None) -> Any:
        """One command on the session's connection; its reply. ``wait_s``: the command may
        block that long on the server (a blocking read), so wait that much longer."""
        return self.pipeline([args], wait_s=wait_s)[0]

    def pipeline(
        self, commands: Sequence[Sequence[Arg]], wait_s: Optional[float] = None, errors_in_place: bool = False
    ) -> List[Any]:
        """Commands sent together, replies read in order (one round trip). The first error
        reply is raised after every reply has been read, so the connection stays in step;
        with ``errors_in_place`` each error reply is returned as a :class:`FirnError` in its
        command's place instead."""
        with self._lock:
            conn = self._conn
            try:
                conn.connect()
                token = self.token
                sent: List[Sequence[Arg]] = list(commands)
                after = token > self._told
                if after:
                    sent = [("FIRN.AFTER", str(token))] + sent
                conn.send_packed_command(conn.pack_commands(sent))
                if wait_s is not None and not conn.can_read(timeout=wait_s + self.timeout_s):
                    conn.disconnect()
                    raise FirnTimeout(f"no reply from {self.host}:{self.port} within {wait_s + self.timeout_s:.1f} s")
                replies: List[Any] = []
                error: Optional[FirnError] = None
                for _ in sent:
                    try:
                        replies.append(conn.read_response())
                    except ResponseError as e:
                        failed = error_from_resp(str(e))
                        replies.append(failed if errors_in_place else None)
                        if error is None:
                            error = failed
                if after:
                    if not isinstance(replies[0], Exception):
                        self._told = max(self._told, token)
                    elif errors_in_place:
                        # The session's token was not passed on: not a command's own error.
                        raise replies[0]
                    replies = replies[1:]
                if error is not None and not errors_in_place:
                    raise error
                return replies
            except (RedisTimeoutError, socket.timeout) as e:
                conn.disconnect()
                raise FirnTimeout(f"no reply from {self.host}:{self.port} within {self.timeout_s} s: {e}") from e
            except (RedisConnectionError, OSError) as e:
                conn.disconnect()
                raise FirnConnectionError(
                    f"connection to {self.host}:{self.port} failed: {e} "
                    "(a write sent on it may or may not have been applied)"
                ) from e

    def seen_over_resp(self, stamp: Optional[CommitTs]) -> None:
        """A stamp an answer on the RESP connection showed: both the token and what the
        connection holds rise to it."""
        if stamp is None:
            return
        self.observe(stamp)
        with self._lock:
            if stamp > self._told:
                self._told = stamp

    def close(self) -> None:
        with self._lock:
            self._conn.disconnect()

    # -- HTTP -------------------------------------------------------------------------

    def http_request(
        self,
        method: str,
        path: str,
        query: Optional[Sequence[Tuple[str, str]]] = None,
        body: Optional[bytes] = None,
        json_body: Any = None,
        timeout_s: Optional[float] = None,
    ) -> Tuple[int, Dict[str, str], bytes]:
        """One HTTP request with the token; ``(status, headers, body)`` for a 2xx answer,
        the mapped ``FirnError`` otherwise."""
        resp, conn = self._http_open(method, path, query, body, json_body, timeout_s)
        try:
            data = resp.read()
        except (socket.timeout, OSError) as e:
            raise FirnTimeout(f"HTTP {method} {path}: {e}") from e
        finally:
            conn.close()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, data

    def http_json(
        self,
        method: str,
        path: str,
        query: Optional[Sequence[Tuple[str, str]]] = None,
        json_body: Any = None,
        timeout_s: Optional[float] = None,
    ) -> Any:
        _, _, data = self.http_request(method, path, query, json_body=json_body, timeout_s=timeout_s)
        return json.loads(data) if data else None

    def http_stream(
        self, path: str, query: Optional[Sequence[Tuple[str, str]]], idle_timeout_s: Optional[float]
    ) -> "SseStream":
        """Opens a Server-Sent Events stream (an error status is raised before it opens)."""
        resp, conn = self._http_open("GET", path, query, None, None, idle_timeout_s, stream=True)
        return SseStream(resp, conn, self, idle_timeout_s)

    def http_open(
        self,
        method: str,
        path: str,
        query: Optional[Sequence[Tuple[str, str]]],
        body: Union[None, bytes, BinaryIO],
        length: Optional[int] = None,
    ) -> Tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        """One request whose body (a file object: read in blocks of ``STREAM_BLOCK_BYTES``,
        ``length`` bytes, or chunked when that is not known) and answer stream: the open
        answer and its connection, for the caller to read and close. An error status is
        raised before it returns."""
        headers = {} if length is None else {"Content-Length": str(length)}
        return self._http_open(method, path, query, body, None, None, headers=headers)

    def _http_open(
        self,
        method: str,
        path: str,
        query: Optional[Sequence[Tuple[str, str]]],
        body: Union[None, bytes, BinaryIO],
        json_body: Any,
        timeout_s: Optional[float],
        stream: bool = False,
        headers: Optional[Dict[str, str]] = None,
    ) -> Tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        url = path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        headers = dict(headers or {})
        token = self.token
        if token > CommitTs.ZERO:
            headers["Firn-After"] = str(token)
        if self._bearer is not None:
            headers["Authorization"] = f"Bearer {self._bearer}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        if stream:
            headers["Accept"] = "text/event-stream"
        wait = timeout_s if timeout_s is not None else self.timeout_s
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                self.http_host, self.http_port, timeout=wait, context=self._tls, blocksize=STREAM_BLOCK_BYTES
            )
            if self._tls is not None
            else http.client.HTTPConnection(self.http_host, self.http_port, timeout=wait, blocksize=STREAM_BLOCK_BYTES)
        )
        try:
            conn.request(method, url, body=body, headers=headers)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise FirnTimeout(f"HTTP {method} {path}: no answer from {self.http_host}:{self.http_port}") from e
        except OSError as e:
            conn.close()
            raise FirnConnectionError(f"HTTP {method} {path} to {self.http_host}:{self.http_port} failed: {e}") from e
        stamp = resp.getheader("Firn-Token")
        if stamp:
            try:
                self.observe(CommitTs.parse(stamp))
            except ValueError:
                pass
        if not 200 <= resp.status < 300:
            try:
                data = resp.read()
            finally:
                conn.close()
            raise _http_error(resp.status, data)
        return resp, conn


#: Bytes read from a file (or an answer) at a time when a value streams over HTTP.
STREAM_BLOCK_BYTES = 1 << 20


def _http_error(status: int, data: bytes) -> FirnError:
    try:
        doc = json.loads(data)
        code = str(doc.get("error", "ERR"))
        message = str(doc.get("message", ""))
        return error_from(code, message, doc)
    except (ValueError, AttributeError):
        return RequestError(f"HTTP {status}: {data[:200]!r}")


class SseStream:
    """The events of one Server-Sent Events answer: ``(event, data, id)`` per event."""

    def __init__(
        self,
        resp: http.client.HTTPResponse,
        conn: http.client.HTTPConnection,
        session: Session,
        idle_timeout_s: Optional[float],
    ) -> None:
        self._resp = resp
        self._conn = conn
        self._idle_timeout_s = idle_timeout_s
        self.closed = False

    def events(self) -> Iterator[Tuple[str, str, Optional[str]]]:
        event, data, ident = "message", [], None  # type: Tuple[str, List[str], Optional[str]]
        while not self.closed:
            try:
                raw = self._resp.readline(1 << 24)
            except socket.timeout as e:
                self.close()
                raise FirnTimeout(f"nothing arrived on the event stream within {self._idle_timeout_s} s") from e
            except (OSError, ValueError, http.client.HTTPException) as e:
                if self.closed:
                    return
                self.close()
                raise FirnConnectionError(f"the event stream broke: {e}") from e
            if not raw:
                self.close()
                return
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:
                    yield event, "\n".join(data), ident
                event, data, ident = "message", [], None
                continue
            if line.startswith(":"):
                continue  # a keep-alive comment
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                ident = value

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._conn.close()
            except OSError:  # pragma: no cover
                pass


def parse_map(reply: Any) -> Dict[bytes, Any]:
    """A RESP map: a flat ``[k, v, k, v…]`` array in RESP2, a dict in RESP3."""
    if isinstance(reply, dict):
        return reply
    if not isinstance(reply, (list, tuple)) or len(reply) % 2:
        raise FirnError(f"expected a map from the server, got {reply!r:.200}", code="PROTOCOL")
    return {reply[i]: reply[i + 1] for i in range(0, len(reply), 2)}


def as_bytes(value: Union[str, bytes], what: str) -> bytes:
    """A key, tag or value as bytes (``str`` is encoded as UTF-8)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes or str, not {type(value).__name__}")


def text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def opt_int(value: Any) -> Optional[int]:
    if value is None or value == b"" or value == "":
        return None
    return int(value)


def check_positive(value: Optional[int], what: str, low: int = 1, high: Optional[int] = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{what} is {value}; it must be {bound}")


def mapping_items(fields: Union[Mapping[Any, Any], Sequence[Tuple[Any, Any]]]) -> List[Tuple[Any, Any]]:
    if isinstance(fields, Mapping):
        return list(fields.items())
    return list(fields)
