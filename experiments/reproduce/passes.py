"""Passes where they pay: the Placeto policy's zero-shot pass with n = 1, 2, 3, 4 passes over the nodes, against
its wall time, beside local search and simulated annealing given the same wall time.

Placeto (the paper) visits each node n times per episode (PlacetoConfig.passes); an episode keeps the best
placement it visits, so each more pass can only improve on the one before, at the price of one more pass of wall
time. For each held-out group G (placeto.distribution.GROUPS) the test graphs of G's families (`--max-graphs` per
family) are placed by the policy trained without G (`<runs>/placeto-without-<G>`, trained and selected by
experiments/reproduce/generalization.py), zero-shot, with its parameters and its start but n passes: on
`--devices` identical K80s for the traced families, on their own clusters for the generated ones. Each pass is
timed with compilation excluded (generalization's `_one_pass`: placed once, the list-scheduler start's cache
cleared, timed a second time); local search and simulated annealing (`sa`, placeto.baselines.sa) then get exactly
that wall time (seed 0). Ratios are to etf's objective (placeto.objective: the simulated step time where it fits),
geometric means over the group's test tasks.

    python -m experiments.reproduce.passes [--runs DIR] [--groups recurrent,convolutional,dense,generated] \
        [--max-graphs 2] [--devices 4] [--passes 1,2,3,4]

Writes experiments/results/reproduce/passes.md and passes_<group>.png; rows are cached in passes.csv (appended as
they come, keyed by group|graph|cluster|devices|n: a killed run resumes; delete it to recompute).
"""

from __future__ import annotations

import argparse
import io
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.reproduce import generalization as G  # noqa: E402
from placeto import distribution as dist  # noqa: E402
from placeto.baselines import run_method  # noqa: E402
from placeto.methods.placeto.place import read_config  # noqa: E402
from placeto.objective import score_batch  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "reproduce"
RUNS = ROOT / "runs" / "generalization"
METHODS = ("placeto", "local-search", "sa")  # the plotted lines (placeto.harness.plot_style colours)
PASSES = (1, 2, 3, 4)
MAX_GRAPHS = 2  # test graphs per family
DEVICES = 4  # identical K80s of the traced families' tasks
K80 = "placeto-k80"


def tasks_of(group: str, max_graphs: int = MAX_GRAPHS, devices: int = DEVICES) -> list[dist.Task]:
    """The test tasks of `group`'s families: the first `max_graphs` test graphs of each, a traced family's on
    `devices` identical K80s, a generated family's on its own cluster."""
    return [t for fam in dist.GROUPS[group]
            for t in dist.family_tasks(fam, "test", clusters=((K80, devices),), max_graphs=max_graphs)[:max_graphs]]


def row_key(group: str, task: dist.Task, n: int) -> str:
    """A row's identity: group|graph|cluster|devices|n."""
    return f"{group}|{task.graph.name}|{task.cluster.name}|{task.cluster.n_devices}|{n}"


def pass_row(group: str, task: dist.Task, n: int, run: Path, seed: int = 0) -> dict:
    """One task at n passes: the policy of run directory `run` placing with n passes (its objective, us, and wall
    seconds, compilation excluded), local search and sa each given that wall time (their objectives and the
    seconds they took), and etf's objective; ratios to etf."""
    g, c = task.graph, task.cluster
    placement, seconds = G._one_pass("placeto", run, g, c)
    runs = {"local-search": run_method("local-search", g, c, seed, budget=None, seconds=seconds),
            "sa": run_method("sa", g, c, seed, budget=None, seconds=seconds), "etf": run_method("etf", g, c, 0)}
    scores = score_batch(g, np.stack([placement, *(r.placement for r in runs.values())]), c)
    us = dict(zip(("placeto", *runs), (float(s) for s in scores)))
    row = {"key": row_key(group, task, n), "group": group, "family": task.family, "graph": g.name,
           "nodes": g.n_nodes, "cluster": c.name, "devices": c.n_devices, "passes": n,
           "budget_s": round(seconds, 5), "placeto_s": round(seconds, 5)}
    for m in ("local-search", "sa"):
        row[f"{m}_s"] = round(runs[m].seconds, 5)
    for m in (*METHODS, "etf"):
        row[f"{m}_us"] = round(us[m], 3)
    for m in METHODS:
        row[f"{m}_x_etf"] = round(us[m] / us["etf"], 6)
    return row


def measure(runs: Path = RUNS, groups=tuple(dist.GROUPS), max_graphs: int = MAX_GRAPHS, devices: int = DEVICES,
            passes=PASSES, csv_path: Path = RESULTS / "passes.csv",
            tasks: dict[str, list[dist.Task]] | None = None) -> list[dict]:
    """The rows of every group with a run directory (`<runs>/placeto-without-<group>`; a group without one is
    skipped with a note) x its test tasks (`tasks_of`, or `tasks[group]` where given) x `passes`, cached in
    `csv_path`. Each n places through a temporary copy of the run directory with `passes` n (its parameters, its
    start)."""
    todo, keys = [], []
    with tempfile.TemporaryDirectory(prefix="placeto-passes-") as tmp:
        for group in groups:
            run = Path(runs) / f"placeto-without-{group}"
            if not (run / "config.json").is_file():
                print(f"{group}: no run directory {run} (skipped)", flush=True)
                continue
            start = read_config(run).init_placement
            group_tasks = tasks[group] if tasks is not None else tasks_of(group, max_graphs, devices)
            for n in passes:
                d = G._candidate_dir(run, None, n, start, Path(tmp) / group)
                for t in group_tasks:
                    keys.append(row_key(group, t, n))
                    todo.append((keys[-1], (group, t, n, d)))
        rows = G._cached_rows(Path(csv_path), todo, pass_row)
    return [rows[k] for k in keys]


def summary(rows: list[dict]) -> dict[str, dict[int, dict]]:
    """{group: {n: figures}}: tasks, mean pass seconds, and geometric means over the tasks of each method's
    ratio to etf and of placeto over local search and over sa."""
    out: dict[str, dict[int, dict]] = {}
    for r in rows:
        out.setdefault(str(r["group"]), {}).setdefault(int(r["passes"]), []).append(r)
    for group, by_n in out.items():
        for n, rs in by_n.items():
            fig = {"tasks": len(rs), "seconds": float(np.mean([float(r["placeto_s"]) for r in rs]))}
            for m in METHODS:
                fig[m] = G._gm(float(r[f"{m}_x_etf"]) for r in rs)
            for m in ("local-search", "sa"):
                fig[f"placeto/{m}"] = G._gm(float(r["placeto_us"]) / float(r[f"{m}_us"]) for r in rs)
            by_n[n] = fig
        out[group] = dict(sorted(by_n.items()))
    return out


def plot_group(group: str, figures: dict[int, dict], path: Path) -> None:
    """Geometric-mean ratio to etf against mean wall seconds (log): Placeto's n-pass points, local search and sa
    at the same times, points labelled n=1..4; etf at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from placeto.harness import plot_style

    ns = list(figures)
    x = [figures[n]["seconds"] for n in ns]
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    for m in METHODS:
        y = [figures[n][m] for n in ns]
        ax.plot(x, y, marker="o", label=m, **plot_style.line_style(m))
        if m == "placeto":
            for n, xi, yi in zip(ns, x, y):
                ax.annotate(f"n={n}", (xi, yi), textcoords="offset points", xytext=(4, 5), fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":", label="etf")
    ax.set_xscale("log")
    ax.margins(x=0.12, y=0.08)  # room for the points' labels
    ax.set_xlabel("wall seconds per task (log scale; mean of the pass's)")
    ax.set_ylabel("objective / etf's (geometric mean)")
    tasks = figures[ns[0]]["tasks"] if ns else 0
    ax.set_title(f"{group} held out: Placeto's n passes and search at its time ({tasks} tasks)", fontsize=9)
    ax.grid(alpha=0.3)
    plot_style.legend_outside(ax, len(METHODS) + 1)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def write_report(rows: list[dict], command: str, out: Path = RESULTS) -> Path:
    """passes.md (the command, then a table and a plot per group) and passes_<group>.png in `out`."""
    lines = ["# Passes where they pay: Placeto's n-pass zero-shot against search at the same wall time", "",
             f"Command: `{command}` (this 2-core CPU machine; simulated step times under the feasibility-first "
             "objective; ratios to etf, geometric means over each group's test tasks).", "",
             __doc__.split("\n\n", 1)[1].split("\n    python", 1)[0].strip(), ""]
    if not rows:
        lines += ["No group had a run directory (`placeto-without-<group>`): nothing measured.", ""]
    for group, figures in summary(rows).items():
        png = out / f"passes_{group}.png"
        plot_group(group, figures, png)
        n_tasks = next(iter(figures.values()))["tasks"]
        lines += [f"## {group} held out ({n_tasks} test tasks, policy `placeto-without-{group}`)", "",
                  "| n | mean pass s | placeto x etf | local search x etf | sa x etf | placeto / local search | "
                  "placeto / sa |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for n, f in figures.items():
            lines.append(f"| {n} | {f['seconds']:.3f} | {f['placeto']:.4f} | {f['local-search']:.4f} | "
                         f"{f['sa']:.4f} | {f['placeto/local-search']:.4f} | {f['placeto/sa']:.4f} |")
        lines += ["", f"![{group}]({png.name})", ""]
    path = out / "passes.md"
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    return path


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, default=RUNS, help="folder of the placeto-without-<group> run directories")
    p.add_argument("--groups", default=",".join(dist.GROUPS), help="held-out groups, comma-separated")
    p.add_argument("--max-graphs", type=int, default=MAX_GRAPHS, help="test graphs per family")
    p.add_argument("--devices", type=int, default=DEVICES, help="identical K80s of the traced families' tasks")
    p.add_argument("--passes", type=_ints, default=PASSES, help="numbers of passes, comma-separated")
    args = p.parse_args(argv)
    groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    unknown = [g for g in groups if g not in dist.GROUPS]
    if unknown:
        p.error(f"unknown groups {unknown} (known: {', '.join(dist.GROUPS)})")
    from simulator.measure import cache

    cache.enable_compile_cache()
    rows = measure(args.runs, groups, args.max_graphs, args.devices, args.passes)
    command = "python -m experiments.reproduce.passes " + " ".join(shlex.quote(a) for a in (
        sys.argv[1:] if argv is None else argv))
    print(write_report(rows, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
