"""Plain-Python event loop: the simulator's semantics, to be read.

The oracle that the fast engine (simulator.engine.fast) is tested equal to. Semantics (those of the published
Placeto simulator, made exact):

* Each device runs one op at a time, from a FIFO queue ordered by (time the op became ready, a global arrival
  counter). Source nodes arrive at t=0 in node order.
* An op that starts at t ends at t + cost; its device may start its next op at (t + cost) + delta1 (no delta1
  after a zero-cost op). Its children on the same device are released at t + cost.
* For each output index, the children on other devices share one transfer. Transfers wait in the sending
  device's outgoing bus queue (FIFO by producer end time, then output index); a transfer the bus takes at s
  leaves at w = s, goes over the wire until e = w + bytes / bandwidth, releases its children at e + latency and
  keeps the bus busy until e + delta2. There is no receive-side contention.
* Hosts (optional; Cluster.hosts): each device belongs to one host, a server of one job at a time. An op a device
  takes at t (as above) asks its host for dispatch_us > 0: the job runs from h = max(t, host free time), and the
  op starts at h + dispatch_us instead of t; the first of a producer's outputs with a remote consumer, taken by
  the bus at s, asks for transfer_us > 0 and leaves at w = max(s, host free time) + transfer_us (the producer's
  later outputs leave at w = s: one host job sends all of them, as simulator.hardware.dispatch's one device_put per
  producer and receiving device). Jobs are served in the order asked (the order of the events below); a zero
  host time asks for nothing. Without hosts and latency this is the published model, float for float.
* A child is ready when every distinct (parent, output) it consumes has been released to it.
* Events at equal times: releases first (by parent, then output, then child; a parent's local releases before
  its transfers'), then bus starts (by device), then device starts (by device). Runtime is the time of the last
  event. (Two releases of one parent at one time come only from two transfers in flight at once, which needs a
  latency: without one, a bus takes its next transfer no earlier than the previous one's arrival.)
* Memory: an output tensor occupies its producer's device from the producer's start until its producer, its
  consumers on that device and its transfer have all finished; a transferred copy occupies each receiving
  device from its arrival until its consumers there have finished. Persistent bytes count for the whole run.
  At equal times frees come before allocations.
"""

from __future__ import annotations

import collections
import functools
import heapq
from typing import Sequence

import numpy as np

from simulator.engine.microbatched import simulate_microbatched
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.io import check_placement
from simulator.model.limits import check_graph_on_cluster
from simulator.model.result import SimResult, Transfers, lower_bound

RELEASE, BUS, DEVICE = 0, 1, 2  # event kinds, in tie-break order


def consumers_by_output(graph: Graph) -> list[list[list[int]]]:
    """[node][output] -> sorted distinct consumer nodes."""
    cons: list[list[set[int]]] = [[set() for _ in range(int(k))] for k in graph.n_outputs]
    for s, d, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        cons[s][o].add(d)
    return [[sorted(c) for c in node] for node in cons]


def simulate_reference(graph: Graph, placement: Sequence[int], cluster: Cluster) -> SimResult:
    """One simulated step of `graph` under `placement`, in plain Python.

    placement: a device index per node, on `cluster`'s devices. A microbatched graph (meta["microbatches"] > 1)
    is simulated as its expanded graph, the result read per original node (simulator.engine.microbatched).

    Raises:
      InputError: for a bad placement, or a graph and cluster whose times could leave the limits
        (check_graph_on_cluster).
    """
    if graph.meta.get("microbatches", 1) != 1:
        return simulate_microbatched(simulate_reference, graph, placement, cluster)
    n, n_dev = graph.n_nodes, cluster.n_devices
    check_placement(placement, graph, n_dev)
    dev = [int(x) for x in placement]
    cost_matrix = graph.cost_matrix(cluster.kinds)
    check_graph_on_cluster(graph, cluster, cost_matrix)  # the same contract as the fast engine
    cost = [float(cost_matrix[i, dev[i]]) for i in range(n)]
    out_off = graph.out_offsets.tolist()
    xfer_time = [b / cluster.bandwidth_bytes_per_us for b in graph.out_bytes.tolist()]
    cons = consumers_by_output(graph)
    d1, d2, latency = cluster.delta1_us, cluster.delta2_us, cluster.latency_us
    hosts = cluster.host_model
    host_of, dispatch, send = hosts.host.tolist(), hosts.dispatch_us.tolist(), hosts.transfer_us.tolist()
    host_free = [0.0] * hosts.n_hosts

    pending = [0] * n  # distinct (parent, output) inputs not yet released
    for node in cons:
        for c_list in node:
            for c in c_list:
                pending[c] += 1
    queue = [collections.deque() for _ in range(n_dev)]  # ready ops, FIFO
    bus = [collections.deque() for _ in range(n_dev)]  # (ready time, node, output), FIFO
    dev_free, bus_free = [0.0] * n_dev, [0.0] * n_dev
    start, end = [np.nan] * n, [np.nan] * n
    xfers: list[tuple[int, int, int, float, float]] = []
    events: list[tuple] = []
    for i in range(n):
        if pending[i] == 0:
            queue[dev[i]].append(i)
    for d in range(n_dev):
        heapq.heappush(events, (0.0, DEVICE, d, 0, 0, 0))
    now = 0.0
    while events:  # (time, kind, device or parent, output (-1: local release), child, count)
        now, kind, a, k, b, count = heapq.heappop(events)
        if kind == RELEASE:  # parent a releases `count` inputs of child b
            pending[b] -= count
            if pending[b] == 0:
                queue[dev[b]].append(b)
                heapq.heappush(events, (now, DEVICE, dev[b], 0, 0, 0))
        elif kind == BUS:
            if bus_free[a] <= now and bus[a] and bus[a][0][0] <= now:
                _, p, k = bus[a].popleft()
                leave = now
                first = not any(dev[c] != a for k0 in range(k) for c in cons[p][k0])
                if send[a] > 0 and first:  # the host's job first, once per producer
                    leave = host_free[host_of[a]] = max(now, host_free[host_of[a]]) + send[a]
                sent = leave + xfer_time[out_off[p] + k]
                arrival = sent + latency
                bus_free[a] = sent + d2
                xfers.append((p, k, a, now, arrival))
                for c in cons[p][k]:
                    if dev[c] != a:
                        heapq.heappush(events, (arrival, RELEASE, p, k, c, 1))
                heapq.heappush(events, (bus_free[a], BUS, a, 0, 0, 0))
        elif dev_free[a] <= now and queue[a]:  # DEVICE
            i = queue[a].popleft()
            begin = now
            if dispatch[a] > 0:  # the host's job first
                begin = host_free[host_of[a]] = max(now, host_free[host_of[a]]) + dispatch[a]
            start[i], end[i] = begin, begin + cost[i]
            dev_free[a] = end[i] + d1 if cost[i] > 0 else end[i]
            heapq.heappush(events, (dev_free[a], DEVICE, a, 0, 0, 0))
            local: dict[int, int] = {}
            for k, c_list in enumerate(cons[i]):
                if any(dev[c] != a for c in c_list):
                    bus[a].append((end[i], i, k))
                    heapq.heappush(events, (end[i], BUS, a, 0, 0, 0))
                for c in c_list:
                    if dev[c] == a:
                        local[c] = local.get(c, 0) + 1
            for c in sorted(local):
                heapq.heappush(events, (end[i], RELEASE, i, -1, c, local[c]))
    if any(np.isnan(s) for s in start):
        raise AssertionError("simulation ended with unexecuted nodes")  # impossible for a validated DAG
    t = list(zip(*xfers)) if xfers else [[]] * 5
    transfers = Transfers(*(np.asarray(col, dtype=dt) for col, dt in
                            zip(t, (np.int32, np.int32, np.int32, np.float64, np.float64))))
    start_a, end_a, dev_a = np.asarray(start), np.asarray(end), np.asarray(dev, dtype=np.int32)
    busy = [0.0] * n_dev
    for i in range(n):
        busy[dev[i]] += cost[i]
    return SimResult(
        runtime=now, start=start_a, end=end_a, device=dev_a, busy=np.asarray(busy),
        capacity=np.asarray(cluster.memory, dtype=np.float64), lower_bound=lower_bound(graph, cluster),
        transfers=transfers,
        compute_peak_memory=functools.partial(peak_memory_reference, graph, dev, start, end, transfers, cons, n_dev),
    )


def peak_memory_reference(graph: Graph, dev: list[int], start: list[float], end: list[float],
                          transfers: Transfers, cons: list[list[list[int]]], n_dev: int) -> np.ndarray:
    """float64[D] peak bytes per device of a finished schedule.

    By the module docstring's memory rules.
    """
    arrival = {(int(p), int(k)): float(t) for p, k, t in zip(transfers.node, transfers.out, transfers.end)}
    out_bytes, out_off = graph.out_bytes.tolist(), graph.out_offsets.tolist()
    changes: list[list[tuple[float, float]]] = [[] for _ in range(n_dev)]  # (time, +bytes / -bytes)
    for p in range(graph.n_nodes):
        for k, c_list in enumerate(cons[p]):
            size = out_bytes[out_off[p] + k]
            home = dev[p]
            free_home = max([end[p]] + [end[c] for c in c_list if dev[c] == home])
            if (p, k) in arrival:
                free_home = max(free_home, arrival[(p, k)])
                for d in sorted({dev[c] for c in c_list} - {home}):
                    free_d = max(end[c] for c in c_list if dev[c] == d)
                    changes[d] += [(arrival[(p, k)], size), (free_d, -size)]
            changes[home] += [(start[p], size), (free_home, -size)]
    persistent = [0.0] * n_dev
    for i, b in enumerate(graph.persistent_bytes.tolist()):
        persistent[dev[i]] += b
    peaks = []
    for d in range(n_dev):
        live, peak = 0.0, 0.0
        for _, delta in sorted(changes[d]):  # at equal times the negative (free) sorts first
            live += delta
            peak = max(peak, live)
        peaks.append(persistent[d] + peak)
    return np.asarray(peaks, dtype=np.float64)
