"""The `placeto` command line's argument types and shared arguments.

The ranged types and the one-line parser are simulator.arguments'; here are the project's own ranges (devices,
seeds, minutes), the cluster, preset and worker arguments, and the device count rules.

The device count of a command that simulates is the one its placement or cluster file records when it is given
one, else --devices, else DEFAULT_DEVICES; --devices that disagrees with such a file is an InputError
(resolve_devices), never a silent choice between them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

from placeto.rollouts.distributed import RAY_HINT, WorkerSpec, probe, require_ray
from simulator.arguments import float_in, int_in
from simulator.model.cluster import PRESETS, Cluster, cluster_preset, load_cluster, with_memory
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import load_graph, read_json
from simulator.model.microbatch import microbatched
from simulator.model.placement_file import Placement, cluster_note, recorded_cluster
from simulator.model.limits import MAX_DEVICES, MAX_MICROBATCHES, MAX_SEED
from simulator.model.meta import op_graph_note
from simulator.workloads.msr_fiddle import is_throughput, throughput_from_dict

DEVICES = int_in(1, MAX_DEVICES)


def device_spec(text: str):
    """An argparse type: a device count or a platform:index list.

    simulator.hardware.devices.parse_device_spec; its error names the offending entry.
    """
    from simulator.hardware.devices import parse_device_spec

    try:
        return parse_device_spec(text)
    except ValueError as e:  # InputError: argparse would print only "invalid value"
        raise argparse.ArgumentTypeError(str(e).removeprefix("--devices: ")) from None


device_spec.__name__ = "device spec"
DEVICE_SPEC = device_spec  # local devices: "2", "gpu:0,cpu:0", "cpu:0,cpu:1"
SEED = int_in(0, MAX_SEED)
WORKERS = int_in(1, 1024)
MINUTES = float_in(0.0, 1e7, lo_open=True)  # a time limit: finite, and not 0 (placeto read 0 as none, gdp as now)
PERCENT = float_in(0.0, 1e6)  # a bound in percent (--max-cp-growth)
MICROBATCHES = int_in(1, MAX_MICROBATCHES)  # --microbatches: the step cut into M (simulator.model.microbatch)


DEFAULT_DEVICES = 4  # devices of every command when neither --devices nor a placement or cluster file says (as
# most of the Placeto paper's results); `compare` and `train`, which take several counts, default to [4] too


def devices_help(files: str = "the placement or cluster file's count") -> str:
    """Help of a --devices count, saying where the count comes from.

    `files` (the files that record one) when given, else DEFAULT_DEVICES.
    """
    return f"number of devices (default: {files} when given, else {DEFAULT_DEVICES}; a different count is an error)"


def add_microbatches_argument(p: argparse.ArgumentParser) -> None:
    """Add --microbatches M: the graph is simulated as GPipe's step of M microbatches (docs/formats.md)."""
    p.add_argument("--microbatches", type=MICROBATCHES, default=1, metavar="M",
                   help="simulate each training step as M microbatches, pipelined over the devices (GPipe: each "
                        "op's M copies of cost / M on its device, gradients accumulated, one update; default 1, "
                        "the plain step)")


def add_cluster_arguments(p: argparse.ArgumentParser, device_list: bool = False, recorded: bool = False) -> None:
    """Add --devices, --preset and --cluster, for commands that simulate.

    --devices defaults to None, so that a given one can be checked against the files (cluster_from_args). With
    `device_list`, --devices also takes local devices as a platform:index list (DEVICE_SPEC, e.g. gpu:0,cpu:0:
    `place --hardware`); cluster_from_args then takes the preset with that many devices. With `recorded` (a command
    that reads placement files), --preset defaults to None: the cluster the placement file records
    (placement_cluster), else DEFAULT_PRESET.
    """
    local = (". With --hardware: a count or local devices as platform:index, e.g. gpu:0,cpu:0 (default there: "
             "the cluster file's count, else every GPU, else 2 host CPU devices; at most 4 host CPU devices per "
             "core, at least 8)") if device_list else ""
    p.add_argument("--devices", type=DEVICE_SPEC if device_list else DEVICES, default=None,
                   help=devices_help("the cluster file's count" if device_list else
                                     "the placement or cluster file's count") + local)
    add_preset_argument(p, recorded=recorded)
    p.add_argument("--cluster", help="cluster JSON file, e.g. from `placeto calibrate` (instead of --preset; its "
                                     "device count is the command's)")
    add_memory_argument(p)


def load_placing(path: str, microbatches: int = 1) -> tuple[Graph, Cluster | None]:
    """The graph to place from `path`, with the cluster the file names (None for a graph file).

    A graph file (simulator.model.io), or one of msr-fiddle's throughput inputs (a .json naming `maxFPGAs`:
    simulator.workloads.msr_fiddle), which brings its accelerators, their memory and its max-load objective.

    Raises:
      InputError: one line naming the file and the field, for a file of either kind that is not valid.
    """
    if str(path).endswith(".json"):
        d = read_json(path)
        if is_throughput(d):
            if microbatches > 1:
                raise InputError("--microbatches is for simulated steps: an msr-fiddle input is scored by max-load",
                                 str(path))
            try:
                task = throughput_from_dict(d, Path(path).name.removesuffix(".json"), str(path))
            except InputError as e:
                raise e.with_source(str(path)) from None
            return task.graph, task.cluster
    return microbatched(load_graph(path), microbatches), None


def print_op_graph_note(graph: Graph, path: str, kinds: Sequence[str]) -> None:
    """Print, on stderr, simulator.model.meta.op_graph_note's line for an op graph priced per op on `kinds`.

    Nothing otherwise. stderr: `simulate --json` keeps stdout JSON.
    """
    note = op_graph_note(graph, path, kinds)
    if note:
        print(note, file=sys.stderr, flush=True)


def add_memory_argument(p: argparse.ArgumentParser) -> None:
    """Add --memory GB: every device's capacity, replacing the preset's or the cluster file's."""
    p.add_argument("--memory", type=float_in(0.0, 1e9, lo_open=True), default=None, metavar="GB",
                   help="memory of every device in GB (10^9 bytes), replacing the preset's or the cluster file's: "
                        "e.g. a model that does not fit one device")


def memory_bytes(args: argparse.Namespace) -> float | None:
    """--memory in bytes; None if not given."""
    gb = getattr(args, "memory", None)
    return None if gb is None else gb * 1e9


DEFAULT_PRESET = "placeto-k80"  # the cluster of every command when neither --preset, --cluster nor a file says
RECORDED_HELP = (f"(default: the cluster the placement file records, see docs/formats.md; for a file that records "
                 f"none, {DEFAULT_PRESET})")


def add_preset_argument(p: argparse.ArgumentParser, with_cluster: bool = True, recorded: bool = False) -> None:
    """Add --preset NAME, its choices listed in the help.

    The choices: simulator.model.cluster.PRESETS. `with_cluster`: the command also takes --cluster, which
    replaces it. `recorded`: the default is None, the placement file's recorded cluster (placement_cluster).
    """
    ignored = " (ignored with --cluster)" if with_cluster else ""
    p.add_argument("--preset", default=None if recorded else DEFAULT_PRESET, choices=sorted(PRESETS), metavar="NAME",
                   help=f"cluster preset, the device kind and its costs{ignored}: %(choices)s"
                        f"{' ' + RECORDED_HELP if recorded else ''}")


def spec_count(devices: int | Sequence | None) -> int | None:
    """The device count of a --devices value; None if not given.

    A count, or a platform:index list's length.
    """
    return devices if devices is None or isinstance(devices, int) else len(devices)


def placement_devices(path: str) -> int | None:
    """How many devices placement file `path` records; None if none.

    Its "devices" list. A file that cannot be read or parsed gives None here: it fails with its own message when
    it is loaded.
    """
    from simulator.model.io import read_json

    try:
        d = read_json(path)
    except InputError:
        return None
    devices = d.get("devices") if isinstance(d, dict) else None
    return len(devices) if isinstance(devices, list) and devices else None


def resolve_devices(given: int | None, files: Sequence[tuple[str, int | None]] = ()) -> int:
    """The device count of a command, from --devices or its files.

    Args:
      given: --devices' count; None when not given.
      files: (name such as "placement P.json", the count it records or None), in order.

    Returns:
      `given`, else the files' count, else DEFAULT_DEVICES.

    Raises:
      InputError: naming the file and both counts, when --devices and a file, or two files, disagree.
    """
    known = [(name, n) for name, n in files if n is not None]
    if given is not None:
        for name, n in known:
            if n != given:
                raise InputError(f"--devices {given} but {name} has {n} devices (leave --devices out to use the "
                                 f"file's count)")
        return given
    for (first, m), (name, n) in zip(known, known[1:]):
        if m != n:
            raise InputError(f"{first} has {m} devices but {name} has {n}")
    return known[0][1] if known else DEFAULT_DEVICES


def cluster_from_args(args: argparse.Namespace, placement: str | None = None) -> Cluster:
    """The cluster of --cluster, else --preset at the resolved count.

    resolve_devices checks --devices, the cluster file's count and the placement file `placement`'s against each
    other.
    """
    cluster = load_cluster(args.cluster) if getattr(args, "cluster", None) else None
    files = [(f"cluster {args.cluster}", cluster.n_devices)] if cluster is not None else []
    if placement is not None:
        files.append((f"placement {placement}", placement_devices(placement)))
    n = resolve_devices(spec_count(getattr(args, "devices", None)), files)
    preset = getattr(args, "preset", None) or DEFAULT_PRESET
    return with_memory(cluster if cluster is not None else cluster_preset(preset, n), memory_bytes(args))


class ChosenCluster(NamedTuple):
    """The cluster a command simulates placements on, and why."""

    cluster: Cluster
    how: str  # what chose it, e.g. "recorded in p.json", "--preset", "--cluster c.json", "the default preset"
    notes: tuple[str, ...]  # one-line notes: each placement made for another cluster than this one


def placement_cluster(args: argparse.Namespace, placements: Sequence[tuple[str, Placement]]) -> ChosenCluster:
    """The cluster of `simulate` and `eval` for placements read from files.

    --cluster or --preset when given (a note for each placement made for another cluster); else the one the
    placements record (simulator.model.placement_file.recorded_cluster); else DEFAULT_PRESET. --devices is checked
    against every file's count (resolve_devices); --memory replaces every device's capacity (a note when that
    makes it another cluster than the recorded one).

    Raises:
      InputError: counts that disagree, or placements that record different clusters (without --preset or
        --cluster).
    """
    given = [(f"placement {path}", len(p.devices) or None) for path, p in placements]
    if getattr(args, "cluster", None) or getattr(args, "preset", None):
        cluster = load_cluster(args.cluster) if getattr(args, "cluster", None) else None
        files = [(f"cluster {args.cluster}", cluster.n_devices)] if cluster is not None else []
        n = resolve_devices(spec_count(getattr(args, "devices", None)), files + given)
        cluster = with_memory(cluster if cluster is not None else cluster_preset(args.preset, n), memory_bytes(args))
        how = f"--cluster {args.cluster}" if getattr(args, "cluster", None) else "--preset"
        why = f"as {how} says"
    else:
        found = recorded_cluster(placements)
        if found is None:
            n = resolve_devices(spec_count(getattr(args, "devices", None)), given)
            return ChosenCluster(with_memory(cluster_preset(DEFAULT_PRESET, n), memory_bytes(args)),
                                 "the default preset", ())
        path, recorded = found
        resolve_devices(spec_count(getattr(args, "devices", None)), given)
        cluster, how = with_memory(recorded, memory_bytes(args)), f"recorded in {path}"
        if memory_bytes(args) is not None:
            how += ", with --memory"
        why = "as --memory says"
    notes = tuple(n for n in (cluster_note(p, path, cluster, why) for path, p in placements) if n)
    return ChosenCluster(cluster, how, notes)


def add_worker_arguments(p: argparse.ArgumentParser, what: str = "rollouts") -> None:
    """Add --workers N, --ray-address ADDR, --worker-timeout S."""
    p.add_argument("--workers", type=WORKERS, default=None,
                   help=f"run the {what} in N Ray workers (needs {RAY_HINT}); without --ray-address a local Ray "
                        "starts on this machine")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="join this Ray cluster (HOST:PORT of `ray start --head`, ray://HOST:PORT, or auto)")
    p.add_argument("--worker-timeout", type=float_in(1.0, 1e6), default=WorkerSpec.timeout_s, metavar="S",
                   help="stop with an error when the workers give no result for S seconds")


def spec_from_args(args: argparse.Namespace) -> WorkerSpec | None:
    """The WorkerSpec of the worker arguments; None without --workers.

    Raises:
      InputError: --ray-address without --workers or nothing answers there, or Ray is not installed.
    """
    workers, address = getattr(args, "workers", None), getattr(args, "ray_address", None)
    if workers is None:
        if address is not None:
            raise InputError("--ray-address needs --workers N (how many Ray workers to run)")
        return None
    require_ray()
    spec = WorkerSpec(workers, address, getattr(args, "worker_timeout", WorkerSpec.timeout_s))
    if address is not None:
        probe(address, spec.connect_timeout_s)  # before anything is written
    return spec
