"""Placements that fit in memory: what a graph needs, and the repair every placer's result goes through.

Under the objective (placeto.objective) every placement that fits beats every one that does not, so the searches
stay within capacity once they are there. What is left: a placer that returns a placement over capacity (a
partitioner that balances compute, a list scheduler whose estimate of memory was low, a policy's pass) while one
that fits exists. `repair` moves nodes off the devices over capacity, greedily, scored by the objective, until it
fits; if it does not get there, the memory-aware placers are tried (`FALLBACKS`: the list schedules and the
contiguous split); `or_fitting` is that last step alone, for a one-pass method. `needed_per_device` bounds from
below what each device must hold, so that "nothing fits" can say what the graph needs.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from placeto.baselines.m_sct import m_sct
from placeto.baselines.m_topo import m_topo
from placeto.baselines.pipeline.split import pipeline_dp
from placeto.baselines.etf import etf
from placeto.objective import evaluate, score_batch_parts
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.microbatch import microbatches

FALLBACKS = {"m-topo": m_topo, "pipeline-dp": pipeline_dp, "m-sct": m_sct, "etf": etf}  # memory-aware placers
CANDIDATE_NODES = 16  # nodes of the fullest device tried per repair round
REPAIR_SECONDS = 20.0  # wall-clock limit of the greedy moves


class Repaired(NamedTuple):
    """What `repair` made of a placement."""

    placement: np.ndarray  # int32[N]
    fits: bool  # it fits every device's capacity
    how: str  # "" (it fitted already), "moves" (greedy moves made it fit), a FALLBACKS name, or "none" (nothing fitted)
    moves: int  # nodes moved by the greedy rounds


def footprint(graph: Graph) -> np.ndarray:
    """float64[N] bytes a node's device holds while it runs: its persistent bytes, its outputs and its inputs.

    By the simulator's memory rules (simulator.engine.reference): an output lives from its producer's start, an
    input until its consumer ends, persistent bytes for the whole step.
    """
    src, dst, out = graph.edge_src, graph.edge_dst, graph.edge_out
    tensor = graph.out_offsets[src] + out
    pairs = np.unique(np.stack([dst, tensor], axis=1), axis=0) if graph.n_edges else np.zeros((0, 2), np.int64)
    inputs = np.bincount(pairs[:, 0], weights=graph.out_bytes[pairs[:, 1]], minlength=graph.n_nodes)
    return graph.persistent_bytes + graph.node_out_bytes + inputs


def needed_per_device(graph: Graph, n_devices: int) -> float:
    """Bytes: a bound below what the fullest device holds under any placement on `n_devices` devices.

    max(the persistent bytes over n_devices, the largest node's `footprint`). A step cut into microbatches
    (`meta["microbatches"]`) shrinks activations, so for it only the persistent bytes count.
    """
    largest = graph.persistent_bytes if microbatches(graph) > 1 else footprint(graph)
    return max(float(graph.persistent_bytes.sum()) / n_devices, float(largest.max(initial=0.0)))


def peaks(graph: Graph, placements: np.ndarray, cluster: Cluster) -> np.ndarray:
    """float64[B, D] peak bytes of placements int[B, N] as the objective counts them (placeto.objective.evaluate:
    simulated, or a max-load graph's bytes per device); not metered: a report, not a search."""
    return evaluate(graph, np.atleast_2d(placements).astype(np.int32), cluster)[1]


def or_fitting(graph: Graph, cluster: Cluster, placement: np.ndarray) -> np.ndarray:
    """`placement` int32[N] if it fits, else the best by the objective of it and the FALLBACKS' placements.

    A one-pass method's last step where one device is not enough: it then fits wherever a memory-aware list
    schedule does. The check is not metered; the fallbacks, when tried, are (one call each, and one for `placement`).
    """
    placement = np.asarray(placement, np.int32)
    if np.all(peaks(graph, placement, cluster)[0] <= np.asarray(cluster.memory, np.float64)):
        return placement
    cands = np.stack([placement] + [np.asarray(f(graph, cluster), np.int32) for f in FALLBACKS.values()])
    return cands[int(np.argmin(score_batch_parts(graph, cands, cluster).objective))]


def repair(graph: Graph, cluster: Cluster, placement: np.ndarray, seconds: float = REPAIR_SECONDS) -> Repaired:
    """`placement` if it fits, else one that does, found by greedy moves or a list schedule.

    Each round tries the CANDIDATE_NODES largest nodes (`footprint`) of the device furthest over its capacity
    (relative to it) on every other device, in one batch scored by the objective, and makes the best move if it
    lowers the objective; rounds go on while the placement is over capacity and `seconds` last. If it is still over,
    the FALLBACKS' placements are scored and the best is taken if it fits. Metered (placeto.objective.meter).
    """
    cur, cap = np.asarray(placement, np.int32).copy(), np.asarray(cluster.memory, np.float64)
    if np.all(peaks(graph, cur, cluster)[0] <= cap):  # the check is no search: not metered
        return Repaired(cur, True, "", 0)
    score, n_dev = float(score_batch_parts(graph, cur[None], cluster).objective[0]), cluster.n_devices
    size, moved, deadline = footprint(graph), 0, time.perf_counter() + seconds
    while n_dev > 1 and time.perf_counter() < deadline:
        peak = peaks(graph, cur, cluster)[0]
        worst = int(np.argmax((peak - cap) / cap))
        on = np.flatnonzero(cur == worst)
        nodes = on[np.argsort(-size[on], kind="stable")[:CANDIDATE_NODES]]
        if nodes.size == 0:
            break
        targets = np.array([d for d in range(n_dev) if d != worst], np.int32)
        props = np.repeat(cur[None], len(nodes) * len(targets), axis=0)
        props[np.arange(len(props)), np.repeat(nodes, len(targets))] = np.tile(targets, len(nodes))
        scored = score_batch_parts(graph, props, cluster)
        i = int(np.argmin(scored.objective))
        if not scored.objective[i] < score:
            break
        cur, score, moved = props[i].copy(), float(scored.objective[i]), moved + 1
        if scored.excess[i] == 0:
            return Repaired(cur, True, "moves", moved)
    cands = np.stack([np.asarray(f(graph, cluster), np.int32) for f in FALLBACKS.values()])
    scored = score_batch_parts(graph, cands, cluster)
    i = int(np.argmin(scored.objective))
    if scored.excess[i] == 0:
        return Repaired(cands[i], True, list(FALLBACKS)[i], moved)
    return (Repaired(cands[i], False, "none", moved) if scored.objective[i] < score
            else Repaired(cur, False, "none", moved))
