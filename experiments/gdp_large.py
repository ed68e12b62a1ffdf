"""The training set of the large-graph gdp policy (shipped as gdp-large) and its training command (issue 32).

    python -m experiments.gdp_large --write-graphs runs/gdp_large_graphs   # writes the graphs, prints the command
    python -m experiments.gdp_large --train --minutes 75                   # writes them if needed, then trains
    python -m experiments.gdp_large --ship                                 # evaluates the run, ships gdp-large

The set: generated graphs of both of gdp_scale's structures (`layered_dag`, `branching_blocks`) at 2,000, 5,000,
10,000 and 20,000 nodes, seeds 1 and 2 (gdp_scale's graphs use seed 0 and 50,000 nodes stay unseen), and the
ungrouped op graphs of nmt_l8, rnnlm_l8 and nasnet (traced once, shared with gdp_scale's cache), on 4 and 8
placeto-k80 devices. Training is `placeto train --method gdp --config large` on those files: resumable, so
`--train` again continues a killed or timed-out run. `--ship` evaluates the run's one pass on gdp_scale's held-out
10k generated graphs (seed 0) at 8 devices against m-ETF and copies it into placeto/shipped/gdp-large with its
provenance: the `placeto train` command with --episodes at the placements it reached (equal seeds give equal
checkpoints, so the command reproduces it).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (2_000, 5_000, 10_000, 20_000)
SEEDS = (1, 2)
STRUCTURES = ("layered_dag", "branching_blocks")
DEVICES = "4,8"


def write_graphs(out: Path, op_cache: Path) -> list[Path]:
    """Write the training graphs into `out` (existing files are kept; the op graphs copied from gdp_scale's
    cache, traced there first if needed); their paths, by name: the order `placeto train --graph OUT` trains in."""
    import shutil

    from experiments.gdp_scale import OP_GRAPHS, load
    from simulator import generate
    from simulator.io import save_graph

    out.mkdir(parents=True, exist_ok=True)
    op_cache.mkdir(parents=True, exist_ok=True)
    for n in SIZES:
        for structure in STRUCTURES:
            for seed in SEEDS:
                path = out / f"{structure}_{n // 1000}k_s{seed}.json.gz"
                if not path.exists():
                    save_graph(getattr(generate, structure)(n, seed=seed), path)
    for name in OP_GRAPHS:
        if not (out / f"{name}.json.gz").exists():
            load(name, op_cache)  # traced and cached on first use
            shutil.copyfile(op_cache / f"{name}.json.gz", out / f"{name}.json.gz")
    return sorted(out.glob("*.json.gz"), key=lambda p: p.name)


def train_command(graphs: Path, run: Path, minutes: float | None, episodes: int | None = None) -> list[str]:
    """The `placeto train` command line of the large-graph policy (paths relative to the repository when inside)."""
    def rel(p: Path) -> str:
        p = p.resolve()
        return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)

    cmd = ["placeto", "train", "--method", "gdp", "--config", "large", "--graph", rel(graphs), "--devices", DEVICES,
           "--out", rel(run)]
    cmd += ["--episodes", str(episodes)] if episodes else []
    return cmd + (["--minutes", f"{minutes:g}"] if minutes else [])


def train_minutes(run: Path) -> float:
    """Minutes of training in `run`/metrics.csv, summed over resumed calls (each restarts its clock)."""
    import csv

    total, last = 0.0, 0.0
    with (run / "metrics.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            t = float(r["seconds"])
            if t < last:
                total += last
            last = t
    return (total + last) / 60


def evaluate(run: Path, cache: Path) -> dict:
    """One pass (greedy decoding) of the run on gdp_scale's held-out 10k generated graphs at 8 devices: runtime,
    ratio to m-ETF, seconds (after a first compiling call)."""
    from experiments.gdp_scale import load
    from placeto.baselines.etf import etf
    from placeto.methods.gdp.place import load_run, timed_greedy
    from simulator import cluster_preset, simulate

    config, params = load_run(run)
    out = {}
    for name in ("layered_10k", "blocks_10k"):
        graph, cluster = load(name, cache), cluster_preset("placeto-k80", 8)
        placement, seconds, _ = timed_greedy(config, params, graph, cluster)
        runtime = simulate(graph, placement, cluster).runtime
        base = simulate(graph, etf(graph, cluster), cluster).runtime
        out[name] = {"runtime_us": round(float(runtime), 3), "x_etf": round(float(runtime / base), 4),
                     "seconds": round(seconds, 2)}
        print(f"{name} @ 8 devices: one pass {runtime / 1e3:.1f} ms = {runtime / base:.3f}x etf in {seconds:.1f} s",
              flush=True)
    return out


def ship_run(run: Path, graphs: Path, cache: Path) -> Path:
    """Evaluate `run` and ship it as gdp-large (see the module docstring)."""
    from placeto.checkpoint_io import CHECKPOINT, read_blob
    from placeto.methods.registry import ship

    samples = int(read_blob(run / CHECKPOINT, ("samples",))["samples"])
    command = shlex.join(train_command(graphs, run, None, samples) + ["--seed", "0"])
    return ship(run, "gdp-large", {
        "summary": "gdp with the etf list decoder on 10k-26k-node graphs (generated and the ungrouped nmt_l8, "
                   "rnnlm_l8, nasnet) at 4 and 8 devices; its graphs: python -m experiments.gdp_large",
        "command": command, "train_minutes": round(train_minutes(run), 1), "episodes": samples,
        "one_pass_8_devices": evaluate(run, cache), "machine": "2 cores, no GPU (JAX on CPU)"})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-graphs", type=Path, default=ROOT / "runs" / "gdp_large_graphs",
                   help="directory of the generated training graphs")
    p.add_argument("--op-cache", type=Path, default=ROOT / "runs" / "gdp_scale_graphs",
                   help="traced op graphs (shared with experiments/gdp_scale.py)")
    p.add_argument("--run", type=Path, default=ROOT / "runs" / "gdp_large", help="training run directory")
    p.add_argument("--train", action="store_true", help="run the training command (resumes an existing run)")
    p.add_argument("--minutes", type=float, default=None, help="training wall-time limit of this call")
    p.add_argument("--ship", action="store_true", help="evaluate the run and ship it as gdp-large")
    args = p.parse_args(argv)
    write_graphs(args.write_graphs, args.op_cache)
    cmd = train_command(args.write_graphs, args.run, args.minutes)
    print(shlex.join(cmd), flush=True)
    if args.ship:
        print(f"shipped {ship_run(args.run, args.write_graphs, args.op_cache)}")
        return 0
    if not args.train:
        return 0
    exe = Path(sys.executable).with_name("placeto")
    return subprocess.call([str(exe) if exe.exists() else cmd[0], *cmd[1:]], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
