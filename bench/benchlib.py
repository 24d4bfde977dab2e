"""Shared pieces of the benchmark scripts: ports, the Firn release build, a local Firn
cluster, redis-benchmark runs. Every process started here is stopped by its owner."""

import csv
import io
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/firn-target"))


_next_port = itertools.count()


def free_ports(n):
    """n ports that are free now, below the kernel's ephemeral range (32768 and up by
    default): a port picked there can be taken by an outgoing connection before the server
    started on it binds it."""
    ports = []
    while len(ports) < n:
        port = 20_000 + (os.getpid() * 1_009 + next(_next_port)) % 12_000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def http_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.load(r)


def build_firn():
    """The release `firn` of this tree, built if needed; `FIRN_BIN` names another binary
    instead (to compare two builds back to back)."""
    if os.environ.get("FIRN_BIN"):
        return os.environ["FIRN_BIN"]
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "firn"], cwd=ROOT, check=True,
                   env={**os.environ, "CARGO_TARGET_DIR": TARGET})
    return os.path.join(TARGET, "release", "firn")


def stop(proc, timeout=10):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class FirnCluster:
    """N `firn serve` processes on 127.0.0.1 (disk durability), formed with --peers."""

    def __init__(self, binary, n=3, extra=()):
        self.binary, self.n, self.extra = binary, n, list(extra)
        self.dir = tempfile.mkdtemp(prefix="firn-bench-")
        ports = free_ports(3 * n)
        self.ports = [tuple(ports[3 * i:3 * i + 3]) for i in range(n)]
        self.peers = ",".join(f"{i + 1}=127.0.0.1:{self.ports[i][2]}" for i in range(n))
        self.procs = [None] * n
        for i in range(n):
            self.start(i)
        for i in range(n):
            self.wait_leaders(i)

    def start(self, i):
        resp, http, peer = self.ports[i]
        self.procs[i] = subprocess.Popen(
            [self.binary, "serve", "--node-id", str(i + 1), "--peers", self.peers,
             "--resp-addr", f"127.0.0.1:{resp}", "--http-addr", f"127.0.0.1:{http}", "--peer-addr", f"127.0.0.1:{peer}",
             "--data-dir", os.path.join(self.dir, f"node{i + 1}"), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})

    def resp_port(self, i=0):
        return self.ports[i][0]

    def leaders(self, i):
        try:
            return [s["leader"] for s in http_json(self.ports[i][1], "/v1/cluster")["shards"]]
        except Exception:
            return []

    def wait_leaders(self, i, not_node=None, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            l = self.leaders(i)
            if l and all(x is not None and x != not_node for x in l):
                return l
            time.sleep(0.02)
        sys.exit(f"node {i + 1}: no leaders within {timeout} s")

    def kill9(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def stop(self):
        for p in self.procs:
            stop(p)
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_benchmark(port, test, clients, requests, pipeline=1, keyspace=100_000, cluster=False):
    """(ops/s, p50 ms, p99 ms) of one redis-benchmark run with 100-byte values; a failed run
    (its own error is shown) is retried once. With `cluster`, redis-benchmark reads the slot
    map (CLUSTER NODES) and sends each key to the node that leads its shard."""
    cmd = ["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests), "-c", str(clients),
           "-P", str(pipeline), "-d", "100", "-r", str(keyspace), "--csv"] + (["--cluster"] if cluster else [])
    for attempt in (1, 2):
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if run.returncode == 0:
            break
        print(f"  redis-benchmark failed (attempt {attempt}): {run.stderr.strip() or run.stdout.strip()}",
              file=sys.stderr)
    else:
        sys.exit(f"redis-benchmark failed twice: {' '.join(cmd)}")
    row = [r for r in csv.reader(io.StringIO(run.stdout)) if r and r[0] != "test"][-1]
    return float(row[1]), float(row[4]), float(row[6])


def redis_benchmark_command(port, command, clients, requests, keyspace=100_000):
    """(ops/s, p50 ms, p99 ms) of redis-benchmark sending one custom command (a list of
    words; `__rand_int__` in it becomes a random number below `keyspace`)."""
    cmd = ["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(clients), "-r", str(keyspace),
           "--csv", *command]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"redis-benchmark failed: {' '.join(cmd)}: {run.stderr.strip() or run.stdout.strip()}")
    rows = [r for r in csv.reader(io.StringIO(run.stdout)) if r and r[0] != "test"]
    if not rows:
        sys.exit(f"redis-benchmark printed no result for {' '.join(cmd)}: {run.stdout.strip()}")
    row = rows[-1]
    return float(row[1]), float(row[4]), float(row[6])


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10).stdout.strip()


class Resp:
    """The smallest RESP2 client the scripts need: commands out (one at a time, or several
    before their replies: `send`, then `reply` for each), replies (nested) back."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = self.sock.makefile("rb")

    @staticmethod
    def encode(*args):
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(f"${len(a)}\r\n".encode() + a + b"\r\n")
        return b"".join(out)

    def send(self, *commands):
        """Sends already encoded commands without waiting for their replies."""
        self.sock.sendall(b"".join(commands))

    def call(self, *args):
        self.send(self.encode(*args))
        return self.reply()

    def reply(self):
        line = self.buf.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.buf.read(n + 2)[:-2]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def close(self):
        self.sock.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def prometheus(port):
    """A node's /metrics as {name: value} (series with labels keep them in the name)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return parse_prometheus(r.read().decode())


def parse_prometheus(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def wait_port(port, proc, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited at start (code {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {timeout} s")
