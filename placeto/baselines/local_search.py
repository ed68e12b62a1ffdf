"""`local-search`: simulated annealing over single-node moves, scored by the simulator, with a fixed budget.

Start from the better of `single` and `etf` (2 simulator calls; or from `init`). Each iteration draws a batch
of proposals, each the current placement with one node moved: with probability `neighbour_prob` to the device
of one of its parents or children (pulling a node to its data), else to a uniformly chosen other device. Nodes
are drawn with probability proportional to (compute time + mean compute time), so heavy nodes, the ones that
decide the makespan, move more often. The whole batch is scored with one `simulate_batch` call; the best
proposal is accepted if it improves on the current placement, or with the Metropolis probability
exp(-(worse - current) / T) under a temperature T that decays linearly from `t0` times the starting runtime
to 0 (so the last iterations are pure hill climbing). The best placement seen is returned.

Exactly `budget` simulator calls (fewer only if budget < 2). Deterministic in `seed`.
"""

from __future__ import annotations

import numpy as np

from placeto.baselines._common import DEFAULT_BUDGET, evaluate
from placeto.baselines.etf import etf
from placeto.baselines.single import single
from simulator.cluster import Cluster
from simulator.graph import Graph


def local_search(graph: Graph, cluster: Cluster, seed: int = 0, budget: int = DEFAULT_BUDGET, batch: int = 16,
                 neighbour_prob: float = 0.5, t0: float = 0.01, init: np.ndarray | str | None = None) -> np.ndarray:
    """int32[N] the best placement found with `budget` simulator calls.

    Args:
      budget: simulator calls, the starting placements' included.
      batch: proposals scored per iteration (one simulate_batch call).
      neighbour_prob: probability that a proposal moves a node to a neighbour's device.
      t0: starting temperature as a fraction of the starting runtime (0: hill climbing).
      init: "single", "etf", a placement int[N], or None for the better of single and etf.
    """
    if budget < 1:
        raise ValueError(f"local-search: budget must be >= 1, got {budget}")
    rng = np.random.default_rng(seed)
    starts = _starts(graph, cluster, init)[:budget]
    scores = evaluate(graph, np.stack(starts), cluster)
    cur = starts[int(np.argmin(scores))].copy()
    cur_score = float(scores.min())
    best, best_score = cur.copy(), cur_score
    n, n_dev = graph.n_nodes, cluster.n_devices
    if n == 0 or n_dev == 1:
        return best
    cost = graph.cost_matrix(cluster.kinds).mean(axis=1)
    weight = cost + cost.mean() + 1e-12
    weight /= weight.sum()
    nb_off, nb = _neighbours(graph)
    used, temp0 = len(starts), t0 * cur_score
    while used < budget:
        b = min(batch, budget - used)
        nodes = rng.choice(n, size=b, p=weight)
        targets = _targets(rng, nodes, cur, nb_off, nb, n_dev, neighbour_prob)
        proposals = np.repeat(cur[None, :], b, axis=0)
        proposals[np.arange(b), nodes] = targets
        scores = evaluate(graph, proposals, cluster)
        used += b
        i = int(np.argmin(scores))
        temp = temp0 * (1.0 - used / budget)
        delta = float(scores[i]) - cur_score
        if delta < 0 or (temp > 0 and rng.random() < np.exp(-delta / temp)):
            cur, cur_score = proposals[i].copy(), float(scores[i])
            if cur_score < best_score:
                best, best_score = cur.copy(), cur_score
    return best


def _starts(graph: Graph, cluster: Cluster, init: np.ndarray | str | None) -> list[np.ndarray]:
    if init is None:
        return [single(graph, cluster), etf(graph, cluster)]
    if isinstance(init, str):
        try:
            return [{"single": single, "etf": etf}[init](graph, cluster)]
        except KeyError:
            raise ValueError(f"local-search: unknown init {init!r} (single, etf or a placement)") from None
    return [np.asarray(init, dtype=np.int32).copy()]


def _neighbours(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets int64[N + 1], int32[2P]) of each node's parents and children."""
    par_off, par = graph.parents
    ch_off, ch = graph.children
    node = np.concatenate([np.repeat(np.arange(graph.n_nodes), np.diff(par_off)),
                           np.repeat(np.arange(graph.n_nodes), np.diff(ch_off))])
    other = np.concatenate([par, ch])
    order = np.argsort(node, kind="stable")
    off = np.zeros(graph.n_nodes + 1, dtype=np.int64)
    np.add.at(off, node + 1, 1)
    return np.cumsum(off), other[order].astype(np.int32)


def _targets(rng: np.random.Generator, nodes: np.ndarray, cur: np.ndarray, nb_off: np.ndarray, nb: np.ndarray,
             n_dev: int, neighbour_prob: float) -> np.ndarray:
    """int32[B] a new device for each node: a neighbour's (if it differs) or a uniformly chosen other one."""
    other = (cur[nodes] + rng.integers(1, n_dev, size=len(nodes))) % n_dev
    degree = nb_off[nodes + 1] - nb_off[nodes]
    pick = nb_off[nodes] + (rng.random(len(nodes)) * np.maximum(degree, 1)).astype(np.int64)
    via_nb = (rng.random(len(nodes)) < neighbour_prob) & (degree > 0)
    nb_dev = cur[nb[np.minimum(pick, len(nb) - 1)]] if len(nb) else cur[nodes]
    use = via_nb & (nb_dev != cur[nodes])
    return np.where(use, nb_dev, other).astype(np.int32)
