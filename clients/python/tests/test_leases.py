"""Leases, locks and elections: a lease's keys go when it is revoked or runs out and stay
while it is kept alive; a lock held by a process killed with SIGKILL passes to a waiter once
its TTL has run out, with a greater fencing token; an election hands over when its leader
resigns or its lease ends; an unknown lease raises LeaseNotFoundError and the connection
serves on. The first tests need no node: the keepalive thread against a stand-in client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, List, Optional

import pytest

import firn
from firn.concurrency import LEASE_ENDED, LEASE_UNANSWERED

# -- the keepalive thread, against a stand-in client -------------------------------------


class StandIn:
    """Answers lease calls as a node would: keeps lease 7 alive ``keepalives`` times, then
    raises ``then`` for each keepalive."""

    producer = "stand-in"

    def __init__(self, keepalives: int, then: Exception) -> None:
        self.keepalives = keepalives
        self.then = then
        self.calls: List[str] = []

    def lease_grant(self, ttl_s: Any) -> int:
        self.calls.append("grant")
        return 7

    def lease_keepalive(self, lease: int) -> int:
        self.calls.append("keepalive")
        if self.calls.count("keepalive") <= self.keepalives:
            return 1
        raise self.then

    def lease_revoke(self, lease: int) -> None:
        self.calls.append("revoke")


def test_a_lease_is_kept_alive_until_the_node_no_longer_knows_it() -> None:
    standin = StandIn(3, firn.LeaseNotFoundError("lease not found: 7"))
    started = time.monotonic()
    lease = firn.Lease(standin, 1)  # type: ignore[arg-type]
    assert (lease.id, lease.ttl_s, lease.loss) == (7, 1, None)
    assert lease.wait_lost(5) == LEASE_ENDED
    assert time.monotonic() - started >= 1.0  # three keepalives a third of the TTL apart
    assert standin.calls.count("keepalive") == 4
    lease.revoke()
    assert standin.calls[-1] == "revoke"


def test_a_lease_whose_keepalives_go_unanswered_is_lost_within_its_ttl() -> None:
    standin = StandIn(1, firn.FirnConnectionError("the node went away"))
    lease = firn.Lease(standin, 1)  # type: ignore[arg-type]
    started = time.monotonic()
    assert lease.wait_lost(3) == LEASE_UNANSWERED
    assert time.monotonic() - started < 2.5
    lease.close()


def test_a_closed_lease_sends_no_more_keepalives() -> None:
    standin = StandIn(1000, firn.FirnConnectionError("unused"))
    lease = firn.Lease(standin, 1)  # type: ignore[arg-type]
    lease.close()
    sent = standin.calls.count("keepalive")
    time.sleep(0.8)
    assert standin.calls.count("keepalive") == sent and lease.loss is None


def test_a_lease_ttl_is_whole_seconds_from_1_to_a_year() -> None:
    from firn.client import lease_ttl_s

    assert (lease_ttl_s(1), lease_ttl_s(1.5), lease_ttl_s(31_536_000)) == (1, 2, 31_536_000)
    for bad in (0, 0.5, 31_536_001, -3):
        with pytest.raises(ValueError, match="1 to 31536000 s"):
            lease_ttl_s(bad)
    with pytest.raises(TypeError):
        lease_ttl_s("10")  # type: ignore[arg-type]


def test_lease_not_found_from_the_node_is_its_own_request_error() -> None:
    e = firn.errors.error_from_resp("ERR lease not found: 42")
    assert isinstance(e, firn.LeaseNotFoundError) and isinstance(e, firn.RequestError)
    assert not isinstance(firn.errors.error_from_resp("ERR invalid lease TTL 0"), firn.LeaseNotFoundError)


# -- against a node ----------------------------------------------------------------------


def test_a_revoked_lease_deletes_its_keys_and_their_versions_keep_growing(client: firn.Client, ns: str) -> None:
    lease = client.lease_grant(30)
    assert lease > 0 and 25 < client.lease_ttl(lease) <= 30
    assert client.lease_keepalive(lease) == 30
    w = client.put(ns + "a", "v", lease=lease)
    client.put(ns + "b", "v", lease=lease)
    client.put(ns + "kept", "v")
    client.lease_revoke(lease)
    assert client.get(ns + "a") is None and client.get(ns + "b") is None
    assert client.get(ns + "kept") is not None
    ends = [client.history(ns + k)[-1] for k in ("a", "b")]
    assert all(e.deleted for e in ends) and ends[0].commit_ts == ends[1].commit_ts
    assert client.put(ns + "a", "w").version > w.version + 1


def test_a_lease_not_kept_alive_ends_after_its_ttl_and_a_kept_one_lives_on(client: firn.Client, ns: str) -> None:
    bare = client.lease_grant(1)
    client.put(ns + "bare", "v", lease=bare)
    with firn.Lease(client, 1) as kept:
        client.put(ns + "kept", "v", lease=kept.id)
        time.sleep(3)
        assert client.get(ns + "bare") is None, "the key outlived its lease"
        assert client.get(ns + "kept") is not None and kept.loss is None
        assert 0 < client.lease_ttl(kept.id) <= 1
    assert client.get(ns + "kept") is None  # revoked on leaving the block
    with pytest.raises(firn.LeaseNotFoundError):
        client.lease_keepalive(bare)


def test_an_unknown_lease_raises_lease_not_found_and_the_connection_serves_on(client: firn.Client, ns: str) -> None:
    ended = client.lease_grant(5)
    client.lease_revoke(ended)
    for lease in (ended, 7_654_321):
        for call in (client.lease_keepalive, client.lease_revoke, client.lease_ttl):
            with pytest.raises(firn.LeaseNotFoundError) as e:
                call(lease)
            assert e.value.lease == lease
        with pytest.raises(firn.LeaseNotFoundError):
            client.put(ns + "k", "v", lease=lease)
    assert client.get(ns + "k") is None
    with pytest.raises(ValueError):
        client.lease_grant(0)
    with pytest.raises(firn.RequestError, match="lease"):
        client._session.call("FIRN.LEASE", "GRANT", "0")
    assert client.put(ns + "after", "v").version == 1


HOLDER = """
import sys, time
sys.path.insert(0, {path!r})
import firn
client = firn.Client({addr!r}, {http!r})
lock = firn.Lock(client, {name!r}, ttl_s={ttl})
lock.acquire()
print("token", lock.token, flush=True)
time.sleep(60)
"""


def start_holder(node: Any, name: str, ttl: int) -> "tuple[subprocess.Popen[str], int]":
    """A process of its own that takes the lock ``name``, and the token it printed."""
    source = Path(firn.__file__).resolve().parent.parent
    code = HOLDER.format(path=str(source), addr=node.resp_addr, http=node.http_addr, name=name, ttl=ttl)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
    got: List[str] = []
    reader = threading.Thread(target=lambda: got.append(holder.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(30)
    if not got or not got[0].startswith("token "):
        holder.kill()
        pytest.fail(f"the holder did not take the lock within 30 s: {got}")
    return holder, int(got[0].split()[1])


def test_a_lock_whose_holder_is_killed_passes_to_a_waiter_after_its_ttl_with_a_greater_token(
    node: Any, client: firn.Client, ns: str
) -> None:
    ttl = 2
    holder, first_token = start_holder(node, ns + "lock", ttl)
    try:
        lock = firn.Lock(client, ns + "lock", ttl_s=ttl)
        taken: List[float] = []
        waiter = threading.Thread(target=lambda: lock.acquire(timeout_s=30) and taken.append(time.monotonic()))
        waiter.start()
        waiter.join(2 * ttl)  # the holder keeps its lease alive: the waiter waits past two TTLs
        assert not taken, "the waiter took the lock from a live holder"
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        holder.wait(10)
        waiter.join(ttl + 5)
        assert taken, "the waiter did not take the lock within the TTL and 5 s of the kill"
        waited = taken[0] - killed
        assert ttl / 3 <= waited <= ttl + 3, f"taken {waited:.2f} s after the kill"
        assert lock.token is not None and lock.token > first_token
        assert client.get(ns + "lock").text == lock.holder
        lock.release()
        assert client.get(ns + "lock") is None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


def test_a_held_lock_is_refused_and_a_released_one_taken_with_a_greater_token(node: Any, ns: str) -> None:
    with node.client() as a, node.client() as b:
        with firn.Lock(a, ns + "lock", ttl_s=5) as first:
            other = firn.Lock(b, ns + "lock", ttl_s=5)
            assert not other.acquire(timeout_s=0)
            assert not other.acquire(timeout_s=0.5) and other.token is None
            first_token = first.token
        assert other.acquire(timeout_s=2)
        assert other.token is not None and first_token is not None and other.token > first_token
        other.release()


def test_a_resigned_leader_hands_over_to_the_waiting_candidate(node: Any, ns: str) -> None:
    with node.client() as a, node.client() as b:
        ea, eb = firn.Election(a, ns + "leader", ttl_s=10), firn.Election(b, ns + "leader", ttl_s=10)
        assert ea.leader() is None
        assert ea.campaign("a") and ea.is_leader
        led: List[bool] = []
        waiting = threading.Thread(target=lambda: led.append(eb.campaign("b", timeout_s=20)))
        waiting.start()
        ea.proclaim("a, again")
        now = eb.leader()
        assert now is not None and now.text == "a, again" and ea.term is not None and now.version > ea.term
        waiting.join(0.5)
        assert not led, "two leaders at once"
        ea.resign()
        waiting.join(3)
        assert led == [True], "the candidate leads at once after a resignation, not after the TTL"
        assert eb.term is not None and eb.term > now.version
        assert ea.leader().text == "b"  # type: ignore[union-attr]
        eb.resign()
        assert ea.leader() is None


def test_a_leader_whose_lease_ends_learns_it_and_can_proclaim_no_more(node: Any, ns: str) -> None:
    with node.client() as a, node.client() as b:
        ea = firn.Election(a, ns + "leader", ttl_s=10)
        assert ea.campaign("a")
        assert ea.lease is not None
        b.lease_revoke(ea.lease.id)  # as its TTL running out would
        assert ea.lease.wait_lost(10) == LEASE_ENDED and not ea.is_leader
        eb = firn.Election(b, ns + "leader", ttl_s=10)
        assert eb.campaign("b", timeout_s=5)
        with pytest.raises((firn.ConflictError, firn.LeaseNotFoundError)):
            ea.proclaim("a, still?")
        assert eb.leader().text == "b"  # type: ignore[union-attr]
        eb.resign()
