"""GDP at scale: a 50,000-node graph placed zero-shot (one forward pass + one simulation), timed, with peak memory.

Run as `python -m experiments.gdp_scale [--checkpoint RUN] [--nodes 50000] [--devices 8]`. Without a
checkpoint the default GdpConfig's freshly initialised parameters are used (the cost is the same; the quality is
not). Writes experiments/results/gdp_scale.md. Wall times: graph generation (not counted), GDP inputs (features,
topological order, padding), the first forward pass (jit compilation included), a second forward pass, the one
simulation; peak resident memory of the process (ru_maxrss).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np

from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.place import _sample, load_run
from placeto.methods.gdp.ppo import init_params, make_task
from simulator import cluster_preset, simulate
from simulator.generate import layered_dag

RESULTS = Path(__file__).parent / "results" / "gdp_scale.md"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", help="gdp run directory (default: untrained default-config parameters)")
    p.add_argument("--nodes", type=int, default=50000)
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    graph, cluster = layered_dag(args.nodes, seed=0), cluster_preset("placeto-k80", args.devices)
    t0 = time.perf_counter()
    config, params = load_run(args.checkpoint) if args.checkpoint else (GdpConfig(), None)
    task = make_task(graph, cluster, config)
    params = params if params is not None else init_params(config, task)
    t_inputs = time.perf_counter() - t0
    net = make_net(config)
    t1 = time.perf_counter()
    _, greedy = _sample(net, params, task.inputs, jax.random.key(0), 1)
    placement = np.asarray(jax.block_until_ready(greedy))[:graph.n_nodes]
    t_first = time.perf_counter() - t1
    t2 = time.perf_counter()
    jax.block_until_ready(_sample(net, params, task.inputs, jax.random.key(1), 1))
    t_second = time.perf_counter() - t2
    t3 = time.perf_counter()
    placed = simulate(graph, placement, cluster)
    t_sim = time.perf_counter() - t3
    total = time.perf_counter() - t0
    single = simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    lines = [
        "# GDP zero-shot at scale", "",
        f"Command: `{' '.join(['python -m experiments.gdp_scale', *(argv if argv is not None else sys.argv[1:])])}`",
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; policy: "
        f"{args.checkpoint or 'untrained default GdpConfig'}; hidden {config.hidden}, segment {config.segment}, "
        f"{config.attn_layers} attention layers, {config.sage_rounds} GraphSAGE rounds)", "",
        "| quantity | value |", "|---|---:|",
        f"| nodes / edges / padded nodes | {graph.n_nodes} / {graph.n_edges} / {task.inputs.nodes.shape[0]} |",
        f"| devices | {cluster.n_devices} |",
        f"| inputs (features, order, padding), s | {t_inputs:.2f} |",
        f"| first forward pass + sample (jit compile included), s | {t_first:.2f} |",
        f"| second forward pass + sample, s | {t_second:.2f} |",
        f"| one simulation, s | {t_sim:.3f} |",
        f"| **total zero-shot (inputs + first pass + simulation), s** | **{total:.2f}** |",
        f"| peak resident memory of the process, GB | {rss_gb:.2f} |",
        f"| gdp runtime, ms | {placed.runtime / 1e3:.1f}{' (OOM)' if placed.any_oom else ''} |",
        f"| single-device runtime, ms | {single.runtime / 1e3:.1f}{' (OOM)' if single.any_oom else ''} |",
        f"| lower bound, ms | {placed.lower_bound / 1e3:.1f} |",
        f"| devices used by the placement | {len(np.unique(placement))} |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
