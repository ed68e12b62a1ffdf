"""`mincut`: the "MinCut" baseline of Mirhoseini et al. 2018.

A min-cut partition over the GPUs only, balanced on memory rather than compute. Node weights are the bytes a node
keeps on its device (persistent bytes plus its outputs, see `memory_need`); parts are weighted by device memory
capacity, so each GPU gets a share of the footprint in proportion to what it holds. The cut is the bytes sent.
Scotch by default; `backend="metis"` uses METIS instead.
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import gpu_devices, memory_need, undirected
from placeto.baselines.metis import metis_parts
from placeto.baselines.scotch import scotch_parts
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def mincut(graph: Graph, cluster: Cluster, seed: int = 0, backend: str = "scotch",
           balance: float = 0.05) -> np.ndarray:
    """A memory-balanced min-cut int32[N] over the accelerators.

    Over all devices if there are none. backend: "scotch" or "metis".
    """
    devices = gpu_devices(cluster)
    capacity = np.asarray([cluster.devices[int(d)].memory_bytes for d in devices], dtype=np.float64)
    equal = np.allclose(capacity, capacity[0])
    ug = undirected(graph, memory_need(graph))
    if backend == "scotch":
        parts = scotch_parts(ug, len(devices), None if equal else capacity, seed, balance)
    elif backend == "metis":
        parts = metis_parts(ug, len(devices), None if equal else capacity / capacity.sum(), seed,
                            ufactor=int(round(balance * 1000)))
    else:
        raise ValueError(f"mincut: unknown backend {backend!r} (scotch or metis)")
    return devices[parts]
