"""Everything on one device: `single` and `cpu-only`.

`single` is "Single-GPU" in the papers. "The single device" means one thing in every command (`place`,
`place --hardware`, `compare`, and the learned methods' starts through `or_single`): `single_device`, the device on
which the whole graph simulates fastest alone, preferring a device it fits in; on ties (identical devices) the
first accelerator. On presets whose first accelerator is the fastest (every preset of identical GPUs, and the
`-cpu` presets for graphs that run faster on the GPUs than on the host CPU) that is the first accelerator, as in
the papers.
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import CPU_KIND, NotApplicable, gpu_devices
from placeto.objective import score_batch
from simulator import simulate
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

# what `single` is, in the words of --help, warnings and the glossary
SINGLE_MEANS = ("every node on the one device the graph alone simulates fastest on, preferring one it fits in; of "
                "equally fast devices the first accelerator, so /gpu:0 on the presets (device 1 on the -cpu ones) "
                "unless the host CPU is faster")


def single_device(graph: Graph, cluster: Cluster) -> int:
    """The index of the cluster's fastest single device for `graph`.

    Every node on it alone, the lowest (out of memory, simulated runtime in us); ties go to the first accelerator
    (`gpu_devices` order), then to the other devices by index. One simulation per distinct device (kind, memory,
    host), not metered (it is the reference every method is compared with, not a search); cached per graph and
    cluster.
    """
    key = ("single_device", cluster)
    if key not in graph.cache:
        first = [int(i) for i in gpu_devices(cluster)]
        order = first + [i for i in range(cluster.n_devices) if i not in first]
        seen: dict[tuple, tuple[bool, float]] = {}
        best, best_score = order[0], (True, float("inf"))
        for i in order:
            d = cluster.devices[i]
            signature = (d.kind, d.memory_bytes, d.host)  # identical devices simulate alike: once
            if signature not in seen:
                r = simulate(graph, np.full(graph.n_nodes, i, dtype=np.int32), cluster)
                seen[signature] = (bool(r.any_oom), float(r.runtime))
            if seen[signature] < best_score:
                best, best_score = i, seen[signature]
        graph.cache[key] = best
    return graph.cache[key]


def single(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Every node on the fastest single device, int32[N].

    The device is `single_device`'s; `seed` is unused (deterministic).
    """
    del seed  # deterministic
    return np.full(graph.n_nodes, single_device(graph, cluster), dtype=np.int32)


def cpu_only(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Every node on the first CPU device, int32[N].

    Raises:
      NotApplicable: the cluster has no CPU device.
    """
    del seed
    cpus = [i for i, d in enumerate(cluster.devices) if d.kind == CPU_KIND]
    if not cpus:
        raise NotApplicable(f"cluster {cluster.name!r} has no {CPU_KIND!r} device")
    return np.full(graph.n_nodes, cpus[0], dtype=np.int32)


def or_single(graph: Graph, cluster: Cluster, placement: np.ndarray) -> np.ndarray:
    """`placement` int32[N], or `single`'s where that scores better.

    Better: a lower objective (`placeto.objective.score_batch`: feasibility first);
    `placement` on ties. Two metered simulator calls.
    """
    cands = np.stack([np.asarray(placement, np.int32), single(graph, cluster)])
    return cands[int(np.argmin(score_batch(graph, cands, cluster)))]
