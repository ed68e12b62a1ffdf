"""What the baselines share: the method type, the simulator-call counter, device choice and the weighted graph.

Every method is a function `(graph, cluster, seed, **options) -> int32[N]` (device index per node). Methods that
search (random, local-search) score placements with `evaluate`, which calls the fast simulator in batches and
counts the calls, so the comparison harness can report how many each method used.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Callable, Iterator, NamedTuple

import numpy as np

from simulator import simulate_batch
from simulator.cluster import Cluster
from simulator.errors import InputError
from simulator.graph import Graph

Method = Callable[..., np.ndarray]  # (graph, cluster, seed, **options) -> int32[N] device index per node

CPU_KIND = "cpu"
DEFAULT_BUDGET = 1000  # simulator calls of the searching baselines; the learned policy gets the same (compare)
EVAL_CHUNK = 64  # placements per simulate_batch call
OOM_PENALTY = 2.0  # an out-of-memory placement scores runtime * (OOM_PENALTY + overflow fraction)


class NotApplicable(InputError):
    """The method does not apply to this graph or cluster (no shipped expert placement, no CPU device, ...)."""


@dataclasses.dataclass
class CallCounter:
    """Simulated placements since the counter was opened (one placement of a batch is one call)."""

    calls: int = 0


_COUNTER: contextvars.ContextVar[CallCounter | None] = contextvars.ContextVar("simulator_calls", default=None)


@contextlib.contextmanager
def count_simulator_calls() -> Iterator[CallCounter]:
    """Count the placements `evaluate` simulates inside the `with` block."""
    counter = CallCounter()
    token = _COUNTER.set(counter)
    try:
        yield counter
    finally:
        _COUNTER.reset(token)


def evaluate(graph: Graph, placements: np.ndarray, cluster: Cluster) -> np.ndarray:
    """float64[B] search objective of placements int[B, N]: simulated runtime (us), penalised when out of memory.

    A placement whose peak memory exceeds some device's capacity scores
    runtime * (OOM_PENALTY + the largest overflow as a fraction of capacity), so any placement that fits beats
    any that does not unless it is more than twice as slow. Counted by `count_simulator_calls`.
    """
    placements = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int32)
    cap = np.asarray(cluster.memory, dtype=np.float64)
    scores = []
    for i in range(0, placements.shape[0], EVAL_CHUNK):
        res = simulate_batch(graph, placements[i:i + EVAL_CHUNK], cluster, with_memory=True)
        over = np.maximum(0.0, (res.peak_memory - cap) / cap).max(axis=1)
        scores.append(np.where(over > 0, res.runtime * (OOM_PENALTY + over), res.runtime))
    counter = _COUNTER.get()
    if counter is not None:
        counter.calls += placements.shape[0]
    return np.concatenate(scores)


# ---- devices ----------------------------------------------------------------------------------------------
def gpu_devices(cluster: Cluster) -> np.ndarray:
    """int32[G] indices of the accelerator devices (every kind but "cpu"); all devices if there are none."""
    idx = [i for i, d in enumerate(cluster.devices) if d.kind != CPU_KIND]
    return np.asarray(idx or range(cluster.n_devices), dtype=np.int32)


def reference_kind(cluster: Cluster, devices: np.ndarray | None = None) -> str:
    """The device kind whose costs weigh nodes for the partitioners: the first accelerator's."""
    devices = gpu_devices(cluster) if devices is None else devices
    return cluster.devices[int(devices[0])].kind


def device_speeds(graph: Graph, cluster: Cluster, devices: np.ndarray) -> np.ndarray:
    """float64[len(devices)] relative speed of each device: total cost on the reference kind / total cost on it."""
    costs = graph.cost_matrix([cluster.devices[int(d)].kind for d in devices]).sum(axis=0)
    ref = graph.cost_for(reference_kind(cluster, devices)).sum()
    return np.where(costs > 0, ref / np.maximum(costs, 1e-300), 1.0)


# ---- the weighted graph -------------------------------------------------------------------------------------
class PairBytes(NamedTuple):
    """Distinct producer -> consumer pairs with the bytes a transfer between them moves.

    src, dst: int32[P] pair endpoints, sorted by (dst, src) like `graph.parents`.
    bytes: float64[P] total size of the distinct outputs of src that dst consumes.
    """

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray


def pair_bytes(graph: Graph) -> PairBytes:
    """Merge parallel edges: each (src, dst) pair carries the sum of the distinct outputs it uses."""
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
    """int64 weights >= 1 proportional to x >= 0, summing to about `total` (partitioners want small ints)."""
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
    """Symmetric CSR with node weights `node_weight` (float64[N]) and edge weights = bytes, as small ints."""
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
    """float64[N] bytes a node is charged on its device: persistent bytes plus all its outputs.

    It over-estimates what stays resident (the simulator frees an output once its consumers are done) and
    leaves out received copies, which occupy the consumers' devices.
    """
    return graph.persistent_bytes + graph.node_out_bytes


def as_placement(x: np.ndarray, graph: Graph, cluster: Cluster) -> np.ndarray:
    """int32[N] copy of `x`, checked: right length, every index a device of `cluster`."""
    p = np.asarray(x).astype(np.int32).reshape(-1)
    if p.shape != (graph.n_nodes,) or (p.size and (p.min() < 0 or p.max() >= cluster.n_devices)):
        raise AssertionError(f"invalid placement for {graph.name!r} on {cluster.n_devices} devices")
    return p
