"""Keys that expire through redis-py, unchanged, against a running Firn node: `set(ex=, px=,
exat=, keepttl=)`, `expire` with its `nx`/`xx`/`gt`/`lt` flags, `ttl`, `pttl`,
`expiretime`, `persist`, `getex`, and a key read as gone once its time has come — over
RESP2 and RESP3.

    python3 tests/python/test_expiry.py PORT

Keys carry a random prefix, so the test can run against a node that other clients use.
"""

import os
import sys
import time

import redis

import harness


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, socket_timeout=20)
    p = f"pyttl-{os.urandom(4).hex()}-"
    a, b, c = p + "a", p + "b", p + "c"

    assert r.set(a, "v", ex=100) is True
    assert r.ttl(a) == 100
    assert 99_000 < r.pttl(a) <= 100_000
    assert r.set(a, "w", keepttl=True) is True
    assert r.ttl(a) == 100
    assert r.set(a, "x") is True
    assert r.ttl(a) == -1
    assert r.ttl(b) == -2

    assert r.set(b, "v", exat=4_000_000_000) is True
    assert r.expiretime(b) == 4_000_000_000
    assert r.expire(b, 50, gt=True) is False
    assert r.expire(b, 50, lt=True) is True
    assert r.expire(b, 60, nx=True) is False
    assert r.expire(b, 60, xx=True) is True
    assert r.persist(b) is True
    assert r.persist(b) is False
    assert r.getex(b, px=200) == b"v"
    assert 0 < r.pttl(b) <= 200

    # Gone once its time has come: GET, EXISTS and SCAN agree at once.
    assert r.set(c, "v", px=150) is True
    deadline = time.monotonic() + 3
    while r.get(c) is not None:
        assert time.monotonic() < deadline, "the key outlived its TTL by seconds"
        time.sleep(0.02)
    assert r.exists(c) == 0
    assert list(r.scan_iter(match=c)) == []

    try:
        r.set(a, "v", ex=0)
        raise AssertionError("EX 0 was taken")
    except redis.ResponseError as e:
        assert "invalid expire time in 'set' command" in str(e), e
    assert r.get(a) == b"x"


if __name__ == "__main__":
    sys.exit(harness.run("test_expiry", check_protocol))
