"""`placeto compare`: its arguments and the command.

Every method on every graph and device count, simulated and tabulated; the harness is placeto.harness.compare.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from placeto.baselines import DEFAULT_BUDGET, METHODS, default_seconds
from placeto.baselines.single import SINGLE_MEANS
from placeto.baselines.common import DEFAULT_SECONDS, MAX_DEFAULT_SECONDS, SECONDS_NODES
from placeto.cli.arguments import (DEFAULT_DEVICES, DEVICES, add_memory_argument, add_microbatches_argument,
                                   add_preset_argument, load_placing, memory_bytes, print_op_graph_note,
                                   resolve_devices)
from simulator.arguments import comma_list
from placeto.harness.against_single import compare_warning
from placeto.harness.compare import LEARNED, PER_GRAPH, compare, markdown_table, plot_compare, write_csv
from placeto.methods import registry
from placeto.methods.base import LARGE_GRAPH_NODES
from placeto.policies import DEFAULT_POLICY
from placeto.cli.arguments import add_worker_arguments, spec_from_args
from simulator.model.cluster import Cluster, PresetSpec, gb_text, load_cluster, with_memory
from simulator.model.errors import InputError
from simulator.model.io import atomic_write_bytes, check_output_path
from simulator.model.microbatch import microbatched
from simulator.model.placement_file import describe_cluster
from simulator.workloads.families import SPLITS, load_family


class DefaultCounts(list):
    """compare's --devices default, marked as not given.

    [DEFAULT_DEVICES], in a list that says it was not given: with --cluster, only a --devices the user typed is
    checked against the file's count.
    """


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `placeto compare`."""
    p.add_argument("graphs", nargs="*", help="graph files (or use --family)")
    p.add_argument("--family", help="compare on datasets/<FAMILY> (its manifest's graphs)")
    p.add_argument("--split", default="test", choices=[*SPLITS, "all"], help="family split")
    p.add_argument("--devices", type=comma_list(DEVICES), default=DefaultCounts([DEFAULT_DEVICES]),
                   help="device counts of the preset, each compared apart, e.g. 2,4,8; with --cluster, the file's "
                        "count (another count is an error)")
    where = p.add_mutually_exclusive_group()
    add_preset_argument(where, with_cluster=False)
    where.add_argument("--cluster", help="cluster JSON file, e.g. from `placeto calibrate` (instead of --preset; its "
                                         "device count is the comparison's)")
    add_memory_argument(p)
    p.add_argument("--methods", default="all",
                   help="comma list of methods and sets. all: every baseline and the learned methods "
                        f"({', '.join(LEARNED)}) with their shipped policies ({DEFAULT_POLICY} for placeto, "
                        f"{registry.get('gdp').default_checkpoint} for gdp, {registry.get('gdp').large_checkpoint} "
                        f"above {LARGE_GRAPH_NODES} nodes) or --checkpoint; baselines: "
                        f"{', '.join(METHODS)}, where single is {SINGLE_MEANS}; learned: the learned methods only; {' and '.join(PER_GRAPH)} (trained "
                        "from scratch on each graph within the budget) only when named")
    p.add_argument("--checkpoint", help="trained policy for the learned methods of its kind (Placeto or gdp): a "
                                        "shipped name or a run directory (default: each kind's shipped policy)")
    p.add_argument("--budget", type=int, default=None,
                   help=f"simulator calls of every searching or sampling method per graph (default: {DEFAULT_BUDGET}"
                        f", or unlimited with --seconds; without either, also at most {DEFAULT_SECONDS:g} s, 1 s more "
                        f"per {SECONDS_NODES:,} nodes, up to {MAX_DEFAULT_SECONDS:g} s)")
    p.add_argument("--seconds", type=float, default=None,
                   help="wall-clock budget in seconds per graph of every searching or sampling method, its "
                        "inference and fine-tuning included, jit compilation excluded and reported apart (default: "
                        "none, the --budget alone)")
    p.add_argument("--finetune-episodes", type=int, default=0,
                   help="fine-tune the policy on each graph for this many episodes first (inside the budget)")
    p.add_argument("--seed", type=int, default=0, help="seed of every method's sampling and search")
    add_microbatches_argument(p)
    p.add_argument("--out", help="directory for compare.csv, compare.md (and plots with --plot)")
    p.add_argument("--save-placements", metavar="DIR",
                   help="write every placement made here, one placement file per graph x devices x method: "
                        "<graph>.<D>dev.<method>.json (for `placeto simulate` / `eval --hardware`)")
    p.add_argument("--plot", action="store_true", help="draw a bar chart per graph into --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_worker_arguments(p, "graphs (one Ray task per graph)")


def cluster_words(cluster: Cluster | PresetSpec, devices: list[int]) -> str:
    """The cluster compare simulates on, as its output names it.

    A Cluster: simulator.model.placement_file.describe_cluster; a preset at each of `devices` counts: e.g.
    "placeto-k80 (preset) at 2, 4 devices".
    """
    if isinstance(cluster, Cluster):
        return describe_cluster(cluster)
    memory = f", {gb_text(cluster.memory_bytes)} per device (--memory)" if cluster.memory_bytes is not None else ""
    counts = ", ".join(str(d) for d in dict.fromkeys(devices))
    return f"{cluster.name} (preset) at {counts} device{'s' if counts != '1' else ''}{memory}"


def run_compare(args: argparse.Namespace) -> int:
    """`placeto compare`: run, print the markdown table, write files.

    Raises:
      InputError: bad arguments.
    """
    if bool(args.graphs) == bool(args.family):
        raise InputError("give graph files or --family, not both" if args.graphs else
                         "give graph files or --family FAMILY")
    if args.plot and not args.out:
        raise InputError("--plot needs --out DIR")
    if args.budget is not None and args.budget < 1:
        raise InputError(f"--budget must be >= 1, got {args.budget}")
    if args.seconds is not None and not 0 < args.seconds <= 86400:
        raise InputError(f"--seconds must be in (0, 86400], got {args.seconds}")
    if args.finetune_episodes < 0:
        raise InputError(f"--finetune-episodes must be >= 0, got {args.finetune_episodes}")
    given = args.budget is not None or args.seconds is not None  # else the default: calls, and seconds by graph size
    budget = args.budget if given else DEFAULT_BUDGET
    seconds = args.seconds if given else default_seconds
    workers = spec_from_args(args)
    if args.save_placements is not None:
        check_output_path(args.save_placements, directory=True)
    cluster, devices = args.preset, args.devices
    if getattr(args, "cluster", None):  # its count, or --devices checked against it (as train's)
        cluster = load_cluster(args.cluster)
        if not isinstance(args.devices, DefaultCounts):
            for count in dict.fromkeys(args.devices):
                resolve_devices(count, [(f"cluster {args.cluster}", cluster.n_devices)])
        devices = [cluster.n_devices]
    cluster = with_memory(cluster, memory_bytes(args)) if isinstance(cluster, Cluster) else \
        PresetSpec(cluster, memory_bytes(args))
    loaded = [load_placing(f, args.microbatches) for f in args.graphs]
    graphs = ([g for g, _ in loaded] if args.graphs else
              [microbatched(g, args.microbatches) for g in load_family(args.family, None if args.split == "all"
                                                                         else args.split)])
    own = [(f, c) for f, (_, c) in zip(args.graphs, loaded) if c is not None]
    if own:  # an msr-fiddle input brings its accelerators: alone, and without --cluster
        if len(loaded) > 1 or getattr(args, "cluster", None):
            raise InputError(f"{own[0][0]}: an msr-fiddle input brings its own accelerators: compare it alone, "
                             f"without --cluster")
        cluster, devices = with_memory(own[0][1], memory_bytes(args)), [own[0][1].n_devices]
    kinds = cluster.kinds if isinstance(cluster, Cluster) else cluster.at(1).kinds
    for f, graph in zip(args.graphs, graphs):
        print_op_graph_note(graph, f, kinds)
    if isinstance(cluster, Cluster):
        for graph in graphs:  # one line naming the graph and the kind, before any method runs
            graph.cost_matrix(cluster.kinds)
    rows = compare(graphs, devices, args.methods, cluster, args.seed, budget, seconds,
                   args.checkpoint, args.finetune_episodes, progress=not args.quiet,
                   save_placements=args.save_placements, workers=workers)
    table = markdown_table(rows)
    print(f"cluster {cluster_words(cluster, devices)}")
    print(table, end="")
    warning = compare_warning(rows, graphs, cluster)
    if warning:
        print(warning, file=sys.stderr)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(rows, out / "compare.csv")
        atomic_write_bytes(out / "compare.md", table.encode())
        written = [out / "compare.csv", out / "compare.md"] + (plot_compare(rows, out) if args.plot else [])
        print(f"wrote {', '.join(str(p) for p in written)}")
    if args.save_placements is not None:
        n = sum(r.applies for r in rows)
        print(f"wrote {n} placement files to {args.save_placements} (<graph>.<D>dev.<method>.json)")
    return 0
