"""Anytime comparison: the best simulated runtime each method reaches at equal wall-clock budgets per graph.

For every graph of a family's test split (or the benchmark models) and every device count, each method runs
once per budget S (`placeto compare --seconds S`: the same wall seconds for every method that searches or
samples, its inference included, jit compilation excluded and reported apart; one objective and one
simulator-call meter for all, `placeto.objective`). The tables give the runtime at each budget; the curves
(best objective so far vs wall seconds and vs simulator calls) come from the runs at the command's largest
budget S, of every method that ran at S (traces are kept, so a rerun of some methods redraws all), normalised
per graph by the best runtime any method found at any budget, averaged over the graphs.

    python -m experiments.benchmarks.anytime --family nmt --devices 4 --seconds 0.1,1,10
    python -m experiments.benchmarks.anytime --benchmarks --devices 2,4,8 --seconds 0.1,1,10
    python -m experiments.benchmarks.anytime --family nmt --replot    # redraw the curves PNGs, no runs

Writes experiments/results/benchmarks/anytime_<family>.md (+ .csv, _traces.json.gz, _curves_<devices>dev_<S>s.png);
rerunning with other --devices, --seconds or --methods adds to the same files (rows and traces of other
(device count, budget, method) triples are kept).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.arguments import COUNT, OneLineParser, comma_list, float_in  # noqa: E402
from placeto.cli.arguments import DEVICES
from placeto.harness.compare import Row, compare, resolve_methods  # noqa: E402
from simulator.workloads.families import load_family  # noqa: E402
from simulator.model.errors import InputError  # noqa: E402
from simulator.model.io import atomic_write_bytes, atomic_write_csv, load_graph  # noqa: E402

METHODS = ["etf", "local-search", "sa", "placeto", "placeto-search", "gdp", "gdp-search"]
CLASSICAL = ["etf", "local-search", "sa"]  # the learned searches are judged against the best of these
SEARCHES = ["placeto-search", "gdp-search"]  # policy-guided searches
FIELDS = ["graph", "n_devices", "seconds", "method", "runtime_us", "place_seconds", "compile_seconds",
          "simulator_calls", "oom"]


def run(graphs, devices: list[int], budgets: list[float], methods: list[str], checkpoint: str | None,
        finetune: int, workers=None) -> tuple[list[dict], dict]:
    """(rows as dicts, traces {(graph, devices, seconds, method): ((s, calls, best_us), ...)}).
    workers: a placeto.rollouts.distributed.WorkerSpec: graphs in Ray tasks (one CPU each, so budgets stay comparable
    only while no two tasks share a core)."""
    rows, traces = [], {}
    for d in devices:
        for s in budgets:
            print(f"-- {d} devices, {s:g} s per graph and method", flush=True)
            res: list[Row] = compare(graphs, [d], methods, seed=0, budget=None, seconds=s, checkpoint=checkpoint,
                                     finetune_episodes=finetune, progress=True, workers=workers)
            for r in res:
                rows.append({"graph": r.graph, "n_devices": d, "seconds": s, "method": r.method,
                             "runtime_us": r.runtime_us, "place_seconds": round(r.place_seconds, 3),
                             "compile_seconds": round(r.compile_seconds, 3), "simulator_calls": r.simulator_calls,
                             "oom": r.oom})
                traces[(r.graph, d, s, r.method)] = r.trace
    return rows, traces


def merge(old_csv: Path, rows: list[dict]) -> list[dict]:
    """The CSV's rows with those of every (device count, budget, method) rerun now replaced by the new rows (in
    the old rows' places, so that the tables keep their column order), then the new rows that replace none."""
    if not old_csv.exists():
        return rows
    redone = {(r["n_devices"], r["seconds"], r["method"]) for r in rows}
    fresh = {(r["graph"], r["n_devices"], r["seconds"], r["method"]): r for r in rows}
    with old_csv.open() as f:
        old = [dict(r, n_devices=int(r["n_devices"]), seconds=float(r["seconds"]),
                    runtime_us=float(r["runtime_us"] or "nan"), simulator_calls=int(r["simulator_calls"]),
                    place_seconds=float(r["place_seconds"]), compile_seconds=float(r["compile_seconds"]),
                    oom=r["oom"] == "True") for r in csv.DictReader(f)]
    out = []
    for r in old:
        if (r["n_devices"], r["seconds"], r["method"]) not in redone:
            out.append(r)
        elif (key := (r["graph"], r["n_devices"], r["seconds"], r["method"])) in fresh:
            out.append(fresh.pop(key))
    return out + list(fresh.values())


def load_traces(path: Path) -> dict:
    """The kept traces {(graph, devices, seconds, method): ((s, calls, best_us), ...)} of `path`
    (anytime_<name>_traces.json.gz, written by save_traces); {} if it is missing or unreadable (a warning)."""
    if not path.exists():
        return {}
    try:
        with gzip.open(path, "rt") as f:
            runs = json.load(f)["runs"]
        return {(str(r["graph"]), int(r["n_devices"]), float(r["seconds"]), str(r["method"])):
                tuple((float(a), int(b), float(c)) for a, b, c in r["trace"]) for r in runs}
    except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
        print(f"anytime: {path}: unreadable traces ignored ({type(e).__name__}: {e})", file=sys.stderr)
        return {}


def save_traces(path: Path, traces: dict) -> None:
    """Writes `traces` (load_traces' form) as gzipped JSON, atomically."""
    runs = [{"graph": g, "n_devices": d, "seconds": s, "method": m, "trace": [list(t) for t in tr]}
            for (g, d, s, m), tr in traces.items()]
    atomic_write_bytes(path, gzip.compress(json.dumps({"runs": runs}).encode(), mtime=0))


def commands(old_md: Path, cmd: str) -> list[str]:
    """The commands named in the report `old_md` (if it exists), then `cmd` (moved to the end if named)."""
    text = old_md.read_text() if old_md.exists() else ""
    found = re.findall(r"`(python -m experiments\.benchmarks\.anytime [^`]*)`", text)
    return [c for c in dict.fromkeys(found) if c != cmd] + [cmd]


def summary(rows: list[dict]) -> list[str]:
    """Markdown: per (devices, budget) a table of runtimes and each learned search's standing vs the classical
    best."""
    lines = []
    for d in sorted({r["n_devices"] for r in rows}):
        for s in sorted({r["seconds"] for r in rows if r["n_devices"] == d}):
            sel = [r for r in rows if r["n_devices"] == d and r["seconds"] == s]
            methods = list(dict.fromkeys(r["method"] for r in sel))
            graphs = list(dict.fromkeys(r["graph"] for r in sel))
            by = {(r["graph"], r["method"]): r for r in sel}
            searches = [m for m in SEARCHES if m in methods]
            lines += [f"### {d} devices, {s:g} s per graph", "",
                      "| graph | " + " | ".join(methods) + "".join(f" | {m} / best classical" for m in searches) +
                      " |", "|---|" + "---:|" * (len(methods) + len(searches))]
            ratios = {m: [] for m in searches}
            for g in graphs:
                vals = {m: by[(g, m)]["runtime_us"] for m in methods if (g, m) in by}
                best = min(v for v in vals.values() if not math.isnan(v))
                cells = [("**%.2f**" if vals[m] == best else "%.2f") % (vals[m] / 1e3) if m in vals else "—"
                         for m in methods]
                classical = [vals[m] for m in CLASSICAL if m in vals]
                for m in searches:
                    ratios[m].append(vals[m] / min(classical) if classical and m in vals else math.nan)
                lines.append(f"| {g} | " + " | ".join(cells) + "".join(f" | {ratios[m][-1]:.3f}" for m in searches)
                             + " |")
            lines.append("")
            mean_ratio = {m: np.mean([by[(g, m)]["runtime_us"] / min(by[(g, k)]["runtime_us"] for k in methods
                                                                     if (g, k) in by)
                                      for g in graphs if (g, m) in by]) for m in methods}
            calls = {m: np.mean([by[(g, m)]["simulator_calls"] for g in graphs if (g, m) in by]) for m in methods}
            comp = {m: np.mean([by[(g, m)]["compile_seconds"] for g in graphs if (g, m) in by]) for m in methods}
            lines += ["| method | mean x best | mean simulator calls | mean compile s (excluded) |",
                      "|---|---:|---:|---:|"]
            lines += [f"| {m} | {mean_ratio[m]:.3f} | {calls[m]:.0f} | {comp[m]:.2f} |" for m in methods]
            lines.append("")
            for m in searches:
                ok = [x for x in ratios[m] if not math.isnan(x)]
                if ok:
                    wins = sum(x <= 1.0 for x in ok)
                    gain = 100 * (1 - np.mean(ok))
                    lines.append(f"{m} at least as good as the best of {', '.join(CLASSICAL)} on {wins} of {len(ok)} "
                                 f"graphs ({100 * wins / len(ok):.0f}%); mean ratio {np.mean(ok):.3f} "
                                 f"({abs(gain):.1f}% {'better' if gain >= 0 else 'worse'}).  ")
            lines.append("")
    return lines + overall(rows)


def overall(rows: list[dict]) -> list[str]:
    """Markdown: per budget, each learned search's mean ratio to the best method of its row (any method), over
    every (graph, device count) row that ran it, when those span more than one device count."""
    lines = []
    for s in sorted({r["seconds"] for r in rows}):
        sel = [r for r in rows if r["seconds"] == s and not math.isnan(r["runtime_us"])]
        best: dict[tuple[str, int], float] = {}
        for r in sel:
            key = (r["graph"], r["n_devices"])
            best[key] = min(best.get(key, math.inf), r["runtime_us"])
        for m in SEARCHES:
            mine = [r for r in sel if r["method"] == m]
            ratios = [r["runtime_us"] / best[(r["graph"], r["n_devices"])] for r in mine]
            devices = sorted({r["n_devices"] for r in mine})
            if len(devices) > 1:
                lines.append(f"Over all device counts ({','.join(map(str, devices))}) at {s:g} s: {m} "
                             f"{np.mean(ratios):.3f}x the best method of its row, mean over {len(ratios)} rows.  ")
    return lines + [""] if lines else []


def plot_curves(traces: dict, rows: list[dict], path: Path, title: str, seconds: float) -> None:
    """Mean over graphs of best-so-far / best-of-all vs wall seconds (log, up to `seconds`) and vs simulator calls
    (log), one row of panels per device count, in the methods' shared colours (placeto.harness.plot_style: learned
    methods thick and solid, classical ones dashed). traces: {(graph, devices, method): ((s, calls, best_us),
    ...)} of runs at one budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from placeto.harness import plot_style

    devices = sorted({k[1] for k in traces})
    fig, axes = plt.subplots(len(devices), 2, figsize=(12, 3.6 * len(devices) + 0.6), squeeze=False,
                             layout="constrained")
    best = {}
    for r in rows:
        key = (r["graph"], r["n_devices"])
        if not math.isnan(r["runtime_us"]):
            best[key] = min(best.get(key, math.inf), r["runtime_us"])
    made = {(r["graph"], r["n_devices"], r["method"]): r["simulator_calls"] for r in rows if r["seconds"] == seconds}
    grid_s = np.logspace(-2, math.log10(seconds), 60)
    grid_c = np.logspace(0, math.log10(max([10, *(made.get(k, 0) for k in traces)])), 60)
    colors = plot_style.colors(dict.fromkeys(k[2] for k in traces))
    for i, d in enumerate(devices):
        for m in dict.fromkeys(k[2] for k in traces if k[1] == d):
            keys = [k for k in traces if k[1] == d and k[2] == m and traces[k]]
            for j, (grid, col) in enumerate(((grid_s, 0), (grid_c, 1))):
                curves = []
                for k in keys:
                    tr = np.asarray(traces[k], dtype=np.float64)
                    idx = np.searchsorted(tr[:, col], grid, side="right") - 1
                    vals = np.where(idx >= 0, tr[np.maximum(idx, 0), 2], np.nan) / best[(k[0], d)]
                    if col == 1:  # no line beyond the calls the run made
                        vals[grid > made.get(k, math.inf)] = np.nan
                    curves.append(vals)
                if curves:  # the mean over graphs, where every graph's run still counts
                    axes[i, j].plot(grid, np.asarray(curves).mean(axis=0), label=m,
                                    **plot_style.line_style(m, colors[m]))
        for j, xlabel in enumerate(("wall seconds per graph (log scale)", "simulator calls (log scale)")):
            ax = axes[i, j]
            ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best runtime so far / best found\n(mean over graphs; 1 = best of all)")
            ax.set_title(f"{d} devices")
            ax.grid(alpha=0.3)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8, title="method",
               title_fontsize=8)
    fig.suptitle(f"{title}: best placement found within {seconds:g} s per graph (solid: learned, dashed: "
                 f"classical)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(out: Path, name: str) -> list[Path]:
    """Redraw every `anytime_<name>_curves_<devices>dev_<S>s.png` in `out` from the CSV and kept traces (no
    runs); returns the files drawn."""
    rows, kept = merge(out / f"anytime_{name}.csv", []), load_traces(out / f"anytime_{name}_traces.json.gz")
    drawn = []
    for png in sorted(out.glob(f"anytime_{name}_curves_*dev_*s.png")):
        got = re.fullmatch(rf"anytime_{re.escape(name)}_curves_([0-9_]+)dev_([0-9.e+-]+)s\.png", png.name)
        if got is None:
            continue
        devices, s = {int(x) for x in got.group(1).split("_")}, float(got.group(2))
        at_s = {(g, d, m): tr for (g, d, t, m), tr in kept.items() if t == s and d in devices}
        if at_s:
            plot_curves(at_s, rows, png, name, s)
            drawn.append(png)
    return drawn


def main(argv=None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--family", help="a family's test split")
    what.add_argument("--benchmarks", action="store_true", help="the benchmark models")
    p.add_argument("--devices", type=comma_list(DEVICES), default=[4], help="device counts, e.g. 2,4,8")
    p.add_argument("--seconds", type=comma_list(float_in(0.001, 86400.0)), default=[0.1, 1.0, 10.0],
                   help="wall-clock budgets per graph, e.g. 0.1,1,10,60")
    p.add_argument("--methods", type=comma_list(str), default=METHODS,
                   help="a rerun of some methods replaces only their rows (and kept traces)")
    p.add_argument("--checkpoint", default=None, help="policy (shipped name or run dir; default: the general one)")
    p.add_argument("--finetune-episodes", type=COUNT, default=0)
    p.add_argument("--graphs", type=COUNT, default=0, help="only the first N graphs (0: all)")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "benchmarks"))
    p.add_argument("--replot", action="store_true",
                   help="only redraw the curves PNGs already in --out from the CSV and kept traces (no runs)")
    from placeto.cli.arguments import add_worker_arguments, spec_from_args

    add_worker_arguments(p, "graphs (one Ray task per graph, one CPU each)")
    args = p.parse_args(argv)
    try:
        methods = resolve_methods(args.methods)
        workers = spec_from_args(args)
        graphs = (sorted((load_graph(f) for f in (ROOT / "datasets" / "benchmarks").glob("*.json.gz")),
                         key=lambda g: g.name) if args.benchmarks else load_family(args.family, "test"))
    except InputError as e:
        print(f"anytime: error: {e}", file=sys.stderr)
        return 2
    graphs = graphs[:args.graphs] if args.graphs else graphs
    devices, budgets = args.devices, args.seconds
    name = "benchmarks" if args.benchmarks else args.family
    if args.replot:
        print("\n".join(str(p) for p in replot(Path(args.out), name)) or "anytime: no curves to redraw")
        return 0
    rows, traces = run(graphs, devices, budgets, methods, args.checkpoint, args.finetune_episodes, workers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = merge(out / f"anytime_{name}.csv", rows)
    atomic_write_csv(out / f"anytime_{name}.csv", rows, FIELDS)
    cmd = "python -m experiments.benchmarks.anytime " + " ".join(argv if argv is not None else sys.argv[1:])
    text = [f"# Anytime comparison: {name}", "", "Commands, in order (each replaced the rows of its methods at its "
            "device counts and budgets):", "", *(f"- `{c}`" for c in commands(out / f"anytime_{name}.md", cmd)), "",
            "Runtimes in ms (simulated, placeto-k80 preset). Every method gets the same wall seconds per graph "
            "(inference and fine-tuning included, jit compilation excluded: its own column); etf does not search "
            "and takes what it takes. Policies: " + (f"{args.checkpoint} (methods of its kind), else " if
                                                     args.checkpoint else "") +
            "the shipped defaults: `general` for placeto and placeto-search, `gdp-general` for gdp and gdp-search.",
            "", *summary(rows), f"Curves: `anytime_{name}_curves_<devices>dev_<S>s.png`: the runs at budget S of "
            "every method that ran at it (traces kept in `anytime_{name}_traces.json.gz`)."]
    atomic_write_bytes(out / f"anytime_{name}.md", ("\n".join(text) + "\n").encode())
    kept = load_traces(out / f"anytime_{name}_traces.json.gz")
    kept = {k: v for k, v in kept.items() if (k[1], k[2], k[3]) not in
            {(d, s, m) for (_, d, s, m) in traces}} | traces
    save_traces(out / f"anytime_{name}_traces.json.gz", kept)
    s = max(budgets)
    at_s = {(g, d, m): tr for (g, d, t, m), tr in kept.items() if t == s and d in devices}
    plot_curves(at_s, rows, out / f"anytime_{name}_curves_{'_'.join(map(str, devices))}dev_{s:g}s.png", name, s)
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
