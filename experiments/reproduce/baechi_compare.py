"""Our Baechi placers (etf = m-ETF, m-sct, m-topo) against the public Baechi code, all scored by our simulator.

Reads the public Baechi placements' simulated runtimes from `experiments/reference/baechi_public_placers.csv`
(see experiments/reference/README.md), runs our etf, m-sct, m-topo, heft, local-search (default budget) and
single on the same graphs and device counts, simulates each placement on `cluster_preset("placeto-k80", n)`,
and writes `experiments/results/reproduce/baechi_compare.{md,csv}`: per row ours vs Baechi's runtime for each of the
three placers, every method's ratio to the best method of the row (over all methods, Baechi's included), the
mean ratios and the placement times. It also checks that our placers with Baechi's own cost model
(model="baechi") reproduce the public runtimes.

    python -m experiments.reproduce.baechi_compare [--budget K] [--seed S] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "experiments" / "reference" / "baechi_public_placers.csv"
GRAPH_DIRS = (ROOT / "datasets" / "benchmarks", ROOT / "datasets" / "nmt")
PAIRS = (("etf", "m-etf"), ("m-sct", "m-sct"), ("m-topo", "m-topo"))  # (ours, Baechi's)
OTHERS = ("heft", "local-search", "single")
PRESET = "placeto-k80"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from placeto.baselines import DEFAULT_BUDGET

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="simulator calls of local-search")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", default=str(REFERENCE))
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reproduce"))
    return p.parse_args(argv)


def read_reference(path: str | Path) -> dict[tuple[str, int, str], tuple[float, float]]:
    """(graph, n_devices, method) -> (runtime_us, place_seconds) of the public Baechi placements."""
    with open(path, newline="") as f:
        return {(r["graph"], int(r["n_devices"]), r["method"]): (float(r["runtime_us"]), float(r["place_seconds"]))
                for r in csv.DictReader(f)}


def find_graph(name: str):
    from simulator.model.io import load_graph

    for d in GRAPH_DIRS:
        if (d / f"{name}.json.gz").exists():
            return load_graph(d / f"{name}.json.gz")
    raise FileNotFoundError(f"baechi_compare: graph {name!r} not in {', '.join(map(str, GRAPH_DIRS))}")


def run_row(graph, n_dev: int, budget: int, seed: int) -> dict[str, tuple[float, float, bool]]:
    """Our methods on one graph and device count: method -> (runtime_us, place_seconds, out of memory)."""
    from placeto.baselines import run_method
    from simulator import cluster_preset, simulate

    cluster = cluster_preset(PRESET, n_dev)
    out = {}
    for name in [ours for ours, _ in PAIRS] + list(OTHERS):
        run = run_method(name, graph, cluster, seed, budget=budget)
        res = simulate(graph, run.placement, cluster)
        out[name] = (res.runtime, run.seconds, bool(res.any_oom))
    return out


def etf_by_model(graph, n_dev: int) -> dict[str, float]:
    """Simulated runtime of our m-ETF under each transfer model (`_listsched.TRANSFER_MODELS`)."""
    from placeto.baselines.listsched.problem import TRANSFER_MODELS
    from placeto.baselines.etf import etf
    from simulator import cluster_preset, simulate

    cluster = cluster_preset(PRESET, n_dev)
    return {m: simulate(graph, etf(graph, cluster, model=m), cluster).runtime for m in TRANSFER_MODELS}


def collect(ref: dict, budget: int, seed: int) -> list[dict]:
    """One dict per (graph, n_devices): every method's runtime and seconds, the best, and etf per model."""
    rows = []
    for name, n_dev in dict.fromkeys((g, n) for g, n, _ in ref):
        graph = find_graph(name)
        ours = run_row(graph, n_dev, budget, seed)
        runtime = {m: v[0] for m, v in ours.items()}
        runtime.update({f"baechi {m}": ref[(name, n_dev, m)][0] for _, m in PAIRS})
        seconds = {m: v[1] for m, v in ours.items()}
        seconds.update({f"baechi {m}": ref[(name, n_dev, m)][1] for _, m in PAIRS})
        best = min(runtime.values())
        rows.append({"graph": name, "n_devices": n_dev, "runtime": runtime, "seconds": seconds, "best": best,
                     "oom": [m for m, v in ours.items() if v[2]], "etf_by_model": etf_by_model(graph, n_dev)})
        print(f"{name} x{n_dev}: " + ", ".join(f"{m} {runtime[m] / best:.3f}" for m in runtime), flush=True)
    return rows


def reproduced(rows: list[dict]) -> dict[str, int]:
    """Rows where our m-ETF with Baechi's cost model, and our m-TOPO, give the public runtimes (to 1e-3 us)."""
    return {"m-etf": sum(abs(r["etf_by_model"]["baechi"] - r["runtime"]["baechi m-etf"]) < 1e-3 for r in rows),
            "m-topo": sum(abs(r["runtime"]["m-topo"] - r["runtime"]["baechi m-topo"]) < 1e-3 for r in rows)}


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def markdown(rows: list[dict], command: str, budget: int) -> str:
    methods, hits = list(rows[0]["runtime"]), reproduced(rows)
    ratio = {m: mean(r["runtime"][m] / r["best"] for r in rows) for m in methods}
    lines = [
        "# Our Baechi placers vs the public Baechi code", "",
        f"`{command}`: preset {PRESET}, local-search budget {budget} simulator calls. Baechi's runtimes are its "
        "public placements (experiments/reference/) scored by the same simulator. Ratios divide by the best "
        "method of the row, over every column (Baechi's included).", "",
        "## Mean ratio to the best method", "",
        "| method | ours | Baechi | ours / Baechi |", "|---|---:|---:|---:|",
    ]
    for ours, theirs in PAIRS:
        b = ratio[f"baechi {theirs}"]
        lines.append(f"| {theirs} | {ratio[ours]:.3f} | {b:.3f} | {ratio[ours] / b:.3f} |")
    for m in OTHERS:
        lines.append(f"| {m} | {ratio[m]:.3f} | | |")
    lines += ["", f"With Baechi's own cost model (`model=\"baechi\"`), our m-ETF reproduces {hits['m-etf']}/"
              f"{len(rows)} and our m-TOPO {hits['m-topo']}/{len(rows)} public runtimes exactly.", "",
              *model_table(rows),
              "## Per row: runtime (ms), ours / Baechi, and ratio to the best", "",
              "| graph | D | " + " | ".join(f"{m} ours / Baechi" for _, m in PAIRS) + " | "
              + " | ".join(OTHERS) + " | best |", "|---|---:|" + "---:|" * (len(PAIRS) + len(OTHERS) + 1)]
    for r in rows:
        rt, b = r["runtime"], r["best"]
        cells = [f"{rt[o] / 1e3:.1f} / {rt['baechi ' + t] / 1e3:.1f} ({rt[o] / b:.2f} / {rt['baechi ' + t] / b:.2f})"
                 for o, t in PAIRS]
        cells += [f"{rt[m] / 1e3:.1f} ({rt[m] / b:.2f})" for m in OTHERS]
        lines.append(f"| {r['graph']} | {r['n_devices']} | " + " | ".join(cells) + f" | {b / 1e3:.1f} |")
    secs = {m: mean(r["seconds"][m] for r in rows) for m in methods}
    lines += ["", "## Mean place_seconds (ours: numba / scipy on this machine; Baechi: plain Python, 2 cores)", "",
              "| " + " | ".join(methods) + " |", "|" + "---:|" * len(methods),
              "| " + " | ".join(f"{secs[m]:.3f}" for m in methods) + " |"]
    oom = sorted({m for r in rows for m in r["oom"]})
    lines += ["", f"Out-of-memory placements among ours: {', '.join(oom) if oom else 'none'}.", ""]
    return "\n".join(lines)


def model_table(rows: list[dict]) -> list[str]:
    """Markdown lines: our m-ETF's mean ratio to the best under each transfer model (same best as above)."""
    from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL

    lines = ["## Our m-ETF under each transfer model (`placeto/baselines/listsched/problem.py`)", "",
             "| transfer model | mean ratio to the best | worst |", "|---|---:|---:|"]
    for m in rows[0]["etf_by_model"]:
        r = [row["etf_by_model"][m] / row["best"] for row in rows]
        tag = " (default)" if m == DEFAULT_TRANSFER_MODEL else ""
        lines.append(f"| {m}{tag} | {mean(r):.3f} | {max(r):.3f} |")
    return lines + [""]


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["graph", "n_devices", "method", "runtime_us", "ratio_to_best", "place_seconds"])
        for r in rows:
            for m, t in r["runtime"].items():
                w.writerow([r["graph"], r["n_devices"], m, f"{t:.3f}", f"{t / r['best']:.4f}",
                            f"{r['seconds'][m]:.4f}"])


def warm_up() -> None:
    """Compile (or load) the numba kernels so that place_seconds measures placing only."""
    from placeto.baselines import run_method
    from simulator import cluster_preset
    from simulator.model.generate import layered_dag

    graph = layered_dag(30, seed=0)
    for name in [ours for ours, _ in PAIRS] + list(OTHERS):
        run_method(name, graph, cluster_preset(PRESET, 2), 0, budget=8)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ref = read_reference(args.reference)
    warm_up()
    rows = collect(ref, args.budget, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "experiments.reproduce.baechi_compare",
                          *(argv if argv is not None else sys.argv[1:])])
    text = markdown(rows, command, args.budget)
    (out / "baechi_compare.md").write_text(text)
    write_csv(rows, out / "baechi_compare.csv")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
