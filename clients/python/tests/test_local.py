"""The shared-memory local reader against a real node's region (the node fixture runs with
`--local-region` in a temporary folder), and its refusals on doctored copies of the file."""

from __future__ import annotations

import os
import shutil
import struct
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

import firn
from firn import CommitTs
from firn.local import (
    LayoutVersionError,
    Linearizable,
    LocalClient,
    LocalValue,
    NotARegionError,
    NotLiveRegionError,
    OtherClusterError,
    RegionReader,
    RegionRetiredError,
    RegionSizeError,
    Remote,
    RemoteReason,
    Stale,
    open_region,
)
from firn.local.layout import PROBE_MAX, entry, header, key_hash


@pytest.fixture
def local(client: firn.Client, ns: str) -> Iterator[LocalClient]:
    client.create_keyspace(ns + "loc/", local=True)
    with client.local() as lc:
        yield lc


def test_the_region_answers_as_the_node_does(client: firn.Client, local: LocalClient, ns: str) -> None:
    writes = {f"{ns}loc/{i}": f"value {i}".encode() * (i + 1) for i in range(20)}
    for k, v in writes.items():
        client.put(k, v)
    client.put(f"{ns}loc/3", b"rewritten")
    for k in writes:
        node = client.get(k)
        assert node is not None
        got = local.get(k)
        assert got.local, f"{k} was not read from the region: {got.bound}"
        assert (got.value, got.version, got.commit_ts) == (node.value, node.version, node.commit_ts)
        assert isinstance(got.bound, (Linearizable, Stale))


def test_a_single_nodes_leader_reads_under_its_lease(client: firn.Client, local: LocalClient, ns: str) -> None:
    client.put(ns + "loc/lease", "x")
    deadline = time.monotonic() + 5
    while True:
        got = local.get(ns + "loc/lease")
        if isinstance(got.bound, Linearizable) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert isinstance(got.bound, Linearizable), got.bound
    assert 0 < got.bound.lease_left_ns < 10 * 10**9


def test_a_deleted_key_reads_as_a_tombstone_with_its_version(client: firn.Client, local: LocalClient, ns: str) -> None:
    client.put(ns + "loc/d", "x")
    tomb = client.delete(ns + "loc/d")
    assert tomb is not None
    got = local.get(ns + "loc/d")
    assert got.local and got.value is None and got.version == tomb.version == 2


def test_keys_the_region_cannot_answer_are_read_from_the_node(client: firn.Client, local: LocalClient, ns: str) -> None:
    client.put(ns + "elsewhere", "not local")
    got = local.get(ns + "elsewhere")
    assert got.bound == Remote(RemoteReason.NOT_PUBLISHED) and got.value == b"not local"
    big = b"x" * 2000  # above the region's 1,024-byte entries
    client.put(ns + "loc/big", "small")
    client.put(ns + "loc/big", big)
    got = local.get(ns + "loc/big")
    assert got.bound == Remote(RemoteReason.NOT_LOCAL) and got.value == big and got.version == 2
    missing = local.get(ns + "loc/never")
    assert missing.bound == Remote(RemoteReason.NOT_PUBLISHED)
    assert (missing.value, missing.version) == (None, 0)


def test_a_read_behind_the_token_goes_remote(client: firn.Client, local: LocalClient, ns: str) -> None:
    w = client.put(ns + "loc/t", "v")
    ahead = CommitTs(w.commit_ts.wall_us + 60 * 10**6, 0)
    read = local.region.get((ns + "loc/t").encode(), after=ahead)
    assert isinstance(read, Remote) and read.reason is RemoteReason.BEHIND_TOKEN
    assert read.has is not None and w.commit_ts <= read.has < ahead
    hit = local.region.get((ns + "loc/t").encode(), after=w.commit_ts)
    assert isinstance(hit, LocalValue) and hit.value == b"v"
    # A local hit raises the client's token.
    assert local.token >= w.commit_ts


def test_a_write_through_the_client_is_seen_by_the_next_local_read(client: firn.Client, local: LocalClient, ns: str) -> None:
    for i in range(20):
        w = client.put(ns + "loc/rw", str(i))
        got = local.get(ns + "loc/rw")
        assert (got.value, got.version) == (str(i).encode(), w.version)


def _copy(node: object, tmp_path: Path) -> Path:
    dst = tmp_path / "copy.region"
    shutil.copyfile(node.region_path, dst)  # type: ignore[attr-defined]
    return dst


def _set_word(path: Path, word: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(word * 8)
        f.write(struct.pack("<Q", value))


def test_a_region_of_another_cluster_is_refused(node: object, local: LocalClient, tmp_path: Path) -> None:
    copy = _copy(node, tmp_path)
    expected = local.info.cluster_id
    with RegionReader.open(str(copy), expect_cluster=expected) as same:
        assert same.header().cluster_id == expected
    # The cluster id is a seqlocked run: sequence, then two words.
    _set_word(copy, header.CLUSTER + 1, 0x0123456789ABCDEF)
    with pytest.raises(OtherClusterError) as e:
        RegionReader.open(str(copy), expect_cluster=expected)
    assert e.value.expected == expected and e.value.found.startswith("0123456789abcdef")
    with pytest.raises(OtherClusterError):
        open_region(replace(local.info, path=str(copy)))


def test_a_region_of_another_layout_size_or_run_is_refused(node: object, local: LocalClient, tmp_path: Path) -> None:
    copy = _copy(node, tmp_path)
    _set_word(copy, header.VERSION, 2)
    with pytest.raises(LayoutVersionError) as e:
        RegionReader.open(str(copy))
    assert (e.value.found, e.value.expected) == (2, 1)

    copy = _copy(node, tmp_path)
    _set_word(copy, header.MAGIC, 0)
    with pytest.raises(NotARegionError):
        RegionReader.open(str(copy))

    copy = _copy(node, tmp_path)
    with open(copy, "r+b") as f:
        f.truncate(os.path.getsize(copy) - 4096)
    with pytest.raises(RegionSizeError):
        RegionReader.open(str(copy))

    copy = _copy(node, tmp_path)
    _set_word(copy, header.RETIRED, 1)
    with pytest.raises(RegionRetiredError):
        RegionReader.open(str(copy))

    with pytest.raises(NotLiveRegionError):
        open_region(replace(local.info, incarnation=local.info.incarnation + 1))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(NotARegionError):
        RegionReader.open(str(empty))
    with pytest.raises(firn.RegionError, match="is the node on this host"):
        open_region(replace(local.info, path=str(tmp_path / "missing")))


def test_an_entry_that_stays_mid_write_reads_as_contended(client: firn.Client, node: object, local: LocalClient, ns: str, tmp_path: Path) -> None:
    key = (ns + "loc/busy").encode()
    client.put(key, "v")
    copy = _copy(node, tmp_path)
    with RegionReader.open(str(copy)) as reader:
        hit = reader.get(key)
        assert isinstance(hit, LocalValue) and hit.value == b"v"
        cfg = reader.config
        # Find the key's entry the way the writer placed it: its hash, then linear probing.
        h = key_hash(key)
        for i in range(PROBE_MAX):
            at = cfg.entry_at((h + i) % cfg.entries)
            with open(copy, "rb") as f:
                f.seek((at + entry.HASH) * 8)
                if struct.unpack("<Q", f.read(8))[0] == h:
                    break
        else:
            pytest.fail("the key's entry is not within its probe window")
        with open(copy, "rb") as f:
            f.seek(at * 8)
            seq = struct.unpack("<Q", f.read(8))[0]
        assert seq % 2 == 0
    # A writer that made the sequence odd and never finished: no copy is kept.
    _set_word(copy, at, seq + 1)
    with RegionReader.open(str(copy)) as reader:
        assert reader.get(key) == Remote(RemoteReason.CONTENDED)


def test_reads_racing_the_nodes_writes_keep_versions_and_values_together(node: object, local: LocalClient, ns: str) -> None:
    """A writer rewrites one key while this process reads it from the region: every value
    read is the one its version was written with (each version's value differs in every
    byte), and versions never go back. (The node writes an entry in well under a
    microsecond, so a Python reader rarely lands mid-write: the next test forces that.)"""
    key = ns + "loc/race"

    def value_of(version: int) -> bytes:
        return bytes([version % 251]) * 1000

    stop = threading.Event()
    written = []

    def write() -> None:
        with node.client() as c:  # type: ignore[attr-defined]
            while not stop.is_set() and len(written) < 400:
                w = c.put(key, value_of(len(written) + 1))
                written.append(w.version)

    t = threading.Thread(target=write)
    t.start()
    hits = 0
    last = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline and t.is_alive():
            read = local.region.get(key.encode())
            if isinstance(read, LocalValue):
                hits += 1
                assert read.value == value_of(read.version), f"torn copy at version {read.version}"
                assert read.version >= last
                last = read.version
    finally:
        stop.set()
        t.join(10)
    assert hits > 0 and len(written) > 10


def test_the_seqlock_keeps_no_torn_copy_of_an_entry_rewritten_under_it(
    client: firn.Client, node: object, ns: str, tmp_path: Path
) -> None:
    """The reader's seqlock against a writer that follows the Rust writer's protocol (odd,
    data, even) on a copy of the region, with thread switches forced between almost every
    bytecode: a copy is kept only when version and value belong together. (The node's own
    writes are too quick for a Python reader to catch mid-write; this writer is not.)"""
    key = (ns + "loc/torn").encode()
    client.create_keyspace(ns + "loc/", local=True)
    client.put(key, bytes([1]) * 64)
    copy = _copy(node, tmp_path)
    with RegionReader.open(str(copy)) as reader:
        assert isinstance(reader.get(key), LocalValue)
        at = _entry_of(reader, copy, key)
        cfg = reader.config
    value_at = at + entry.FIXED_WORDS + cfg.key_bytes_max // 8

    import mmap

    stop = threading.Event()
    with open(copy, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        words = memoryview(m).cast("Q")

        def write() -> None:
            n = 1
            while not stop.is_set():
                n += 1
                seq = words[at]
                words[at] = seq + 1  # odd: a write is under way
                words[at + entry.VERSION] = n
                for i in range(8):  # 64 bytes, a word at a time
                    words[value_at + i] = int.from_bytes(bytes([n % 251]) * 8, "little")
                words[at] = seq + 2

        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        t = threading.Thread(target=write)
        t.start()
        kept = 0
        try:
            with RegionReader.open(str(copy)) as reader:
                deadline = time.monotonic() + 1.5
                while time.monotonic() < deadline:
                    read = reader.get(key)
                    if isinstance(read, LocalValue):
                        kept += 1
                        assert read.value == bytes([read.version % 251]) * 64, f"torn copy at version {read.version}"
        finally:
            stop.set()
            t.join(10)
            sys.setswitchinterval(previous)
            del words
    assert kept > 0


def _entry_of(reader: RegionReader, path: Path, key: bytes) -> int:
    """The word index of ``key``'s entry, found as the writer placed it (hash, then probing)."""
    cfg = reader.config
    h = key_hash(key)
    with open(path, "rb") as f:
        for i in range(PROBE_MAX):
            at = cfg.entry_at((h + i) % cfg.entries)
            f.seek((at + entry.HASH) * 8)
            if struct.unpack("<Q", f.read(8))[0] == h:
                return at
    pytest.fail("the key's entry is not within its probe window")
