"""`m-topo`: Baechi's topological-order placer ("uniform").

Baechi's placer/m_topo.py. Walk the nodes in topological order (Kahn's, FIFO: Baechi's `assign_topo_order`) and
fill the devices one after another, moving to the next device when the current one would exceed its share,
total // D + the largest single node: every device but the last ends up with more than total // D and the last
never overflows. With by="memory" (Baechi) a node weighs its charged bytes (persistent + outputs, whole
bytes), with by="compute" its cost on the device's kind. Like Baechi's uniform variant it ignores device
capacity: the share is below capacity whenever the graph fits the cluster with some slack.

Complexity O(N). With by="memory" it reproduces the public Baechi placements
(experiments/results/reproduce/baechi_compare.md).
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import memory_need
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def m_topo(graph: Graph, cluster: Cluster, seed: int = 0, by: str = "memory") -> np.ndarray:
    """Devices int32[N] filled in topological order, equal shares.

    by: "memory" (Baechi: the charged bytes) or "compute" (the cost on each device's kind).
    """
    del seed  # deterministic
    if by == "memory":
        weights = [int(b) for b in memory_need(graph).tolist()]
    elif by == "compute":
        weights = graph.cost_matrix(cluster.kinds).tolist()
    else:
        raise ValueError(f"m-topo: by must be 'memory' or 'compute', not {by!r}")
    return topo_fill(graph.topo_order, weights, cluster.n_devices)


def topo_fill(order: np.ndarray, weights: list, n_dev: int) -> np.ndarray:
    """Fill devices 0..D-1 in `order`, each to total // D + max weight.

    Args:
      weights: per node either a number (the same on every device) or a list of D numbers (its weight on each).

    Returns:
      int32[N] the device of each node.
    """
    per_device = [w if isinstance(w, list) else [w] * n_dev for w in weights]
    placement = np.zeros(len(weights), dtype=np.int32)
    d, used = 0, 0
    share = _share([w[0] for w in per_device], n_dev)
    for v in order.tolist():
        while d < n_dev - 1 and used + per_device[v][d] > share:
            d, used = d + 1, 0
            share = _share([w[d] for w in per_device], n_dev)
        placement[v] = d
        used += per_device[v][d]
    return placement


def _share(weights: list, n_dev: int):
    """A device's share: total // D + the largest weight.

    Baechi's max_memory_per_device; an integer for integer weights.
    """
    return sum(weights) // n_dev + max(weights, default=0)
