"""What the local searches share: starts, node weights, moves.

A move puts one node on another device. Nodes are drawn with probability proportional to (compute time + mean
compute time), so the heavy nodes that decide the makespan move more often. The target is, with probability
`neighbour_prob`, the device of one of the node's parents or children (pulling a node to its data), else a
uniformly chosen other device; policy-guided search (`placeto.methods.placeto.guided`) adds a third source, the
policy's prior.
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import evaluate
from placeto.objective import fits_threshold
from placeto.baselines.etf import etf
from placeto.baselines.heft import heft
from placeto.baselines.m_sct import m_sct
from placeto.baselines.m_topo import m_topo
from placeto.baselines.pipeline.split import pipeline_dp
from placeto.baselines.single import single
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

LIST_SCHEDULERS = {"single": single, "etf": etf, "heft": heft}
MEMORY_STARTS = {"m-topo": m_topo, "m-sct": m_sct, "pipeline-dp": pipeline_dp}


def start_placements(graph: Graph, cluster: Cluster, init: np.ndarray | str | None) -> list[np.ndarray]:
    """Candidate starting placements of a search.

    `init`: a placement, a name of LIST_SCHEDULERS, or None for single's and the list schedulers' placements.
    """
    if init is None:
        return [f(graph, cluster) for f in LIST_SCHEDULERS.values()]
    if isinstance(init, str):
        if init not in LIST_SCHEDULERS:
            raise ValueError(f"unknown init {init!r} ({', '.join(LIST_SCHEDULERS)} or a placement)")
        return [LIST_SCHEDULERS[init](graph, cluster)]
    return [np.asarray(init, dtype=np.int32).copy()]


def best_start(graph: Graph, cluster: Cluster, init: np.ndarray | str | None) -> tuple[np.ndarray, float]:
    """(placement int32[N], objective) of the best start.

    One simulator call per candidate. With the default starts (`init` None), where none of them fits in memory the
    memory-aware placers (MEMORY_STARTS: m-TOPO, m-SCT, the contiguous split) are candidates too: a search that starts within
    capacity stays there (placeto.objective).
    """
    starts = start_placements(graph, cluster, init)
    scores = evaluate(graph, np.stack(starts), cluster)
    if init is None and scores.min() >= fits_threshold(graph, cluster):
        more = [np.asarray(f(graph, cluster), np.int32) for f in MEMORY_STARTS.values()]
        starts, scores = starts + more, np.concatenate([scores, evaluate(graph, np.stack(more), cluster)])
    i = int(np.argmin(scores))
    return starts[i].copy(), float(scores[i])


def node_weights(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Probability float64[N] of moving each node.

    Proportional to its mean cost plus the graph's mean cost.
    """
    cost = graph.cost_matrix(cluster.kinds).mean(axis=1)
    weight = cost + cost.mean() + 1e-12
    return weight / weight.sum()


def neighbours(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Each node's parents and children as a CSR.

    (offsets int64[N + 1], neighbours int32[2P]); cached in graph.cache.
    """
    key = ("search_neighbours",)
    if key not in graph.cache:
        par_off, par = graph.parents
        ch_off, ch = graph.children
        node = np.concatenate([np.repeat(np.arange(graph.n_nodes), np.diff(par_off)),
                               np.repeat(np.arange(graph.n_nodes), np.diff(ch_off))])
        other = np.concatenate([par, ch])
        order = np.argsort(node, kind="stable")
        off = np.zeros(graph.n_nodes + 1, dtype=np.int64)
        np.add.at(off, node + 1, 1)
        graph.cache[key] = (np.cumsum(off), other[order].astype(np.int32))
    return graph.cache[key]


def targets(rng: np.random.Generator, nodes: np.ndarray, cur: np.ndarray, nb_off: np.ndarray, nb: np.ndarray,
            n_dev: int, neighbour_prob: float) -> np.ndarray:
    """New devices int32[B] for `nodes`: a neighbour's or a random one.

    With probability `neighbour_prob` the device of a random parent or child, when that differs from the node's;
    else a uniformly chosen other device.
    """
    other = (cur[nodes] + rng.integers(1, n_dev, size=len(nodes))) % n_dev
    degree = nb_off[nodes + 1] - nb_off[nodes]
    pick = nb_off[nodes] + (rng.random(len(nodes)) * np.maximum(degree, 1)).astype(np.int64)
    via_nb = (rng.random(len(nodes)) < neighbour_prob) & (degree > 0)
    nb_dev = cur[nb[np.minimum(pick, len(nb) - 1)]] if len(nb) else cur[nodes]
    use = via_nb & (nb_dev != cur[nodes])
    return np.where(use, nb_dev, other).astype(np.int32)


def proposals(cur: np.ndarray, nodes: np.ndarray, devs: np.ndarray) -> np.ndarray:
    """int32[B, N] copies of `cur`, nodes[b] moved to devs[b] in row b."""
    out = np.repeat(cur[None, :], len(nodes), axis=0)
    out[np.arange(len(nodes)), nodes] = devs
    return out


def blocks(rng: np.random.Generator, nodes: np.ndarray, cur: np.ndarray, nb_off: np.ndarray, nb: np.ndarray,
           max_size: int) -> list[np.ndarray]:
    """A connected block around each node, on its device.

    A breadth-first walk over parents and children on the same device, up to a size drawn uniformly from
    2..max_size. Moving a chain's piece at once crosses the barrier that single moves face: each single move
    adds transfers before it pays off.

    Returns:
      One int64 array of block members per node, the node first.
    """
    out = []
    for v in nodes.tolist():
        size = int(rng.integers(2, max_size + 1))
        seen, frontier, dev = [v], [v], cur[v]
        taken = {v}
        while frontier and len(seen) < size:
            u = frontier.pop(0)
            for w in nb[nb_off[u]:nb_off[u + 1]].tolist():
                if w not in taken and cur[w] == dev:
                    taken.add(w)
                    seen.append(w)
                    frontier.append(w)
                    if len(seen) >= size:
                        break
        out.append(np.asarray(seen, dtype=np.int64))
    return out


def block_proposals(cur: np.ndarray, members: list[np.ndarray], devs: np.ndarray) -> np.ndarray:
    """int32[B, N] copies of `cur`, members[b] moved to devs[b]."""
    out = np.repeat(cur[None, :], len(members), axis=0)
    for b, block in enumerate(members):
        out[b, block] = devs[b]
    return out
