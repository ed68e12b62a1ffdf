"""GDP against Placeto, the human expert and local search.

    python -m experiments.reproduce.gdp_family                     # ~30 min on this 2-core machine
    python -m experiments.reproduce.gdp_family --parts nmt         # one part: nmt, large or curves

Part `nmt`: the nmt test split at 4 devices, zero-shot: single device, local search (1,000 simulator calls), the
shipped Placeto nmt policy (one greedy episode) and the shipped gdp-nmt policy (one forward pass); runtimes and
the seconds each took (compilation apart).

Part `large`: nmt_l8, rnnlm_l8 and nasnet at 8 devices, grouped (the dataset's graphs, 400-1,000 groups) and
ungrouped (the traced op graphs, 2,000-26,000 ops): single, the human expert, local search (10,000 calls), then
at local search's wall time: Placeto and placeto-search with the shipped general policy (coarsened to groups
automatically on op graphs, `placeto.coarsen`), gdp-general fine-tuned (PPO on the graph, best placement seen) and
gdp-search (gdp-general's prior steering the search); and gdp-general zero-shot (one forward pass).

Part `curves`: gdp and Placeto trained from scratch on one graph for the same wall time; best runtime against
simulator calls and against seconds (PNG).

Writes experiments/results/reproduce/gdp_family.md, gdp_family.csv and gdp_convergence.png.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from experiments.common.large_graphs import op_graph
from placeto.baselines import run_method
from placeto.harness.compare import run_learned
from simulator.workloads.families import SINGLE_DEVICE_EXPERT, expert_op_placement, load_family
from placeto.methods.gdp.place import load_run, run_gdp, timed_greedy
from placeto.objective import metered
from placeto.policies import resolve_checkpoint
from placeto.methods.placeto import guided
from simulator import cluster_preset, load_graph, simulate
from simulator.model.io import atomic_write_bytes, atomic_write_csv

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reproduce"
DATASETS = Path(__file__).resolve().parents[2] / "datasets"
LARGE = ("nmt_l8", "rnnlm_l8", "nasnet")


def runtime(graph, placement, cluster) -> float:
    """Simulated runtime in ms (NaN marks nothing)."""
    return float(simulate(graph, np.asarray(placement, np.int32), cluster).runtime) / 1e3


def part_nmt(gdp: str, placeto: str, devices: int = 4) -> tuple[list[str], list[dict]]:
    cluster = cluster_preset("placeto-k80", devices)
    config, params = load_run(resolve_checkpoint(gdp))
    rows = []
    for g in load_family("nmt", "test"):
        row = {"part": "nmt", "graph": g.name, "devices": devices, "nodes": g.n_nodes,
               "single": runtime(g, np.zeros(g.n_nodes), cluster)}
        ls = run_method("local-search", g, cluster, 0, budget=1000)
        row["local-search"], row["local-search s"] = runtime(g, ls.placement, cluster), ls.seconds
        prep = guided.prepare(placeto, g, cluster, sampling=False)
        with metered():
            t0 = time.perf_counter()
            p, _, _ = guided.greedy_with_prior(prep)
            row["placeto s"] = time.perf_counter() - t0
        row["placeto"] = runtime(g, p, cluster)
        p, row["gdp s"], _ = timed_greedy(config, params, g, cluster)
        row["gdp"] = runtime(g, p, cluster)
        rows.append(row)
        print(f"nmt {g.name}: " + ", ".join(f"{k} {row[k]:.2f}" for k in ("single", "local-search", "placeto", "gdp")),
              flush=True)
    methods = ["single", "local-search", "placeto", "gdp"]
    lines = [f"## nmt test split, {devices} devices, zero-shot", "",
             f"Placeto: the shipped `{placeto}` policy, one greedy episode. gdp: the shipped `{gdp}` policy, one "
             "forward pass (argmax per node). local-search: 1,000 simulator calls. Runtimes in ms; seconds after "
             "compilation.", "",
             "| graph | nodes | " + " | ".join(methods) + " | placeto s | gdp s |",
             "|---|---:|" + "---:|" * (len(methods) + 2)]
    for r in rows:
        best = min(r[m] for m in methods)
        cells = [f"**{r[m]:.2f}**" if r[m] == best else f"{r[m]:.2f}" for m in methods]
        lines.append(f"| {r['graph']} | {r['nodes']} | " + " | ".join(cells) + f" | {r['placeto s']:.2f} | "
                     f"{r['gdp s']:.3f} |")
    means = {m: np.mean([r[m] / r["single"] for r in rows]) for m in methods}
    lines += ["", "Mean x single: " + ", ".join(f"{m} {means[m]:.3f}" for m in methods) +
              f". gdp x placeto: {np.mean([r['gdp'] / r['placeto'] for r in rows]):.3f} (mean ratio; < 1: gdp better).",
              ""]
    return lines, rows


def part_large(gdp: str, placeto: str, devices: int = 8) -> tuple[list[str], list[dict]]:
    cluster = cluster_preset("placeto-k80", devices)
    rows = []
    for name in LARGE:
        grouped = load_graph(DATASETS / "benchmarks" / f"{name}.json.gz")
        t0 = time.perf_counter()
        ops, program, spec = op_graph(name)
        trace_s = time.perf_counter() - t0
        if spec.kind in SINGLE_DEVICE_EXPERT:
            op_expert = np.zeros(ops.n_nodes, np.int32)
        else:
            op_expert = expert_op_placement(ops, program.meta["layer_groups"], devices)
        for variant, g in (("grouped", grouped), ("ungrouped", ops)):
            row = {"part": "large", "graph": name, "variant": variant, "devices": devices, "nodes": g.n_nodes,
                   "single": runtime(g, np.zeros(g.n_nodes), cluster)}
            expert = run_method("expert", g, cluster, 0).placement if variant == "grouped" else op_expert
            row["expert"] = runtime(g, expert, cluster)
            ls = run_method("local-search", g, cluster, 0, budget=10_000)
            seconds = ls.seconds
            row["local-search"], row["local-search s"] = runtime(g, ls.placement, cluster), seconds
            for method in ("placeto", "placeto-search"):
                run, _ = run_learned(method, g, cluster, 0, None, seconds, placeto)
                row[method], row[f"{method} s"] = runtime(g, run.placement, cluster), run.seconds
            run, compile_s = run_gdp(g, cluster, gdp, 0, budget=1)
            row["gdp zero-shot"], row["gdp zero-shot s"] = runtime(g, run.placement, cluster), run.seconds
            row["gdp compile s"] = compile_s
            run, _ = run_gdp(g, cluster, gdp, 0, None, seconds, finetune_episodes=10**9)
            row["gdp fine-tuned"], row["gdp fine-tuned s"] = runtime(g, run.placement, cluster), run.seconds
            run, _ = run_gdp(g, cluster, gdp, 0, None, seconds, search=True)
            row["gdp-search"], row["gdp-search s"] = runtime(g, run.placement, cluster), run.seconds
            row["trace s"] = trace_s if variant == "ungrouped" else 0.0
            rows.append(row)
            print(f"{name} {variant} ({g.n_nodes} nodes): " + ", ".join(
                f"{m} {row[m]:.1f}" for m in LARGE_METHODS), flush=True)
    lines = [f"## Large benchmarks, {devices} devices, grouped and ungrouped", "",
             f"local-search: 10,000 simulator calls; its wall time (column `s`) is the budget of placeto and "
             f"placeto-search (shipped `{placeto}` policy; op graphs are coarsened to groups automatically, the "
             f"grouping's time included), of gdp fine-tuned (shipped `{gdp}` policy, PPO on the graph for the "
             "whole budget, best placement seen) and of gdp-search (the same policy's one forward pass gives the "
             "start and the prior of the search, for the rest of the budget). gdp zero-shot: one forward pass. "
             "Runtimes in ms.", "",
             "| graph | variant | nodes | " + " | ".join(LARGE_METHODS) + " | s (local-search budget) | "
             "gdp zero-shot s |", "|---|---|---:|" + "---:|" * (len(LARGE_METHODS) + 2)]
    for r in rows:
        best = min(r[m] for m in LARGE_METHODS)
        cells = [f"**{r[m]:.1f}**" if r[m] == best else f"{r[m]:.1f}" for m in LARGE_METHODS]
        lines.append(f"| {r['graph']} | {r['variant']} | {r['nodes']} | " + " | ".join(cells) +
                     f" | {r['local-search s']:.1f} | {r['gdp zero-shot s']:.2f} |")
    lines.append("")
    return lines, rows


LARGE_METHODS = ["single", "expert", "local-search", "placeto", "placeto-search", "gdp zero-shot", "gdp fine-tuned",
                 "gdp-search"]


def part_curves(graph_name: str, devices: int, minutes: float, runs: Path) -> tuple[list[str], list[dict]]:
    """Train gdp and Placeto from scratch on one graph for `minutes` each; plot best runtime vs calls/seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from placeto.methods.placeto.config import PlacetoConfig
    from placeto.methods.gdp.config import GdpConfig
    from placeto.methods.gdp.train import train as train_gdp
    from placeto.methods.placeto.train import train as train_placeto

    graph = next(g for g in load_family("nmt", "test") if g.name == graph_name)
    cluster = cluster_preset("placeto-k80", devices)
    curves = {}
    for method in ("gdp", "placeto"):
        out = runs / f"curve_{method}_{graph_name}_{devices}d"
        shutil.rmtree(out, ignore_errors=True)
        if method == "gdp":
            train_gdp(GdpConfig(episodes=10**9, time_limit_minutes=minutes), [graph], cluster, out)
            calls, secs, best = "samples", "seconds", "best_us"
        else:
            train_placeto(PlacetoConfig(episodes=10**7, time_limit_minutes=minutes, progress=False), [graph],
                          cluster, out)
            calls, secs, best = "sim_calls", "wall_s", "best_runtime"
        with (out / "metrics.csv").open() as f:
            rs = list(csv.DictReader(f))
        curves[method] = np.array([[float(r[calls]), float(r[secs]), float(r[best]) / 1e3] for r in rs])
    from placeto.harness import plot_style

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for method, c in curves.items():  # best so far: a step at each improvement
        axes[0].step(c[:, 0], c[:, 2], where="post", label=method, **plot_style.line_style(method))
        axes[1].step(c[:, 1], c[:, 2], where="post", label=method, **plot_style.line_style(method))
    for ax, x in zip(axes, ("simulator calls (log scale)", "training wall time (s, log scale)")):
        ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel("best simulated runtime found (ms)")
        ax.legend(title="method", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Trained from scratch on {graph_name} at {devices} devices ({minutes:g} min each)")
    png = RESULTS / "gdp_convergence.png"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(png, buf.getvalue())
    lines = [f"## Convergence from scratch on {graph_name}, {devices} devices, {minutes:g} min each", "",
             f"![curves]({png.name})", "",
             "| method | simulator calls | best runtime (ms) | calls to within 5% of the final best of both |",
             "|---|---:|---:|---:|"]
    target = 1.05 * min(c[-1, 2] for c in curves.values())
    rows = []
    for method, c in curves.items():
        hit = c[c[:, 2] <= target]
        to_target = f"{hit[0, 0]:.0f}" if len(hit) else "not reached"
        lines.append(f"| {method} | {c[-1, 0]:.0f} | {c[-1, 2]:.2f} | {to_target} |")
        rows.append({"part": "curves", "graph": graph_name, "devices": devices, "method": method,
                     "calls": c[-1, 0], "best": c[-1, 2], "calls_to_5pct": to_target})
    lines.append("")
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="nmt,large,curves")
    p.add_argument("--gdp-nmt", default="gdp-nmt", help="gdp policy for the nmt part (shipped name or run dir)")
    p.add_argument("--gdp-large", default="gdp-general", help="gdp policy for the large benchmarks")
    p.add_argument("--placeto-nmt", default="nmt")
    p.add_argument("--placeto-large", default="general")
    p.add_argument("--curve-graph", default="nmt_004")
    p.add_argument("--curve-minutes", type=float, default=3.0)
    p.add_argument("--runs", type=Path, default=Path("runs"))
    args = p.parse_args(argv)
    parts = [s.strip() for s in args.parts.split(",")]
    cmd = "python -m experiments.reproduce.gdp_family " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["# GDP vs Placeto vs the expert vs local search", "",
             f"Command: `{cmd.strip()}` ({os.cpu_count()} cores, load average at the start "
             f"{os.getloadavg()[0]:.1f}; placeto-k80 preset).", ""]
    rows: list[dict] = []
    if "nmt" in parts:
        more, r = part_nmt(args.gdp_nmt, args.placeto_nmt)
        lines += more
        rows += r
    if "large" in parts:
        more, r = part_large(args.gdp_large, args.placeto_large)
        lines += more
        rows += r
    if "curves" in parts:
        more, r = part_curves(args.curve_graph, 4, args.curve_minutes, args.runs)
        lines += more
        rows += r
    suffix = "" if set(parts) == {"nmt", "large", "curves"} else "_" + "_".join(parts)
    atomic_write_bytes(RESULTS / f"gdp_family{suffix}.md", ("\n".join(lines) + "\n").encode())
    atomic_write_csv(RESULTS / f"gdp_family{suffix}.csv", rows)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
