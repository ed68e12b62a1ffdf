"""Does `eval --hardware` (its defaults, no refit) predict placed steps on the process rig? Staged vs per-unit.

For each graph, on D devices (`--devices`, default 2) of the process rig (`--rig processes`: one pinned
single-core JAX worker process per device, simulator.hardware.rig.pool), as `placeto eval --hardware` runs it by
default (placeto.harness.evaluate.evaluate, the function eval calls, with the runner eval builds):

1. the units' costs measured inside one compiled step on one core, every unit's outputs materialised as the
   rig's stages are (`--costs step`: HardwareRunner.with_step_costs; simulator.hardware.plans.materialises);
2. the rig's costs (HardwareRunner.with_rig_costs): a stage's launch and inputs, a send's and a receive's fixed,
   per-value and per-byte costs, fitted to the events of placements of a calibration training step
   (simulator.measure.rig_workload; cached beside the calibration), the units' costs scaled to the whole step run as one
   stage on the rig, the per-MB charges of values crossing stages and factors of the cached launch and transfer
   costs fitted on the graph cut into runs alternating between two workers (simulator.measure.boundary_costs), and the
   graph's contention (its whole step on two workers at
   once against alone: simulator.measure.rig_step.graph_contention);
3. placements: the single device, etf, m-sct, m-topo, heft, metis, local search (`--seconds` each, on the
   per-unit model, as `place --hardware` searches), round-robin by unit and a uniform random one (distinct
   placements only);
4. measured: every placement's step on the rig, interleaved rounds (simulator.hardware.timing.time_interleaved), medians;
   the units' costs are then scaled again to the single device's median step in those same rounds
   (HardwareRunner.simulate_and_measure, as eval does): the model's anchor, so the single device's staged time
   equals its measured one by construction and it is left out of the staged column's statistics;
5. simulated: *staged*, what eval prints (HardwareRunner.simulate: simulator.engine.staged.simulate_staged on the
   stages the rig runs), and *per-unit* (simulator.simulate on the calibrated cluster: what eval printed before).

Reported per graph and model: Spearman rank correlation and median |error| against the measured medians over the
placements other than the single device (the anchor; targets: >= 0.9 and <= 15%), and every
placement's row. Each graph runs in a fresh process, as eval runs one
graph per command. The machine's 1-minute load is recorded before and after each graph. Writes --out (markdown)
and the same data as JSON beside it.

    python -m experiments.benchmarks.staged_fidelity          # the 4 graphs: about 30 minutes on 2 cores
    python -m experiments.benchmarks.staged_fidelity --graphs datasets/ptb/ptb_006.json.gz --repeats 3 \
        --out /tmp/sf.md                                      # one graph, a few minutes
    python -m experiments.benchmarks.staged_fidelity --dump /tmp/sf  # and what each graph's model was fitted and
                                                      # checked on (record_of), to simulate the measurements again
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)
from simulator.model.io import atomic_write_bytes  # noqa: E402

GRAPHS = ("datasets/benchmarks/inception_v3.json.gz", "datasets/benchmarks/nmt_l2.json.gz",
          "datasets/nmt/nmt_004.json.gz", "datasets/ptb/ptb_006.json.gz")
METHODS = ("etf", "m-sct", "m-topo", "heft", "metis", "local-search")
OUT = ROOT / "experiments" / "results" / "benchmarks" / "staged_fidelity.md"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--graphs", nargs="+", default=list(GRAPHS), help="graph files (default: the 4 of the issue)")
    p.add_argument("--devices", type=int, default=2, help="host devices of the process rig (2 here, 4 on "
                   "a 16-core machine)")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per placement (interleaved rounds)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per placement first (the first compiles)")
    p.add_argument("--seconds", type=float, default=2.0, help="budget of each searching placer (local search)")
    p.add_argument("--costs", choices=("step", "units"), default="step",
                   help="the units' costs: measured inside one compiled step (eval's default) or each unit alone "
                        "as its own call, net of the dispatch floor (eval --costs units); both on one core")
    p.add_argument("--out", type=Path, default=OUT, help="markdown report (JSON beside it)")
    p.add_argument("--dump", type=Path, help="also write, per graph, <name>.json in this folder: what the staged "
                   "model was fitted and checked on (record_of), to simulate the same measurements again")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # run the one graph here, write its result there
    return p.parse_args(argv)


def load_1min() -> float:
    return os.getloadavg()[0]


def placements(graph, cluster, seconds: float, n_devices: int) -> list[tuple[str, "np.ndarray"]]:
    """[(name, int32[N])]: single device, METHODS (on the per-unit model), round-robin, random; distinct."""
    import numpy as np

    from placeto.harness.on_hardware import rank_candidates

    ranked, single = rank_candidates(graph, cluster, METHODS, seconds, progress=lambda line: print(line))
    found = {c.placement.tobytes(): (c.name, c.placement) for c in [single] + ranked}
    n = graph.n_nodes
    extra = [("round-robin", np.arange(n, dtype=np.int32) % n_devices),
             ("random", np.random.default_rng(0).integers(0, n_devices, n).astype(np.int32))]
    for name, p in extra:
        found.setdefault(p.tobytes(), (name, p))
    return list(found.values())


def run_graph(path: str, args: argparse.Namespace) -> dict:
    import numpy as np

    from simulator.measure.calibrate import cached_cluster
    from placeto.harness.evaluate import evaluate
    from simulator.hardware.runner import hardware_runner
    from simulator import load_graph, simulate
    from simulator.hardware.devices import local_devices
    from simulator.engine.staged import stage_runs

    load_before = load_1min()
    graph = load_graph(path)
    d = args.devices
    cluster = cached_cluster(local_devices(d), d, progress=print)
    runner = hardware_runner(graph, cluster, devices=d, rig="processes")
    try:
        t0 = time.time()
        runner = runner.with_step_costs(args.repeats) if args.costs == "step" else runner.with_unit_costs(args.repeats)
        graph = runner.graph
        profile_s = time.time() - t0
        said = []

        def say(line: str) -> None:
            said.append(line)
            print(line, flush=True)

        runner = runner.with_rig_costs(progress=say)  # what eval --hardware simulates with on the process rig
        print(f"{graph.name}: rig costs {runner.rig_costs}", flush=True)
        chosen = placements(graph, cluster, args.seconds, d)
        evaluated = evaluate(graph, chosen, cluster, runner, args.repeats, args.warmup, say)  # eval's rows
        scales = {key: float(m.group(1)) for line in said for key, pattern in
                  (("start", r"costs scaled by ([\d.]+)"), ("rounds", r"costs scaled again by ([\d.]+)"),
                   ("stages", r"launch costs x([\d.]+)"), ("transfers", r"transfers' x([\d.]+)"))
                  for m in [re.search(pattern, line)] if m}
        rows = []
        for (name, p), row in zip(chosen, evaluated):
            timing = row.measured
            rows.append({"name": name, "measured_us": timing.median_us, "q25_us": timing.q25_us,
                         "q75_us": timing.q75_us, "times_us": np.asarray(timing.times_us).tolist(),
                         "per_unit_us": float(simulate(graph, p, cluster).runtime),
                         "staged_us": row.simulated_us, "stages": len(stage_runs(p, runner.order(p), runner.holders)),
                         "off_device0": float(np.mean(p != 0))})
            print(f"  {name:<14} measured {timing.median_us / 1e3:9.2f} ms  per-unit "
                  f"{rows[-1]['per_unit_us'] / 1e3:9.2f}  staged {row.simulated_us / 1e3:9.2f} "
                  f"({rows[-1]['stages']} stages)", flush=True)
        record = record_of(runner, graph, path, chosen, evaluated) if args.dump else None
    finally:
        runner.close()
    if record is not None:
        atomic_write_bytes(args.dump / f"{graph.name}.json", json.dumps(record).encode())
    return {"graph": path, "name": graph.name, "n_units": graph.n_nodes, "devices": d, "costs": args.costs,
            "rows": rows,
            "rig_costs": vars(runner.rig_costs), "scales": scales, "profile_s": profile_s, "load_before": load_before,
            "load_after": load_1min(),
            "cluster": {"delta1_us": cluster.delta1_us, "latency_us": cluster.latency_us}}


def record_of(runner, graph, path: str, chosen, evaluated) -> dict:
    """What the staged model was fitted and checked on, as JSON (`--dump`): the graph's name and file (`path`), the
    profiled units' costs (`graph`'s, before any scaling), the cached rig costs, the single device's step at the
    rig's start, the chunked plan's observed stages and batches (simulator.measure.boundary_costs.Observed), the contention,
    and every placement with its dispatch order, its measured median and quartiles and what eval simulated: enough
    to simulate the same placements again with another fit of the same measurements (no rig needed)."""
    import numpy as np

    fit = runner.rig_fit
    if fit is None or fit.observed is None:
        raise SystemExit("staged_fidelity --dump: the rig's costs were not fitted on the graph (2 or more devices "
                         "of the process rig are needed)")
    kind = runner.cluster.kinds[0]
    return {"graph": graph.name, "path": path, "kind": kind, "profiled_us": graph.cost_for(kind).tolist(),
            "holders": np.asarray(runner.holders).tolist(), "cached": vars(fit.cached), "step_us": fit.step_us,
            "observed": {k: np.asarray(v).tolist() for k, v in fit.observed._asdict().items()},
            "contention": runner.rig_costs.contention,
            "placements": [{"name": name, "placement": np.asarray(p).tolist(),
                            "order": runner.order(p).tolist(), "measured_us": row.measured.median_us,
                            "q25_us": row.measured.q25_us, "q75_us": row.measured.q75_us,
                            "staged_us": row.simulated_us} for (name, p), row in zip(chosen, evaluated)]}


def counted(rows: list[dict]) -> list[dict]:
    """The rows the statistics count: every placement but the single device (the staged model's anchor)."""
    return [r for r in rows if r.get("off_device0", 1.0) > 0]


def summary(rows: list[dict], key: str) -> tuple[float, float]:
    """(Spearman, median |error| %) of rows[key] against the measured medians, over the placements other than the
    single device (the staged model's anchor: its units' costs are scaled to its step in the rounds; left out of
    both models' statistics, so that they are over the same placements)."""
    import numpy as np

    from simulator.measure.agreement import spearman

    rows = counted(rows)
    sim = np.asarray([r[key] for r in rows])
    meas = np.asarray([r["measured_us"] for r in rows])
    return spearman(sim, meas), float(np.median(np.abs(sim - meas) / meas * 100))


def halves(rows: list[dict]) -> float | None:
    """Spearman of the counted placements' medians over the even rounds against the odd ones (`times_us`, in the
    rounds' order): how well the measurement ranks them against itself, a ceiling for any model's Spearman; None
    for results written without every step's time."""
    import numpy as np

    from simulator.measure.agreement import spearman

    rows = counted(rows)
    if not rows or any(len(r.get("times_us", ())) < 2 for r in rows):
        return None
    return spearman(np.asarray([np.median(r["times_us"][0::2]) for r in rows]),
                    np.asarray([np.median(r["times_us"][1::2]) for r in rows]))


def markdown(results: list[dict], command: str) -> str:
    lines = ["# Staged simulation against the process rig", "",
             f"Command: `{command}`", "",
             f"{results[0]['devices'] if results else 2} devices of the process rig (one pinned single-core JAX "
             "worker process each), "
             "placements measured in interleaved rounds (medians); *staged*: what `eval --hardware` prints on the "
             "process rig (`HardwareRunner.simulate`: `simulator.engine.staged.simulate_staged` on the stages the rig "
             "runs, with the rig's fitted costs); *per-unit*: `simulator.simulate` on the calibrated cluster (what "
             "eval printed before). Errors are (simulated - measured) / measured. Unit costs: "
             f"`--costs {results[0]['costs'] if results else 'step'}` on one core, every unit's outputs "
             "materialised.", "",
             "| graph | units | placements (single device not counted) | Spearman per-unit | median err per-unit | "
             "Spearman staged | "
             "median err staged | Spearman measured, even vs odd rounds | load before/after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        su, eu = summary(res["rows"], "per_unit_us")
        ss, es = summary(res["rows"], "staged_us")
        h = halves(res["rows"])
        lines.append(f"| {res['name']} | {res['n_units']} | {len(counted(res['rows']))} | {su:.2f} | {eu:.0f}% | "
                     f"{ss:.2f} | {es:.0f}% | {'n/a' if h is None else f'{h:.2f}'} | "
                     f"{res['load_before']:.2f} / {res['load_after']:.2f} |")
    for res in results:
        c = res["rig_costs"]
        lines += ["", f"## {res['name']}", "",
                  f"Rig costs (us): launch {c['launch_us']:.1f} + {c.get('launch_us_per_input', 0):.1f}/input + "
                  f"{c.get('launch_us_per_input_mb', 0):.1f}/input MB + {c.get('launch_us_per_output_mb', 0):.1f}"
                  f"/output MB (per MB: this graph's own, simulator.measure.boundary_costs), step {c['step_us']:.1f}, "
                  f"send {c['send_us']:.1f} "
                  f"+ {c.get('send_us_per_value', 0):.1f}/value + {c['send_us_per_mb']:.1f}/MB, receive "
                  f"{c.get('recv_us', 0):.1f} + {c.get('recv_us_per_value', 0):.1f}/value + "
                  f"{c['recv_us_per_mb']:.1f}/MB, latency "
                  f"{c['latency_us']:.1f}" + (
                      f" (the cached launch and per-input costs x{res['scales']['stages']:.2f}, the transfers' "
                      f"x{res['scales']['transfers']:.2f}: fitted on this graph, simulator.measure.boundary_costs)"
                      if "transfers" in res.get("scales", {}) else ""), ""]
        if res.get("scales"):
            lines += [f"Units' costs scaled by {res['scales'].get('start', 1.0):.3f} to the single device's step at "
                      f"the rig's start, by {res['scales'].get('rounds', 1.0):.3f} again to its median in the timed "
                      "rounds (the staged column uses the second).", ""]
        lines += ["| placement | share off dev 0 | stages | measured ms [IQR] | per-unit ms (err) | staged ms (err) |",
                  "|---|---|---|---|---|---|"]
        for r in res["rows"]:
            m = r["measured_us"]
            share = r.get("off_device0", r.get("on_device1", 0.0))  # results written before --devices
            lines.append(f"| {r['name']} | {share:.2f} | {r['stages']} | {m / 1e3:.2f} "
                         f"[{r['q25_us'] / 1e3:.2f}-{r['q75_us'] / 1e3:.2f}] | {r['per_unit_us'] / 1e3:.2f} "
                         f"({(r['per_unit_us'] - m) / m * 100:+.0f}%) | {r['staged_us'] / 1e3:.2f} "
                         f"({(r['staged_us'] - m) / m * 100:+.0f}%) |")
    return "\n".join(lines) + "\n"


def in_fresh_process(path: str, args: argparse.Namespace) -> dict:
    """run_graph(path) in a fresh interpreter, as `placeto eval --hardware` runs one graph per process: the
    graphs before it (their rig, compiled stages, memory) cannot slow it down (in one process, nmt_004 and
    ptb_006 measured 15-40% slower after inception_v3 and nmt_l2 than alone)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "experiments.benchmarks.staged_fidelity", "--graphs", path, "--devices",
                str(args.devices), "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--seconds",
                str(args.seconds), "--costs", args.costs, "--child", str(out)] + (
                    ["--dump", str(args.dump)] if args.dump else [])
        proc = subprocess.run(argv, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"staged_fidelity: {path} failed (exit {proc.returncode})")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        ensure_host_devices(args.devices)  # before JAX starts: the child builds plans on D host devices
        atomic_write_bytes(args.child, json.dumps(run_graph(args.graphs[0], args)).encode())
        return 0
    command = "python -m experiments.benchmarks.staged_fidelity " + " ".join(sys.argv[1:] if argv is None else argv)
    results = []
    for path in args.graphs:
        print(f"== {path} (load {load_1min():.2f})", flush=True)
        results.append(in_fresh_process(path, args))
        atomic_write_bytes(args.out, markdown(results, command).encode())  # after each graph: a cut run keeps them
        atomic_write_bytes(args.out.with_suffix(".json"), json.dumps(results, indent=1).encode())
    print(markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
