"""Benchmark: the numba engine against the plain-Python reference simulator, side by side in one process.

Run as `python -m experiments.benchmarks.bench_simulator [--quick]`. Prints markdown tables and writes them
to experiments/results/benchmarks/bench_simulator.md. Per placement: the reference, the full `simulate` call
(SimResult with transfers and lower bound), the same plus reading its peak memory (computed on first read), and
the bare event loop (compiled kernel on preallocated scratch), the last three timed side by side on the same random
placements after warm-up (medians of thread CPU time, and the wall-clock ratios), and their times over the event
loop's (the per-call overhead); then `simulate_batch` throughput (wall clock). The speed-up is the reference's
time over simulate's with memory.
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
from simulator.engine import fast as engine  # the bare kernel (_new_work, _run) is private; timed here on purpose
from simulator.model.generate import layered_dag

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "bench_simulator.md"


def seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def first_call() -> float:
    """Seconds for the first simulate call of the process: numba compile, or loading its on-disk cache."""
    graph, cluster = layered_dag(20, 0), cluster_preset("placeto-k80", 2)
    return seconds(lambda: (simulate(graph, np.zeros(20, np.int32), cluster),
                            simulate_batch(graph, np.zeros((8, 20), np.int32), cluster)))


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this thread's CPU seconds) of one fn() call."""
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def single_row(n_nodes: int, n_dev: int, repeats: int, ref_repeats: int, seed: int) -> str:
    """One table row: median milliseconds of the reference (over `ref_repeats` placements) and, over `repeats`
    other placements each timed once per call in a rotating order, of simulate(), simulate() plus reading its
    peak memory, and the bare event loop (compiled kernel on preallocated scratch). Times are thread CPU time;
    the wall-clock ratios are given beside."""
    graph, cluster = layered_dag(n_nodes, seed), cluster_preset("placeto-k80", n_dev)
    rng = np.random.default_rng(seed)
    g = engine.prepare(graph, cluster)
    work = engine._new_work(g)
    warm = rng.integers(0, n_dev, graph.n_nodes).astype(np.int32)
    simulate(graph, warm, cluster).peak_memory, engine._run(g, work, warm)
    calls = {"simulate": lambda p: simulate(graph, p, cluster),
             "memory": lambda p: simulate(graph, p, cluster).peak_memory,
             "loop": lambda p: engine._run(g, work, p)}
    wall: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    for r in range(repeats):  # side by side: each placement timed by every call, the order rotating
        placement = rng.integers(0, n_dev, graph.n_nodes).astype(np.int32)
        names = list(calls)
        for name in names[r % 3:] + names[:r % 3]:
            w, c = timed(lambda: calls[name](placement))
            wall[name].append(w)
            cpu[name].append(c)
    ref = []
    for _ in range(ref_repeats):
        placement = rng.integers(0, n_dev, graph.n_nodes).astype(np.int32)
        ref.append(timed(lambda: simulate_reference(graph, placement, cluster))[1])
        assert engine._run(g, work, placement)[0] == simulate_reference(graph, placement, cluster).runtime
    med = {k: 1e3 * float(np.median(v)) for k, v in cpu.items()}
    wmed = {k: 1e3 * float(np.median(v)) for k, v in wall.items()}
    r, f, m, k = 1e3 * float(np.median(ref)), med["simulate"], med["memory"], med["loop"]
    return (f"| {n_nodes:>6} | {n_dev:>7} | {repeats:>7} | {r:>12.1f} | {f:>11.3f} | {m:>11.3f} | {k:>13.3f} | "
            f"{f / k:>15.2f} | {m / k:>26.2f} | {wmed['simulate'] / wmed['loop']:>16.2f} | "
            f"{wmed['memory'] / wmed['loop']:>20.2f} | {r / m:>8.0f}x |")


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
    # (nodes, placements timed side by side, placements for the reference)
    sizes = ((1000, 21, 3), (10000, 11, 2)) if args.quick else ((1000, 41, 7), (10000, 21, 5), (50000, 7, 2))
    lines = [f"# Simulator benchmark{' (--quick)' if args.quick else ''}", "",
             f"layered_dag graphs, placeto-k80 clusters, uniformly random placements; {os.cpu_count()} cores, "
             f"load average {os.getloadavg()[0]:.1f} at start; first call (compile or cache load) {compile_s:.1f} s.",
             "", "## One placement (median ms)", "",
             "*simulate* is the whole public call: validation, the schedule, transfers, lower bound; the result "
             "computes its peak memory when first read (`SimResult.peak_memory`), which *+ memory* includes. "
             "*event loop* is the bare kernel on preallocated scratch. The three are timed side by side on the same "
             "placements (each placement once per call, in a rotating order); the reference on other placements. "
             "Times are medians of this thread's CPU time (`time.thread_time`: what the call costs, which other "
             "processes' load does not inflate); the wall-clock ratios beside them (equal on a quiet machine). "
             "The target: simulate at most 1.3x the event loop at 10,000 nodes.", "",
             "|  nodes | devices | repeats | reference ms | simulate ms | + memory ms | event loop ms | "
             "simulate / loop | (simulate + memory) / loop | wall: sim / loop | wall: (+ mem) / loop | speed-up |",
             "|-------:|--------:|--------:|-------------:|------------:|------------:|--------------:|"
             "----------------:|---------------------------:|-----------------:|---------------------:|---------:|"]
    print("\n".join(lines), flush=True)
    for n_nodes, repeats, ref_repeats in sizes:
        for n_dev in (2, 4, 8):
            lines.append(single_row(n_nodes, n_dev, repeats, ref_repeats, seed=n_dev))
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
