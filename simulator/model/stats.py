"""Graph statistics, as `placeto graph info` prints them.

datasets/README.md tabulates them too.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from simulator.model.cluster import Cluster, Device, cluster_preset
from simulator.model.graph import DEFAULT_KIND, Graph
from simulator.model.limits import MAX_BYTES
from simulator.model.result import critical_path, lower_bound, min_costs


@dataclasses.dataclass(frozen=True)
class GraphStats:
    """A graph's sizes and times (us) on device kind `kind`."""

    name: str
    nodes: int
    edges: int
    kind: str
    total_compute_us: float
    critical_path_us: float
    total_out_bytes: float
    persistent_bytes: float
    lower_bound_us: dict[int, float]  # device count -> lower bound, us


def pick_kind(graph: Graph, preferred: str | None = None) -> str:
    """`preferred` if the graph has its costs, else its first kind.

    Costs count when recorded, plain-number or derived (Graph.has_costs).
    """
    if preferred and (preferred in graph.costs or DEFAULT_KIND in graph.costs or graph.has_costs(preferred)):
        return preferred
    return next(iter(graph.costs), DEFAULT_KIND)


def uniform_cluster(kind: str, n_devices: int) -> Cluster:
    """n `kind` devices on the placeto-k80 interconnect, for bounds."""
    devices = tuple(Device(f"/{kind}:{i}", kind, MAX_BYTES) for i in range(n_devices))  # memory: no limit
    return dataclasses.replace(cluster_preset("placeto-k80", n_devices), name=f"{kind}x{n_devices}", devices=devices)


def graph_stats(graph: Graph, kind: str | None = None, device_counts: Sequence[int] = (1, 2, 4, 8)) -> GraphStats:
    kind = pick_kind(graph, kind)
    cost = graph.cost_for(kind)
    return GraphStats(
        name=graph.name, nodes=graph.n_nodes, edges=graph.n_edges, kind=kind,
        total_compute_us=float(cost.sum()), critical_path_us=critical_path(graph, cost),
        total_out_bytes=float(np.sum(graph.out_bytes)), persistent_bytes=float(np.sum(graph.persistent_bytes)),
        lower_bound_us={d: lower_bound(graph, uniform_cluster(kind, d)) for d in device_counts},
    )


def communication_ratio(graph: Graph, cluster: Cluster) -> float:
    """The communication-to-computation ratio (CCR) of the graph.

    Dimensionless: what all its edges would take as transfers between devices (delta2 + latency + bytes / bandwidth
    each, us) over its total compute on the fastest devices (us); inf if it has no compute but communication, 0 if
    neither. The classic test of whether to cluster before scheduling: at a high CCR a list scheduler's greedy
    spreading pays more in transfers than it gains in parallelism (the traced and generated graphs' ratios:
    docs/commands.md, under gdp-large)."""
    nbytes = graph.out_bytes[graph.out_offsets[graph.edge_src] + graph.edge_out]
    comm = float(np.sum(cluster.delta2_us + cluster.latency_us + nbytes / cluster.bandwidth_bytes_per_us))
    compute = float(min_costs(graph, cluster).sum())
    return comm / compute if compute > 0 else (0.0 if comm == 0 else float("inf"))
