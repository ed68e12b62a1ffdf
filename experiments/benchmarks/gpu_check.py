"""The profile -> simulate -> run loop checked on whatever accelerator this machine has (a GPU, else the CPU).

    python -m experiments.benchmarks.gpu_check     # rnnlm_l2, nmt_l2 -> results/benchmarks/gpu_check_<device>.md
    python -m experiments.benchmarks.gpu_check --graphs rnnlm_l2 --repeats 20

For each benchmark graph, on the first accelerator (the CPU when there is none):
1. the plain `jax.jit` of the training step (what a user runs without placeto), median step time;
2. the graph profiled inside the compiled step (simulator.measure.graph_profile, method "step"): the sum of the units' costs
   against the plain step (target: within 25%), beside the analytic fused-group roofline of the matching kind
   (h200 / h100 / a100 / v100 / "cpu") and the per-unit method's sum (each unit its own call, net of the floor);
3. the single-device placement run by the staged harness (simulator.hardware.plans: one jitted stage per device run)
   and by the per-unit harness (one call per unit), against the plain step (target on a GPU: within 1.3x), all
   timed in interleaved rounds (with the 2-device placement of 4.) so a change in load hits them alike;
4. a 2-device placement run for real: GPU + host CPU on a GPU machine (the 2017 paper's setting), 2 host devices
   otherwise; its measured step against the single device and against the simulator (the graph's profiled
   costs for each device kind, the calibrated cluster of those devices).
Every step is time-boxed by what it measures; all figures go to the Markdown file.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (before jax)


def _accelerator():
    import jax

    for platform in ("gpu", "tpu"):
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            continue
        if devices:
            return devices[0]
    return jax.devices("cpu")[0]


def _analytic_kind(device) -> str:
    from simulator.model.costs import SPECS

    if device.platform == "cpu":
        return "cpu"
    text = str(device.device_kind).lower()
    return next((k for k in ("h200", "h100", "a100", "v100") if k in text and k in SPECS), "h100")


def check_graph(name: str, device, repeats: int, log) -> dict:
    """Every figure of one benchmark graph (see the module docstring)."""
    import jax

    from simulator.tracing.program import graph_program
    from simulator.workloads.zoo.registry import build_program_from_data
    from simulator.measure.calibrate import profile_plan
    from simulator.measure.calibrate import cached_cluster
    from simulator.hardware.dispatch import run_plan
    from simulator.tracing.lowering import unit_order
    from simulator.hardware.plans import units_plan
    from simulator.hardware.devices import kind_of
    from simulator.model.io import load_graph
    from simulator.measure.step_profile import profile_units

    row: dict = {"graph": name}
    graph = load_graph(ROOT / "datasets" / "benchmarks" / f"{name}.json.gz")
    t0 = time.perf_counter()
    prog = graph_program(graph)
    row["retrace_note"] = prog.traced.graph.meta.get("retrace_note", "the re-trace equals the file")
    built = build_program_from_data(graph.meta["program"]["kind"], graph.meta["program"].get("kwargs", {}))
    args = jax.device_put((built.params, built.opt_state, built.batch), device)
    plain = jax.jit(built.step)

    order = unit_order(prog.units)
    sp = profile_units(prog.units, prog.values, order, device, repeats=max(3, repeats // 2), outputs=prog.outputs)
    row.update(step_sum_us=float(sp.cost_us.sum()), step_unattributed_us=sp.unattributed_us, events=sp.events,
               step_steps=sp.steps, step_attributed=sp.attributed_fraction, step_wall_us=sp.wall_us,
               step_launch_us=sp.launch_us)
    kind = _analytic_kind(device)
    row["analytic_kind"] = kind
    row["analytic_sum_us"] = float(graph.cost_for(kind).sum()) if kind in graph.costs else float("nan")
    log(f"{name}: profiled in the step {row['step_sum_us'] / 1e3:.3f} ms ({sp.steps} steps traced, "
        f"{sp.attributed_fraction:.1%} of the kernel time attributed; the step alone {sp.wall_us / 1e3:.3f} ms, "
        f"launch {sp.launch_us / 1e3:.3f} ms), analytic {kind} "
        f"{row['analytic_sum_us'] / 1e3:.3f} ms ({time.perf_counter() - t0:.0f} s)")

    single = np.zeros(len(prog.units), dtype=np.int32)
    staged = units_plan(prog.units, prog.values, single, [device], prog.outputs, None, {}, order, stages=True)
    per_unit = units_plan(prog.units, prog.values, single, [device], prog.outputs, None, {}, order, stages=False)
    row["units_sum_us"] = float(profile_plan(per_unit, repeats=3).sum())

    # a 2-device placement: the accelerator and the host CPU, else two host devices
    import jax as _jax

    second = _jax.devices("cpu")[0] if device.platform != "cpu" else _jax.devices("cpu")[1]
    pair = [device, second]
    costs = {kind_of(device): sp.cost_us}
    if kind_of(second) not in costs:
        costs[kind_of(second)] = profile_units(prog.units, prog.values, order, second, repeats=3,
                                               outputs=prog.outputs).cost_us
    g2 = graph
    for k, c in costs.items():
        g2 = g2.with_costs(k, c)
    spec = tuple((d.platform, d.id) for d in pair)
    cluster = cached_cluster(pair, spec, progress=log)  # calibrated on these two devices (cached)
    from placeto.baselines import run_method
    from simulator import simulate

    two = run_method("etf", g2, cluster, 0).placement
    row["two_devices"] = f"{pair[0].platform}:{pair[0].id} + {pair[1].platform}:{pair[1].id}"
    row["two_share"] = float(np.mean(two == 1))
    row["two_sim_us"] = float(simulate(g2, two, cluster).runtime)
    row["single_sim_us"] = float(simulate(g2, np.zeros(g2.n_nodes, np.int32), cluster).runtime)
    plan2 = units_plan(prog.units, prog.values, two, pair, prog.outputs, None, {}, None, stages=True)
    medians = interleaved_us({"plain_us": lambda: jax.block_until_ready(plain(*args)),
                              "staged_us": lambda: run_plan(staged, threads=False),
                              "per_unit_us": lambda: run_plan(per_unit, threads=False),
                              "two_us": lambda: run_plan(plan2, threads=False)}, repeats)
    row.update(medians)
    log(f"{name}: plain jit {row['plain_us'] / 1e3:.3f} ms, staged {row['staged_us'] / 1e3:.3f} ms, per unit "
        f"{row['per_unit_us'] / 1e3:.3f} ms, units alone {row['units_sum_us'] / 1e3:.3f} ms; 2 devices "
        f"({row['two_devices']}, etf, {row['two_share']:.0%} of the units on the second) {row['two_us'] / 1e3:.3f} ms, "
        f"simulated {row['two_sim_us'] / 1e3:.3f} ms ({time.perf_counter() - t0:.0f} s)")
    return row


def interleaved_us(runs: dict, repeats: int) -> dict:
    """Median microseconds of each blocking callable, timed in rounds of one call each (the order rotating by
    round, the garbage collector paused), after two untimed calls each (the first compiles)."""
    from simulator.hardware.timing import gc_paused

    for fn in runs.values():
        fn()
        fn()
    names = list(runs)
    times: dict = {k: [] for k in names}
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            with gc_paused():
                t0 = time.perf_counter()
                runs[k]()
                times[k].append((time.perf_counter() - t0) * 1e6)
    return {k: float(np.median(v)) for k, v in times.items()}


def markdown(rows: list[dict], device, argv: list[str]) -> str:
    import jax

    lines = [f"# GPU check on {device.device_kind} ({device.platform}), jax {jax.__version__}", "",
             f"Command: `python -m experiments.benchmarks.gpu_check {' '.join(argv)}`. Times in ms, medians. "
             "Targets: the "
             f"profiled costs sum within 25% of the plain jitted step; the staged single-device placement within "
             f"1.3x of it (on a GPU).", "",
             "| graph | plain jit | profiled in step (ratio) | analytic (kind, ratio) | units alone (ratio) | "
             "staged 1 device (ratio) | per-unit harness (ratio) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["plain_us"]
        lines.append(f"| {r['graph']} | {p / 1e3:.3f} | {r['step_sum_us'] / 1e3:.3f} ({r['step_sum_us'] / p:.2f}) | "
                     f"{r['analytic_sum_us'] / 1e3:.3f} ({r['analytic_kind']}, {r['analytic_sum_us'] / p:.2f}) | "
                     f"{r['units_sum_us'] / 1e3:.3f} ({r['units_sum_us'] / p:.2f}) | "
                     f"{r['staged_us'] / 1e3:.3f} ({r['staged_us'] / p:.2f}) | "
                     f"{r['per_unit_us'] / 1e3:.3f} ({r['per_unit_us'] / p:.2f}) |")
    lines += ["", "The profile in the step: kernel (GPU) or thunk (CPU) time attributed to units per traced step, the "
              "units' step timed alone (no profiler) and what it costs beyond its kernels (launch):", "",
              "| graph | steps traced | events per step | attributed | profiled | step alone | launch |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['step_steps']} | {r['events']} | {r['step_attributed']:.1%} | "
                     f"{r['step_sum_us'] / 1e3:.3f} | {r['step_wall_us'] / 1e3:.3f} | {r['step_launch_us'] / 1e3:.3f} |")
    lines += ["", "2-device placement (etf on the profiled costs of both devices), run by the staged harness:", "",
              "| graph | devices | units on the 2nd | measured | simulated | staged single device | "
              "measured / single |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['two_devices']} | {r['two_share']:.0%} | {r['two_us'] / 1e3:.3f} | "
                     f"{r['two_sim_us'] / 1e3:.3f} | {r['staged_us'] / 1e3:.3f} | "
                     f"{r['two_us'] / r['staged_us']:.2f} |")
    lines += ["", "Re-trace under this JAX:", ""] + [f"- {r['graph']}: {r['retrace_note']}" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", default="rnnlm_l2,nmt_l2", help="comma list of benchmark graphs")
    p.add_argument("--repeats", type=int, default=10, help="timed steps per measurement")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "benchmarks"),
                   help="folder for the Markdown file")
    args = p.parse_args(argv)
    ensure_host_devices(2)
    device = _accelerator()
    from simulator.hardware.devices import kind_of
    from simulator.model.io import atomic_write_bytes

    log = lambda s: print(s, flush=True)  # noqa: E731
    rows = []
    for name in [g for g in args.graphs.split(",") if g]:
        rows.append(check_graph(name, device, args.repeats, log))
    text = markdown(rows, device, argv)
    path = Path(args.out) / f"gpu_check_{kind_of(device).removeprefix('local-')}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode())
    print(text)
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
