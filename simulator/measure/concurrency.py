"""Do D devices really run at once? D chains of matmuls run together against the same chains one after the other.

The work is a placement's kind of work, not a probe built to overlap: each chain is one jitted computation of
`length` dense `size` x `size` float32 matmuls (x <- tanh(x @ w)), about 0.7 Gflop per matmul at 700, so tens of
milliseconds on one core. Three ways to run D such chains, each a `Chains` (together(), apart(): both block until
all D chains are done):

* `host_chains(devices)`: JAX's host CPU devices of one process (`--xla_force_host_platform_device_count`), one
  chain committed to each; together = all dispatched, then waited for; apart = one device after the other;
* `rig_chains(rig)`: the process rig (`simulator.hardware.rig.pool`), one chain per worker; together = every worker
  asked at once; apart = one worker after the other;
* `numpy_chains(n)`: n Python threads doing the same matmuls in NumPy (which releases the interpreter lock inside
  BLAS): the ceiling this machine allows; single-threaded BLAS only if the caller set OPENBLAS_NUM_THREADS=1 (or
  the like) before NumPy started (the benchmark, experiments/benchmarks/rig_concurrency.py, does).

`measure(chains, rounds)` times every way in interleaved rounds (round r starts at way r mod W, and within a way
alternates whether together or apart comes first), so load that comes and goes hits them alike, and reports the
medians: speedup = apart / together, D when the devices run fully at once, 1 when they take turns. `speedup` is
the one-number check (`placeto.harness.calibration.measure_concurrency` calls it on the rig in use).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

SIZE, LENGTH = 700, 8  # the default chain: 8 matmuls of 700 x 700


class Chains(NamedTuple):
    """D chains of matmuls, run all at once or one after the other (each call blocks until they are done)."""

    n: int  # chains (devices)
    together: Callable[[], None]
    apart: Callable[[], None]
    close: Callable[[], None] = lambda: None


class Overlap(NamedTuple):
    """Median wall-clock times (us) of D chains together and apart, and their ratio."""

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
    """One jitted chain committed to each JAX device of `devices` (see the module docstring)."""
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
    """One chain per worker of a `simulator.hardware.rig.pool.ProcessRig`, exported and loaded as a placed stage is
    (fn(token, x, w) -> (token, chain(x, w))); close() frees it on the workers."""
    import jax
    import jax.numpy as jnp

    from simulator.hardware.rig.worker import Run

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
    """n chains in NumPy: together = one Python thread each, apart = one after the other in the caller."""
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
    """{name: Overlap} of every way (see the module docstring: interleaved rounds, medians)."""
    from simulator.hardware.timing import gc_paused

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
    """apart / together of one way of running D chains (medians of `rounds` interleaved rounds)."""
    return measure({"chains": chains}, rounds)["chains"].speedup
