"""The list schedulers' shared model and their plain-Python references (the oracles for the numba kernels).

Cost model, a simplification of the simulator's (simulator/reference.py):

* node v runs on device d for cost[v, d] us; the device can start its next op delta1 us later (not after a
  zero-cost op);
* a child on another device than its parent p gets p's data comm[p -> v] = bytes / bandwidth + delta2 us after p
  ends, where bytes sums the distinct outputs of p that v consumes. delta2 stands in for the bus being busy
  between transfers; the simulator's bus queue and its one-transfer-per-output sharing are not modelled;
* memory: device d is charged need[v] = persistent + output bytes of every node put on it, never freed. This
  over-estimates the peak (outputs are freed once consumed) and ignores received copies. A node goes to a device
  where that estimate fits (tier 0); if none, to one where its persistent bytes fit (tier 1, a necessary
  condition); if none, anywhere (tier 2). Devices are compared only within the best tier available.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from placeto.baselines._common import memory_need, pair_bytes
from simulator.cluster import Cluster
from simulator.graph import Graph


class ScheduleProblem(NamedTuple):
    """A graph on a cluster as the list schedulers see it. N nodes, D devices, P distinct parent pairs."""

    cost: np.ndarray  # float64[N, D] compute time of node on device, us
    par_off: np.ndarray  # int64[N + 1] CSR offsets of distinct parents
    par: np.ndarray  # int32[P] parents, sorted per node
    comm: np.ndarray  # float64[P] parent end -> data at this node on another device, us
    ch_off: np.ndarray  # int64[N + 1] CSR offsets of distinct children
    ch: np.ndarray  # int32[P] children
    need: np.ndarray  # float64[N] bytes charged on the node's device (persistent + outputs)
    persistent: np.ndarray  # float64[N] bytes held for the whole step
    capacity: np.ndarray  # float64[D] device memory, bytes
    delta1: float  # device idle after a non-zero-cost op, us
    rank: np.ndarray  # float64[N] upward rank: mean cost + max over children (mean comm + rank), us


def build_problem(graph: Graph, cluster: Cluster) -> ScheduleProblem:
    par_off, par = graph.parents
    pb = pair_bytes(graph)
    assert np.array_equal(pb.src, par)  # both sorted by (dst, src)
    comm = pb.bytes / cluster.bandwidth_bytes_per_us + cluster.delta2_us
    cost = graph.cost_matrix(cluster.kinds)
    ch_off, ch = graph.children
    rank = upward_rank(graph, cost.mean(axis=1), comm * (cluster.n_devices - 1) / cluster.n_devices)
    return ScheduleProblem(cost, par_off, par, comm, ch_off, ch, memory_need(graph), graph.persistent_bytes,
                           np.asarray(cluster.memory, dtype=np.float64), float(cluster.delta1_us), rank)


def upward_rank(graph: Graph, mean_cost: np.ndarray, mean_comm: np.ndarray) -> np.ndarray:
    """float64[N] HEFT's upward rank; mean_comm (float64[P]) is aligned with `graph.parents`.

    rank[p] >= rank[c] for every edge p -> c (floating-point addition of non-negatives is monotone), so
    sorting by (-rank, topological position) is a topological order.
    """
    par_off, par = graph.parents
    rank = np.asarray(mean_cost, dtype=np.float64).copy()
    best_child = np.zeros(graph.n_nodes)  # max over children of (comm + rank[child])
    off, par_l, comm_l = par_off.tolist(), par.tolist(), np.asarray(mean_comm).tolist()
    for v in graph.topo_order[::-1].tolist():
        rank[v] = mean_cost[v] + best_child[v]
        for j in range(off[v], off[v + 1]):
            p = par_l[j]
            best_child[p] = max(best_child[p], comm_l[j] + rank[v])
    return rank


class Schedule(NamedTuple):
    """What a list scheduler decided. device: int32[N]; start, end: float64[N] estimated times, us."""

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray


# ---- plain references ---------------------------------------------------------------------------------------
def _data_ready(prob: ScheduleProblem, v: int, device: list[int], end: list[float]) -> list[float]:
    n_dev = prob.cost.shape[1]
    ready = [0.0] * n_dev
    for j in range(int(prob.par_off[v]), int(prob.par_off[v + 1])):
        p = int(prob.par[j])
        for d in range(n_dev):
            t = end[p] + (float(prob.comm[j]) if device[p] != d else 0.0)
            ready[d] = max(ready[d], t)
    return ready


def _allowed(prob: ScheduleProblem, v: int, used: list[float], used_p: list[float]) -> list[int]:
    """Devices of the best memory tier for v (see the module docstring)."""
    cap = prob.capacity.tolist()
    tiers = [0 if used[d] + prob.need[v] <= cap[d] else 1 if used_p[d] + prob.persistent[v] <= cap[d] else 2
             for d in range(len(cap))]
    return [d for d in range(len(cap)) if tiers[d] == min(tiers)]


def _commit(prob, v, d, s, device, start, end, avail, used, used_p) -> None:
    c = float(prob.cost[v, d])
    device[v], start[v], end[v] = d, s, s + c
    avail[d] = end[v] + prob.delta1 if c > 0 else end[v]
    used[d] += float(prob.need[v])
    used_p[d] += float(prob.persistent[v])


def etf_reference(prob: ScheduleProblem) -> Schedule:
    """Earliest task first: repeatedly start the (ready node, device) pair that can start soonest.

    Ties: earlier finish, then higher rank, then lower node index, then lower device index.
    """
    n, n_dev = prob.cost.shape
    device, start, end = [-1] * n, [0.0] * n, [0.0] * n
    avail, used, used_p = [0.0] * n_dev, [0.0] * n_dev, [0.0] * n_dev
    pending = np.diff(prob.par_off).tolist()
    ready = {v: _data_ready(prob, v, device, end) for v in range(n) if pending[v] == 0}
    while ready:
        best = None
        for v, dr in ready.items():
            for d in _allowed(prob, v, used, used_p):
                s = max(avail[d], dr[d])
                key = (s, s + float(prob.cost[v, d]), -float(prob.rank[v]), v, d)
                best = key if best is None or key < best else best
        s, _, _, v, d = best
        del ready[v]
        _commit(prob, v, d, s, device, start, end, avail, used, used_p)
        for c in prob.ch[prob.ch_off[v]:prob.ch_off[v + 1]].tolist():
            pending[c] -= 1
            if pending[c] == 0:
                ready[c] = _data_ready(prob, c, device, end)
    return Schedule(np.asarray(device, dtype=np.int32), np.asarray(start), np.asarray(end))


def heft_order(prob: ScheduleProblem, topo_order: np.ndarray) -> np.ndarray:
    """int32[N] nodes by decreasing upward rank, ties in topological order (so parents come first)."""
    pos = np.empty(len(topo_order), dtype=np.int64)
    pos[topo_order] = np.arange(len(topo_order))
    return np.lexsort((pos, -prob.rank)).astype(np.int32)


def heft_reference(prob: ScheduleProblem, order: np.ndarray) -> Schedule:
    """HEFT without insertion: in `order`, put each node on the device where it finishes first.

    Ties: earlier start, then lower device index.
    """
    n, n_dev = prob.cost.shape
    device, start, end = [-1] * n, [0.0] * n, [0.0] * n
    avail, used, used_p = [0.0] * n_dev, [0.0] * n_dev, [0.0] * n_dev
    for v in order.tolist():
        dr = _data_ready(prob, v, device, end)
        best = None
        for d in _allowed(prob, v, used, used_p):
            s = max(avail[d], dr[d])
            key = (s + float(prob.cost[v, d]), s, d)
            best = key if best is None or key < best else best
        _, s, d = best
        _commit(prob, v, d, s, device, start, end, avail, used, used_p)
    return Schedule(np.asarray(device, dtype=np.int32), np.asarray(start), np.asarray(end))
