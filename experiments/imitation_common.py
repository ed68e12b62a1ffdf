"""What the two imitation experiments share (expert_iteration.py for gdp, placeto_imitation.py for Placeto): their
common flags, the start policy checked against the device counts, the training graphs (the family's train split
and the graphs of further family seeds), and the report: one row per evaluation, resumable through
`placeto.checkpoint_io.save_table_run`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placeto.arguments import DEVICES, POSITIVE, comma_list, float_in, int_in  # noqa: E402
from placeto.baselines import run_method  # noqa: E402
from placeto.checkpoint_io import CHECKPOINT, load_table_run  # noqa: E402
from placeto.families import FAMILIES, load_family, seed_graphs  # noqa: E402
from placeto.policies import resolve_checkpoint  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.cluster import Cluster  # noqa: E402
from simulator.errors import InputError  # noqa: E402
from simulator.graph import Graph  # noqa: E402
from simulator.io import atomic_write_bytes  # noqa: E402

ROW = ("step", "seconds", "cross_entropy", "train_ratio", "test_ratio")  # one row of a report


def add_arguments(p: argparse.ArgumentParser, start: str, steps: int, calls: int, eval_every: int) -> None:
    """The flags both experiments take (defaults: the policy to start from, steps, target calls, evaluation
    interval)."""
    p.add_argument("--family", default="ptb", choices=FAMILIES)
    p.add_argument("--start", default=start, help="policy to start from (shipped name or run directory)")
    p.add_argument("--devices", type=comma_list(DEVICES), default=[4],
                   help="device counts of the training tasks, e.g. 2,4,8")
    p.add_argument("--steps", type=POSITIVE, default=steps, help="imitation steps (one training task each)")
    p.add_argument("--calls", type=POSITIVE, default=calls, help="simulator calls of each target's local search")
    p.add_argument("--lr", type=float_in(0.0, 1.0), default=3e-4)
    p.add_argument("--eval-every", type=POSITIVE, default=eval_every)
    p.add_argument("--extra-seeds", type=comma_list(int_in(1, 10**6)), default=[],
                   help="further family seeds whose 32 graphs each join the training graphs, e.g. 1,2,3")
    p.add_argument("--graphs-root", default=str(ROOT / "runs" / "families"),
                   help="where the extra seeds' graphs are built (<root>/s<seed>/<family>/)")
    p.add_argument("--tag", default=None, help="name of the report (default: the family)")
    p.add_argument("--save", default=None, help="run directory for the policy (resumed when it exists)")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results"))


def load_start(args: argparse.Namespace, load: Callable[[Path], tuple[Any, Any]], prog: str) -> tuple[Any, Any] | None:
    """(config, params) of args.start read by `load`, or None after a one-line error on stderr when it is not a
    policy or places on fewer devices than --devices asks."""
    try:
        config, params = load(resolve_checkpoint(args.start))
        if max(args.devices) > config.max_devices:
            raise InputError(f"--devices {max(args.devices)}: the policy places on at most {config.max_devices}",
                             args.start)
    except InputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return None
    return config, params


def training_graphs(args: argparse.Namespace) -> list[Graph]:
    """The family's train split and every graph of the --extra-seeds (built under --graphs-root if missing)."""
    return load_family(args.family, "train") + seed_graphs(args.family, args.extra_seeds, args.graphs_root)


def local_search(graph: Graph, cluster: Cluster, calls: int) -> tuple[np.ndarray, float]:
    """(placement int32[N], runtime us) of local search with `calls` simulator calls, seed 0 (compare's run)."""
    placement = run_method("local-search", graph, cluster, 0, budget=calls).placement
    return placement, simulate(graph, placement, cluster).runtime


def reference_split(args: argparse.Namespace) -> tuple[list[Graph], Cluster, dict[str, float]]:
    """(the family's test graphs, 4 devices, {graph name: runtime us of local search at 1,000 calls}): what the
    reports' test column is measured against."""
    graphs, cluster = load_family(args.family, "test"), cluster_preset("placeto-k80", 4)
    return graphs, cluster, {g.name: local_search(g, cluster, 1000)[1] for g in graphs}


def resume(args: argparse.Namespace, params: Any, opt_state: Any) -> tuple[Any, Any, int, list[tuple]]:
    """(params, opt_state, step, rows) from the --save run directory if it holds a checkpoint, else the given
    params and optimizer state at step 0 with no rows."""
    if args.save is None or not (Path(args.save) / CHECKPOINT).is_file():
        return params, opt_state, 0, []
    params, opt_state, first, rows = load_table_run(args.save, params, opt_state, ROW)
    print(f"resumed {args.save} at step {first}", flush=True)
    return params, opt_state, first, rows


def write_report(args: argparse.Namespace, script: str, argv: list[str] | None, title: str, method: str,
                 n_tasks: int, rows: list[tuple], per: str) -> Path:
    """experiments/results/<script>_<tag or family>.md: the command, `method` (what a step does), and a row per
    evaluation (ROW order); `per`: the unit of the cross-entropy ("node", "visit")."""
    argv = sys.argv[1:] if argv is None else argv
    extra = (f" plus the {32 * len(args.extra_seeds)} graphs of family seeds {','.join(map(str, args.extra_seeds))}"
             if args.extra_seeds else "")
    lines = [f"# {title}", "",
             f"`PYTHONPATH=. python experiments/{script}.py {' '.join(argv)}`: from `{args.start}`, {n_tasks} training "
             f"tasks ({args.family} train split{extra} at {','.join(map(str, args.devices))} devices); {method} "
             "Test: the greedy placement of the test split at 4 devices over local search with 1,000 calls (mean over "
             "the graphs; 1.05 is issue 10's bar).", "",
             f"| step | seconds | cross-entropy (nats per {per}) | train greedy / target | test greedy / local-search |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {int(s)} | {sec:.0f} | {_cell(ce)} | {_cell(tr)} | {te:.3f} |" for s, sec, ce, tr, te in rows]
    out = Path(args.out) / f"{script}_{args.tag or args.family}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, ("\n".join(lines) + "\n").encode())
    print(f"wrote {out}")
    return out


def _cell(x: float) -> str:
    return "—" if np.isnan(x) else f"{x:.3f}"
