"""Everything on one device: `single` (the first accelerator, "Single-GPU" in the papers) and `cpu-only`."""

from __future__ import annotations

import numpy as np

from placeto.baselines._common import CPU_KIND, NotApplicable, gpu_devices
from simulator.cluster import Cluster
from simulator.graph import Graph


def single(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """int32[N] all nodes on the first non-CPU device (device 0 if every device is a CPU)."""
    del seed  # deterministic
    return np.full(graph.n_nodes, gpu_devices(cluster)[0], dtype=np.int32)


def cpu_only(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """int32[N] all nodes on the first CPU device. Raises NotApplicable if the cluster has none."""
    del seed
    cpus = [i for i, d in enumerate(cluster.devices) if d.kind == CPU_KIND]
    if not cpus:
        raise NotApplicable(f"cluster {cluster.name!r} has no {CPU_KIND!r} device")
    return np.full(graph.n_nodes, cpus[0], dtype=np.int32)


def or_single(graph: Graph, cluster: Cluster, placement: np.ndarray, per_gb: float) -> np.ndarray:
    """int32[N] `placement`, or `single`'s where that scores better (lower memory-penalised simulated runtime,
    `placeto.objective.score_batch` with `per_gb`; `placement` on ties): two metered simulator calls."""
    from placeto.objective import score_batch

    cands = np.stack([np.asarray(placement, np.int32), single(graph, cluster)])
    return cands[int(np.argmin(score_batch(graph, cands, cluster, per_gb)))]
