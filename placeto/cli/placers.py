"""The learned placers' commands: train, place, policies.

Their arguments: placeto.cli.main.build_parser. As in placeto.cli.main: parse, call the libraries, print; bad input
raises InputError, which `placeto.cli.main.main` prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np

from placeto.cli.arguments import (DEFAULT_DEVICES, cluster_from_args, load_placing, memory_bytes, print_op_graph_note,
                                   resolve_devices, spec_count)
from simulator.model.cluster import Cluster, cluster_preset, load_cluster, with_memory
from simulator.model.errors import InputError
from simulator.model.io import check_distinct_paths, check_output_path
from simulator.model.placement_file import describe_cluster, save_placement


def cmd_train(args: argparse.Namespace) -> int:
    from placeto.cli.arguments import spec_from_args
    from placeto.methods import registry

    workers = spec_from_args(args)  # None without --workers
    method = registry.get(getattr(args, "method", None) or registry.DEFAULT)
    if args.config not in method.presets:
        raise InputError(f"--config {args.config} is not a preset of {method.name} (it has "
                         f"{', '.join(method.presets)})")
    owner = None if args.fresh else registry.run_method(args.out)  # InputError: a "method" that names none
    if owner not in (None, method.name):  # resuming another method's run would read its config as this one's
        raise InputError(f"not a run directory of {method.name} (its \"method\" is {owner!r}); pass --fresh or "
                         f"another --out", f"{args.out}/config.json")
    return method.train(args, *_train_inputs(args), workers)


def _place_on_hardware(args: argparse.Namespace) -> int:
    """`place --hardware`: place for local devices, write, report.

    placeto.harness.on_hardware.place_on_hardware, then the placement file and the report.
    """
    from simulator.hardware.devices import default_local_spec, ensure_host_devices

    unused = [flag for flag, given in (("--checkpoint", args.checkpoint is not None),
                                       ("--budget", args.budget is not None), ("--samples", args.samples > 0),
                                       ("--finetune-episodes", args.finetune_episodes > 0)) if given]
    if unused:  # taken silently once, a missing --checkpoint run included
        raise InputError(f"{unused[0]} is not used by --hardware (its --candidates are placed with their shipped "
                         f"policies, --seconds each): leave it out, or place without --hardware")
    cluster = load_cluster(args.cluster) if args.cluster else None
    if cluster is not None:  # the cluster file's count, or --devices checked against it
        resolve_devices(spec_count(args.devices), [(f"cluster {args.cluster}", cluster.n_devices)])
    spec = args.devices if args.devices is not None else (cluster.n_devices if cluster else default_local_spec())
    ensure_host_devices(spec)  # before anything imports jax
    from simulator.model.io import load_graph

    from simulator.hardware.options import default_rig
    from placeto.harness.on_hardware import place_on_hardware, report

    methods = [m for m in args.candidates.split(",") if m]
    if args.method and args.method not in methods:
        methods.append(args.method)
    from placeto.harness.compare import resolve_methods

    resolve_methods(methods)  # unknown names: one line
    graph = load_graph(args.graph)
    outcome = place_on_hardware(graph, args.graph, spec, methods, seconds=args.seconds or 2.0, top=args.top,
                                repeats=args.repeats, seed=args.seed, cluster=cluster,
                                save_profile=args.save_profile, rig=args.rig or default_rig(spec),
                                gantt=args.gantt)
    save_placement(args.out, outcome.best.placement, outcome.cluster.device_names, graph=graph,
                   cluster=outcome.cluster)
    print(report(outcome))
    print(f"-> {args.out} ({outcome.best.name})")
    if args.plot:
        from simulator.measure.agreement import EvalRow
        from placeto.harness.evaluate import plot_agreement

        rows = [EvalRow(c.name, c.simulated_us, c.measured) for c in outcome.candidates if c.measured is not None]
        plot_agreement(rows, args.plot, f"{graph.name} on {outcome.cluster.n_devices} local devices: "
                                        f"{outcome.best.name} kept")
        print(f"plot: {args.plot}")
    return 0


MAX_SECONDS = 86400.0  # --seconds of a placement method: a day


def check_seconds(seconds: float | None) -> None:
    """InputError unless `seconds` is a budget in (0, MAX_SECONDS].

    `seconds`: --seconds, None when not given. Never zero or negative, never one that cannot expire (inf, nan,
    1e300).
    """
    if seconds is not None and not 0 < seconds <= MAX_SECONDS:
        raise InputError(f"--seconds must be in (0, {MAX_SECONDS:g}], got {seconds}")


def graph_files(paths: list[str]) -> list[str]:
    """The train command's --graph arguments as files.

    A directory stands for its graph files (*.json, *.json.gz), sorted by name.

    Raises:
      InputError: a directory without any.
    """
    from pathlib import Path

    out = []
    for p in paths:
        if Path(p).is_dir():
            found = sorted(str(f) for f in Path(p).iterdir() if f.name.endswith((".json", ".json.gz")))
            if not found:
                raise InputError(f"{p}: a directory without graph files (*.json, *.json.gz)")
            out += found
        else:
            out.append(p)
    return out


def _train_inputs(args: argparse.Namespace) -> tuple[list, list]:
    """(graphs, clusters) that train's arguments name.

    The graphs of --family or --graph; the clusters of --cluster, or --preset at each --devices count.
    """
    from simulator.model.io import load_graph

    from simulator.workloads.families import ALL_FAMILIES, load_family

    if args.family:
        names = ALL_FAMILIES if args.family == "all" else [f.strip() for f in args.family.split(",") if f.strip()]
        graphs = [g for name in names for g in load_family(name, "train")]
    else:
        graphs = [load_graph(g) for g in graph_files(args.graph)]
    if args.cluster:
        cluster = load_cluster(args.cluster)
        for count in dict.fromkeys(args.devices or []):  # a given --devices must be the file's count
            resolve_devices(count, [(f"cluster {args.cluster}", cluster.n_devices)])
        return graphs, [cluster]
    return graphs, [cluster_preset(args.preset, d) for d in dict.fromkeys(args.devices or [DEFAULT_DEVICES])]


def single_line(single, graph, cluster: Cluster) -> str:
    """`place`'s single-device line: its simulated runtime and name.

    `single`: the simulator.model.result.SimResult of the cluster's fastest single device
    (placeto.baselines.single.single_device, as `compare`'s "single" row).
    """
    from placeto.baselines.single import single_device

    name = cluster.devices[single_device(graph, cluster)].name
    return f"  single device  {single.runtime / 1e3:>10.3f} ms{'  OOM' if single.any_oom else ''}  ({name})"


NO_FIT = 3  # `place`'s exit status when the placement it writes is over some device's capacity


def fitted(method: str, graph, cluster: Cluster, placement):
    """(placement, a note or "") after placeto.feasibility.repair; the references (single, expert) as they are."""
    from placeto.feasibility import repair
    from placeto.harness.compare import REFERENCES

    if method in REFERENCES:
        return placement, ""
    fixed = repair(graph, cluster, placement)
    if fixed.how in ("", "none"):
        return fixed.placement, ""
    how = f"{fixed.moves} node{'s' if fixed.moves != 1 else ''} moved" if fixed.how == "moves" else \
        f"{fixed.how}'s placement taken"
    return fixed.placement, f"over memory as placed: {how} to fit"


def runtime_lines(method: str, graph, cluster: Cluster, placement, placed, single) -> None:
    """Print the cluster, the placement's step time beside the single device's and the lower bound (SimResults
    `placed`, `single`), and on stderr the warning line of placeto.harness.against_single if any; for an
    msr-fiddle input, its max-load and the single accelerator's (simulator.model.max_load)."""
    from placeto.harness.against_single import place_warning
    from simulator.model.max_load import is_max_load, max_load_reference

    print(f"  {'cluster':<14} {describe_cluster(cluster)}")

    if is_max_load(graph):
        cap = placed.capacity
        load, peak = max_load_reference(graph, placement, cluster)
        one, one_peak = max_load_reference(graph, np.zeros(graph.n_nodes, np.int32), cluster)
        print(f"  {method:<14} {load:>10.3f} max-load (time per sample, the file's units)"
              f"{'  OOM' if (peak > cap).any() else ''}")
        print(f"  {'accelerator 0':<14} {one:>10.3f} max-load{'  OOM' if (one_peak > cap).any() else ''}")
        return
    print(f"  {method:<14} {placed.runtime / 1e3:>10.3f} ms{'  OOM' if placed.any_oom else ''}")
    print(single_line(single, graph, cluster))
    print(f"  lower bound    {placed.lower_bound / 1e3:>10.3f} ms")
    warning = place_warning(method, graph, cluster, placed, single)
    if warning:
        print(warning, file=sys.stderr)


def memory_report(method: str, graph, cluster: Cluster, placement, placed, out) -> int:
    """Print each device's peak against its capacity; if over, the one-line "nothing fits". Returns the exit status.

    `placement` (its SimResult `placed`): the placement written to `out`; peaks as the objective counts them
    (placeto.feasibility.peaks). Over capacity: NO_FIT, with the least that each device
    must hold on this many devices (placeto.feasibility.needed_per_device) when even that is above capacity.
    """
    from placeto.feasibility import needed_per_device, peaks
    from placeto.harness.compare import REFERENCES

    peak, cap = peaks(graph, placement, cluster)[0], placed.capacity
    print(f"  {'device':<14} {'peak GB':>10} {'capacity GB':>12}")
    for k, dev in enumerate(cluster.devices):
        print(f"  {dev.name:<14} {peak[k] / 1e9:>10.3f} {cap[k] / 1e9:>12.3f}{'  OOM' if peak[k] > cap[k] else ''}")
    if not (peak > cap).any():
        return 0
    worst = int(np.argmax(peak / cap))
    need = needed_per_device(graph, cluster.n_devices)
    found = "" if method in REFERENCES else "nothing fits: "
    bound = (f"no placement can fit: every placement on {cluster.n_devices} devices puts at least {need / 1e9:.3f} GB "
             f"on one of them" if need > max(cluster.memory) else
             f"a placement on {cluster.n_devices} devices needs at least {need / 1e9:.3f} GB on one of them")
    print(f"placeto: {found}{method}'s placement (written to {out}) puts {peak[worst] / 1e9:.3f} GB on "
          f"{cluster.devices[worst].name} of {cap[worst] / 1e9:.3f} GB; {bound}", file=sys.stderr)
    return NO_FIT


def cmd_place(args: argparse.Namespace) -> int:
    from placeto.baselines.single import single as single_placement
    from simulator import simulate

    check_distinct_paths([("--out", args.out), ("--plot", getattr(args, "plot", None))],
                         [("the graph file", args.graph), ("the cluster file", args.cluster)])
    check_output_path(args.out)
    if getattr(args, "plot", None):
        check_output_path(args.plot)
        if not args.hardware:
            raise InputError("--plot draws the placements run for real: it needs --hardware")
    if getattr(args, "save_profile", False) and not args.hardware:
        raise InputError("--save-profile writes the profile that --hardware measures: it needs --hardware")
    for flag, given in (("--rig", getattr(args, "rig", None)), ("--gantt", getattr(args, "gantt", None))):
        if given and not args.hardware:
            raise InputError(f"{flag} is about running the placements on local devices: it needs --hardware")
    if getattr(args, "gantt", None) and args.rig == "threads":
        raise InputError("--gantt draws each device's measured stage times, which the process rig records: it needs "
                         "--rig processes")
    if getattr(args, "gantt", None):
        check_distinct_paths([("--gantt", args.gantt)], [("the graph file", args.graph), ("--out", args.out)])
        check_output_path(args.gantt)
    check_seconds(args.seconds)  # every path: a budget that can expire, and is not empty
    if args.hardware:
        if args.microbatches > 1:
            raise InputError("--microbatches > 1 is simulated only: --hardware runs the plain step")
        return _place_on_hardware(args)
    if args.devices is not None and not isinstance(args.devices, int):
        raise InputError("--devices as a platform:index list names local devices: it needs --hardware")
    graph, own = load_placing(args.graph, args.microbatches)
    cluster = with_memory(own, memory_bytes(args)) if own is not None else cluster_from_args(args)
    print_op_graph_note(graph, args.graph, cluster.kinds)
    from placeto.baselines import METHODS as BASELINES

    if args.method in BASELINES:
        return _place_with_baseline(args, graph, cluster)
    from placeto.methods import registry

    request = registry.resolve_place(args.method, args.checkpoint, args.budget, args.seconds, args.samples,
                                     args.finetune_episodes, graph)
    method, budget = request.method, request.budget
    if request.budgeted:
        from placeto import policies
        from placeto.harness.compare import run_learned

        run, compile_s = run_learned(method, graph, cluster, args.seed, budget, args.seconds, args.checkpoint,
                                     args.finetune_episodes)
        placement, calls = run.placement, run.simulator_calls
        kind = registry.of_variant(method)
        policy = args.checkpoint if args.checkpoint is not None else \
            None if kind.per_graph else kind.default_for(graph.n_nodes) or policies.DEFAULT_POLICY
        how = f"{method}{f' with {policy}' if policy else ''}, {run.seconds:.2f} s + {compile_s:.1f} s compilation"
    else:
        placement, calls = registry.get(method).place(graph, cluster, args.checkpoint, args.samples, args.seed)
        how, policy = method, args.checkpoint
    placement, fit_note = fitted(method, graph, cluster, placement)
    placed = simulate(graph, placement, cluster)
    single = simulate(graph, single_placement(graph, cluster), cluster)
    save_placement(args.out, placement, cluster.device_names, graph=graph, cluster=cluster)
    print(f"placed {graph.name} on {cluster.n_devices} devices ({how}; {calls} simulator "
          f"call{'s' if calls != 1 else ''}) -> {args.out}")
    from placeto import coarsen

    kind = registry.of_variant(method) if method in registry.all_variants() else None
    if kind is not None and kind.note is not None:
        note = kind.note(graph, cluster, policy, calls) if policy else None
        if note:
            print(f"  ({note})")
    elif graph.n_nodes > coarsen.MAX_POLICY_NODES:
        print(f"  ({graph.n_nodes} nodes: placed as {coarsen.COARSE_GROUPS} groups by the policy, then expanded)")
    if fit_note:
        print(f"  ({fit_note})")
    runtime_lines(method, graph, cluster, placement, placed, single)
    return memory_report(method, graph, cluster, placement, placed, args.out)


def _place_with_baseline(args: argparse.Namespace, graph, cluster: Cluster) -> int:
    """`place --method NAME` for a baseline, written as any placement."""
    from placeto.baselines.single import single as single_placement
    from simulator import simulate

    from placeto.baselines import BUDGETED, DEFAULT_BUDGET, default_seconds, run_method

    given = [flag for flag, on in (("--checkpoint", args.checkpoint is not None), ("--samples", args.samples > 0),
                                   ("--finetune-episodes", args.finetune_episodes > 0)) if on]
    if given:
        raise InputError(f"{given[0]} is for learned methods, not the baseline {args.method!r}")
    given = args.budget is not None or args.seconds is not None  # else the default: calls, and seconds by size
    budget = args.budget if given else DEFAULT_BUDGET
    seconds = args.seconds if given else default_seconds(graph)
    run = run_method(args.method, graph, cluster, args.seed, budget=budget, seconds=seconds)
    placement, fit_note = fitted(args.method, graph, cluster, run.placement)
    placed = simulate(graph, placement, cluster)
    single = simulate(graph, single_placement(graph, cluster), cluster)
    save_placement(args.out, placement, cluster.device_names, graph=graph, cluster=cluster)
    limits = [f"{budget} calls" if budget is not None else "", f"{seconds:.3g} s" if seconds is not None else ""]
    spent = f", budget {' or '.join(x for x in limits if x) or 'unlimited'}" if args.method in BUDGETED else ""
    print(f"placed {graph.name} on {cluster.n_devices} devices ({args.method}, {run.seconds:.2f} s{spent}; "
          f"{run.simulator_calls} simulator call{'s' if run.simulator_calls != 1 else ''}) -> "
          f"{args.out}")
    if fit_note:
        print(f"  ({fit_note})")
    runtime_lines(args.method, graph, cluster, placement, placed, single)
    return memory_report(args.method, graph, cluster, placement, placed, args.out)


def _reproducing(command: str, policy_dir) -> str:
    """The policy's command, pinning the config defaults changed since.

    It gets --set for every config field whose default (that of the command's --config preset) has changed since
    (read from its config.json with its method's config class), so that rerunning it trains the same
    configuration.
    """
    from placeto.checkpoint_io import read_config
    from placeto.config_fields import pinned_overrides
    from placeto.methods import registry

    method = registry.checkpoint_method(policy_dir)
    if method is None or not command.startswith("placeto train"):  # e.g. a script's command: it sets its config
        return command
    spec = registry.get(method)
    preset = re.search(r"--config (\S+)", command)  # the defaults the command started from
    current = spec.presets.get(preset.group(1), spec.config_cls) if preset else spec.config_cls
    pins = pinned_overrides(read_config(policy_dir, spec.config_cls), current(), command)
    if not pins:
        return command
    if " --set " in command:
        return command + " " + " ".join(pins)
    return command + " --set " + " ".join(pins)


def cmd_policies(args: argparse.Namespace) -> int:
    from placeto.policies import DEFAULT_POLICY, shipped_policies

    found = shipped_policies()
    if not found:
        print("no shipped policies")
    for p in found:
        prov = p.provenance
        default = " (default)" if p.name == DEFAULT_POLICY else ""
        print(f"{p.name}{default}: {prov.get('summary', '')}")
        print(f"  trained: {_reproducing(prov.get('command', '?'), p.path)}")
        print(f"  seed {prov.get('seed', '?')}, commit {str(prov.get('commit', '?'))[:12]}, "
              f"{prov.get('train_minutes', '?')} min, {prov.get('episodes', '?')} episodes; {p.path}")
    return 0
