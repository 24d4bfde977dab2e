"""A real `firn` node for the tests: `firn serve --in-memory` on free ports with a small
shared-memory region in a temporary folder, started once per test session and stopped by
its PID. The binary is $FIRN_BIN, else $CARGO_TARGET_DIR/debug/firn (CARGO_TARGET_DIR
defaults to ~/.cache/firn-target). Every test is bounded: it fails after TEST_SECONDS_MAX."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import firn

TEST_SECONDS_MAX = 60
START_SECONDS_MAX = 30
SERVING = re.compile(r"^firn serving: redis-cli -p (\d+)[^|]*\|\s+curl [^|]*?https?://([0-9.]+):(\d+)/")


def firn_bin() -> Path:
    if os.environ.get("FIRN_BIN"):
        return Path(os.environ["FIRN_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "firn-target")
    return Path(target) / "debug" / "firn"


@dataclass
class Node:
    pid: int
    resp_addr: str
    http_addr: str
    region_path: str

    def client(self, **kwargs: object) -> firn.Client:
        return firn.Client(self.resp_addr, self.http_addr, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def running_node(*extra: str, ready: bool = True) -> Iterator[Node]:
    """`firn serve --in-memory EXTRA…` on free ports until the block ends (stopped by its
    PID, also when a test failed); with `ready`, once it takes a write."""
    binary = firn_bin()
    if not binary.exists():
        pytest.fail(f"no firn binary at {binary}: build it (cargo build -p firn) or set FIRN_BIN")
    with tempfile.TemporaryDirectory(prefix="firn-py-") as tmp:
        region = os.path.join(tmp, "local.region")
        log_path = os.path.join(tmp, "firn.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    str(binary), "serve", "--in-memory",
                    "--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0",
                    "--local-region", region, "--local-entries", "1024", *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NO_COLOR": "1"},
            )
        try:
            deadline = time.monotonic() + START_SECONDS_MAX
            found = None
            while found is None:
                if proc.poll() is not None:
                    pytest.fail(f"firn exited with {proc.returncode}:\n{Path(log_path).read_text(errors='replace')}")
                if time.monotonic() > deadline:
                    pytest.fail(f"firn did not start within {START_SECONDS_MAX} s:\n{Path(log_path).read_text(errors='replace')}")
                for line in Path(log_path).read_text(errors="replace").splitlines():
                    m = SERVING.match(line)
                    if m:
                        found = m
                time.sleep(0.1)
            n = Node(proc.pid, f"127.0.0.1:{found.group(1)}", f"{found.group(2)}:{found.group(3)}", region)
            if ready:
                _wait_ready(n, deadline)
            yield n
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    with running_node() as n:
        yield n


def _wait_ready(node: Node, deadline: float) -> None:
    """Until the node takes a write (its shard has a leader)."""
    with node.client(timeout_s=5) as c:
        while True:
            try:
                c.put("firn-py/ready", "1")
                return
            except (firn.TryAgainError, firn.ClusterDownError, firn.FirnConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@pytest.fixture
def client(node: Node) -> Iterator[firn.Client]:
    with node.client(timeout_s=10) as c:
        yield c


@pytest.fixture
def ns() -> str:
    """A fresh key prefix per test, so tests sharing the node do not see each other."""
    return f"t{uuid.uuid4().hex[:10]}/"


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """Fails a test that runs longer than TEST_SECONDS_MAX (SIGALRM; main thread)."""
    if sys.platform == "win32":  # pragma: no cover
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the test ran past {TEST_SECONDS_MAX} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_SECONDS_MAX)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
