"""msr-fiddle's throughput benchmark: our methods' max-load against their proven DP optimum.

For every throughput input of msr-fiddle/dnn-partitioning (`datasets/outside/msr_fiddle/throughput-inputs/`,
layer and operator graphs), place with the project's methods through the harness (placeto.harness.compare.run_one:
pipeline-dp, m-topo, etf, m-sct, metis, local-search and sa at a fixed wall time each, and the learned `placeto`
zero-shot: the shipped default policy, one greedy pass), plus local-search started from pipeline-dp's split
("ls-from-dp"). Every graph is scored by max-load (simulator.model.max_load; the searches see it through
placeto.objective). The table puts each method's max-load, whether it fits in memory and its gap to their DP
optimum beside their DP optimum, human expert and PipeDream (experiments/reference/msr_fiddle_max_load.csv).

Writes experiments/results/reproduce/msr_fiddle.md and each placement in their split format (their dp.cpp scores it
with -expert) as experiments/results/reproduce/msr_fiddle/<LayerGraphs|OperatorGraphs>/<input stem>.<method>.json
(the two folders hold a resnet50_inference each).

    python -m experiments.reproduce.msr_fiddle [--seconds S] [--graphs bert24_inference,gnmt_training] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from placeto.baselines import run_method
from placeto.harness.compare import run_one
from simulator.model.errors import InputError
from simulator.model.io import atomic_write_bytes
from simulator.model.max_load import loads_batch, max_load_reference, model_of
from simulator.workloads.msr_fiddle import Throughput, read_split, read_throughput, write_split

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "datasets" / "outside" / "msr_fiddle"
REFERENCE = ROOT / "experiments" / "reference" / "msr_fiddle_max_load.csv"
METHODS = ("pipeline-dp", "m-topo", "etf", "m-sct", "metis", "local-search", "sa", "placeto", "gdp")
ZERO_SHOT = ("placeto", "gdp")  # the learned one passes, their shipped default policies
SEARCHES = ("local-search", "sa", "ls-from-dp")
KIND = {"LayerGraphs": "layer", "OperatorGraphs": "operator"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2.0, help="wall seconds of each search (local-search, sa)")
    p.add_argument("--graphs", default="", help="input stems to run, comma separated (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reproduce"))
    return p.parse_args(argv)


def reference() -> dict[tuple[str, str], dict]:
    """(kind, graph) -> their figures (float, NaN where absent)."""
    with open(REFERENCE, newline="") as f:
        return {(r["kind"], r["graph"]): {k: float(v) if v else math.nan for k, v in r.items()
                                          if k not in ("graph", "kind")} for r in csv.DictReader(f)}


def inputs(wanted: set[str]) -> list[Path]:
    files = sorted(DATA.glob("throughput-inputs/*/*.json"))
    return [f for f in files if not wanted or f.stem in wanted]


def place_all(task: Throughput, seconds: float, seed: int) -> dict[str, tuple[np.ndarray | None, float, str]]:
    """method -> (placement or None, place seconds, note)."""
    out = {}
    for name in METHODS:
        budget = 1 if name in ZERO_SHOT else None  # the learned methods: one greedy pass of the shipped policy
        t0 = time.perf_counter()
        kept = []
        try:
            row = run_one(name, task.graph, task.cluster, seed, budget, seconds if name in SEARCHES else None, {},
                          kept.append)
        except InputError as e:  # the learned method may refuse a graph: say why
            out[name] = (None, time.perf_counter() - t0, str(e))
            continue
        out[name] = (kept[0] if kept else None, row.place_seconds, row.note)
        print(f"  {name}: {row.place_seconds:.1f} s", flush=True)
    dp = out["pipeline-dp"][0]
    run = run_method("local-search", task.graph, task.cluster, seed, budget=None, seconds=seconds, init=dp)
    out["ls-from-dp"] = (run.placement, run.seconds, "local-search started from pipeline-dp's split")
    print(f"  ls-from-dp: {run.seconds:.1f} s", flush=True)
    return out


def graph_table(task: Throughput, kind: str, ref: dict, placed: dict, split_dir: Path) -> tuple[str, dict]:
    """The markdown table of one graph; its best method's row."""
    model = model_of(task.graph, task.cluster)
    dp = ref.get("dp_optimum", math.nan)
    lines = ["| method | max-load | fits | gap to DP optimum | place s |", "|---|---:|---|---:|---:|"]
    best = {"method": "", "load": math.inf}
    for name, (placement, seconds, note) in placed.items():
        if placement is None:
            lines.append(f"| {name} | — | | | {seconds:.1f} |")
            continue
        load, peak = max_load_reference(task.graph, placement, task.cluster, model)
        fits = bool(np.all(peak <= task.cluster.capacity))
        colocated = np.asarray(placement)[model.rep]
        device_loads = loads_batch(model, colocated[None], task.cluster.n_devices)[0][0]
        write_split(split_dir / f"{task.graph.name}.{name}.json", task, colocated, device_loads, load)
        gap = f"{100 * (load / dp - 1):+.2f}%" if math.isfinite(dp) else ""
        lines.append(f"| {name} | {load:.2f} | {'yes' if fits else 'no'} | {gap} | {seconds:.1f} |")
        if fits and load < best["load"]:
            best = {"method": name, "load": load}
    for name in ZERO_SHOT:
        p = placed.get(name, (None,))[0]
        best[name] = max_load_reference(task.graph, p, task.cluster, model)[0] if p is not None else math.nan
    return "\n".join(lines), best


def expert_load(task: Throughput, stem: str, kind: str) -> float:
    """Our max-load of their human expert's split (NaN without one)."""
    path = DATA / "human-experts" / f"{stem}_expert.json"
    if not path.exists():
        path = DATA / "human-experts" / f"{stem.replace('training', 'inference')}_expert.json"
    if kind != "layer" or not path.exists():
        return math.nan
    return max_load_reference(task.graph, read_split(path, task), task.cluster)[0]


def fmt(x: float) -> str:
    return f"{x:.2f}" if math.isfinite(x) else "—"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    refs = reference()
    files = inputs({s.strip() for s in args.graphs.split(",") if s.strip()})
    if not files:
        print(f"msr_fiddle: no inputs match --graphs {args.graphs!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    sections, summary = [], []
    for k, path in enumerate(files, 1):
        kind = KIND[path.parent.name]
        task = read_throughput(path)
        print(f"[{k}/{len(files)}] {path.parent.name}/{path.stem}: {task.graph.n_nodes} nodes, "
              f"{task.cluster.n_devices} devices", flush=True)
        ref = refs.get((kind, path.stem), {})
        placed = place_all(task, args.seconds, args.seed)
        table, best = graph_table(task, kind, ref, placed, out / "msr_fiddle" / path.parent.name)
        expert = expert_load(task, path.stem, kind)
        dp = ref.get("dp_optimum", math.nan)
        head = (f"### {path.parent.name}/{path.stem} ({task.graph.n_nodes} nodes, "
                f"{task.cluster.n_devices - task.graph.meta['max_load']['cpus']} accelerators + "
                f"{task.graph.meta['max_load']['cpus']} CPU)\n\nTheir DP optimum {fmt(dp)}, human expert "
                f"{fmt(ref.get('human_expert', math.nan))} (ours scoring their split: {fmt(expert)}), PipeDream "
                f"{fmt(ref.get('pipedream', math.nan))}, one accelerator {fmt(ref.get('one_accelerator', math.nan))}.")
        sections.append(head + "\n\n" + table)
        gap = f"{100 * (best['load'] / dp - 1):+.2f}%" if math.isfinite(dp) else ""
        summary.append(f"| {path.parent.name[:-6].lower()} | {path.stem} | {best['method']} | {fmt(best['load'])} | "
                       f"{fmt(dp)} | {gap} | {fmt(ref.get('human_expert', math.nan))} | "
                       f"{fmt(ref.get('pipedream', math.nan))} | {fmt(best['placeto'])} | {fmt(best['gdp'])} |")
        text = report(args, argv, time.perf_counter() - t_start, summary, sections, len(files))
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out / "msr_fiddle.md", text.encode())  # after every graph: a partial run leaves its rows
    print(text, end="")
    print(f"wrote {out / 'msr_fiddle.md'} in {time.perf_counter() - t_start:.0f} s")
    return 0


def report(args: argparse.Namespace, argv: list[str] | None, wall: float, summary: list[str], sections: list[str],
           n_inputs: int) -> str:
    """The markdown of the graphs done so far."""
    command = shlex.join(["python", "-m", "experiments.reproduce.msr_fiddle",
                          *(argv if argv is not None else sys.argv[1:])])
    done = "" if len(summary) == n_inputs else f" (partial: {len(summary)} of {n_inputs} inputs)"
    return (f"# msr-fiddle's throughput benchmark: max-load against their DP optimum\n\n`{command}`: {wall:.0f} s "
            f"wall on this machine{done}; local-search, sa and ls-from-dp {args.seconds:g} s each, seed {args.seed}. "
            f"Max-load is time per sample in their units (simulator.model.max_load); their figures from "
            f"experiments/reference/msr_fiddle_max_load.csv. Colour classes are kept whole (each follows its "
            f"representative); the splits are in msr_fiddle/ in their format. Their DP optimum is over "
            f"contiguous splits; ours need not be contiguous.\n\n"
            f"| graphs | input | best method (fits) | max-load | their DP optimum | gap | human expert | PipeDream | "
            f"placeto zero-shot | gdp zero-shot |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n"
            + "\n".join(summary) + "\n\n" + "\n\n".join(sections) + "\n")


if __name__ == "__main__":
    sys.exit(main())
