"""`placeto eval`: placements simulated against their measured step times.

The arguments and the command; the evaluation itself is placeto.harness.evaluate.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from simulator.arguments import COUNT, POSITIVE
from placeto.cli.arguments import (DEVICE_SPEC, RECORDED_HELP, ChosenCluster, add_memory_argument,
                                   add_microbatches_argument, devices_help, memory_bytes, placement_cluster,
                                   placement_devices, resolve_devices, spec_count)
from simulator.hardware.devices import ensure_host_devices, kind_of, local_devices
from simulator.hardware.options import MAX_STAGES, MODES, RIGS, default_rig
from simulator.measure.fit import WORKLOAD_FREE
from simulator.model.cluster import PRESETS, cluster_summary, load_cluster, with_memory
from simulator.model.errors import InputError
from simulator.model.io import check_distinct_paths, check_output_path, check_placement, load_graph
from simulator.model.placement_file import Placement, cluster_note, describe_cluster, graph_notes, load_placement
from simulator.model.microbatch import microbatched

RIG_HELP = ("where the devices run. processes: one worker process per host CPU device, pinned to a core, with its "
            "own single-core JAX client; stages shipped with jax.export, transfers through shared memory "
            "(simulator.hardware.rig.pool). threads: this process's JAX devices (what GPUs use), whose host CPU devices "
            "share one thread pool. Default: processes when every device is a host CPU device, because only there "
            "do they really run at once (two chains of 700x700 matmuls on 2 devices: 1.89-1.94x as fast together "
            "as one after the other, against 1.24-1.41x for host devices of one process, "
            "experiments/results/benchmarks/rig_concurrency.md), so a speedup measured there comes from running "
            "the devices at once; threads otherwise")


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph file")
    p.add_argument("--placement", nargs="+", required=True,
                   help="placement JSON file(s) for this graph; each records the graph and cluster it was made for "
                        "(docs/formats.md): one made for another graph is refused")
    p.add_argument("--hardware", action="store_true", help="also run each placement on local JAX devices")
    p.add_argument("--devices", type=DEVICE_SPEC, default=None,
                   help=devices_help("the placement and cluster files' count") + ". With --hardware also local "
                        "devices as a platform:index list, e.g. gpu:0,cpu:0")
    p.add_argument("--cluster", help="cluster JSON (default with --hardware: the cached calibration of these "
                                     "devices, as `place --hardware` uses, calibrated now when none is cached; "
                                     "without: --preset)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help=f"cluster preset when simulating only and no --cluster is given {RECORDED_HELP}")
    add_memory_argument(p)
    p.add_argument("--rig", choices=RIGS, default=None, help=RIG_HELP)
    add_microbatches_argument(p)
    p.add_argument("--mode", default="auto", choices=MODES,
                   help="hardware execution: the graph's real program, or synthetic kernels taking its costs")
    add_program_arguments(p)
    p.add_argument("--costs", default=None, choices=("graph", "step", "units"),
                   help="simulate with the graph's costs for the cluster's device kinds (from `placeto profile`), or "
                        "measured now: step, every node's kernels inside one compiled step (the default with "
                        "--hardware); units, every node alone as its own call, net of the dispatch floor "
                        "(default without --hardware: graph)")
    p.add_argument("--repeats", type=POSITIVE, default=5, help="timed steps per placement (median reported)")
    p.add_argument("--warmup", type=COUNT, default=2, help="untimed steps first (the first compiles)")
    p.add_argument("--max-stages", type=POSITIVE, default=MAX_STAGES,
                   help="with --hardware: refuse, before anything runs, a placement that runs as more jitted stages "
                        "(runs of consecutive units on one device) than this, naming its count and the estimated "
                        "compilation time (each stage compiles before the first step: a round-robin placement of a "
                        "490-group graph is about 300 stages, minutes here)")
    p.add_argument("--plot", metavar="PNG", help="with --hardware: draw each placement's measured against its "
                                                 "simulated step time to this PNG")
    p.add_argument("--json", metavar="FILE", help="write the rows (simulated and measured step times, us) and the "
                                                  "agreement (errors, Spearman) to this JSON file")
    p.add_argument("--refit", metavar="CLUSTER_JSON",
                   help=f"with --hardware and at least {len(WORKLOAD_FREE) + 1} placements: fit the cluster's per-op "
                        "and per-transfer costs to the measured steps (simulator.measure.fit.fit_on_placements), write that "
                        "cluster here and report each placement predicted by the fit on the others (leave-one-out)")


def add_program_arguments(p: argparse.ArgumentParser) -> None:
    """Add the flags naming the code that re-traces an imported graph.

    --program, --args-spec, --exported. The user names the code: a graph file's meta.source is never imported on the
    file's word.
    """
    p.add_argument("--program", metavar="MODULE:FUNCTION",
                   help="import and re-trace this function for a graph from `import-jax` (zoo graphs need none)")
    p.add_argument("--args-spec", help="its example arguments (as for import-jax; default: the graph's inline "
                                       "JSON meta.source.args_spec)")
    p.add_argument("--exported", metavar="FILE",
                   help="the graph's exported program from `import-jax --export` (default: <graph>.export.zip "
                        "beside the graph file, when there): runs without importing any module")


def _device_count(args: argparse.Namespace) -> int:
    files = [(f"cluster {args.cluster}", load_cluster(args.cluster).n_devices)] if args.cluster else []
    files += [(f"placement {path}", placement_devices(path)) for path in args.placement]
    return resolve_devices(spec_count(args.devices), files)  # a malformed placement file fails when loaded


def run_eval(args: argparse.Namespace) -> int:
    check_distinct_paths([("--plot", args.plot), ("--json", args.json), ("--refit", args.refit)],
                         [("the graph file", args.graph), ("the cluster file", args.cluster)] +
                         [("a placement file", path) for path in args.placement])
    for path in (args.plot, args.json, args.refit):
        if path:
            check_output_path(path)
    if args.plot and not args.hardware:
        raise InputError("--plot draws measured against simulated step times: it needs --hardware")
    if args.refit:
        if not args.hardware:
            raise InputError("--refit fits the cluster to measured step times: it needs --hardware")
        if len(args.placement) <= len(WORKLOAD_FREE):
            raise InputError(f"--refit fits {len(WORKLOAD_FREE)} parameters and predicts each placement from the "
                             f"others: give at least {len(WORKLOAD_FREE) + 1} placements, got {len(args.placement)}")
    n = _device_count(args)
    spec = args.devices if args.devices is not None else n  # local devices: a count or a platform:index list
    if not isinstance(spec, int) and not args.hardware:
        raise InputError(f"--devices {args.devices[0][0]}:{args.devices[0][1]},...: a device list names local "
                         f"devices, for --hardware; without it give a count")
    if args.hardware and args.microbatches > 1:
        raise InputError("--microbatches > 1 is simulated only: --hardware runs the plain step")
    if args.hardware:
        ensure_host_devices(spec)  # before anything imports jax
    if args.repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    # JAX's modules, imported after the host devices are set (and only by the commands that run them)
    from placeto.harness.evaluate import (evaluate, memory_lines, plot_agreement, refit, step_bar, summary_lines,
                                          write_rows_json)
    from placeto.harness.on_hardware import ensure_profile
    from placeto.progress import estimated
    from simulator.hardware.runner import can_run_program, hardware_runner, simulation_cluster
    from simulator.hardware.stages import check_stages
    from simulator.hardware.timing import about, interleaved_steps
    from simulator.measure.graph_profile import estimate_seconds
    from simulator.measure.agreement import ERROR_MEANING, agreement, format_spearman
    from simulator.measure.concurrency import measure_concurrency

    if args.costs in ("step", "units") and not args.hardware:
        raise InputError(f"--costs {args.costs} measures the units on local devices: it needs --hardware")
    costs = args.costs or ("step" if args.hardware else "graph")  # on hardware: the units inside the step
    if args.rig is not None and not args.hardware:
        raise InputError("--rig says where --hardware runs the placements: it needs --hardware")
    rig = args.rig or (default_rig(spec) if args.hardware else "threads")
    graph = microbatched(load_graph(args.graph), args.microbatches)
    loaded = [(path, load_placement(path, graph)) for path in args.placement]  # another graph's: refused
    for path, p in loaded:
        try:
            check_placement(p.assignment, graph, n)
        except InputError as e:
            raise e.with_source(path) from None
    placements = [(path, p.assignment) for path, p in loaded]
    if args.hardware and args.mode != "synthetic" and can_run_program(graph, args.program, args.exported):
        counts = check_stages(graph, placements, n, rig, args.max_stages,
                              interleaved_steps(1, args.repeats, args.warmup) - 1)
        print(f"stages (estimated, before the devices are measured): "
              f"{', '.join(f'{Path(path).name} {c.stages}' for (path, _), c in zip(placements, counts))}; their "
              f"first steps compile them: {about(sum(c.compile_s for c in counts))} here", flush=True)
    chosen = eval_cluster(args, spec, loaded)
    cluster = chosen.cluster
    for note in [line for path, p in loaded for line in graph_notes(p, graph, path)] + list(chosen.notes):
        print(note)
    runner = None
    if args.program:
        print(f"importing {args.program} (named by --program) to re-trace the graph's program", flush=True)
    elif args.hardware and args.mode == "auto" and not can_run_program(graph, None, args.exported) \
            and graph.meta.get("source"):
        print("note: the graph's meta.source program is not imported on a data file's word; running synthetic "
              "kernels (pass --program MODULE:FUNCTION, or export it with `import-jax --export`, to run the real "
              "program)")
    if costs in ("step", "units") and args.mode != "synthetic" and can_run_program(graph, args.program,
                                                                                     args.exported):
        devices = local_devices(spec)
        if costs == "step" and args.program is None and args.exported is None and \
                list(cluster.kinds) == [kind_of(d) for d in devices]:
            # the graph's own program on a cluster of these devices' kinds: the step profile `place --hardware`
            # takes and caches, or its cached one
            print("the units' costs inside one compiled step (--costs step, the default with --hardware; --costs "
                  "graph simulates the graph's recorded costs):", flush=True)
            graph = ensure_profile(graph, args.graph, devices, lambda line: print(line, flush=True),
                                   one_core=rig == "processes")
            runner = hardware_runner(graph, cluster, args.mode, devices=spec, rig=rig)
        else:
            runner = hardware_runner(graph, cluster, args.mode, program=args.program, args_spec=args.args_spec,
                                     exported=args.exported, devices=spec, rig=rig)
            lacking = [k for k in dict.fromkeys(cluster.kinds) if k not in graph.costs]
            missing = f"the graph has no {', '.join(map(repr, lacking))} costs: " if lacking else ""
            how = ("inside one compiled step (--costs step, the default with --hardware" if costs == "step" else
                   "each alone as its own call (--costs units")
            guess = estimate_seconds(graph, args.repeats, 2) * len(set(cluster.kinds))
            print(f"{missing}measuring the {graph.n_nodes} units {how}; --costs graph simulates the graph's "
                  f"recorded costs){f': {about(guess)} here' if costs == 'step' else ''} ...", flush=True)
            with estimated(f"measuring {graph.name}'s units", guess) if costs == "step" else _nothing():
                runner = (runner.with_step_costs(args.repeats, args.program, args.args_spec, args.exported)
                          if costs == "step" else runner.with_unit_costs(args.repeats))
        runner = runner.with_rig_costs(progress=lambda line: print(line, flush=True))
        graph = runner.graph
    else:
        cluster, warning = simulation_cluster(graph, cluster)
        if warning:
            print(warning, file=sys.stderr)
        if args.hardware:
            runner = hardware_runner(graph, cluster, args.mode, program=args.program, args_spec=args.args_spec,
                                     exported=args.exported, devices=spec, rig=rig)
    print(f"graph {graph.name} ({graph.n_nodes} nodes), cluster {describe_cluster(cluster)} ({chosen.how}; "
          f"{cluster_summary(cluster)})")
    if runner is not None:
        staged = runner.stages and runner.mode != "synthetic"
        how = "each device's consecutive units as one jitted stage" if staged else "one task per unit"
        where = (f"one worker process per device (--rig processes: {runner.rig.n_devices} single-core JAX clients, "
                 f"shared-memory transfers)" if runner.rig is not None else "this process (--rig threads)")
        print(f"hardware: {', '.join(f'{d.platform}:{d.id}' for d in runner.devices)} in {where}, {runner.mode} "
              f"execution ({how}), median of {args.repeats} steps after {args.warmup} warm-up (the first compiles)")
    if runner is not None:
        model = ("the staged simulation of the stages the rig runs, with its measured launch and transfer costs "
                 "(simulator.engine.staged)" if runner.rig_costs is not None else
                 "the simulator's step time on the cluster above")
        print(f"simulated: {model}; measured: real steps; {ERROR_MEANING}")
    child = _plain_jit(args, spec) if runner is not None else None  # before the placements run (and after)
    plain = (child.first,) if child is not None else ()
    print(f"{'placement':<28} {'simulated ms':>12}" + (f" {'measured ms':>12}  [IQR, min]  error" if runner else ""))
    try:
        anchor = runner is not None and runner.adds_anchor([p for _, p in placements])  # timed too
        steps = interleaved_steps(len(placements) + anchor, args.repeats, args.warmup)
        with step_bar("running placements", steps) if runner is not None else _nothing():
            rows = evaluate(graph, placements, cluster, runner, args.repeats, args.warmup, progress=print)
        print("\n".join(memory_lines(graph, placements, cluster)))
        summary = agreement(rows)
        if runner is not None:
            plain += (child.again(),) if plain[0].available else ()  # (unavailable: it would be again)
            on_cpu = all(d.platform == "cpu" for d in runner.devices)
            print("\n".join(summary_lines(rows, [p for _, p in placements], measure_concurrency(spec, runner.rig),
                                           plain, on_cpu)))
    finally:
        if runner is not None:
            runner.close()
        if child is not None:
            child.close()
    if args.plot:
        plot_agreement(rows, args.plot, f"{graph.name}, {n} devices: median |error| {summary.median_ape:.0f}%, "
                                        f"{format_spearman(summary)}")
        print(f"plot             {args.plot}")
    if args.json:
        write_rows_json(args.json, graph, cluster, rows, summary, plain)
    if args.refit:
        refit(args.refit, graph, cluster, [p for _, p in placements], rows)
    return 0


def _nothing():
    return contextlib.nullcontext()


def _plain_jit(args: argparse.Namespace, spec: int | tuple) -> Any:
    """The plain jit of the graph's step in a fresh process, timed once.

    A simulator.hardware.plain_jit.Child, kept to time again, of the step's zoo or exported program. A graph run
    through --program gets an unavailable one (the child imports nothing).
    """
    from simulator.hardware import plain_jit  # JAX's modules: only when the placements run

    if args.program:
        return plain_jit.Child(plain_jit.PlainJit(why="the program named by --program is not imported by the fresh "
                                                      "process; export it with `import-jax --export`"))
    return plain_jit.start_for(args.graph, spec, args.repeats, args.warmup, args.exported,
                               progress=lambda line: print(line, flush=True))


def eval_cluster(args: argparse.Namespace, spec: int | tuple,
                 placements: list[tuple[str, Placement]]) -> ChosenCluster:
    """The cluster eval simulates with, and the notes on it.

    With --hardware and no --cluster, the calibrated cluster of the local devices `spec` (the one
    `place --hardware` caches, simulator.measure.calibrate.cached_cluster: calibrated now only when none is
    cached), with a note for each placement made for another cluster; else placeto.cli.arguments.placement_cluster:
    --cluster, --preset, the placements' recorded cluster, the default preset.
    """
    if not (args.hardware and not args.cluster):
        return placement_cluster(args, placements)
    from simulator.measure.calibrate import cached_cluster  # JAX's modules: only when the placements run

    cluster = cached_cluster(local_devices(spec), spec, progress=lambda line: print(line, flush=True))
    cluster = with_memory(cluster, memory_bytes(args))
    notes = [cluster_note(p, path, cluster, "as --hardware measures these devices") for path, p in placements]
    return ChosenCluster(cluster, "calibrated for these devices", tuple(n for n in notes if n))
