"""The simulation result, and the lower bound of every placement."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.microbatch import expansion, microbatches


class Transfers(NamedTuple):
    """The T transfers of a schedule, in the order they started.

    node: int32[T] producer; out: int32[T] output index; device: int32[T] sending device;
    start: float64[T] bus start, microseconds; end: float64[T] arrival (children released), microseconds.
    """

    node: np.ndarray
    out: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class SimResult:
    """One simulated training step.

    Attributes:
      runtime: time of the last event (trailing idle and bus overheads included), microseconds.
      start, end: float64[N] start and end time of every node, microseconds.
      device: int32[N] device of every node.
      busy: float64[D] total compute time per device, microseconds.
      capacity: float64[D] memory capacity per device, bytes.
      lower_bound: max(critical path without communication, total compute / D), microseconds.
      transfers: every transfer of the schedule.
      compute_peak_memory: () -> float64[D], called once, on the first read of `peak_memory`.
      peak_memory: float64[D] peak bytes per device (persistent bytes + live tensors), computed when first read:
        the memory sweep costs a good part of the event loop's time
        (experiments/results/benchmarks/bench_simulator.md), and most callers read only the runtime or the
        schedule.
    """

    runtime: float
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    busy: np.ndarray
    capacity: np.ndarray
    lower_bound: float
    transfers: Transfers
    compute_peak_memory: Callable[[], np.ndarray] = dataclasses.field(repr=False)

    @functools.cached_property
    def peak_memory(self) -> np.ndarray:
        """float64[D] peak bytes per device (persistent + live tensors)."""
        return self.compute_peak_memory()

    @property
    def oom(self) -> np.ndarray:
        """bool[D] devices whose peak memory exceeds their capacity."""
        return self.peak_memory > self.capacity

    @property
    def any_oom(self) -> bool:
        return bool(self.oom.any())

    @property
    def ratio(self) -> float:
        """runtime / lower bound (>= 1 up to the simulator's overheads)."""
        return self.runtime / self.lower_bound if self.lower_bound > 0 else float("inf")

    def to_dict(self, graph: Graph | None = None, cluster: Cluster | None = None) -> dict[str, Any]:
        """JSON-serialisable summary plus the per-node schedule."""
        d = {
            "runtime_us": self.runtime, "lower_bound_us": self.lower_bound, "ratio_to_lower_bound": self.ratio if
            math.isfinite(self.ratio) else None, "devices": [{"name": cluster.devices[k].name if cluster else k,
            "busy_us": float(self.busy[k]),
                         "peak_memory_bytes": float(self.peak_memory[k]),
                         "capacity_bytes": float(self.capacity[k]), "oom": bool(self.oom[k])}
                        for k in range(len(self.busy))],
            "oom": self.any_oom, "n_transfers": int(len(self.transfers.node)),
        }
        names = graph.names if graph is not None else range(len(self.start))
        d["nodes"] = [{"name": nm, "device": int(dv), "start_us": float(s), "end_us": float(e)}
                      for nm, dv, s, e in zip(names, self.device, self.start, self.end)]
        return d


def min_costs(graph: Graph, cluster: Cluster) -> np.ndarray:
    """float64[N] each node's time on its fastest device, microseconds."""
    return graph.cost_matrix(cluster.kinds).min(axis=1)


def critical_path(graph: Graph, cost: np.ndarray) -> float:
    """Longest weighted path (`cost`: float64[N]), transfers free."""
    finish = np.zeros(graph.n_nodes)
    par_off, par = graph.parents
    for i in graph.topo_order.tolist():
        ps = par[par_off[i]:par_off[i + 1]]
        finish[i] = (finish[ps].max() if ps.size else 0.0) + cost[i]
    return float(finish.max()) if graph.n_nodes else 0.0


def lower_bound(graph: Graph, cluster: Cluster) -> float:
    """A bound below any placement's runtime on `cluster`, us.

    max(critical path without communication, total compute / number of devices), with each node's fastest
    device's cost, so no placement on this cluster can finish sooner. Cached in graph.cache per device kinds. A
    microbatched graph's bound is its expanded graph's (simulator.model.microbatch): the graph it is simulated as,
    whose critical path is shorter (cost / M per copy) than the plain graph's.
    """
    key = ("lower_bound", cluster.kinds)
    if key not in graph.cache:
        ex = expansion(graph, cluster.kinds)
        simulated = graph if ex is None else ex.graph
        cost = min_costs(simulated, cluster)
        graph.cache[key] = max(critical_path(simulated, cost), float(cost.sum()) / cluster.n_devices)
    return graph.cache[key]


def upper_bound(graph: Graph, cluster: Cluster) -> float:
    """A bound above any placement's runtime on `cluster`, us.

    The engine never idles while work is ready (simulator.engine.reference): until the last event some device
    computes or waits out delta1, some bus sends or waits out delta2, some transfer is in flight, or some host
    serves a job. So the runtime is at most the sum of all of these: every node at its slowest device's cost plus
    delta1 and its host's dispatch time, every output tensor sent once over the slowest host at the cluster's
    bandwidth plus delta2, the latency and its host's transfer time. A step cut into M microbatches
    (`meta["microbatches"]`) repeats each at most M times. What the feasibility-first objective
    (placeto.objective) ranks every out-of-memory placement above. Cached in graph.cache per cluster.
    """
    key = ("upper_bound", cluster)
    if key not in graph.cache:
        hosts = cluster.host_model
        compute = graph.cost_matrix(cluster.kinds).max(axis=1) + cluster.delta1_us + float(hosts.dispatch_us.max())
        send = (graph.out_bytes / cluster.bandwidth_bytes_per_us + cluster.delta2_us + cluster.latency_us
                + float(hosts.transfer_us.max()))
        graph.cache[key] = microbatches(graph) * (float(compute.sum()) + float(send.sum()))
    return graph.cache[key]
