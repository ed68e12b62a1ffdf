"""What the baselines share: budgets, devices, the weighted graph.

Every method is a function `(graph, cluster, seed, **options) -> int32[N]` (device index per node). Methods that
search (random, local-search, sa) score placements with `evaluate` (`placeto.objective.score_batch`: the one
objective, counted by the one meter), so the comparison harness charges every method the same way.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from placeto.objective import metered, meter, score_batch
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph

Method = Callable[..., np.ndarray]  # (graph, cluster, seed, **options) -> int32[N] device index per node

CPU_KIND = "cpu"
DEFAULT_BUDGET = 1000  # simulator calls of the searching baselines; the learned policy gets the same (compare)
# ... and at most default_seconds(graph) of wall time: on a large graph a call costs far more, so a count of calls
# alone is no budget (docs/commands.md)
DEFAULT_SECONDS = 10.0  # up to SECONDS_NODES nodes; then 1 s more per SECONDS_NODES nodes, at most MAX_DEFAULT_SECONDS
SECONDS_NODES = 10_000
MAX_DEFAULT_SECONDS = 60.0


def default_seconds(graph: Graph) -> float:
    """Default wall-clock budget (s) of a searching method on `graph`.

    For a method that searches or samples, beside DEFAULT_BUDGET calls, compilation excluded: DEFAULT_SECONDS
    (10 s), 1 s more per SECONDS_NODES nodes, at most MAX_DEFAULT_SECONDS (60 s). Where the calls run out first (a
    small graph), the result is the call budget's, deterministic in the seed.
    """
    return min(MAX_DEFAULT_SECONDS, DEFAULT_SECONDS + graph.n_nodes / SECONDS_NODES)


class NotApplicable(InputError):
    """The method does not apply to this graph or cluster.

    E.g. the graph ships no expert placement, or the cluster has no CPU device.
    """


def count_simulator_calls():
    """A meter counting the simulations of a `with` block.

    This is `placeto.objective.metered()`.
    """
    return metered()


def evaluate(graph: Graph, placements: np.ndarray, cluster: Cluster) -> np.ndarray:
    """Search objective of placements, counted by the current meter.

    Args:
      placements: int[B, N] device index per node, one placement a row.

    Returns:
      float64[B] `placeto.objective.score_batch`: the feasibility-first objective, us.
    """
    return score_batch(graph, placements, cluster)


def batch_size(want: int, limit: float) -> int:
    """How many proposals to score now.

    At most `want`, at most `limit` minus the calls so far, at most the meter's calls left.
    """
    m = meter()
    return int(max(0, min(want, limit - m.calls, m.max_calls - m.calls)))


def budget_left(budget: float) -> bool:
    """Whether the search may simulate more.

    True while fewer than `budget` calls were made and the meter's calls and seconds are not spent.
    """
    m = meter()
    return m.calls < budget and not m.exhausted()


# ---- devices ----------------------------------------------------------------------------------------------
def gpu_devices(cluster: Cluster) -> np.ndarray:
    """Indices int32[G] of the accelerators, else of all devices.

    Accelerators: every kind but "cpu".
    """
    idx = [i for i, d in enumerate(cluster.devices) if d.kind != CPU_KIND]
    return np.asarray(idx or range(cluster.n_devices), dtype=np.int32)


def reference_kind(cluster: Cluster, devices: np.ndarray | None = None) -> str:
    """The first accelerator's kind: its costs weigh partitioned nodes."""
    devices = gpu_devices(cluster) if devices is None else devices
    return cluster.devices[int(devices[0])].kind


def device_speeds(graph: Graph, cluster: Cluster, devices: np.ndarray) -> np.ndarray:
    """Relative speed float64[len(devices)] of each device.

    The graph's total cost on the reference kind over its total cost on the device's kind.
    """
    costs = graph.cost_matrix([cluster.devices[int(d)].kind for d in devices]).sum(axis=0)
    ref = graph.cost_for(reference_kind(cluster, devices)).sum()
    return np.where(costs > 0, ref / np.maximum(costs, 1e-300), 1.0)


# ---- the weighted graph -------------------------------------------------------------------------------------
class PairBytes(NamedTuple):
    """Distinct producer -> consumer pairs and their transfer bytes.

    src, dst: int32[P] pair endpoints, sorted by (dst, src) like `graph.parents`.
    bytes: float64[P] total size of the distinct outputs of src that dst consumes.
    """

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray


def pair_bytes(graph: Graph) -> PairBytes:
    """Merge parallel edges: (src, dst) pairs with their outputs' bytes.

    Cached in `graph.cache`.
    """
    key = ("pair_bytes",)
    if key not in graph.cache:
        n = np.int64(max(graph.n_nodes, 1))
        out = graph.out_offsets[graph.edge_src] + graph.edge_out
        triple = np.unique((graph.edge_dst.astype(np.int64) * n + graph.edge_src) * graph.out_bytes.size + out)
        out_idx = triple % max(graph.out_bytes.size, 1)
        pair = triple // max(graph.out_bytes.size, 1)
        keys, first = np.unique(pair, return_index=True)
        sizes = np.add.reduceat(graph.out_bytes[out_idx], first) if len(first) else np.zeros(0)
        graph.cache[key] = PairBytes((keys % n).astype(np.int32), (keys // n).astype(np.int32), sizes)
    return graph.cache[key]


def scale_to_ints(x: np.ndarray, total: float = 1e7) -> np.ndarray:
    """int64 weights >= 1 in proportion to x >= 0, summing to ~`total`.

    The partitioners take small integer weights.
    """
    s = float(x.sum())
    if s <= 0:
        return np.ones(x.shape, dtype=np.int64)
    return np.maximum(1, np.round(x * (total / s))).astype(np.int64)


class UndirectedGraph(NamedTuple):
    """The symmetric CSR graph the partitioners take.

    xadj: int64[N + 1]; adjncy: int64[2P] neighbours; vweights: int64[N]; eweights: int64[2P], all >= 1.
    """

    xadj: np.ndarray
    adjncy: np.ndarray
    vweights: np.ndarray
    eweights: np.ndarray


def undirected(graph: Graph, node_weight: np.ndarray) -> UndirectedGraph:
    """The symmetric CSR graph the partitioners take.

    Args:
      node_weight: float64[N] node weights; the edge weights are the pairs' bytes (`pair_bytes`). Both are
        scaled to small ints (`scale_to_ints`).
    """
    pb = pair_bytes(graph)
    w = scale_to_ints(pb.bytes)
    rows = np.concatenate([pb.src, pb.dst]).astype(np.int64)
    cols = np.concatenate([pb.dst, pb.src]).astype(np.int64)
    order = np.lexsort((cols, rows))
    xadj = np.zeros(graph.n_nodes + 1, dtype=np.int64)
    np.add.at(xadj, rows + 1, 1)
    return UndirectedGraph(np.cumsum(xadj), cols[order], scale_to_ints(node_weight),
                           np.concatenate([w, w])[order])


def memory_need(graph: Graph) -> np.ndarray:
    """Bytes float64[N] a node charges its device: persistent + outputs.

    It over-estimates what stays resident (the simulator frees an output once its consumers are done) and
    leaves out received copies, which occupy the consumers' devices.
    """
    return graph.persistent_bytes + graph.node_out_bytes


def as_placement(x: np.ndarray, graph: Graph, cluster: Cluster) -> np.ndarray:
    """An int32[N] copy of `x`, checked.

    Raises:
      AssertionError: a wrong length, or an index that is not a device of `cluster`.
    """
    p = np.asarray(x).astype(np.int32).reshape(-1)
    if p.shape != (graph.n_nodes,) or (p.size and (p.min() < 0 or p.max() >= cluster.n_devices)):
        raise AssertionError(f"invalid placement for {graph.name!r} on {cluster.n_devices} devices")
    return p
