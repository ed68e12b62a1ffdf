"""Do D devices really run at once? D matmul chains, together and apart.

D chains of matmuls run together against the same chains one after the other. The work is a placement's kind
of work, not a probe built to overlap: each chain is one jitted computation of `length` dense `size` x `size`
float32 matmuls (x <- tanh(x @ w)), about 0.7 Gflop per matmul at 700, so tens of milliseconds on one core.
Three ways to run D such chains, each a `Chains` (together(), apart(): both block until all D chains are done):

* `host_chains(devices)`: JAX's host CPU devices of one process (`--xla_force_host_platform_device_count`), one
  chain committed to each; together = all dispatched, then waited for; apart = one device after the other;
* `rig_chains(rig)`: the process rig (`simulator.hardware.rig.pool`), one chain per worker; together = every
  worker asked at once; apart = one worker after the other;
* `numpy_chains(n)`: n Python threads doing the same matmuls in NumPy (which releases the interpreter lock inside
  BLAS): the ceiling the host allows; single-threaded BLAS only if the caller set OPENBLAS_NUM_THREADS=1 (or the
  like) before NumPy started (the benchmark, experiments/benchmarks/rig_concurrency.py, does).

`measure(chains, rounds)` times every way in interleaved rounds (round r starts at way r mod W, and within a way
alternates whether together or apart comes first), so load that comes and goes hits them alike, and reports the
medians: speedup = apart / together, D when the devices run fully at once, 1 when they take turns. `speedup` is
the one-number check (`simulator.measure.concurrency.measure_concurrency` calls it on the rig in use).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.hardware.devices import device_count, local_devices
from simulator.hardware.rig.worker import Run
from simulator.hardware.timing import gc_paused

SIZE, LENGTH = 700, 8  # the default chain: 8 matmuls of 700 x 700


class Chains(NamedTuple):
    """D chains of matmuls, run all at once or one after the other.

    Each call blocks until the chains are done.
    """

    n: int  # chains (devices)
    together: Callable[[], None]
    apart: Callable[[], None]
    close: Callable[[], None] = lambda: None


class Overlap(NamedTuple):
    """Median wall-clock times (us) of D chains together and apart."""

    n: int
    together_us: float
    apart_us: float

    @property
    def speedup(self) -> float:
        """apart / together: n when the devices run fully at once, 1 when they take turns."""
        return self.apart_us / self.together_us


def _operands(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((size, size), dtype=np.float32)
    w = rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
    return x, w


def chain_fn(length: int) -> Callable:
    """f(x, w) -> x after `length` steps of tanh(x @ w) (jax.numpy)."""
    import jax.numpy as jnp

    def chain(x, w):
        for _ in range(length):
            x = jnp.tanh(x @ w)
        return x

    return chain


def host_chains(devices: Sequence[Any], size: int = SIZE, length: int = LENGTH, seed: int = 0) -> Chains:
    """One jitted chain committed to each JAX device of `devices`."""
    import jax

    fn = jax.jit(chain_fn(length))
    args = [[jax.device_put(a, d) for a in _operands(size, seed + k)] for k, d in enumerate(devices)]
    for a in args:
        jax.block_until_ready(fn(*a))  # compile, once per device

    def together():
        jax.block_until_ready([fn(*a) for a in args])

    def apart():
        for a in args:
            jax.block_until_ready(fn(*a))

    return Chains(len(devices), together, apart)


def rig_chains(rig: Any, size: int = SIZE, length: int = LENGTH, seed: int = 0) -> Chains:
    """One chain per worker of a `simulator.hardware.rig.pool.ProcessRig`.

    Each is exported and loaded as a placed stage is (fn(token, x, w) -> (token, chain(x, w))); close() frees it on
    the workers.
    """
    import jax
    import jax.numpy as jnp

    def stage(token, x, w):
        return token, chain_fn(length)(x, w)

    sds = jax.ShapeDtypeStruct((size, size), jnp.float32)
    blob = bytes(jax.export.export(jax.jit(stage))(jax.ShapeDtypeStruct((), jnp.int8), sds, sds).serialize())
    stage_id, plan_id = rig.new_id(), rig.new_id()
    x_id, w_id, out_id = rig.new_id(), rig.new_id(), rig.new_id()
    workers = range(rig.n_devices)
    rig.call_all({d: ("load", [(stage_id, blob)]) for d in workers})
    rig.call_all({d: ("put", list(zip((x_id, w_id), _operands(size, seed + d)))) for d in workers})
    rig.call_all({d: ("plan", plan_id, (Run(stage_id, 0, (x_id, w_id), (out_id,)),), None, ()) for d in workers})
    rig.call_all({d: ("run", plan_id) for d in workers})  # compile

    def together():
        rig.call_all({d: ("run", plan_id) for d in workers})

    def apart():
        for d in workers:
            rig.call(d, ("run", plan_id))

    def close():
        if not rig.closed:
            rig.call_all({d: ("free", plan_id) for d in workers})
            rig.call_all({d: ("drop", (x_id, w_id)) for d in workers})

    return Chains(rig.n_devices, together, apart, close)


def numpy_chains(n: int, size: int = SIZE, length: int = LENGTH, seed: int = 0) -> Chains:
    """n chains in NumPy: a Python thread each, or one after the other.

    Apart, the chains run one after the other in the caller.
    """
    args = [_operands(size, seed + k) for k in range(n)]

    def chain(x, w):
        for _ in range(length):
            x = np.tanh(x @ w)
        return x

    def together():
        threads = [threading.Thread(target=chain, args=a) for a in args]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def apart():
        for a in args:
            chain(*a)

    return Chains(n, together, apart)


def measure(ways: dict[str, Chains], rounds: int = 7, warmup: int = 1) -> dict[str, Overlap]:
    """{name: Overlap} of every way, in interleaved rounds.

    Medians of the rounds; see the module docstring.
    """
    names = list(ways)
    for name in names:
        for _ in range(warmup):
            ways[name].together()
            ways[name].apart()
    times = {name: ([], []) for name in names}
    for r in range(rounds):
        for name in np.roll(names, -r).tolist():
            pair = (0, 1) if r % 2 == 0 else (1, 0)
            for which in pair:
                run = ways[name].together if which == 0 else ways[name].apart
                with gc_paused():
                    t0 = time.perf_counter()
                    run()
                    times[name][which].append((time.perf_counter() - t0) * 1e6)
    return {name: Overlap(ways[name].n, float(np.median(t)), float(np.median(a))) for name, (t, a) in times.items()}


def speedup(chains: Chains, rounds: int = 5) -> float:
    """apart / together of one way of running D chains.

    Medians of `rounds` interleaved rounds.
    """
    return measure({"chains": chains}, rounds)["chains"].speedup


CONCURRENT = 0.75  # devices "run concurrently" when n independent chains finish at least 0.75 n times faster


class Concurrency(NamedTuple):
    """How concurrently the local devices ran a placement's kind of work.

    Measured as simulator.measure.concurrency does: n chains of 700x700 matmuls, one per device, at once against one
    device after the other.
    """

    n: int  # devices
    speedup: float  # the n chains one after the other over all at once (n: fully concurrent, 1: taking turns)
    cores: int  # the host's CPU cores (os.cpu_count)
    load: float  # 1-minute load average when measured
    platform: str  # the devices' platform, "cpu" for host CPU devices (which share the machine's cores)
    rig: str = "threads"  # where they ran: "threads" (this process's JAX devices) or "processes" (process rig)

    @property
    def concurrent(self) -> bool:
        """Whether the devices ran in parallel as the simulator assumes.

        speedup >= CONCURRENT * n.
        """
        return self.speedup >= CONCURRENT * self.n

    @property
    def ceiling(self) -> int:
        """The most the host can give: n, but one host CPU device per core."""
        return min(self.n, self.cores) if self.platform == "cpu" else self.n


def measure_concurrency(spec: int | tuple, rig: Any = None, rounds: int = 5) -> Concurrency | None:
    """Measures how concurrently the devices of `spec` run placed work.

    n chains of 8 matmuls of 700x700, one per device, all at once against one device after the other
    (simulator.measure.concurrency), on the rig in use.

    Args:
      spec: a count n, or a platform:index list.
      rig: a simulator.hardware.rig.pool.ProcessRig (one chain per worker), or None: this process's JAX devices.
      rounds: interleaved rounds.

    Returns:
      The Concurrency, or None for one device or mixed platforms (their speeds differ, so the ratio would not say
      it).
    """
    if device_count(spec) < 2:
        return None
    devices = local_devices(spec)
    if len({d.platform for d in devices}) > 1:
        return None
    chains = rig_chains(rig) if rig is not None else host_chains(devices)
    try:
        ratio = speedup(chains, rounds)
    finally:
        chains.close()
    return Concurrency(len(devices), ratio, os.cpu_count() or 1, os.getloadavg()[0], devices[0].platform,
                       "processes" if rig is not None else "threads")


def concurrency_line(c: Concurrency) -> str:
    """One line: the devices' measured speedup against the simulated n.

    When the devices do not run concurrently, also what that means for measured and simulated speedups.
    """
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
    """Whether a speedup is more than the devices' concurrency explains.

    `speedup` is the placement's, times the single device's speed; beyond: above SPEEDUP_SLACK times the devices'
    measured concurrency (`c.speedup`, at least 1). False when the concurrency was not measured (one device, or
    mixed platforms).
    """
    return c is not None and speedup > SPEEDUP_SLACK * max(c.speedup, 1.0)


def beyond_note(c: Concurrency, final: float, first: float | None = None) -> str:
    """Words for a speedup over the single device that was `beyond_concurrency`.

    `final` is the last measurement, `first` the one before it when it was measured again. Where `final` is still
    beyond: that it held, and so that the gain does not come (devices that run concurrently: not only) from running
    the devices at once; else what the first measurement gave.
    """
    allows = f"the {c.speedup:.2f}x the devices' measured concurrency allows"
    if first is not None and not beyond_concurrency(final, c):
        return f"measured again: the first fresh steps gave {first:.2f}x, beyond {allows}"
    how = f" (on two sets of fresh steps: {first:.2f}x, then {final:.2f}x)" if first is not None else ""
    why = ("more than running the devices at once can give" if c.concurrent else
           "the gain is not from running the devices at once")
    return (f"{final:.2f}x is BEYOND {allows}{how}: {why} (splitting the step into stages can itself make XLA "
            f"faster; docs/hardware.md)")
