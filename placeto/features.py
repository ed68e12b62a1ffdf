"""Graph + cluster -> the policy's padded arrays; buckets; reachability.

Static per-graph features are computed once on the host (`graph_arrays`); the per-step features that depend on
the placement (device one-hot, visited / current flags, start times) are built inside the jitted policy from
the `Observation` (see `env.py`), so one compiled function serves every step and every graph of a bucket.

Time-like quantities are expressed in one per-graph unit, `cost_unit` = mean non-zero compute cost, and
transfer sizes are turned into transfer times (bytes / bandwidth) first, so compute and communication are
comparable and features have similar ranges across graphs of very different sizes.

Reachability: `reach[u, v]` (bool[Np, Np]) says u is a proper ancestor of v; the descendants of v are row v,
its ancestors column v. Dense is fine at our sizes: 2,048 padded nodes take 4 MB (one byte per entry on the
device); it is built on the host from packed bitsets in reverse topological order (O(E * N / 8) bytes ORed).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from placeto import jraph_adapter as ja
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.result import critical_path, min_costs

N_STATIC = 9  # static node features, see `static_node_features`
N_DYNAMIC_EXTRA = 4  # visited, current, start time, on the current node's device (plus the device one-hot)
SCHEDULE_CHANNELS = 4  # per-node channels of the simulated schedule the policy sees, see `SCHEDULE`
SCHEDULE = ("start", "finish", "device_peak", "unit_per_runtime")
"""The channels of an observation's schedule float32[B, Np, SCHEDULE_CHANNELS] (placeto.methods.placeto.env).

start, finish: the node's start and end in the simulated step, / the step's runtime R; device_peak: the peak
memory of the node's device / its capacity; unit_per_runtime: `cost_unit` / R, the same for every node (so costs
in units, as GraphArrays.cost_units holds them, become fractions of the step). Padding nodes: 0.
"""
MIN_BUCKET = 16


class GraphArrays(NamedTuple):
    """What the jitted policy needs of one graph, padded to a bucket.

    A pytree: pass it to jit. Np = padded nodes (> N), Ep = padded edges, Dm = config.max_devices.
    """

    graph: ja.GraphsTuple  # nodes float32[Np, N_STATIC]; senders, receivers int32[Ep] (distinct pairs)
    node_mask: np.ndarray  # bool[Np] real nodes
    edge_mask: np.ndarray  # bool[Ep] real edges
    reach: np.ndarray  # bool[Np, Np] reach[u, v]: u is a proper ancestor of v
    dev_cost: np.ndarray  # float32[Np, Dm] log1p(cost on device d / cost_unit); 0 on padded devices
    dev_mask: np.ndarray  # bool[Dm] real devices
    load_cost: np.ndarray  # float32[Np] fastest-device cost / total cost (sums to 1 over real nodes)
    first_visit: np.ndarray  # int32[Np] step of each node's first visit (padding: a huge value)
    inv_in_deg: np.ndarray  # float32[Np] 1 / max(1, number of distinct parents)
    inv_out_deg: np.ndarray  # float32[Np] 1 / max(1, number of distinct children)
    cost_units: np.ndarray  # float32[Np, Dm] cost on device d / cost_unit; 0 on padding
    xfer_units: np.ndarray  # float32[Np] time to send the node's outputs (bytes / bandwidth + latency) / cost_unit
    persist_frac: np.ndarray  # float32[Np, Dm] persistent bytes / device d's capacity; 0 on padding


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest size >= n among {minimum}, 2^k and 3 * 2^(k-1).

    Padding wastes at most 50%, and compiles stay few.
    """
    size = minimum
    while size < n:
        if size < 4:
            size += 1
        else:
            size = size * 3 // 2 if (size & (size - 1)) == 0 else (size // 3) * 4
    return size


def node_bucket(n_nodes: int) -> int:
    """Padded node count (jraph's padding graph needs a padding node)."""
    return bucket(n_nodes + 1)


def edge_bucket(n_edges: int, n_pad: int) -> int:
    """Padded edge count: at least 2 per padded node.

    So most graphs of a node bucket share one edge bucket.
    """
    return max(bucket(n_edges), 2 * n_pad)


def reachability(graph: Graph) -> np.ndarray:
    """bool[N, N] r[u, v]: u is a proper ancestor of v.

    Built from packed bitsets in reverse topological order.
    """
    n = graph.n_nodes
    desc = np.zeros((n, (n + 7) // 8), dtype=np.uint8)
    ch_off, ch = graph.children
    bit = np.zeros((n, (n + 7) // 8), dtype=np.uint8)
    bit[np.arange(n), np.arange(n) // 8] = (1 << (7 - np.arange(n) % 8)).astype(np.uint8)
    for v in graph.topo_order[::-1].tolist():
        kids = ch[ch_off[v]:ch_off[v + 1]]
        if kids.size:
            desc[v] = np.bitwise_or.reduce(desc[kids] | bit[kids], axis=0)
    return np.unpackbits(desc, axis=1, count=n).astype(bool)


def cost_unit(graph: Graph, cluster: Cluster) -> float:
    """Per-graph time unit (us): the mean non-zero fastest-device cost.

    1 if all costs are zero.
    """
    c = min_costs(graph, cluster)
    nz = c[c > 0]
    return float(nz.mean()) if nz.size else 1.0


def static_node_features(graph: Graph, cluster: Cluster) -> np.ndarray:
    """float32[N, N_STATIC] static node features.

    Compute cost, output bytes (as transfer time), degrees, depth, memory.

    Columns: log1p(cost/u), log1p(transfer/u), cost/max cost, transfer/max cost, log1p(in-degree),
    log1p(out-degree), top level / critical path, bottom level / critical path, persistent bytes / capacity.
    (u = `cost_unit`; transfer = output bytes as transfer time; levels are longest cost paths from a source to the
    node's start and from its start to a sink's end, without communication: classic list-scheduling priorities,
    beyond Placeto's features.)
    """
    cost = min_costs(graph, cluster)
    unit = cost_unit(graph, cluster)
    xfer = graph.node_out_bytes / cluster.bandwidth_bytes_per_us
    cmax = max(float(cost.max(initial=0.0)), 1e-9)
    in_deg, out_deg = np.diff(graph.parents[0]), np.diff(graph.children[0])
    top, bottom = _levels(graph, cost)
    cp = max(critical_path(graph, cost), 1e-9)
    cap = max(min(cluster.memory), 1.0)
    cols = [np.log1p(cost / unit), np.log1p(xfer / unit), cost / cmax, np.minimum(xfer / cmax, 10.0),
            np.log1p(in_deg), np.log1p(out_deg), top / cp, bottom / cp, graph.persistent_bytes / cap]
    return np.stack(cols, axis=1).astype(np.float32)


def _levels(graph: Graph, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64[N] top level and bottom level of each node.

    Top level: the longest path to the node's start; bottom level: from its start to the end.
    """
    n = graph.n_nodes
    top, bottom = np.zeros(n), np.zeros(n)
    par_off, par = graph.parents
    ch_off, ch = graph.children
    order = graph.topo_order.tolist()
    for v in order:
        ps = par[par_off[v]:par_off[v + 1]]
        top[v] = (top[ps] + cost[ps]).max() if ps.size else 0.0
    for v in reversed(order):
        cs = ch[ch_off[v]:ch_off[v + 1]]
        bottom[v] = cost[v] + (bottom[cs].max() if cs.size else 0.0)
    return top, bottom


def graph_arrays(graph: Graph, cluster: Cluster, visit_seq: np.ndarray, max_devices: int,
                 n_pad: int | None = None, e_pad: int | None = None) -> GraphArrays:
    """The padded arrays of `graph` on `cluster`, in host numpy.

    jax converts them at the first call.

    Args:
      visit_seq: int32[T] node visited at each step of an episode (for the `visited` flag).
      max_devices: device-axis padding; must be >= cluster.n_devices.
      n_pad, e_pad: padded sizes (default: `node_bucket(N)`, `edge_bucket(E, n_pad)`).

    Raises:
      ValueError: if the cluster has more devices than `max_devices`.
    """
    n, d = graph.n_nodes, cluster.n_devices
    if d > max_devices:
        raise ValueError(f"cluster {cluster.name!r} has {d} devices but the policy handles at most {max_devices}")
    src, dst = graph.children[0], graph.children[1]
    senders = np.repeat(np.arange(n, dtype=np.int32), np.diff(src)).astype(np.int32)
    receivers = dst.astype(np.int32)
    n_pad = n_pad or node_bucket(n)
    e_pad = e_pad or edge_bucket(len(senders), n_pad)
    padded = ja.pad(ja.graphs_tuple(static_node_features(graph, cluster), senders, receivers), n_pad, e_pad)

    reach = np.zeros((n_pad, n_pad), dtype=bool)
    reach[:n, :n] = reachability(graph)
    unit = cost_unit(graph, cluster)
    in_units = graph.cost_matrix(cluster.kinds) / unit  # float64[N, D]
    cost_units = np.zeros((n_pad, max_devices), dtype=np.float32)
    cost_units[:n, :d] = in_units
    dev_cost = np.zeros((n_pad, max_devices), dtype=np.float32)
    dev_cost[:n, :d] = np.log1p(in_units)
    xfer_units = np.zeros(n_pad, dtype=np.float32)
    xfer_units[:n] = (graph.node_out_bytes / cluster.bandwidth_bytes_per_us + cluster.latency_us) / unit
    persist_frac = np.zeros((n_pad, max_devices), dtype=np.float32)
    persist_frac[:n, :d] = graph.persistent_bytes[:, None] / np.maximum(cluster.capacity, 1.0)[None, :]
    cost = min_costs(graph, cluster)
    load_cost = np.zeros(n_pad, dtype=np.float32)
    load_cost[:n] = cost / max(float(cost.sum()), 1e-9)
    first = np.full(n_pad, np.iinfo(np.int32).max // 2, dtype=np.int32)
    seq = np.asarray(visit_seq)
    np.minimum.at(first, seq, np.arange(len(seq), dtype=np.int32))
    in_deg = np.zeros(n_pad, np.float32)
    out_deg = np.zeros(n_pad, np.float32)
    in_deg[:n], out_deg[:n] = np.diff(graph.parents[0]), np.diff(graph.children[0])
    return GraphArrays(
        graph=padded, node_mask=ja.node_mask(padded), edge_mask=ja.edge_mask(padded), reach=reach,
        dev_cost=dev_cost, dev_mask=np.arange(max_devices) < d, load_cost=load_cost, first_visit=first,
        inv_in_deg=1.0 / np.maximum(in_deg, 1.0), inv_out_deg=1.0 / np.maximum(out_deg, 1.0),
        cost_units=cost_units, xfer_units=xfer_units, persist_frac=persist_frac)


def shape_key(arrays: GraphArrays) -> tuple[int, int]:
    """(padded nodes, padded edges): equal keys share compiled functions."""
    return int(arrays.node_mask.shape[0]), int(arrays.edge_mask.shape[0])
