"""A node with users (`firn serve --users`, the repository's tests/fixtures/users.toml):
the client signs in with a user name and password over RESP and a bearer token over HTTP,
and refusals are typed errors."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

import firn
from conftest import Node, running_node

USERS = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "users.toml"


@pytest.fixture(scope="module")
def users_node() -> Iterator[Node]:
    with running_node("--users", str(USERS), ready=False) as n:
        with n.client(username="ops", password="hunter2") as ops:
            deadline = time.monotonic() + 30
            while True:
                try:
                    ops.put("sensor/ready", "1")
                    break
                except (firn.TryAgainError, firn.ClusterDownError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        yield n


def test_a_user_signs_in_and_reaches_only_its_prefixes(users_node: Node) -> None:
    with users_node.client(username="alice", password="wonderland", token="alice-token") as alice:
        alice.put("sensor/1", "21")
        assert alice.get("sensor/1").value == b"21"
        alice.log.append("sensor/log", b"x", ["t"])
        # A watch travels over HTTP, with the bearer token.
        with alice.watch("sensor/1", from_version=1, idle_timeout_s=10) as events:
            assert next(events).version == 1
        with pytest.raises(firn.PermissionDeniedError) as refused:
            alice.put("cfg:mode", "turbo")
        assert refused.value.code == "NOPERM"
        with pytest.raises(firn.PermissionDeniedError):
            alice.log.append("other/log", b"x", ["t"])
        with pytest.raises(firn.PermissionDeniedError):
            next(iter(alice.watch("cfg:mode", idle_timeout_s=10)))
        # The client stays usable after a refusal.
        assert alice.get("sensor/1").value == b"21"


def test_missing_or_wrong_credentials_are_refused(users_node: Node) -> None:
    with users_node.client() as anonymous:
        with pytest.raises(firn.AuthError) as refused:
            anonymous.get("sensor/1")
        assert refused.value.code == "NOAUTH"
    with users_node.client(username="alice", password="nope") as wrong:
        with pytest.raises(firn.AuthError) as refused:
            wrong.get("sensor/1")
        assert refused.value.code == "WRONGPASS"
    with users_node.client(username="alice", password="wonderland", token="nope") as bad_token:
        with pytest.raises(firn.AuthError) as refused:
            next(iter(bad_token.watch("sensor/1", from_version=1, idle_timeout_s=10)))
        assert refused.value.code == "WRONGPASS"


def test_put_many_applies_every_write_the_user_may_make_and_says_which_were_refused(users_node: Node) -> None:
    with users_node.client(username="alice", password="wonderland") as alice:
        items = [("sensor/many/1", "a"), ("cfg:many", "b"), ("sensor/many/2", "c")]
        with pytest.raises(firn.PermissionDeniedError) as refused:
            alice.put_many(items)
        results = refused.value.results  # type: ignore[attr-defined]
        assert [type(r) for r in results] == [firn.WriteResult, firn.PermissionDeniedError, firn.WriteResult]
        assert [r.key for r in (results[0], results[2])] == [b"sensor/many/1", b"sensor/many/2"]
        # The writes around the refused one were applied; the refused one was not.
        assert alice.get("sensor/many/1").text == "a" and alice.get("sensor/many/2").text == "c"
    with users_node.client(username="ops", password="hunter2") as ops:
        assert ops.get("cfg:many") is None
