"""Ablation: the temperature gdp is trained at (GdpConfig.temperature), on one family at 4 devices.

    PYTHONPATH=. python experiments/gdp_temperature.py --family ptb                 # ~12 min on this 2-core machine
    PYTHONPATH=. python experiments/gdp_temperature.py --family nmt --temperatures 1,2,3 --episodes 1536000

For each temperature T, `placeto train --method gdp --family F --devices 4 --episodes E --seed S --set
temperature=T` into runs/gdp-temperature/F-T<T> (rerun to resume a killed run; T=1 is the shipped gdp-<family>
recipe at E placements), then the greedy placement (one forward pass, argmax per node: the temperature does not
change it) of each test graph at 4 devices, against single device and local search with 1,000 simulator calls.
The question: does a flatter policy while training (more exploration) escape the local optimum of leaving most of a
graph on one device (the gdp policies put ~80% of a ptb graph on one device; local search spreads it)?

Writes experiments/results/gdp_temperature_<family>.md.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placeto import cli  # noqa: E402
from placeto.arguments import COUNT, SEED, OneLineParser, comma_list, float_in  # noqa: E402
from placeto.baselines import run_method  # noqa: E402
from placeto.families import FAMILIES, load_family  # noqa: E402
from placeto.methods.gdp.place import greedy_placement, load_run  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
DEVICES = 4


def train_run(family: str, temperature: float, episodes: int, seed: int, runs: Path) -> tuple[Path, float]:
    """(run directory, wall minutes of this call) after training (or resuming) one temperature's run."""
    out = runs / f"{family}-T{temperature:g}"
    t0 = time.perf_counter()
    code = cli.main(["train", "--method", "gdp", "--family", family, "--devices", str(DEVICES), "--out", str(out),
                     "--episodes", str(episodes), "--seed", str(seed), "--set", f"temperature={temperature:g}"])
    if code != 0:
        raise SystemExit(code)
    return out, (time.perf_counter() - t0) / 60


def evaluate(run: Path, graphs, cluster, reference: dict[str, tuple[float, float]]) -> dict:
    """Mean greedy ratios to single device and to local search (1,000 calls), and the mean share of nodes on the
    busiest device. reference: graph name -> (single us, local search us)."""
    config, params = load_run(run)
    x_single, x_ls, share = [], [], []
    for g in graphs:
        placement = greedy_placement(config, params, g, cluster)
        runtime = simulate(g, placement, cluster).runtime
        single, ls = reference[g.name]
        x_single.append(runtime / single)
        x_ls.append(runtime / ls)
        share.append(np.bincount(placement, minlength=cluster.n_devices).max() / g.n_nodes)
    return {"x_single": float(np.mean(x_single)), "x_ls": float(np.mean(x_ls)), "busiest": float(np.mean(share)),
            "ls_wins": int(sum(r <= 1.0 for r in x_ls))}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=FAMILIES, default="ptb")
    p.add_argument("--temperatures", type=comma_list(float_in(0.05, 100.0)), default=[1.0, 2.0])
    p.add_argument("--episodes", type=COUNT, default=768_000, help="placements per run (gdp-ptb's recipe: 768,000)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "gdp-temperature")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    cluster = cluster_preset("placeto-k80", DEVICES)
    graphs = load_family(args.family, "test")
    reference = {g.name: (simulate(g, np.zeros(g.n_nodes, np.int32), cluster).runtime,
                          simulate(g, run_method("local-search", g, cluster, 0, budget=1000).placement,
                                   cluster).runtime) for g in graphs}
    rows = []
    for t in args.temperatures:
        run, minutes = train_run(args.family, t, args.episodes, args.seed, args.runs)
        rows.append({"temperature": t, "minutes": minutes, **evaluate(run, graphs, cluster, reference)})
        r = rows[-1]
        print(f"T={t:g}: greedy {r['x_single']:.3f}x single, {r['x_ls']:.3f}x local search, busiest device "
              f"{r['busiest']:.0%} of the nodes", flush=True)
    cmd = "PYTHONPATH=. python experiments/gdp_temperature.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# gdp trained at a temperature: {args.family}, {DEVICES} devices", "",
             f"Command: `{cmd.strip()}` ({os.cpu_count()} cores; placeto-k80 preset; {args.episodes:,} placements "
             f"per run, seed {args.seed}).", "",
             "Greedy zero-shot placement (one forward pass) of the test split: mean ratio to single device and to "
             "local search with 1,000 simulator calls; `busiest`: mean share of a graph's nodes on its busiest "
             "device; `min` the wall minutes of this call's training (0 if the run was already complete).", "",
             "| temperature | greedy x single | greedy x local search | graphs at least as good as local search | "
             "busiest | min |", "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['temperature']:g} | {r['x_single']:.3f} | {r['x_ls']:.3f} | {r['ls_wins']} of {len(graphs)} | "
              f"{r['busiest']:.0%} | {r['minutes']:.1f} |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / f"gdp_temperature_{args.family}.md", ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
