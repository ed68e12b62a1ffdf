"""Sample efficiency: the simulator calls and wall time each learned method needs to come within 5% of the best
runtime any method found (Placeto's claim: "up to 6.1x fewer training steps" than the RNN-based placers).

For every benchmark model and device count, each method learns on the graph from its start inside one meter
(placeto.objective.metered: every simulation counted, at most --calls simulations and --minutes of wall time per
run; jit compilation before it, excluded):

    rnn                 the 2017 seq2seq placer from scratch (placeto.methods.sequence.place.train_in_budget)
    hierarchical        the 2018 grouper + placer from scratch (idem)
    placeto             Placeto's REINFORCE from fresh parameters (placeto.methods.placeto.train.finetune_params)
    placeto-finetuned   the shipped family policy (nmt for nmt_*, ptb for rnnlm_*, cifar10 for inception_v3 and
                        nasnet) fine-tuned on the graph (placeto.methods.placeto.guided.finetune)
    gdp                 GDP's PPO from fresh parameters (placeto.methods.gdp.place.finetune)

A run's meter trace (wall seconds, calls, best objective so far) is its best-so-far curve. Per (graph, devices)
the target is 1.05 x the best objective any run reached; per method, the calls and seconds of its first trace
point at or below the target ("not reached" otherwise). Targets are recomputed from all rows at every report.

    python -m experiments.reproduce.sample_efficiency                      # everything (long: see --minutes)
    python -m experiments.reproduce.sample_efficiency --graphs rnnlm_l2 --devices 2 --calls 2000 --minutes 2

Writes experiments/results/reproduce/sample_efficiency.csv (a row per run, its trace as JSON), sample_efficiency.md (the
table and the ratios beside the paper's 6.1x) and sample_efficiency_<graph>.png (best-so-far curves). Rows
already in the CSV are skipped, so a killed or time-limited run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto.objective import metered  # noqa: E402
from simulator import cluster_preset  # noqa: E402
from simulator.model.io import atomic_write_bytes, atomic_write_csv, load_graph  # noqa: E402

GRAPHS = ["nmt_l2", "nmt_l4", "nmt_l8", "rnnlm_l2", "rnnlm_l4", "rnnlm_l8", "inception_v3", "nasnet"]
METHODS = ["rnn", "hierarchical", "placeto", "placeto-finetuned", "gdp"]
FAMILY_POLICY = {"nmt": "nmt", "rnnlm": "ptb", "inception": "cifar10", "nasnet": "cifar10"}
FIELDS = ["graph", "n_devices", "method", "budget_calls", "budget_seconds", "calls", "seconds", "compile_seconds",
          "best_us", "trace"]
PAPER_RATIO = 6.1
WITHIN = 1.05


# ---- one run per method ----------------------------------------------------------------------------------------
def run_pergraph(name: str, graph, cluster, calls: int, seconds: float, seed: int):
    """(trace, calls, seconds, compile seconds) of rnn / hierarchical trained from scratch."""
    from placeto.methods.sequence.place import train_in_budget

    run, compile_s = train_in_budget(name, graph, cluster, seed, calls, seconds)
    return run.trace, run.simulator_calls, run.seconds, compile_s


def run_placeto(graph, cluster, calls: int, seconds: float, seed: int, policy: str | None):
    """Placeto REINFORCE on the graph: from fresh parameters (policy None) or from a shipped policy, its
    learning-rate and entropy schedules spanning the call budget (episodes = calls / the calls per episode of the
    compiling update)."""
    import jax

    from placeto.methods.placeto import env as E
    from placeto.methods.placeto.config import PlacetoConfig
    from placeto.methods.placeto.place import load_policy_params
    from placeto.methods.placeto.policy import make_policy
    from placeto.methods.placeto.train import finetune_params

    t0 = time.perf_counter()
    if policy is None:
        config = PlacetoConfig(seed=seed)
        params = make_policy(config).init(jax.random.key(seed), E.make_context(graph, cluster, config).arrays)
    else:
        config, params = load_policy_params(policy)
    with metered() as warm:  # compilation (one throw-away update), charged to nobody
        finetune_params(config, params, graph, cluster, config.episodes_per_update, seed)
    compile_s = time.perf_counter() - t0
    per_episode = max(warm.calls / config.episodes_per_update, 1.0)
    episodes = max(config.episodes_per_update, int(calls / per_episode))
    with metered(max_calls=calls, seconds=seconds) as m:
        finetune_params(config, params, graph, cluster, episodes, seed)
        elapsed = m.elapsed()
    return tuple(m.trace), m.calls, elapsed, compile_s


def run_gdp(graph, cluster, calls: int, seconds: float, seed: int):
    """GDP's PPO from fresh parameters on the graph (default GdpConfig)."""
    from placeto.methods.gdp.config import GdpConfig
    from placeto.methods.gdp.place import finetune
    from placeto.methods.gdp.ppo import init_params, make_task

    t0 = time.perf_counter()
    config = GdpConfig(seed=seed)
    task = make_task(graph, cluster, config)
    params = init_params(config, task)
    with metered():  # compilation (one throw-away update), charged to nobody
        finetune(config, params, task, seed, 1)
    compile_s = time.perf_counter() - t0
    with metered(max_calls=calls, seconds=seconds) as m:
        finetune(config, params, task, seed, 10**9)
        elapsed = m.elapsed()
    return tuple(m.trace), m.calls, elapsed, compile_s


def run_one(method: str, graph, cluster, calls: int, seconds: float, seed: int):
    if method in ("rnn", "hierarchical"):
        return run_pergraph(method, graph, cluster, calls, seconds, seed)
    if method == "placeto":
        return run_placeto(graph, cluster, calls, seconds, seed, None)
    if method == "placeto-finetuned":
        family = next(v for k, v in FAMILY_POLICY.items() if graph.name.startswith(k))
        return run_placeto(graph, cluster, calls, seconds, seed, family)
    if method == "gdp":
        return run_gdp(graph, cluster, calls, seconds, seed)
    raise ValueError(f"unknown method {method!r}")


# ---- reference placements ---------------------------------------------------------------------------------------
def reference_ms(graph, cluster) -> tuple[float, float]:
    """(single device, human expert) objectives of the graph on the cluster, ms (placeto.objective.score_batch:
    feasibility first: the runtime where it fits), as the learned methods' best_us."""
    from placeto.baselines import run_method
    from placeto.objective import score_batch

    return tuple(float(score_batch(graph, run_method(name, graph, cluster, 0, None).placement[None], cluster)[0])
                 / 1e3 for name in ("single", "expert"))


# ---- the CSV ---------------------------------------------------------------------------------------------------
def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [dict(r, n_devices=int(r["n_devices"]), calls=int(r["calls"]), seconds=float(r["seconds"]),
                     best_us=float(r["best_us"]), trace=json.loads(r["trace"])) for r in csv.DictReader(f)]


def write_rows(path: Path, rows: list[dict]) -> None:
    atomic_write_csv(path, [dict(r, trace=json.dumps(r["trace"])) for r in rows], FIELDS)


# ---- the report ------------------------------------------------------------------------------------------------
def to_target(trace, target: float) -> tuple[float, float]:
    """(calls, seconds) at the first trace point with best <= target; (nan, nan) if never."""
    for s, calls, best in trace:
        if best <= target:
            return float(calls), float(s)
    return math.nan, math.nan


def targets(rows: list[dict]) -> dict[tuple[str, int], float]:
    best: dict[tuple[str, int], float] = {}
    for r in rows:
        key = (r["graph"], r["n_devices"])
        best[key] = min(best.get(key, math.inf), r["best_us"])
    return {k: WITHIN * v for k, v in best.items()}


def _cell(calls: float, secs: float, r: dict) -> str:
    if math.isnan(calls):
        return f"> {r['calls']} (> {r['seconds']:.0f} s)"
    return f"{calls:.0f} ({secs:.1f} s)"


def _ratio(a: tuple[float, dict], b: tuple[float, dict]) -> str:
    """calls(a) / calls(b), with bounds when one did not reach the target."""
    (ca, ra), (cb, rb) = a, b
    if math.isnan(ca) and math.isnan(cb):
        return "—"
    if math.isnan(ca):
        return f"> {ra['calls'] / cb:.1f}"
    if math.isnan(cb):
        return f"< {ca / rb['calls']:.2f}"
    return f"{ca / cb:.2f}"


def report(rows: list[dict], command: str, refs: dict[tuple[str, int], tuple[float, float]] | None = None) -> str:
    """The markdown table; refs: (graph, devices) -> (single device, expert) ms (`reference_ms`), for the columns
    and the check that rnn and hierarchical beat both."""
    refs = refs or {}
    tg = targets(rows)
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    by = {(r["graph"], r["n_devices"], r["method"]): r for r in rows}
    pairs = [(a, b) for a in ("rnn", "hierarchical") for b in ("placeto", "placeto-finetuned")
             if a in methods and b in methods]
    lines = ["# Sample efficiency of the learned placers", "", f"Command (last run): `{command}`", "",
             f"Simulator calls (and wall seconds, jit compilation excluded) until the best placement found so far is "
             f"within {100 * (WITHIN - 1):.0f}% of the best objective any of these learned runs reached on that "
             f"graph and device count (a search such as local search may find better: `placeto compare`); "
             f"`> N (> S s)`: not reached within the run's N calls / S seconds. Placeto simulates once per "
             f"step (N calls per episode of N ops) where rnn, hierarchical and gdp simulate once per whole "
             f"placement, so its calls are not the paper's training steps: see the seconds too.", "",
             "These runs stop early by design (at most 20,000 calls and 2 minutes each): too soon for Placeto from "
             "scratch, whose episode costs one call per node, to converge. Its rows here were measured with the "
             "earlier configuration (8 episodes per update, a decaying learning rate: 50 Adam steps in "
             "400 episodes), which left the policy where it started on most rows "
             "(experiments/results/ablations/placeto_ablation.md). experiments/results/reproduce/paper_table.md "
             "trains Placeto (today's "
             "defaults) and the RNN placer per graph for minutes per run, with learning curves.", "",
             "| graph | devices | single ms | expert ms | target ms | " + " | ".join(methods)
             + "".join(f" | {a} / {b}" for a, b in pairs)
             + " |", "|---|---:|---:|---:|---:|" + "---:|" * (len(methods) + len(pairs))]
    ratios: dict[tuple[str, str], list[float]] = {p: [] for p in pairs}
    for g, d in sorted(tg, key=lambda k: (GRAPHS.index(k[0]) if k[0] in GRAPHS else 99, k[1])):
        reach = {m: (to_target(by[(g, d, m)]["trace"], tg[(g, d)])[0], by[(g, d, m)]) for m in methods
                 if (g, d, m) in by}
        cells = [_cell(*to_target(by[(g, d, m)]["trace"], tg[(g, d)]), by[(g, d, m)]) if (g, d, m) in by else "—"
                 for m in methods]
        rcells = []
        for a, b in pairs:
            rcells.append(_ratio(reach[a], reach[b]) if a in reach and b in reach else "—")
            if a in reach and b in reach and not math.isnan(reach[a][0]) and not math.isnan(reach[b][0]):
                ratios[(a, b)].append(reach[a][0] / reach[b][0])
        single, expert = refs.get((g, d), (math.nan, math.nan))
        lines.append(f"| {g} | {d} | {single:.2f} | {expert:.2f} | {tg[(g, d)] / 1e3:.2f} | "
                     + " | ".join(cells + rcells) + " |")
    lines += ["", f"Paper (Placeto, Addanki et al. 2019): up to {PAPER_RATIO}x fewer training steps than the "
              "RNN-based approach. Here, where both reached the target:", ""]
    for (a, b), vals in ratios.items():
        text = (f"max {max(vals):.2f}x, median {np.median(vals):.2f}x over {len(vals)} rows" if vals else
                "no row where both reached it")
        lines.append(f"- calls of {a} / calls of {b}: {text} (paper: up to {PAPER_RATIO}x)")
    lines += ["", "Best placement of each run against the single device (every row) and the human expert (the nmt "
              "rows), within the run's budget:", ""]
    for m in methods:
        runs = [r for r in rows if r["method"] == m and (r["graph"], r["n_devices"]) in refs]
        beat = [r for r in runs if r["best_us"] / 1e3 < refs[(r["graph"], r["n_devices"])][0]]
        nmt = [r for r in runs if r["graph"].startswith("nmt")]
        beat_expert = [r for r in nmt if r["best_us"] / 1e3 < refs[(r["graph"], r["n_devices"])][1]]
        lose = ", ".join(f"{r['graph']}@{r['n_devices']}d" for r in nmt if r not in beat_expert)
        lines.append(f"- {m}: better than the single device on {len(beat)} of {len(runs)} rows, than the expert on "
                     f"{len(beat_expert)} of {len(nmt)} nmt rows" + (f" (not: {lose})" if lose else ""))
    missing = [f"{g}@{d}d" for g in GRAPHS for d in sorted({r['n_devices'] for r in rows})
               if not any(r["graph"] == g and r["n_devices"] == d for r in rows)]
    if missing:
        lines += ["", f"Rows not run yet: {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], graph: str, path: Path) -> None:
    """Best-so-far objective / best found vs simulator calls, one panel per device count, in the methods' shared
    colours (placeto.harness.plot_style: learned thick and solid); the dashed line is the target (WITHIN x best)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from placeto.harness import plot_style

    devices = sorted({r["n_devices"] for r in rows if r["graph"] == graph})
    tg = targets(rows)
    colors = plot_style.colors(r["method"] for r in rows if r["graph"] == graph)
    fig, axes = plt.subplots(1, len(devices), figsize=(5.2 * len(devices) + 1.8, 4.2), squeeze=False,
                             layout="constrained")
    for ax, d in zip(axes[0], devices):
        best = tg[(graph, d)] / WITHIN
        for r in rows:
            if r["graph"] == graph and r["n_devices"] == d and r["trace"]:
                tr = np.asarray(r["trace"], np.float64)
                ax.step(np.append(tr[:, 1], r["calls"]), np.append(tr[:, 2], tr[-1, 2]) / best, where="post",
                        label=r["method"], **plot_style.line_style(r["method"], colors[r["method"]]))
        ax.axhline(WITHIN, color="black", linestyle=":", linewidth=1.2)
        ax.set_xscale("log")
        ax.set_xlabel("simulator calls (log scale)")
        ax.set_ylabel("best objective so far / best found")
        ax.set_title(f"{graph}, {d} devices")
        ax.grid(alpha=0.3)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}
    handles[f"target: {WITHIN} x best found"] = Line2D([], [], color="black", linestyle=":", linewidth=1.2)
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8, title="method",
               title_fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", default=",".join(GRAPHS), help="benchmark models, comma separated")
    p.add_argument("--devices", default="2,4,8")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--calls", type=int, default=50000, help="simulator calls per run")
    p.add_argument("--minutes", type=float, default=10.0, help="wall minutes per run (compilation excluded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reproduce"))
    p.add_argument("--report-only", action="store_true",
                   help="write the .md and the plots from the rows already in the CSV (e.g. of a stopped run)")
    args = p.parse_args(argv)
    graphs, methods = args.graphs.split(","), args.methods.split(",")
    bad = [x for x in graphs if x not in GRAPHS] + [m for m in methods if m not in METHODS]
    if bad or args.calls < 1 or not args.minutes > 0:
        print(f"sample_efficiency: error: unknown {bad} or a non-positive budget", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "sample_efficiency.csv"
    rows = read_rows(csv_path)
    done = {(r["graph"], r["n_devices"], r["method"]) for r in rows}
    command = "python -m experiments.reproduce.sample_efficiency " + " ".join(argv if argv is not None
                                                                                else sys.argv[1:])
    for g in [] if args.report_only else graphs:
        graph = load_graph(ROOT / "datasets" / "benchmarks" / f"{g}.json.gz")
        for d in [int(x) for x in args.devices.split(",")]:
            for m in methods:
                if (g, d, m) in done:
                    continue
                print(f"-- {g} {d} devices {m}", flush=True)
                trace, calls, secs, comp = run_one(m, graph, cluster_preset("placeto-k80", d), args.calls,
                                                   60 * args.minutes, args.seed)
                rows.append({"graph": g, "n_devices": d, "method": m, "budget_calls": args.calls,
                             "budget_seconds": 60 * args.minutes, "calls": calls, "seconds": round(secs, 3),
                             "compile_seconds": round(comp, 3), "best_us": min((t[2] for t in trace), default=math.inf),
                             "trace": [list(t) for t in trace]})
                write_rows(csv_path, rows)  # after every run: a kill loses at most the run in progress
                print(f"   best {rows[-1]['best_us'] / 1e3:.3f} ms, {calls} calls, {secs:.0f} s", flush=True)
        plot(rows, g, out / f"sample_efficiency_{g}.png")
    if args.report_only:
        for g in sorted({r["graph"] for r in rows}):
            plot(rows, g, out / f"sample_efficiency_{g}.png")
        if rows:  # the command that ran the rows (their budgets)
            command = (f"python -m experiments.reproduce.sample_efficiency --calls {rows[0]['budget_calls']} "
                       f"--minutes {float(rows[0]['budget_seconds']) / 60:g}")
    refs = {}
    for g in sorted({r["graph"] for r in rows}):
        graph = load_graph(ROOT / "datasets" / "benchmarks" / f"{g}.json.gz")
        for d in sorted({r["n_devices"] for r in rows if r["graph"] == g}):
            refs[(g, d)] = reference_ms(graph, cluster_preset("placeto-k80", d))
    text = report(rows, command, refs)
    atomic_write_bytes(out / "sample_efficiency.md", text.encode())
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
