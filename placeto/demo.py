"""`make demo`: the main job end to end on an embedded default, printing a result table and writing plots.

Run as `python -m placeto.demo --out demo_out`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from simulator import cluster_preset, save_graph, save_placement, simulate
from simulator.generate import layered_dag
from simulator.plots import gantt


def simple_placements(n_nodes: int, topo_order: np.ndarray, n_devices: int, seed: int) -> dict[str, np.ndarray]:
    """Single-device, uniform random and round-robin (over the topological order) placements."""
    rr = np.empty(n_nodes, dtype=np.int32)
    rr[topo_order] = np.arange(n_nodes) % n_devices
    return {
        "single": np.zeros(n_nodes, dtype=np.int32),
        "random": np.random.default_rng(seed).integers(0, n_devices, n_nodes).astype(np.int32),
        "round-robin": rr,
    }


def simulator_section(out: Path, seed: int) -> None:
    graph = layered_dag(400, seed=seed)
    save_graph(graph, out / "demo_graph.json.gz")
    print(f"\n== Simulator: random layered graph {graph.name} ({graph.n_nodes} nodes, {graph.n_edges} edges) ==")
    print(f"{'devices':>7} {'placement':<12} {'runtime ms':>11} {'x lower bd':>10} {'sim ms':>7}  oom")
    for n_dev in (2, 4, 8):
        cluster = cluster_preset("placeto-k80", n_dev)
        for name, placement in simple_placements(graph.n_nodes, graph.topo_order, n_dev, seed).items():
            t0 = time.perf_counter()
            result = simulate(graph, placement, cluster)
            took = (time.perf_counter() - t0) * 1e3
            print(f"{n_dev:>7} {name:<12} {result.runtime / 1e3:>11.3f} {result.ratio:>10.3f} {took:>7.2f}  "
                  f"{'OOM' if result.any_oom else '-'}")
            save_placement(out / f"demo_{name}_{n_dev}dev.json", placement, cluster.device_names)
            if n_dev == 4 and name == "round-robin":
                gantt(result, cluster, out / "gantt_round_robin_4dev.png",
                      title=f"{graph.name}: round-robin on 4 K80s, {result.runtime / 1e3:.2f} ms")
    print(f"Gantt chart: {out / 'gantt_round_robin_4dev.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_out", help="folder for files and plots")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    simulator_section(out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
