"""`local-search`: hill climbing over single-node moves.

Scored by the simulator. Start from the best of single and the list schedulers' placements (etf, heft; or from
`init`). Each iteration draws a batch of proposals (`placeto.baselines.moves`: one node moved, to a neighbour's
device or another one), scores the whole batch with one `simulate_batch` call, and accepts the best proposal if it
improves on the current placement, or with the Metropolis probability exp(-(worse - current) / T) under a
temperature T that decays linearly from `t0` times the starting objective to 0 over the budget. The best placement
seen is returned. `sa` (placeto.baselines.sa) is the full simulated annealing, with a calibrated schedule and
restarts.

Budget: `budget` simulator calls, and whatever the open meter allows (`compare --seconds`: a wall-clock
deadline). Deterministic in `seed` under a call budget.
"""

from __future__ import annotations

import math

import numpy as np

from placeto.baselines.common import DEFAULT_BUDGET, batch_size, budget_left, evaluate
from placeto.objective import meter, objective_bound
from placeto.baselines import moves
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def local_search(graph: Graph, cluster: Cluster, seed: int = 0, budget: float = DEFAULT_BUDGET, batch: int = 16,
                 neighbour_prob: float = 0.8, t0: float = 0.01, init: np.ndarray | str | None = None) -> np.ndarray:
    """The best placement int32[N] found within the budget.

    The budget: `budget` simulator calls, and the meter's deadline.

    Args:
      budget: simulator calls, the starting placements' included (math.inf: until the meter's deadline).
      batch: proposals scored per iteration (one simulate_batch call).
      neighbour_prob: probability that a proposal moves a node to a neighbour's device.
      t0: starting temperature as a fraction of the starting objective (0: hill climbing).
      init: "single", "etf", "heft", a placement int[N], or None for the best of them.
    """
    if budget < 1:
        raise ValueError(f"local-search: budget must be >= 1, got {budget}")
    rng = np.random.default_rng(seed)
    m, calls0 = meter(), meter().calls
    cur, cur_score = moves.best_start(graph, cluster, init)
    best, best_score = cur.copy(), cur_score
    n, n_dev = graph.n_nodes, cluster.n_devices
    if n == 0 or n_dev == 1:
        return best
    weight = moves.node_weights(graph, cluster)
    nb_off, nb = moves.neighbours(graph)
    temp0 = t0 * min(cur_score, objective_bound(graph, cluster))  # a runtime's scale, also from an OOM start
    while budget_left(calls0 + budget):
        b = batch_size(batch, calls0 + budget)
        nodes = rng.choice(n, size=b, p=weight)
        props = moves.proposals(cur, nodes, moves.targets(rng, nodes, cur, nb_off, nb, n_dev, neighbour_prob))
        scores = evaluate(graph, props, cluster)
        i = int(np.argmin(scores))
        temp = temp0 * (1.0 - progress(m, calls0, budget))
        delta = float(scores[i]) - cur_score
        if delta < 0 or (temp > 0 and rng.random() < np.exp(-delta / temp)):
            cur, cur_score = props[i].copy(), float(scores[i])
            if cur_score < best_score:
                best, best_score = cur.copy(), cur_score
    return best


def progress(m, calls0: int, budget: float) -> float:
    """Fraction of the budget spent, in [0, 1].

    The larger of the calls' and the wall clock's fractions. The calls are `budget` counted from `calls0`, or the
    meter's calls left at `calls0` if fewer.
    """
    budget = min(budget, m.max_calls - calls0)
    by_calls = (m.calls - calls0) / budget if math.isfinite(budget) and budget > 0 else 0.0
    span = m.deadline - m.start
    by_time = m.elapsed() / span if math.isfinite(span) and span > 0 else 0.0
    return min(1.0, max(by_calls, by_time))
