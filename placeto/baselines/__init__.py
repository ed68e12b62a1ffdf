"""Baseline placement methods, one file each, all `(graph, cluster, seed, **options) -> int32[N]`.

| name | what it optimises | simulator calls |
|---|---|---|
| `single` | nothing: every node on the first accelerator ("Single-GPU") | 0 |
| `cpu-only` | nothing: every node on the CPU (clusters with a "cpu" device only) | 0 |
| `random` | best of `budget` uniform random placements | budget |
| `expert` | the human placement shipped in `graph.meta["expert_placement"]` | 0 |
| `metis` | METIS k-way min byte cut, compute-balanced, all devices | 0 |
| `scotch` | Scotch min byte cut, compute-balanced, all devices (Mirhoseini et al.) | 0 |
| `mincut` | Scotch min byte cut over the GPUs only, memory-balanced (Mirhoseini et al. 2018) | 0 |
| `etf` | m-ETF list scheduling: earliest start, memory-aware | 0 |
| `heft` | HEFT list scheduling: upward-rank order, earliest finish, memory-aware | 0 |
| `local-search` | simulated annealing over single-node moves from the better of single/etf | budget |

Methods that do not apply (no expert placement, no CPU) raise `NotApplicable`.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from placeto.baselines._common import (DEFAULT_BUDGET, Method, NotApplicable, as_placement,
                                       count_simulator_calls)
from placeto.baselines.etf import etf
from placeto.baselines.expert import expert
from placeto.baselines.heft import heft
from placeto.baselines.local_search import local_search
from placeto.baselines.metis import metis
from placeto.baselines.mincut import mincut
from placeto.baselines.random_search import random_search
from placeto.baselines.scotch import scotch
from placeto.baselines.single import cpu_only, single
from simulator.cluster import Cluster
from simulator.errors import InputError
from simulator.graph import Graph

METHODS: dict[str, Method] = {
    "single": single,
    "cpu-only": cpu_only,
    "random": random_search,
    "expert": expert,
    "metis": metis,
    "scotch": scotch,
    "mincut": mincut,
    "etf": etf,
    "heft": heft,
    "local-search": local_search,
}
BUDGETED = frozenset({"random", "local-search"})  # methods that take `budget` (simulator calls)


class MethodRun(NamedTuple):
    """One method's placement. placement: int32[N]; simulator_calls: placements it simulated; seconds: wall."""

    placement: np.ndarray
    simulator_calls: int
    seconds: float


def get_method(name: str) -> Method:
    """The method registered as `name`; InputError listing the known names otherwise."""
    if name not in METHODS:
        raise InputError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return METHODS[name]


def run_method(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: int = DEFAULT_BUDGET,
               **options) -> MethodRun:
    """Run method `name`, timing it and counting its simulator calls; `budget` goes to the searching methods.

    Raises NotApplicable (an InputError) if the method does not apply to this graph or cluster.
    """
    method = get_method(name)
    if name in BUDGETED:
        options["budget"] = budget
    t0 = time.perf_counter()
    with count_simulator_calls() as counter:
        placement = method(graph, cluster, seed, **options)
    seconds = time.perf_counter() - t0
    return MethodRun(as_placement(placement, graph, cluster), counter.calls, seconds)


__all__ = ["BUDGETED", "DEFAULT_BUDGET", "METHODS", "Method", "MethodRun", "NotApplicable", "get_method",
           "run_method", *(f.__name__ for f in METHODS.values())]
