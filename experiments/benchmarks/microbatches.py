"""Microbatched (GPipe) steps: how much a pipelined step gains over the plain one, and what it costs in memory.

For each graph and M in --microbatches (default 1, 2, 4, 8), each of --methods places the graph microbatched at M
(`placeto.baselines.run_method` on `microbatched(graph, M)`: the searches judge placements by the microbatched
step; the list schedulers place by the graph's costs, whatever M). The best placement (the fastest that fits in
memory, else the fastest; M = 1's best is a candidate at every M) is reported with its simulated step time, its
speed-up over M = 1's best, and its largest per-device peak memory against the capacity. A last row per graph re-simulates M = 1's best placement
at M = 4: the gain of pipelining alone, with the placement unchanged.

    python -m experiments.benchmarks.microbatches          # the memory-constrained benchmarks, 4 devices of their presets
    python -m experiments.benchmarks.microbatches --graphs G.json.gz H.json.gz@h100-nvlink --devices 8

A graph given as PATH@PRESET is placed on that preset, else on --preset.

Writes experiments/results/benchmarks/microbatches.md (--out).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto.baselines import NotApplicable, run_method  # noqa: E402
from simulator import cluster_preset, load_graph, simulate  # noqa: E402
from simulator.arguments import POSITIVE, OneLineParser, comma_list  # noqa: E402
from simulator.model.cluster import PRESETS, Cluster  # noqa: E402
from simulator.model.graph import Graph  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402
from simulator.model.microbatch import microbatched  # noqa: E402

GRAPHS = ("datasets/memory/nmt_l2_full.json.gz", "datasets/memory/nmt_l4_full.json.gz",
          "datasets/memory/nmt_l8_full.json.gz", "datasets/memory/gpt_l24_full.json.gz@v100-nvlink")
# the seeds' models at full size that do not fit one device (datasets/memory/README.md), each on its preset
METHODS = ("m-sct", "etf", "local-search")
OUT = ROOT / "experiments/results/benchmarks/microbatches.md"


class Row(NamedTuple):
    """One table row: the best placement of a graph at M microbatches."""

    graph: str
    preset: str
    m: int
    method: str  # the best method, or "M=1's best" for the re-simulated row
    step_ms: float  # simulated step time, milliseconds
    speedup: float  # M = 1's best step time over this one
    peak_gb: tuple[float, ...]  # per-device peak memory, GB
    capacity_gb: float  # per-device capacity (the largest), GB


def best_placement(graph: Graph, cluster: Cluster, methods: list[str], budget: int):
    """(method, placement, SimResult) of the best of `methods` on `graph`: the fastest that fits, else the fastest."""
    found = []
    for name in methods:
        try:
            run = run_method(name, graph, cluster, seed=0, budget=budget)
        except NotApplicable:
            continue
        result = simulate(graph, run.placement, cluster)
        found.append((result.any_oom, result.runtime, name, run.placement, result))
    oom, _, name, placement, result = min(found, key=lambda f: f[:2])
    return name, placement, result


def rows_for(path: str, cluster: Cluster, methods: list[str], ms: list[int], budget: int) -> list[Row]:
    graph = load_graph(path)
    name = Path(path).name.removesuffix(".gz").removesuffix(".json")
    capacity = float(cluster.capacity.max()) / 1e9
    rows, base, base_placement = [], None, None
    for m in ms:
        method, placement, result = best_placement(microbatched(graph, m), cluster, methods, budget)
        if m == 1:
            base, base_placement = result.runtime, placement
        else:  # M = 1's best is a candidate at every M too
            again = simulate(microbatched(graph, m), base_placement, cluster)
            if (again.any_oom, again.runtime) < (result.any_oom, result.runtime):
                method, placement, result = "M=1's best", base_placement, again
        rows.append(Row(name, cluster.name, m, method, result.runtime / 1e3, (base or result.runtime) / result.runtime,
                        tuple(result.peak_memory / 1e9), capacity))
    if base_placement is not None:
        again = simulate(microbatched(graph, 4), base_placement, cluster)
        rows.append(Row(name, cluster.name, 4, "M=1's best", again.runtime / 1e3, base / again.runtime,
                        tuple(again.peak_memory / 1e9), capacity))
    return rows


def markdown(rows: list[Row], cluster: Cluster, methods: list[str], budget: int, seconds: float) -> str:
    lines = [f"# Microbatched steps: best placement per M on {cluster.n_devices} devices", "",
             f"Written by `python -m experiments.benchmarks.microbatches` ({seconds:.0f} s). Methods: "
             f"{', '.join(methods)} (searches {budget} simulator calls each), each run on the graph microbatched at M "
             "(GPipe: each per-sample op's M copies of cost / M on its device, gradients accumulated, one update; "
             "`simulator/model/microbatch.py`). Speed-up: M = 1's best step time over the row's. "
             "\"M=1's best\": M = 1's best placement re-simulated at M = 4. Each copy pays the cluster's per-op "
             "idle time (delta1) and each transferred copy the per-transfer one (delta2): a graph of many small ops "
             "gains from the pipeline only while its ops' cost / M stays well above them.", "",
             "| graph | preset | M | best method | step time ms | speed-up vs M=1 | max peak GB / capacity "
             "| peak GB per device |", "|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.graph} | {r.preset} | {r.m} | {r.method} | {r.step_ms:.3f} | {r.speedup:.2f}x | "
                     f"{max(r.peak_gb):.3f} / {r.capacity_gb:.0f} | {', '.join(f'{p:.3f}' for p in r.peak_gb)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS), help="graph files")
    p.add_argument("--preset", default="placeto-k80", choices=sorted(PRESETS), help="cluster preset")
    p.add_argument("--devices", type=POSITIVE, default=4, help="devices of the preset")
    p.add_argument("--methods", type=comma_list(str), default=list(METHODS), help="comma list of baselines")
    p.add_argument("--microbatches", type=comma_list(POSITIVE), default=[1, 2, 4, 8], help="comma list of M")
    p.add_argument("--budget", type=POSITIVE, default=1000, help="simulator calls of each searching method")
    p.add_argument("--out", default=str(OUT), help="markdown table to write")
    args = p.parse_args(argv)
    cluster = cluster_preset(args.preset, args.devices)
    t0 = time.perf_counter()
    rows = []
    for spec in args.graphs:
        path, _, preset = spec.partition("@")
        on = cluster_preset(preset, args.devices) if preset else cluster
        rows += rows_for(str(ROOT / path) if not Path(path).exists() else path, on, args.methods,
                         sorted(set(args.microbatches) | {1}), args.budget)
        print(f"{path}: {time.perf_counter() - t0:.0f} s", flush=True)
    text = markdown(rows, cluster, args.methods, args.budget, time.perf_counter() - t0)
    atomic_write_bytes(args.out, text.encode())
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
