"""Ablation of the entropy bonus of the per-graph placers (rnn, hierarchical): the best placement each finds when
trained from scratch, within a fixed budget, for several entropy coefficients.

The seeds train with no entropy bonus; here the policies turn deterministic within a few hundred updates without
one (the best placement stops improving). This table is what the defaults in placeto.methods.rnn.config and
placeto.methods.hierarchical.config rest on. Each run is `placeto.methods.pergraph_place.train_in_budget` (the
compare row) with the method's default config and only `entropy` changed, at most --calls simulator calls and
--seconds of training (jit compilation excluded).

    PYTHONPATH=. python experiments/pergraph_entropy.py            # 2 methods x 4 coefficients x 2 graphs x 2 seeds
    PYTHONPATH=. python experiments/pergraph_entropy.py --graphs nmt_l2 --seeds 0 --entropies 0,0.001

Writes experiments/results/pergraph_entropy.csv (one row per run; rows already there are skipped, so a stopped run
resumes) and pergraph_entropy.md (best ms per graph and coefficient, one column per seed, beside the graph's
single-device and expert runtimes).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.sample_efficiency import reference_ms  # noqa: E402
from simulator import cluster_preset  # noqa: E402
from simulator.io import atomic_write_bytes, atomic_write_csv, load_graph  # noqa: E402

FIELDS = ["method", "graph", "n_devices", "entropy", "seed", "calls", "seconds", "best_ms", "last_improvement_call"]


def run(method: str, graph, cluster, entropy: float, seed: int, calls: int, seconds: float) -> dict:
    from placeto.methods.pergraph_specs import get_spec
    from placeto.methods.pergraph_place import train_in_budget

    config = get_spec(method).presets["default"]().replace(entropy=entropy)
    result, _ = train_in_budget(method, graph, cluster, seed, calls, seconds, config)
    last = result.trace[-1]
    return {"method": method, "graph": graph.name, "n_devices": cluster.n_devices, "entropy": entropy, "seed": seed,
            "calls": result.simulator_calls, "seconds": round(result.seconds, 1),
            "best_ms": round(last[2] / 1e3, 3), "last_improvement_call": last[1]}


def report(rows: list[dict], refs: dict, command: str) -> str:
    seeds = sorted({int(r["seed"]) for r in rows})
    lines = ["# Entropy bonus of the per-graph placers", "", f"Command: `{command}`", "",
             "Best simulated runtime (ms) found by training from scratch (`train_in_budget`, the method's default "
             "config with only `entropy` changed); budget per run in the CSV (calls, seconds). The seeds use no "
             "entropy bonus (0).", "",
             "| method | graph | devices | single | expert | entropy | " + " | ".join(f"seed {s}" for s in seeds)
             + " | calls of the last improvement |", "|---|---|---:|---:|---:|---:|" + "---:|" * (len(seeds) + 1)]
    keys = sorted({(r["method"], r["graph"], int(r["n_devices"]), float(r["entropy"])) for r in rows})
    by = {(r["method"], r["graph"], int(r["n_devices"]), float(r["entropy"]), int(r["seed"])): r for r in rows}
    for m, g, d, e in keys:
        cells = [f"{float(by[(m, g, d, e, s)]['best_ms']):.2f}" if (m, g, d, e, s) in by else "—" for s in seeds]
        last = ", ".join(str(by[(m, g, d, e, s)]["last_improvement_call"]) for s in seeds if (m, g, d, e, s) in by)
        single, expert = refs.get((g, d), (float("nan"), float("nan")))
        lines.append(f"| {m} | {g} | {d} | {single:.2f} | {expert:.2f} | {e:g} | " + " | ".join(cells)
                     + f" | {last} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="rnn,hierarchical")
    p.add_argument("--graphs", default="nmt_l2,nmt_l4", help="benchmark models, comma separated")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--entropies", default="0,0.0003,0.001,0.003")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--calls", type=int, default=20000, help="simulator calls per run")
    p.add_argument("--seconds", type=float, default=60.0, help="training seconds per run")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = p.parse_args(argv)
    try:
        methods = args.methods.split(",")
        entropies = [float(x) for x in args.entropies.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError as e:
        print(f"pergraph_entropy: error: {e}", file=sys.stderr)
        return 2
    bad = [m for m in methods if m not in ("rnn", "hierarchical")]
    graphs = args.graphs.split(",")
    bad += [g for g in graphs if not (ROOT / "datasets" / "benchmarks" / f"{g}.json.gz").is_file()]
    if bad or args.calls < 1 or not args.seconds > 0 or args.devices < 1 or min(entropies) < 0:
        print(f"pergraph_entropy: error: unknown {bad} or a non-positive budget or entropy", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "pergraph_entropy.csv"
    rows = list(csv.DictReader(csv_path.open())) if csv_path.exists() else []
    done = {(r["method"], r["graph"], int(r["n_devices"]), float(r["entropy"]), int(r["seed"])) for r in rows}
    refs = {}
    for g in graphs:
        graph = load_graph(ROOT / "datasets" / "benchmarks" / f"{g}.json.gz")
        cluster = cluster_preset("placeto-k80", args.devices)
        refs[(g, args.devices)] = reference_ms(graph, cluster)
        for m in methods:
            for e in entropies:
                for s in seeds:
                    if (m, g, args.devices, e, s) in done:
                        continue
                    rows.append(run(m, graph, cluster, e, s, args.calls, args.seconds))
                    atomic_write_csv(csv_path, rows, FIELDS)
                    print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    command = "PYTHONPATH=. python experiments/pergraph_entropy.py " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:])
    text = report(rows, refs, command)
    atomic_write_bytes(out / "pergraph_entropy.md", text.encode())
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
