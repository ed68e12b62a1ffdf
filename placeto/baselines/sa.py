"""`sa`: simulated annealing over node and block moves.

Start from the best of single and the list schedulers (etf, heft), or from `init`. The starting temperature is
calibrated on the first batch: the median uphill move of the start is accepted with probability `p_accept0`; the
temperature then falls geometrically to `t_end` times that over the budget (calls or wall clock, whichever runs out
first). Each iteration scores a batch of proposals (`moves`: one node, or a connected block of nodes on one device,
to a neighbour's device or another one) with one `simulate_batch` call and moves to the best one if it improves,
else to a random one of the batch with the Metropolis probability. After `patience` iterations without a new best
the search restarts from the best placement (the temperature keeps falling), so a long run does not wander off.
Returns the best placement seen.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from placeto.baselines.common import DEFAULT_BUDGET, batch_size, budget_left, evaluate
from placeto.baselines.local_search import progress
from placeto.objective import fits_threshold, meter
from placeto.baselines import moves
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

TargetFn = Callable[[np.random.Generator, np.ndarray, np.ndarray], np.ndarray]  # (rng, nodes, cur) -> devices


def sa(graph: Graph, cluster: Cluster, seed: int = 0, budget: float = DEFAULT_BUDGET, batch: int = 16,
       neighbour_prob: float = 0.8, p_accept0: float = 0.1, t_end: float = 1e-3, patience: int = 0,
       block_prob: float = 0.5, max_block: int = 8, init: np.ndarray | str | None = None) -> np.ndarray:
    """The best placement int32[N] found within the budget.

    The budget: `budget` simulator calls, and the meter's deadline.

    Args:
      budget: simulator calls including the starts (math.inf: until the meter's deadline).
      batch: proposals per iteration (one simulate_batch call).
      p_accept0: acceptance probability of the median uphill move at the start (calibrates the temperature).
      t_end: final temperature as a fraction of the starting one.
      patience: iterations without a new best before restarting from the best (0: max(50, N // 4)).
      block_prob, max_block: share of proposals that move a connected block of 2..max_block nodes on one device
        (why 0.5: docs/commands.md).
      init: see `moves.start_placements`.
    """
    if budget < 1:
        raise ValueError(f"sa: budget must be >= 1, got {budget}")
    calls0 = meter().calls
    start, score = moves.best_start(graph, cluster, init)
    budget -= meter().calls - calls0  # the starts count
    nb_off, nb = moves.neighbours(graph)
    n_dev = cluster.n_devices

    def propose(rng, nodes, cur):
        return moves.targets(rng, nodes, cur, nb_off, nb, n_dev, neighbour_prob)

    return anneal(graph, cluster, start, score, propose, np.random.default_rng(seed), budget, batch, p_accept0,
                  t_end, patience, block_prob=block_prob, max_block=max_block)


def anneal(graph: Graph, cluster: Cluster, start: np.ndarray, start_score: float, propose: TargetFn,
           rng: np.random.Generator, budget: float, batch: int = 16, p_accept0: float = 0.1, t_end: float = 1e-3,
           patience: int = 0, weight: np.ndarray | None = None, block_prob: float = 0.0,
           max_block: int = 8) -> np.ndarray:
    """The annealing loop of `sa`, with target devices from `propose`.

    Shared with policy-guided search. weight: float64[N] node-drawing probabilities (default
    `moves.node_weights`). block_prob: fraction of the proposals that move a connected block of up to
    `max_block` nodes (`moves.blocks`) instead of one node. Counts `budget` from the meter's count at entry.
    """
    n = graph.n_nodes
    m, calls0 = meter(), meter().calls
    cur, cur_score = start.copy(), start_score
    best, best_score = cur.copy(), cur_score
    if n == 0 or cluster.n_devices == 1:
        return best
    weight = moves.node_weights(graph, cluster) if weight is None else weight
    nb_off, nb = moves.neighbours(graph)
    patience = patience or max(50, n // 4)
    temp0, since_best = None, 0
    while budget_left(calls0 + budget):
        b = batch_size(batch, calls0 + budget)
        nodes = rng.choice(n, size=b, p=weight)
        devs = propose(rng, nodes, cur)
        props = moves.proposals(cur, nodes, devs)
        if block_prob > 0:
            pick = np.flatnonzero(rng.random(b) < block_prob)
            if pick.size:
                props[pick] = moves.block_proposals(cur, moves.blocks(rng, nodes[pick], cur, nb_off, nb, max_block),
                                                    devs[pick])
        scores = evaluate(graph, props, cluster)
        if temp0 is None:  # calibrate on the first batch: median uphill move accepted with p_accept0, among the
            # moves that stay on the start's side of capacity (from a start that fits, a move out of memory costs
            # at least the runtime bound: it would set a temperature at which nothing stays within capacity)
            edge = fits_threshold(graph, cluster)
            up = scores[(scores > cur_score) & ((scores < edge) == (cur_score < edge))] - cur_score
            temp0 = float(np.median(up)) / -math.log(p_accept0) if up.size else \
                1e-3 * max(min(cur_score, edge / 2), 1e-9)
        temp = temp0 * t_end ** progress(m, calls0, budget)
        i = int(np.argmin(scores))
        if scores[i] >= cur_score:
            i = int(rng.integers(b))
        delta = float(scores[i]) - cur_score
        if delta < 0 or rng.random() < math.exp(-delta / max(temp, 1e-300)):
            cur, cur_score = props[i].copy(), float(scores[i])
        if cur_score < best_score:
            best, best_score, since_best = cur.copy(), cur_score, 0
        else:
            since_best += 1
            if since_best >= patience:
                cur, cur_score, since_best = best.copy(), best_score, 0
    return best
