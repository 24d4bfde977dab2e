"""Watches (HTTP Server-Sent Events) and causality tokens against a real node."""

from __future__ import annotations

import threading
import time

import pytest

import firn
from firn import CommitTs


def test_a_watch_replays_from_a_version_then_follows_live_commits(node: object, client: firn.Client, ns: str) -> None:
    client.put(ns + "w/a", "1")
    client.put(ns + "w/b", "2")
    with client.watch(ns + "w/", prefix=True, from_version=1, idle_timeout_s=10) as w:
        replayed = w.take(2)
        assert sorted((e.key, e.value) for e in replayed) == [((ns + "w/a").encode(), b"1"), ((ns + "w/b").encode(), b"2")]
        with node.client() as writer:  # type: ignore[attr-defined]
            w3 = writer.put(ns + "w/a", "3")
            writer.delete(ns + "w/b")
            writer.put(ns + "other", "not watched")
            writer.put(ns + "w/c", bytes([0xFF, 0x00]))
        live = w.take(3)
    assert [(e.kind, e.key, e.version, e.value) for e in live] == [
        ("put", (ns + "w/a").encode(), 2, b"3"),
        ("del", (ns + "w/b").encode(), 2, None),
        ("put", (ns + "w/c").encode(), 1, bytes([0xFF, 0x00])),
    ]
    assert live[0].commit_ts == w3.commit_ts and live[1].deleted
    # What the watch delivered raised this client's token.
    assert client.token >= live[2].commit_ts


def test_a_watch_of_one_key_from_now_sees_only_new_versions_of_it(node: object, client: firn.Client, ns: str) -> None:
    client.put(ns + "k", "before")
    with client.watch(ns + "k", idle_timeout_s=10) as w:
        done = threading.Event()

        def write() -> None:
            with node.client() as c:  # type: ignore[attr-defined]
                c.put(ns + "k2", "other key")
                c.put(ns + "k", "after")
            done.set()

        t = threading.Thread(target=write)
        t.start()
        ev = next(w)
        t.join(10)
    assert done.is_set()
    assert (ev.key, ev.value, ev.version) == ((ns + "k").encode(), b"after", 2)


def test_a_quiet_watch_times_out_and_a_closed_one_ends(client: firn.Client, ns: str) -> None:
    w = client.watch(ns + "quiet", idle_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(firn.FirnTimeout):
        next(w)
    assert time.monotonic() - started < 5
    w.close()
    with pytest.raises(StopIteration):
        next(w)


def test_a_watch_below_the_retained_history_is_refused(client: firn.Client, ns: str) -> None:
    for i in range(3):
        client.put(ns + "c", str(i))
    client.truncate(key=ns + "c", before_version=3)
    with pytest.raises(firn.CompactedError):
        with client.watch(ns + "c", from_version=1, idle_timeout_s=5) as w:
            next(w)


def test_the_token_grows_with_every_answer_and_never_goes_back(client: firn.Client, ns: str) -> None:
    assert client.token == CommitTs.ZERO
    seen = [client.token]
    w1 = client.put(ns + "t", "1")
    seen.append(client.token)
    assert client.token == w1.commit_ts
    client.put(ns + "t", "2")
    seen.append(client.token)
    client.get(ns + "t", version=1)  # an older version read: the token stays
    seen.append(client.token)
    client.history(ns + "t")
    seen.append(client.token)
    assert seen == sorted(seen) and seen[2] > seen[1]
    assert seen[-1] == seen[2]
    # The connection's own token agrees with the client's.
    assert CommitTs.parse(client._session.call("FIRN.TOKEN")) == client.token


def test_a_token_handed_to_another_client_reaches_its_connection_and_survives_a_reconnect(
    node: object, client: firn.Client, ns: str
) -> None:
    w = client.put(ns + "h", "from A")
    other = node.client()  # type: ignore[attr-defined]
    try:
        assert other.token == CommitTs.ZERO
        assert other.ping()  # its connection is open, with no token
        other.after(str(client.token))
        assert other.token == w.commit_ts
        assert CommitTs.parse(other._session.call("FIRN.TOKEN")) >= w.commit_ts
        # The connection breaks: the new one is told the token as it opens.
        other._session._conn.disconnect()
        assert CommitTs.parse(other._session.call("FIRN.TOKEN")) >= w.commit_ts
        mine = other.put(ns + "h", "from B")
        assert mine.commit_ts > w.commit_ts
        assert other.get(ns + "h").value == b"from B"  # type: ignore[union-attr]
    finally:
        other.close()
    with pytest.raises(ValueError, match="not a commit stamp"):
        client.after("yesterday")


def test_http_answers_raise_the_token(node: object, ns: str) -> None:
    with node.client() as writer:  # type: ignore[attr-defined]
        w = writer.put(ns + "x", "v")
    with node.client() as reader:  # type: ignore[attr-defined]
        assert reader.token == CommitTs.ZERO
        assert reader.get(ns + "absent") is None  # its connection is open, with no token
        with reader.watch(ns + "x", from_version=1, idle_timeout_s=5) as watch:
            ev = next(watch)
        assert ev.commit_ts == w.commit_ts
        assert reader.token >= w.commit_ts
        # The RESP connection is told the HTTP-raised token before its next command.
        assert CommitTs.parse(reader._session.call("FIRN.TOKEN")) >= w.commit_ts
