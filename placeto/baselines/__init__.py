"""Baseline placement methods, one file each, behind one signature.

Each method is `(graph, cluster, seed, **options) -> int32[N]`, the device index per node.

| name | what it optimises | simulator calls |
|---|---|---|
| `single` | nothing: every node on the device the graph alone runs fastest on (simulated; preferring one it fits; ties: the first accelerator) | 0 |
| `cpu-only` | nothing: every node on the CPU (clusters with a "cpu" device only) | 0 |
| `random` | best of `budget` uniform random placements | budget |
| `expert` | the human placement shipped in `graph.meta["expert_placement"]` | 0 |
| `metis` | METIS k-way min byte cut, compute-balanced, all devices | 0 |
| `scotch` | Scotch min byte cut, compute-balanced, all devices (Mirhoseini et al.) | 0 |
| `mincut` | Scotch min byte cut over the GPUs only, memory-balanced (Mirhoseini et al. 2018) | 0 |
| `etf` | Baechi's m-ETF list scheduling: earliest start (on a device where the node finishes first), transfers booked on device channels, memory-aware | 0 |
| `m-sct` | Baechi's m-SCT: m-ETF that keeps LP-chosen favourite children on their parent's device | 0 |
| `m-topo` | Baechi's m-TOPO: topological order, each device filled up to an equal memory share (assumes identical devices) | 0 |
| `heft` | HEFT list scheduling: upward-rank order, earliest finish, memory-aware | 0 |
| `local-search` | hill climbing (a little annealing) over single-node moves from the best list schedule | budget |
| `sa` | simulated annealing: calibrated geometric schedule, restarts from the best (`placeto.baselines.sa`) | budget |
| `pipeline-dp` | memory-constrained contiguous split of a topological order into stages, least max-load (`pipeline/split`) | 0 |

Methods that do not apply (no expert placement, no CPU) raise `NotApplicable`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from placeto.baselines.common import DEFAULT_BUDGET, Method, NotApplicable, as_placement, default_seconds
from placeto.compile_time import excluded
from placeto.objective import metered
from placeto.baselines.etf import etf
from placeto.baselines.expert import expert
from placeto.baselines.heft import heft
from placeto.baselines.local_search import local_search
from placeto.baselines.m_sct import m_sct
from placeto.baselines.m_topo import m_topo
from placeto.baselines.metis import metis
from placeto.baselines.mincut import mincut
from placeto.baselines.pipeline.split import pipeline_dp
from placeto.baselines.random_search import random_search
from placeto.baselines.scotch import scotch
from placeto.baselines.single import cpu_only, single
from placeto.baselines.sa import sa
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph

METHODS: dict[str, Method] = {
    "single": single,
    "cpu-only": cpu_only,
    "random": random_search,
    "expert": expert,
    "metis": metis,
    "scotch": scotch,
    "mincut": mincut,
    "etf": etf,
    "m-sct": m_sct,
    "m-topo": m_topo,
    "heft": heft,
    "local-search": local_search,
    "sa": sa,
    "pipeline-dp": pipeline_dp,
}
BUDGETED = frozenset({"random", "local-search", "sa"})  # methods that take `budget` (simulator calls)


class MethodRun(NamedTuple):
    """One method's placement and what it cost."""

    placement: np.ndarray  # int32[N] device index per node
    simulator_calls: int  # placements it simulated
    seconds: float  # wall time, compilation excluded
    trace: tuple = ()  # ((seconds, calls, best objective so far), ...) at each improvement: the anytime curve
    compile_seconds: float = 0.0  # compilation met inside the run (placeto.compile_time), not in `seconds`


def get_method(name: str) -> Method:
    """The method registered as `name`.

    Raises:
      InputError: no method has that name (the message lists the known names).
    """
    if name not in METHODS:
        raise InputError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return METHODS[name]


def run_method(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = DEFAULT_BUDGET,
               seconds: float | None = None, **options) -> MethodRun:
    """Run method `name` in a meter that counts and limits its calls.

    The meter (`placeto.objective.metered`) traces the best objective and holds the budget: `budget` simulator
    calls (None: unlimited) and/or `seconds` of wall time, which the searching methods spend (the others ignore
    it). A kernel that compiles inside the run (numba, not warmed up) moves the deadline and is reported in
    `compile_seconds`, not in `seconds`.

    Raises:
      NotApplicable: (an InputError) the method does not apply to this graph or cluster.
      InputError: an unknown name, or a searching method given neither `budget` nor `seconds`.
    """
    method = get_method(name)
    if name in BUDGETED:
        if budget is None and seconds is None:
            raise InputError(f"method {name!r} needs a budget of simulator calls or seconds")
        options["budget"] = math.inf if budget is None else budget
    with metered(seconds=seconds) as m, excluded(m) as jit:
        placement = method(graph, cluster, seed, **options)
        elapsed = m.elapsed() - jit.seconds
    return MethodRun(as_placement(placement, graph, cluster), m.calls, elapsed, tuple(m.trace), jit.seconds)


__all__ = ["BUDGETED", "DEFAULT_BUDGET", "METHODS", "default_seconds", "Method", "MethodRun", "NotApplicable", "get_method",
           "run_method", *(f.__name__ for f in METHODS.values())]
