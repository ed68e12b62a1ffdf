"""The one objective all methods optimise; the simulator-call meter.

Objective (microseconds): simulated runtime + `penalty_per_gb` * scale * (GB above capacity, summed over
devices), where scale = the graph's single-device runtime on the cluster (no penalty). The Placeto environment
rewards drops of exactly this number, the searching methods minimise it, and `compare` ranks by it.

Meter: every simulation a method makes (`score_batch`, `score_one`, or the environment's steps, which call
`record`) is counted by the innermost open `metered()` block, which also keeps the best objective seen and its
trace over wall time and calls (the anytime curve), and carries the block's budget: at most `max_calls`
simulations and/or a wall-clock deadline. Searching methods ask `meter().exhausted()`; the harness reads
the count from the meter, never from what a method reports.

A graph with meta["objective"] == "max_load" (msr-fiddle's throughput inputs) is scored by its max-load
(simulator.model.max_load, the graph's time units) in place of the simulated runtime: `_evaluate`.
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
from simulator.model.max_load import is_max_load, max_load_batch, max_load_reference
from simulator.model.result import SimResult

PENALTY_PER_GB = 1.0  # default memory penalty, in single-device runtimes per GB above capacity
EVAL_CHUNK = 64  # placements per simulate_batch call


def objective_scale(graph: Graph, cluster: Cluster) -> float:
    """The memory penalty's unit: `graph`'s single-device runtime (us).

    On `cluster`; > 0; cached on the graph.
    """
    key = ("objective_scale", cluster.kinds[0], cluster.delta1_us, cluster.delta2_us,
           cluster.bandwidth_bytes_per_us, float(cluster.host_model.dispatch_us[0]))  # device 0's host, if any
    if key not in graph.cache:
        zeros = np.zeros(graph.n_nodes, np.int32)
        single = (max_load_reference(graph, zeros, cluster)[0] if is_max_load(graph)
                  else simulate(graph, zeros, cluster).runtime)
        graph.cache[key] = max(float(single), 1e-9)
    return graph.cache[key]


def penalised(runtime, peak, capacity, scale: float, per_gb: float = PENALTY_PER_GB):
    """The objective (us): runtime plus the memory penalty.

    runtime + per_gb * scale * (bytes above capacity summed over devices) / GB.

    Args:
      runtime: microseconds, a scalar or float[B].
      peak: bytes [..., D].
      capacity: bytes [D].
    """
    return runtime + per_gb * scale * over_capacity_gb(peak, capacity)


def over_capacity_gb(peak, capacity) -> np.ndarray:
    """float64[...] GB above capacity, summed over devices (0: it fits).

    The one notion of out-of-memory every method's reward or objective uses. peak: bytes [..., D]; capacity:
    bytes [D].
    """
    return np.maximum(np.asarray(peak, np.float64) - np.asarray(capacity, np.float64), 0.0).sum(-1) / GB


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
    """A batch of placements scored: the objective and its two parts."""

    objective: np.ndarray  # float64[B] memory-penalised runtime, microseconds (what the meter records)
    runtime: np.ndarray  # float64[B] simulated runtime, microseconds
    over_gb: np.ndarray  # float64[B] GB above capacity summed over devices (0: fits in memory)


def score_batch(graph: Graph, placements: np.ndarray, cluster: Cluster, per_gb: float = PENALTY_PER_GB) -> np.ndarray:
    """float64[B] objectives of placements int[B, N]; metered.

    Batched, on all cores.
    """
    return score_batch_parts(graph, placements, cluster, per_gb).objective


def score_batch_parts(graph: Graph, placements: np.ndarray, cluster: Cluster,
                      per_gb: float = PENALTY_PER_GB) -> Scores:
    """`score_batch`, with runtime and over-capacity apart.

    For rewards that treat memory their own way (e.g. the RNN placer's fixed out-of-memory penalty). Counted by
    the meter once, by the objective.
    """
    placements = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int32)
    cap = np.asarray(cluster.memory, dtype=np.float64)
    scale = objective_scale(graph, cluster)
    runtime, over = [], []
    for i in range(0, placements.shape[0], EVAL_CHUNK):
        chunk_runtime, peak = _evaluate(graph, placements[i:i + EVAL_CHUNK], cluster)
        runtime.append(chunk_runtime)
        over.append(over_capacity_gb(peak, cap))
    runtime = np.concatenate(runtime) if runtime else np.zeros(0)
    over = np.concatenate(over) if over else np.zeros(0)
    scores = runtime + per_gb * scale * over
    record(scores)
    return Scores(scores, runtime, over)


def score_one(graph: Graph, placement: np.ndarray, cluster: Cluster,
              per_gb: float = PENALTY_PER_GB) -> tuple[float, SimResult]:
    """(objective, full result) of one placement int[N]; metered.

    On a max-load graph the result is the simulator's, the objective max-load's (`_evaluate`).
    """
    res = simulate(graph, np.asarray(placement, np.int32), cluster)
    runtime, peak = res.runtime, res.peak_memory
    if is_max_load(graph):
        runtime, peak = max_load_reference(graph, placement, cluster)
    score = float(penalised(runtime, peak, res.capacity, objective_scale(graph, cluster), per_gb))
    record(np.asarray([score]))
    return score, res


# ---- the evaluator: the simulator, or max-load for graphs that ask for it ------------------------------------
def _evaluate(graph: Graph, placements: np.ndarray, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """(runtime float64[B], peak bytes float64[B, D]) of placements int32[B, N].

    The simulator's runtime (us) and peak memory; on a graph with meta["objective"] == "max_load" (msr-fiddle's
    throughput model, simulator.model.max_load) its max-load (the graph's time units) and bytes per device instead.
    """
    if is_max_load(graph):
        return max_load_batch(graph, placements, cluster)
    res = simulate_batch(graph, placements, cluster, with_memory=True)
    return np.asarray(res.runtime, np.float64), np.asarray(res.peak_memory, np.float64)
