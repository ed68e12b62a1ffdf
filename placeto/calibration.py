"""`placeto calibrate`, and `placeto eval --refit`: the cluster model fitted to measured step times.

    calibrate   the calibration graphs measured on local devices, the six timing parameters fitted
                (simulator.calibrate.calibrate_fit), the cluster written
    refit       eval's measured placements of one graph: the per-op and per-transfer costs refitted to them
                (simulator.fit.fit_on_placements), with each placement predicted by the fit on the others
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import numpy as np

from placeto.agreement import EvalRow, agreement, format_agreement
from placeto.arguments import DEVICE_SPEC, POSITIVE
from simulator.cluster import Cluster, save_cluster
from simulator.errors import InputError
from simulator.graph import Graph
from simulator.io import check_output_path


def add_calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", type=DEVICE_SPEC, default=2,
                   help="local devices to calibrate: a count (the first N of the default backend), or a "
                        "platform:index list, e.g. gpu:0,cpu:0 (mixed: each device keeps its own kind)")
    p.add_argument("--out", required=True, help="cluster JSON file to write")
    p.add_argument("--repeats", type=POSITIVE, default=7, help="trials per measurement (median)")
    p.add_argument("--name", help="cluster name (default: the device kinds, e.g. local-cpu-calibrated)")


def run_calibrate(args: argparse.Namespace) -> int:
    from simulator.host_devices import ensure_host_devices

    check_output_path(args.out)
    ensure_host_devices(args.devices)  # before anything imports jax
    if args.repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    from simulator.calibrate import calibrate_fit
    from simulator.fit import format_fit
    from simulator.host_devices import spec_text

    print(f"measuring the calibration graphs on local devices {spec_text(args.devices)}, {args.repeats} steps "
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


def check_parallelism(spec: int | tuple) -> float:
    """Measure and print how concurrently the local devices of `spec` (a count n, or a platform:index list) run
    (simulator.calibrate.measure_parallelism), with a warning when far below n: the simulator assumes devices
    run concurrently, and this machine then cannot. Mixed platforms are not measured (their kernels differ in
    speed, so the ratio would not say it): 1.0 is returned."""
    from simulator.host_devices import device_count, local_devices

    n = device_count(spec)
    if n < 2:
        return 1.0
    devices = local_devices(spec)
    if len({d.platform for d in devices}) > 1:
        return 1.0
    from simulator.calibrate import measure_parallelism

    speedup = measure_parallelism(devices)
    cores = os.cpu_count() or 1
    print(f"parallel speedup of {n} devices on independent work: {speedup:.2f} (ideal {min(n, cores)}; "
          f"{cores} cores, load average {os.getloadavg()[0]:.1f})")
    if speedup < 0.75 * min(n, cores):
        print(f"warning: these {n} devices do not run concurrently (fewer or busy cores): measured step times "
              f"will not show the parallelism the simulator assumes", file=sys.stderr)
    return speedup


def refit(path: str, graph: Graph, cluster: Cluster, placements: Sequence[np.ndarray],
          rows: Sequence[EvalRow]) -> None:
    """Fit the cluster's per-op and per-transfer costs to the rows' measured steps, write it to `path`, and print
    the fit and the leave-one-out agreement (simulator.fit.held_out_predictions)."""
    from simulator.fit import cluster_params, fit_on_placements, format_fit, held_out_predictions

    measured = [r.measured.median_us for r in rows]
    start = cluster_params(cluster)
    print(f"refitting the cluster to the {len(rows)} measured placements ...", flush=True)
    fit = fit_on_placements(graph, placements, measured, start, cluster, names=[r.name for r in rows])
    held = held_out_predictions(graph, placements, measured, start, cluster)
    save_cluster(fit.cluster, path)
    print(format_fit(fit))
    held_rows = [EvalRow(r.name, float(h), r.measured) for r, h in zip(rows, held)]
    print(f"held out (each placement simulated with the fit on the others): {format_agreement(agreement(held_rows))}")
    print(f"{path}: {cluster_summary(fit.cluster)}")
