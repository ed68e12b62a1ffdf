"""Do D CPU devices really run at once? D chains of matmuls together against one after the other, three ways.

JAX's host "devices" of one process are labels over one shared thread pool (two jitted chains of
700x700 matmuls on cpu:0 and cpu:1 overlapped 1.16x on this 2-core machine), so a placement over them cannot be
measured faster than one device. In one run, interleaved round by round (simulator.measure.concurrency.measure):

    host devices      one process, --xla_force_host_platform_device_count=D, XLA threading off: a chain per device
    process rig       simulator.hardware.rig.pool: one worker process per device, its own single-core JAX client
    process rig, pinned   the same, worker d pinned to core d (os.sched_setaffinity)
    numpy threads     D Python threads doing the same matmuls in NumPy, BLAS single-threaded: the ceiling

speedup = (the D chains one after the other) / (all at once): D when the devices run fully at once, 1 when they
take turns. The target: the process rig >= 1.8x at 2 devices.

With --graph G (and --methods, --placement P.json ...): also placed steps of G (its zoo program), every placement and the single
device (every unit on device 0) on both rigs, interleaved in one set of rounds: the threads rig (this process's
host devices, staged as simulator.hardware.runner.HardwareRunner runs them) and the process rig with each device's units
kept together (`staged`, few stages) or in simulated start order (`simulated`, more and shorter stages). The
simulation cluster is the calibration `place --hardware` cached for these devices (calibrated now if none), the
profile the one-core one `place --hardware --rig processes` uses (both rigs are simulated with it).

Writes experiments/results/benchmarks/rig_concurrency.md (the tables, the command, the machine's load before and
after; --out elsewhere).

    .venv/bin/python -m experiments.benchmarks.rig_concurrency [--devices 2] [--rounds 9] [--size 700] [--length 8]
        [--graph datasets/benchmarks/inception_v3.json.gz --methods etf,m-sct --placement P.json ... --repeats 7]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy starts: the NumPy ceiling is single-core chains
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)

OUT = ROOT / "experiments" / "results" / "benchmarks" / "rig_concurrency.md"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Writes " + str(OUT.relative_to(ROOT)))
    p.add_argument("--devices", type=int, default=2, help="devices (chains run at once)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (medians reported)")
    p.add_argument("--size", type=int, default=700, help="matrix side")
    p.add_argument("--length", type=int, default=8, help="matmuls per chain")
    p.add_argument("--graph", help="also time placed steps of this zoo graph on both rigs")
    p.add_argument("--placement", nargs="*", default=[], help="placement files of --graph")
    p.add_argument("--methods", default="etf,m-sct,local-search",
                   help="also place --graph with these methods against the cached cluster, --seconds each, as "
                        "`place --hardware` does (comma list; empty: none)")
    p.add_argument("--seconds", type=float, default=2.0, help="seconds per method")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per placed plan (medians reported)")
    p.add_argument("--out", default=str(OUT), help="markdown file to write")
    args = p.parse_args(argv)
    if args.devices < 1 or args.rounds < 1 or args.size < 1 or args.length < 1:
        p.error("--devices, --rounds, --size and --length must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ensure_host_devices(args.devices)  # before jax: D host devices, XLA threading off
    import jax

    from simulator.measure import concurrency as cc
    from simulator.hardware.rig.pool import ProcessRig

    load_before = os.getloadavg()
    with ProcessRig(args.devices) as rig, ProcessRig(args.devices, pin=True) as pinned:
        ways = {"host devices (one process)": cc.host_chains(jax.devices()[:args.devices], args.size, args.length),
                "process rig": cc.rig_chains(rig, args.size, args.length),
                "process rig, pinned": cc.rig_chains(pinned, args.size, args.length),
                "numpy threads (ceiling)": cc.numpy_chains(args.devices, args.size, args.length)}
        result = cc.measure(ways, args.rounds)
    load_after = os.getloadavg()
    placed = (f" --graph {args.graph} --methods {args.methods} --seconds {args.seconds:g} --repeats {args.repeats}"
              + "".join(f" --placement {p}" for p in args.placement) if args.graph else "")
    command = ("`.venv/bin/python -m experiments.benchmarks.rig_concurrency --devices "
               f"{args.devices} --rounds {args.rounds} --size {args.size} --length {args.length}{placed}`")
    lines = [f"# Do {args.devices} CPU devices run at once? {args.devices} chains of {args.length} matmuls of "
             f"{args.size}x{args.size}", "",
             f"{command}; {os.cpu_count()} cores; 1-minute load {load_before[0]:.2f} before, {load_after[0]:.2f} "
             f"after; jax {jax.__version__}; medians of {args.rounds} interleaved rounds "
             "(simulator.measure.concurrency.measure). speedup = one after the other / all at once "
             f"({args.devices}x: fully concurrent; 1x: taking turns).", "",
             "| way | together ms | one after the other ms | speedup |", "|---|---:|---:|---:|"]
    for name, o in result.items():
        lines.append(f"| {name} | {o.together_us / 1e3:.2f} | {o.apart_us / 1e3:.2f} | {o.speedup:.2f}x |")
    if args.graph:
        lines += ["", *placed_section(args)]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"-> {args.out}")
    return 0


def placed_section(args: argparse.Namespace) -> list[str]:
    """Markdown lines: the placed steps of --graph (see the module docstring)."""
    import numpy as np

    from simulator.measure.calibrate import cached_cluster
    from simulator.hardware.runner import hardware_runner
    from placeto.harness.on_hardware import ensure_profile
    from simulator import simulate
    from simulator.hardware.devices import local_devices
    from simulator.model.io import load_graph
    from simulator.model.placement_file import load_placement
    from simulator.hardware.timing import time_interleaved, timing_of

    graph = load_graph(args.graph)
    devices = local_devices(args.devices)
    graph = ensure_profile(graph, args.graph, devices, one_core=True)  # as `place --hardware --rig processes`
    cluster = cached_cluster(devices, args.devices)
    placements = {"single device": np.zeros(graph.n_nodes, np.int32)}
    placements.update((Path(p).name, load_placement(p, graph, args.devices).assignment) for p in args.placement)
    methods = [m for m in args.methods.split(",") if m]
    if methods:
        from placeto.harness.on_hardware import rank_candidates

        ranked, _ = rank_candidates(graph, cluster, methods, args.seconds)
        placements.update((c.name, c.placement) for c in ranked if c.name != "single device")
    threads = hardware_runner(graph, cluster, devices=args.devices, rig="threads")
    procs = hardware_runner(graph, cluster, devices=args.devices, rig="processes")
    names, plans = [], []
    try:
        for name, p in placements.items():
            for how, runner, order in (("threads", threads, "staged"), ("processes", procs, "staged"),
                                       ("processes", procs, "simulated")):
                if order == "simulated" and len(set(p.tolist())) == 1:
                    continue  # one device: one stage either way
                runner.stage_order = order
                names.append((name, how, order, float(simulate(graph, p, cluster).runtime)))
                plans.append(runner.runnable(p))
        load = os.getloadavg()[0]
        times = [timing_of(t) for t in time_interleaved(plans, args.repeats, 2)]
    finally:
        for plan in plans:
            getattr(plan, "close", lambda: None)()
        procs.close()
    base = {how: t.median_us for (name, how, _, _), t in zip(names, times) if name == "single device"}
    out = [f"## Placed steps: {graph.name} on {args.devices} devices", "",
           f"1-minute load {load:.2f} at the start of the rounds; {args.repeats} interleaved rounds, medians; "
           f"cluster {cluster.name} (cached calibration); speedup: the same rig's single device over the placement.",
           "", "| placement | rig | stage order | stages | simulated ms | measured ms [IQR] | vs single device |",
           "|---|---|---|---:|---:|---|---:|"]
    for (name, how, order, sim), t, plan in zip(names, times, plans):
        stages = plan.n_stages if how == "processes" else sum(task.fn is not None for task in plan.tasks)
        out.append(f"| {name} | {how} | {order} | {stages} | {sim / 1e3:.1f} | {t.median_us / 1e3:.1f} "
                   f"[{t.q25_us / 1e3:.1f}-{t.q75_us / 1e3:.1f}] | {base[how] / t.median_us:.2f}x |")
    return out


if __name__ == "__main__":
    sys.exit(main())
