"""Do the units' profiled costs add up, stage by stage, to what the rig's stages take?

`eval --hardware` costs each unit by its kernel time inside one compiled step (`--costs step`, every unit's
outputs materialised; `HardwareRunner.with_step_costs`), scaled so that they add up to the whole step run as one
stage on the rig (`HardwareRunner.with_rig_costs`). The staged simulation then sums the units of each stage of a
placement. This checks that sum stage by stage, without any placement a placer chose:

1. the units, in the rig's dispatch order, are cut into `--chunks` runs of equal profiled cost, and the runs
   alternate between the rig's first two workers (one stage per run: a chain of stages, each worker idle while
   the other computes, so no contention);
2. the plan runs `--steps` times after 2 warm-up steps; the step of median wall time is kept
   (simulator.measure.rig_step.measured_step) with every worker's "run" events: each stage's own time on its worker
   (its launch and its units; the transfers are separate events);
3. each stage's measured time is set beside its simulated cost (its units' scaled profiled costs plus the fitted
   launch), as a ratio.

A ratio of 1 everywhere means the profile splits the step's time over its units as the stages take it. The
spread of the ratios is what the profile gets wrong where a placement cuts the step. Prints and writes --out
(markdown; JSON beside it).

    python -m experiments.benchmarks.stage_attribution                      # inception_v3, 16 runs: ~3 min
    python -m experiments.benchmarks.stage_attribution --graph datasets/nmt/nmt_004.json.gz --out /tmp/sa.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)

OUT = ROOT / "experiments" / "results" / "benchmarks" / "stage_attribution.md"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--graph", default="datasets/benchmarks/inception_v3.json.gz", help="graph file")
    p.add_argument("--chunks", type=int, default=16, help="runs of equal profiled cost, alternating workers")
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median one is kept)")
    p.add_argument("--out", type=Path, default=OUT, help="markdown report (JSON beside it)")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    import numpy as np

    from simulator.measure.boundary_costs import chunked
    from simulator.measure.calibrate import cached_cluster
    from simulator.hardware.runner import hardware_runner
    from simulator.measure.rig_step import measured_step
    from simulator import load_graph
    from simulator.hardware.devices import local_devices
    from simulator.engine.staged import simulate_staged

    graph = load_graph(args.graph)
    cluster = cached_cluster(local_devices(2), 2, progress=print)
    runner = hardware_runner(graph, cluster, devices=2, rig="processes")
    try:
        runner = runner.with_step_costs().with_rig_costs(progress=print)
        graph, kind, costs = runner.graph, runner.cluster.kinds[0], runner.rig_costs
        order = runner.order(np.zeros(graph.n_nodes, dtype=np.int32))
        placement = chunked(graph.cost_for(kind), order, runner.holders, args.chunks)
        stages = simulate_staged(graph, placement, runner.cluster, runner.order(placement), costs,
                                 runner.holders).stages
        step = measured_step(runner, placement, steps=args.steps)
    finally:
        runner.close()
    rows = []
    for d in (0, 1):
        measured = [(e[3] - e[2]) / 1e3 for e in step.events.get(d, []) if e[0] == "run"]
        ours = [s for s in range(len(stages.runs)) if stages.placement[s] == d and not stages.holder[s]]
        if len(measured) != len(ours):
            raise SystemExit(f"worker {d}: {len(measured)} stages ran, {len(ours)} simulated")
        rows += [{"stage": s, "worker": d, "units": len(stages.runs[s]), "measured_us": m,
                  "simulated_us": float(stages.work[s] + costs.launch_us),
                  "names": [graph.names[u] for u in stages.runs[s][:3]]} for s, m in zip(ours, measured)]
    rows.sort(key=lambda r: r["stage"])
    return {"graph": args.graph, "name": graph.name, "chunks": args.chunks, "wall_us": step.wall_ns / 1e3,
            "rows": rows}


def markdown(res: dict, command: str) -> str:
    import numpy as np

    rows = res["rows"]
    ratio = np.asarray([r["measured_us"] / r["simulated_us"] for r in rows if r["simulated_us"] > 0])
    big = [r for r in rows if r["simulated_us"] >= 1000 or r["measured_us"] >= 1000]
    lines = [f"# Profiled unit costs against the rig's stages: {res['name']}", "", f"Command: `{command}`", "",
             f"The units in dispatch order, cut into {res['chunks']} runs of equal profiled cost alternating between "
             f"2 rig workers: {len(rows)} stages, step {res['wall_us'] / 1e3:.1f} ms (median of the timed steps). "
             "*measured*: the stage's run on its worker; *simulated*: its units' profiled costs (scaled to the "
             "rig) plus the fitted launch.", "",
             f"- measured / simulated over the stages: median {np.median(ratio):.2f}, 10th-90th percentile "
             f"{np.percentile(ratio, 10):.2f}-{np.percentile(ratio, 90):.2f}, min {ratio.min():.2f}, max "
             f"{ratio.max():.2f}",
             f"- sums: measured {sum(r['measured_us'] for r in rows) / 1e3:.1f} ms, simulated "
             f"{sum(r['simulated_us'] for r in rows) / 1e3:.1f} ms", "",
             "Stages of 1 ms or more (measured or simulated):", "",
             "| stage | worker | units (the first 3) | measured ms | simulated ms | ratio |",
             "|---|---|---|---|---|---|"]
    for r in big:
        names = ", ".join(f"`{n}`" for n in r["names"]) + (", ..." if r["units"] > len(r["names"]) else "")
        lines.append(f"| {r['stage']} | {r['worker']} | {r['units']}: {names} | {r['measured_us'] / 1e3:.2f} | "
                     f"{r['simulated_us'] / 1e3:.2f} | {r['measured_us'] / max(r['simulated_us'], 1e-9):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.chunks < 2:
        raise SystemExit("--chunks must be >= 2")
    ensure_host_devices(2)
    command = "python -m experiments.benchmarks.stage_attribution " + " ".join(sys.argv[1:] if argv is None
                                                                              else argv)
    res = run(args)
    text = markdown(res, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
