"""Benchmark: m-SCT's numba event loop against Baechi's plain-Python one, side by side in one process.

Run as `python -m experiments.benchmarks.m_sct_speed [--repeats 7]`. For each graph and cluster it builds the
schedule problem and the LP's favourite children once, then times, in a rotating order on every repeat, the
favourite-child LP (`m_sct.favourite_children`), the plain event loop (`baechi_reference.baechi_sct`, what m-sct ran
before) and the numba one (`m_sct.sct_schedule`, what it runs now), checking that the two loops' schedules are equal.
Times are medians of this thread's CPU time (`time.thread_time`, which other processes' load does not inflate),
the wall-clock ratio beside them. m-sct's whole time is the LP plus a loop (building the problem, the same for
both, is left out). Prints a markdown table and writes it to experiments/results/benchmarks/m_sct_speed.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from placeto.baselines.listsched.baechi_reference import baechi_sct
from placeto.baselines.listsched.problem import build_problem
from placeto.baselines.m_sct import favourite_children, sct_schedule
from simulator import cluster_preset, load_graph
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "benchmarks" / "m_sct_speed.md"
GRAPHS = ("nmt/nmt_004", "benchmarks/inception_v3", "layered_dag(200)", "layered_dag(600)")


def graph_of(name: str):
    if name.startswith("layered_dag("):
        return layered_dag(int(name[len("layered_dag("):-1]), seed=0)
    return load_graph(ROOT / "datasets" / f"{name}.json.gz")


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) of one fn() call."""
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def row(name: str, n_dev: int, repeats: int) -> str:
    graph = graph_of(name)
    prob = build_problem(graph, cluster_preset("placeto-k80", n_dev))
    fav = favourite_children(prob)
    fast, ref = sct_schedule(prob, fav), baechi_sct(prob, fav)  # (and compiles or loads the kernels)
    if not all(np.array_equal(a, b) for a, b in zip(fast, ref)):
        raise SystemExit(f"{name} on {n_dev} devices: the numba loop's schedule differs from the reference's")
    calls = {"lp": lambda: favourite_children(prob), "ref": lambda: baechi_sct(prob, fav),
             "fast": lambda: sct_schedule(prob, fav)}
    wall: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(repeats):  # side by side, the order rotating
        for k in names[r % 3:] + names[:r % 3]:
            w, c = timed(calls[k])
            wall[k].append(w)
            cpu[k].append(c)
    med = {k: 1e3 * float(np.median(v)) for k, v in cpu.items()}
    wmed = {k: 1e3 * float(np.median(v)) for k, v in wall.items()}
    lp, r, f = med["lp"], med["ref"], med["fast"]
    return (f"| {name:<23} | {graph.n_nodes:>5} | {n_dev:>7} | {lp:>5.1f} | {r:>13.1f} | {f:>8.2f} | "
            f"{r / f:>12.0f}x | {wmed['ref'] / wmed['fast']:>5.0f}x | {lp + r:>12.1f} | {lp + f:>9.1f} | "
            f"{(lp + r) / (lp + f):>13.1f}x |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="timed calls of each per graph and cluster")
    p.add_argument("--out", type=Path, default=RESULTS, help="markdown file for the table")
    args = p.parse_args(argv)
    lines = ["# m-SCT: the numba event loop against the plain-Python one", "",
             f"placeto-k80 clusters, the default transfer model, the LP's favourite children; {os.cpu_count()} cores, "
             f"load average {os.getloadavg()[0]:.1f} at start; {args.repeats} repeats. Median ms of this thread's CPU "
             "time, timed side by side in a rotating order (the wall-clock ratio beside); the two loops' schedules "
             "are checked equal. m-sct = the LP + a loop.", "",
             "| graph                   | nodes | devices | LP ms | plain loop ms | numba ms | loop speed-up | "
             "(wall) | m-sct before | m-sct now | m-sct speed-up |",
             "|:------------------------|------:|--------:|------:|--------------:|---------:|--------------:|"
             "-------:|-------------:|----------:|--------------:|"]
    print("\n".join(lines), flush=True)
    for name in GRAPHS:
        for n_dev in (4, 8):
            lines.append(row(name, n_dev, args.repeats))
            print(lines[-1], flush=True)
    lines += ["", f"load average {os.getloadavg()[0]:.1f} at end."]
    print(lines[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
