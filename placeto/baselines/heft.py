"""`heft`: HEFT list scheduling without insertion, memory-aware.

Heterogeneous Earliest Finish Time (Topcuoglu et al. 2002). Nodes are taken in decreasing upward rank (mean
compute + the longest mean-communication path below them); each goes to the device where it would finish first
given device availability and when its inputs can be there, booking its transfers on the device channels
(transfer and memory model: `listsched.problem`, shared with `etf`). Without insertion a node is appended after
the last node put on its device, which matches the simulator's FIFO device queues better than filling idle gaps
would.

Complexity O(N log N + N * D * inputs) with the numba kernel; `listsched.problem.heft_reference` is the plain
oracle.
"""

from __future__ import annotations

import numba
import numpy as np

from placeto.baselines.listsched.problem import (DEFAULT_TRANSFER_MODEL, Schedule, ScheduleProblem, build_problem,
                                          heft_order)
from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def heft(graph: Graph, cluster: Cluster, seed: int = 0, model: str = DEFAULT_TRANSFER_MODEL) -> np.ndarray:
    """Devices int32[N] HEFT schedules the nodes on.

    Deterministic: `seed` is unused. `model` names a `listsched.problem.TRANSFER_MODELS` entry.
    """
    del seed  # deterministic
    prob = build_problem(graph, cluster, model)
    return heft_schedule(prob, heft_order(prob, graph.topo_order)).device


def heft_schedule(prob: ScheduleProblem, order: np.ndarray) -> Schedule:
    """HEFT's schedule of `order`, the fast path of `heft_reference`."""
    tl = new_timeline(prob)
    _heft_kernel(order.astype(np.int64), prob, tl)
    return Schedule(tl.device, tl.start, tl.end)


@numba.njit(cache=True)
def _heft_kernel(order, prob, tl):
    n_dev = prob.cost.shape[1]
    tiers = np.empty(n_dev, np.int64)
    for v in order:
        for d in range(n_dev):
            tiers[d] = tier(v, d, prob, tl)
        best_tier = tiers.min()
        bf, bs, bd = np.inf, np.inf, n_dev
        for d in range(n_dev):
            if tiers[d] != best_tier:
                continue
            s = max(ready_time(v, d, False, prob, tl)[0], tl.avail[d])
            f = s + prob.cost[v, d]
            if (f, s, d) < (bf, bs, bd):
                bf, bs, bd = f, s, d
        place(v, bd, bs, prob, tl)
