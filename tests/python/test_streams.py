"""Redis Streams against a running Firn node through redis-py, unchanged: xadd, xrange,
xrevrange, xread (blocking too), xlen, xtrim, xdel and xinfo_stream, over RESP2 and RESP3.

    python3 tests/python/test_streams.py PORT

Exits non-zero on the first failed check. Keys carry a random prefix, so the test can run
against a node that holds other data.
"""

import os
import sys
import threading
import time

import redis

import harness


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, decode_responses=True, socket_timeout=20)
    k = f"pytest:{os.urandom(4).hex()}:{protocol}:"
    s, other = k + "s", k + "other"

    # xadd: explicit, partial and automatic ids; Redis's errors.
    assert r.xadd(s, {"temp": "21", "unit": "c"}, id="1-1") == "1-1"
    assert r.xadd(s, {"temp": "22"}, id="1-*") == "1-2"
    auto = r.xadd(s, {"temp": "23"})
    ms, seq = auto.split("-")
    assert abs(int(ms) - time.time() * 1000) < 60_000, auto
    try:
        r.xadd(s, {"temp": "0"}, id="1-1")
        raise AssertionError("an id below the top was accepted")
    except redis.ResponseError as e:
        assert "equal or smaller than the target stream top item" in str(e), e
    try:
        r.xadd(s, {"x": "y"}, id="not-an-id")
        raise AssertionError("a malformed id was accepted")
    except redis.ResponseError as e:
        assert "Invalid stream ID" in str(e), e
    assert r.xadd(k + "missing", {"a": "b"}, nomkstream=True) is None
    assert r.xlen(k + "missing") == 0

    # xrange / xrevrange: entries as (id, {field: value}).
    entries = r.xrange(s)
    assert [e[0] for e in entries] == ["1-1", "1-2", auto], entries
    assert entries[0][1] == {"temp": "21", "unit": "c"}
    assert r.xrange(s, min="(1-1", max="+", count=1) == [("1-2", {"temp": "22"})]
    assert [e[0] for e in r.xrevrange(s, count=2)] == [auto, "1-2"]
    assert r.xrange(k + "nostream") == []

    # xread: entries after each id; RESP2 a list, RESP3 a dict of key to [entries].
    read = r.xread({s: "1-1", other: "0"})
    if protocol == 3:
        assert list(read) == [s], read
        assert [e[0] for e in read[s][0]] == ["1-2", auto], read
    else:
        assert read == [[s, [("1-2", {"temp": "22"}), (auto, {"temp": "23"})]]], read
    assert r.xread({s: "$"}) in ([], {}, None)

    # xread with block: wakes for an entry added by another client.
    got = {}

    def reader():
        rr = redis.Redis(port=port, protocol=protocol, decode_responses=True, socket_timeout=20)
        started = time.monotonic()
        got["read"] = rr.xread({other: "$"}, block=10_000)
        got["waited"] = time.monotonic() - started

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.3)
    added = r.xadd(other, {"hello": "world"})
    t.join(15)
    assert not t.is_alive(), "a blocked xread did not wake"
    read = got["read"]
    if protocol == 3:
        assert read == {other: [[(added, {"hello": "world"})]]}, read
    else:
        assert read == [[other, [(added, {"hello": "world"})]]], read
    assert got["waited"] < 5, got
    started = time.monotonic()
    assert r.xread({other: "$"}, block=150) in ([], {}, None)
    assert time.monotonic() - started >= 0.14

    # xlen, xtrim, xdel, xinfo_stream.
    assert r.xlen(s) == 3
    assert r.xtrim(s, maxlen=2, approximate=False) == 1
    assert r.xlen(s) == 2
    m = k + "minid"
    for i in (1, 2, 3):
        r.xadd(m, {"n": str(i)}, id=f"{i}-1")
    assert r.xtrim(m, minid="2") == 1
    assert [e[0] for e in r.xrange(m)] == ["2-1", "3-1"]
    assert r.xadd(m, {"n": "4"}, id="4-1", maxlen=2, approximate=True) == "4-1"
    assert [e[0] for e in r.xrange(m)] == ["3-1", "4-1"], "~ trims exactly in Firn"
    assert r.xdel(s, "1-2", "9-9") == 1
    info = r.xinfo_stream(s)
    assert info["length"] == 1, info
    assert info["last-generated-id"] == auto, info
    assert info["max-deleted-entry-id"] == "1-2", info
    assert info["entries-added"] == 3, info
    assert info["first-entry"] == (auto, {"temp": "23"}), info
    assert info["last-entry"] == (auto, {"temp": "23"}), info
    try:
        r.xinfo_stream(k + "nostream")
        raise AssertionError("xinfo of a missing stream answered")
    except redis.ResponseError as e:
        assert "no such key" in str(e), e

    # The connection goes on after errors.
    assert r.ping()


if __name__ == "__main__":
    sys.exit(harness.run("test_streams", check_protocol))
