"""Device twins against a real node: patches of the desired and reported documents, the
delta at one time, now and in the past, and patches that are not objects refused."""

from __future__ import annotations

import pytest

import firn


def test_a_twin_is_patched_and_read_with_its_delta(client: firn.Client, ns: str) -> None:
    name = ns + "pumps/p1"
    empty = client.twin(name)
    assert (empty.desired, empty.reported, empty.delta) == ({}, {}, {})
    assert empty.desired_version is None

    w = client.twin_desire(name, {"rpm": 1200, "valve": "open", "fw": {"version": "2.1"}})
    assert (w.key, w.version) == ((name + "/desired").encode(), 1)
    client.twin_report(name, {"rpm": 900, "valve": "open", "fw": {"version": "2.0"}, "up": 5})
    before = client.twin(name)
    assert before.delta == {"rpm": 1200, "fw": {"version": "2.1"}}
    assert before.reported["up"] == 5 and before.reported_version.version == 1

    client.twin_report(name, {"rpm": 1200.0, "fw": {"version": "2.1"}})
    now = client.twin(name)
    assert now.delta == {}
    assert now.reported == {"rpm": 1200.0, "valve": "open", "fw": {"version": "2.1"}, "up": 5}
    # As of the earlier read, as it was then; the documents are plain keys.
    assert client.twin(name, at=before.at).delta == before.delta
    client.twin_desire(name, {"fw": None})
    assert client.get(name + "/desired").text == '{"rpm":1200,"valve":"open"}'


def test_bad_twin_patches_are_refused_and_change_nothing(client: firn.Client, ns: str) -> None:
    name = ns + "pumps/p2"
    client.twin_desire(name, {"a": 1})
    with pytest.raises(TypeError):
        client.twin_desire(name, [1, 2])  # type: ignore[arg-type]
    client.put(ns + "pumps/p3/desired", "not json")
    with pytest.raises(firn.FirnError, match="not a twin document"):
        client.twin(ns + "pumps/p3")
    with pytest.raises(firn.FirnError, match="not a twin document"):
        client.twin_desire(ns + "pumps/p3", {"a": 1})
    assert client.get(ns + "pumps/p3/desired").version == 1
    assert client.twin(name).desired_version.version == 1
