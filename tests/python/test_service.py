"""Request/response against a running Firn node through redis-py, unchanged: FIRN.REQUEST
answered by a worker thread's FIRN.SERVE + FIRN.REPLY, by the example worker
(examples/echo-worker/worker.py, so it stays runnable), TIMEOUT with no worker, a duplicate
reply dropped, and bad input refused — over RESP2 and RESP3.

    python3 tests/python/test_service.py PORT

Services carry a random name, so the test can run against a node that other clients use.
"""

import os
import subprocess
import sys
import threading

import redis

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_protocol(port, protocol):
    r = redis.Redis(port=port, protocol=protocol, socket_timeout=20)
    svc = f"pytest-{os.urandom(4).hex()}-{protocol}"

    # A worker on its own connection, answering twice (the second reply is dropped).
    seen = {}

    def worker():
        w = redis.Redis(port=port, protocol=protocol, socket_timeout=20)
        request_id, payload, key = w.execute_command("FIRN.SERVE", svc, "BLOCK", 10000)
        seen["key"] = key
        seen["first"] = w.execute_command("FIRN.REPLY", request_id, b"re:" + payload)
        seen["second"] = w.execute_command("FIRN.REPLY", request_id, b"again")

    t = threading.Thread(target=worker)
    t.start()
    answer = r.execute_command("FIRN.REQUEST", svc, b"hi \x00", "KEY", "k1", "TIMEOUT", 10000)
    t.join(20)
    assert answer == b"re:hi \x00", answer
    assert seen == {"key": b"k1", "first": 1, "second": 0}, seen
    assert r.xlen(f"firn.svc:{{{svc}}}") == 0

    # The example worker serves two requests and exits.
    example = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "examples/echo-worker/worker.py"),
         "--port", str(port), "--service", svc + "-ex", "--upper", "--count", "2"])
    try:
        for word in (b"one", b"two"):
            got = r.execute_command("FIRN.REQUEST", svc + "-ex", word, "TIMEOUT", 10000)
            assert got == word.upper(), got
        assert example.wait(timeout=20) == 0
    finally:
        if example.poll() is None:
            example.kill()
            example.wait()

    # No worker: TIMEOUT.
    try:
        r.execute_command("FIRN.REQUEST", svc + "-none", "x", "TIMEOUT", 200)
        raise AssertionError("FIRN.REQUEST without a worker answered")
    except redis.ResponseError as e:
        assert f"no reply from service '{svc}-none' within 200 ms" in str(e), str(e)

    # Bad input: refused, and the connection goes on.
    for args in (("FIRN.REQUEST", svc, "x", "TIMEOUT", 0),
                 ("FIRN.SERVE", svc, "POLICY", "random"),
                 ("FIRN.REPLY", "not-an-id", "x")):
        try:
            r.execute_command(*args)
            raise AssertionError(f"{args} was accepted")
        except redis.ResponseError:
            pass
    assert r.ping()


if __name__ == "__main__":
    sys.exit(harness.run("test_service", check_protocol))
