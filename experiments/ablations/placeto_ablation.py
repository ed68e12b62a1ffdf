"""Why Placeto does not learn from scratch: ablations of its MDP and update, on family and on per-graph training.

Each variant is the earlier default `PlacetoConfig` (`BASE`: embed_every 1, 8 episodes per update, lr
1e-3 decaying to 1e-4) with some fields changed (`--variant name=field=value,field=value`).
Two settings, both from fresh parameters:

    family      train on the nmt train split (24 graphs, 4 x K80) for --episodes, then place every test graph
                zero-shot with one greedy episode (`placeto place`'s default); report each test graph's runtime
                over its single-device runtime, their mean, and nmt_004 (the issue's yardstick)
    pergraph    train on one benchmark graph alone (--graphs, --devices) for --pergraph-episodes; report the
                best placement any episode visited over the single device, and the greedy policy at the end

Every (setting, variant, seed, graph) row is appended to experiments/results/ablations/placeto_ablation.csv as soon
as it
is measured (with its learning curve: episode -> mean final runtime of the batch); rows already there are
skipped, so a killed run resumes. The tables go to placeto_ablation.md and the curves to
placeto_ablation_<setting>.png.

    python -m experiments.ablations.placeto_ablation --setting family --episodes 400 --seeds 0
    python -m experiments.ablations.placeto_ablation --setting pergraph --graphs nmt_l2 inception_v3 \
        --devices 2 --pergraph-episodes 200
    python -m experiments.ablations.placeto_ablation --report          # tables and plots from the CSV only
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator import cluster_preset, load_graph, simulate  # noqa: E402
from simulator.model.io import atomic_write_bytes  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "ablations"
CSV = RESULTS / "placeto_ablation.csv"
FIELDS = ["setting", "variant", "overrides", "seed", "graph", "devices", "episodes", "train_s", "single_ms",
          "greedy_ms", "best_ms", "lower_bound_ms", "sim_calls", "curve"]
DEFAULT_VARIANTS = [
    "default=",
    "m8_b1=embed_every=8,episodes_per_update=1,lr_end=1e-3",
    "random_init=init_placement=random",
    "random_init_gamma1=init_placement=random,gamma=1.0",
    "single_gamma1=gamma=1.0",
    "random_init_entropy=init_placement=random,entropy=0.1,entropy_end=0.01",
]


BASE = "embed_every=1,episodes_per_update=8,lr=1e-3,lr_end=1e-4,counterfactual_loss=expected"
"""Every variant's overrides apply to PlacetoConfig's defaults of before the embed_every / batch retuning (the ablation was run against
them): these fields, and the rest as they still are."""


def parse_variant(text: str) -> tuple[str, dict, dict]:
    """"name=f=v,f=v" -> (name, typed overrides, the full set of fields given to PlacetoConfig: BASE + them)."""
    from placeto.methods.placeto.config import parse_overrides

    name, _, rest = text.partition("=")
    items = [x for x in rest.split(",") if x]
    overrides = parse_overrides(items)
    return name, overrides, {**parse_overrides(BASE.split(",")), **overrides}


def read_rows() -> list[dict]:
    if not CSV.exists():
        return []
    with CSV.open() as f:
        return list(csv.DictReader(f))


def append_row(row: dict) -> None:
    rows = read_rows() + [row]
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(CSV, buf.getvalue().encode())


def curve_of(run: Path) -> list[list[float]]:
    with (run / "metrics.csv").open() as f:
        return [[int(r["episode"]), round(float(r["final_runtime"]) / 1e3, 3), r["graph"]]
                for r in csv.DictReader(f)]


def single_ms(graph, cluster) -> float:
    return float(simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster).runtime) / 1e3


def run_family(variant: str, overrides: dict, fields: dict, seed: int, episodes: int, minutes: float, runs: Path,
               done: set) -> None:
    from placeto.methods.placeto.config import PlacetoConfig
    from simulator.workloads.families import load_family
    from placeto.methods.placeto.place import place
    from placeto.methods.placeto.train import train
    from simulator.model.result import lower_bound

    key = ("family", variant, str(seed))
    if key in done:
        return
    cluster = cluster_preset("placeto-k80", 4)
    train_graphs, test_graphs = load_family("nmt", "train"), load_family("nmt", "test")
    config = PlacetoConfig(**{**fields, "episodes": episodes, "seed": seed, "progress": True,
                              "time_limit_minutes": minutes})
    run = runs / f"family_{variant}_s{seed}"
    t0 = time.time()
    summary = train(config, train_graphs, cluster, run)
    train_s = time.time() - t0
    curve = curve_of(run)
    for i, g in enumerate(test_graphs):
        res = place(g, cluster, run)
        append_row({"setting": "family", "variant": variant, "overrides": json.dumps(overrides), "seed": seed,
                    "graph": g.name, "devices": 4, "episodes": summary.episodes, "train_s": round(train_s, 1),
                    "single_ms": round(single_ms(g, cluster), 3), "greedy_ms": round(res.final_runtime / 1e3, 3),
                    "best_ms": round(res.runtime / 1e3, 3),
                    "lower_bound_ms": round(lower_bound(g, cluster) / 1e3, 3), "sim_calls": summary.sim_calls,
                    "curve": json.dumps(curve) if i == 0 else ""})  # the run's curve once, on its first row
        print(f"family {variant} s{seed} {g.name}: greedy {res.final_runtime / 1e3:.2f} ms "
              f"(single {single_ms(g, cluster):.2f})", flush=True)


def run_pergraph(variant: str, overrides: dict, fields: dict, seed: int, graph_name: str, devices: int, episodes: int,
                 minutes: float, runs: Path, done: set) -> None:
    from placeto.methods.placeto.config import PlacetoConfig
    from placeto.methods.placeto.place import place
    from placeto.methods.placeto.train import train
    from simulator.model.result import lower_bound

    key = ("pergraph", variant, str(seed), graph_name, str(devices))
    if key in done:
        return
    cluster = cluster_preset("placeto-k80", devices)
    g = load_graph(ROOT / "datasets" / "benchmarks" / f"{graph_name}.json.gz")
    config = PlacetoConfig(**{**fields, "episodes": episodes, "seed": seed, "progress": True,
                              "time_limit_minutes": minutes})
    run = runs / f"pergraph_{variant}_{graph_name}_{devices}d_s{seed}"
    t0 = time.time()
    summary = train(config, [g], cluster, run)
    train_s = time.time() - t0
    res = place(g, cluster, run)
    best = min(summary.best_runtime.values())
    append_row({"setting": "pergraph", "variant": variant, "overrides": json.dumps(overrides), "seed": seed,
                "graph": graph_name, "devices": devices, "episodes": summary.episodes, "train_s": round(train_s, 1),
                "single_ms": round(single_ms(g, cluster), 3), "greedy_ms": round(res.final_runtime / 1e3, 3),
                "best_ms": round(best / 1e3, 3), "lower_bound_ms": round(lower_bound(g, cluster) / 1e3, 3),
                "sim_calls": summary.sim_calls, "curve": json.dumps(curve_of(run))})
    print(f"pergraph {variant} s{seed} {graph_name}@{devices}: best {best / 1e3:.2f} greedy "
          f"{res.final_runtime / 1e3:.2f} single {single_ms(g, cluster):.2f}", flush=True)


def report() -> None:
    rows = read_rows()
    lines = ["# Placeto ablations: what makes it learn from scratch", "",
             "Command: `python -m experiments.ablations.placeto_ablation` (see its docstring; rows resume from "
             "placeto_ablation.csv). Runtimes are simulated ms on placeto-k80; x single = runtime / the single "
             "device's (lower is better; < 1 beats one device).", "",
             "Variant names: `m8` = embed_every 8 (message passing every 8th step), `bN` = N episodes per update "
             "(the earlier default was 8), `lr...` = learning rate (and its end value), `random_init` = "
             "episodes start from a random placement instead of all on device 0, `gamma1` = discount 1 "
             "(return-to-go), `cf` = counterfactual (every device simulated at the gradient's steps, expected "
             "immediate reward), `cfbest` = the same with the cross-entropy against the best immediate device. "
             "`default` is the earlier configuration (embed_every 1, 8 episodes per update, lr 1e-3 "
             "decaying to 1e-4); today's default is `m8_b1` (embed_every 8, 1 episode per update, lr 1e-3 "
             "constant). Each row's overrides (its second column) apply to that old default (`BASE` in the "
             "script).", ""]
    fam = [r for r in rows if r["setting"] == "family"]
    if fam:
        lines += ["## Family training (nmt train split, 4 devices), greedy zero-shot on the 8 test graphs", "",
                  "| variant | overrides | seed | episodes | train s | mean x single | worst x single | nmt_004 ms "
                  "(x single) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for (v, s) in dict.fromkeys((r["variant"], r["seed"]) for r in fam):
            sel = [r for r in fam if r["variant"] == v and r["seed"] == s]
            ratio = [float(r["greedy_ms"]) / float(r["single_ms"]) for r in sel]
            n4 = [r for r in sel if r["graph"] == "nmt_004"]
            n4s = (f"{float(n4[0]['greedy_ms']):.2f} ({float(n4[0]['greedy_ms']) / float(n4[0]['single_ms']):.2f})"
                   if n4 else "—")
            lines.append(f"| {v} | `{sel[0]['overrides']}` | {s} | {sel[0]['episodes']} | {sel[0]['train_s']} | "
                         f"{np.mean(ratio):.3f} | {max(ratio):.3f} | {n4s} |")
        lines.append("")
    per = [r for r in rows if r["setting"] == "pergraph"]
    if per:
        lines += ["## Per-graph training from scratch", "",
                  "| variant | graph | devices | seed | episodes | train s | single ms | best ms (x single) | greedy "
                  "at end ms | lower bound ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in per:
            lines.append(f"| {r['variant']} | {r['graph']} | {r['devices']} | {r['seed']} | {r['episodes']} | "
                         f"{r['train_s']} | {float(r['single_ms']):.2f} | {float(r['best_ms']):.2f} "
                         f"({float(r['best_ms']) / float(r['single_ms']):.2f}) | {float(r['greedy_ms']):.2f} | "
                         f"{float(r['lower_bound_ms']):.2f} |")
        lines.append("")
    atomic_write_bytes(RESULTS / "placeto_ablation.md", "\n".join(lines).encode())
    _plot(rows)
    print("\n".join(lines))


def _single_ms_of_training_graphs() -> dict[str, float]:
    from simulator.workloads.families import load_family

    cluster = cluster_preset("placeto-k80", 4)
    return {g.name: single_ms(g, cluster) for g in load_family("nmt", "train")}


def _plot(rows: list[dict]) -> None:
    """Family: the batch's final runtime over the training graph's single-device runtime, a moving mean over 24
    updates (one pass over the training split when one episode makes an update), per run. Per graph: the batch's
    final runtime in ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for setting in ("family", "pergraph"):
        runs = [r for r in rows if r["setting"] == setting and r["curve"]]
        if not runs:
            continue
        panels = sorted({(r["graph"] if setting == "pergraph" else "", r["devices"]) for r in runs})
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels) + 3.5, 4.2), squeeze=False)
        single = _single_ms_of_training_graphs() if setting == "family" else {}
        for ax, (graph, devices) in zip(axes[0], panels):
            drawn = 0
            for r in runs:
                if (r["graph"] if setting == "pergraph" else "", r["devices"]) != (graph, devices):
                    continue
                drawn += 1
                curve = json.loads(r["curve"])
                xs = np.array([c[0] for c in curve], float)
                if setting == "family":
                    ys = np.array([c[1] / single.get(c[2], np.nan) for c in curve])
                    k = min(24, len(ys))
                    ys = np.convolve(ys, np.ones(k) / k, mode="valid")
                    xs = xs[k - 1:]
                else:
                    ys = np.array([c[1] for c in curve])
                ax.plot(xs, ys, label=f"{r['variant']} (seed {r['seed']})", lw=1.2,
                        ls=("-", "--", ":")[(drawn - 1) // 10 % 3],  # 10 colours: a new line style per cycle
                        marker="o" if len(xs) < 5 else None)
            ax.set_title(f"{graph + ' @ ' if graph else 'nmt family (train split) @ '}{devices} devices")
            ax.set_xlabel("training episodes")
            ax.set_ylabel("final runtime / single device (24-update mean)" if setting == "family"
                          else "final runtime of the batch, ms")
            if setting == "family":
                ax.axhline(1.0, color="grey", ls="--", lw=0.8, label="single device")
        axes[0][-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(RESULTS / f"placeto_ablation_{setting}.png", dpi=110)
        plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--setting", choices=["family", "pergraph"], default="family")
    p.add_argument("--variant", action="append", help="name=field=value,field=value (repeatable)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--episodes", type=int, default=400, help="family training episodes")
    p.add_argument("--minutes", type=float, default=0.0, help="time limit of one training run (0: none)")
    p.add_argument("--graphs", nargs="+", default=["nmt_l2"], help="benchmark graphs (pergraph)")
    p.add_argument("--devices", type=int, default=2, help="devices (pergraph)")
    p.add_argument("--pergraph-episodes", type=int, default=200)
    p.add_argument("--runs", default="runs/placeto_ablation", help="run directories")
    p.add_argument("--report", action="store_true", help="only write the tables and plots from the CSV")
    a = p.parse_args()
    if not a.report:
        done = set()
        for r in read_rows():
            done.add((r["setting"], r["variant"], r["seed"]))
            done.add((r["setting"], r["variant"], r["seed"], r["graph"], r["devices"]))
        for text in a.variant or DEFAULT_VARIANTS:
            name, overrides, fields = parse_variant(text)
            for seed in a.seeds:
                if a.setting == "family":
                    run_family(name, overrides, fields, seed, a.episodes, a.minutes, Path(a.runs), done)
                else:
                    for g in a.graphs:
                        run_pergraph(name, overrides, fields, seed, g, a.devices, a.pergraph_episodes, a.minutes,
                                     Path(a.runs), done)
                report()
    report()


if __name__ == "__main__":
    main()
