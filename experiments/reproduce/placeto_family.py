"""Placeto on graph families: train on a family's train split, place its test graphs zero-shot, compare.

Per test graph: single device, random (best of as many samples as the zero-shot policy simulated), zero-shot
greedy (one greedy episode of the family policy), zero-shot (the best of that greedy episode and K sampled
episodes), from scratch (best placement seen while training a policy on that graph alone), the lower bound, and
simulator calls. Runtimes are simulated microseconds of the best placement each method found (an
out-of-memory placement is marked *). The table is printed and written under experiments/results/reproduce/.

    python -m experiments.reproduce.placeto_family --family nmt --episodes 2800 --minutes 40 --scratch-episodes 400 \
        --scratch-minutes 2 --runs runs/pf       # the committed results: ptb 2400 episodes, cifar10 1400 / 55 min
    python -m experiments.reproduce.placeto_family --synthetic              # layered_dag train/test sets
    python -m experiments.reproduce.placeto_family --synthetic --config tiny --episodes 16 --scratch-episodes 8  # smoke
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto.methods.placeto.config import PRESETS  # noqa: E402
from placeto.methods.placeto.place import place  # noqa: E402
from placeto.harness.plots_train import plot_run  # noqa: E402
from placeto.methods.placeto.train import graph_keys, train  # noqa: E402
from simulator import cluster_preset, load_graph, lower_bound  # noqa: E402
from simulator.model.cluster import Cluster  # noqa: E402
from simulator.model.generate import layered_dag  # noqa: E402
from simulator.model.graph import Graph  # noqa: E402
from simulator.model.placement_file import load_placement  # noqa: E402

try:
    from simulator import simulate, simulate_batch
except ImportError:  # until the fast engine is exported
    from simulator.engine.fast import simulate, simulate_batch

COLUMNS = ["graph", "nodes", "single_ms", "random_ms", "zero_shot_greedy_ms", "zero_shot_ms", "scratch_ms",
           "lower_bound_ms", "zero_shot_sim_calls", "scratch_sim_calls", "zero_shot_s", "scratch_s"]


def load_family(name: str) -> tuple[list[Graph], list[Graph]]:
    """(train graphs, test graphs) of datasets/<name>/manifest.json."""
    folder = ROOT / "datasets" / name
    manifest = json.loads((folder / "manifest.json").read_text())
    split: dict[str, list[Graph]] = {"train": [], "test": []}
    for entry in manifest["graphs"]:
        split[entry["split"]].append(load_graph(folder / entry["file"]))
    return split["train"], split["test"]


def synthetic_family(n_train: int, n_test: int, lo: int, hi: int, seed: int = 0) -> tuple[list[Graph], list[Graph]]:
    """Random layered DAGs with lo..hi nodes; test graphs use seeds the train graphs do not."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lo, hi + 1, n_train + n_test)
    graphs = [layered_dag(int(n), seed=1000 * seed + i) for i, n in enumerate(sizes)]
    return graphs[:n_train], graphs[n_train:]


def random_best(graph: Graph, cluster: Cluster, samples: int, seed: int) -> float:
    """Best runtime of `samples` uniformly random placements (in memory, where any fits)."""
    rng = np.random.default_rng(seed)
    best, best_fit = np.inf, np.inf
    for lo in range(0, samples, 256):
        p = rng.integers(0, cluster.n_devices, (min(256, samples - lo), graph.n_nodes), dtype=np.int32)
        res = simulate_batch(graph, p, cluster, with_memory=True)
        fits = (res.peak_memory <= np.asarray(cluster.memory)).all(axis=1)
        best = min(best, float(res.runtime.min()))
        if fits.any():
            best_fit = min(best_fit, float(res.runtime[fits].min()))
    return best_fit if np.isfinite(best_fit) else best


def fmt(graph: Graph, cluster: Cluster, placement: np.ndarray) -> tuple[float, str]:
    res = simulate(graph, placement, cluster)
    return res.runtime, f"{res.runtime / 1e3:.2f}{'*' if res.any_oom else ''}"


def run_family(name: str, train_graphs, test_graphs, cluster: Cluster, config, scratch_config,
               runs: Path, samples: int) -> tuple[list[dict], object, dict]:
    """Train on the family, place every test graph zero-shot, train from scratch on each; rows + summaries."""
    t0 = time.time()
    summary = train(config, train_graphs, cluster, runs / name / "family")
    print(f"[{name}] trained on {len(train_graphs)} graphs: {summary.episodes} episodes, "
          f"{summary.wall_seconds / 60:.1f} min, {summary.episodes_per_second:.2f} ep/s, "
          f"{summary.sim_calls_per_second:.0f} sim calls/s", flush=True)
    rows, ratios = [], {"greedy": [], "zero_shot": [], "random": [], "scratch": [], "lower_bound": []}
    for key, g in zip(graph_keys(test_graphs), test_graphs):
        t1 = time.time()
        greedy = place(g, cluster, runs / name / "family")
        zs = place(g, cluster, runs / name / "family", samples=samples, seed=1)  # greedy + K sampled
        t2 = time.time()
        scratch_dir = runs / name / "scratch" / key
        sc = train(scratch_config, [g], cluster, scratch_dir)
        t3 = time.time()
        scratch_p = load_placement(sc.best_placement_files[key], g, cluster.n_devices).assignment \
            if key in sc.best_placement_files else np.zeros(g.n_nodes, np.int32)
        single = fmt(g, cluster, np.zeros(g.n_nodes, np.int32))
        rnd = random_best(g, cluster, zs.sim_calls, 0)
        lb = lower_bound(g, cluster)
        cells = {"greedy": fmt(g, cluster, greedy.placement), "zero_shot": fmt(g, cluster, zs.placement),
                 "scratch": fmt(g, cluster, scratch_p)}
        for k, v in (("greedy", cells["greedy"][0]), ("zero_shot", cells["zero_shot"][0]), ("random", rnd),
                     ("scratch", cells["scratch"][0]), ("lower_bound", lb)):
            ratios[k].append(v / single[0])
        rows.append({"graph": key, "nodes": g.n_nodes, "single_ms": single[1], "random_ms": f"{rnd / 1e3:.2f}",
                     "zero_shot_greedy_ms": cells["greedy"][1], "zero_shot_ms": cells["zero_shot"][1],
                     "scratch_ms": cells["scratch"][1], "lower_bound_ms": f"{lb / 1e3:.2f}",
                     "zero_shot_sim_calls": zs.sim_calls, "scratch_sim_calls": sc.sim_calls,
                     "zero_shot_s": f"{t2 - t1:.1f}", "scratch_s": f"{t3 - t2:.1f}"})
        print("  " + "  ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    print(f"[{name}] done in {(time.time() - t0) / 60:.1f} min", flush=True)
    return rows, summary, {k: np.asarray(v) for k, v in ratios.items()}


def summary_lines(ratios: dict[str, np.ndarray]) -> list[str]:
    """Mean runtime / single-device runtime per method, and how often zero-shot beat single and random."""
    zs = ratios["zero_shot"]
    lines = ["| method | mean x single | worst x single |", "|---|--:|--:|"]
    for k in ("random", "greedy", "zero_shot", "scratch", "lower_bound"):
        lines.append(f"| {k} | {ratios[k].mean():.3f} | {ratios[k].max():.3f} |")
    lines += ["", f"Zero-shot beats single device on {(zs < 1).sum()}/{len(zs)} test graphs and best-of-random on "
              f"{(zs < ratios['random']).sum()}/{len(zs)}; it is {zs.mean() / ratios['lower_bound'].mean():.2f}x "
              f"the lower bound and {zs.mean() / ratios['scratch'].mean():.2f}x from-scratch training on average."]
    return lines


def write_table(rows: list[dict], path: Path, title: str, extra: list[str] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    lines = [f"# {title}", "", "Runtimes in ms (simulated; * = out of memory). Random = best of as many random",
             "placements as the zero-shot episodes made simulator calls; zero-shot = best of one greedy and K",
             "sampled episodes of the family policy (the greedy one alone in its own column).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    lines += [""] + list(extra)
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", action="append", default=[], help="datasets/<family> (repeatable)")
    p.add_argument("--synthetic", action="store_true", help="layered_dag train/test sets instead of families")
    p.add_argument("--n-train", type=int, default=24)
    p.add_argument("--n-test", type=int, default=6)
    p.add_argument("--sizes", type=int, nargs=2, default=(100, 400), help="synthetic node counts lo hi")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--config", default="default", choices=sorted(PRESETS))
    p.add_argument("--episodes", type=int, help="family training episodes (default: the config's)")
    p.add_argument("--scratch-episodes", type=int, default=200, help="per test graph, from scratch")
    p.add_argument("--grad-steps", type=int, help="override config.grad_steps")
    p.add_argument("--minutes", type=float, help="wall-time limit of the family training (rerun to continue)")
    p.add_argument("--scratch-minutes", type=float, help="wall-time limit of each from-scratch run")
    p.add_argument("--samples", type=int, default=8, help="sampled zero-shot episodes besides the greedy one")
    p.add_argument("--runs", default=str(ROOT / "runs" / "placeto_family"))
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reproduce"))
    args = p.parse_args(argv)
    config = PRESETS[args.config]()
    config = config.replace(**{k: v for k, v in (("episodes", args.episodes), ("grad_steps", args.grad_steps),
                                                 ("time_limit_minutes", args.minutes)) if v is not None})
    cluster = cluster_preset("placeto-k80", args.devices)
    families = ["synthetic"] if args.synthetic else args.family
    if not families:
        p.error("give --family NAME (repeatable) or --synthetic")
    for name in families:
        if name == "synthetic":
            tr, te = synthetic_family(args.n_train, args.n_test, *args.sizes)
        else:
            tr, te = load_family(name)
        scratch = config.replace(episodes=args.scratch_episodes, time_limit_minutes=args.scratch_minutes or 0.0)
        rows, summary, ratios = run_family(name, tr, te, cluster, config, scratch, Path(args.runs), args.samples)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        curves = plot_run(Path(args.runs) / name / "family")
        for src in curves:
            shutil.copyfile(src, Path(args.out) / f"placeto_family_{name}_{src.name}")
        limits = f" (limit {args.minutes} min)" if args.minutes else ""
        scratch_limits = f" (limit {args.scratch_minutes} min each)" if args.scratch_minutes else ""
        write_table(rows, Path(args.out) / f"placeto_family_{name}",
                    f"Placeto on {name}: {len(tr)} train / {len(te)} test graphs, {args.devices} x K80, config "
                    f"{args.config}; family policy trained for {summary.episodes} episodes in "
                    f"{summary.wall_seconds / 60:.1f} min{limits} ({summary.episodes_per_second:.2f} episodes/s, "
                    f"{summary.sim_calls_per_second:.0f} simulator calls/s); from scratch: up to "
                    f"{args.scratch_episodes} episodes{scratch_limits}", summary_lines(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
