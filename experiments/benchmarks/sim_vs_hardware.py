"""Simulated against measured step times on local host devices: does the simulator rank placements as a machine
does, how far off are its runtimes, and how repeatable is the measurement itself?

For one small traced graph per family (cifar10, ptb, nmt; built here, as `datasets/` need not exist) and two
benchmark models (nmt_l2, rnnlm_l2), on host CPU devices:

1. calibrate the cluster: the calibration graphs' steps measured and the cluster model fitted by least squares
   (`simulator.measure.calibrate.calibrate_fit`: delta1, delta2, bandwidth, per-transfer latency, and the host time of
   dispatch and of transfers shared by the devices; the fit's R^2 is reported);
2. time every group as it is executed (`HardwareRunner.unit_costs`, the costs `placeto eval --hardware` uses);
3. place the graph at least 10 ways spanning the range: single device, round-robin, contiguous, uniform
   random, random search, the partitioners metis and scotch, the list schedulers etf and heft, local search,
   simulated annealing, the shipped Placeto policies (general, and the family's own), the human expert
   (benchmarks), and with --checkpoints a trained policy; the searching methods optimise the fitted model;
4. run every placement (`simulator.hardware.dispatch`, interleaved steps) twice, as two separate measurement runs, and
   simulate it with three models: *op*: the op-level profile (`placeto profile`: every op alone, summed per
   group) on the fitted cluster; *flat*: the units on the fitted cluster without latency and hosts (the
   published simulator's form of the model); *units*: the units on the full fitted cluster.

Reported per graph: median |error| against the pooled measurement, Spearman rank correlation, and pairwise
concordance where pairs whose measured IQRs overlap count as ties; beside them the same for run 2 against run 1
(how well the machine agrees with itself). Writes sim_vs_hardware.{md,json,png} to --out.

    python -m experiments.benchmarks.sim_vs_hardware        # the full measurement: about 75 minutes, 2 cores
    python -m experiments.benchmarks.sim_vs_hardware --tiny --out /tmp/svh   # a few minutes: one tiny graph, 2 devices

XLA_FLAGS must be set before JAX is imported, so the device count is fixed first thing (the largest of
--devices). Run it on a quiet machine (load average <= 1.5): the header records the load before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.hardware.devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)

SPECS = {  # small members of each family: (zoo kwargs, target groups)
    "cifar10": ({"seed": 0, "n_cells": 1, "channels": 8, "batch": 16, "n_nodes": 4}, 100),
    "ptb": ({"seed": 0, "steps": 8, "hidden": 64, "batch": 16}, 100),
    "nmt": ({"seed": 0, "layers": 2, "src_len": 5, "tgt_len": 5, "batch": 16}, 100),
}
TINY = {"nmt": ({"seed": 0, "layers": 1, "src_len": 3, "tgt_len": 3, "batch": 4}, 24)}
BENCHMARKS = ("nmt_l2", "rnnlm_l2")  # the two smallest benchmark models, 400 groups each
FIXED_METHODS = ("metis", "scotch", "etf", "heft")  # baselines without a budget
SEARCH_METHODS = {"random-search": "random", "local-search": "local-search", "sa": "sa"}  # name -> method
MODELS = ("op", "flat", "units", "held-out")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="2", help="comma list of device counts")
    p.add_argument("--graphs", default=",".join([*SPECS, *BENCHMARKS]),
                   help="comma list of families (small members) and benchmark models")
    p.add_argument("--repeats", type=int, default=50,
                   help="timed steps per placement and measurement run (at 9, two runs' rank correlation on nmt and "
                        "rnnlm was 0.5-0.7: the step-to-step noise of this machine, not the model, set the ranks; "
                        "at 25, one nmt run in two ranked at 0.85)")
    p.add_argument("--budget", type=int, default=500, help="simulator calls of each searching method")
    p.add_argument("--tiny", action="store_true",
                   help="one tiny nmt graph, 2 devices, 3 repeats, budget 50: shows the script works")
    p.add_argument("--work", default="/tmp/placeto_sim_vs_hw", help="where built and profiled graphs are cached")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "benchmarks"), help="results folder")
    p.add_argument("--no-serial", action="store_true", help="keep XLA's intra-op threading (default: off)")
    p.add_argument("--single-thread-dispatch", action="store_true",
                   help="dispatch every device from one host thread (default: one thread per device)")
    p.add_argument("--checkpoints", help="folder of family policies (<folder>/<family>/family, as "
                   "experiments/reproduce/placeto_family.py --runs writes them): adds each graph's zero-shot placement")
    p.add_argument("--render", help="only rewrite the .md and .png from this results JSON (no measuring)")
    p.add_argument("--refit", metavar="JSON", help="recompute the held-out model from this results JSON (its "
                   "placements, unit costs and measured steps; graphs from --work) and rewrite it, the .md and .png "
                   "in --out (no measuring)")
    args = p.parse_args()
    if args.tiny:
        args.devices, args.graphs, args.repeats, args.budget = "2", "nmt", 3, 50
        args.work = args.work.rstrip("/") + "_tiny"
    return args


def build(name: str, work: Path, tiny: bool = False):
    """The grouped graph `name` (a family's small member, or a benchmark model) with op-profile "local-cpu"
    costs (cached in `work`)."""
    from simulator.workloads.families import GraphSpec, benchmark_specs, build_graph
    from simulator.measure.graph_profile import profile
    from simulator.model.io import load_graph, save_graph

    path = work / f"{name}{'_tiny' if tiny else ''}.json.gz"
    if path.exists():
        return load_graph(path)
    if name in SPECS:
        kwargs, target = (TINY if tiny else SPECS)[name]
        graph, _ = build_graph(GraphSpec(f"{name}_{'tiny' if tiny else 'small'}", name, kwargs, target), name)
    else:
        spec = next((s for s in benchmark_specs() if s.name == name), None)
        if spec is None:
            raise SystemExit(f"unknown graph {name!r}: a family ({', '.join(SPECS)}) or a benchmark model")
        graph, _ = build_graph(spec, "benchmarks")
    graph = profile(graph, "local-cpu", repeats=5, warmup=2)
    save_graph(graph, path)
    return graph


def placements(graph, cluster, budget: int, seed: int = 0, checkpoint: Path | None = None) -> list[tuple]:
    """(name, int32[N]) placements spanning the range; searches optimise `graph` on `cluster` (the units costs
    and the fitted model). Methods that do not apply are left out."""
    import numpy as np

    from placeto.baselines import run_method
    from placeto.methods.placeto.place import place
    from placeto.policies import shipped_policies
    from simulator.model.errors import InputError

    n, d = graph.n_nodes, cluster.n_devices
    by_topo = np.empty(n, dtype=np.int32)
    by_topo[graph.topo_order] = np.arange(n, dtype=np.int32)
    out = [("single", np.zeros(n, dtype=np.int32)), ("round-robin", by_topo % d),
           ("contiguous", (by_topo.astype(np.int64) * d // n).astype(np.int32)),
           ("uniform", np.random.default_rng(seed).integers(0, d, n).astype(np.int32))]
    expert = graph.meta.get("expert_placement", {}).get(str(d))
    if expert is not None:
        out.append(("expert", np.asarray(expert, dtype=np.int32)))
    for name in FIXED_METHODS:
        try:
            out.append((name, run_method(name, graph, cluster, seed).placement))
        except InputError as e:
            print(f"  {name}: not applicable ({e})", flush=True)
    for name, method in SEARCH_METHODS.items():
        out.append((name, run_method(method, graph, cluster, seed, budget=budget).placement))
    kind = graph.meta.get("program", {}).get("kind")
    for policy in shipped_policies():
        if policy.name == "general" or policy.name == kind:
            out.append((f"policy-{policy.name}", place(graph, cluster, policy.name).placement))
    if checkpoint is not None:
        out.append(("trained", place(graph, cluster, checkpoint).placement))
    return [(name, np.asarray(p, dtype=np.int32)) for name, p in out]


def flat(cluster):
    """The cluster without latency and hosts: the published simulator's form of the model."""
    devices = tuple(dataclasses.replace(d, host=None) for d in cluster.devices)
    return dataclasses.replace(cluster, devices=devices, latency_us=0.0, hosts=())


def run_one(graph, fit, repeats: int, budget: int, threads: bool, checkpoint: Path | None = None) -> dict:
    """Rows (placement, transfers, both measurement runs, simulated with every model) and the agreements."""
    import numpy as np

    from simulator.hardware.runner import hardware_runner
    from simulator import simulate
    from simulator.measure.fit import held_out_predictions

    t0 = time.perf_counter()
    cluster = fit.cluster
    runner = hardware_runner(graph, cluster)
    units = graph.with_costs("local-cpu", runner.unit_costs(repeats=5))
    runner = dataclasses.replace(runner, graph=units, threads=threads)  # dispatch in the units' simulated order
    chosen = placements(units, cluster, budget, checkpoint=checkpoint)
    print(f"  {len(chosen)} placements ({time.perf_counter() - t0:.0f} s)", flush=True)
    runs = [runner.measure([p for _, p in chosen], repeats=repeats, warmup=2) for _ in range(2)]
    models = {"op": (graph, cluster), "flat": (units, flat(cluster)), "units": (units, cluster)}
    pooled = [float(np.median(np.concatenate([run[k].times_us for run in runs]))) for k in range(len(chosen))]
    held_out = held_out_predictions(units, [p for _, p in chosen], pooled, fit.params, cluster)
    rows = []
    for k, (name, p) in enumerate(chosen):
        rows.append({"placement": name, "assignment": p.tolist(),
                     "transfers": len(simulate(units, p, cluster).transfers.node),
                     "simulated_us": {**{m: float(simulate(g, p, c).runtime) for m, (g, c) in models.items()},
                                      "held-out": float(held_out[k])},
                     "runs": [[float(t) for t in run[k].times_us] for run in runs]})
    return {"graph": graph.name, "groups": graph.n_nodes, "ops": graph.meta.get("ops"),
            "devices": cluster.n_devices, "rows": rows, "seconds": time.perf_counter() - t0,
            "unit_cost_total_us": float(units.cost_for("local-cpu").sum()),
            "unit_costs_us": [round(float(c), 3) for c in units.cost_for("local-cpu")],  # to re-simulate offline
            "op_cost_total_us": float(graph.cost_for("local-cpu").sum())}


def summarise(result: dict) -> dict:
    """Per model: errors and Spearman against the pooled measurement and the tie-aware concordance; and the
    same statistics of run 2 against run 1 (repeatability)."""
    from simulator.measure.agreement import agreement, concordance, spearman
    from simulator.measure.agreement import EvalRow
    from simulator.hardware.timing import timing_of

    run1 = [timing_of(r["runs"][0]) for r in result["rows"]]
    run2 = [timing_of(r["runs"][1]) for r in result["rows"]]
    pooled = [timing_of(r["runs"][0] + r["runs"][1]) for r in result["rows"]]
    out = {}
    for m in MODELS:
        sim = [r["simulated_us"][m] for r in result["rows"]]
        a = agreement([EvalRow(r["placement"], s, t) for r, s, t in zip(result["rows"], sim, pooled)])
        c = concordance(sim, pooled)
        out[m] = {**a._asdict(), "concordance": c.fraction, "ties": c.ties, "pairs": c.pairs}
    rep = concordance([t.median_us for t in run2], run1, also_tied=run2)
    out["repeat"] = {"spearman": spearman([t.median_us for t in run1], [t.median_us for t in run2]),
                     "concordance": rep.fraction, "ties": rep.ties, "pairs": rep.pairs}
    return {k: {f: None if isinstance(v, float) and v != v else v for f, v in d.items()}  # NaN: null (strict JSON)
            for k, d in out.items()}


def _num(x: float, fmt: str) -> str:
    return "n/a" if x is None or x != x else format(x, fmt)


def markdown(results: list[dict], env: dict) -> str:
    speedups = ", ".join(f"{k.rsplit('_', 1)[1]} devices {v}" for k, v in env.items()
                         if k.startswith("parallel_speedup_"))
    lines = ["# Simulated vs measured step time on local host devices", "",
             f"Generated by `python -m experiments.benchmarks.sim_vs_hardware {env['argv']}`. "
             f"Machine: {env['cores']} cores, "
             f"load average {env['load_before']} before and {env['load_after']} after; JAX {env['jax']}; "
             f"XLA_FLAGS `{env['xla_flags']}`; dispatch: {env['dispatch']}. Parallel speedup of the devices on "
             f"independent chains of matmuls (`simulator.measure.concurrency.measure_concurrency`; the simulator assumes the "
             f"number of devices, this machine allows at most min(devices, cores)): "
             f"{speedups}." + (f" The held-out model was recomputed from the measurements afterwards: "
                                f"`{env['held_out_command']}`." if env.get("held_out_command") else ""),
             "", "## Calibration (least-squares fit of the cluster model)", ""]
    for n, f in env["fits"].items():
        p = f["params"]
        lines.append(f"* {n} devices: delta1 {p['delta1_us']:.1f} us, dispatch {p['dispatch_us']:.1f} us (shared), "
                     f"delta2 {p['delta2_us']:.1f} us, {1e3 / p['us_per_mb']:.2f} GB/s, latency "
                     f"{p['latency_us']:.1f} us, transfer {p['transfer_us']:.1f} us (shared); R^2 "
                     f"{_num(f['r2'], '.3f')}, "
                     f"RMS relative error {f['rms_relative'] * 100:.1f}% over {len(f['probes'])} probes.")
    lines += ["", f"Step times in ms. Each placement is measured in two separate runs of interleaved steps "
              f"({env.get('repeats', 9)} timed steps per placement in each run); "
              "*err* is the median |simulated - measured| / measured against both runs pooled, *rho* the "
              "Spearman rank correlation, *conc* the fraction of placement pairs ordered alike, pairs whose "
              "measured IQRs overlap counted as ties (not counted; *ties* of *pairs*). *repeat*: run 2 against "
              "run 1, the machine's own agreement (a pair tied in either run is a tie). Models: *op* op-level "
              "profile on the fitted cluster; *flat* units as executed on the fitted cluster without latency and "
              "hosts; *units* units on the full fitted cluster; *held-out* units on the cluster refitted to the "
              "graph's own placements, each placement predicted by the fit on the others (leave-one-out: "
              "`simulator.measure.fit.held_out_predictions`, per-op and per-transfer costs refitted, the bandwidth "
              "kept).", "", "## Agreement", "",
              "| graph | groups (ops) | devices | placements | repeat rho | repeat conc (ties) | err op | rho op "
              "| err flat | rho flat | err units | rho units | err held-out | rho held-out | conc units (ties) "
              "| conc held-out (ties) |",
              "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        s = r["summary"]
        cells = " | ".join(f"{_num(s[m]['median_ape'], '.0f')}% | {_num(s[m]['spearman'], '.2f')}" for m in MODELS)
        lines.append(f"| {r['graph']} | {r['groups']} ({r['ops']}) | {r['devices']} | {len(r['rows'])} | "
                     f"{_num(s['repeat']['spearman'], '.2f')} | {_num(s['repeat']['concordance'], '.2f')} "
                     f"({s['repeat']['ties']}/{s['repeat']['pairs']}) | {cells} | "
                     f"{_num(s['units']['concordance'], '.2f')} ({s['units']['ties']}/{s['units']['pairs']}) | "
                     f"{_num(s['held-out']['concordance'], '.2f')} "
                     f"({s['held-out']['ties']}/{s['held-out']['pairs']}) |")
    for r in results:
        lines += ["", f"## {r['graph']}, {r['devices']} devices", "",
                  f"Compute summed over groups: op profile {r['op_cost_total_us'] / 1e3:.1f} ms, units "
                  f"{r['unit_cost_total_us'] / 1e3:.1f} ms. Measured time per extra transfer (least-squares slope "
                  f"over the placements): {_num(per_transfer_us(r), '.0f')} us.", "",
                  "| placement | transfers | run 1 | run 2 | sim op | err | sim flat | err | sim units | err "
                  "| sim held-out | err |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for row in r["rows"]:
            runs = [_median_iqr(t) for t in row["runs"]]
            pooled = _median_iqr(row["runs"][0] + row["runs"][1])[0]
            s = row["simulated_us"]
            cells = " | ".join(f"{s[m] / 1e3:.2f} | {(s[m] - pooled) / pooled * 100:+.0f}%" for m in MODELS)
            lines.append(f"| {row['placement']} | {row['transfers']} | "
                         + " | ".join(f"{m / 1e3:.2f} [{a / 1e3:.2f}-{b / 1e3:.2f}]" for m, a, b in runs)
                         + f" | {cells} |")
    return "\n".join(lines) + "\n"


def _median_iqr(times: list[float]) -> tuple[float, float, float]:
    import numpy as np

    q25, med, q75 = np.percentile(times, [25, 50, 75])
    return float(med), float(q25), float(q75)


def per_transfer_us(result: dict) -> float:
    """Least-squares slope of the pooled median step time (us) against transfers over the placements."""
    import numpy as np

    x = np.array([row["transfers"] for row in result["rows"]], dtype=np.float64)
    y = np.array([_median_iqr(row["runs"][0] + row["runs"][1])[0] for row in result["rows"]])
    return float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else float("nan")


def plot(results: list[dict], path: Path) -> None:
    """Measured (pooled median) against simulated step time per simulator model, one panel each: colour = the
    placement's method (placeto.harness.plot_style), marker = graph and device count."""
    import io
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from placeto.harness import plot_style
    from simulator.model.io import atomic_write_bytes

    colors = plot_style.colors(row["placement"] for r in results for row in r["rows"])
    markers = {f"{r['graph']} {r['devices']}d": "osD^vP*Xph"[k % 10] for k, r in enumerate(results)}
    fig, axes = plt.subplots(2, (len(MODELS) + 1) // 2, figsize=(12.5, 9), layout="constrained", squeeze=False)
    for ax, model in zip(axes.flat, MODELS):
        lo, hi = float("inf"), 0.0
        for r in results:
            for row in r["rows"]:
                sim = row["simulated_us"][model] / 1e3
                meas = _median_iqr(row["runs"][0] + row["runs"][1])[0] / 1e3
                ax.plot(sim, meas, markers[f"{r['graph']} {r['devices']}d"], color=colors[row["placement"]], ms=5,
                        mec="black" if plot_style.is_learned(row["placement"]) else "none", mew=0.6, alpha=0.85)
                lo, hi = min(lo, sim, meas), max(hi, sim, meas)
        ax.plot([lo / 1.2, hi * 1.2], [lo / 1.2, hi * 1.2], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="simulated step time (ms, log)", title=f"model: {model}")
        ax.grid(alpha=0.3, which="both", lw=0.4)
    for ax in axes[:, 0]:
        ax.set_ylabel("measured step time (ms, log; median of both runs)")
    named: dict[str, list[str]] = {}  # one legend entry per colour: placements of one method share it
    for name, c in colors.items():
        named.setdefault(c, []).append(name)
    handles = [Line2D([], [], marker="o", ls="none", color=c, label="\n".join(textwrap.wrap(", ".join(names), 24)),
                      mec="black" if plot_style.is_learned(names[0]) else "none") for c, names in named.items()]
    handles += [Line2D([], [], marker=m, ls="none", color="gray", label=g) for g, m in markers.items()]
    handles += [Line2D([], [], color="black", ls="--", lw=0.8, label="measured = simulated")]
    fig.legend(handles=handles, loc="outside right upper", fontsize=7, title="colour: placement;\nmarker: graph",
               title_fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main() -> int:
    args = parse_args()
    if args.render:
        return render(json.loads(Path(args.render).read_text()), Path(args.out))
    if args.refit:
        return refit_held_out(json.loads(Path(args.refit).read_text()), Path(args.work), Path(args.out))
    counts = [int(x) for x in args.devices.split(",")]
    ensure_host_devices(max(counts), serial=not args.no_serial)  # before anything imports jax
    import jax

    from simulator.measure.calibrate import calibrate_fit
    from simulator.measure.concurrency import measure_concurrency

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    env = {"argv": " ".join(sys.argv[1:]), "cores": os.cpu_count(), "jax": jax.__version__,
           "xla_flags": os.environ.get("XLA_FLAGS", ""), "load_before": "%.1f" % os.getloadavg()[0],
           "dispatch": "one host thread" if args.single_thread_dispatch else "one host thread per device",
           "repeats": args.repeats,
           "fits": {}}
    graphs = []
    for name in args.graphs.split(","):
        t0 = time.perf_counter()
        graphs.append(build(name, work, args.tiny))
        print(f"{name}: {graphs[-1].n_nodes} groups ({time.perf_counter() - t0:.0f} s)", flush=True)
    results = []
    for n in counts:
        fit = calibrate_fit(n, repeats=max(args.repeats, 5))
        concurrency = measure_concurrency(n)  # None for one device: it runs alone
        speedup = concurrency.speedup if concurrency is not None else 1.0
        env[f"parallel_speedup_{n}"] = round(speedup, 2)
        env["fits"][str(n)] = {"params": fit.params, "r2": fit.r2 if fit.r2 == fit.r2 else None,
                               "rms_relative": fit.rms_relative,
                               "probes": {k: [float(m), float(s)] for k, m, s in
                                          zip(fit.names, fit.measured_us, fit.simulated_us)}}
        print(f"{n} devices: fit R^2 {fit.r2:.3f} ({fit.params}); parallel speedup {speedup:.2f}", flush=True)
        for graph in graphs:
            family = graph.meta.get("family", "")
            ckpt = Path(args.checkpoints) / family / "family" if args.checkpoints else None
            result = run_one(graph, fit, args.repeats, args.budget, threads=not args.single_thread_dispatch,
                             checkpoint=ckpt if ckpt is not None and (ckpt / "checkpoint.msgpack").exists() else None)
            result["cluster"] = fit.cluster.to_dict()
            result["summary"] = summarise(result)
            results.append(result)
            s = result["summary"]
            print(f"  {graph.name} {n}d: repeat rho {_num(s['repeat']['spearman'], '.2f')} | " + " | ".join(
                f"{m} err {_num(s[m]['median_ape'], '.0f')}% rho {_num(s[m]['spearman'], '.2f')}" for m in MODELS)
                + f" ({result['seconds']:.0f} s)", flush=True)
    env["load_after"] = "%.1f" % os.getloadavg()[0]
    return save({"env": env, "results": results}, out)


def refit_held_out(data: dict, work: Path, out: Path) -> int:
    """The held-out model recomputed from a results JSON with unit costs (`run_one` writes them): the same
    placements, measurements and calibrated cluster, simulator.measure.fit as it is now."""
    import numpy as np

    from simulator.model.cluster import cluster_from_dict
    from simulator.measure.fit import cluster_params, held_out_predictions

    for result in data["results"]:
        if "unit_costs_us" not in result:
            raise SystemExit(f"{result['graph']}: the JSON has no unit costs (written before they were kept)")
        graph = build(result["graph"].removesuffix("_small"), work)  # a family's small member, or a benchmark
        units = graph.with_costs("local-cpu", np.asarray(result["unit_costs_us"], dtype=np.float64))
        cluster = cluster_from_dict(result["cluster"])
        placements = [np.asarray(row["assignment"], dtype=np.int32) for row in result["rows"]]
        pooled = [_median_iqr(row["runs"][0] + row["runs"][1])[0] for row in result["rows"]]
        held = held_out_predictions(units, placements, pooled, cluster_params(cluster), cluster)
        for row, h in zip(result["rows"], held):
            row["simulated_us"]["held-out"] = float(h)
        result["summary"] = summarise(result)
        s = result["summary"]["held-out"]
        print(f"{result['graph']}: held-out err {_num(s['median_ape'], '.0f')}% rho {_num(s['spearman'], '.2f')}",
              flush=True)
    data["env"]["held_out_command"] = "python -m experiments.benchmarks.sim_vs_hardware " + " ".join(sys.argv[1:])
    return save(data, out)


def save(data: dict, out: Path) -> int:
    """Write the results JSON (strict: no NaN), then the .md and .png from it."""
    from simulator.model.io import atomic_write_bytes

    atomic_write_bytes(out / "sim_vs_hardware.json", (json.dumps(data, indent=1, allow_nan=False) + "\n").encode())
    return render(data, out)


def render(data: dict, out: Path) -> int:
    from simulator.model.io import atomic_write_bytes

    atomic_write_bytes(out / "sim_vs_hardware.md", markdown(data["results"], data["env"]).encode())
    plot(data["results"], out / "sim_vs_hardware.png")
    print(f"wrote {out / 'sim_vs_hardware.md'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
