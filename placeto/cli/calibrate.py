"""`placeto calibrate`: a cluster file fitted to the local devices.

The calibration graphs are run on local devices, the cluster model's timing parameters fitted to them
(simulator.measure.calibrate.calibrate_fit) and the cluster written.
"""

from __future__ import annotations

import argparse
import textwrap

from placeto.cli.arguments import DEVICE_SPEC
from simulator.arguments import POSITIVE
from simulator.hardware.devices import ensure_host_devices, spec_text
from simulator.measure.concurrency import Concurrency, concurrency_line, measure_concurrency
from simulator.measure.fit import format_fit
from simulator.model.cluster import cluster_summary, describe_devices, save_cluster
from simulator.model.errors import InputError
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
    check_output_path(args.out)
    ensure_host_devices(args.devices)  # before anything imports jax
    if args.repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    from simulator.measure.calibrate import calibrate_fit  # JAX's modules, after the host devices are set

    print(f"measuring the calibration graphs on local devices ({spec_text(args.devices)}), {args.repeats} steps "
          f"each ...", flush=True)
    fit = calibrate_fit(args.devices, args.repeats, args.name)
    cluster = fit.cluster
    save_cluster(cluster, args.out)
    print(format_fit(fit))
    print(f"{args.out}: {describe_devices(cluster)}, {cluster_summary(cluster)}")
    check_parallelism(args.devices)
    return 0


def check_parallelism(spec: int | tuple) -> Concurrency | None:
    """Measure the devices' concurrency and print its line.

    `measure_concurrency`, printed by `concurrency_line`; None (nothing printed) for one device or mixed
    platforms.
    """
    c = measure_concurrency(spec)
    if c is not None:
        print(concurrency_line(c))
    return c
