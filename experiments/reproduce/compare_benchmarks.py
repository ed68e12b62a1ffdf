"""The papers' baseline table on the benchmark models (Inception-V3, NMT, RNNLM, NASNet, ...).

Runs single, expert, metis, scotch, mincut, etf and local-search (plus the learned policy with --checkpoint) on
every `datasets/benchmarks/*.json.gz` for 2, 4 and 8 K80s, simulates each placement and writes
`experiments/results/reproduce/compare_benchmarks.{md,csv}` (and a bar chart per graph with --plot).

    python -m experiments.reproduce.compare_benchmarks [--checkpoint runs/NAME] [--budget K] [--devices 2,4,8] [--plot]
                                             [--workers N [--ray-address ADDR]]

With --workers each graph runs in a Ray task (placeto.rollouts.distributed): the same table under the call budget.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["single", "expert", "metis", "scotch", "mincut", "etf", "local-search"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from placeto.baselines import DEFAULT_BUDGET

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmarks", default=str(ROOT / "datasets" / "benchmarks"), help="directory of graphs")
    p.add_argument("--devices", default="2,4,8", help="device counts")
    p.add_argument("--preset", default="placeto-k80")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="simulator calls of local-search / policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint",
                   help="trained policy (run directory or shipped name); adds 'placeto' and 'placeto-search' columns")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "reproduce"))
    p.add_argument("--plot", action="store_true")
    from placeto.cli.arguments import add_worker_arguments

    add_worker_arguments(p, "graphs (one Ray task per graph)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = sorted(Path(args.benchmarks).glob("*.json.gz"))
    if not files:
        print(f"compare_benchmarks: no benchmark graphs in {args.benchmarks} (expected *.json.gz); build the "
              f"benchmark models into datasets/benchmarks/ first", file=sys.stderr)
        return 2

    from placeto.harness.compare import compare, markdown_table, plot_compare, write_csv
    from placeto.cli.arguments import spec_from_args
    from simulator.model.errors import InputError
    from simulator.model.io import atomic_write_bytes, load_graph

    try:
        workers = spec_from_args(args)
    except InputError as e:
        print(f"compare_benchmarks: error: {e}", file=sys.stderr)
        return 2
    graphs = [load_graph(f) for f in files]
    methods = list(METHODS) + (["placeto", "placeto-search"] if args.checkpoint else [])
    devices = [int(x) for x in args.devices.split(",")]
    rows = compare(graphs, devices, methods, args.preset, args.seed, args.budget, checkpoint=args.checkpoint,
                   workers=workers)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "experiments.reproduce.compare_benchmarks",
                          *(argv if argv is not None else sys.argv[1:])])
    text = (f"# Baselines on the benchmark models\n\n`{command}`: preset {args.preset}, local-search budget "
            f"{args.budget} simulator calls, seed {args.seed}.\n\n" + markdown_table(rows))
    write_csv(rows, out / "compare_benchmarks.csv")
    atomic_write_bytes(out / "compare_benchmarks.md", text.encode())
    if args.plot:
        plot_compare(rows, out / "compare_benchmarks_plots")
    print(text, end="")
    print(f"wrote {out / 'compare_benchmarks.md'}, {out / 'compare_benchmarks.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
