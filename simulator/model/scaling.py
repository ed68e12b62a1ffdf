"""The same task in other units, to test that methods ignore them.

`scale_units(graph, cluster, f)` multiplies every time and every byte count by f and keeps the bandwidth
(bytes/us): every transfer time bytes / bandwidth then scales by f as well, so every simulated time (start,
end, arrival, the runtime) scales by f and every peak memory by f, up to floating-point rounding. A placement
method whose decisions depend only on the ratios of times and of sizes places the scaled task as the original.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import DEFAULT_KIND, Graph


def scale_units(graph: Graph, cluster: Cluster, factor: float) -> tuple[Graph, Cluster]:
    """(graph, cluster) with times and byte counts times `factor`.

    The bandwidth (bytes/us) is kept. Graph: the costs of every device kind (us; NaN stays NaN; a cluster kind the
    graph derives from its op descriptions, Graph.cost_for, is recorded first so that it scales too), every output's
    bytes and every node's persistent bytes. Cluster: delta1, delta2, latency, every host's dispatch and transfer
    times (us) and every device's memory (bytes). Names, structure, attrs and meta are unchanged. The scaled byte
    counts need not be whole numbers.

    Raises:
      InputError: if `factor` is not finite and > 0, or a scaled value leaves the limits of
        `simulator.model.limits` (e.g. a cost above MAX_COST_US).
    """
    f = float(factor)
    if not (np.isfinite(f) and f > 0):
        raise InputError(f"scale factor must be a finite number > 0, got {factor!r}")
    costs = dict(graph.costs)
    for kind in dict.fromkeys(cluster.kinds):  # costs derived from the op descriptions (Graph.cost_for) scale too
        if kind not in costs and DEFAULT_KIND not in costs and graph.has_costs(kind):
            costs[kind] = graph.cost_for(kind)
    g = dataclasses.replace(graph, costs={kind: cost * f for kind, cost in costs.items()},
                            out_bytes=graph.out_bytes * f, persistent_bytes=graph.persistent_bytes * f)
    c = dataclasses.replace(
        cluster,
        devices=tuple(dataclasses.replace(d, memory_bytes=d.memory_bytes * f) for d in cluster.devices),
        delta1_us=cluster.delta1_us * f, delta2_us=cluster.delta2_us * f, latency_us=cluster.latency_us * f,
        hosts=tuple(dataclasses.replace(h, dispatch_us=h.dispatch_us * f, transfer_us=h.transfer_us * f)
                    for h in cluster.hosts))
    return g, c
