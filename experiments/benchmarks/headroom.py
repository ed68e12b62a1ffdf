"""Headroom: how much better than the anytime table's best classical placement can any placement be found?

The target: `placeto-search` beats the best of etf, local-search and sa by >= 3% on average at 1 s and 10 s
per graph. That is only possible where such placements exist. For every graph of a family's test split, this
runs long searches (local-search with two seeds and sa with one, `--calls` simulator calls each, about 30x what a
10 s budget buys) and keeps the best objective any of them, or any method of `anytime_<family>.csv` at any budget,
reached: the best known placement. It then reports, per budget of the anytime table, the best classical
objective and each learned search's objective as ratios to the best known one. A best-classical ratio of 1.01
means no method, learned or not, can be more than 1% better than the classical methods at that budget on that
graph, as far as these searches know.

    python -m experiments.benchmarks.headroom --family nmt --devices 4 --calls 1000000

Searches are budgeted in calls (deterministic; the machine's load does not change them). Writes
experiments/results/benchmarks/headroom_<family>.md and .csv; reads anytime_<family>.csv (run
`python -m experiments.benchmarks.anytime` first).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.benchmarks.anytime import CLASSICAL, SEARCHES as LEARNED  # noqa: E402  (the table this reads)
from placeto.baselines.local_search import local_search  # noqa: E402
from simulator.workloads.families import load_family  # noqa: E402
from placeto.objective import metered, score_batch  # noqa: E402
from placeto.baselines.sa import sa  # noqa: E402
from simulator import cluster_preset  # noqa: E402
from simulator.model.errors import InputError  # noqa: E402
from simulator.model.io import atomic_write_bytes, atomic_write_csv  # noqa: E402

SEARCHES = (("local-search", local_search, 0), ("local-search", local_search, 1), ("sa", sa, 0))
FIELDS = ["graph", "n_devices", "search", "seed", "calls", "objective_us", "seconds"]


def long_searches(graphs, devices: int, calls: int) -> list[dict]:
    """One row per (graph, long search): the objective (us) of its best placement after `calls` calls."""
    cluster = cluster_preset("placeto-k80", devices)
    rows = []
    for g in graphs:
        for name, fn, seed in SEARCHES:
            t0 = time.perf_counter()
            with metered(max_calls=calls):
                placement = fn(g, cluster, seed=seed, budget=calls)
            obj = float(score_batch(g, placement[None], cluster)[0])
            rows.append({"graph": g.name, "n_devices": devices, "search": name, "seed": seed, "calls": calls,
                         "objective_us": obj, "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{g.name} {name} seed {seed}: {obj / 1e3:.3f} ms ({rows[-1]['seconds']} s)", flush=True)
    return rows


def read_anytime(path: Path, devices: int) -> dict:
    """{(seconds, graph, method): objective us} of the anytime CSV's rows at `devices`."""
    if not path.exists():
        raise InputError(f"{path}: not found (run python -m experiments.benchmarks.anytime for this family first)")
    with path.open() as f:
        return {(float(r["seconds"]), r["graph"], r["method"]): float(r["runtime_us"] or "nan")
                for r in csv.DictReader(f) if int(r["n_devices"]) == devices}


def report(family: str, devices: int, long_rows: list[dict], anytime: dict, cmd: str) -> list[str]:
    """Markdown: the best known objective per graph and every budget's standing against it."""
    graphs = list(dict.fromkeys(r["graph"] for r in long_rows))
    known = {g: min([r["objective_us"] for r in long_rows if r["graph"] == g] +
                    [v for (s, gg, m), v in anytime.items() if gg == g and not math.isnan(v)]) for g in graphs}
    long_best = {g: min(r["objective_us"] for r in long_rows if r["graph"] == g) for g in graphs}
    calls = long_rows[0]["calls"]
    lines = [f"# Headroom: {family}, {devices} devices", "", f"Command: `{cmd}`", "",
             f"Best known: the best objective of local-search (seeds 0, 1) and sa (seed 0) at {calls:,} simulator "
             "calls each and of every method and budget in `anytime_" + family + ".csv`. Ratios to it (1.000: as "
             "good as the best known placement). `gap` = best classical / best known - 1: the most any method "
             "could gain over the classical methods at that budget, as far as these searches know.", "",
             "| graph | best known (ms) | long searches (ms) |", "|---|---:|---:|"]
    lines += [f"| {g} | {known[g] / 1e3:.3f} | {long_best[g] / 1e3:.3f} |" for g in graphs]
    lines.append("")
    budgets = sorted({s for s, _, _ in anytime})
    lines += ["| budget (s) | best classical x known | mean gap | max gap | graphs with gap >= 3% | " +
              " | ".join(f"{m} x known" for m in LEARNED) + " |", "|---:|---:|---:|---:|---:|" + "---:|" * len(LEARNED)]
    for s in budgets:
        ratios, learned = [], {m: [] for m in LEARNED}
        for g in graphs:
            classical = [anytime[(s, g, m)] for m in CLASSICAL if (s, g, m) in anytime]
            if classical:
                ratios.append(min(classical) / known[g])
            for m in LEARNED:
                if (s, g, m) in anytime:
                    learned[m].append(anytime[(s, g, m)] / known[g])
        if not ratios:
            continue
        gaps = np.asarray(ratios) - 1.0
        cells = [f"{np.mean(v):.3f}" if v else "—" for v in learned.values()]
        lines.append(f"| {s:g} | {np.mean(ratios):.3f} | {100 * gaps.mean():.1f}% | {100 * gaps.max():.1f}% | "
                     f"{int((gaps >= 0.03).sum())} of {len(gaps)} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True)
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--calls", type=int, default=1_000_000, help="simulator calls per long search")
    p.add_argument("--graphs", type=int, default=0, help="only the first N test graphs (0: all)")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "benchmarks"))
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        if args.calls < 1:
            raise InputError(f"--calls must be >= 1, got {args.calls}")
        anytime = read_anytime(out / f"anytime_{args.family}.csv", args.devices)
        graphs = load_family(args.family, "test")
    except InputError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        return 2
    graphs = graphs[:args.graphs] if args.graphs else graphs
    rows = long_searches(graphs, args.devices, args.calls)
    atomic_write_csv(out / f"headroom_{args.family}.csv", rows, FIELDS)
    cmd = "python -m experiments.benchmarks.headroom " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(args.family, args.devices, rows, anytime, cmd)
    atomic_write_bytes(out / f"headroom_{args.family}.md", ("\n".join(text) + "\n").encode())
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
