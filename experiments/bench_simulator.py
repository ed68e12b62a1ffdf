"""Benchmark: the numba engine against the plain-Python reference simulator, side by side in one process.

Run as `python -m experiments.bench_simulator [--quick]`. Prints markdown tables and writes them to
experiments/results/bench_simulator.md. Per placement: the reference, the full `simulate` call (SimResult with
memory, transfers and lower bound) and the bare event loop (compiled kernel on preallocated scratch), each the
median over random placements measured in turn after warm-up, and simulate's time over the event loop's (the
per-call overhead); then `simulate_batch` throughput.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

import numba
import numpy as np

from simulator import cluster_preset, simulate, simulate_batch, simulate_reference
from simulator import engine  # the bare kernel (_new_work, _run) is private; timed here on purpose
from simulator.generate import layered_dag

RESULTS = Path(__file__).parent / "results" / "bench_simulator.md"


def seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def first_call() -> float:
    """Seconds for the first simulate call of the process: numba compile, or loading its on-disk cache."""
    graph, cluster = layered_dag(20, 0), cluster_preset("placeto-k80", 2)
    return seconds(lambda: (simulate(graph, np.zeros(20, np.int32), cluster),
                            simulate_batch(graph, np.zeros((8, 20), np.int32), cluster)))


def single_row(n_nodes: int, n_dev: int, repeats: int, seed: int) -> str:
    """One table row: median reference, simulate and event-loop milliseconds over `repeats` placements."""
    graph, cluster = layered_dag(n_nodes, seed), cluster_preset("placeto-k80", n_dev)
    rng = np.random.default_rng(seed)
    g = engine.prepare(graph, cluster)
    work = engine._new_work(graph.n_nodes, len(g.out_bytes), n_dev, len(g.cons), len(g.child))
    warm = rng.integers(0, n_dev, graph.n_nodes).astype(np.int32)
    simulate(graph, warm, cluster), engine._run(g, work, warm)
    ref, fast, loop = [], [], []
    for _ in range(repeats):
        placement = rng.integers(0, n_dev, graph.n_nodes).astype(np.int32)
        ref.append(seconds(lambda: simulate_reference(graph, placement, cluster)))
        fast.append(seconds(lambda: simulate(graph, placement, cluster)))
        loop.append(seconds(lambda: engine._run(g, work, placement)))
        assert engine._run(g, work, placement)[0] == simulate_reference(graph, placement, cluster).runtime
    r, f, k = (1e3 * float(np.median(x)) for x in (ref, fast, loop))
    return (f"| {n_nodes:>6} | {n_dev:>7} | {repeats:>7} | {r:>12.1f} | {f:>11.3f} | {r / f:>8.0f}x | "
            f"{k:>13.3f} | {r / k:>8.0f}x | {f / k:>15.2f} |")


def batch_row(n_nodes: int, n_dev: int, batch: int, repeats: int, seed: int) -> str:
    """One table row: placements per second of simulate_batch, 1 thread and all threads, with(out) memory."""
    graph, cluster = layered_dag(n_nodes, seed), cluster_preset("placeto-k80", n_dev)
    placements = np.random.default_rng(seed).integers(0, n_dev, (batch, graph.n_nodes)).astype(np.int32)
    simulate_batch(graph, placements[:8], cluster, with_memory=True)
    rates = []
    for threads, memory in ((1, False), (None, False), (None, True)):
        times = [seconds(lambda: simulate_batch(graph, placements, cluster, memory, threads)) for _ in range(repeats)]
        rates.append(batch / float(np.median(times)))
    return (f"| {n_nodes:>6} | {n_dev:>7} | {batch:>6} | {rates[0]:>17,.0f} | {rates[1]:>17,.0f} | "
            f"{rates[2]:>23,.0f} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller graphs and fewer repeats (about a minute)")
    p.add_argument("--out", type=Path, default=RESULTS, help="markdown file for the tables")
    args = p.parse_args(argv)

    compile_s = first_call()
    sizes = ((1000, 5), (10000, 3)) if args.quick else ((1000, 7), (10000, 5), (50000, 2))
    lines = [f"# Simulator benchmark{' (--quick)' if args.quick else ''}", "",
             f"layered_dag graphs, placeto-k80 clusters, uniformly random placements; {os.cpu_count()} cores, "
             f"load average {os.getloadavg()[0]:.1f} at start; first call (compile or cache load) {compile_s:.1f} s.",
             "", "## One placement (median ms)", "",
             "simulate ms is the whole public call (SimResult with peak memory, transfers, lower bound); event loop "
             "ms the bare kernel; their ratio is the per-call overhead (issue 12: at most 1.3 at 10,000 nodes).", "",
             "|  nodes | devices | repeats | reference ms | simulate ms | speed-up | event loop ms | speed-up | "
             "simulate / loop |",
             "|-------:|--------:|--------:|-------------:|------------:|---------:|--------------:|---------:|"
             "----------------:|"]
    print("\n".join(lines), flush=True)
    for n_nodes, repeats in sizes:
        for n_dev in (2, 4, 8):
            lines.append(single_row(n_nodes, n_dev, repeats, seed=n_dev))
            print(lines[-1], flush=True)
    head = ["", f"## simulate_batch (placements/s; {numba.config.NUMBA_NUM_THREADS} threads)", "",
            "|  nodes | devices |  batch | 1 thread, runtime | all threads, runtime | all threads, with memory |",
            "|-------:|--------:|-------:|------------------:|------------------:|------------------------:|"]
    print("\n".join(head), flush=True)
    lines += head
    batches = ((1000, 1000, 3), (10000, 40, 3)) if args.quick else ((1000, 4000, 5), (10000, 200, 3))
    for n_nodes, batch, repeats in batches:
        lines.append(batch_row(n_nodes, 4, batch, repeats, seed=0))
        print(lines[-1], flush=True)
    lines += ["", f"load average {os.getloadavg()[0]:.1f} at end."]
    print(lines[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
