"""Random DAGs for tests, benchmarks and demos.

`layered_dag` draws wide layers; `branching_blocks` chains of blocks that fork and join.
"""

from __future__ import annotations

import numpy as np

from simulator.model.graph import Graph, make_graph


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


def branching_blocks(n_nodes: int, seed: int = 0, branches: tuple[int, int] = (2, 6),
                     depth: tuple[int, int] = (1, 6), mean_cost_us: float = 100.0,
                     mean_bytes: float = 400_000.0, residual_prob: float = 0.5) -> Graph:
    """A random chain of branching blocks of exactly `n_nodes` nodes.

    Deterministic in `seed`. The shape of Inception/NASNet cells and of residual networks, unlike `layered_dag`'s
    wide layers. Each block forks from the previous block's join node into `branches[0]`..`branches[1]` parallel
    branches, each a chain of `depth[0]`..`depth[1]` nodes, which a join node concatenates; with probability
    `residual_prob` the join also reads the block's input directly (a skip connection). The last block is cut short
    when the node count runs out (its branches then end without a join). Costs (microseconds) are lognormal around
    `mean_cost_us` with 5% zero-cost nodes; every node has one output of lognormal size around `mean_bytes` bytes;
    every 7th node holds its output size as persistent bytes (a weight).

    Raises:
      ValueError: if `n_nodes` < 1.
    """
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    rng = np.random.default_rng(seed)
    ops, edges = ["input"], []
    head = 0  # the node every branch of the next block reads
    while len(ops) < n_nodes:
        ends = []
        for _ in range(int(rng.integers(branches[0], branches[1] + 1))):
            prev = head
            for _ in range(int(rng.integers(depth[0], depth[1] + 1))):
                if len(ops) == n_nodes:
                    break
                ops.append(["conv", "matmul", "relu", "add"][len(ops) % 4])
                edges.append((prev, len(ops) - 1, 0))
                prev = len(ops) - 1
            if prev != head:
                ends.append(prev)
        if len(ops) == n_nodes:
            break
        ops.append("concat")
        join = len(ops) - 1
        edges += [(e, join, 0) for e in ends]
        if rng.random() < residual_prob:
            edges.append((head, join, 0))
        head = join
    cost = rng.lognormal(np.log(mean_cost_us), 1.0, n_nodes)
    cost[rng.random(n_nodes) < 0.05] = 0.0
    sizes = np.round(rng.lognormal(np.log(mean_bytes), 1.0, n_nodes)).astype(np.int64)
    nodes = [{"name": f"b{i}", "op": ops[i], "cost": float(np.round(cost[i], 3)), "out_bytes": [int(sizes[i])],
              "persistent_bytes": int(sizes[i]) if i % 7 == 0 else 0} for i in range(n_nodes)]
    return make_graph(f"blocks_{n_nodes}_s{seed}", nodes, edges, {"generator": "branching_blocks", "seed": seed})
