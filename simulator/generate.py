"""Random layered DAGs: test inputs, benchmark inputs and the demo graph."""

from __future__ import annotations

import numpy as np

from simulator.graph import Graph, make_graph


def layered_dag(n_nodes: int, seed: int = 0, width: int | None = None, max_fan_in: int = 3,
                mean_cost_us: float = 100.0, mean_bytes: float = 400_000.0, max_outputs: int = 2,
                skip_prob: float = 0.2, kinds: tuple[str, ...] = ()) -> Graph:
    """A random layered DAG of `n_nodes` nodes, deterministic in `seed`.

    Nodes are split into layers of about `width` nodes (default sqrt(n)); each non-source node takes 1 to
    `max_fan_in` parents from the previous layer (or, with probability `skip_prob` each, from any earlier one).
    Costs (microseconds) are lognormal around `mean_cost_us` with 5% zero-cost nodes; each node has 1 to
    `max_outputs` outputs of lognormal size around `mean_bytes`. With `kinds`, each kind gets its own costs
    (the first kind's scaled by 1, the others by random per-node factors in [0.5, 4]); else costs are numbers.
    """
    rng = np.random.default_rng(seed)
    width = width or max(1, int(round(np.sqrt(n_nodes))))
    layer = np.arange(n_nodes) // width
    cost = rng.lognormal(np.log(mean_cost_us), 1.0, n_nodes)
    cost[rng.random(n_nodes) < 0.05] = 0.0
    cost = np.round(cost, 3)
    n_out = rng.integers(1, max_outputs + 1, n_nodes)
    nodes, edges = [], []
    for i in range(n_nodes):
        sizes = np.round(rng.lognormal(np.log(mean_bytes), 1.0, n_out[i])).astype(np.int64).tolist()
        if kinds:
            factors = np.concatenate([[1.0], rng.uniform(0.5, 4.0, len(kinds) - 1)])
            node_cost = {k: float(np.round(cost[i] * f, 3)) for k, f in zip(kinds, factors)}
        else:
            node_cost = float(cost[i])
        nodes.append({"name": f"n{i}", "op": ["matmul", "conv", "add", "relu"][i % 4], "cost": node_cost,
                      "out_bytes": sizes, "persistent_bytes": int(sizes[0]) if i % 7 == 0 else 0})
        if layer[i] == 0:
            continue
        prev = np.flatnonzero(layer == layer[i] - 1)
        earlier = int(prev[-1]) + 1  # nodes before this layer
        for _ in range(rng.integers(1, max_fan_in + 1)):
            p = int(rng.integers(0, earlier)) if rng.random() < skip_prob else int(rng.choice(prev))
            edges.append((p, i, int(rng.integers(0, n_out[p]))))
    return make_graph(f"layered_{n_nodes}_s{seed}", nodes, edges, {"generator": "layered_dag", "seed": seed})
