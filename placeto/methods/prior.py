"""Annealing steered by a policy's prior: placeto-search's steps 2-3.

The prior, float[N, D], is each node's device distribution. The steps are those of placeto-search
(placeto.methods.placeto.guided's module docstring), shared by placeto-search and gdp-search. This module knows
no method: a method brings its greedy placement and prior.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from placeto.baselines.common import batch_size, evaluate
from placeto.objective import meter
from placeto.baselines import moves
from placeto.baselines.sa import anneal
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def renaming(src: np.ndarray, dst: np.ndarray, n_devices: int) -> np.ndarray:
    """int[D] the device renaming that makes placement `src` agree most with `dst`.

    Linear assignment on their D x D agreement counts: src's device d is dst's names[d]. src, dst: int[N].
    """
    agree = np.zeros((n_devices, n_devices))
    np.add.at(agree, (src, dst), 1.0)  # agree[a, b]: nodes src put on a and dst on b
    _, names = linear_sum_assignment(-agree)  # square: its rows are 0..D-1 in order
    return names


def relabel_prior(prior: np.ndarray, greedy: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The prior with its device axis renamed to agree with `start`'s.

    The permutation maximises the nodes on which start and the relabelled greedy placement agree (`renaming`).
    """
    out = np.empty_like(prior)
    out[:, renaming(greedy, start, prior.shape[1])] = prior
    return out


def search_from_prior(graph: Graph, cluster: Cluster, greedy: np.ndarray, greedy_score: float, prior: np.ndarray,
                      rng: np.random.Generator, limit: float, extra: list = (), prior_prob: float = 0.3,
                      neighbour_prob: float = 0.8, batch: int = 16, block_prob: float = 0.5,
                      samples: int = 32) -> np.ndarray:
    """Steps 2-3 of the module docstring, from a policy's greedy placement and prior.

    Shared by placeto-search and gdp-search.

    Args:
      greedy: int[N] the policy's greedy placement, of objective `greedy_score`.
      prior: float[N, D] each node's device distribution.
      limit: stop when the meter's count reaches it (an absolute count), or when the meter runs out.
      extra: more (placement, objective) start candidates.
    """
    m = meter()
    cdf = np.cumsum(prior, axis=1)
    n_dev = cluster.n_devices
    cands = [(greedy, greedy_score), *extra]
    if samples > 0 and batch_size(samples, limit) == samples:
        drawn = np.minimum((cdf[None] < rng.random((samples, graph.n_nodes, 1))).sum(2), n_dev - 1).astype(np.int32)
        scores = evaluate(graph, drawn, cluster)
        cands.append((drawn[int(np.argmin(scores))], float(scores.min())))
    start, score = min(cands, key=lambda c: c[1])
    if not m.exhausted():
        classic, classic_score = moves.best_start(graph, cluster, None)
        if classic_score < score:  # identical devices may be named differently: relabel the prior to the start
            start, score, prior = classic, classic_score, relabel_prior(prior, greedy, classic)
            cdf = np.cumsum(prior, axis=1)
    nb_off, nb = moves.neighbours(graph)

    def propose(rng, nodes, cur):
        devs = moves.targets(rng, nodes, cur, nb_off, nb, n_dev, neighbour_prob)
        from_prior = np.minimum((cdf[nodes] < rng.random((len(nodes), 1))).sum(1), n_dev - 1)
        use = (rng.random(len(nodes)) < prior_prob) & (from_prior != cur[nodes])
        return np.where(use, from_prior, devs).astype(np.int32)

    entropy = -(prior * np.log(np.maximum(prior, 1e-12))).sum(1) / np.log(max(n_dev, 2))
    weight = moves.node_weights(graph, cluster) * (0.5 + entropy)
    return anneal(graph, cluster, start, score, propose, rng, limit - m.calls, batch, weight=weight / weight.sum(),
                  block_prob=block_prob)
