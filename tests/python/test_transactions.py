"""Redis transactions through redis-py, unchanged, against a running Firn node:
`pipeline(transaction=True)` and `transaction()` with WATCH (redis-py's optimistic retry
loop), over keys of different slots (different shards when the node holds several), and an
idempotency key around EXEC — over RESP2 and RESP3.

    python3 tests/python/test_transactions.py PORT

Keys carry a random prefix, so the test can run against a node that other clients use.
"""

import os
import sys
import threading

import redis
from redis.crc import key_slot

import harness


def keys_of_different_slots(prefix, n):
    """n keys whose slots fall in different thirds of the slot space (so in different
    shards of a three-shard node)."""
    found = {}
    i = 0
    while len(found) < n:
        k = f"{prefix}{i}"
        found.setdefault(key_slot(k.encode()) * 3 // 16384, k)
        i += 1
    return list(found.values())[:n]


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, socket_timeout=20)
    a, b, c = keys_of_different_slots(f"pytx-{os.urandom(4).hex()}-", 3)

    # MULTI … EXEC as a pipeline: each command's reply, in order.
    pipe = r.pipeline(transaction=True)
    pipe.set(a, 10).incrby(b, 5).get(a).mget(a, b)
    assert pipe.execute() == [True, 5, b"10", [b"10", b"5"]]

    # transaction() with WATCH: a transfer of 1 from a to b, retried by redis-py while
    # another client keeps changing a watched key.
    bumps = threading.Event()

    def interfere():
        other = redis.Redis(port=port, protocol=protocol, socket_timeout=20)
        for _ in range(3):
            other.incr(c)
        bumps.set()

    tries = []

    def transfer(p):
        tries.append(1)
        if len(tries) == 1:
            t = threading.Thread(target=interfere)
            t.start()
            t.join()
        have = int(p.get(a))
        p.multi()
        p.set(a, have - 1)
        p.incr(b)

    r.transaction(transfer, a, b, c)
    assert bumps.is_set() and len(tries) == 2, tries
    assert (int(r.get(a)), int(r.get(b))) == (9, 6)

    # A watched key changed: EXEC answers nil, redis-py raises WatchError, nothing applied.
    p = r.pipeline(transaction=True)
    p.watch(a)
    r.set(a, 100)
    p.multi()
    p.set(b, 0)
    try:
        p.execute()
        raise AssertionError("EXEC ran though a watched key changed")
    except redis.WatchError:
        pass
    assert int(r.get(b)) == 6

    # EXEC with an idempotency key: sent twice, applied once.
    for _ in range(2):
        p = r.pipeline(transaction=False)
        p.execute_command("MULTI")
        p.execute_command("INCR", a)
        p.execute_command("INCR", c)
        p.execute_command("IDMP", "pytest", f"tx-{protocol}", "EXEC")
        p.execute()
    assert int(r.get(a)) == 101 and int(r.get(c)) == 4


if __name__ == "__main__":
    sys.exit(harness.run("test_transactions", check_protocol))
