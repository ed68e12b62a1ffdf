"""Placement where one device is not enough: every method on the seeds' models at full size, and the learned
policies on the distribution's memory-constrained tasks.

Part 1 (`benchmarks`): every graph of `datasets/memory/` (the seeds' NMT 2/4/8 layers, RNNLM and Inception-V3 at
the sizes of their tables on K80s of 12 GB, and a 368M-parameter decoder on V100s of 16 GB: `datasets/memory/README.md`)
at 2, 4 and 8 devices, placed by every method through `placeto.harness.compare` (the searches at the same seconds,
`local-search` also at the learned one-pass method's own wall time: `local-search@pass`). Per task: each method's step
time, whether it fits (and whether the shared repair had to make it fit), its ratio to the best that fits and to the
lower bound, beside the seeds' own rows (`datasets/memory/manifest.json`'s `seeds`).

Part 2 (`distribution`): the memory-constrained test tasks of the training distribution
(`placeto.distribution.memory_constrained`: each traced family's test graphs on devices below the single device's
peak): how often m-ETF and m-SCT fit, and the learned one-pass methods `placeto` and `gdp` zero-shot, by their own
pass (before `placeto.feasibility.repair`) and as `compare` returns them.

    python -m experiments.reproduce.memory_constrained                       # both parts (about 25 min on 2 cores)
    python -m experiments.reproduce.memory_constrained benchmarks --seconds 5 --graphs nmt_l2_full,gpt_l24_full
    python -m experiments.reproduce.memory_constrained distribution --graphs-per-family 2

Writes `experiments/results/reproduce/memory_constrained.md` (and `.csv` of part 1's rows; part 2 in
`memory_constrained_distribution.md`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from placeto import distribution as dist
from placeto.baselines import run_method
from placeto.feasibility import peaks, repair
from placeto.harness.compare import Row, compare, markdown_table, run_learned, write_csv
from simulator.engine.fast import simulate
from simulator.model.cluster import cluster_preset
from simulator.model.io import atomic_write_bytes, load_graph
from simulator.workloads.families import load_manifest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results" / "reproduce"
METHODS = ["single", "expert", "metis", "scotch", "mincut", "etf", "m-sct", "m-topo", "heft", "pipeline-dp",
           "random", "local-search", "sa", "placeto", "placeto-search", "gdp", "gdp-search"]
PASS = "placeto"  # the learned one pass whose wall time local-search@pass gets
DEVICES = (2, 4, 8)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", nargs="?", default="all", choices=("all", "benchmarks", "distribution"))
    p.add_argument("--graphs", default=None, help="comma list of datasets/memory graph names (default: all)")
    p.add_argument("--devices", default="2,4,8", help="device counts of part 1")
    p.add_argument("--seconds", type=float, default=5.0, help="wall seconds of every searching method per task")
    p.add_argument("--graphs-per-family", type=int, default=2, help="test graphs per traced family in part 2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--placeto", default=None, help="part 2: the Placeto policy (run directory or shipped name)")
    p.add_argument("--gdp", default=None, help="part 2: the gdp policy (run directory or shipped name)")
    p.add_argument("--suffix", default="", help="part 2: written to memory_constrained_distribution<SUFFIX>.md")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def benchmark_graphs(names: str | None) -> list[tuple[object, str, str]]:
    """[(graph, preset, the seeds' row)] of datasets/memory, in its manifest's order."""
    manifest = load_manifest("memory")
    wanted = set(names.split(",")) if names else None
    return [(load_graph(ROOT / "datasets" / "memory" / e["file"]), e["preset"], e.get("seeds", ""))
            for e in manifest["graphs"] if wanted is None or e["name"] in wanted]


def pass_matched(graph, cluster, rows: list[Row], seed: int) -> Row | None:
    """local-search given the learned pass's own wall time on this task (None without a `placeto` row)."""
    ref = next((r for r in rows if r.method == PASS and r.applies), None)
    if ref is None:
        return None
    run = run_method("local-search", graph, cluster, seed, budget=None, seconds=max(ref.place_seconds, 0.05))
    fixed = repair(graph, cluster, run.placement)
    res_peak = peaks(graph, fixed.placement, cluster)[0]
    res = simulate(graph, fixed.placement, cluster)
    fraction = float(np.max(res_peak / res.capacity))
    return dataclasses.replace(ref, method="local-search@pass", runtime_us=float(res.runtime),
                               ratio_to_lower_bound=float(res.runtime / ref.lower_bound_us), oom=fraction > 1,
                               simulator_calls=run.simulator_calls, compile_seconds=0.0, peak_fraction=fraction,
                               repaired=fixed.how, trace=(), budget_seconds=ref.place_seconds,
                               budget_calls=math.inf)


def with_ratios(rows: list[Row]) -> list[Row]:
    """Ratios to the best that fits, per (graph, devices), over every row (local-search@pass included)."""
    out = []
    for key in dict.fromkeys((r.graph, r.n_devices) for r in rows):
        group = [r for r in rows if (r.graph, r.n_devices) == key]
        fits = [r.runtime_us for r in group if r.applies and not r.oom]
        best = min(fits or [r.runtime_us for r in group if r.applies] or [math.nan])
        out += [dataclasses.replace(r, ratio_to_best=r.runtime_us / best if r.applies and not (r.oom and fits)
                                    else math.nan) for r in group]
    return out


def benchmarks(args: argparse.Namespace) -> tuple[list[Row], str]:
    """Part 1: (rows, markdown)."""
    devices = [int(x) for x in args.devices.split(",")]
    rows, seeds = [], []
    for graph, preset, seed_row in benchmark_graphs(args.graphs):
        got = compare([graph], devices, METHODS, preset, args.seed, None, args.seconds, progress=True)
        for n in devices:
            extra = pass_matched(graph, cluster_preset(preset, n), [r for r in got if r.n_devices == n], args.seed)
            got += [extra] if extra is not None else []
        rows += got
        seeds.append(f"- {graph.name} ({preset}): {seed_row}")
    rows = with_ratios(rows)
    fit_lines = ["| graph | #devices | best that fits | ms | x lower bound | methods that fit | single device |",
                 "|---|---:|---|---:|---:|---:|---|"]
    for key in dict.fromkeys((r.graph, r.n_devices) for r in rows):
        group = [r for r in rows if (r.graph, r.n_devices) == key and r.applies]
        placers = [r for r in group if r.method not in ("single", "expert")]
        fits = [r for r in group if not r.oom]
        best = min(fits, key=lambda r: r.runtime_us) if fits else None
        single = next((r for r in group if r.method == "single"), None)
        single_text = "—" if single is None else ("OOM" if single.oom else f"{single.runtime_us / 1e3:.1f} ms")
        fit_lines.append(f"| {key[0]} | {key[1]} | {best.method if best else 'none'} | "
                         f"{best.runtime_us / 1e3:.1f} | {best.ratio_to_lower_bound:.2f} | "
                         f"{sum(not r.oom for r in placers)} of {len(placers)} | {single_text} |" if best else
                         f"| {key[0]} | {key[1]} | none | — | — | 0 of {len(placers)} | {single_text} |")
    text = ("## Part 1: the seeds' models at full size\n\n"
            f"Every searching method {args.seconds:g} s per task (compilation excluded); `local-search@pass`: local "
            f"search given `{PASS}`'s own wall time on the task. A placer's OOM result goes through the shared repair "
            "(`placeto/feasibility.py`; column `repaired` of the summary); `single` and `expert` are shown as they "
            "are.\n\n" + "\n".join(fit_lines) + "\n\n" + markdown_table(rows) +
            "\n### The seeds' own rows\n\n" + "\n".join(seeds) + "\n")
    return rows, text


def one_pass(method: str, task, args: argparse.Namespace) -> np.ndarray:
    """The placement of `method` on `task`: a baseline's, or a learned method's one pass (its --placeto / --gdp
    policy, default the shipped one)."""
    if method in ("placeto", "gdp"):
        policy = args.placeto if method == "placeto" else args.gdp
        return run_learned(method, task.graph, task.cluster, args.seed, budget=1, seconds=None,
                           checkpoint=policy)[0].placement
    return run_method(method, task.graph, task.cluster, args.seed).placement


def distribution(args: argparse.Namespace) -> str:
    """Part 2's markdown."""
    plain = [t for fam in dist.families() if fam not in dist.GROUPS["generated"]
             for t in dist.family_tasks(fam, "test", max_graphs=args.graphs_per_family)]
    tasks = dist.memory_constrained(plain)
    methods = ("etf", "m-sct", "placeto", "gdp")
    own = {m: 0 for m in methods}
    after = {m: 0 for m in methods}
    where_list = {m: 0 for m in methods}  # fits, own result, on the tasks where m-ETF or m-SCT fits
    any_list = 0
    log_x_etf = {m: [] for m in ("placeto", "gdp")}  # on the same tasks with the preset's memory: runtime over etf's
    for task in tqdm([t for t in plain if t.cluster.n_devices > 1], desc="the same tasks, unconstrained", unit="task"):
        etf_us = simulate(task.graph, one_pass("etf", task, args), task.cluster).runtime
        for m in log_x_etf:
            log_x_etf[m].append(math.log(simulate(task.graph, one_pass(m, task, args), task.cluster).runtime / etf_us))
    for task in tqdm(tasks, desc="memory-constrained tasks", unit="task"):
        fit = {}
        for m in methods:
            placement = one_pass(m, task, args)
            cap = np.asarray(task.cluster.memory)
            fit[m] = bool(np.all(peaks(task.graph, placement, task.cluster)[0] <= cap))
            own[m] += fit[m]
            after[m] += fit[m] or repair(task.graph, task.cluster, placement).fits
        listed = fit["etf"] or fit["m-sct"]
        any_list += listed
        for m in methods:
            where_list[m] += listed and fit[m]
    n = len(tasks)
    lines = ["## Part 2: the learned policies zero-shot on the distribution's memory-constrained tasks", "",
             f"{n} tasks: the test graphs of the traced families ({args.graphs_per_family} each) on 2, 4 and 8 K80s and "
             "3 H100s + CPU, each device's memory below the single device's peak (`placeto.distribution."
             "constrained_capacity`).", "",
             f"| method | fits, own result | fits, after the repair | fits, own result, where m-ETF or m-SCT fits "
             f"({any_list} tasks) |", "|---|---:|---:|---:|"]
    lines += [f"| {m} | {own[m]} of {n} | {after[m]} of {n} | {where_list[m]} of {any_list} |" for m in methods]
    policies = f"placeto: {args.placeto or 'the shipped default'}, gdp: {args.gdp or 'the shipped default'}"
    lines += ["", f"Policies: {policies}. On the same {len(log_x_etf['placeto'])} tasks with the presets' memory, the "
              "one pass's step time over m-ETF's (geometric mean): " +
              ", ".join(f"{m} {math.exp(np.mean(v)):.3f}x" for m, v in log_x_etf.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "experiments.reproduce.memory_constrained",
                          *(argv if argv is not None else sys.argv[1:])])
    t0 = time.perf_counter()
    if args.part in ("all", "benchmarks"):
        rows, text = benchmarks(args)
        write_csv(rows, out / "memory_constrained.csv")
        head = (f"# Placement where one device is not enough\n\n`{command}` ({time.perf_counter() - t0:.0f} s on "
                f"this machine's 2 cores).\n\n")
        atomic_write_bytes(out / "memory_constrained.md", (head + text).encode())
        print(head + text)
    if args.part in ("all", "distribution"):
        t1 = time.perf_counter()
        text = distribution(args)
        head = f"# Learned policies where one device is not enough\n\n`{command}` ({time.perf_counter() - t1:.0f} s).\n\n"
        atomic_write_bytes(out / f"memory_constrained_distribution{args.suffix}.md", (head + text).encode())
        print(head + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
