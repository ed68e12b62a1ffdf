"""Calibrating the simulator's cluster model on the local JAX devices, and measuring executed units.

`calibrate(n)` measures, by running small synthetic graphs with `simulator.hardware` exactly as placed graphs
are run (a token chain per device, one dispatching thread per device):

* delta1 (per-op overhead): a chain of 64 minimal tasks on one device, time per task: what a device loses per op
  beyond the op's own work (dispatch, the hand-over to the CPU client's thread pool, the next task's start);
* delta2 and bandwidth (per-transfer overhead, transfer rate): a chain of 24 minimal tasks alternating between
  devices 0 and 1, each passing b bytes to the next, against the same chain on device 0; the extra time per hop,
  for b from 4 KB to 4 MB, is fitted as delta2 + b / bandwidth (Theil-Sen: the median pairwise slope). It is
  dominated by host work (`jax.device_put` of a CPU array costs tens of microseconds in the sending thread,
  whatever its size) and the receiving thread's wake-up. The simulator charges b / bandwidth as the transfer's
  latency and delta2 as time the sender's bus stays busy after it (its model has no latency intercept), so in a
  dependent chain it sees a transfer as about delta2 cheaper than the machine does.

Chain times are lower quartiles of `repeats` steps (the machine may be shared, and load only adds). The
cluster's devices have kind "local-<platform>" (the kind `placeto profile` records measured costs under) and
each the machine's physical memory: host devices share it.
`measure_parallelism` says whether the devices really run concurrently (the simulator assumes they do).

`profile_plan(plan)` times every task of a plan alone (median of repeats, minus the same measurement of a
trivial task, so the dispatch and synchronisation floor is not counted twice with delta1): the cost of the unit
as actually executed (a group as one fused XLA computation), for comparison with op-level profiles, which time
every op alone and so count one dispatch floor per op. `calibrate_kernel` measures the synthetic kernels that
run cost-only graphs.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from simulator.cluster import Cluster, Device
from simulator.errors import InputError
from simulator.hardware import Plan, _compiled, run_plan
from simulator.host_devices import local_devices
from simulator.synthetic_kernels import KernelModel, _kernel_body

CHAIN = 64  # tasks per delta1 chain
HOPS = 24  # tasks per transfer chain
SIZES = (4 * 2**10, 64 * 2**10, 256 * 2**10, 2**20, 4 * 2**20)  # transfer sizes, bytes
DEFAULT_MEMORY = 64 * 10**9  # bytes, when the machine does not say


def machine_memory_bytes() -> float:
    """Physical memory of this machine in bytes (DEFAULT_MEMORY if unknown)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float(DEFAULT_MEMORY)


def _median_us(run: Callable[[], Any], repeats: int, q: float = 0.5) -> float:
    """Median (or quantile `q`) microseconds of run() (which blocks), after one warm-up call."""
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e6)
    return float(np.quantile(times, q))


def _chain_us(devices: Sequence, placement: Sequence[int], nbytes: int, repeats: int) -> float:
    """Lower-quartile step time (us) of a chain of minimal synthetic tasks, each passing `nbytes` to the next,
    task k on devices[placement[k]], run by simulator.hardware exactly as a placed graph is."""
    from simulator.graph import make_graph
    from simulator.hardware import time_plan
    from simulator.synthetic_kernels import synthetic_plan

    k = len(placement)
    nodes = [{"name": f"n{i}", "cost": 1.0, "out_bytes": [nbytes]} for i in range(k)]
    chain = make_graph("chain", nodes, [(i, i + 1, 0) for i in range(k - 1)])
    plan = synthetic_plan(chain, placement, np.ones(k), devices, calibrate_kernel(devices[0]))
    return float(np.quantile(time_plan(plan, repeats, warmup=2).times_us, 0.25))


def measure_delta1(devices: Sequence, repeats: int = 15) -> float:
    """Per-task overhead (us) in a chain of minimal tasks on one device."""
    return _chain_us(devices[:1], [0] * CHAIN, 4, repeats) / CHAIN


def measure_transfers(devices: Sequence, repeats: int = 15,
                      sizes: Sequence[int] = SIZES) -> tuple[float, float, np.ndarray]:
    """(delta2_us, bandwidth_bytes_per_us, float64[S] extra us per hop at each size): a chain of minimal tasks
    alternating between devices 0 and 1 against the same chain on device 0, extra time per hop fitted as
    delta2 + b / bandwidth."""
    if len(devices) < 2:
        raise InputError("measuring transfers needs at least 2 devices")
    extra = []
    for b in sizes:
        same = _chain_us(devices[:2], [0] * HOPS, b, repeats)
        alternating = _chain_us(devices[:2], [k % 2 for k in range(HOPS)], b, repeats)
        extra.append((alternating - same) / (HOPS - 1))
    extra = np.maximum(np.asarray(extra), 0.0)
    slope, intercept = theil_sen(np.asarray(sizes, dtype=np.float64), extra)
    bandwidth = 1.0 / slope if slope > 0 else float(sizes[-1]) / max(extra[-1], 1e-3)
    return max(intercept, 0.0), float(bandwidth), extra


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line: the median pairwise slope, robust to a noisy point."""
    i, j = np.triu_indices(len(x), 1)
    keep = x[j] != x[i]
    slope = float(np.median((y[j] - y[i])[keep] / (x[j] - x[i])[keep]))
    return slope, float(np.median(y - slope * x))


def measure_parallelism(devices: Sequence, kernel_us: float = 1000.0, per_device: int = 8,
                        repeats: int = 5) -> float:
    """Speedup of len(devices) independent chains of `per_device` ~1 ms kernels, one chain per device, over the
    same kernels chained on one device. len(devices) if the devices really run concurrently; about 1 when the
    machine cannot give them a core each (fewer cores than devices, or cores busy with other work)."""
    import jax
    import jax.numpy as jnp

    kernel = calibrate_kernel(devices[0])
    fns = [_compiled(_kernel_body((4,), kernel.size), d) for d in devices]
    trips = [jax.device_put(jnp.int32(kernel.iterations(kernel_us, 4)), d) for d in devices]
    tok0 = [jax.device_put(jnp.zeros((), jnp.int8), d) for d in devices]

    def run(spread: bool):
        tokens = list(tok0)
        for _ in range(per_device):
            for k in range(len(devices)):
                d = k if spread else 0
                tokens[d], _out = fns[d](tokens[d], trips[d])
        jax.block_until_ready(tokens)

    return _median_us(lambda: run(False), repeats) / _median_us(lambda: run(True), repeats)


def calibrate(n_devices: int, repeats: int = 7, name: str | None = None) -> Cluster:
    """A Cluster of the first `n_devices` local JAX devices with measured delta1, delta2 and bandwidth."""
    devices = local_devices(n_devices)
    kind = f"local-{devices[0].platform}"
    delta1 = measure_delta1(devices, repeats)
    if n_devices > 1:
        delta2, bandwidth, _ = measure_transfers(devices, repeats)
    else:
        delta2, bandwidth = 0.0, 1e9  # nothing to transfer between
    memory = machine_memory_bytes()
    return Cluster(name=name or f"{kind}-calibrated",
                   devices=tuple(Device(f"/{devices[0].platform}:{i}", kind, memory) for i in range(n_devices)),
                   delta1_us=round(delta1, 3), delta2_us=round(delta2, 3),
                   bandwidth_bytes_per_us=round(bandwidth, 3))


def dispatch_floor_us(device: Any, repeats: int = 21, q: float = 0.5) -> float:
    """Median (or quantile `q`) latency (us) of one trivial task, dispatched alone and waited for."""
    import jax
    import jax.numpy as jnp

    fn = _compiled(lambda x: (x + 1,), device)
    tok, x = (jax.device_put(jnp.zeros((), t), device) for t in (jnp.int8, jnp.float32))
    return _median_us(lambda: jax.block_until_ready(fn(tok, x)), repeats, q)


def profile_plan(plan: Plan, repeats: int = 5) -> np.ndarray:
    """float64[U] microseconds of every unit of the plan run alone on its device, net of the dispatch floor
    (`dispatch_floor_us`); 0 for units with nothing to run. U = max unit index + 1."""
    import jax

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
    """The synthetic kernel's speed on `device` (simulator.synthetic_kernels.synthetic_plan), measured once per
    process: time per loop iteration (chains of kernels of 0 and 1000 iterations) and output fill rate (an 8 MB
    output), both in chains of 4 kernels so dispatch overlaps the previous kernel, as in a step."""
    import jax
    import jax.numpy as jnp

    n_iter, fill = 1000, 8 * 2**20

    def per_kernel_us(iters: int, out_bytes: int) -> float:
        fn = _compiled(_kernel_body((out_bytes,), size), device)
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
