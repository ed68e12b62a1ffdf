"""The max-load (time per sample) objective of msr-fiddle's throughput model.

Tarnawski et al., "Efficient Algorithms for Device Placement of DNN Graph Operators" (NeurIPS 2020): in a pipeline
that streams samples through the devices, throughput is set by the most loaded device. The load of a device is

    sum of its nodes' compute times on its kind
    + for every node u it holds whose output some other device consumes: out_cost[u]  (sent once)
    + for every node u on another device whose output one of its nodes consumes: out_cost[u]  (received once)

where out_cost[u] is the cost of moving u's output between a device and host memory (one per node, whatever the
number of consumers or of their devices). A CPU device (kind "cpu") pays no transfer cost: in their model the
data is in host memory already. The max-load is the largest load; `peak[d]` is the sum of the bytes (`size`,
the graph's persistent bytes) of the nodes on device d, which their model checks against each accelerator's
memory (sum of size <= maxSizePerFPGA). The times are in the graph's own units (for their files, theirs).

Colocation by construction: every node follows the representative of its colocation group (the group's first
forward node in node order, else its first node), as their program places a colour class whole and a training
graph's backward nodes with their forward ones; a placement's entries for the other members are ignored.

Contiguity is NOT required here: any placement is scored. Their exact DP (reference-src/dp.cpp) optimises over
contiguous splits only (each device a difference of two ideals of the forward graph, backward nodes with their
colour class), so a non-contiguous placement may beat their DP's optimum.

`max_load_reference` is the plain-Python definition; `max_load_batch` the vectorised numpy version, tested equal.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph

OBJECTIVE = "max_load"  # graph.meta["objective"] of a graph scored by max-load instead of the simulator
PER_NODE_META = ("objective", "max_load")  # meta keys of per-node data: a grouping of the graph leaves them out
# (its groups are simulated; a placement of them, expanded to the nodes, is scored by max-load)
CPU_KIND = "cpu"


class MaxLoadModel(NamedTuple):
    """What the max-load of a (graph, cluster) reads; N nodes, D devices."""

    cost: np.ndarray  # float64[N, D] compute time of each node on each device (the graph's units)
    out_cost: np.ndarray  # float64[N] cost of moving a node's output to or from a device, charged once per side
    charged: np.ndarray  # bool[D] whether the device pays transfer costs (False: a CPU)
    allowed: np.ndarray  # bool[N, D] whether the node may run there (else the device's load is inf)
    rep: np.ndarray  # int64[N] the node whose device each node takes (its colocation group's representative)
    size: np.ndarray  # float64[N] bytes the node holds on its device
    src: np.ndarray  # int64[P] distinct producer -> consumer pairs
    dst: np.ndarray  # int64[P]


def is_max_load(graph: Graph) -> bool:
    """Whether `graph` is scored by max-load (meta["objective"])."""
    return graph.meta.get("objective") == OBJECTIVE


def representatives(graph: Graph) -> np.ndarray:
    """int64[N] each node's colocation representative (module docstring).

    Forward/backward from meta["max_load"]["backward"] when given; cached on the graph.
    """
    key = ("max_load representatives",)
    if key not in graph.cache:
        backward = graph.meta.get(OBJECTIVE, {}).get("backward") or [False] * graph.n_nodes
        first: dict[str, int] = {}
        for forward_pass in (True, False):
            for i, group in enumerate(graph.colocation):
                if group is not None and bool(backward[i]) != forward_pass:
                    first.setdefault(group, i)
        rep = np.asarray([i if g is None else first[g] for i, g in enumerate(graph.colocation)], dtype=np.int64)
        rep.flags.writeable = False
        graph.cache[key] = rep
    return graph.cache[key]


def model_of(graph: Graph, cluster: Cluster, out_cost: np.ndarray | None = None) -> MaxLoadModel:
    """The max-load model of `graph` on `cluster`.

    Args:
      out_cost: float64[N] per-node transfer cost; None: meta["max_load"]["out_cost"].

    Raises:
      InputError: the graph has no out_cost (meta["max_load"]) and none is given, or a length differs.
    """
    meta = graph.meta.get(OBJECTIVE, {})
    if out_cost is None:
        if "out_cost" not in meta:
            raise InputError(f"graph {graph.name!r}: no meta['max_load']['out_cost'] (not a max-load graph)")
        out_cost = meta["out_cost"]
    out_cost = np.asarray(out_cost, dtype=np.float64)
    ok = np.asarray(meta.get("fpga_ok", [True] * graph.n_nodes), dtype=bool)
    if out_cost.shape != (graph.n_nodes,) or ok.shape != (graph.n_nodes,):
        raise InputError(f"graph {graph.name!r}: meta['max_load'] has {out_cost.size} costs for {graph.n_nodes} nodes")
    charged = np.asarray([d.kind != CPU_KIND for d in cluster.devices])
    off, targets = graph.children
    return MaxLoadModel(graph.cost_matrix(cluster.kinds), out_cost, charged, ok[:, None] | ~charged[None, :],
                        representatives(graph), np.asarray(graph.persistent_bytes, np.float64),
                        np.repeat(np.arange(graph.n_nodes), np.diff(off)), targets.astype(np.int64))


def max_load_reference(graph: Graph, placement: Sequence[int] | np.ndarray, cluster: Cluster,
                       model: MaxLoadModel | None = None) -> tuple[float, np.ndarray]:
    """(max-load, peak float64[D] bytes) of one placement int[N]; plain Python.

    The definition (module docstring), node by node.
    """
    m = model_of(graph, cluster) if model is None else model
    n_dev = cluster.n_devices
    dev = [int(placement[int(r)]) for r in m.rep]
    load, peak = [0.0] * n_dev, [0.0] * n_dev
    receivers: list[set[int]] = [set() for _ in dev]
    for u, v in zip(m.src.tolist(), m.dst.tolist()):
        if dev[v] != dev[u]:
            receivers[u].add(dev[v])
    for u, d in enumerate(dev):
        load[d] += float(m.cost[u, d]) if m.allowed[u, d] else float("inf")
        peak[d] += float(m.size[u])
        if receivers[u] and m.charged[d]:
            load[d] += float(m.out_cost[u])
        for r in receivers[u]:
            if m.charged[r]:
                load[r] += float(m.out_cost[u])
    return max(load), np.asarray(peak)


def loads_batch(model: MaxLoadModel, placements: np.ndarray, n_dev: int) -> tuple[np.ndarray, np.ndarray]:
    """(load float64[B, D], peak float64[B, D] bytes) of placements int[B, N]."""
    p = np.atleast_2d(np.asarray(placements, dtype=np.int64))[:, model.rep]  # [B, N] colocated
    b, n = p.shape
    rows = np.arange(b)[:, None]
    flat = (rows * n_dev + p).ravel()
    nodes = np.broadcast_to(np.arange(n), (b, n))
    work = np.where(model.allowed[nodes, p], model.cost[nodes, p], np.inf)
    load = np.bincount(flat, weights=work.ravel(), minlength=b * n_dev).reshape(b, n_dev)
    peak = np.bincount(flat, weights=np.broadcast_to(model.size, (b, n)).ravel(),
                       minlength=b * n_dev).reshape(b, n_dev)
    if model.src.size:
        ds, dt = p[:, model.src], p[:, model.dst]  # [B, P]
        cross = ds != dt
        recv = np.zeros((b, n, n_dev), dtype=bool)  # recv[b, u, d]: device d takes u's output
        bb = np.broadcast_to(rows, ds.shape)
        recv[bb[cross], np.broadcast_to(model.src, ds.shape)[cross], dt[cross]] = True
        comm = np.einsum("bnd,n->bd", recv, model.out_cost)
        sends = recv.any(axis=2) * model.out_cost[None, :]
        comm += np.bincount(flat, weights=sends.ravel(), minlength=b * n_dev).reshape(b, n_dev)
        load += np.where(model.charged[None, :], comm, 0.0)
    return load, peak


def max_load_batch(graph: Graph, placements: np.ndarray, cluster: Cluster,
                   model: MaxLoadModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(max-load float64[B], peak float64[B, D] bytes) of placements int[B, N]; vectorised.

    Equal to `max_load_reference` row by row (up to the order of float additions).
    """
    m = model_of(graph, cluster) if model is None else model
    load, peak = loads_batch(m, placements, cluster.n_devices)
    return load.max(axis=1), peak
