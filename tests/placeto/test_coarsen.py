"""Automatic coarsening (placeto.coarsen): the Placeto methods place graphs above MAX_POLICY_NODES as groups and
expand the placement to every op; small graphs are placed as they are."""

import numpy as np
import pytest

from placeto import coarsen
from placeto.harness.compare import run_learned
from placeto.objective import metered, score_one
from placeto.methods.placeto.env import list_start
from placeto.methods.placeto.place import load_config, place
from placeto.methods.placeto import guided
from simulator import cluster_preset, simulate
from simulator.model.generate import layered_dag


@pytest.fixture
def small_limits(monkeypatch):
    """Coarsening above 60 nodes into 25 groups; (a 150-node graph, a 2-device cluster)."""
    monkeypatch.setattr(coarsen, "MAX_POLICY_NODES", 60)
    monkeypatch.setattr(coarsen, "COARSE_GROUPS", 25)
    return layered_dag(150, seed=3), cluster_preset("placeto-k80", 2)


def test_small_graphs_are_left_alone():
    g = layered_dag(30, seed=1)
    c = coarsen.for_policy(g)
    assert c.grouping is None and c.graph is g and c.seconds == 0.0
    assert np.array_equal(c.expand(np.arange(30) % 2), np.arange(30) % 2)


def test_large_graphs_are_grouped_and_expanded():
    g = layered_dag(120, seed=2)
    c = coarsen.for_policy(g, max_nodes=50, groups=20)
    assert c.grouping is not None and c.graph.n_nodes <= 20 < g.n_nodes
    gp = np.arange(c.graph.n_nodes, dtype=np.int32) % 3
    ops = c.expand(gp)
    assert ops.shape == (g.n_nodes,)
    assert np.array_equal(ops, gp[c.grouping.op_to_group])  # every op on its group's device


def test_policy_methods_place_a_coarsened_graph(small_limits):
    g, cluster = small_limits
    grouping = coarsen.for_policy(g).grouping
    run, _ = run_learned("placeto", g, cluster, seed=0, budget=200)
    assert run.placement.shape == (150,) and 0 < run.simulator_calls <= 200
    for members in grouping.members:  # one device per group: the placement is an expanded group placement
        assert len(set(run.placement[members].tolist())) == 1
    res = place(g, cluster, None, samples=0, seed=0)
    assert res.placement.shape == (150,)
    assert np.isclose(res.runtime, simulate(g, res.placement, cluster).runtime)
    start = list_start(g, cluster, load_config(None).init_placement)  # the graph's own: never returned worse
    assert res.runtime <= simulate(g, start, cluster).runtime
    grouped = all(len(set(res.placement[m].tolist())) == 1 for m in grouping.members)
    assert grouped or np.array_equal(res.placement, start)


def test_placeto_search_searches_the_groups_then_the_ops(small_limits):
    g, cluster = small_limits
    c = coarsen.for_policy(g)
    prep = guided.prepare(None, c.graph, cluster, sampling=False)
    with metered():
        greedy, _, _ = guided.greedy_with_prior(prep)
        expanded, _ = score_one(g, c.expand(greedy), cluster)
    found = []
    for _ in range(2):
        with metered(max_calls=300) as m:
            found.append(guided.guided_search(prep, 0, 300, op_graph=g, op_to_group=c.grouping.op_to_group))
        assert m.calls == 300 and found[-1].shape == (150,)
    assert np.array_equal(found[0], found[1])  # deterministic under a call budget
    with metered():
        assert score_one(g, found[0], cluster)[0] <= expanded  # the ops' search starts from the best group placement
    run, _ = run_learned("placeto-search", g, cluster, seed=0, budget=300)  # compare's path is the same search
    assert np.array_equal(run.placement, found[0]) and run.simulator_calls == 300


def test_placeto_search_on_a_spent_meter_expands_the_best_group_placement(small_limits):
    """No calls left to score the expanded starts (fine-tuning spent them): the best start by its objective on
    the groups, not the greedy episode's (which a spent meter leaves at its untouched start)."""
    import dataclasses

    from placeto.baselines.local_search import local_search

    g, cluster = small_limits
    c = coarsen.for_policy(g)
    prep = guided.prepare(None, c.graph, cluster, sampling=False)
    with metered():
        good = local_search(c.graph, cluster, 0, budget=200)
        score, _ = score_one(c.graph, good, cluster)
    with metered(max_calls=0):
        placed = guided.guided_search(dataclasses.replace(prep, seen=(good, score)), 0, 0, op_graph=g,
                                      op_to_group=c.grouping.op_to_group)
    assert np.array_equal(placed, good[c.grouping.op_to_group])


def test_groups_whose_sums_pass_a_nodes_limits_saturate():
    """1,100 ops of 5e11 us and 5e17 persistent bytes (each within the limits, 5.5e14 us in all, below
    MAX_TIME_US) group into groups that would sum past MAX_COST_US and MAX_BYTES: they saturate there and are
    counted, where the grouped graph was refused naming a group ("node '00000:n0+2': field 'cost'")."""
    from simulator import make_graph
    from simulator.model.limits import MAX_BYTES, MAX_COST_US

    n = 1100
    nodes = [{"name": f"n{i}", "cost": 5e11, "out_bytes": [10], "persistent_bytes": 5e17} for i in range(n)]
    graph = make_graph("big_costs", nodes, [(i, i + 1, 0) for i in range(n - 1)])
    c = coarsen.for_policy(graph)
    grouped = c.graph
    assert grouped.n_nodes <= coarsen.MAX_POLICY_NODES
    cost = grouped.cost_for(grouped.kinds[0])
    assert cost.max() == MAX_COST_US and grouped.persistent_bytes.max() == MAX_BYTES
    size = np.bincount(c.grouping.op_to_group)  # ops per group: over 2 sum past both limits
    assert grouped.meta["grouping"]["saturated"] == int(np.sum(size > 2)) > 0
    assert np.array_equal(cost, np.minimum(5e11 * size, MAX_COST_US))
    assert c.expand(np.zeros(grouped.n_nodes, np.int32)).shape == (n,)
