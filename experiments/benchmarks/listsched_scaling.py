"""Benchmark: how the list schedulers' time grows with the graph, on isolated nodes and on a chain.

Run as `python -m experiments.benchmarks.listsched_scaling [--sizes 1000,2000,5000,10000] [--repeats 3]`. For each
method (etf, heft, m-topo, m-sct, and the placeto policy's list start, `placeto.methods.placeto.env.list_start`
with kind "list": the four, simulated and scored) and each size N it times the method on N isolated nodes (no
edges: every node is ready at once, the largest ready set a list scheduler meets) and on a chain of N nodes (one
ready node at a time),
at 4 placeto-k80 devices. Costs 1..7 us, 100-byte outputs. The kernels are compiled (or loaded) before timing.
Times are medians of this thread's CPU seconds (`time.thread_time`, which other processes' load does not
inflate); "growth" is the time at the largest size over the time at the smallest, against the size ratio (linear:
equal; quadratic: its square). Prints a markdown table and writes it to
experiments/results/benchmarks/listsched_scaling.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from placeto.baselines import METHODS
from placeto.methods.placeto.env import list_start
from simulator import Cluster, Graph, cluster_preset, make_graph

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "benchmarks" / "listsched_scaling.md"
SCHEDULERS = ("etf", "heft", "m-topo", "m-sct")


def isolated(n: int) -> Graph:
    """n nodes, no edges; costs 1..7 us."""
    return make_graph(f"isolated_{n}", [{"name": f"n{i}", "cost": 1.0 + i % 7, "out_bytes": [100]}
                                        for i in range(n)], [])


def chain(n: int) -> Graph:
    """n nodes in a line; costs 1..7 us, 100-byte outputs."""
    return make_graph(f"chain_{n}", [{"name": f"n{i}", "cost": 1.0 + i % 7, "out_bytes": [100]} for i in range(n)],
                      [(i, i + 1, 0) for i in range(n - 1)])


def methods() -> dict[str, Callable[[Graph, Cluster], np.ndarray]]:
    calls: dict[str, Callable[[Graph, Cluster], np.ndarray]] = {m: METHODS[m] for m in SCHEDULERS}
    calls["placeto list start"] = fresh_list_start
    return calls


def fresh_list_start(graph: Graph, cluster: Cluster) -> np.ndarray:
    """The policy's list start ("list": m-ETF, m-SCT, m-TOPO, HEFT, scored) as a first call computes it.

    list_start memoises in graph.cache, so the cache is emptied first.
    """
    graph.cache.clear()
    return list_start(graph, cluster, "list")


def cpu_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU seconds of this thread over `repeats` calls of fn()."""
    times = []
    for _ in range(repeats):
        c0 = time.thread_time()
        fn()
        times.append(time.thread_time() - c0)
    return float(np.median(times))


def table(sizes: list[int], repeats: int) -> list[str]:
    cluster = cluster_preset("placeto-k80", 4)
    lines = ["| method | graph | " + " | ".join(f"N={n:,}" for n in sizes) + " | growth |",
             "|---|---|" + "---:|" * (len(sizes) + 1)]
    for name, fn in methods().items():
        fn(chain(3), cluster)  # compile or load the kernels
        for shape, make in (("isolated", isolated), ("chain", chain)):
            secs = []
            for n in sizes:
                graph = make(n)
                secs.append(cpu_seconds(lambda: fn(graph, cluster), repeats))
            growth = secs[-1] / max(secs[0], 1e-6)
            line = (f"| {name} | {shape} | " + " | ".join(f"{s:.3f}" for s in secs) +
                    f" | {growth:.0f}x for {sizes[-1] / sizes[0]:.0f}x nodes |")
            print(line, flush=True)
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,5000,10000", help="node counts, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per method, graph and size (the median)")
    p.add_argument("--out", type=Path, default=RESULTS, help="markdown file for the table")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    head = ["# The list schedulers' time against the graph's size", "",
            f"4 placeto-k80 devices; median CPU seconds of {args.repeats} calls; {os.cpu_count()} cores, load "
            f"average {os.getloadavg()[0]:.1f} at start. Isolated: N nodes, no edges; chain: N nodes in a line.", ""]
    lines = head + table(sizes, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
