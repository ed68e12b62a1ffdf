"""The one objective all methods optimise, feasibility first; the simulator-call meter.

Objective (microseconds), of a placement with simulated runtime r and peak bytes p_d on devices of capacity c_d:

    r                                if it fits (p_d <= c_d on every device)
    U * (2 + x) + OOM_TIE * r        otherwise, x = sum_d max(p_d - c_d, 0) / c_d (its relative excess)

U is an upper bound on every placement's runtime on the cluster (`simulator.model.result.upper_bound`), so every
placement that fits (objective <= U) beats every one that does not (objective >= 2U), and among those that do not,
less relative excess beats more whatever the model's scale (the runtime only breaks what would otherwise be ties: its
term is below U * OOM_TIE). The Placeto environment rewards drops of this number (over the single-device runtime,
`objective_scale`), the searching methods minimise it, and `compare` ranks by it.

A graph with meta["objective"] == "max_load" (msr-fiddle's throughput inputs) is scored by its max-load
(simulator.model.max_load, the graph's time units) in place of the simulated runtime (`evaluate`), under the same
rule, U then bounding every placement's max-load (`objective_bound`).

Meter: every simulation a method makes (`score_batch`, `score_one`, or the environment's steps, which call
`record`) is counted by the innermost open `metered()` block, which also keeps the best objective seen and its
trace over wall time and calls (the anytime curve), and carries the block's budget: at most `max_calls`
simulations and/or a wall-clock deadline. Searching methods ask `meter().exhausted()`; the harness reads
the count from the meter, never from what a method reports.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import time
from typing import Iterator, NamedTuple

import numpy as np

from simulator import simulate, simulate_batch
from simulator.model.cluster import GB, Cluster
from simulator.model.graph import Graph
from simulator.model.max_load import is_max_load, max_load_batch, max_load_reference, model_of
from simulator.model.result import SimResult, upper_bound

OOM_TIE = 1e-6  # weight of the runtime in an out-of-memory placement's objective (< 1: excess decides first)
EVAL_CHUNK = 64  # placements per simulate_batch call


def objective_scale(graph: Graph, cluster: Cluster) -> float:
    """The rewards' unit: `graph`'s single-device runtime (us).

    On `cluster`'s device 0; > 0; cached on the graph.
    """
    key = ("objective_scale", cluster.kinds[0], cluster.delta1_us, cluster.delta2_us,
           cluster.bandwidth_bytes_per_us, float(cluster.host_model.dispatch_us[0]))  # device 0's host, if any
    if key not in graph.cache:
        zeros = np.zeros(graph.n_nodes, np.int32)
        single = (max_load_reference(graph, zeros, cluster)[0] if is_max_load(graph)
                  else simulate(graph, zeros, cluster).runtime)
        graph.cache[key] = max(float(single), 1e-9)
    return graph.cache[key]


def relative_excess(peak, capacity) -> np.ndarray:
    """float64[...] sum over devices of the bytes above capacity over the capacity (0: it fits).

    The one notion of out-of-memory every method's reward or objective uses. peak: bytes [..., D]; capacity:
    bytes [D], > 0.
    """
    cap = np.asarray(capacity, np.float64)
    return (np.maximum(np.asarray(peak, np.float64) - cap, 0.0) / cap).sum(-1)


def over_capacity_gb(peak, capacity) -> np.ndarray:
    """float64[...] GB above capacity, summed over devices (0: it fits); for reports."""
    return np.maximum(np.asarray(peak, np.float64) - np.asarray(capacity, np.float64), 0.0).sum(-1) / GB


def feasibility_first(runtime, peak, capacity, bound: float):
    """The objective (us) of runtimes [...] with peaks [..., D] on capacities [D]; see the module docstring.

    bound: an upper bound on every placement's runtime (us), > 0.
    """
    runtime = np.asarray(runtime, np.float64)
    excess = relative_excess(peak, capacity)
    return np.where(excess > 0, bound * (2.0 + excess) + OOM_TIE * runtime, runtime)


def objective_bound(graph: Graph, cluster: Cluster) -> float:
    """U of the module docstring (us, > 0): above every placement's runtime of `graph` on `cluster`.

    For a max-load graph, above every placement's max-load: every node's largest finite cost plus every output's
    cost twice (sent and received), as if one device held all of it.
    """
    if not is_max_load(graph):
        return max(upper_bound(graph, cluster), 1e-9)
    model = model_of(graph, cluster)
    cost = np.where(np.isfinite(model.cost), model.cost, 0.0).max(axis=1)
    return max(float(cost.sum()) + 2.0 * float(model.out_cost.sum()), 1e-9)


def fits_threshold(graph: Graph, cluster: Cluster) -> float:
    """Objectives below this fit in memory (2U: an out-of-memory objective is never lower)."""
    return 2.0 * objective_bound(graph, cluster)


@dataclasses.dataclass
class Meter:
    """Simulations counted, the best objective and its trace, a budget.

    `start` and `deadline` are perf_counter seconds.
    """

    max_calls: float = math.inf
    deadline: float = math.inf  # perf_counter time after which the budget is spent
    start: float = dataclasses.field(default_factory=time.perf_counter)
    calls: int = 0
    best: float = math.inf
    trace: list[tuple[float, int, float]] = dataclasses.field(default_factory=list)  # (seconds, calls, best)

    def record(self, scores: np.ndarray) -> None:
        """Count len(scores) simulations; note a better best objective."""
        scores = np.atleast_1d(np.asarray(scores, np.float64))
        self.calls += scores.size
        low = float(scores.min(initial=math.inf))
        if low < self.best:
            self.best = low
            self.trace.append((time.perf_counter() - self.start, self.calls, low))

    def exhausted(self) -> bool:
        """The call budget or the deadline is spent."""
        return self.calls >= self.max_calls or time.perf_counter() >= self.deadline

    def calls_left(self) -> float:
        return self.max_calls - self.calls

    def seconds_left(self) -> float:
        return self.deadline - time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("placeto_meter", default=None)
_UNMETERED = Meter()  # counts simulations made outside any metered() block (never exhausted)


@contextlib.contextmanager
def metered(max_calls: float | None = None, seconds: float | None = None) -> Iterator[Meter]:
    """Count and trace the block's simulations, within a budget.

    The budget: at most `max_calls` simulations and/or `seconds` of wall time.
    """
    now = time.perf_counter()
    m = Meter(max_calls=math.inf if max_calls is None else max_calls,
              deadline=math.inf if seconds is None else now + seconds, start=now)
    token = _METER.set(m)
    try:
        yield m
    finally:
        _METER.reset(token)


def meter() -> Meter:
    """The innermost open meter (outside any block: an unlimited one)."""
    return _METER.get() or _UNMETERED


def record(scores: np.ndarray) -> None:
    """Count simulations made elsewhere (the environment) on the meter."""
    meter().record(scores)


class Scores(NamedTuple):
    """A batch of placements scored: the objective and its parts."""

    objective: np.ndarray  # float64[B] feasibility-first objective, microseconds (what the meter records)
    runtime: np.ndarray  # float64[B] simulated runtime, microseconds
    over_gb: np.ndarray  # float64[B] GB above capacity summed over devices (0: fits in memory)
    excess: np.ndarray  # float64[B] relative excess (`relative_excess`; 0: fits in memory)


def score_batch(graph: Graph, placements: np.ndarray, cluster: Cluster) -> np.ndarray:
    """float64[B] objectives of placements int[B, N]; metered.

    Batched, on all cores.
    """
    return score_batch_parts(graph, placements, cluster).objective


def score_batch_parts(graph: Graph, placements: np.ndarray, cluster: Cluster) -> Scores:
    """`score_batch`, with runtime and memory apart; counted by the meter once, by the objective."""
    placements = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int32)
    cap = np.asarray(cluster.memory, dtype=np.float64)
    runtime, peak = [], []
    for i in range(0, placements.shape[0], EVAL_CHUNK):
        chunk_runtime, chunk_peak = evaluate(graph, placements[i:i + EVAL_CHUNK], cluster)
        runtime.append(chunk_runtime)
        peak.append(chunk_peak)
    runtime = np.concatenate(runtime) if runtime else np.zeros(0)
    peak = np.concatenate(peak) if peak else np.zeros((0, cluster.n_devices))
    scores = feasibility_first(runtime, peak, cap, objective_bound(graph, cluster))
    record(scores)
    return Scores(scores, runtime, over_capacity_gb(peak, cap), relative_excess(peak, cap))


def score_one(graph: Graph, placement: np.ndarray, cluster: Cluster) -> tuple[float, SimResult]:
    """(objective, full result) of one placement int[N]; metered.

    On a max-load graph the result is the simulator's, the objective max-load's (`evaluate`).
    """
    res = simulate(graph, np.asarray(placement, np.int32), cluster)
    runtime, peak = res.runtime, res.peak_memory
    if is_max_load(graph):
        runtime, peak = max_load_reference(graph, placement, cluster)
    score = float(feasibility_first(runtime, peak, res.capacity, objective_bound(graph, cluster)))
    record(np.asarray([score]))
    return score, res


def evaluate(graph: Graph, placements: np.ndarray, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """(runtime float64[B], peak bytes float64[B, D]) of placements int32[B, N]; not metered.

    The simulator's runtime (us) and peak memory; on a graph with meta["objective"] == "max_load" (msr-fiddle's
    throughput model, simulator.model.max_load) its max-load (the graph's time units) and bytes per device instead.
    """
    if is_max_load(graph):
        return max_load_batch(graph, placements, cluster)
    res = simulate_batch(graph, placements, cluster, with_memory=True)
    return np.asarray(res.runtime, np.float64), np.asarray(res.peak_memory, np.float64)
