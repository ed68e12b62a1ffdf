"""Measured per-node costs on the local JAX backend.

Each equation node is run alone: `jax.jit` of a function binding its primitive with the same params
(control-flow nodes bind `scan`/`while`/`cond` with their bodies), on random inputs of the right shapes and
dtypes (floats standard normal, integers and booleans zero, so indices stay in range and integer loops run
their counted trips; a `while` whose trip count depends on float data may run long). Literal operands are kept
as constants. The time is the median wall-clock time of `repeats` calls after `warmup` calls (the first compiles),
blocking on the outputs, so it includes one dispatch of a jitted function: `dispatch_overhead_us` measures that
floor with a trivial function and `annotate_measured` records it in the graph meta. Identical equations
(primitive, operand shapes/dtypes, literals, params) are timed once. Input, param and const nodes cost 0.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from simulator.model.errors import InputError
from simulator.model.graph import Graph

if TYPE_CHECKING:
    import jax.extend.core as jcore

    from simulator.tracing.trace import Traced

# jax on first use, function by function: simulator.tracing.lowering and export and simulator.measure.graph_profile
# import this module and must load without jax (simulator.hardware.devices sets XLA flags before jax starts)


def local_kind() -> str:
    """The local backend's device kind: its platform ("cpu", "gpu", "tpu")."""
    import jax  # jax on first use

    return jax.devices()[0].platform


def random_operand(aval: Any, rng: np.random.Generator) -> Any:
    """A random array of `aval`'s shape and dtype.

    Floats standard normal, integers and booleans zero (indices stay in range, integer loops run their counted
    trips), PRNG keys split from key 0.
    """
    import jax  # jax on first use

    shape, dtype = aval.shape, aval.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        keys = jax.random.split(jax.random.key(0), max(1, int(np.prod(shape))))
        return keys[: int(np.prod(shape))].reshape(shape)
    if jax.numpy.issubdtype(dtype, jax.numpy.inexact):
        return jax.numpy.asarray(rng.standard_normal(shape), dtype=dtype)
    return jax.numpy.zeros(shape, dtype=dtype)


def _bind_fn(eqn: jcore.JaxprEqn) -> Callable:
    """A function of the equation's non-literal operands, binding its primitive.

    It applies the primitive once, the literal operands filled in.
    """
    import jax.extend.core as jcore  # jax on first use

    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = params if isinstance(params, tuple) else ((), params)
    literals = {k: a.val for k, a in enumerate(eqn.invars) if isinstance(a, jcore.Literal)}
    n = len(eqn.invars)

    def apply(*operands):
        it = iter(operands)
        args = [literals[k] if k in literals else next(it) for k in range(n)]
        with eqn.ctx.manager:
            return eqn.primitive.bind(*subfuns, *args, **params)

    return apply


def equation_signature(eqn: jcore.JaxprEqn) -> str:
    """What makes two equations do the same work, as a string.

    The primitive, the operand avals (literals by value) and the params.
    """
    import jax.extend.core as jcore  # jax on first use

    ops = [f"lit:{a.val!r}:{a.aval}" if isinstance(a, jcore.Literal) else str(a.aval) for a in eqn.invars]
    params = sorted((k, repr(v)) for k, v in eqn.params.items())
    return f"{eqn.primitive.name}|{ops}|{params}"


def _median_us(fn: Callable, args: Sequence[Any], repeats: int, warmup: int) -> float:
    import jax  # jax on first use

    for _ in range(max(1, warmup)):  # the first call compiles
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def time_equation(eqn: jcore.JaxprEqn, repeats: int = 5, warmup: int = 2, seed: int = 0) -> float:
    """Median microseconds of one call of the equation alone.

    On the default device, with random operands (`random_operand`).
    """
    import jax  # jax on first use
    import jax.extend.core as jcore

    rng = np.random.default_rng(seed)
    operands = [random_operand(a.aval, rng) for a in eqn.invars if not isinstance(a, jcore.Literal)]
    return _median_us(jax.jit(_bind_fn(eqn)), operands, repeats, warmup)


def dispatch_overhead_us(repeats: int = 50, warmup: int = 2) -> float:
    """Median microseconds of a jitted call doing nearly nothing.

    The floor included in every timing of `time_equation`.
    """
    import jax  # jax on first use

    x = jax.numpy.zeros(())
    return _median_us(jax.jit(lambda a: a + 1), [x], repeats, warmup)


def profile_graph(traced: Traced, repeats: int = 5, warmup: int = 2, seed: int = 0) -> np.ndarray:
    """float64[N] measured microseconds of every node of `traced.graph`.

    On the local default device; identical equations are timed once.

    Raises:
      InputError: repeats < 1.
    """
    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    cache: dict[str, float] = {}
    out = np.zeros(traced.graph.n_nodes)
    for i, eqn in enumerate(traced.equations):
        if eqn is None:
            continue  # input, param, const
        key = equation_signature(eqn)
        if key not in cache:
            cache[key] = time_equation(eqn, repeats, warmup, seed)
        out[i] = cache[key]
    return out


def annotate_measured(graph: Graph, traced: Traced, kind: str | None = None, repeats: int = 5,
                      warmup: int = 2, seed: int = 0) -> Graph:
    """A copy of `graph` with measured costs under `kind`, and how.

    `graph` is the traced graph, possibly with other costs; `kind` defaults to the local platform; the measuring
    conditions (how) go to meta["profile"][kind].

    Raises:
      InputError: `graph` is not the graph of `traced`.
    """
    if graph.n_nodes != traced.graph.n_nodes or graph.names != traced.graph.names:
        raise InputError(f"graph {graph.name!r} is not the graph of this trace ({traced.graph.name!r})")
    kind = kind or local_kind()
    cost = profile_graph(traced, repeats, warmup, seed)
    return with_measured(graph, kind, cost, {"repeats": repeats, "warmup": warmup,
                                             "dispatch_overhead_us": round(dispatch_overhead_us(), 3)})


def with_measured(graph: Graph, kind: str, cost: np.ndarray, info: dict, device: Any = None) -> Graph:
    """`graph` with measured costs (float64[N] microseconds) under `kind`.

    The conditions go to meta["profile"][kind]: the device (default: the first local one), its platform, the JAX
    version and `info` (None values left out). The entry also marks the kind as measured, so dataset rebuilds keep
    it.
    """
    import jax  # jax on first use

    device = jax.devices()[0] if device is None else device
    meta = dict(graph.meta)
    meta["profile"] = {**meta.get("profile", {}), kind: {
        "device": str(device.device_kind), "platform": device.platform, "jax_version": jax.__version__,
        **{k: v for k, v in info.items() if v is not None}}}
    return dataclasses.replace(graph, meta=meta).with_costs(kind, cost)
