"""simulator.model.generate: the random graph generators used by tests and the scale experiments."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import cluster_preset, simulate
from simulator.model.generate import branching_blocks


def _edges(graph) -> set[tuple[int, int]]:
    return set(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()))


def test_branching_blocks_toy_block_is_a_diamond():
    g = branching_blocks(4, seed=0, branches=(2, 2), depth=(1, 1), residual_prob=0.0)
    assert g.ops == ("input", "matmul", "relu", "concat")
    assert _edges(g) == {(0, 1), (0, 2), (1, 3), (2, 3)}


def test_branching_blocks_residual_edge_reads_the_block_input():
    g = branching_blocks(4, seed=0, branches=(2, 2), depth=(1, 1), residual_prob=1.0)
    assert _edges(g) == {(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)}


@pytest.mark.parametrize("n", [1, 2, 7, 500, 2000])
def test_branching_blocks_size_order_and_determinism(n):
    g = branching_blocks(n, seed=3)
    assert g.n_nodes == n
    assert np.all(g.edge_src < g.edge_dst)  # topological by index: acyclic
    has_parent = np.zeros(n, bool)
    has_parent[g.edge_dst] = True
    assert not has_parent[0] and has_parent[1:].all()  # one source, every other node reads something
    again = branching_blocks(n, seed=3)
    assert _edges(again) == _edges(g) and np.array_equal(again.costs["default"], g.costs["default"])
    if n >= 500:
        assert _edges(branching_blocks(n, seed=4)) != _edges(g)


def test_branching_blocks_is_deep_where_layered_dag_is_wide():
    """A chain of blocks: the critical path is a large share of the compute (little parallelism), unlike a
    layered DAG of the same size."""
    from simulator.model.generate import layered_dag

    cluster = cluster_preset("placeto-k80", 8)
    blocks, layered = branching_blocks(2000, seed=0), layered_dag(2000, seed=0)
    single = np.zeros(2000, np.int32)
    rb, rl = simulate(blocks, single, cluster), simulate(layered, single, cluster)
    assert rb.lower_bound / rb.runtime > 2 * rl.lower_bound / rl.runtime


def test_branching_blocks_rejects_an_empty_graph():
    with pytest.raises(ValueError, match="n_nodes"):
        branching_blocks(0)
