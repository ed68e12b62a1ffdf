"""The paper's yardstick, run as a user would: `placeto train --family nmt --devices 4 --episodes 400 --seed S`
with the default configuration, then `placeto place` of the unseen nmt_004 zero-shot, for several seeds.

Each seed's training and placement are `placeto` commands (subprocesses); the placement's runtime is read from
the placement file's simulated result, beside the single device's. A seed already in the results file is skipped
(delete its row to redo it).

    python -m experiments.reproduce.placeto_from_scratch --seeds 0 1 2     # -> placeto_from_scratch.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator import cluster_preset, load_graph, simulate  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402
from simulator.model.placement_file import load_placement

RESULTS = ROOT / "experiments" / "results" / "reproduce"


def placeto_cli() -> list[str]:
    """The `placeto` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("placeto")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from placeto.cli.main import main; main()"]


def run(cmd: list[str]) -> float:
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.time() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=400)
    p.add_argument("--graph", default="nmt_004", help="test graph of the nmt family placed zero-shot")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "placeto_from_scratch")
    p.add_argument("--out", type=Path, default=RESULTS / "placeto_from_scratch.json")
    a = p.parse_args(argv)
    rows = json.loads(a.out.read_text()) if a.out.exists() else []
    graph_file = ROOT / "datasets" / "nmt" / f"{a.graph}.json.gz"
    graph, cluster = load_graph(graph_file), cluster_preset("placeto-k80", 4)
    single = float(simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster).runtime)
    for seed in a.seeds:
        if any(r["seed"] == seed and r["episodes"] == a.episodes and r["graph"] == a.graph for r in rows):
            continue
        out = a.runs / f"s{seed}"
        shutil.rmtree(out, ignore_errors=True)
        train_cmd = ["train", "--family", "nmt", "--devices", "4", "--episodes", str(a.episodes), "--seed",
                     str(seed), "--out", str(out)]
        train_s = run(placeto_cli() + train_cmd)
        placement_file = out / f"{a.graph}_placement.json"
        place_cmd = ["place", str(graph_file.relative_to(ROOT)), "--checkpoint", str(out), "--devices", "4",
                     "--out", str(placement_file)]
        place_s = run(placeto_cli() + place_cmd)
        placement = load_placement(placement_file, graph, 4).assignment
        runtime = float(simulate(graph, np.asarray(placement, np.int32), cluster).runtime)
        rows.append({"seed": seed, "episodes": a.episodes, "graph": a.graph, "train_s": round(train_s, 1),
                     "place_s": round(place_s, 1), "runtime_ms": round(runtime / 1e3, 3),
                     "single_ms": round(single / 1e3, 3), "ratio": round(runtime / single, 3),
                     "commands": ["placeto " + " ".join(x.replace(f"{ROOT}/", "") for x in c)  # repo-relative
                                  for c in (train_cmd, place_cmd)]})
        atomic_write_bytes(a.out, json.dumps(rows, indent=1).encode())
        print(rows[-1], flush=True)
    lines = ["# Placeto from scratch on the nmt family, placed zero-shot", "",
             f"Command: `python -m experiments.reproduce.placeto_from_scratch --seeds "
             f"{' '.join(map(str, a.seeds))}`; per seed, the default configuration:", "",
             "    placeto train --family nmt --devices 4 --episodes 400 --seed S --out runs/placeto_from_scratch/sS",
             "    placeto place datasets/nmt/nmt_004.json.gz --checkpoint runs/placeto_from_scratch/sS --devices 4",
             "", "Runtimes simulated on placeto-k80 (4 devices); the issue's bar: <= 0.85x the single device.", "",
             "| seed | episodes | training s | placing s | nmt_004 ms | single device ms | x single |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["graph"], r["episodes"], r["seed"])):
        lines.append(f"| {r['seed']} | {r['episodes']} | {r['train_s']} | {r['place_s']} | {r['runtime_ms']:.2f} | "
                     f"{r['single_ms']:.2f} | {r['ratio']:.3f} |")
    atomic_write_bytes(a.out.with_suffix(".md"), ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
