"""Shared pieces of the benchmark scripts: ports, the Firn release build, a local Firn
cluster, redis-benchmark runs, the peers' programs for bench/compare (installed here, or
carried in one file made by bench/bundle) and the cores each process is pinned to. Every
process started here is stopped by its owner."""

import atexit
import collections
import csv
import datetime
import io
import itertools
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
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


def pinned(cmd, cores):
    """`cmd` under `taskset -c cores` (a CPU list such as "0-3"), so that it runs on those
    cores only; `cmd` as it is when `cores` is None (an unpinned run)."""
    return ["taskset", "-c", cores, *cmd] if cores else list(cmd)


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


def cpu_seconds(pid):
    """User plus system CPU time the process has used so far, from /proc/PID/stat (in clock
    ticks, 10 ms on Linux as built)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()  # after the name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """{thread id: (thread name, CPU seconds so far)} of every thread of process `pid`, from
    /proc/PID/task; a thread that ends while this reads is left out."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rpartition(")")[2].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def process_events(pid):
    """(write calls, context switches) of process `pid` so far: `syscw` of /proc/PID/io (its
    write and writev calls: a Firn node's log writes and its messages to peers; a reply to a
    client goes out with send, which is not counted) and the voluntary and involuntary switches of
    each of its threads (/proc/PID/task/*/status; a thread that ends while this reads is left
    out, as are the switches of threads already gone)."""
    with open(f"/proc/{pid}/io") as fh:
        writes = next(int(line.split()[1]) for line in fh if line.startswith("syscw:"))
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                switches += sum(int(line.split()[1]) for line in fh if "ctxt_switches" in line)
        except OSError:
            continue
    return writes, switches


def busiest_threads(before, after, seconds, top=4):
    """The `top` threads that used the most CPU between two thread_cpu readings of a set of
    processes ({pid: reading}), as "name NN%" (of one core, over `seconds`): a thread near 100%
    is a serial bottleneck, whatever the cores left."""
    used = []
    for pid, now in after.items():
        for tid, (name, cpu) in now.items():
            used.append((cpu - before.get(pid, {}).get(tid, (name, 0.0))[1], name))
    used.sort(reverse=True)
    return ", ".join(f"{name} {100 * cpu / seconds:.0f}%" for cpu, name in used[:top])


# lsm-tree's debug lines that end a flush or a compaction, with how long it took.
STORAGE_WORK = re.compile(r"(Flushed memtable\(s\)|Compaction done) in ([\d.]+)(ns|µs|ms|s)\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
DURATION_UNITS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


class FirnCluster:
    """N `firn serve` processes on 127.0.0.1 (disk durability), formed with --peers; with
    `cores` (a CPU list a node), node i runs pinned to cores[i]. `{node}` in an `extra`
    argument becomes the node's id."""

    def __init__(self, binary, n=3, extra=(), cores=None, storage_log=False):
        self.binary, self.n, self.extra = binary, n, list(extra)
        # With storage_log, each node writes fjall's flushes and compactions to node{i}.log in
        # the cluster's folder (see storage_work).
        self.storage_log = storage_log
        self.cores = list(cores) if cores else [None] * n
        self.dir = tempfile.mkdtemp(prefix="firn-bench-")
        ports = free_ports(3 * n)
        self.ports = [tuple(ports[3 * i:3 * i + 3]) for i in range(n)]
        self.peers = ",".join(f"{i + 1}=127.0.0.1:{self.ports[i][2]}" for i in range(n))
        self.procs = [None] * n
        try:
            for i in range(n):
                self.start(i)
            for i in range(n):
                self.wait_leaders(i)
        except BaseException:
            # A cluster that never came up (wait_leaders exits) leaves no process behind.
            self.stop()
            raise

    def start(self, i):
        resp, http, peer = self.ports[i]
        self.procs[i] = subprocess.Popen(pinned(
            [self.binary, "serve", "--node-id", str(i + 1), "--peers", self.peers,
             "--resp-addr", f"127.0.0.1:{resp}", "--http-addr", f"127.0.0.1:{http}", "--peer-addr", f"127.0.0.1:{peer}",
             "--data-dir", os.path.join(self.dir, f"node{i + 1}"), *(a.replace("{node}", str(i + 1)) for a in self.extra)],
            self.cores[i]),
            **self.log_to(i))

    def log_to(self, i):
        """Where node i's log goes, and at what level: nowhere unless storage_log."""
        if not self.storage_log:
            return dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        log = open(self.log_path(i), "a")
        return dict(stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "warn,lsm_tree=debug"})

    def log_path(self, i):
        return os.path.join(self.dir, f"node{i + 1}.log")

    def storage_work(self, since, until):
        """[(kind, seconds)] of the flushes and compactions the nodes logged between the
        datetimes `since` and `until` (UTC); needs storage_log."""
        work = []
        for i in range(self.n):
            with open(self.log_path(i), errors="replace") as fh:
                for line in fh:
                    line = ANSI.sub("", line)
                    m = STORAGE_WORK.search(line)
                    if not m:
                        continue
                    try:
                        at = datetime.datetime.fromisoformat(line.split()[0].rstrip("Z"))
                    except ValueError:
                        continue
                    if since <= at < until:
                        work.append(("flush" if m[1] == "Flushed memtable(s)" else "compaction",
                                     float(m[2]) * DURATION_UNITS[m[3]]))
        return work

    def resp_port(self, i=0):
        return self.ports[i][0]

    def leaders(self, i):
        """The leader of each shard node i holds, from its health probe (which answers
        without a token on a node with users): [] until it answers 200."""
        try:
            return [s["leader"] for s in http_json(self.ports[i][1], "/healthz")["shards"]]
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


class EtcdCluster:
    """n etcd members on 127.0.0.1, member i pinned to servers[i] (None: unpinned); `client`
    pins etcdctl."""

    def __init__(self, servers, client, n=3):
        self.dir = tempfile.mkdtemp(prefix="etcd-bench-")
        ports = free_ports(2 * n)
        self.client_ports = ports[:n]
        peer_ports = ports[n:]
        initial = ",".join(f"e{i}=http://127.0.0.1:{peer_ports[i]}" for i in range(n))
        self.procs = []
        for i in range(n):
            self.procs.append(subprocess.Popen(pinned(
                ["etcd", "--name", f"e{i}", "--data-dir", os.path.join(self.dir, f"e{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                 "--advertise-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer_ports[i]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_ports[i]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--quota-backend-bytes", str(4 * 1024 ** 3)], servers[i]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for i in range(n):
            wait_port(self.client_ports[i], self.procs[i], f"etcd {i}")
        deadline = time.time() + 60
        while subprocess.run(pinned(["etcdctl", "--endpoints", self.endpoints(), "endpoint", "health"], client),
                             capture_output=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"}).returncode:
            if time.time() > deadline:
                sys.exit("etcd cluster not healthy within 60 s")
            time.sleep(0.5)

    def endpoints(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def stop(self):
        for p in self.procs:
            stop(p)
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """One redis-server on 127.0.0.1, pinned to `cores` (None: unpinned)."""

    def __init__(self, persistent, cores):
        self.dir = tempfile.mkdtemp(prefix="redis-bench-")
        self.port = free_ports(1)[0]
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(pinned(args, cores), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "redis-server")

    def stop(self):
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_benchmark(port, test, clients, requests, pipeline=1, keyspace=100_000, cluster=False, cores=None):
    """(ops/s, p50 ms, p99 ms) of one redis-benchmark run; see redis_benchmark_row."""
    row = redis_benchmark_row(port, test, clients, requests, pipeline, keyspace, cluster, cores)
    return row["ops"], row["p50"], row["p99"]


def redis_benchmark_row(port, test, clients, requests, pipeline=1, keyspace=100_000, cluster=False, cores=None):
    """{ops, avg, min, p50, p95, p99, max} (ops/s, ms) of one redis-benchmark run with 100-byte
    values; a failed run (its own error is shown) is retried once. With `cluster`,
    redis-benchmark reads the slot map (CLUSTER NODES) and sends each key to the node that
    leads its shard; with `cores`, it runs pinned to them, one thread a core (one thread of
    redis-benchmark tops out near 150,000 requests/s, below what the servers may give). `client_cores`
    is the CPU the client used over the run, in cores."""
    threads = min(clients, len(cpus_of(cores))) if cores else 1
    cmd = pinned(["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests), "-c", str(clients),
                  "-P", str(pipeline), "-d", "100", "-r", str(keyspace), "--csv"] + (["--cluster"] if cluster else [])
                 + (["--threads", str(threads)] if threads > 1 else []),
                 cores)
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    row = redis_benchmark_csv(cmd)
    after, seconds = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {**dict(zip(("ops", "avg", "min", "p50", "p95", "p99", "max"), map(float, row[1:8]))),
            "client_cores": used / seconds}


def redis_benchmark_csv(cmd):
    """The last result row of a `redis-benchmark --csv` command. A failed run (a leader change
    under load answers TRYAGAIN, which ends redis-benchmark) is shown and run once more after
    an election's time."""
    for attempt in (1, 2):
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if run.returncode == 0:
            break
        print(f"  redis-benchmark failed (attempt {attempt}): {run.stderr.strip() or run.stdout.strip()}",
              file=sys.stderr)
        time.sleep(3)  # an election settles well within this
    else:
        sys.exit(f"redis-benchmark failed twice: {' '.join(cmd)}")
    rows = [r for r in csv.reader(io.StringIO(run.stdout)) if r and r[0] != "test"]
    if not rows:
        sys.exit(f"redis-benchmark printed no result for {' '.join(cmd)}: {run.stdout.strip()}")
    return rows[-1]


def with_cpu(pids, requests, run):
    """run()'s result, and the CPU µs a request that the processes `pids` used over it, all
    of them together."""
    before = sum(cpu_seconds(p) for p in pids)
    result = run()
    return result, (sum(cpu_seconds(p) for p in pids) - before) * 1e6 / requests


def measured(pids, requests, run):
    """run()'s (ops/s, p50 ms, p99 ms) and, fourth, the CPU µs a request (see with_cpu)."""
    result, cpu_us = with_cpu(pids, requests, run)
    return (*result, cpu_us)


WRITE_STAGES = ("propose", "log_append", "fsync_wait", "fsync", "replicate", "apply", "commit")
WRITE_BATCHES = ("firn_log_fsync_appends", "firn_apply_batch_entries", "firn_replication_appends_in_flight")


def write_stages(http_port):
    """Where a node's writes waited: {(metric, stage or None): {quantile: value}} of the
    write-stage summaries on its /metrics (`firn_write_stage_seconds{stage}` in seconds, and
    the fsync and apply batch sizes, the appends in flight to a follower; see docs/api.md), and under "count" and "sum" how many
    were recorded and their total."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    out = collections.defaultdict(dict)
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(("firn_write_stage", "firn_log_fsync", "firn_apply_batch",
                                                                 "firn_replication_appends")):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, labels = head.partition("{")
        fields = dict(kv.split("=", 1) for kv in labels.rstrip("}").split(",")) if labels else {}
        if name.endswith(("_count", "_sum")):
            name, _, quantile = name.rpartition("_")
        elif "quantile" in fields:
            quantile = fields["quantile"].strip('"')
        else:
            continue
        out[(name, fields.get("stage", "").strip('"') or None)][quantile] = float(value)
    return out


def compaction_seconds(http_port):
    """The time a node's storage compactions have taken so far, all its databases together
    (`firn_storage_compaction_microseconds_total`; 0 from a build before it)."""
    return sum(v for k, v in prometheus(http_port).items()
               if k.startswith("firn_storage_compaction_microseconds_total{")) / 1e6


def replication_appends(http_port):
    """(with entries, without) appends a node has sent to its followers so far
    (`firn_replication_appends_total`; 0 from a build before it)."""
    metrics = prometheus(http_port)
    return tuple(metrics.get(f'firn_replication_appends_total{{entries="{kind}"}}', 0.0) for kind in ("some", "none"))


def redis_benchmark_command(port, command, clients, requests, keyspace=100_000, cores=None):
    """(ops/s, p50 ms, p99 ms) of redis-benchmark sending one custom command (a list of
    words; `__rand_int__` in it becomes a random number below `keyspace`); with `cores`, it
    runs pinned to them."""
    cmd = pinned(["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(clients), "-r", str(keyspace),
                  "--csv", *command], cores)
    row = redis_benchmark_csv(cmd)
    return float(row[1]), float(row[4]), float(row[6])


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10).stdout.strip()


def redis_cli_settled(port, *args, timeout=30):
    """`redis_cli`, again while the answer is TRYAGAIN or CLUSTERDOWN: a fresh cluster's
    groups (the meta group among them) elect their first leaders at their own pace."""
    deadline = time.time() + timeout
    while True:
        out = redis_cli(port, *args)
        if not out.startswith(("TRYAGAIN", "CLUSTERDOWN")) or time.time() > deadline:
            return out
        time.sleep(0.1)


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


GO_TOOLS = os.path.join(TARGET, "bench-go")
GO_MODULE = os.path.join(ROOT, "bench", "go")  # the Go tools' pinned versions
# Programs a bundle carries in bin/ besides firn and the Go tools; found on PATH here.
SYSTEM_TOOLS = ("etcd", "etcdctl", "redis-server", "redis-benchmark", "redis-cli", "taskset")
# The Go tools' names in bin/: go-ycsb, and etcd's `benchmark`.
BUNDLED = ("firn", "go-ycsb", "benchmark", *SYSTEM_TOOLS)
# Fewer CPUs than this make groups too small to hold a server or the client: run unpinned.
PIN_CPUS_MIN = 8


class Tools:
    """The programs a comparison runs that are not on PATH by name: firn, go-ycsb with its
    workload files, and etcd's benchmark tool. etcd and Redis are taken from PATH."""

    def __init__(self, firn, ycsb, etcd_bench, workloads):
        self.firn, self.ycsb, self.etcd_bench, self.workloads = firn, ycsb, etcd_bench, workloads


def installed_tools():
    """Tools from this machine: Debian's etcd and Redis (installed if missing), the Go tools
    built from bench/go (cached in $CARGO_TARGET_DIR/bench-go), firn from build_firn."""
    need = [p for p, b in (("etcd-server", "etcd"), ("etcd-client", "etcdctl"), ("redis-server", "redis-server"),
                           ("redis-tools", "redis-benchmark")) if not shutil.which(b)]
    if need:
        subprocess.run(["apt-get", "update", "-q"], check=True, timeout=600, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", *need], check=True, timeout=900, capture_output=True)
    ycsb, etcd_bench = os.path.join(GO_TOOLS, "go-ycsb"), os.path.join(GO_TOOLS, "benchmark")
    if not (os.path.exists(ycsb) and os.path.exists(etcd_bench)):
        os.makedirs(GO_TOOLS, exist_ok=True)
        print("building go-ycsb and etcd's benchmark tool (a few minutes, once)", file=sys.stderr)
        subprocess.run(["go", "build", "-o", GO_TOOLS + "/", "github.com/pingcap/go-ycsb/cmd/go-ycsb",
                        "go.etcd.io/etcd/v3/tools/benchmark"], cwd=GO_MODULE, check=True, timeout=1200)
    out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/pingcap/go-ycsb"],
                         cwd=GO_MODULE, capture_output=True, text=True, check=True, timeout=300)
    return Tools(build_firn(), ycsb, etcd_bench, os.path.join(out.stdout.strip(), "workloads"))


def bundled_tools(path):
    """Tools from a bundle (bench/bundle's tar.xz, unpacked into a temporary folder removed
    at exit, or a folder holding its bin/, lib/ and workloads/). Its bin/ goes first on PATH
    and its lib/ first on LD_LIBRARY_PATH for every process started after this; nothing is
    installed or built."""
    if os.path.isfile(path):
        root = tempfile.mkdtemp(prefix="firn-tools-")
        atexit.register(shutil.rmtree, root, True)
        # Our own archive; the "data" filter, where this Python has it, still refuses odd members.
        extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(path, "r:xz") as tar:
            tar.extractall(root, **extra)
    elif os.path.isdir(path):
        root = os.path.abspath(path)
    else:
        sys.exit(f"--tools {path}: no such file or folder (give bench/bundle's bundle.tar.xz or its unpacked folder)")
    bin_dir = os.path.join(root, "bin")
    missing = [b for b in BUNDLED if not os.access(os.path.join(bin_dir, b), os.X_OK)]
    if missing or not os.path.isdir(os.path.join(root, "workloads")):
        sys.exit(f"--tools {path}: not a bundle from bench/bundle (missing: {', '.join(missing) or 'workloads/'})")
    for var, sub in (("PATH", "bin"), ("LD_LIBRARY_PATH", "lib")):
        os.environ[var] = os.pathsep.join(filter(None, [os.path.join(root, sub), os.environ.get(var)]))
    return Tools(os.path.join(bin_dir, "firn"), os.path.join(bin_dir, "go-ycsb"), os.path.join(bin_dir, "benchmark"),
                 os.path.join(root, "workloads"))


def cpus_of(cores):
    """CPU numbers of a taskset list: "0-3,8" → [0, 1, 2, 3, 8]."""
    out = []
    for part in cores.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def cpu_list(cpus):
    """Sorted CPU numbers in taskset's list form, runs as ranges: [0, 1, 2, 3, 8] → "0-3,8"."""
    runs = []
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


class CoreLayout:
    """Where each process runs. Pinned, the CPUs this process may use are split into four
    equal groups (16 CPUs: 0-3, 4-7, 8-11, 12-15; what is left over from an uneven split is
    not used): one for each of the three server processes of a system (Firn node i, etcd
    member i; Redis, one process, takes the first) and one for the client tools. Unpinned
    (no --pin, or fewer than PIN_CPUS_MIN CPUs), every entry is None."""

    def __init__(self, pin, cpus=None):
        cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
        self.servers, self.client = [None] * 3, None
        self.note = f"unpinned: servers and clients share {len(cpus)} CPUs"
        if not pin:
            return
        if len(cpus) < PIN_CPUS_MIN:
            print(f"--pin: {len(cpus)} CPUs here, pinning needs {PIN_CPUS_MIN} or more (four groups: "
                  "three servers and the client); running unpinned", file=sys.stderr)
            self.note += f" (--pin asked, fewer than {PIN_CPUS_MIN} CPUs)"
            return
        if not shutil.which("taskset"):
            sys.exit("--pin: taskset not found on PATH (it is in util-linux; a bundle from bench/bundle carries it)")
        size = len(cpus) // 4
        groups = [cpu_list(cpus[i * size:(i + 1) * size]) for i in range(4)]
        self.servers, self.client = groups[:3], groups[3]
        self.note = (f"pinned with taskset: server processes 1, 2, 3 on CPUs {', '.join(self.servers)} "
                     f"(Redis on {self.servers[0]}), client tools on {self.client}, of {len(cpus)} CPUs")
