"""Is a placement's measured speedup on host CPU devices from running the devices at once, or from the stages?

Why ask: on a 2-core machine a 2-device placement of nmt_004 measured ~3x the single device while the two
host devices run independent work only ~1.1x as fast as one. In one interleaved run (simulator.hardware.timing), on 2 host
devices (placeto's rig: one core each):

    single device            every unit on device 0, one jitted stage (the `place --hardware` single device)
    <method> on 2 devices    the method's placement (etf, m-sct against analytic "cpu" costs), staged as
                             simulator.hardware.runner.HardwareRunner runs it
    <method> stages, 1 dev   the SAME stages (the placement's stage boundaries) with every stage on device 0
    k slices, 1 dev          the step cut into k consecutive slices of its topological order, all on device 0
    one task per unit        every unit its own jitted call on device 0

If the same stages on one device are as fast as on two, the gain is the split, not the devices.
Writes experiments/results/benchmarks/staged_speedup.md.

    .venv/bin/python -m experiments.benchmarks.staged_speedup [--graph datasets/nmt/nmt_004.json.gz] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)


def plans_of(path: str) -> tuple[list[str], list]:
    """(names, plans) of the variants above, for the graph file at `path`."""
    import numpy as np

    from placeto.baselines import run_method
    from simulator.hardware.runner import dispatch_order, hardware_runner, staged_order
    from simulator.tracing.program import program_of
    from simulator.model.cluster import Cluster, Device
    from simulator.model.io import load_graph
    from simulator.tracing.lowering import leaf_values
    from simulator.hardware.plans import program_plan

    graph = load_graph(path)
    cluster = Cluster("rig", tuple(Device(f"/cpu:{i}", "cpu", 64e9) for i in range(2)), 20.0, 30.0, 1e3)
    runner = hardware_runner(graph, cluster, devices=2)
    d0 = runner.devices[0]
    traced, op_to_group, args = program_of(graph)
    values = leaf_values(traced, args, 0)
    names, plans = ["single device (1 stage)"], [runner.plan(np.zeros(graph.n_nodes, np.int32))]
    for method in ("etf", "m-sct"):
        p = run_method(method, graph, cluster, 0).placement
        order = staged_order(graph, p, dispatch_order(graph, p, cluster))
        names += [f"{method} on 2 devices", f"{method} stages, 1 dev"]
        plans += [runner.plan(p), program_plan(traced, values, p, [d0, d0], op_to_group, order, True)]
    position = np.empty(graph.n_nodes, np.int64)
    position[graph.topo_order] = np.arange(graph.n_nodes)
    for k in (2, 8):
        p = (position * k // graph.n_nodes).astype(np.int32)  # slice j of the topological order: label j
        names.append(f"{k} slices, 1 dev")
        plans.append(program_plan(traced, values, p, [d0] * k, op_to_group, graph.topo_order, True))
    names.append("one task per unit, 1 dev")
    plans.append(program_plan(traced, values, np.zeros(graph.n_nodes, np.int32), [d0], op_to_group,
                              graph.topo_order, False))
    return names, plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="datasets/nmt/nmt_004.json.gz")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    ensure_host_devices(2)
    import numpy as np

    from simulator.measure.concurrency import measure_concurrency
    from simulator.hardware.timing import time_interleaved, timing_of

    names, plans = plans_of(args.graph)
    load = os.getloadavg()[0]
    times = time_interleaved(plans, args.repeats, warmup=2)
    c = measure_concurrency(2)
    base = float(np.median(times[0]))
    lines = [f"# Staged speedup on one device: {Path(args.graph).name}, 2 host devices", "",
             f"`.venv/bin/python -m experiments.benchmarks.staged_speedup --graph {args.graph} --repeats "
             f"{args.repeats}`; {os.cpu_count()} cores, 1-minute load {load:.1f} at the start; the devices ran "
             f"independent work {c.speedup:.2f}x as fast as one.", "",
             "| variant | stages (dispatches) | median ms | IQR ms | vs single device |", "|---|---:|---:|---|---:|"]
    for name, plan, t in zip(names, plans, times):
        m = timing_of(t)
        lines.append(f"| {name} | {len(plan.tasks)} | {m.median_us / 1e3:.2f} | {m.q25_us / 1e3:.2f}-"
                     f"{m.q75_us / 1e3:.2f} | {base / m.median_us:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "experiments" / "results" / "benchmarks" / "staged_speedup.md"
    out.write_text(text)
    print(f"-> {out}")


if __name__ == "__main__":
    main()
