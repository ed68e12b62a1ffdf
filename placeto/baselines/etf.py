"""`etf`: earliest task first with memory limits (Baechi's m-ETF), a list scheduler that also places.

Repeatedly, among the nodes whose parents are all scheduled, start the (node, device) pair that can start
soonest, given when each device is free and when the node's inputs arrive there (see `_listsched` for the cost
and memory model). Ties: earlier finish, higher upward rank, lower node index, lower device index. The start
times it picks never decrease, so its estimated schedule reads like the simulator's timeline.

Complexity O(N * R * D + P * D) for R the largest ready set (at most the graph's width): about a second for
20k nodes on 8 devices with the numba kernel; `_listsched.etf_reference` is the plain oracle.
"""

from __future__ import annotations

import numba
import numpy as np

from placeto.baselines._listsched import Schedule, ScheduleProblem, build_problem
from simulator.cluster import Cluster
from simulator.graph import Graph


def etf(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """int32[N] the devices m-ETF schedules the nodes on."""
    del seed  # deterministic
    return etf_schedule(build_problem(graph, cluster)).device


def etf_schedule(prob: ScheduleProblem) -> Schedule:
    """The m-ETF schedule (fast path, equal to `_listsched.etf_reference`)."""
    return Schedule(*_etf_kernel(*prob))


@numba.njit(cache=True)
def _tiers(v, need, persistent, capacity, used, used_p, tier):
    """Fill tier[d] (0: charged bytes fit, 1: persistent fit, 2: neither); return the best tier."""
    best = 2
    for d in range(capacity.shape[0]):
        if used[d] + need[v] <= capacity[d]:
            tier[d] = 0
        elif used_p[d] + persistent[v] <= capacity[d]:
            tier[d] = 1
        else:
            tier[d] = 2
        best = min(best, tier[d])
    return best


@numba.njit(cache=True)
def _data_ready(v, par_off, par, comm, device, end, out):
    out[:] = 0.0
    for j in range(par_off[v], par_off[v + 1]):
        p = par[j]
        for d in range(out.shape[0]):
            t = end[p] + (comm[j] if device[p] != d else 0.0)
            out[d] = max(out[d], t)


@numba.njit(cache=True)
def _etf_kernel(cost, par_off, par, comm, ch_off, ch, need, persistent, capacity, delta1, rank):
    n, n_dev = cost.shape
    device = np.full(n, -1, np.int32)
    start, end = np.zeros(n), np.zeros(n)
    avail, used, used_p = np.zeros(n_dev), np.zeros(n_dev), np.zeros(n_dev)
    pending = par_off[1:] - par_off[:-1]
    ready = np.empty(n, np.int64)  # ready[:n_ready] unordered; ties are broken by node index, not position
    n_ready = 0
    dr = np.zeros((n, n_dev))  # time node's inputs are all on each device, filled when it becomes ready
    tier = np.empty(n_dev, np.int64)
    for v in range(n):
        if pending[v] == 0:
            ready[n_ready] = v
            n_ready += 1
    for _ in range(n):
        bs, bf, br, bv, bd, bi = np.inf, np.inf, np.inf, n, n_dev, -1
        for i in range(n_ready):
            v = ready[i]
            t_best = _tiers(v, need, persistent, capacity, used, used_p, tier)
            for d in range(n_dev):
                if tier[d] != t_best:
                    continue
                s = max(avail[d], dr[v, d])
                f = s + cost[v, d]
                r = -rank[v]
                if (s, f, r, v, d) < (bs, bf, br, bv, bd):
                    bs, bf, br, bv, bd, bi = s, f, r, v, d, i
        v, d = bv, bd
        ready[bi] = ready[n_ready - 1]
        n_ready -= 1
        c = cost[v, d]
        device[v], start[v], end[v] = d, bs, bs + c
        avail[d] = end[v] + delta1 if c > 0 else end[v]
        used[d] += need[v]
        used_p[d] += persistent[v]
        for j in range(ch_off[v], ch_off[v + 1]):
            w = ch[j]
            pending[w] -= 1
            if pending[w] == 0:
                _data_ready(w, par_off, par, comm, device, end, dr[w])
                ready[n_ready] = w
                n_ready += 1
    return device, start, end
