"""`random`: the best of K uniform random placements by simulated runtime."""

from __future__ import annotations

import numpy as np

from placeto.baselines._common import DEFAULT_BUDGET, EVAL_CHUNK, evaluate
from simulator.cluster import Cluster
from simulator.graph import Graph


def random_search(graph: Graph, cluster: Cluster, seed: int = 0, budget: int = DEFAULT_BUDGET) -> np.ndarray:
    """int32[N] the best of `budget` placements drawn uniformly over all devices (ties: the first drawn).

    Uses exactly `budget` simulator calls; placements are drawn and scored in chunks so memory stays
    O(EVAL_CHUNK * N) for any budget.
    """
    if budget < 1:
        raise ValueError(f"random: budget must be >= 1, got {budget}")
    rng = np.random.default_rng(seed)
    best, best_score = None, np.inf
    for start in range(0, budget, EVAL_CHUNK):
        batch = rng.integers(0, cluster.n_devices, (min(EVAL_CHUNK, budget - start), graph.n_nodes),
                             dtype=np.int32)
        score = evaluate(graph, batch, cluster)
        i = int(np.argmin(score))
        if score[i] < best_score:
            best, best_score = batch[i].copy(), score[i]
    return best
