"""Consumer groups against a running Firn node through redis-py, unchanged: xgroup_create
(and the other XGROUP subcommands), xreadgroup (blocking too), xack, xpending,
xpending_range, xclaim, xautoclaim, xinfo_groups and xinfo_consumers, over RESP2 and RESP3.

    python3 tests/python/test_groups.py PORT

Exits non-zero on the first failed check. Keys carry a random prefix, so the test can run
against a node that holds other data.
"""

import os
import sys
import threading
import time

import redis

import harness


def ids(entries):
    return [e[0] for e in entries]


def stream_entries(reply, key):
    """XREADGROUP's answer for one stream, in either protocol's shape."""
    if not reply:
        return []
    if isinstance(reply, dict):
        entries = reply[key]
        # redis-py wraps RESP3's entries in one more list.
        if len(entries) == 1 and isinstance(entries[0], list) and entries[0]:
            if isinstance(entries[0][0], (list, tuple)):
                entries = entries[0]
        return entries
    [(name, entries)] = reply
    assert name == key, reply
    return entries


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, decode_responses=True, socket_timeout=20)
    k = f"pytest-groups:{os.urandom(4).hex()}:{protocol}:"
    s = k + "s"

    # Groups: made with MKSTREAM, refused twice, refused on a missing key.
    assert r.xgroup_create(s, "g", id="$", mkstream=True)
    try:
        r.xgroup_create(s, "g", id="0")
        raise AssertionError("a group was made twice")
    except redis.ResponseError as e:
        assert "BUSYGROUP Consumer Group name already exists" in str(e), e
    try:
        r.xgroup_create(k + "missing", "g", id="$")
        raise AssertionError("a group on a missing stream without MKSTREAM")
    except redis.ResponseError as e:
        assert "requires the key to exist" in str(e), e
    for i in range(1, 6):
        r.xadd(s, {"n": str(i)}, id=f"{i}-0")

    # XREADGROUP >: each entry to one consumer, once.
    got = stream_entries(r.xreadgroup("g", "alice", {s: ">"}, count=2), s)
    assert ids(got) == ["1-0", "2-0"], got
    assert got[0][1] == {"n": "1"}, got
    got = stream_entries(r.xreadgroup("g", "bob", {s: ">"}), s)
    assert ids(got) == ["3-0", "4-0", "5-0"], got
    assert not r.xreadgroup("g", "bob", {s: ">"})
    # The consumer's own pending entries, from an id.
    got = stream_entries(r.xreadgroup("g", "alice", {s: "0"}), s)
    assert ids(got) == ["1-0", "2-0"], got
    try:
        r.xreadgroup("nogroup", "alice", {s: ">"})
        raise AssertionError("a read of a missing group")
    except redis.ResponseError as e:
        assert "NOGROUP No such key" in str(e), e

    # XPENDING: the summary and the range.
    summary = r.xpending(s, "g")
    assert summary["pending"] == 5, summary
    assert summary["min"] == "1-0" and summary["max"] == "5-0", summary
    counts = {c["name"]: c["pending"] for c in summary["consumers"]}
    assert counts == {"alice": 2, "bob": 3}, summary
    rows = r.xpending_range(s, "g", min="-", max="+", count=10, consumername="alice")
    assert [row["message_id"] for row in rows] == ["1-0", "2-0"], rows
    # alice read them twice: once by >, once by id.
    assert all(row["times_delivered"] == 2 for row in rows), rows
    assert r.xpending_range(s, "g", min="-", max="+", count=10, idle=3_600_000) == []

    # XACK.
    assert r.xack(s, "g", "1-0", "9-0") == 1
    assert r.xpending(s, "g")["pending"] == 4

    # XCLAIM and XAUTOCLAIM.
    assert r.xclaim(s, "g", "carol", min_idle_time=3_600_000, message_ids=["2-0"]) == []
    claimed = r.xclaim(s, "g", "carol", min_idle_time=0, message_ids=["2-0"])
    assert ids(claimed) == ["2-0"], claimed
    assert r.xclaim(s, "g", "dave", 0, ["2-0"], justid=True) == ["2-0"]
    auto = r.xautoclaim(s, "g", "erin", min_idle_time=0, start_id="0-0", count=2)
    assert auto[0] == "4-0", auto
    assert ids(auto[1]) == ["2-0", "3-0"], auto
    # redis-py answers only the claimed ids with JUSTID.
    auto = r.xautoclaim(s, "g", "erin", 0, start_id=auto[0], justid=True)
    assert auto == ["4-0", "5-0"], auto

    # XINFO GROUPS and CONSUMERS.
    assert r.xinfo_stream(s)["groups"] == 1
    [info] = r.xinfo_groups(s)
    assert info["name"] == "g", info
    assert info["pending"] == 4, info
    assert info["last-delivered-id"] == "5-0", info
    consumers = {c["name"]: c for c in r.xinfo_consumers(s, "g")}
    assert set(consumers) >= {"alice", "bob", "carol", "dave", "erin"}, consumers
    assert consumers["erin"]["pending"] == 4, consumers
    assert consumers["alice"]["pending"] == 0, consumers

    # XGROUP CREATECONSUMER, DELCONSUMER, SETID, DESTROY.
    assert r.xgroup_createconsumer(s, "g", "frank") == 1
    assert r.xgroup_delconsumer(s, "g", "erin") == 4
    assert r.xgroup_setid(s, "g", id="0")
    got = stream_entries(r.xreadgroup("g", "gina", {s: ">"}, count=1), s)
    assert ids(got) == ["1-0"], got

    # A blocked XREADGROUP wakes for a new entry.
    assert r.xgroup_create(s, "late", id="$")
    def add_later():
        time.sleep(0.3)
        redis.Redis(port=port).xadd(s, {"n": "6"}, id="6-0")
    t = threading.Thread(target=add_later)
    t.start()
    got = stream_entries(r.xreadgroup("late", "h", {s: ">"}, block=5_000), s)
    t.join()
    assert ids(got) == ["6-0"], got
    assert not r.xreadgroup("late", "h", {s: ">"}, block=100)

    assert r.xgroup_destroy(s, "g") == 1
    assert r.xgroup_destroy(s, "g") == 0

    # The connection goes on after errors.
    assert r.ping()


if __name__ == "__main__":
    sys.exit(harness.run("test_groups", check_protocol))
