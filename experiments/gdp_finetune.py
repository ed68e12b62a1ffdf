"""Fine-tuning settings of gdp: the best objective reached over wall seconds by PPO fine-tuning of a shipped gdp
policy on one graph, for several (batch, epochs, learning rate, temperature) settings, against local search at
10,000 calls; and fine-tuning followed by the policy-guided search (method gdp-search with --finetune-episodes E)
in local search's wall time.

    python -m experiments.gdp_finetune                                   # ~9 min on this 2-core machine (quiet)
    python -m experiments.gdp_finetune --graphs nmt_l8 --seconds 30 --settings 512:4:1e-3,128:1:3e-3

Each setting fine-tunes `--checkpoint` (fresh Adam state, run_gdp with the whole budget spent fine-tuning; the
best placement sampled or greedy on the way counts) on each benchmark graph (the dataset's grouped graphs) at
`--devices`; the first setting `train` is the policy's own training settings. Compilation is excluded. Local search
at 10,000 calls is the reference and its wall time a budget column (issue 12: fine-tuned gdp within local search's
wall time at 10,000 calls on nmt_l8, 8 devices). The second table: gdp-search after E fine-tuning episodes
(`--search-episodes`, FinetuneSettings() as in `placeto compare --finetune-episodes E`), each of `--seeds`, in
that same wall time, against the best of etf, local-search and sa at compare's default budget (1,000 calls) and
local search at 10,000 calls.

Writes experiments/results/gdp_finetune.md, gdp_finetune.csv and gdp_finetune_search.csv.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placeto.arguments import DEVICES, SEED, OneLineParser, comma_list, float_in, int_in  # noqa: E402
from placeto.baselines import DEFAULT_BUDGET, run_method  # noqa: E402
from placeto.methods.gdp.config import FinetuneSettings, GdpConfig  # noqa: E402
from placeto.methods.gdp.place import load_run, run_gdp  # noqa: E402
from placeto.objective import score_batch  # noqa: E402
from placeto.policies import resolve_checkpoint  # noqa: E402
from simulator import cluster_preset  # noqa: E402
from simulator.errors import InputError  # noqa: E402
from simulator.io import atomic_write_bytes, atomic_write_csv, load_graph  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
MARKS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def parse_setting(text: str) -> tuple[str, FinetuneSettings | None]:
    """An argparse type: 'train' (the policy's own settings: None) or 'B:epochs:lr[:temperature]' -> (label,
    settings)."""
    if text == "train":
        return text, None
    parts = text.split(":")
    try:
        if len(parts) not in (3, 4):
            raise ValueError("expected three or four fields")
        temperature = float(parts[3]) if len(parts) == 4 else 1.0
        return text, FinetuneSettings(int(parts[0]), int(parts[1]), float(parts[2]), temperature)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a setting is 'train' or B:epochs:lr[:temperature], not {text[:40]!r} "
                                         f"({e})") from None


def best_at(trace, seconds: float) -> float:
    """The best objective (microseconds) a meter trace [(seconds, calls, best)] had reached by `seconds`."""
    seen = [best for s, _, best in trace if s <= seconds]
    return min(seen) if seen else float("nan")


CLASSICAL = ("etf", "local-search", "sa")  # the best of these at compare's default budget: the search table's bar


def run(graphs: list[str], devices: int, seconds: float, settings: list[tuple[str, FinetuneSettings | None]],
        checkpoint: str, config: GdpConfig, search_episodes: list[int] = (), seeds: list[int] = (0,)
        ) -> tuple[list[dict], list[dict]]:
    """(one row per (graph, setting), one per (graph, search episodes E, seed)); `config`: the checkpoint's (its
    training settings are the 'train' row's)."""
    cluster = cluster_preset("placeto-k80", devices)
    rows, search_rows = [], []
    for name in graphs:
        graph = load_graph(ROOT / "datasets" / "benchmarks" / f"{name}.json.gz")
        ls = run_method("local-search", graph, cluster, 0, budget=10_000)
        ls_obj = min(best for _, _, best in ls.trace)
        search_rows += _search_rows(name, graph, cluster, checkpoint, search_episodes, seeds, ls.seconds, ls_obj)
        for label, tune in settings:
            tune = tune or FinetuneSettings.of_training(config)
            res, compile_s = run_gdp(graph, cluster, checkpoint, 0, None, seconds, finetune_episodes=10**9, tune=tune)
            row = {"graph": name, "nodes": graph.n_nodes, "devices": devices, "setting": label,
                   "samples_per_update": tune.samples_per_update, "ppo_epochs": tune.ppo_epochs, "lr": tune.lr,
                   "temperature": tune.temperature,
                   "calls": res.simulator_calls, "compile_s": round(compile_s, 2), "ls_10k_ms": ls_obj / 1e3,
                   "ls_10k_s": round(ls.seconds, 2), "at_ls_s_ms": best_at(res.trace, ls.seconds) / 1e3}
            row |= {f"at_{m:g}s_ms": best_at(res.trace, m) / 1e3 for m in MARKS if m <= seconds}
            rows.append(row)
            print(f"{name} {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k.startswith("at_")),
                  flush=True)
    return rows, search_rows


def _search_rows(name: str, graph, cluster, checkpoint: str, search_episodes: list[int], seeds: list[int],
                 seconds: float, ls_obj: float) -> list[dict]:
    """gdp-search after E fine-tuning episodes, per E and seed, in `seconds`; each row also holds the best of
    CLASSICAL at DEFAULT_BUDGET calls (seed 0) and local search at 10,000 calls (`ls_obj`, microseconds)."""
    if not search_episodes:
        return []
    bar = {m: float(score_batch(graph, run_method(m, graph, cluster, 0, budget=DEFAULT_BUDGET).placement[None],
                                cluster)[0]) for m in CLASSICAL}
    bar_method = min(bar, key=bar.get)
    rows = []
    for episodes in search_episodes:
        for seed in seeds:
            res, _ = run_gdp(graph, cluster, checkpoint, seed, None, seconds, finetune_episodes=episodes, search=True)
            rows.append({"graph": name, "nodes": graph.n_nodes, "devices": cluster.n_devices, "episodes": episodes,
                         "seed": seed, "seconds": round(res.seconds, 2), "calls": res.simulator_calls,
                         "ms": float(score_batch(graph, res.placement[None], cluster)[0]) / 1e3, "bar_method": bar_method,
                         "bar_ms": bar[bar_method] / 1e3, "ls_10k_ms": ls_obj / 1e3,
                         "ls_10k_s": round(seconds, 2)})
            print(f"{name} gdp-search E={episodes} seed {seed}: {rows[-1]['ms']:.1f} ms", flush=True)
    return rows


def search_report(rows: list[dict], seconds_note: str) -> list[str]:
    """The second table: gdp-search after E fine-tuning episodes, mean (min-max) over the seeds."""
    if not rows:
        return []
    lines = ["## Fine-tuning, then the policy-guided search", "",
             "gdp-search (`placeto compare --methods gdp-search --finetune-episodes E --seconds S`): E placements of "
             "PPO fine-tuning (FinetuneSettings()), then the tuned policy's greedy placement and per-node device "
             f"distributions start and steer the annealing, all within {seconds_note}. Objective in ms, mean "
             "(min-max) over the seeds; `best at 1,000 calls`: the best of " + ", ".join(CLASSICAL) +
             f" at compare's default budget ({DEFAULT_BUDGET:,} calls, seed 0).", "",
             "| graph | devices | E | seeds | gdp-search | calls | wins vs best at 1,000 calls | best at 1,000 calls "
             "| local search 10k (its s) |", "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    keys = sorted({(r["graph"], r["devices"], r["episodes"]) for r in rows}, key=lambda k: (k[0], k[2]))
    for g, d, e in keys:
        rs = [r for r in rows if (r["graph"], r["devices"], r["episodes"]) == (g, d, e)]
        ms = [r["ms"] for r in rs]
        wins = sum(r["ms"] <= r["bar_ms"] for r in rs)
        lines.append(f"| {g} | {d} | {e} | {len(rs)} | {sum(ms) / len(ms):.1f} ({min(ms):.1f}-{max(ms):.1f}) | "
                     f"{round(sum(r['calls'] for r in rs) / len(rs))} | {wins} of {len(rs)} | "
                     f"{rs[0]['bar_ms']:.1f} ({rs[0]['bar_method']}) | {rs[0]['ls_10k_ms']:.1f} ({rs[0]['ls_10k_s']:.1f} s) |")
    return lines + [""]


def report(rows: list[dict], cmd: str, seconds: float, checkpoint: str) -> list[str]:
    marks = [m for m in MARKS if m <= seconds]
    lines = ["# gdp fine-tuning settings", "",
             f"Command: `{cmd}` ({os.cpu_count()} cores, load average at the start {os.getloadavg()[0]:.1f}; "
             f"placeto-k80 preset; policy `{checkpoint}`).", "",
             "Best objective (ms: simulated runtime plus the memory penalty) PPO fine-tuning had reached by each wall "
             "time (columns; compilation excluded), per setting B:epochs:lr[:temperature] (`train`: the policy's "
             "own). "
             "`at LS s`: at the wall time local search takes for 10,000 calls, whose result is the last column.", "",
             "| graph | devices | setting | " + " | ".join(f"{m:g} s" for m in marks) +
             " | at LS s | calls | LS 10k (its s) |", "|---|---:|---|" + "---:|" * (len(marks) + 3)]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['devices']} | {r['setting']} | " +
                     " | ".join(f"{r[f'at_{m:g}s_ms']:.1f}" for m in marks) +
                     f" | {r['at_ls_s_ms']:.1f} | {r['calls']} | {r['ls_10k_ms']:.1f} ({r['ls_10k_s']:.1f} s) |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", type=comma_list(str), default=["nmt_l8", "rnnlm_l8", "nasnet"],
                   help="benchmark graphs (datasets/benchmarks/<name>.json.gz)")
    p.add_argument("--devices", type=DEVICES, default=8)
    p.add_argument("--seconds", type=float_in(0.1, 3600.0), default=10.0, help="fine-tuning budget per run")
    p.add_argument("--settings", type=comma_list(parse_setting),
                   default=[parse_setting(t) for t in ("train", "128:1:3e-3", "128:1:3e-3:1.5", "128:1:3e-3:2",
                                                       "128:1:3e-3:3", "256:1:3e-3:2")],
                   help="'train' and/or B:epochs:lr[:temperature] (temperature 1 if omitted)")
    p.add_argument("--search-episodes", type=comma_list(int_in(0, 10**6)), default=[0, 500, 2000],
                   help="fine-tuning episodes before gdp-search, e.g. 0,500,2000")
    p.add_argument("--seeds", type=comma_list(SEED), default=[0, 1, 2],
                   help="seeds of each gdp-search row")
    p.add_argument("--checkpoint", default="gdp-general")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    try:
        for g in args.graphs:
            if not (ROOT / "datasets" / "benchmarks" / f"{g}.json.gz").is_file():
                raise InputError(f"no benchmark graph {g!r}", str(ROOT / "datasets" / "benchmarks"))
        config, _ = load_run(resolve_checkpoint(args.checkpoint))
        if args.devices > config.max_devices:
            raise InputError(f"--devices {args.devices}: the policy places on at most {config.max_devices}",
                             args.checkpoint)
    except InputError as e:
        print(f"gdp_finetune: error: {e}", file=sys.stderr)
        return 2
    rows, search_rows = run(args.graphs, args.devices, args.seconds, args.settings, args.checkpoint, config,
                            args.search_episodes, args.seeds)
    cmd = "python -m experiments.gdp_finetune " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = report(rows, cmd.strip(), args.seconds, args.checkpoint)
    lines += search_report(search_rows, "the wall time of local search at 10,000 calls on the graph (last column)")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / "gdp_finetune.md", ("\n".join(lines) + "\n").encode())
    atomic_write_csv(args.out / "gdp_finetune.csv", rows)
    if search_rows:
        atomic_write_csv(args.out / "gdp_finetune_search.csv", search_rows)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
