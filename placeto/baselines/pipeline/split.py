"""`pipeline-dp`: the memory-constrained contiguous split that minimises max-load.

A pipeline baseline in the spirit of msr-fiddle's DP and PipeDream's partitioner. The graph becomes a sequence of
blocks (`placeto.baselines.pipeline.sequence`: colocation groups, a training graph's backward nodes with their
forward ones, in a topological order) and a dynamic program over split points cuts it into at most D stages, one
device each, minimising the largest stage load (simulator.model.max_load: compute on the device's kind plus the
transfers across the stage's boundary, none on a CPU) subject to each stage's bytes fitting its device.

Devices are grouped by (kind, capacity, whether they pay transfers); the DP state is how many devices of each group
are used, so a CPU stage can sit anywhere in the pipeline, as in their DP. f[s][j] = the least max-load that covers
blocks [0, j) with the devices counted in s, over f[s - e_g][i] and the stage [i, j) on a group-g device;
O(S * G * K^2) for S states, G groups and K blocks (one numpy pass over i per (state, group, j)).

Unlike their DP, which searches all contiguous splits (differences of ideals of the forward graph), this one cuts
one topological order: a subset of their splits, so it can miss their optimum on branchy graphs; it is the usual
start for a local search (`experiments/reproduce/msr_fiddle.py`).

On a max-load graph (meta["objective"] == "max_load") the loads are the graph's own; on any other graph the proxy is
the compute on the cluster's first accelerator kind, transfers of each node's output bytes over the cluster's
bandwidth, and memory = persistent + output bytes (placeto.baselines.common.memory_need). When no split fits in
memory it raises nothing: it returns the split of least excess (the smallest largest overflow of a device, in bytes),
the least max-load among those.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from placeto.baselines.common import memory_need, reference_kind
from placeto.baselines.pipeline.sequence import Sequence, block_sequence, interval_costs
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.max_load import MaxLoadModel, is_max_load, model_of, representatives

INF = float("inf")


class Group(NamedTuple):
    """Devices interchangeable for the DP."""

    devices: tuple[int, ...]  # device indices, in cluster order (stages take them in this order)
    column: int  # the device whose compute column the group uses
    capacity: float  # bytes each
    charged: bool  # pays transfer costs


def pipeline_dp(graph: Graph, cluster: Cluster, seed: int = 0) -> np.ndarray:
    """Device int32[N] of each node in the best contiguous split (module docstring)."""
    del seed  # deterministic
    model = split_model(graph, cluster)
    meta = graph.meta.get("max_load", {})
    backward = np.asarray(meta.get("backward") or [False] * graph.n_nodes, dtype=bool)
    seq = block_sequence(model, backward, graph.n_nodes)
    return split_sequence(model, seq, cluster)


def split_model(graph: Graph, cluster: Cluster) -> MaxLoadModel:
    """The loads the split minimises: the graph's max-load, or the proxy (module docstring)."""
    if is_max_load(graph):
        return model_of(graph, cluster)
    kind = reference_kind(cluster)
    cost = np.repeat(graph.cost_for(kind)[:, None], cluster.n_devices, axis=1)
    off, targets = graph.children
    return MaxLoadModel(cost, graph.node_out_bytes / cluster.bandwidth_bytes_per_us,
                        np.ones(cluster.n_devices, dtype=bool), np.ones((graph.n_nodes, cluster.n_devices), bool),
                        representatives(graph), memory_need(graph),
                        np.repeat(np.arange(graph.n_nodes), np.diff(off)), targets.astype(np.int64))


def device_groups(model: MaxLoadModel, cluster: Cluster) -> list[Group]:
    """The cluster's devices grouped by compute column, capacity and transfer charge."""
    groups: dict[tuple, list[int]] = {}
    for d in range(cluster.n_devices):
        same = next((c for c in range(d) if np.array_equal(model.cost[:, c], model.cost[:, d])
                     and np.array_equal(model.allowed[:, c], model.allowed[:, d])), d)
        groups.setdefault((same, float(cluster.capacity[d]), bool(model.charged[d])), []).append(d)
    return [Group(tuple(devs), col, cap, charged) for (col, cap, charged), devs in groups.items()]


def split_sequence(model: MaxLoadModel, seq: Sequence, cluster: Cluster) -> np.ndarray:
    """The best split of `seq` over the cluster's devices, as devices int32[N]."""
    groups = device_groups(model, cluster)
    iv = interval_costs(model, seq, sorted({g.column for g in groups}))
    loads = [_stage_loads(iv, g) for g in groups]
    excess = [np.where(np.isfinite(load), np.maximum(iv.size - g.capacity, 0.0), INF) for load, g in zip(loads, groups)]
    stages = _dp([np.where(e > 0, INF, load) for load, e in zip(loads, excess)], groups, seq.n_blocks)
    if stages is None:  # nothing fits: the least largest excess first (one DP), then the least max-load within it
        least = _dp(excess, groups, seq.n_blocks)
        if least is not None:
            worst = max(float(excess[g][i, j]) for g, i, j in least)
            stages = _dp([np.where(e > worst, INF, load) for load, e in zip(loads, excess)], groups, seq.n_blocks)
    if stages is None:  # a node no device may run (their supportedOnFpga without a CPU): all on device 0
        return np.zeros(len(seq.block), dtype=np.int32)
    block_device = np.zeros(seq.n_blocks, dtype=np.int32)
    used = [0] * len(groups)
    for g, i, j in stages:
        block_device[i:j] = groups[g].devices[used[g]]
        used[g] += 1
    return block_device[seq.block]


def _stage_loads(iv, g: Group) -> np.ndarray:
    """[K + 1, K + 1] load of each interval on a device of group g (inf where a node may not run there)."""
    load = iv.cost[g.column] + (iv.comm if g.charged else 0.0)
    return np.where(iv.allowed[g.column], load, INF)


def _dp(stage: list[np.ndarray], groups: list[Group], k: int) -> list[tuple[int, int, int]] | None:
    """Stages [(group, i, j), ...] in sequence order of the least max-load split; None if infinite.

    stage[g][i, j]: the load of blocks [i, j) on a group-g device (inf: not allowed).
    """
    counts = [len(g.devices) for g in groups]
    states = list(itertools.product(*(range(c + 1) for c in counts)))
    index = {s: n for n, s in enumerate(states)}
    f = np.full((len(states), k + 1), INF)
    back = np.full((len(states), k + 1, 2), -1, dtype=np.int64)  # (group, i); i == j: the device left unused
    f[0, 0] = 0.0
    for s in states[1:]:
        row = index[s]
        for g in range(len(groups)):
            if s[g] == 0:
                continue
            prev = index[s[:g] + (s[g] - 1,) + s[g + 1:]]
            better = f[prev] < f[row]
            f[row, better], back[row, better] = f[prev, better], np.stack([np.full(k + 1, g), np.arange(k + 1)], 1)[better]
            for j in range(1, k + 1):
                cand = np.maximum(f[prev, :j], stage[g][:j, j])
                i = int(np.argmin(cand))
                if cand[i] < f[row, j]:
                    f[row, j], back[row, j] = cand[i], (g, i)
    last = index[tuple(counts)]
    if not np.isfinite(f[last, k]):
        return None
    out, s, j = [], tuple(counts), k
    while j > 0:
        g, i = (int(x) for x in back[index[s], j])
        if i < j:
            out.append((g, i, j))
        s, j = s[:g] + (s[g] - 1,) + s[g + 1:], i
    return out[::-1]
