"""`metis`: a METIS k-way min-cut partition, balanced on compute.

The partition is of the undirected graph. Node weights are compute times on the first accelerator kind, edge weights
the bytes a producer sends its consumer (parallel edges merged); part i goes to device i, with target part sizes
proportional to device speed when the devices differ. METIS knows nothing of order or overlap: a balanced cut can
serialise a chain across devices, which is why it is a weak baseline on deep graphs (as in the papers' tables).
"""

from __future__ import annotations

import numpy as np
import pymetis

from placeto.baselines.common import UndirectedGraph, device_speeds, reference_kind, undirected
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def metis_parts(ug: UndirectedGraph, n_parts: int, targets: np.ndarray | None, seed: int,
                ufactor: int = 30) -> np.ndarray:
    """Part int32[N] of each node in METIS's k-way partition.

    Args:
      targets: float[n_parts] wanted weight shares, summing to 1; None: equal.
      ufactor: allowed imbalance in thousandths (30: the heaviest part may be 3% above its target).
    """
    n = len(ug.xadj) - 1
    if n_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int32)
    if n <= n_parts:
        return np.arange(n, dtype=np.int32)
    tp = None if targets is None else [float(t) for t in targets / targets.sum() * (1 - 1e-9)]
    _, parts = pymetis.part_graph(
        n_parts, adjacency=pymetis.CSRAdjacency(ug.xadj, ug.adjncy), vweights=ug.vweights,
        eweights=ug.eweights if len(ug.eweights) else None, tpwgts=tp, recursive=False,
        options=pymetis.Options(seed=int(seed), ufactor=int(ufactor)))
    return np.asarray(parts, dtype=np.int32)


def metis(graph: Graph, cluster: Cluster, seed: int = 0, ufactor: int = 30) -> np.ndarray:
    """A METIS k-way partition int32[N] over all devices.

    Node weight: compute time on the first accelerator's kind; part sizes follow device speed when the devices
    differ.
    """
    devices = np.arange(cluster.n_devices, dtype=np.int32)
    speeds = device_speeds(graph, cluster, devices)
    targets = None if np.allclose(speeds, speeds[0]) else speeds / speeds.sum()
    ug = undirected(graph, graph.cost_for(reference_kind(cluster)))
    return devices[metis_parts(ug, cluster.n_devices, targets, seed, ufactor)]
