"""How much host time the placed-execution harness (simulator.hardware.dispatch) adds to a training step.

For each graph (default: the rnnlm_l2 benchmark, 400 groups, and a small nmt family graph, nmt_002, 115 groups)
it times, in one interleaved run (simulator.hardware.timing.time_interleaved, so load changes hit every variant alike):

    plain jit          jax.jit(step) of the program on device 0: the reference (no harness)
    staged 1dev        program_plan(stages=True), every unit on device 0: one jitted stage, one dispatch
    per-unit 1dev      program_plan(stages=False): one jitted function per unit (the old harness), one thread
    staged 2dev        the 2-device placement (the benchmark's expert one, else round robin), dispatched in
                       simulator.hardware.runner.staged_order: one stage per run of a device's units
    per-unit 2dev      the same placement, one task per unit in simulated start order, one thread per device

and checks that the staged plans' outputs equal the plain step's (allclose). Prints a table of median step
times and their ratio to plain jit, and writes it to experiments/results/benchmarks/bench_harness.md.

    .venv/bin/python -m experiments.benchmarks.bench_harness [--graphs datasets/benchmarks/rnnlm_l2.json.gz ...] \
        [--repeats 5]   (about 3 min here)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)

DEFAULT_GRAPHS = ("datasets/benchmarks/rnnlm_l2.json.gz", "datasets/nmt/nmt_002.json.gz")


def bench_graph(path: Path, repeats: int) -> tuple[list[tuple[str, float, int, int]], str]:
    """[(variant, median us, dispatches per step, distinct jitted functions)] and a line about the graph."""
    import jax
    import numpy as np

    from simulator.hardware.runner import dispatch_order, staged_order
    from simulator.tracing.program import program_of
    from simulator.workloads.zoo.registry import build_program_from_data
    from simulator import load_graph, load_placement
    from simulator.model.cluster import Cluster, Device
    from simulator.hardware.dispatch import run_outputs
    from simulator.tracing.lowering import leaf_values
    from simulator.hardware.plans import program_plan
    from simulator.hardware.timing import time_interleaved
    from simulator.hardware.devices import local_devices

    graph = load_graph(path)
    traced, op_to_group, args = program_of(graph)
    values = leaf_values(traced, args)
    devices = local_devices(2)
    n = graph.n_nodes
    expert = path.parent / path.name.replace(".json.gz", ".expert_2dev.json")
    two = (load_placement(expert, graph, 2).assignment if expert.is_file() else np.arange(n) % 2).astype(np.int32)
    kind = "local-cpu" if "local-cpu" in graph.costs else "cpu"
    cluster = Cluster("bench", tuple(Device(f"/cpu:{i}", kind, 64e9) for i in range(2)), 20.0, 40.0, 1e4)
    sim_order = dispatch_order(graph, two, cluster)
    one = np.zeros(n, np.int32)

    built = build_program_from_data(graph.meta["program"]["kind"], graph.meta["program"].get("kwargs", {}))
    step = jax.jit(built.step)
    plain_args = jax.device_put((built.params, built.opt_state, built.batch), devices[0])
    plans = {
        "plain jit": _plain_plan(step, plain_args, devices),
        "staged 1dev": program_plan(traced, values, one, devices, op_to_group, graph.topo_order, stages=True),
        "per-unit 1dev": program_plan(traced, values, one, devices, op_to_group, graph.topo_order, stages=False),
        "staged 2dev": program_plan(traced, values, two, devices, op_to_group,
                                    staged_order(graph, two, sim_order), stages=True),
        "per-unit 2dev": program_plan(traced, values, two, devices, op_to_group, sim_order, stages=False),
    }
    reference = jax.tree.leaves(step(*plain_args))
    for name in ("staged 1dev", "staged 2dev", "per-unit 2dev"):
        got = jax.tree.leaves(run_outputs(plans[name]))
        if len(got) != len(reference) or not all(np.allclose(a, b, rtol=1e-4, atol=1e-5)
                                                 for a, b in zip(got, reference)):
            raise SystemExit(f"{graph.name}: {name} outputs differ from the plain jitted step")
    times = time_interleaved(list(plans.values()), repeats, warmup=2)
    rows = []
    for (name, plan), t in zip(plans.items(), times):
        fns = len({id(task.fn) for task in plan.tasks if task.fn is not None})
        rows.append((name, float(np.median(t)), sum(task.fn is not None for task in plan.tasks), fns))
    return rows, f"{graph.name}: {n} units; 2-device placement: {'expert' if expert.is_file() else 'round robin'}"


def _plain_plan(step, args: tuple, devices):
    """A one-task Plan running the plain jitted step on device 0, so time_interleaved times it as the others."""
    import jax.numpy as jnp

    from simulator.hardware.dispatch import Plan, Task

    def fn(token, *a):
        return token, step(*a)

    resident = {("token", d): jnp.zeros((), jnp.int8) for d in range(len(devices))}
    resident.update(((f"arg{k}", 0), x) for k, x in enumerate(args))
    task = Task(0, 0, fn, tuple(f"arg{k}" for k in range(len(args))), ("out",), ())
    return Plan((task,), resident, (), None, tuple(devices), True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--graphs", nargs="+", default=list(DEFAULT_GRAPHS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(ROOT / "experiments/results/benchmarks/bench_harness.md"))
    args = p.parse_args(argv)
    ensure_host_devices(2)  # before anything imports jax
    import jax

    lines = [(f"# Harness overhead (experiments/benchmarks/bench_harness.py, jax {jax.__version__}, "
              f"{jax.devices()[0].platform}, median of {args.repeats} interleaved steps)"), ""]
    for g in args.graphs:
        t0 = time.perf_counter()
        rows, about = bench_graph(ROOT / g, args.repeats)
        plain = rows[0][1]
        lines += [f"## {about}", "", "| variant | step ms | x plain jit | dispatches/step | jitted functions |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {name} | {us / 1e3:.3f} | {us / plain:.2f} | {d} | {f} |" for name, us, d, f in rows]
        lines += ["", f"({time.perf_counter() - t0:.0f} s including compilation)", ""]
        print("\n".join(lines[-len(rows) - 6:]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
