"""`random`: the best of K uniform random placements.

By simulated runtime (the search objective, `evaluate`).
"""

from __future__ import annotations

import numpy as np

from placeto.baselines.common import DEFAULT_BUDGET, batch_size, budget_left, evaluate
from placeto.objective import EVAL_CHUNK, meter
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def random_search(graph: Graph, cluster: Cluster, seed: int = 0, budget: float = DEFAULT_BUDGET) -> np.ndarray:
    """The best int32[N] of `budget` uniform random placements.

    Ties: the first drawn. Uses exactly `budget` simulator calls (or fewer if the meter's deadline comes first);
    placements are drawn and scored in chunks so memory stays O(EVAL_CHUNK * N) for any budget.
    """
    if budget < 1:
        raise ValueError(f"random: budget must be >= 1, got {budget}")
    rng = np.random.default_rng(seed)
    best, best_score = None, np.inf
    calls0 = meter().calls
    while best is None or budget_left(calls0 + budget):
        size = max(1, batch_size(EVAL_CHUNK, calls0 + budget))
        batch = rng.integers(0, cluster.n_devices, (size, graph.n_nodes), dtype=np.int32)
        score = evaluate(graph, batch, cluster)
        i = int(np.argmin(score))
        if score[i] < best_score:
            best, best_score = batch[i].copy(), score[i]
    return best
