"""`placeto calibrate`, and `placeto eval --refit`: the cluster model fitted to measured step times.

    calibrate   the calibration graphs measured on local devices, the six timing parameters fitted
                (simulator.measure.calibrate.calibrate_fit), the cluster written
    refit       eval's measured placements of one graph: the per-op and per-transfer costs refitted to them
                (simulator.measure.fit.fit_on_placements), with each placement predicted by the fit on the others
"""

from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from simulator.measure.agreement import EvalRow, agreement, format_agreement
from placeto.cli.arguments import DEVICE_SPEC, POSITIVE
from simulator.model.cluster import Cluster, save_cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import check_output_path


CALIBRATE_DESCRIPTION = (
    "Run small calibration graphs (chains, hops, fan-outs of synthetic kernels) on local JAX devices and fit the "
    "cluster model's six timing parameters to their step times by least squares: delta1 (per op, us), delta2 "
    "(per transfer, us), bandwidth (B/us), latency (per transfer, us), and the host's dispatch and transfer times "
    "(us, shared by the devices). Writes a cluster file (those, and each device's kind and memory) for "
    "`simulate --cluster`, `eval --cluster`, `place --cluster`, and prints the fit probe by probe; then measures "
    "how concurrently the devices run independent work (the simulator assumes they do).")


def add_calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.description = p.description or textwrap.fill(CALIBRATE_DESCRIPTION, 78)  # the formatter keeps line breaks
    p.add_argument("--devices", type=DEVICE_SPEC, default=2,
                   help="local devices to calibrate: a count (the first N of the default backend), or a "
                        "platform:index list, e.g. gpu:0,cpu:0 (mixed: each device keeps its own kind)")
    p.add_argument("--out", required=True,
                   help="cluster JSON file to write: delta1, delta2, bandwidth, latency, host dispatch and "
                        "transfer times, and each device's kind and memory")
    p.add_argument("--repeats", type=POSITIVE, default=7,
                   help="steps timed per calibration graph (the fit uses their lower quartile)")
    p.add_argument("--name", help="cluster name (default: the device kinds, e.g. local-cpu-calibrated)")


def run_calibrate(args: argparse.Namespace) -> int:
    from simulator.hardware.devices import ensure_host_devices

    check_output_path(args.out)
    ensure_host_devices(args.devices)  # before anything imports jax
    if args.repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    from simulator.measure.calibrate import calibrate_fit
    from simulator.measure.fit import format_fit
    from simulator.hardware.devices import spec_text

    print(f"measuring the calibration graphs on local devices ({spec_text(args.devices)}), {args.repeats} steps "
          f"each ...", flush=True)
    fit = calibrate_fit(args.devices, args.repeats, args.name)
    cluster = fit.cluster
    save_cluster(cluster, args.out)
    print(format_fit(fit))
    print(f"{args.out}: {describe_devices(cluster)}, {cluster_summary(cluster)}")
    check_parallelism(args.devices)
    return 0


def describe_devices(cluster: Cluster) -> str:
    """"2x local-cpu (64.0 GB each)", or per device for a mixed cluster: "/gpu:0 local-h200 (143.8 GB),
    /cpu:0 local-cpu (270.0 GB)"."""
    if len(set(cluster.kinds)) == 1 and len(set(cluster.memory)) == 1:
        return f"{cluster.n_devices}x {cluster.kinds[0]} ({cluster.memory[0] / 1e9:.1f} GB each)"
    return ", ".join(f"{d.name} {d.kind} ({d.memory_bytes / 1e9:.1f} GB)" for d in cluster.devices)


def cluster_summary(cluster: Cluster) -> str:
    """delta1, delta2, bandwidth and, when set, latency and host times, on one line."""
    text = (f"delta1 {cluster.delta1_us:g} us, delta2 {cluster.delta2_us:g} us, bandwidth "
            f"{cluster.bandwidth_bytes_per_us:g} B/us ({cluster.bandwidth_bytes_per_us / 1e3:.2f} GB/s)")
    if cluster.latency_us:
        text += f", latency {cluster.latency_us:g} us"
    for h in cluster.hosts:
        text += f", host {h.name!r}: dispatch {h.dispatch_us:g} us, transfer {h.transfer_us:g} us"
    return text


CONCURRENT = 0.75  # devices "run concurrently" when n independent chains finish at least 0.75 n times faster


class Concurrency(NamedTuple):
    """How concurrently the local devices ran independent work like a placement's (simulator.measure.concurrency:
    n chains of 700x700 matmuls, one per device, at once against one device after the other)."""

    n: int  # devices
    speedup: float  # the n chains one after the other over all at once (n: fully concurrent, 1: taking turns)
    cores: int  # CPU cores of this machine (os.cpu_count)
    load: float  # 1-minute load average when measured
    platform: str  # the devices' platform, "cpu" for host CPU devices (which share the machine's cores)
    rig: str = "threads"  # where they ran: "threads" (this process's JAX devices) or "processes" (process rig)

    @property
    def concurrent(self) -> bool:
        """Whether the devices ran in parallel as the simulator assumes (speedup >= CONCURRENT * n)."""
        return self.speedup >= CONCURRENT * self.n

    @property
    def ceiling(self) -> int:
        """The most this machine can give: n devices, but host CPU devices at most one per core."""
        return min(self.n, self.cores) if self.platform == "cpu" else self.n


def measure_concurrency(spec: int | tuple, rig: Any = None, rounds: int = 5) -> Concurrency | None:
    """Measure how concurrently the local devices of `spec` (a count n, or a platform:index list) run work like a
    placement's: n chains of 8 matmuls of 700x700, one per device, all at once against one device after the other
    (simulator.measure.concurrency), on the rig in use: `rig` (a simulator.hardware.rig.pool.ProcessRig, one chain per
    worker) or, None, this process's JAX devices. None for one device or mixed platforms (their speeds differ, so
    the ratio would not say it)."""
    from simulator.measure import concurrency as concurrency_check
    from simulator.hardware.devices import device_count, local_devices

    if device_count(spec) < 2:
        return None
    devices = local_devices(spec)
    if len({d.platform for d in devices}) > 1:
        return None
    chains = concurrency_check.rig_chains(rig) if rig is not None else concurrency_check.host_chains(devices)
    try:
        speedup = concurrency_check.speedup(chains, rounds)
    finally:
        chains.close()
    return Concurrency(len(devices), speedup, os.cpu_count() or 1, os.getloadavg()[0], devices[0].platform,
                       "processes" if rig is not None else "threads")


def concurrency_line(c: Concurrency) -> str:
    """One line: the measured parallel speedup against the n the simulator assumes and, when the devices do not
    run concurrently, what that means for measured and simulated speedups."""
    how = ", one worker process each," if c.rig == "processes" else ""
    what = (f"{c.n} host CPU devices sharing {c.cores} core{'s' if c.cores > 1 else ''} (load {c.load:.1f}){how}"
            if c.platform == "cpu" else f"{c.n} {c.platform} devices")
    cap = f", at most {c.ceiling}x on {c.cores} cores" if c.ceiling < c.n else ""
    ran = f"devices: {what} ran independent work {c.speedup:.2f}x as fast as one (the simulator assumes {c.n}x{cap})"
    if c.concurrent:
        return f"{ran}: concurrent, as simulated"
    other = " or --rig processes (a process per host CPU device)" if c.platform == "cpu" and c.rig == "threads" else ""
    return (f"{ran}: NOT concurrent, so running the devices at once gains nothing here; the simulated gains "
            f"need devices that run in parallel (e.g. GPUs{other})")


SPEEDUP_SLACK = 1.25  # a measured speedup up to 1.25x the devices' measured concurrency is noise, not a surprise


def beyond_concurrency(speedup: float, c: Concurrency | None) -> bool:
    """Whether a placement measured `speedup` times the single device's speed is faster than running its devices
    at once can explain: above SPEEDUP_SLACK times the devices' measured concurrency (`c.speedup`, at least 1).
    False when the concurrency was not measured (one device, or mixed platforms)."""
    return c is not None and speedup > SPEEDUP_SLACK * max(c.speedup, 1.0)


def beyond_note(c: Concurrency, final: float, first: float | None = None) -> str:
    """Words for a speedup over the single device that was `beyond_concurrency`: `final` the last measurement,
    `first` the one before it when it was measured again. Where `final` is still beyond, that it held, and so
    that the gain does not come (devices that run concurrently: not only) from running the devices at once;
    else what the first measurement gave."""
    allows = f"the {c.speedup:.2f}x the devices' measured concurrency allows"
    if first is not None and not beyond_concurrency(final, c):
        return f"measured again: the first fresh steps gave {first:.2f}x, beyond {allows}"
    how = f" (on two sets of fresh steps: {first:.2f}x, then {final:.2f}x)" if first is not None else ""
    why = ("more than running the devices at once can give" if c.concurrent else
           "the gain is not from running the devices at once")
    return (f"{final:.2f}x is BEYOND {allows}{how}: {why} (splitting the step into stages can itself make XLA "
            f"faster; docs/hardware.md)")


def check_parallelism(spec: int | tuple) -> Concurrency | None:
    """Measure (`measure_concurrency`) and print `concurrency_line`; None (nothing printed) for one device or
    mixed platforms."""
    c = measure_concurrency(spec)
    if c is not None:
        print(concurrency_line(c))
    return c


def refit(path: str, graph: Graph, cluster: Cluster, placements: Sequence[np.ndarray],
          rows: Sequence[EvalRow]) -> None:
    """Fit the cluster's per-op and per-transfer costs to the rows' measured steps, write it to `path`, and print
    the fit and the leave-one-out agreement (simulator.measure.fit.held_out_predictions)."""
    from simulator.measure.fit import cluster_params, fit_on_placements, format_fit, held_out_predictions

    measured = [r.measured.median_us for r in rows]
    start = cluster_params(cluster)
    print(f"refitting the cluster to the {len(rows)} measured placements ...", flush=True)
    fit = fit_on_placements(graph, placements, measured, start, cluster, names=[Path(r.name).name for r in rows])
    held = held_out_predictions(graph, placements, measured, start, cluster)
    save_cluster(fit.cluster, path)
    print(format_fit(fit, label="placement"))
    held_rows = [EvalRow(r.name, float(h), r.measured) for r, h in zip(rows, held)]
    print(f"held out (each placement simulated with the fit on the others): {format_agreement(agreement(held_rows))}")
    print(f"{path}: {cluster_summary(fit.cluster)}")
