"""`heft`: Heterogeneous Earliest Finish Time (Topcuoglu et al. 2002), without insertion, memory-aware.

Nodes are taken in decreasing upward rank (mean compute + the longest mean-communication path below them);
each goes to the device where it would finish first given device availability and input arrival (cost and
memory model in `_listsched`). Without insertion a node is appended after the last node put on its device,
which matches the simulator's FIFO device queues better than filling idle gaps would.

Complexity O(N log N + P * D) with the numba kernel; `_listsched.heft_reference` is the plain oracle.
"""

from __future__ import annotations

import numba
import numpy as np

from placeto.baselines._listsched import Schedule, ScheduleProblem, build_problem, heft_order
from placeto.baselines.etf import _data_ready, _tiers
from simulator.cluster import Cluster
from simulator.graph import Graph


def heft(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """int32[N] the devices HEFT schedules the nodes on."""
    del seed  # deterministic
    prob = build_problem(graph, cluster)
    return heft_schedule(prob, heft_order(prob, graph.topo_order)).device


def heft_schedule(prob: ScheduleProblem, order: np.ndarray) -> Schedule:
    """The HEFT schedule for nodes in `order` (fast path, equal to `_listsched.heft_reference`)."""
    return Schedule(*_heft_kernel(order.astype(np.int64), *prob))


@numba.njit(cache=True)
def _heft_kernel(order, cost, par_off, par, comm, ch_off, ch, need, persistent, capacity, delta1, rank):
    n, n_dev = cost.shape
    device = np.full(n, -1, np.int32)
    start, end = np.zeros(n), np.zeros(n)
    avail, used, used_p = np.zeros(n_dev), np.zeros(n_dev), np.zeros(n_dev)
    dr = np.zeros(n_dev)
    tier = np.empty(n_dev, np.int64)
    for v in order:
        _data_ready(v, par_off, par, comm, device, end, dr)
        t_best = _tiers(v, need, persistent, capacity, used, used_p, tier)
        bf, bs, bd = np.inf, np.inf, n_dev
        for d in range(n_dev):
            if tier[d] != t_best:
                continue
            s = max(avail[d], dr[d])
            f = s + cost[v, d]
            if (f, s, d) < (bf, bs, bd):
                bf, bs, bd = f, s, d
        c = cost[v, bd]
        device[v], start[v], end[v] = bd, bs, bs + c
        avail[bd] = end[v] + delta1 if c > 0 else end[v]
        used[bd] += need[v]
        used_p[bd] += persistent[v]
    return device, start, end
