"""Publish/subscribe against a running Firn node through redis-py, unchanged: pubsub()
with subscribe, psubscribe, get_message, unsubscribe and punsubscribe, and publish, over
RESP2 and RESP3.

    python3 tests/python/test_pubsub.py PORT

Exits non-zero on the first failed check. Channels carry a random prefix, so the test can
run against a node that other clients use.
"""

import os
import sys
import time

import redis

import harness


def next_message(p, timeout=5.0):
    """The next message (subscription confirmations included), or fail after `timeout`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(timeout=0.2)
        if m is not None:
            return m
    raise AssertionError("no message within %.1f s" % timeout)


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, decode_responses=True, socket_timeout=20)
    k = f"pytest:{os.urandom(4).hex()}:{protocol}:"
    news, tech, other = k + "news", k + "news.tech", k + "other"

    p = r.pubsub()
    p.subscribe(news)
    m = next_message(p)
    assert m["type"] == "subscribe" and m["channel"] == news and m["data"] == 1, m
    p.psubscribe(k + "news.*")
    m = next_message(p)
    assert m["type"] == "psubscribe" and m["channel"] == k + "news.*" and m["data"] == 2, m

    # Publish answers the receivers; each gets the message as Redis sends it.
    assert r.publish(news, "hello") == 1
    m = next_message(p)
    assert m == {"type": "message", "pattern": None, "channel": news, "data": "hello"}, m
    assert r.publish(tech, "rust") == 1
    m = next_message(p)
    assert m == {
        "type": "pmessage",
        "pattern": k + "news.*",
        "channel": tech,
        "data": "rust",
    }, m
    assert r.publish(other, "nobody") == 0

    # PUBSUB, for this node.
    assert news in r.pubsub_channels(k + "*"), r.pubsub_channels(k + "*")
    assert r.pubsub_numsub(news, other) == [(news, 1), (other, 0)], r.pubsub_numsub(news, other)
    assert r.pubsub_numpat() >= 1

    # Leaving: confirmations with the counts left; then no more messages.
    p.unsubscribe(news)
    m = next_message(p)
    assert m["type"] == "unsubscribe" and m["channel"] == news and m["data"] == 1, m
    p.punsubscribe()
    m = next_message(p)
    assert m["type"] == "punsubscribe" and m["data"] == 0, m
    assert r.publish(news, "gone") == 0
    assert p.get_message(timeout=0.3) is None
    p.close()

    # A second subscriber on the same channel: both counted, both receive.
    a, b = r.pubsub(), r.pubsub()
    a.subscribe(news)
    b.subscribe(news)
    next_message(a)
    next_message(b)
    assert r.publish(news, "both") == 2
    assert next_message(a)["data"] == "both"
    assert next_message(b)["data"] == "both"
    a.close()
    b.close()

    assert r.ping()


if __name__ == "__main__":
    sys.exit(harness.run("test_pubsub", check_protocol))
