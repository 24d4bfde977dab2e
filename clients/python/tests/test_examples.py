"""The examples/ scripts and the README's Python blocks run against the node and print
what they say they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent
EXAMPLES = HERE / "examples"


def run_example(node: object, name: str) -> str:
    env = {**os.environ, "FIRN_ADDR": node.resp_addr, "FIRN_HTTP_ADDR": node.http_addr}  # type: ignore[attr-defined]
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_example_is_tested() -> None:
    tested = {n[len("test_example_"):] + ".py" for n in globals() if n.startswith("test_example_")}
    assert tested == {p.name for p in EXAMPLES.glob("*.py")}


def test_example_quickstart(node: object) -> None:
    out = run_example(node, "quickstart.py")
    assert "wrote versions 1 2" in out
    assert "now: 22.0 version 2" in out
    assert "version 1: 21.5" in out and "as of the first commit: 21.5" in out
    assert "by event time 10:03: 21.5" in out
    assert "conflict: the current version is 2" in out
    assert "history: 3 deleted" in out


def test_example_snapshot(node: object) -> None:
    out = run_example(node, "snapshot.py")
    assert re.search(r"room/1 on\n.*room/2 off\n", out)
    assert "same cut again: on" in out
    assert "room/1': 'off'" in out


def test_example_watch(node: object) -> None:
    lines = run_example(node, "watch.py").splitlines()
    assert [l.split()[0] + " " + l.split()[2] for l in lines] == ["put v1", "put v2", "del v3"]
    assert lines[1].endswith("20.5")


def test_example_log_and_groups(node: object) -> None:
    out = run_example(node, "log_and_groups.py")
    assert re.search(r"log: \S+ \['eu', 'paid'\] order 19\nlog: \S+ \['eu'\] order 20\n", out)
    assert re.search(r"consumed: \S+ book\nconsumed: \S+ lamp\n", out)
    assert "pending after acks: 0" in out


def test_example_local_reads(node: object) -> None:
    out = run_example(node, "local_reads.py")
    assert re.search(r"^1 b'21.5' version 1 from the region", out, re.M)
    assert re.search(r"^2 None version 0 from the node \(not_published\)", out, re.M)


def test_example_tokens(node: object) -> None:
    out = run_example(node, "tokens.py")
    assert "bob reads: 3 items" in out
    assert "bob's token is at least alice's: True" in out


def readme_blocks() -> list:
    text = (HERE / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_python_blocks_run(node: object, index: int, tmp_path: Path) -> None:
    code = readme_blocks()[index]
    code = code.replace("127.0.0.1:7379", node.resp_addr).replace("127.0.0.1:7380", node.http_addr)  # type: ignore[attr-defined]
    script = tmp_path / f"readme_{index}.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"README block {index} failed:\n{code}\n{done.stdout}\n{done.stderr}"
