"""Placeto's one pass against what a user would otherwise run, on families held out of training and in distribution.

The runs of `experiments.reproduce.generalization train` (`runs/generalization/placeto-without-<group>`, their
config as trained: schedule features, undo_worse, the "list" start) place the test graphs zero-shot in one pass;
beside them the list schedulers, where the pass starts, and local search and simulated annealing given the pass's
own wall time. What the done-when of the learned-policy issue reads: the pass over etf, over its own start (the
policy's gain) and over local search at the same time, on identical devices; never slower than the single device;
memory-feasible wherever m-SCT is.

    python -m experiments.reproduce.learned_pass                 # every group with a run -> learned_pass.md
    python -m experiments.reproduce.learned_pass --inside-only    # the all-groups run on every family's test split

Baselines (single, etf, m-sct) come from generalization's cached generalization_baselines.csv; the policy rows are
cached in learned_pass_<heldout|inside>.csv (appended as they come: a killed evaluation resumes; delete to
recompute).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.reproduce import generalization as G  # noqa: E402
from placeto import distribution as dist  # noqa: E402
from placeto.baselines import METHODS, run_method  # noqa: E402
from placeto.methods.placeto.env import LIST_STARTS, list_start  # noqa: E402
from placeto.methods.placeto.place import read_config  # noqa: E402
from placeto.objective import fits_threshold, score_batch  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "reproduce"
COLUMNS = ("single", "etf", "m-sct", "start", "placeto", "ls@policy", "sa@policy")


def policy_row(task: dist.Task, run: Path, seed: int = 0) -> dict:
    """The run's one pass on `task` (compilation excluded), its start, and local search and SA given the pass's
    wall time: objectives (us) and wall seconds."""
    g, c = task.graph, task.cluster
    placement, seconds = G._one_pass("placeto", run, g, c)
    runs = {"placeto": (placement, seconds), "start": (list_start(g, c, read_config(run).init_placement), 0.0)}
    for name, label in (("local-search", "ls@policy"), ("sa", "sa@policy")):
        r = run_method(name, g, c, seed, budget=None, seconds=max(seconds, 0.01))
        runs[label] = (r.placement, r.seconds)
    scores = score_batch(g, np.stack([p for p, _ in runs.values()]), c)
    row = {"key": G.task_key(task), "run": run.name}
    for (label, (_, sec)), s in zip(runs.items(), scores):
        row[f"{label}_us"], row[f"{label}_s"] = round(float(s), 3), round(sec, 4)
    return row


def test_tasks(max_graphs: int | None = None) -> list[dist.Task]:
    """Every family's test split on generalization's EVAL_CLUSTERS (`max_graphs` per family; None: all)."""
    return [t for fam in dist.families() for t in dist.family_tasks(fam, "test", clusters=G.EVAL_CLUSTERS,
                                                                     max_graphs=max_graphs)]


def evaluate(runs: Path, tasks: list[dist.Task], inside_only: bool = False) -> dict[str, list[dict]]:
    """{"heldout": rows, "inside": rows}: every task of `tasks` with a run to place it, baselines joined."""
    base = G._cached_rows(RESULTS / "generalization_baselines.csv", [(G.task_key(t), (t,)) for t in tasks],
                          G.baseline_row)
    out = {}
    for label, group_of in (("heldout", dist.group_of), ("inside", lambda fam: "none")):
        if label == "heldout" and inside_only:
            continue
        cache = RESULTS / f"learned_pass_{label}.csv"
        done = {r["key"] for r in G._read_rows(cache)}
        todo = []
        for t in tasks:  # a cached row stands for its run even where the run directory is gone (a fresh clone)
            run = runs / f"placeto-without-{group_of(t.family)}"
            if (run / "config.json").is_file() or G.task_key(t) in done:
                todo.append((G.task_key(t), (t, run)))
        missing = sorted({group_of(t.family) for t in tasks} - {Path(a[1]).name.split("-without-")[1]
                                                                for _, a in todo})
        if missing:
            print(f"{label}: no run for {', '.join(missing)} (their tasks left out)", flush=True)
        rows = G._cached_rows(cache, todo, policy_row)
        out[label] = [{**base[k], **rows[k]} for k, _ in todo]
    return out


EARLIER = "generalization_heldout.csv"  # the earlier recipe's held-out rows (generalization.md), in RESULTS


def earlier_row(task: dist.Task, earlier: dict) -> dict:
    """The earlier recipe's pass on `task` under the present objective, as far as its recorded row tells.

    generalization_heldout.csv was measured under the objective of before feasibility first (an out-of-memory
    placement paid a small per-GB penalty). Where the pass returned its start (placeto_us == start_us) the
    placement is known: one of the "list" start's candidates (m-ETF, m-SCT, m-TOPO, HEFT, single; their
    placements have not changed, only the objective). A candidate that fits scores the same under both
    objectives, so a recorded start that matches none that fits was one that does not: it is re-scored as the
    least objective of the candidates that do not fit (the most favourable reading for the earlier recipe).
    Every other row keeps its recorded figure, which an out-of-memory placement can only have understated.
    """
    g, c = task.graph, task.cluster
    recorded, start = float(earlier["placeto_us"]), float(earlier["start_us"])
    row = {"key": G.task_key(task), "earlier_us": recorded, "rescored_us": recorded, "how": "as recorded"}
    if recorded != start:
        return row
    names = (*LIST_STARTS["list"], "single")
    scores = score_batch(g, np.stack([np.asarray(METHODS[m](g, c), np.int32) for m in names]), c)
    fits = scores < fits_threshold(g, c)
    if not np.any(fits & np.isclose(scores, start, rtol=1e-9, atol=1e-3)) and np.any(~fits):
        i = int(np.argmin(np.where(fits, np.inf, scores)))
        row["rescored_us"] = round(float(scores[i]), 3)
        row["how"] = f"its start, which does not fit: scored as the least that does not ({names[i]})"
    return row


def earlier_table(rows: list[dict], tasks: dict, out_dir: Path = RESULTS) -> list[str]:
    """Per held-out family: the earlier recipe's pass (as recorded; re-scored, `earlier_row`, cached in
    `out_dir`/learned_pass_earlier.csv) beside today's."""
    before = {r["key"]: r for r in G._read_rows(out_dir / EARLIER)}
    if not before:
        return []
    todo = [(r["key"], (tasks[r["key"]], before[r["key"]])) for r in rows if r["key"] in before]
    old = G._cached_rows(out_dir / "learned_pass_earlier.csv", todo, earlier_row)
    lines = ["| family | tasks | earlier as recorded | earlier re-scored | rows re-scored | placeto now | "
             "now <= earlier |", "|---|---:|---:|---:|---:|---:|---|"]
    fams = sorted({r["family"] for r in rows if r["key"] in old}, key=dist.families().index)
    for fam in fams:
        sel = [r for r in rows if r["family"] == fam and r["key"] in old]
        ratio = {col: G._gm(float(old[r["key"]][col]) / float(r["etf_us"]) for r in sel)
                 for col in ("earlier_us", "rescored_us")}
        now = G._gm(float(r["placeto_us"]) / float(r["etf_us"]) for r in sel)
        moved = sum(old[r["key"]]["how"] != "as recorded" for r in sel)
        lines.append(f"| {fam} | {len(sel)} | {ratio['earlier_us']:.3f} | {ratio['rescored_us']:.3f} | {moved} | "
                     f"{now:.3f} | {'yes' if now <= ratio['rescored_us'] + 5e-4 else '**no**'} |")
    notes = [f"- {k}: {v['how']}, {float(v['earlier_us']):.0f} -> {float(v['rescored_us']):.0f} us"
             for k, v in old.items() if v["how"] != "as recorded"]
    return lines + ([""] + notes if notes else [])


def _fits(row: dict, method: str) -> bool:
    """The method's placement fits in memory: its objective is below the task's threshold (2U, `_annotate`)."""
    return float(row[f"{method}_us"]) < row["_threshold"]


def table(rows: list[dict], by: str) -> list[str]:
    head = ["| " + by + " | tasks | " + " | ".join(COLUMNS) + " | gain over start | placeto / ls@policy | "
            "placeto worst | > single | OOM where m-sct fits |",
            "|---|---:|" + "---:|" * (len(COLUMNS) + 5)]
    keys = sorted({r[by] for r in rows}, key=lambda k: (dist.families().index(k) if k in dist.families() else -1, k))
    lines = []
    for key in [*keys, "**all**"]:
        sel = [r for r in rows if key == "**all**" or r[by] == key]
        if not sel:
            continue
        ratio = {m: [float(r[f"{m}_us"]) / float(r["etf_us"]) for r in sel] for m in COLUMNS}
        gain = 1.0 - G._gm(float(r["placeto_us"]) / float(r["start_us"]) for r in sel)
        vs_ls = G._gm(float(r["placeto_us"]) / float(r["ls@policy_us"]) for r in sel)
        slower = sum(float(r["placeto_us"]) > float(r["single_us"]) * (1 + 1e-9) for r in sel)
        oom = sum(not _fits(r, "placeto") and _fits(r, "m-sct") for r in sel)
        lines.append(f"| {key} | {len(sel)} | " + " | ".join(f"{G._gm(ratio[m]):.3f}" for m in COLUMNS)
                     + f" | {100 * gain:.1f}% | {vs_ls:.3f} | {max(ratio['placeto']):.3f} | {slower} | {oom} |")
    return head + lines


def _annotate(rows: list[dict], tasks: dict) -> None:
    """Add the grouping columns and each task's feasibility threshold (placeto.objective.fits_threshold)."""
    for r in rows:
        t = tasks[r["key"]]
        r["clusters"] = G._kind(r)
        r["_threshold"] = fits_threshold(t.graph, t.cluster)


RUNS_TOLD = "learned_pass_runs.json"  # {run name: "<n> episodes, <m> min"} of the runs behind the cached rows


def provenance(names: list[str], runs: Path = G.RUNS, out_dir: Path = RESULTS) -> dict[str, str]:
    """{run: "<n> episodes, <m> min"}: from the run directory where it is under `runs` (and then recorded in
    `out_dir`/RUNS_TOLD), else as recorded when its rows were measured."""
    path = out_dir / RUNS_TOLD
    told = json.loads(path.read_text()) if path.is_file() else {}
    fresh = {name: G._provenance("placeto", name.split("-without-")[1], runs) for name in names
             if (runs / name / "metrics.csv").is_file()}
    if fresh and {**told, **fresh} != told:
        told.update(fresh)
        atomic_write_bytes(path, (json.dumps(told, indent=1, sort_keys=True) + "\n").encode())
    return {name: told.get(name, "no record") for name in names}


def write_report(results: dict[str, list[dict]], command: str, tasks: dict, out_dir: Path = RESULTS,
                 runs: Path = G.RUNS) -> Path:
    lines = ["# Placeto's one pass: held-out families and in distribution", "",
             f"Command: `{command}` (this 2-core CPU machine; simulated objectives: the step time where the "
             "placement fits, placeto.objective; ratios to etf, geometric means).", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             "Training: `python -m experiments.reproduce.generalization train --method placeto --held-out GROUP "
             "--minutes M` (the recipe: generalization.placeto_config); the minutes and episodes of each run:", ""]
    names = sorted({r["run"] for rows in results.values() for r in rows})
    for name, told in provenance(names, runs, out_dir).items():
        lines.append(f"- {name}: {told}")
    lines.append("")
    for label, title in (("heldout", "Held-out families (each placed by the run trained without its group)"),
                         ("inside", "In distribution (the all-groups run on every family's test split)")):
        rows = results.get(label, [])
        if not rows:
            continue
        _annotate(rows, tasks)
        k80 = [r for r in rows if r["clusters"] == "identical K80s"]
        lines += [f"## {title}", "", *table(rows, "family"), "", "By kind of cluster:", "",
                  *table(rows, "clusters"), "", "Identical K80s, by family:", "", *table(k80, "family"), "",
                  f"Median pass wall seconds: {np.median([float(r['placeto_s']) for r in rows]):.3f}.", ""]
        if label == "heldout":
            lines += ["### Against the earlier recipe", "",
                      "The earlier recipe's held-out pass (generalization_heldout.csv, `generalization.md`), ratios to "
                      "the same etf; its rows re-scored under the present objective where their placement is known "
                      "(`learned_pass.earlier_row`; cached in learned_pass_earlier.csv):", "",
                      *earlier_table(rows, tasks, out_dir), ""]
    out = out_dir / "learned_pass.md"
    atomic_write_bytes(out, ("\n".join(lines) + "\n").encode())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=Path, default=G.RUNS, help="root of the placeto-without-<group> run directories")
    p.add_argument("--inside-only", action="store_true", help="only the all-groups run, in distribution")
    p.add_argument("--max-graphs", type=int, default=None, help="test graphs per family (default: all 8)")
    args = p.parse_args(argv)
    tasks = test_tasks(args.max_graphs)
    results = evaluate(args.runs, tasks, args.inside_only)
    command = "python -m experiments.reproduce.learned_pass " + " ".join(sys.argv[1:] if argv is None else argv)
    out = write_report(results, command.strip(), {G.task_key(t): t for t in tasks}, runs=args.runs)
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
