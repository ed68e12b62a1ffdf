"""Input limits keeping every simulated time finite; their checks.

Why these numbers. In the simulator (simulator.engine.reference) every event happens while some device runs an op or
idles its delta1 after one, or some bus sends a tensor or idles its delta2 after one, or a transfer is in flight
for its latency, or a host runs a dispatch or transfer job (a device or bus waiting for its host means the host
is busy): nothing else creates events. So the runtime, and every start, end, arrival and free time, is at most

    sum_i max_d cost[i, d] + N * (delta1 + dispatch) + sum_o out_bytes[o] / bandwidth
        + O * (delta2 + latency + transfer)                                                (microseconds)

(each op runs once, each output is sent at most once; dispatch and transfer the largest host times).
`check_simulable` requires that sum to stay below MAX_TIME_US, which keeps every time finite with room to spare
(float64 overflows near 1.8e308 only). The per-value limits below reject absurd values at the file boundary with
a message naming the field; the sum check catches the combinations (many large costs, or a slow bus and large
tensors).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from simulator.model.errors import InputError

MAX_TIME_US = 1e15  # bound on every simulated time: about 31.7 years
MAX_COST_US = 1e12  # one op's compute time: about 11.6 days
MAX_BYTES = 1e18  # one tensor, one node's persistent bytes, one device's memory: 1 EB
MAX_DELTA_US = 1e9  # delta1, delta2, latency and host times: 1000 seconds
MIN_BANDWIDTH = 1e-3  # bytes per microsecond (1 KB/s)
MAX_BANDWIDTH = 1e15  # bytes per microsecond
MAX_DEVICES = 1024  # devices of one cluster
MAX_INDEX = 2**31 - 1  # node, output and device indices (stored as int32)
MAX_SEED = 2**32 - 1  # random seeds (jax.random.key and numpy take 32-bit seeds)
MAX_MICROBATCHES = 1024  # microbatches of one step (meta.microbatches, --microbatches): the expanded graph has
# up to M times the nodes, so a larger M is a memory error, not a pipeline


def number(value: Any, where: str, lo: float = 0.0, hi: float = math.inf, unit: str = "",
           lo_open: bool = False) -> float:
    """`value` as a float, checked: a JSON number in [lo, hi].

    Not a bool; with `lo_open`, in (lo, hi]. Integers are compared before conversion, so a 5,000-digit integer is an
    error, not an OverflowError.

    Raises:
      InputError: naming `where` (and `unit`), otherwise.
    """
    unit = f" {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{where}: {short_repr(value)} is not a number")
    if isinstance(value, (int, np.integer)) and not -2**1023 < int(value) < 2**1023:
        raise InputError(f"{where}: {short_repr(value)} is out of range [{lo:g}, {hi:g}]{unit}")
    x = float(value)
    if not math.isfinite(x):
        raise InputError(f"{where}: {x!r} is not a finite number")
    if x < lo or x > hi or (lo_open and x == lo):
        bracket = "(" if lo_open else "["
        raise InputError(f"{where}: {x!r} is out of range {bracket}{lo:g}, {hi:g}]{unit}")
    return x


def integer(value: Any, where: str, lo: int = 0, hi: int = MAX_INDEX) -> int:
    """`value` as an int, checked: an integer in [lo, hi].

    Not a bool; checked before any cast.

    Raises:
      InputError: naming `where`, for a bool, a non-integer or a value out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{where}: {short_repr(value)} is not an integer")
    if not lo <= int(value) <= hi:
        raise InputError(f"{where}: {short_repr(value)} is out of range [{lo}, {hi}]")
    return int(value)


def short_repr(value: Any, width: int = 40) -> str:
    """repr of `value`, cut to `width` characters, for error messages.

    A 5,000-digit number must not flood the message. Huge integers are described by their digit count: their
    repr would hit Python's int-to-str digit limit.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def time_bound_us(cost: np.ndarray, out_bytes: np.ndarray, delta1: float, delta2: float,
                  bandwidth: float, latency: float = 0.0, dispatch: float = 0.0, transfer: float = 0.0) -> float:
    """The bound on every simulated time, microseconds.

    The module docstring's sum.

    Args:
      cost: float64[N, D] microseconds.
      out_bytes: float64[O] bytes.
      delta1, delta2, latency: microseconds.
      bandwidth: bytes per microsecond.
      dispatch, transfer: the largest host dispatch and transfer times, microseconds.
    """
    n, o = cost.shape[0], out_bytes.shape[0]
    compute = float(cost.max(axis=1).sum()) if cost.size else 0.0
    transfer_time = float(out_bytes.sum()) / bandwidth if o else 0.0
    return compute + n * (delta1 + dispatch) + transfer_time + o * (delta2 + latency + transfer)


def check_simulable(cost: np.ndarray, out_bytes: np.ndarray, delta1: float, delta2: float, bandwidth: float,
                    what: str, source: str | None = None, latency: float = 0.0, dispatch: float = 0.0,
                    transfer: float = 0.0) -> None:
    """Check values are in range and the time bound below MAX_TIME_US.

    Arguments as `time_bound_us`'s; costs and bytes must be non-negative, the delays in [0, MAX_DELTA_US], the
    bandwidth in [MIN_BANDWIDTH, MAX_BANDWIDTH].

    Raises:
      InputError: naming `what` (e.g. the graph and cluster) and `source`, otherwise.
    """
    if not (np.all(np.isfinite(cost)) and np.all(cost >= 0) and np.all(np.isfinite(out_bytes))
            and np.all(out_bytes >= 0)):
        raise InputError(f"{what}: costs and output bytes must be finite and non-negative", source)
    for name, v in (("delta1_us", delta1), ("delta2_us", delta2), ("latency_us", latency),
                    ("dispatch_us", dispatch), ("transfer_us", transfer)):
        if not 0 <= v <= MAX_DELTA_US:
            raise InputError(f"{what}: field {name!r}: {v!r} is out of range [0, {MAX_DELTA_US:g}] us", source)
    if not MIN_BANDWIDTH <= bandwidth <= MAX_BANDWIDTH:
        raise InputError(f"{what}: field 'bandwidth_bytes_per_us': {bandwidth!r} is out of range "
                         f"[{MIN_BANDWIDTH:g}, {MAX_BANDWIDTH:g}]", source)
    bound = time_bound_us(cost, out_bytes, delta1, delta2, bandwidth, latency, dispatch, transfer)
    if not bound < MAX_TIME_US:
        raise InputError(f"{what}: simulated times could reach {bound:.3g} us (sum of the largest costs, "
                         f"transfer times and delays), above the limit {MAX_TIME_US:g} us", source)


def check_graph_on_cluster(graph: Any, cluster: Any, cost: np.ndarray) -> None:
    """check_simulable for a simulator.Graph on a simulator.Cluster.

    `cost` is the graph's cost matrix on the cluster, float64[N, D] microseconds. The error names both and the
    files they came from.
    """
    sources = [s for s in (getattr(graph, "source", None), getattr(cluster, "source", None)) if s]
    hosts = cluster.host_model
    check_simulable(cost, graph.out_bytes, cluster.delta1_us, cluster.delta2_us, cluster.bandwidth_bytes_per_us,
                    f"graph {graph.name!r} on cluster {cluster.name!r}", " and ".join(sources) or None,
                    cluster.latency_us, float(hosts.dispatch_us.max()), float(hosts.transfer_us.max()))


def field(obj: Mapping, key: str, where: str, types: type | tuple[type, ...], default: Any = ...) -> Any:
    """obj[key], type-checked; `default` if it is missing.

    The value must be of `types`; a bool passes only where bool is named.

    Raises:
      InputError: naming `where` and the key, if `obj` is not a mapping, the key is missing and no `default`
        is given, or the value has the wrong type.
    """
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: expected an object")
    if key not in obj:
        if default is ...:
            raise InputError(f"{where}: missing field {key!r}")
        return default
    value = obj[key]
    types = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise InputError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value
