#!/usr/bin/env python3
"""Plots a run of examples/follow as DAL's Fig. 3: each access's latency over time, the
moment the worker moves to another node, and where the session shard's leader is.

    python3 examples/follow/plot.py follow.csv docs/follow-latency.png

Needs matplotlib (pip install matplotlib). Reads the CSV `follow` writes:
t_s,node,op,latency_us,leader,failed.
"""

import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Rolling medians over this many seconds: long enough to smooth one access's noise, short
# enough to show the step when the leader arrives.
MEDIAN_WINDOW_S = 1.0


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(
                {
                    "t": float(r["t_s"]),
                    "node": int(r["node"]),
                    "op": r["op"],
                    "ms": float(r["latency_us"]) / 1000.0,
                    "leader": int(r["leader"]) if r["leader"] else None,
                    "failed": r["failed"] == "1",
                }
            )
    return rows


def rolling_median(rows):
    """(t, median latency) every MEDIAN_WINDOW_S, over the accesses in that slice."""
    out, start, bucket = [], None, []
    for r in rows:
        if start is None:
            start = r["t"]
        if r["t"] - start >= MEDIAN_WINDOW_S:
            if bucket:
                out.append((start + MEDIAN_WINDOW_S / 2, statistics.median(bucket)))
            start, bucket = r["t"], []
        bucket.append(r["ms"])
    if bucket:
        out.append((start + MEDIAN_WINDOW_S / 2, statistics.median(bucket)))
    return out


def changes(rows, field):
    """(t, value) each time `field` changes."""
    out = []
    for r in rows:
        if not out or out[-1][1] != r[field]:
            out.append((r["t"], r[field]))
    return out


def main(csv_path, png_path):
    rows = [r for r in load(csv_path) if not r["failed"]]
    if not rows:
        sys.exit(f"{csv_path}: no successful access")
    end = rows[-1]["t"]
    fig, (ax, where) = plt.subplots(
        2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [4, 1]}
    )
    local = [r for r in rows if r["leader"] == r["node"]]
    remote = [r for r in rows if r["leader"] != r["node"]]
    ax.scatter([r["t"] for r in remote], [r["ms"] for r in remote], s=2, alpha=0.25,
               color="tab:red", label="access through a node that does not lead (remote)")
    ax.scatter([r["t"] for r in local], [r["ms"] for r in local], s=2, alpha=0.25,
               color="tab:blue", label="access through the leader (local)")
    for op, style in (("set", "-"), ("get", "--")):
        med = rolling_median([r for r in rows if r["op"] == op])
        ax.plot([t for t, _ in med], [m for _, m in med], style, color="black", linewidth=1.2,
                label=f"{op}: median over {MEDIAN_WINDOW_S} s")
    # The body of the distribution, where the step is: the slowest few accesses (fsync,
    # scheduling on a small machine) would flatten it.
    top = sorted(r["ms"] for r in rows)[int(len(rows) * 0.95)] * 1.2
    ax.set_ylim(0, top)
    ax.set_ylabel("access latency (ms)")
    worker = changes(rows, "node")
    # Before the first poll the leader is unknown: start from the first one seen.
    leader = changes([r for r in rows if r["leader"] is not None], "leader")
    for t, node in worker[1:]:
        for a in (ax, where):
            a.axvline(t, color="gray", linestyle=":", linewidth=1.5)
        ax.annotate(f"worker moves to node {node}", (t, top * 0.95), xytext=(4, 0),
                    textcoords="offset points", fontsize=9, va="top")
    for t, node in leader[1:]:
        ax.annotate(f"leader → node {node}", (t, top * 0.85), xytext=(4, 0),
                    textcoords="offset points", fontsize=9, va="top", color="tab:blue")
        ax.axvline(t, color="tab:blue", linestyle="--", linewidth=0.8)
    ax.legend(loc="lower center", ncol=2, fontsize=8, markerscale=4)
    ax.set_title("A worker moves from one node to another; its shard's leader follows (FOLLOW on)")

    def steps(points):
        xs, ys = [], []
        for i, (t, v) in enumerate(points):
            nxt = points[i + 1][0] if i + 1 < len(points) else end
            xs += [t, nxt]
            ys += [v or 0, v or 0]
        return xs, ys

    xs, ys = steps(worker)
    where.plot(xs, ys, color="gray", linewidth=3, label="node the worker uses")
    xs, ys = steps(leader)
    where.plot(xs, ys, color="tab:blue", linewidth=1.5, label="session shard's leader")
    nodes = sorted({r["node"] for r in rows} | {r["leader"] for r in rows if r["leader"]})
    where.set_yticks(nodes)
    where.set_ylim(min(nodes) - 0.5, max(nodes) + 0.5)
    where.set_ylabel("node")
    where.set_xlabel("time (s)")
    where.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    print(f"wrote {png_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py FOLLOW_CSV OUT_PNG")
    main(sys.argv[1], sys.argv[2])
