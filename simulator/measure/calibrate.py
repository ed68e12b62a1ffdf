"""Calibrates the cluster model on local devices; times executed units.

`calibrate(n)` (`placeto calibrate`) runs the calibration graphs of `simulator.measure.fit.calibration_probes`
with `simulator.hardware.dispatch` exactly as placed graphs are run (synthetic kernels, a token chain per device,
one dispatching thread per device), each step timed `repeats` times, interleaved, and fits the cluster model's six
timing parameters to the lower-quartile step times by least squares (`simulator.measure.fit.fit_cluster`):
delta1, delta2, bandwidth, a per-transfer latency, and the host time of each op's dispatch and each transfer,
shared by all local devices (one process: its dispatching threads take turns on the interpreter lock).
`calibrate_fit` also returns the fit report (every probe's residual, R^2).

What the probes see (jax 0.10, CPU host devices): a device loses tens of microseconds per op beyond the op's own
work (dispatch, the hand-over to the CPU client's thread pool, the next task's start), and a transfer costs tens
of microseconds of host work (`jax.device_put` of a CPU array in the sending thread, whatever its size) plus the
receiving thread's wake-up: the fit splits these into delta1 and dispatch, and into transfer host time, latency
and wire time, by how they overlap across devices (simulator.measure.fit).

Probe times are lower quartiles of `repeats` steps (the machine may be shared, and load only adds). Each of the
cluster's devices has its own kind, `simulator.hardware.devices.kind_of` ("local-cpu", "local-h200", ...: the kind
`placeto profile` records measured costs under), so a mixed spec ("gpu:0,cpu:0") gives a heterogeneous cluster;
its memory is the device's `memory_stats()["bytes_limit"]` when JAX reports one (GPUs), else the machine's
physical memory (host devices share it).

What the fit assumes with mixed devices: the probes run on the first two devices of the spec, each synthetic
kernel's trip count set from that device's own `calibrate_kernel`, so a probe node takes its cost on either
device; the six fitted parameters are shared by all devices, so delta1 and the dispatch time are those of the
probe pair taken together, and bandwidth and latency those of a transfer between the two (for "gpu:0,cpu:0":
host<->device copies). Devices after the second are assumed to behave like them.
Whether the devices really run concurrently (the simulator assumes they do) is simulator.measure.concurrency's.

`profile_plan(plan)` times every task of a plan alone (median of repeats, minus the same measurement of a
trivial task, so the dispatch and synchronisation floor is not counted twice with delta1): the cost of the unit
as actually executed (a group as one fused XLA computation), for comparison with op-level profiles, which time
every op alone and so count one dispatch floor per op. `calibrate_kernel` measures the synthetic kernels that
run cost-only graphs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from simulator.measure import cache
from simulator.model.cluster import Cluster, Device, load_cluster, save_cluster
from simulator.model.errors import InputError
from simulator.measure.fit import Fit, Probe, calibration_probes, cluster_with, fit_cluster
from simulator.model.graph import DEFAULT_KIND
from simulator.hardware.dispatch import Plan, run_plan
from simulator.hardware.devices import device_count, kind_of, local_devices
from simulator.hardware.plans import compile_task
from simulator.hardware.synthetic import KernelModel, kernel_body, synthetic_plan
from simulator.hardware.timing import time_interleaved

DEFAULT_MEMORY = 64 * 10**9  # bytes, when the machine does not say


def machine_memory_bytes() -> float:
    """The host's physical memory in bytes (DEFAULT_MEMORY if unknown)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float(DEFAULT_MEMORY)


def device_memory_bytes(device: Any) -> float:
    """Bytes of memory of a JAX device.

    memory_stats()["bytes_limit"] when reported (GPUs), else the host's physical memory (CPU host devices share it).
    """
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 -- backends without memory stats raise various errors
        stats = {}
    limit = stats.get("bytes_limit")
    return float(limit) if limit else machine_memory_bytes()


def _median_us(run: Callable[[], Any], repeats: int, q: float = 0.5) -> float:
    """Median (or quantile `q`) microseconds of run(), after one warm-up call.

    run() blocks until its work is done.
    """
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e6)
    return float(np.quantile(times, q))


def calibrate(spec: int | tuple = 2, repeats: int = 7, name: str | None = None) -> Cluster:
    """A Cluster of the local devices of `spec`, its timing fitted.

    By `calibrate_fit`.
    """
    return calibrate_fit(spec, repeats, name).cluster


def local_cluster(spec: int | tuple, name: str | None = None) -> tuple[Cluster, list]:
    """A zero-timing Cluster of the local devices of `spec`, and the devices.

    `spec` is a count, or a platform:index list. Device names are "/<platform>:<index>" (the spec's index, else the
    position), kinds from `kind_of`, memory from `device_memory_bytes`; the name is the kinds joined, e.g.
    "local-h200+local-cpu".

    Returns:
      (the Cluster, the JAX devices).
    """
    devices = local_devices(spec)
    indices = range(len(devices)) if isinstance(spec, int) else [i for _, i in spec]
    kinds = [kind_of(d) for d in devices]
    cluster = Cluster(name=name or "+".join(dict.fromkeys(kinds)) + "-calibrated",
                      devices=tuple(Device(f"/{d.platform}:{i}", k, device_memory_bytes(d))
                                    for d, i, k in zip(devices, indices, kinds)),
                      delta1_us=0.0, delta2_us=0.0, bandwidth_bytes_per_us=1e9)
    return cluster, devices


def calibrate_fit(spec: int | tuple = 2, repeats: int = 7, name: str | None = None) -> Fit:
    """Fits the cluster model to the calibration graphs run on `spec`.

    `spec` is a count n (the first n of the default backend) or a platform:index list, maybe mixed; the graphs run
    on its first two devices when there are several. See the module docstring for what the fit assumes with mixed
    devices. With one device only delta1 is fitted (dispatch, a per-op cost too, cannot be told apart from it
    without a second device sharing the host); there is nothing to transfer.

    Returns:
      The fit report (simulator.measure.fit.Fit), its cluster the fitted one (`local_cluster`: every device with
      its own kind).
    """
    n_devices = device_count(spec)
    base, devices = local_cluster(spec, name)
    kernels = [calibrate_kernel(d) for d in devices[:2]]
    slowest = min(kernels, key=lambda k: k.fill_bytes_per_us)  # a minimal task both probe devices can take
    probes = measure_probes(devices[:2], calibration_probes(n_devices, kernel_task_us(slowest)), repeats)
    if n_devices == 1:
        fit = fit_cluster(probes, base, free=("delta1_us",), fixed={"us_per_mb": 1e-3})
    else:
        fit = fit_cluster(probes, base)
    params = {k: round(v, 3) for k, v in fit.params.items()}  # a readable cluster file
    cluster = cluster_with(base, params)
    return fit._replace(cluster=dataclasses.replace(cluster, bandwidth_bytes_per_us=round(
        cluster.bandwidth_bytes_per_us, 3)), params=params)


def kernel_task_us(kernel: KernelModel) -> Callable[[int], float]:
    """task_us(out_bytes): microseconds of a minimal synthetic task.

    The task writes out_bytes; at least 1 us.
    """
    return lambda out_bytes: max(1.0, out_bytes / kernel.fill_bytes_per_us)


def measure_probes(devices: Sequence, probes: Sequence[Probe], repeats: int = 7, warmup: int = 2) -> list[Probe]:
    """The probes with measured_us: the lower quartile of `repeats` steps each.

    Run by simulator.hardware.dispatch as placed graphs are (synthetic kernels taking each node's cost), the probes
    interleaved round by round as placements are (simulator.hardware.timing.time_interleaved). Lower quartile: on a
    shared machine load only adds.
    """
    kernels = [calibrate_kernel(d) for d in devices]  # each device's own: mixed devices run it at different speeds
    plans = [synthetic_plan(p.graph, p.placement, p.graph.cost_for(DEFAULT_KIND), devices, kernels)
             for p in probes]
    times = time_interleaved(plans, repeats, warmup)
    return [p._replace(measured_us=float(np.quantile(t, 0.25))) for t, p in zip(times, probes)]


def dispatch_floor_us(device: Any, repeats: int = 21, q: float = 0.5) -> float:
    """Latency (us) of one trivial task, dispatched alone and waited for.

    The median, or quantile `q`.
    """
    import jax
    import jax.numpy as jnp

    fn = compile_task(lambda x: (x + 1,), device)
    tok, x = (jax.device_put(jnp.zeros((), t), device) for t in (jnp.int8, jnp.float32))
    return _median_us(lambda: jax.block_until_ready(fn(tok, x)), repeats, q)


def profile_plan(plan: Plan, repeats: int = 5) -> np.ndarray:
    """float64[U] microseconds of each unit run alone, net of dispatch.

    Each unit runs on its device; the floor is `dispatch_floor_us`; 0 for units with nothing to run. U = max unit
    index + 1.

    Raises:
      InputError: a staged plan (build it with stages=False).
    """
    import jax

    if plan.staged:
        raise InputError("profile_plan times units one by one: build the plan with stages=False")
    _, env = run_plan(plan)  # compiles, and leaves every unit's inputs on its device
    floors = {d: dispatch_floor_us(dev) for d, dev in enumerate(plan.devices)}
    cost = np.zeros(max((t.unit for t in plan.tasks), default=-1) + 1)
    for t in plan.tasks:
        if t.fn is None:
            continue
        token = env[("token", t.device)]
        args = [env[(s, t.device)] for s in t.inputs]
        fn = t.fn
        cost[t.unit] = max(0.0, _median_us(lambda: jax.block_until_ready(fn(token, *args)), repeats)
                           - floors[t.device])
    return cost


@functools.lru_cache(maxsize=None)
def calibrate_kernel(device: Any, size: int = 64, repeats: int = 7) -> KernelModel:
    """The synthetic kernel's speed on `device`, measured once per process.

    The kernel is simulator.hardware.synthetic.synthetic_plan's. Time per loop iteration (chains of kernels of 0 and
    1000 iterations) and output fill rate (an 8 MB output), both in chains of 4 kernels so dispatch overlaps the
    previous kernel, as in a step.
    """
    import jax
    import jax.numpy as jnp

    n_iter, fill = 1000, 8 * 2**20

    def per_kernel_us(iters: int, out_bytes: int) -> float:
        fn = compile_task(kernel_body((out_bytes,), size), device)
        tok0 = jax.device_put(jnp.zeros((), jnp.int8), device)
        trips = jax.device_put(jnp.int32(iters), device)

        def run():
            tok = tok0
            for _ in range(4):
                tok, _out = fn(tok, trips)
            jax.block_until_ready(tok)

        return _median_us(run, repeats) / 4

    base = per_kernel_us(0, 1)
    iter_us = max((per_kernel_us(n_iter, 1) - base) / n_iter, 1e-3)
    fill_us = max(per_kernel_us(0, fill) - base, 1e-3)
    return KernelModel(iter_us, fill / fill_us, size)


def cached_cluster(devices: Sequence[Any], spec: Any, repeats: int = 7,
                   progress: Callable[[str], None] = print) -> Cluster:
    """The calibrated cluster of `devices`: cached, or measured and cached.

    `devices` are resolved from the --devices `spec`; the cache is simulator.measure.cache.cluster_cache_path, a
    miss measured by `calibrate_fit`; `place --hardware` and `eval --hardware` share it. A damaged or stale entry
    (unreadable, or not of these devices: their count and cost kinds) is named in one warning on stderr and
    measured again, replacing it; an entry that cannot be written is a warning too (the calibration is used, not
    cached).
    """
    def read(path: Path) -> Cluster:
        cluster = load_cluster(path)
        cache.check_cached_cluster(cluster, devices)
        return cluster

    path = cache.cluster_cache_path(devices)
    return cache.cached(path, read, lambda: calibrate_fit(spec, repeats).cluster, lambda c: save_cluster(c, path),
                   f"cluster: {path} (cached calibration; delete it to measure again)",
                   f"calibrating {len(devices)} local devices (cached afterwards in {path}) ...",
                   "damaged or stale calibration cache entry", "the calibration", progress)
