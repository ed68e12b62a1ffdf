"""The hierarchical planner on a raw op graph: nmt_l8 traced, not grouped (26,206 ops), trained from scratch.

The seed's point (Mirhoseini et al. 2018): the Grouper learns the grouping, so no prior colocation or coarsening is
needed. Traces the nmt_l8 benchmark program (simulator.workloads.families.trace_spec; analytic costs), then trains the
hierarchical planner on the op graph inside a budget of simulator calls and wall minutes (the compare row,
placeto.methods.sequence.place.train_in_budget) and reports its best placement beside single-device and the
human expert's (one LSTM layer per device, simulator.workloads.families.expert_op_placement), the time per update and the peak
resident memory. Writes experiments/results/reproduce/hierarchical_scale.md.

    python -m experiments.reproduce.hierarchical_scale [--devices 8] [--calls 10000] [--minutes 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.workloads.families import benchmark_specs, expert_op_placement, trace_spec  # noqa: E402
from placeto.methods.sequence.place import train_in_budget  # noqa: E402
from simulator.workloads.zoo import build_program  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="nmt_l8", help="a benchmark model with expert layer groups")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "reproduce" / "hierarchical_scale.md")
    args = p.parse_args(argv)
    spec = next(s for s in benchmark_specs() if s.name == args.model)
    t0 = time.perf_counter()
    _, traced = trace_spec(spec)
    graph, t_trace = traced.graph, time.perf_counter() - t0
    cluster = cluster_preset("placeto-k80", args.devices)
    single = simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster)
    layers = build_program(spec.kind, **spec.kwargs).meta["layer_groups"]
    expert = simulate(graph, expert_op_placement(graph, layers, args.devices), cluster)
    run, compile_s = train_in_budget("hierarchical", graph, cluster, args.seed, args.calls, 60 * args.minutes)
    placed = simulate(graph, run.placement, cluster)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    command = " ".join(["python -m experiments.reproduce.hierarchical_scale",
                        *(argv if argv is not None else sys.argv[1:])])
    oom = lambda r: " (OOM)" if r.any_oom else ""  # noqa: E731
    lines = [f"# The hierarchical planner on the raw {args.model} op graph", "",
             f"`{command}` ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; default "
             f"HierarchicalConfig, seed {args.seed}; placeto-k80 x {args.devices})", "",
             "| quantity | value |", "|---|---:|",
             f"| ops / edges | {graph.n_nodes} / {graph.n_edges} |",
             f"| tracing, s | {t_trace:.1f} |",
             f"| compilation (excluded from the budget), s | {compile_s:.1f} |",
             f"| training: simulator calls, wall s | {run.simulator_calls}, {run.seconds:.1f} |",
             f"| seconds per update of 16 placements | {16 * run.seconds / max(run.simulator_calls, 1):.2f} |",
             f"| peak resident memory of the process, GB | {rss:.2f} |",
             f"| single device, ms | {single.runtime / 1e3:.1f}{oom(single)} |",
             f"| human expert (a layer per device), ms | {expert.runtime / 1e3:.1f}{oom(expert)} |",
             f"| **hierarchical, best placement, ms** | **{placed.runtime / 1e3:.1f}{oom(placed)}** |",
             f"| hierarchical / single | {placed.runtime / single.runtime:.3f} |",
             f"| hierarchical / expert | {placed.runtime / expert.runtime:.3f} |",
             f"| lower bound, ms | {placed.lower_bound / 1e3:.1f} |",
             f"| devices used | {len(np.unique(run.placement))} |"]
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
