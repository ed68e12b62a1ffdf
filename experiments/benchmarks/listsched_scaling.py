"""Benchmark: how the list schedulers' time grows with the graph: isolated nodes, a chain, a fan-out, a layered DAG.

Run as `python -m experiments.benchmarks.listsched_scaling [--sizes 1000,2000,5000,10000] [--repeats 3]
[--presets placeto-k80,placeto-k80-cpu]`. For each method (etf, heft, m-topo, m-sct, and the placeto policy's list
start, `placeto.methods.placeto.env.list_start` with kind "list": the four, simulated and scored; and m-SCT's
favourite-child LP alone, as stated and with every node's makespan row as Baechi states it), each cluster (4
devices of each preset: identical GPUs, and three GPUs beside the host CPU) and each size N it times the method on N
isolated nodes (no edges: every node is ready at once, the largest ready set a list scheduler meets), on a chain of
N nodes (one ready node at a time) and on a fan-out (one node feeding the N - 1 others: a ready set as wide, whose
nodes wait for transfers to all but one device), each with costs 1..7 us and 100-byte outputs, and on a random
layered DAG (`layered`: ready sets of about sqrt(N) nodes, many waiting for transfers, so that m-SCT's scans often
visit all of them). The kernels are compiled (or loaded) before timing.
Times are medians of this thread's CPU seconds (`time.thread_time`, which other processes' load does not
inflate); "growth" is the time at the largest size over the time at the smallest, against the size ratio (linear:
equal; quadratic: its square). Prints a markdown table and writes it to
experiments/results/benchmarks/listsched_scaling.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from placeto.baselines import METHODS
from placeto.baselines.listsched.problem import build_problem
from placeto.methods.placeto.env import list_start
from simulator import Cluster, Graph, cluster_preset, make_graph
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "benchmarks" / "listsched_scaling.md"
SCHEDULERS = ("etf", "heft", "m-topo", "m-sct")
M_SCT = importlib.import_module("placeto.baselines.m_sct")  # the module: placeto.baselines.m_sct is the function


def isolated(n: int) -> Graph:
    """n nodes, no edges; costs 1..7 us."""
    return make_graph(f"isolated_{n}", [{"name": f"n{i}", "cost": 1.0 + i % 7, "out_bytes": [100]}
                                        for i in range(n)], [])


def chain(n: int) -> Graph:
    """n nodes in a line; costs 1..7 us, 100-byte outputs."""
    return make_graph(f"chain_{n}", [{"name": f"n{i}", "cost": 1.0 + i % 7, "out_bytes": [100]} for i in range(n)],
                      [(i, i + 1, 0) for i in range(n - 1)])


def fan_out(n: int) -> Graph:
    """One node feeding n - 1 others; costs 1..7 us, 100-byte outputs."""
    return make_graph(f"fan_out_{n}", [{"name": f"n{i}", "cost": 1.0 + i % 7, "out_bytes": [100]}
                                       for i in range(n)], [(0, i, 0) for i in range(1, n)])


def layered(n: int) -> Graph:
    """`simulator.model.generate.layered_dag(n, seed=0)`: layers of about sqrt(n) nodes, 1-3 parents each (20%
    from any earlier layer); costs lognormal around 100 us, outputs around 400 kB."""
    return layered_dag(n, seed=0)


SHAPES = {"isolated": isolated, "chain": chain, "fan-out": fan_out, "layered": layered}


def methods() -> dict[str, Callable[[Graph, Cluster], np.ndarray]]:
    calls: dict[str, Callable[[Graph, Cluster], np.ndarray]] = {m: METHODS[m] for m in SCHEDULERS}
    calls["m-sct's LP"] = sct_lp
    calls["m-sct's LP, every makespan row"] = sct_lp_every_row
    calls["placeto list start"] = fresh_list_start
    return calls


def sct_lp(graph: Graph, cluster: Cluster) -> np.ndarray | None:
    """m-SCT's favourite-child LP alone (`m_sct.solve_lp`), its problem built."""
    return M_SCT.solve_lp(build_problem(graph, cluster))


def sct_lp_every_row(graph: Graph, cluster: Cluster) -> np.ndarray | None:
    """The LP as Baechi states it at every size: each node's makespan row, not only the sinks' above
    m_sct.LP_ALL_ROWS nodes."""
    return M_SCT.solve_lp(build_problem(graph, cluster), all_rows=graph.n_nodes)


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


def table(sizes: list[int], repeats: int, presets: list[str]) -> list[str]:
    lines = ["| method | cluster | graph | " + " | ".join(f"N={n:,}" for n in sizes) + " | growth |",
             "|---|---|---|" + "---:|" * (len(sizes) + 1)]
    for name, fn, preset in [(name, fn, preset) for name, fn in methods().items() for preset in presets]:
        cluster = cluster_preset(preset, 4)
        fn(chain(3), cluster)  # compile or load the kernels
        for shape, make in SHAPES.items():
            secs = []
            for n in sizes:
                graph = make(n)
                secs.append(cpu_seconds(lambda: fn(graph, cluster), repeats))
            growth = secs[-1] / max(secs[0], 1e-6)
            line = (f"| {name} | {preset} | {shape} | " + " | ".join(f"{s:.3f}" for s in secs) +
                    f" | {growth:.0f}x for {sizes[-1] / sizes[0]:.0f}x nodes |")
            print(line, flush=True)
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,5000,10000", help="node counts, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per method, graph and size (the median)")
    p.add_argument("--presets", default="placeto-k80,placeto-k80-cpu", help="cluster presets (4 devices each)")
    p.add_argument("--out", type=Path, default=RESULTS, help="markdown file for the table")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    head = ["# The list schedulers' time against the graph's size", "",
            f"4 devices of each preset; median CPU seconds of {args.repeats} calls; {os.cpu_count()} cores, load "
            f"average {os.getloadavg()[0]:.1f} at start. Isolated: N nodes, no edges; chain: N nodes in a line; "
            "fan-out: one node feeding the others; layered: `layered_dag(N, seed=0)`.", ""]
    lines = head + table(sizes, args.repeats, args.presets.split(","))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
