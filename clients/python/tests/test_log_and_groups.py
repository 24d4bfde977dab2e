"""The shared log, streams and consumer groups against a real node."""

from __future__ import annotations

import threading
import time

import pytest

import firn
from firn import next_seq


def test_log_records_are_read_back_by_tag_in_order(client: firn.Client, ns: str) -> None:
    log = ns + "orders"
    s1 = client.log.append(log, "order 1", tags=["eu", "paid"])
    s2, s3 = client.log.append_many(log, [(["eu"], "order 2"), (["us"], b"\xff\x00")])
    eu = client.log.range(log, "eu")
    assert [(r.seq, r.value, r.tags) for r in eu] == [(s1, b"order 1", [b"eu", b"paid"]), (s2, b"order 2", [b"eu"])]
    assert client.log.range(log, "us")[0].value == b"\xff\x00"
    assert client.log.next(log, "eu", next_seq(s1)).seq == s2  # type: ignore[union-attr]
    assert client.log.prev(log, "eu", s2).seq == s2  # type: ignore[union-attr]
    assert client.log.tail(log, "paid").seq == s1  # type: ignore[union-attr]
    assert client.log.next(log, "eu", next_seq(s2)) is None
    info = client.log.info(log, "eu")
    assert (info.length, info.first_seq, info.last_seq, info.first_kept_seq, info.entries_added) == (2, s1, s2, "0-0", 2)
    # The append's stamp is in the token, though its answer shows only seqs.
    assert client.token >= eu[-1].commit_ts
    assert s3 != s2


def test_a_log_read_at_a_time_shows_the_log_as_it_was(client: firn.Client, ns: str) -> None:
    log = ns + "l"
    client.log.append(log, "first", tags=["t"])
    first = client.log.tail(log, "t")
    assert first is not None
    client.log.append(log, "second", tags=["t"])
    assert [r.value for r in client.log.range(log, "t", as_of=first.commit_ts)] == [b"first"]
    assert client.log.tail(log, "t").value == b"second"  # type: ignore[union-attr]


def test_a_blocking_next_gets_the_record_appended_while_it_waits(node: object, client: firn.Client, ns: str) -> None:
    log = ns + "blk"
    client.log.append(log, "seed", tags=["t"])
    seed = client.log.tail(log, "t")
    assert seed is not None

    def later() -> None:
        time.sleep(0.3)
        with node.client() as c:  # type: ignore[attr-defined]
            c.log.append(log, "arrived", tags=["t"])

    t = threading.Thread(target=later)
    t.start()
    started = time.monotonic()
    rec = client.log.next(log, "t", next_seq(seed.seq), block_ms=10_000)
    t.join(10)
    assert rec is not None and rec.value == b"arrived"
    assert time.monotonic() - started < 9
    # Nothing more comes: the block ends with None after its time.
    assert client.log.next(log, "t", next_seq(rec.seq), block_ms=200) is None


def test_trimmed_and_missing_logs_raise_their_codes(client: firn.Client, ns: str) -> None:
    log = ns + "tr"
    client.log.append(log, "a", tags=["t"])
    time.sleep(0.005)
    s2 = client.log.append(log, "b", tags=["t"])
    assert client.log.trim(log, s2, tag="t") == 1
    with pytest.raises(firn.TrimmedError) as e:
        client.log.next(log, "t", "0")
    assert e.value.first_kept == s2
    assert [r.value for r in client.log.range(log, "t", e.value.first_kept)] == [b"b"]  # type: ignore[arg-type]
    with pytest.raises(firn.NoLogError):
        client.log.tail(ns + "never", "t")
    with pytest.raises(ValueError, match="not a seq"):
        client.log.next(log, "t", "12-x")
    with pytest.raises(ValueError, match="1 to 16"):
        client.log.append(log, "v", tags=[])
    with pytest.raises(ValueError, match="cannot block"):
        client.log.next(log, "t", "0", block_ms=10, as_of=1)


def test_follow_yields_old_records_then_new_ones(client: firn.Client, ns: str) -> None:
    log = ns + "f"
    client.log.append_many(log, [(["t"], "1"), (["t"], "2")])
    got = [r.value for r in client.log.follow(log, "t", block_ms=100, idle_timeout_s=0.5)]
    assert got == [b"1", b"2"]


def test_a_group_delivers_each_entry_once_and_tracks_pending(client: firn.Client, ns: str) -> None:
    stream = ns + "jobs"
    ids = [client.streams.add(stream, {"item": f"book {i}"}) for i in range(3)]
    group = client.streams.group(stream, "billing")
    group.create(start="0")
    with pytest.raises(firn.BusyGroupError):
        group.create(start="0")
    got_a = group.read("worker-a", count=2)
    got_b = group.read("worker-b", count=10)
    assert [e.id for e in got_a] == ids[:2] and [e.id for e in got_b] == ids[2:]
    assert got_a[0].fields == [(b"item", b"book 0")]
    assert group.read("worker-b", count=10) == []
    pending = group.pending()
    assert (pending.count, pending.first, pending.last) == (3, ids[0], ids[2])
    assert pending.consumers == {"worker-a": 2, "worker-b": 1}
    assert group.ack(ids[0], ids[1]) == 2
    assert group.ack(ids[0]) == 0
    after = group.pending()
    assert after.count == 1 and after.consumers == {"worker-b": 1}
    detail = group.pending_entries()
    assert [(p.id, p.consumer, p.deliveries) for p in detail] == [(ids[2], "worker-b", 1)]
    info = group.info()
    assert (info.name, info.pending, info.last_delivered_id, info.policy) == ("billing", 1, ids[2], "first")
    assert {c.name: c.pending for c in group.consumers()} == {"worker-a": 0, "worker-b": 1}
    claimed = group.claim("worker-a", 0, [ids[2]])
    assert [e.id for e in claimed] == [ids[2]]
    assert group.pending().consumers == {"worker-a": 1}
    auto = group.autoclaim("worker-b", 0)
    assert [e.id for e in auto.entries] == [ids[2]] and auto.next_id == "0-0"
    assert group.destroy() is True
    with pytest.raises(firn.NoGroupError):
        group.read("worker-a")


def test_a_group_with_options_reports_them(client: firn.Client, ns: str) -> None:
    stream = "{" + ns + "t}tasks"
    group = client.streams.group(stream, "workers")
    group.create(
        start="0", mkstream=True, policy="hrw", key_field="room", ack_wait_ms=5000,
        max_deliver=3, dead_letter="{" + ns + "t}dead", liveness_ms=10_000,
    )
    info = client.streams.groups(stream)[0]
    assert (info.policy, info.key, info.ack_wait_ms, info.max_deliver, info.liveness_ms) == ("hrw", "room", 5000, 3, 10_000)
    assert info.dead_letter == "{" + ns + "t}dead"
    with pytest.raises(ValueError, match="go with policy"):
        group.configure(key_field="room")
    with pytest.raises(ValueError, match="go together"):
        group.configure(max_deliver=3)
    with pytest.raises(firn.CrossSlotError):
        client.streams.group(stream, "other").create(start="0", max_deliver=1, dead_letter=ns + "elsewhere-dead")


def test_consume_follows_a_consumers_deliveries_pending_first(node: object, client: firn.Client, ns: str) -> None:
    stream = ns + "ev"
    group = client.streams.group(stream, "g")
    group.create(start="0", mkstream=True)
    first = client.streams.add(stream, [("n", "1")])
    # Delivered to c1 and not acked: the event stream sends it again first.
    assert [e.id for e in group.read("c1")] == [first]

    def later() -> None:
        time.sleep(0.3)
        with node.client() as c:  # type: ignore[attr-defined]
            c.streams.add(stream, [("n", "2"), ("n", "again")])

    t = threading.Thread(target=later)
    t.start()
    entries = list(group.consume("c1", count=2, idle_timeout_s=10))
    t.join(10)
    assert [e.id for e in entries][0] == first
    assert entries[1].fields == [(b"n", b"2"), (b"n", b"again")]
    assert group.pending().count == 2
    assert group.ack(*[e.id for e in entries]) == 2
    assert group.pending().count == 0
    with pytest.raises(firn.NoGroupError):
        list(client.streams.group(stream, "nobody").consume("c1", count=1, idle_timeout_s=5))
