"""A node started with TLS required (`--tls-cert`, `--tls-key`, `--tls-required`; a CA and a
certificate for 127.0.0.1 made here with the `openssl` command): the client speaks TLS on
both RESP and HTTP with ``tls_ca``, and plain text is refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Tuple

import pytest

import firn
from conftest import Node, running_node


def make_certificates(folder: Path) -> Tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for IP 127.0.0.1 with its key."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)

    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "2", "-subj", "/CN=firn test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return ca, cert, key


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Node, Path]]:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test's certificates")
    ca, cert, key = make_certificates(tmp_path_factory.mktemp("tls"))
    with running_node("--tls-cert", str(cert), "--tls-key", str(key), "--tls-required", ready=False) as n:
        yield n, ca


def test_the_client_speaks_tls_on_resp_and_http(tls_node: Tuple[Node, Path]) -> None:
    node, ca = tls_node
    with node.client(tls_ca=str(ca)) as c:
        c.put("tls/1", "over TLS")
        assert c.get("tls/1").value == b"over TLS"
        # A watch is an HTTP stream: HTTPS here.
        with c.watch("tls/1", from_version=1, idle_timeout_s=10) as events:
            assert next(events).value == b"over TLS"


def test_plain_text_is_refused_where_tls_is_required(tls_node: Tuple[Node, Path]) -> None:
    node, _ = tls_node
    with node.client(timeout_s=5) as plain:
        # The node answers `-ERR TLS is required…` and closes; redis-py reads that line for its
        # own hello (CLIENT SETINFO, whose errors it drops), so the command meets the close.
        with pytest.raises(firn.FirnConnectionError):
            plain.get("tls/1")
