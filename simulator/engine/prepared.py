"""The fast engine's per-(graph, cluster) arrays, computed once.

What simulator.engine.fast needs whatever the placement, cached on the graph (`Graph.cache`, keyed by the
cluster: a frozen dataclass compared by value; the graph's arrays are read-only, so the cache cannot go stale).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.limits import check_graph_on_cluster


class Prepared(NamedTuple):
    """Placement-independent arrays of one (graph, cluster).

    N nodes, O outputs, D devices, H hosts; C distinct (output, consumer) and P distinct (parent, child) pairs.
    """

    cost: np.ndarray  # float64[N, D] compute time of each node on each device, microseconds
    xfer_time: np.ndarray  # float64[O] out_bytes / bandwidth, microseconds
    out_off: np.ndarray  # int64[N + 1] outputs of node i are out_off[i]:out_off[i + 1]
    out_node: np.ndarray  # int32[O] producer of each output
    out_bytes: np.ndarray  # float64[O] bytes
    cons_off: np.ndarray  # int64[O + 1] CSR into cons
    cons: np.ndarray  # int32[C] distinct consumers of each output, ascending
    child_off: np.ndarray  # int64[N + 1] CSR into child
    child: np.ndarray  # int32[P] distinct children of each node, ascending
    child_count: np.ndarray  # int32[P] distinct outputs of the parent the child consumes
    pending0: np.ndarray  # int32[N] distinct (parent, output) inputs of each node
    persistent: np.ndarray  # float64[N] bytes
    delta1: float  # microseconds, device idle after a non-zero-cost op
    delta2: float  # microseconds, bus busy after a transfer
    latency: float  # microseconds, from a transfer leaving the wire to its arrival
    host: np.ndarray  # int64[D] host of each device (Cluster.host_model)
    dispatch: np.ndarray  # float64[D] host time per op started on the device, microseconds (0: none asked)
    send: np.ndarray  # float64[D] host time per transfer the device sends, microseconds (0: none asked)
    n_hosts: int  # H
    max_changes: int  # upper bound on memory change records of any placement
    exact_memory: bool  # every partial sum of memory changes is exact: the sweep may skip the (time, bytes) sort


def prepare(graph: Graph, cluster: Cluster) -> Prepared:
    """The arrays of `graph` on `cluster`, memoised in graph.cache."""
    key = ("engine.prepare", cluster)
    if key not in graph.cache:
        graph.cache[key] = prepare_arrays(graph, cluster)
    return graph.cache[key]


def prepare_arrays(graph: Graph, cluster: Cluster) -> Prepared:
    n, n_dev, n1 = graph.n_nodes, cluster.n_devices, max(graph.n_nodes, 1)
    cost = np.ascontiguousarray(graph.cost_matrix(cluster.kinds), dtype=np.float64)
    check_graph_on_cluster(graph, cluster, cost)  # every simulated time finite: the kernel's index math needs it
    out_off = np.array(graph.out_offsets, dtype=np.int64)  # a writable copy: one numba signature for all
    n_out = int(out_off[-1])
    out_node = np.repeat(np.arange(n, dtype=np.int32), np.diff(out_off))
    # Distinct (output, consumer) pairs, sorted by output then consumer.
    pair = np.unique((out_off[graph.edge_src] + graph.edge_out) * n1 + graph.edge_dst.astype(np.int64))
    p_out, p_dst = pair // n1, (pair % n1).astype(np.int32)
    cons_off = np.concatenate([[0], np.cumsum(np.bincount(p_out, minlength=n_out))]).astype(np.int64)
    # Distinct (parent, child) pairs, with the number of distinct outputs of the parent the child consumes.
    pc, pc_count = np.unique(out_node[p_out].astype(np.int64) * n1 + p_dst, return_counts=True)
    child_off = np.concatenate([[0], np.cumsum(np.bincount(pc // n1, minlength=n))]).astype(np.int64)
    receivers = np.minimum(n_dev - 1, np.diff(cons_off))  # devices an output can be sent to, at most
    out_bytes = graph.out_bytes.astype(np.float64)
    # Whole bytes whose change records sum below 2**53 in absolute value: every running sum is exact, so the
    # order of the sum within one time cannot change the peak (see _peak_memory_exact).
    hosts = cluster.host_model
    exact = bool(np.all(out_bytes == np.floor(out_bytes))
                 and 2.0 * float(np.sum(out_bytes * (1.0 + receivers))) < 2.0**53)
    return Prepared(
        cost=cost,
        xfer_time=graph.out_bytes.astype(np.float64) / cluster.bandwidth_bytes_per_us,  # as the reference
        out_off=out_off, out_node=out_node, out_bytes=graph.out_bytes.astype(np.float64),
        cons_off=cons_off, cons=p_dst,
        child_off=child_off, child=(pc % n1).astype(np.int32), child_count=pc_count.astype(np.int32),
        pending0=np.bincount(p_dst, minlength=n).astype(np.int32),
        persistent=graph.persistent_bytes.astype(np.float64),
        delta1=float(cluster.delta1_us), delta2=float(cluster.delta2_us), latency=float(cluster.latency_us),
        host=hosts.host.copy(), dispatch=hosts.dispatch_us.copy(), send=hosts.transfer_us.copy(),
        n_hosts=int(hosts.n_hosts),
        max_changes=int(2 * n_out + 2 * receivers.sum()), exact_memory=exact,
    )
