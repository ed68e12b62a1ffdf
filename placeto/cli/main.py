"""The `placeto` command line: parse, call the libraries, print.

No logic a test would want lives here. Bad input (a malformed graph, placement or cluster file, or argument) prints
one line naming the file and the offending node or field, and exits with status 2.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import traceback
from typing import Callable, Sequence

from simulator.measure import cache
from simulator.arguments import COUNT, POSITIVE, OneLineParser, comma_list
from placeto.cli.arguments import (DEVICE_SPEC, DEVICES, MINUTES, PERCENT, SEED, WORKERS, DEFAULT_DEVICES,
                                   add_cluster_arguments, add_microbatches_argument, add_preset_argument,
                                   placement_cluster, print_op_graph_note)
from placeto.cli.placers import cmd_place, cmd_policies, cmd_train
from placeto.rollouts.distributed import WorkerError
from simulator.hardware.rig.pool import RigError
from simulator.interrupts import Interrupted, acknowledge, as_interrupted, stop_on_signals
from placeto.cli.arguments import add_worker_arguments
from simulator.model.errors import TRACEBACK_ENV, InputError
from simulator.model.io import check_distinct_paths, check_output_path

Command = Callable[[argparse.Namespace], int]

HARDWARE_CANDIDATES = ("etf", "m-sct", "local-search")  # `place --hardware`'s default --candidates

EPISODES_HELP = ("training budget in sampled complete placements (default: the --config preset's). placeto counts "
                 "episodes: each visits every node (config passes times, one simulator call per visit) and ends in "
                 "one complete placement; rounded up to a multiple of episodes_per_update. gdp, rnn, hierarchical "
                 "count placements sampled and simulated, rounded up to whole updates of samples_per_update. A "
                 "resumed run continues up to it")

DESCRIPTION = """placeto: place the operations of a neural network's training step on devices (GPUs, CPUs) so
that the step finishes soonest, with learned policies (Placeto, gdp; shipped, or trained here) or classical
placers, judged by a fast simulator and, for this machine, measured on its devices."""

EPILOG = """workflow, on a shipped test graph (see `placeto <command> --help` for every option and default):
  placeto graph info datasets/nmt/nmt_004.json.gz                 # size, compute, critical path, lower bounds
  placeto place datasets/nmt/nmt_004.json.gz --out p.json         # zero-shot, with the shipped general policy
  placeto compare datasets/nmt/nmt_004.json.gz --seconds 1        # every method, the same wall-clock budget
  placeto simulate datasets/nmt/nmt_004.json.gz --placement p.json --gantt p.png   # one step, as a Gantt chart
  placeto place datasets/nmt/nmt_004.json.gz --hardware --out here.json   # placed for, and run on, this machine
  placeto eval datasets/nmt/nmt_004.json.gz --placement here.json --hardware   # measured against simulated

Device counts: the placement or cluster file's when one is given (a --devices that differs is an error), else
--devices, else %d."""
EPILOG %= DEFAULT_DEVICES
EPILOG += "\n\n" + cache.HELP


# ---- graph / simulate -------------------------------------------------------------------------------------
def cmd_graph_info(args: argparse.Namespace) -> int:
    from simulator.model.io import load_graph
    from simulator.model.stats import graph_stats

    graph = load_graph(args.file)
    s = graph_stats(graph, args.kind, device_counts=(1, 2, 4, 8))
    print(f"graph            {s.name}")
    print(f"nodes / edges    {s.nodes} / {s.edges}")
    print(f"cost kinds       {', '.join(graph.kinds)} (shown: {s.kind})")
    print(f"total compute    {s.total_compute_us / 1e3:.3f} ms")
    print(f"critical path    {s.critical_path_us / 1e3:.3f} ms")
    print(f"output bytes     {s.total_out_bytes / 1e6:.2f} MB, persistent {s.persistent_bytes / 1e6:.2f} MB")
    for d, lb in s.lower_bound_us.items():
        print(f"lower bound {d:>2}d  {lb / 1e3:.3f} ms")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator import simulate
    from simulator.model.io import check_placement, load_graph
    from simulator.model.placement_file import describe_cluster, graph_notes, load_placement, preset_of
    from simulator.model.microbatch import microbatched

    if args.gantt:
        check_distinct_paths([("--gantt", args.gantt)], [("the graph file", args.file),
                                                         ("the placement file", args.placement),
                                                         ("the cluster file", getattr(args, "cluster", None))])
        check_output_path(args.gantt)
    graph = microbatched(load_graph(args.file), args.microbatches)
    placement = load_placement(args.placement, graph)  # one made for another graph: refused
    chosen = placement_cluster(args, [(args.placement, placement)])  # the recorded cluster, or as told
    cluster = chosen.cluster
    print_op_graph_note(graph, args.file, cluster.kinds)
    check_placement(placement.assignment, graph, cluster.n_devices)
    result = simulate(graph, placement.assignment, cluster)
    notes = graph_notes(placement, graph, args.placement) + list(chosen.notes)
    if args.gantt:
        from simulator.plots import gantt

        gantt(result, cluster, args.gantt, title=f"{graph.name} on {cluster.n_devices}x {cluster.name}")
    for note in notes:
        print(note, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        record = {**result.to_dict(graph, cluster), "cluster": {"name": cluster.name, "preset": preset_of(cluster),
                                                                 "chosen": chosen.how}}
        print(json.dumps(record, allow_nan=False))  # strict JSON: no bare NaN
        return 0
    print(f"cluster          {describe_cluster(cluster)} ({chosen.how})")
    print(f"runtime          {result.runtime / 1e3:.3f} ms  ({result.ratio:.3f}x the lower bound "
          f"{result.lower_bound / 1e3:.3f} ms)")
    print(f"{'device':<10} {'busy ms':>10} {'peak MB':>10} {'capacity MB':>12}  oom")
    for k, dev in enumerate(cluster.devices):
        print(f"{dev.name:<10} {result.busy[k] / 1e3:>10.3f} {result.peak_memory[k] / 1e6:>10.2f} "
              f"{result.capacity[k] / 1e6:>12.0f}  {'OOM' if result.oom[k] else '-'}")
    if args.gantt:
        print(f"gantt chart      {args.gantt}")
    return 0


# ---- datasets / tracing / profiling ------------------------------------------------------------------------
def cmd_datasets_build(args: argparse.Namespace) -> int:
    import time

    from simulator.workloads import memory
    from simulator.workloads.families import ALL_FAMILIES, DATASETS, build, load_manifest, write_readme

    check_output_path(args.out or DATASETS, directory=True)
    families = [*ALL_FAMILIES, "benchmarks", memory.FAMILY] if args.family == "all" else [args.family]
    for family in families:
        t0 = time.perf_counter()
        only = args.only.split(",") if args.only else None
        if family == memory.FAMILY:  # full-size models traced by shape: no seed, no progress bar
            out = memory.build(args.out or DATASETS, workers=args.workers, only=only)
            if not only:
                memory.write_readme(args.out or DATASETS)
        else:
            out = build(family, args.out or DATASETS, seed=args.seed, workers=args.workers, only=only,
                        progress=not args.quiet)
        if args.only:
            print(f"{family}: rebuilt {args.only} in {out} ({time.perf_counter() - t0:.0f} s)")
            continue
        graphs = load_manifest(family, args.out or DATASETS)["graphs"]
        ops = [g["ops"] for g in graphs]
        groups = [g["groups"] for g in graphs]
        print(f"{family}: {len(graphs)} graphs in {out}, ops {min(ops)}-{max(ops)}, groups {min(groups)}-"
              f"{max(groups)} ({time.perf_counter() - t0:.0f} s)")
    write_readme(args.out or DATASETS)
    return 0


def cmd_import_jax(args: argparse.Namespace) -> int:
    from simulator.tracing.export import describe, export_path, export_program
    from simulator.tracing.importer import describe_state, import_step, name_from_path
    from simulator.model.io import check_readable, save_graph
    from simulator.model.result import critical_path

    from simulator.workloads.families import COST_KINDS

    if args.groups is not None and not args.grouped_out:
        raise InputError("--groups is the target of --grouped-out: give --grouped-out FILE")
    written = [p for p in (args.out, args.grouped_out) if p]
    exports = [(f"the export of {flag}", str(export_path(p))) for flag, p in (("--out", args.out),
                                                                            ("--grouped-out", args.grouped_out)) if p]
    check_distinct_paths([("--out", args.out), ("--grouped-out", args.grouped_out)] + (exports if args.export else []))
    for path in written + ([p for _, p in exports] if args.export else []):
        check_output_path(path)
    name = args.name or name_from_path(args.out)
    imported = import_step(args.function, args.args_spec, COST_KINDS, name, args.params, args.opt_state,
                           grouped=bool(args.grouped_out), groups=args.groups,
                           max_cp_growth=args.max_cp_growth / 100)
    graph, grouping = imported.graph, imported.grouping
    if not any(e is not None for e in imported.traced.equations):  # nothing written over an existing file
        raise InputError(f"{args.function} traced to no operations ({graph.n_nodes} inputs and parameters, "
                         f"nothing computed): nothing to place; nothing written")
    print(f"traced {args.function} in {imported.seconds:.1f} s: {graph.n_nodes} ops, {graph.n_edges} edges")
    print(describe_state(imported.traced))
    outputs = [(args.out, graph, None)] + ([(args.grouped_out, grouping.graph, grouping.op_to_group)]
                                           if grouping is not None else [])
    for path, g, _ in outputs:  # what is written must read back (simulator.model.io's checks), or nothing is written
        check_readable(g, path)
    staged = []  # exported programs, written beside their final names and moved there once all are made
    try:
        for path, g, op_to_group in outputs if args.export else []:
            final = export_path(path)
            temporary = final.with_name(f".{final.name}.{os.getpid()}.tmp")
            staged.append((temporary, final, export_program(imported.traced, g, temporary, op_to_group)))
        for path, g, _ in outputs:
            save_graph(g, path)
        for temporary, final, _ in staged:
            os.replace(temporary, final)
    finally:
        for temporary, _, _ in staged:
            temporary.unlink(missing_ok=True)
    print(f"{args.out}: {graph.n_nodes} ops, costs for {', '.join(COST_KINDS)}")
    if grouping is not None:
        kind = COST_KINDS[0]
        cp = [critical_path(g, g.cost_for(kind)) / 1e3 for g in (graph, grouping.graph)]
        print(f"{args.grouped_out}: {grouping.report.describe()} [{kind}: critical path {cp[0]:.2f} -> "
              f"{cp[1]:.2f} ms]")
    for _, final, manifest in staged:
        print(describe(manifest, final))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    import time

    from simulator.model.io import check_readable, load_graph, save_graph

    if args.out and len(args.files) != 1:
        raise InputError(f"--out takes one input file, got {len(args.files)}")
    if args.exported and len(args.files) != 1:
        raise InputError(f"--exported belongs to one graph file, got {len(args.files)}")
    for out in [args.out] if args.out else args.files:
        check_output_path(out)
    if args.program:
        print(f"importing {args.program} (named by --program) to re-trace the graph's program", flush=True)
    devices = None
    if getattr(args, "devices", None) is not None:
        from simulator.hardware.devices import ensure_host_devices, local_devices

        ensure_host_devices(args.devices)  # before anything imports jax
        devices = local_devices(args.devices)
    from simulator.measure.graph_profile import profile

    t0 = time.perf_counter()
    for file in args.files:
        before = load_graph(file)
        graph = profile(before, kind=args.kind, repeats=args.repeats, warmup=args.warmup, program=args.program,
                        args_spec=args.args_spec, exported=args.exported, devices=devices, method=args.method,
                        progress=not args.quiet)
        out = args.out if args.out and len(args.files) == 1 else file
        check_readable(graph, out)  # a measurement that went wrong never replaces the file
        save_graph(graph, out)
        for kind, how in graph.meta["profile"].items():
            if how is before.meta.get("profile", {}).get(kind):
                continue  # measured earlier, kept
            print(f"{out}: {kind} costs ({how['device']}, method {how['method']}, {how['source']}) for "
                  f"{graph.n_nodes} nodes, total {graph.costs[kind].sum() / 1e3:.3f} ms "
                  f"({time.perf_counter() - t0:.0f} s so far)")
    return 0


# ---- plots / compare (train, place, policies: placeto.cli.placers) -------------------------------------------
def cmd_plot(args: argparse.Namespace) -> int:
    from placeto.harness.plots_train import plot_run

    for path in plot_run(args.run):
        print(path)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from placeto.cli.compare import run_compare
    from simulator.model.limits import MAX_SEED

    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise InputError(f"--seed: expected an integer in [0, {MAX_SEED}]")
    if args.budget is not None and not 1 <= args.budget <= 10**9:
        raise InputError(f"--budget: expected an integer in [1, {10**9}]")
    if args.out:
        check_output_path(args.out, directory=True)
    if getattr(args, "checkpoint", None) is not None:  # before any row runs: as `place` checks it
        from placeto.methods import registry
        from placeto.policies import resolve_checkpoint

        registry.run_method(resolve_checkpoint(args.checkpoint))
    return run_compare(args)


def add_verbose_argument(p: argparse.ArgumentParser) -> None:
    """Add --verbose to a command that runs the user's code.

    Its code: a module, a step function, an args factory.
    """
    p.add_argument("--verbose", action="store_true",
                   help=f"on an error raised by your code, also print its traceback (or set {TRACEBACK_ENV}=1)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="placeto", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True)

    graph = sub.add_parser("graph", help="inspect graph files").add_subparsers(dest="graph_command", required=True)
    info = graph.add_parser("info", help="nodes, edges, total compute, critical path, lower bounds")
    info.add_argument("file", help="graph file (.json or .json.gz)")
    info.add_argument("--kind", default="k80", help="device kind whose costs to summarise")
    info.set_defaults(func=cmd_graph_info)

    sim = sub.add_parser("simulate", help="simulate one training step of a placed graph")
    sim.add_argument("file", help="graph file (.json or .json.gz)")
    sim.add_argument("--placement", required=True,
                     help="placement JSON file (from `place`, or `compare --save-placements`); it records the graph "
                          "and the cluster it was made for (docs/formats.md): one made for another graph is refused")
    add_cluster_arguments(sim, recorded=True)
    add_microbatches_argument(sim)
    sim.add_argument("--json", action="store_true", help="print the full result as JSON")
    sim.add_argument("--gantt", help="write a Gantt chart of the schedule to this PNG")
    sim.set_defaults(func=cmd_simulate)

    from placeto.cli.compare import add_compare_arguments
    from placeto.cli.eval import add_program_arguments
    from simulator.workloads.families import ALL_FAMILIES

    datasets = sub.add_parser("datasets", help="graph families and benchmark models").add_subparsers(
        dest="datasets_command", required=True)
    build = datasets.add_parser("build", help="trace, cost and group the families and benchmarks")
    build.add_argument("--family", default="all", choices=[*ALL_FAMILIES, "benchmarks", "memory", "all"],
                       help="the family to build (benchmarks: the benchmark models; memory: the seeds' models at full "
                            "size, datasets/memory/README.md; all: every family and them)")
    build.add_argument("--out", default=None, help="root folder (default: the repository's datasets/)")
    build.add_argument("--seed", type=SEED, default=0,
                       help="seed of the families' hyperparameters, architectures and train/test split")
    build.add_argument("--workers", type=WORKERS, default=2, help="tracing processes")
    build.add_argument("--only", help="comma list of graph names to rebuild (manifest left as is)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(func=cmd_datasets_build)

    imp = sub.add_parser("import-jax", help="trace a JAX training step into a graph file")
    imp.add_argument("function", help="module:function, e.g. mypkg.train:step")
    imp.add_argument("--args-spec", required=True,
                     help="JSON list of example-argument pytrees with {shape, dtype} leaves, @file.json, or "
                          "module:factory returning the example arguments")
    imp.add_argument("--out", required=True, help="op graph file (.json or .json.gz)")
    imp.add_argument("--name", help="graph name, as `graph info` and the tables print it (default: the --out file's "
                                    "name without .json/.json.gz, e.g. my_step for --out my_step.json.gz)")
    imp.add_argument("--grouped-out", help="also write the grouped graph here")
    imp.add_argument("--groups", type=POSITIVE, default=None,
                     help="at most this many groups in --grouped-out, as far as --max-cp-growth allows (the report "
                          "says how many it made and why)")
    imp.add_argument("--max-cp-growth", type=PERCENT, default=5.0, metavar="PERCENT",
                     help="grouping lengthens the critical path (K80 costs, free communication) by at most this "
                          "many percent")
    imp.add_argument("--params", metavar="PATH",
                     help="key path of the parameters in the arguments, as jax.tree_util.keystr prints it, e.g. "
                          "'[0].params' (default: found from the structure: flax TrainState, optax, nnx, equinox, "
                          "keras variable lists; else argument 0)")
    imp.add_argument("--opt-state", metavar="PATH",
                     help="key path of the optimizer state, e.g. '[0].opt_state' (default: found from the "
                          "structure; else argument 1)")
    imp.add_argument("--export", action="store_true",
                     help="also write each graph's program (jax.export, per op / per group) beside it as "
                          "<graph>.export.zip, so `eval --hardware` and `profile` need no import of your module")
    add_verbose_argument(imp)
    imp.set_defaults(func=cmd_import_jax)

    prof = sub.add_parser("profile", help="measure every node's cost on local JAX devices (inside the compiled step)")
    prof.add_argument("files", nargs="+", help="graph files built by `datasets build` or `import-jax`")
    prof.add_argument("--out", help="output file (one input only; default: update the input in place)")
    prof.add_argument("--kind", default=None,
                      help="device kind to record the costs under (default: the device's, e.g. local-cpu, "
                           "local-h200; the kind `placeto calibrate` gives the device)")
    prof.add_argument("--method", default="step", choices=("step", "units", "ops"),
                      help="step: each node's kernels timed inside one compiled step (jax.profiler); units: each "
                           "node alone, net of the dispatch floor; ops: every op alone, summed per group")
    prof.add_argument("--devices", type=DEVICE_SPEC, default=None,
                      help="local devices to profile on: a count, or a platform:index list such as gpu:0,cpu:0 "
                           "(default: the default backend's first device)")
    prof.add_argument("--repeats", type=POSITIVE, default=5, help="timed steps (or calls) per measurement")
    prof.add_argument("--warmup", type=COUNT, default=2, help="untimed steps first (the first compiles)")
    prof.add_argument("--quiet", action="store_true", help="no progress bar")
    add_program_arguments(prof)
    add_verbose_argument(prof)
    prof.set_defaults(func=cmd_profile)

    tr = sub.add_parser("train", help="train a placement policy (placeto, gdp, rnn or hierarchical) on a family or "
                                      "on graphs (resumes after a kill)")
    what = tr.add_mutually_exclusive_group(required=True)
    what.add_argument("--family", help="train on the train split of datasets/<FAMILY> (a comma list, or 'all': "
                                       f"{', '.join(ALL_FAMILIES)})")
    what.add_argument("--graph", nargs="+", help="graph files to train on (a directory: its *.json and *.json.gz "
                                                 "files, by name)")
    tr.add_argument("--devices", type=comma_list(DEVICES), default=None,
                    help="device counts of the preset, e.g. 4, or 2,4,8 to train one policy on all three (default: "
                         "the cluster file's count when given, else 4; a different count is an error)")
    add_preset_argument(tr)
    tr.add_argument("--cluster", help="cluster JSON file, e.g. from `placeto calibrate` (instead of --preset; its "
                                      "device count is the run's)")
    tr.add_argument("--method", choices=["placeto", "gdp", "rnn", "hierarchical"], default="placeto",
                    help="placeto (a GNN that improves a placement node by node), gdp (single-shot GNN + segment "
                         "attention, PPO), rnn (the 2017 "
                         "seq2seq placer) or hierarchical (the 2018 grouper + placer); rnn and hierarchical train "
                         "per graph: one --graph, one --devices count")
    tr.add_argument("--init-from", help="start from this trained policy (a shipped name or a run directory)")
    tr.add_argument("--out", required=True, help="run directory (checkpoints, metrics, best placements)")
    tr.add_argument("--config", default="default", choices=["default", "tiny", "large"],
                    help="configuration preset of the method (tiny: a small network and budget, for tests; large: "
                         "gdp's large-graph policy, decisions in list-scheduling order conditioned on the devices "
                         "already chosen)")
    tr.add_argument("--episodes", type=COUNT, help=EPISODES_HELP)
    tr.add_argument("--minutes", type=MINUTES, help="stop (with a checkpoint) after this many minutes (default: when "
                                                    "--episodes are done)")
    tr.add_argument("--seed", type=SEED, help="seed of the parameters and the sampling (default: the --config "
                                              "preset's)")
    tr.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in --out")
    add_worker_arguments(tr)
    tr.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                    help="override the method's config fields (PlacetoConfig; GdpConfig, RnnConfig, HierarchicalConfig "
                         "with --method gdp, rnn, hierarchical), e.g. "
                         "--set gamma=0.9 init_placement=random")
    tr.set_defaults(func=cmd_train)

    pl = sub.add_parser("place", help="place a graph with a trained policy (zero-shot, fine-tuned, or guiding search)")
    pl.add_argument("graph", help="graph file (.json or .json.gz)")
    pl.add_argument("--checkpoint", default=None,
                    help="a shipped policy's name (see `placeto policies`) or a run directory of `placeto train` "
                         "(default: the shipped general policy)")
    add_cluster_arguments(pl, device_list=True)
    from placeto.baselines import DEFAULT_BUDGET, METHODS as BASELINES
    from placeto.baselines.single import SINGLE_MEANS

    pl.add_argument("--method", choices=["placeto", "placeto-search", "gdp", "gdp-search", "rnn", "hierarchical",
                                         *BASELINES],
                    default=None,
                    help="placeto: greedy + sampled episodes; placeto-search: policy-guided search; gdp: one "
                         "forward pass + sampled placements; gdp-search: the "
                         "search guided by a gdp policy (default policy: gdp-general); rnn / hierarchical: from "
                         "their run directory (--checkpoint), or trained from scratch on the graph within --budget "
                         "/ --seconds; or any baseline of "
                         f"`placeto compare` (random, local-search and sa spend --budget, default {DEFAULT_BUDGET}, "
                         "or --seconds) (default: the --checkpoint run's method, else placeto, or placeto-search "
                         "when a budget is given). single: "
                         f"{SINGLE_MEANS}")
    pl.add_argument("--seconds", type=float, default=None,
                    help="wall-clock budget of the method in seconds, compilation excluded (default: none; with "
                         "--hardware, 2 per candidate)")
    pl.add_argument("--budget", type=COUNT, default=None,
                    help="simulator-call budget of the method (default: none: placeto places greedily, a "
                         f"searching baseline spends {DEFAULT_BUDGET}, within 10 s or more on a graph of over "
                         "10,000 nodes)")
    pl.add_argument("--finetune-episodes", type=COUNT, default=0,
                    help="train a copy of the policy on this graph for this many episodes first (inside the budget)")
    pl.add_argument("--samples", type=COUNT, default=0,
                    help="sampled episodes besides the greedy one, without a budget (the best placement is kept)")
    pl.add_argument("--seed", type=SEED, default=0, help="seed of the method's sampling and search")
    pl.add_argument("--out", required=True, help="placement file to write")
    add_microbatches_argument(pl)
    hw = pl.add_argument_group("placing for this machine (--hardware)")
    hw.add_argument("--hardware", action="store_true",
                    help="place for the local devices: profile the graph on them (cached in placeto's cache, the "
                         "graph file untouched), "
                         "calibrate them (cached), place with --candidates (and --method), run the best --top "
                         "placements and the single device for real, keep the fastest measured and print its speed "
                         "against the plain jax.jit of the step (a fresh process, default threading). --devices: a "
                         "count or a list such as gpu:0,cpu:0 (default: the --cluster file's count, else every GPU, "
                         "else 2 host CPU devices)")
    hw.add_argument("--candidates", default=",".join(HARDWARE_CANDIDATES),
                    help="comma list of methods whose placements compete (each gets --seconds, 2 when not given)")
    hw.add_argument("--top", type=POSITIVE, default=3, help="how many of the best simulated placements run for real")
    hw.add_argument("--repeats", type=POSITIVE, default=7, help="timed steps per placement run for real")
    hw.add_argument("--plot", help="write the measured against simulated step times of the placements run to this "
                                   "PNG")
    from placeto.cli.eval import RIG_HELP
    from simulator.hardware.options import RIGS

    hw.add_argument("--rig", choices=RIGS, default=None, help=RIG_HELP)
    hw.add_argument("--gantt", metavar="PNG",
                    help="with --rig processes: draw the kept placement's measured step (each device's stages, "
                         "recorded in its worker) under its simulated schedule to this PNG")
    hw.add_argument("--save-profile", action="store_true",
                    help="also write the graph's measured profile into the graph file (default: kept in placeto's "
                         "cache only, keyed by the graph, device, host and JAX version)")
    pl.set_defaults(func=cmd_place)

    pol = sub.add_parser("policies", help="list the trained policies shipped with the package")
    pol.set_defaults(func=cmd_policies)

    plot = sub.add_parser("plot", help="training curves of a run as PNG")
    plot.add_argument("run", help="run directory")
    plot.set_defaults(func=cmd_plot)

    from placeto.cli.calibrate import add_calibrate_arguments, run_calibrate
    from placeto.cli.eval import add_eval_arguments, add_program_arguments, run_eval

    ev = sub.add_parser("eval", help="simulate placements, and with --hardware run them on local JAX devices")
    add_eval_arguments(ev)
    add_verbose_argument(ev)
    ev.set_defaults(func=run_eval)
    cal = sub.add_parser("calibrate", help="fit a cluster file to local devices: per-op overheads (delta1, delta2), "
                                           "transfer bandwidth and latency, host dispatch and transfer times")
    add_calibrate_arguments(cal)
    cal.set_defaults(func=run_calibrate)

    cmp = sub.add_parser("compare", help="run every placement method (baselines and the shipped learned policies) "
                                         "on graphs and device counts, at one budget")
    add_compare_arguments(cmp)
    cmp.set_defaults(func=cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with stop_on_signals():  # SIGINT, SIGTERM: Interrupted, raised where the main thread is (simulator.interrupts)
        try:
            return _run(argv)
        except KeyboardInterrupt as e:  # while parsing, or raised again in a handler below
            return _interrupted(as_interrupted(e), None)


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    cache.enable_compile_cache()  # before any JAX compilation: PLACETO_COMPILE_CACHE (simulator.measure.cache)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
        return code
    except InputError as e:
        if getattr(args, "verbose", False) or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            traceback.print_exception(e)  # the user's traceback first (the cause), then the one line
        print(f"placeto: error: {e}", file=sys.stderr)
        return 2
    except WorkerError as e:  # Ray workers timed out or kept dying: the run stopped, its checkpoint kept
        print(f"placeto: error: {e}", file=sys.stderr)
        return 1
    except RigError as e:  # a process rig worker died or went silent: the rig stopped the others, freed its memory
        print(f"placeto: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `placeto graph info G | head`: the reader is gone; say nothing more
        _silence_stdout()
        return 141
    except OSError as e:  # the environment refused (a full disk, a vanished directory): one line, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"placeto: error: {where}{e.strerror or e}".replace("\n", " "), file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # SIGINT or SIGTERM: every `finally` on the way has run
        return _interrupted(as_interrupted(e), args)


def _interrupted(e: Interrupted, args: argparse.Namespace | None) -> int:
    """Print the one line of a stopped command and return its exit code (128 + the signal).

    The line names the command (and its subcommand, and --hardware) unless what stopped already said more.
    """
    acknowledge()  # caught for good: simulator.interrupts' watchdog for a lost interrupt stops
    what = e.what or (running(args) if args is not None else "starting")
    try:
        sys.stdout.flush()  # what was printed so far, seen
    except (OSError, ValueError):  # the reader is gone too (a pipeline stopped at once): exit quietly
        _silence_stdout()
    try:
        print(f"placeto: {Interrupted(e.signum, what).line()}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    return e.exit_code


def running(args: argparse.Namespace) -> str:
    """What a command line runs, in words: "place --hardware", "graph info", "train (rnn)"."""
    sub = getattr(args, f"{args.command}_command", None)  # `graph info`, `datasets build`
    words = [args.command] + ([sub] if sub else [])
    if getattr(args, "hardware", False):
        words.append("--hardware")
    if args.command == "train" and getattr(args, "method", None):
        words.append(f"({args.method})")
    return " ".join(words)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so a closed pipe's last flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def exit_process(code: int) -> None:
    """End the process with `code`; a command a signal stopped ends at once.

    Its `finally` blocks have run (checkpoints written, workers stopped, shared memory unlinked); what is left is the
    interpreter's teardown, which would unwind threads still inside XLA: a `calibrate` stopped mid-probe then
    aborted after its one line ("FATAL: exception not rethrown", exit -6). So the exit handlers run (multiprocessing's
    among them: its pools' semaphores), the output is flushed and the process exits without the rest of the
    teardown (`os._exit`). For the console script and `python -m`, never for `main()` in-process.
    """
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    exit_process(main())
