"""`expert`: the human expert placement, shipped or from a file.

Shipped with a benchmark graph, or given as a placement file.
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import NotApplicable
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import check_placement
from simulator.model.placement_file import load_placement

META_KEY = "expert_placement"  # graph.meta[META_KEY] = {"2": [device per node], "4": [...], "8": [...]}


def expert(graph: Graph, cluster: Cluster, seed: int = 0, placement_file: str | None = None) -> np.ndarray:
    """int32[N] the expert placement for `cluster.n_devices` devices.

    From `placement_file` when given, else from `graph.meta["expert_placement"][str(n_devices)]`.

    Raises:
      NotApplicable: the graph ships none for this device count.
      InputError: it is malformed.
    """
    del seed
    n_dev = cluster.n_devices
    if placement_file is not None:
        return load_placement(placement_file, graph, n_dev).assignment.astype(np.int32)
    shipped = graph.meta.get(META_KEY) or {}
    if str(n_dev) not in shipped:
        have = ", ".join(sorted(shipped, key=lambda k: (len(k), k))) or "none"
        raise NotApplicable(f"graph {graph.name!r} ships no expert placement for {n_dev} devices "
                            f"(meta[{META_KEY!r}] has: {have})")
    raw = shipped[str(n_dev)]
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in raw):
        raise InputError(f"graph {graph.name!r}: meta[{META_KEY!r}][{str(n_dev)!r}] is not a list of device indices")
    assignment = np.asarray(raw, dtype=np.int64)
    check_placement(assignment, graph, n_dev)
    return assignment.astype(np.int32)
