"""Train, evaluate and ship the package's per-family policies (nmt, ptb, cifar10, gdp-nmt, gdp-ptb, gdp-cifar10).

    python -m experiments.reproduce.train_policies nmt ptb cifar10    # fine-tuned from the general policy
    python -m experiments.reproduce.train_policies gdp-nmt gdp-ptb gdp-cifar10  # gdp policies
    python -m experiments.reproduce.train_policies --reevaluate       # recompute the shipped zero-shot metrics

The general policies `general` and `gdp-general` are trained on the wide distribution and shipped by
experiments/reproduce/generalization.py. The `general` and `gdp-general` entries below are the commands of the policies
shipped before it (commit b1ced2a: the three Placeto families only, `--family cifar10,ptb,nmt`); the shipped nmt,
ptb and cifar10 policies are fine-tuned from the present `general` (the wide distribution's), with its recipe.

Each policy is trained by the `placeto train` command in SPECS (rerun this script to resume a killed run: the
run directories live in runs/), evaluated zero-shot (one greedy episode, no search) on every family's test
split at 4 devices, and copied with its parameters only into placeto/shipped/<name>/ with provenance.json: the
command, seed, commit, training time and episodes, and the evaluation.
"""

from __future__ import annotations

import csv
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto.cli import main as cli  # noqa: E402
from simulator.workloads.families import FAMILIES, load_family  # noqa: E402
from placeto.methods.registry import ship  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402

# The per-family policies are fine-tuned from the shipped `general` with its recipe (generalization.placeto_config:
# the list-scheduler start, a move that does not help undone, the "improving" counterfactual target).
RECIPE = "init_placement=list undo_worse=true counterfactual=true counterfactual_loss=improving gamma=0.0 grad_steps=32"
SPECS = {
    "general": "placeto train --family cifar10,ptb,nmt --devices 2,4,8 --out runs/general --episodes 5000 --seed 0 "
               "--minutes 90",
    "nmt": "placeto train --family nmt --devices 4 --init-from general --out runs/nmt --episodes 480 --seed 0 "
           "--minutes 10 --set lr=3e-4 entropy=0.003 " + RECIPE,
    "ptb": "placeto train --family ptb --devices 4 --init-from general --out runs/ptb --episodes 480 --seed 0 "
           "--minutes 10 --set lr=3e-4 entropy=0.003 " + RECIPE,
    "cifar10": "placeto train --family cifar10 --devices 4 --init-from general --out runs/cifar10 --episodes 120 "
               "--seed 0 --minutes 10 --set lr=3e-4 entropy=0.003 " + RECIPE,
    # gdp budgets are whole updates of 512 placements (samples_per_update)
    "gdp-nmt": "placeto train --method gdp --family nmt --devices 4 --out runs/gdp-nmt --episodes 1536000 "
               "--seed 0 --minutes 30",
    "gdp-ptb": "placeto train --method gdp --family ptb --devices 4 --out runs/gdp-ptb --episodes 768000 "
               "--seed 0 --minutes 30",
    "gdp-cifar10": "placeto train --method gdp --family cifar10 --devices 4 --out runs/gdp-cifar10 "
                   "--episodes 768000 --seed 0 --minutes 30",
    "gdp-general": "placeto train --method gdp --family cifar10,ptb,nmt --devices 2,4,8 --out runs/gdp-general "
                   "--episodes 8192000 --seed 0 --minutes 120",
}
SUMMARY = {"general": "all three families (72 training graphs) at 2, 4 and 8 devices",
           "nmt": "the nmt family at 4 devices, fine-tuned from general with its recipe",
           "ptb": "the ptb family at 4 devices, fine-tuned from general with its recipe",
           "cifar10": "the cifar10 family at 4 devices, fine-tuned from general with its recipe",
           "gdp-nmt": "gdp (single-shot GNN + segment attention, PPO) on the nmt family at 4 devices",
           "gdp-ptb": "gdp on the ptb family at 4 devices",
           "gdp-cifar10": "gdp on the cifar10 family at 4 devices",
           "gdp-general": "gdp on all three families (72 training graphs) at 2, 4 and 8 devices"}


def train_minutes(run: Path) -> tuple[float, int]:
    """(wall minutes over all resumed calls, episodes) from a run's metrics.csv (wall seconds restart per call;
    a Placeto run logs wall_s and episode, a gdp run seconds and samples)."""
    with (run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    wall, count = ("wall_s", "episode") if rows and "wall_s" in rows[0] else ("seconds", "samples")
    total, last = 0.0, 0.0
    for r in rows:
        w = float(r[wall])
        if w < last:
            total += last
        last = w
    return round((total + last) / 60, 1), int(rows[-1][count]) if rows else 0


def zero_shot(run: Path, n_devices: int = 4) -> dict:
    """Greedy zero-shot (no search) on each family's test split: mean ratio to single device, seconds per graph."""
    from placeto.methods.gdp.place import is_gdp_run, load_run, timed_greedy
    from placeto.objective import metered
    from placeto.methods.placeto import guided

    gdp = load_run(run) if is_gdp_run(run) else None
    out = {}
    for fam in FAMILIES:
        ratios, secs, runtimes = [], [], {}
        for g in load_family(fam, "test"):
            cluster = cluster_preset("placeto-k80", n_devices)
            if gdp is not None:  # one forward pass (compiled by a first call outside the timing)
                placement, seconds, _ = timed_greedy(*gdp, g, cluster)
            else:
                prep = guided.prepare(str(run), g, cluster, sampling=False)
                t0 = time.perf_counter()
                with metered():
                    placement, _, _ = guided.greedy_with_prior(prep)
                seconds = time.perf_counter() - t0
            secs.append(seconds)
            rt = simulate(g, placement, cluster).runtime
            runtimes[g.name] = round(float(rt), 3)
            ratios.append(rt / simulate(g, np.zeros(g.n_nodes, np.int32), cluster).runtime)
        out[fam] = {"greedy_x_single": round(float(np.mean(ratios)), 4),
                    "greedy_seconds": round(float(np.mean(secs)), 3), "runtime_us": runtimes}
    return out


def reevaluate(names: list[str]) -> int:
    """Recompute the zero-shot metrics of shipped policies (e.g. after a change of the greedy episode) in place."""
    import json

    from placeto.policies import SHIPPED
    from simulator.model.io import write_json

    for name in names:
        path = SHIPPED / name / "provenance.json"
        prov = json.loads(path.read_text())
        prov["zero_shot_4_devices"] = zero_shot(SHIPPED / name)
        write_json(path, prov)
        print(f"{name}: " + ", ".join(f"{f} {m['greedy_x_single']:.3f}x single"
                                      for f, m in prov["zero_shot_4_devices"].items()), flush=True)
    return 0


def parse_args(argv: list[str] | None):
    from simulator.arguments import OneLineParser

    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"policies to train and ship, of {', '.join(SPECS)} (default: general)")
    p.add_argument("--reevaluate", action="store_true", help="recompute the zero-shot metrics of shipped "
                   "policies NAME (default: general nmt ptb cifar10) in their provenance.json; no training")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in SPECS]
    if unknown:
        p.error(f"unknown policy {unknown[0]!r} (known: {', '.join(SPECS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reevaluate:
        return reevaluate(args.names or ["general", "nmt", "ptb", "cifar10"])
    for name in args.names or ["general"]:
        command = SPECS[name]
        argv = shlex.split(command)[1:]
        code = cli.main(argv)
        if code != 0:
            return code
        run = ROOT / argv[argv.index("--out") + 1]
        minutes, episodes = train_minutes(run)
        if episodes < int(argv[argv.index("--episodes") + 1]):
            print(f"{name}: {episodes} episodes so far (time limit); rerun to continue", flush=True)
            return 0
        metrics = zero_shot(run)
        dest = ship(run, name, {"summary": SUMMARY[name], "command": command, "train_minutes": minutes,
                                "episodes": episodes, "zero_shot_4_devices": metrics,
                                "machine": "2 cores, no GPU (JAX on CPU)"})
        print(f"shipped {name} -> {dest}: " + ", ".join(f"{f} {m['greedy_x_single']:.3f}x single"
                                                        for f, m in metrics.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
