"""simulator.grouping.group: acyclic contraction, output bookkeeping, placements back and forth."""

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import optax
import pytest

from simulator.model.costs import annotate_costs
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.graph import make_graph
from simulator.grouping.group import expand_placement, group, group_placement_from_ops
from simulator.model.io import dumps_graph


def check_grouping(graph, gr):
    """Every invariant of a Grouping, checked the slow, obvious way."""
    gg = gr.graph
    assert gr.op_to_group.shape == (graph.n_nodes,) and gr.op_to_group.dtype == np.int32
    assert sorted(np.concatenate(gr.members).tolist()) == list(range(graph.n_nodes))
    for k, mem in enumerate(gr.members):
        assert np.all(gr.op_to_group[mem] == k) and np.all(np.diff(mem) > 0)
        names = {graph.colocation[i] for i in mem} - {None}
        assert len(names) <= 1 and gg.colocation[k] == (names.pop() if names else None)
    assert [int(m[0]) for m in gr.members] == sorted(int(m[0]) for m in gr.members)
    quotient = nx.DiGraph()
    quotient.add_nodes_from(range(gg.n_nodes))
    g = gr.op_to_group
    group_edges = set(zip(gg.edge_src.tolist(), gg.edge_dst.tolist(), gg.edge_out.tolist()))
    for s, d, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        if g[s] != g[d]:
            quotient.add_edge(int(g[s]), int(g[d]))
            # the group edge carries exactly this op output
            match = [e for e in group_edges if e[0] == g[s] and e[1] == g[d]
                     and gg.out_bytes[gg.out_offsets[e[0]] + e[2]] == graph.out_bytes[graph.out_offsets[s] + o]]
            assert match
    assert nx.is_directed_acyclic_graph(quotient)
    assert set(zip(gg.edge_src.tolist(), gg.edge_dst.tolist())) == set(quotient.edges)
    assert not np.any(gg.edge_src == gg.edge_dst)
    for kind in graph.costs:
        assert gg.costs[kind].sum() == pytest.approx(graph.costs[kind].sum())
        assert gg.costs[kind] == pytest.approx(np.bincount(g, graph.costs[kind], gg.n_nodes))
    assert gg.persistent_bytes.sum() == pytest.approx(graph.persistent_bytes.sum())
    assert gg.out_bytes.sum() <= graph.out_bytes.sum()


@pytest.mark.parametrize("n,seed", [(30, 0), (200, 1), (500, 2), (1000, 3)])
@pytest.mark.parametrize("target", [None, 1, 10, 100])
def test_random_dags(n, seed, target):
    graph = layered_dag(n, seed=seed, kinds=("k80", "cpu"), max_outputs=3)
    gr = group(graph, target)
    check_grouping(graph, gr)
    if target is not None:
        assert gr.graph.n_nodes <= target  # no colocation names here, so the fallback always gets there


def test_without_fallback_stays_acyclic_above_target():
    graph = layered_dag(300, seed=4)
    gr = group(graph, 5, fallback=False)
    check_grouping(graph, gr)
    assert gr.graph.n_nodes >= 5


def chain_with_colocated_ends():
    """p -> a -> b -> u with p and u colocated (a variable and its update), plus a side input x -> a."""
    nodes = [{"name": nm, "op": op, "cost": c, "out_bytes": [8], "colocation": col}
             for nm, op, c, col in [("p", "param", 0, "w"), ("x", "input", 0, None), ("a", "dot", 5, None),
                                    ("b", "add", 1, None), ("u", "sub", 1, "w")]]
    return make_graph("toy", nodes, [(0, 2, 0), (1, 2, 0), (2, 3, 0), (3, 4, 0), (0, 4, 0)])


def test_colocation_that_would_make_a_cycle_is_split():
    graph = chain_with_colocated_ends()
    gr = group(graph, None, single_consumer=False)
    check_grouping(graph, gr)
    assert gr.op_to_group[0] != gr.op_to_group[4]  # merging p and u would swallow a and b
    assert gr.graph.colocation.count("w") == 2  # the constraint survives on both parts
    full = group(graph, None)
    check_grouping(graph, full)
    # x -> a -> b -> u collapses (one consumer each) into u's part; then p's two consumers are one group
    assert full.graph.n_nodes == 1 and full.graph.colocation == ("w",)


def test_chain_collapses_and_single_consumer_merge():
    nodes = [{"name": f"n{i}", "op": "op", "cost": 1.0, "out_bytes": [4]} for i in range(5)]
    graph = make_graph("chain", nodes, [(i, i + 1, 0) for i in range(4)])
    gr = group(graph, None)
    assert gr.graph.n_nodes == 1 and gr.graph.cost_for("default")[0] == 5.0
    assert gr.graph.out_bytes.size == 0  # nothing leaves the group


def test_cheapest_edge_first():
    nodes = [{"name": nm, "op": "op", "cost": c, "out_bytes": [4]} for nm, c in
             [("a", 1.0), ("b", 1.0), ("c", 10.0), ("d", 10.0), ("e", 5.0)]]
    graph = make_graph("two_chains", nodes, [(0, 1, 0), (2, 3, 0), (2, 4, 0)])
    gr = group(graph, 4, colocate=False, single_consumer=False)
    assert [m.tolist() for m in gr.members] == [[0, 1], [2], [3], [4]]
    gr = group(graph, 3, colocate=False, single_consumer=False)
    assert [m.tolist() for m in gr.members] == [[0, 1], [2, 4], [3]]  # c->e (15) before c->d (20)


def test_placements_round_trip():
    graph = layered_dag(400, seed=5)
    gr = group(graph, 40)
    group_place = np.arange(gr.graph.n_nodes) % 3
    ops = expand_placement(gr, group_place)
    assert ops.shape == (graph.n_nodes,) and np.array_equal(ops, group_place[gr.op_to_group])
    assert np.array_equal(group_placement_from_ops(gr, ops), group_place)
    mixed = ops.copy()
    mixed[gr.members[0][0]] = 7  # a minority vote does not move the group (if it has other members)
    if len(gr.members[0]) > 2:
        assert group_placement_from_ops(gr, mixed)[0] == group_place[0]
    with pytest.raises(InputError):
        expand_placement(gr, group_place[:-1])
    with pytest.raises(InputError):
        group_placement_from_ops(gr, ops[:-1])


def test_deterministic():
    graph = layered_dag(600, seed=6, kinds=("k80",))
    assert dumps_graph(group(graph, 50).graph) == dumps_graph(group(graph, 50).graph)


def test_traced_training_step():
    params = {"l1": {"w": jnp.ones((10, 16)), "b": jnp.zeros(16)}, "l2": {"w": jnp.ones((16, 4)), "b": jnp.zeros(4)}}
    tx = optax.adam(1e-3)

    def step(p, s, x, y):
        def loss(q):
            h = jax.nn.relu(x @ q["l1"]["w"] + q["l1"]["b"])
            return jnp.mean((h @ q["l2"]["w"] + q["l2"]["b"] - y) ** 2)
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    from simulator.tracing.trace import trace
    graph = annotate_costs(trace(step, params, tx.init(params), jnp.ones((8, 10)), jnp.ones((8, 4))).graph,
                           ("k80",))
    for target in (None, 12, 3):
        gr = group(graph, target)
        check_grouping(graph, gr)
    coarse = group(graph, None)
    assert coarse.graph.n_nodes < graph.n_nodes / 3
    assert coarse.graph.meta["grouping"]["n_ops"] == graph.n_nodes
    for name in {c for c in graph.colocation if c}:
        assert 1 <= coarse.graph.colocation.count(name) <= 3


def critical_path_of(graph):
    from simulator.model.result import critical_path

    return critical_path(graph, graph.cost_for(graph.kinds[0]))


def test_keeps_parallelism_that_single_consumer_merging_loses():
    """c1 -> c2 -> c3 -> z <- x, costs 10 each and z 1: the critical path is 31 (x runs beside the chain).
    Merging every node into its only consumer (Mirhoseini's rule, the old step (b)) gives one group, 41: a
    group waits for all its inputs, so x would wait for the chain or the chain for x. Step (b) keeps x apart
    and z apart from the chain's start (c1 starts before x is ready): three groups, still 31."""
    nodes = [{"name": nm, "op": "op", "cost": c, "out_bytes": [4]} for nm, c in
             [("c1", 10.0), ("c2", 10.0), ("c3", 10.0), ("x", 10.0), ("z", 1.0)]]
    graph = make_graph("x_z_chain", nodes, [(0, 1, 0), (1, 2, 0), (2, 4, 0), (3, 4, 0)])
    assert critical_path_of(graph) == 31.0
    assert critical_path_of(group(graph, 1).graph) == 41.0  # what merging into only consumers gives
    for target in (None, 3):
        gr = group(graph, target)
        check_grouping(graph, gr)
        assert [m.tolist() for m in gr.members] == [[0, 1, 2], [3], [4]]
        assert critical_path_of(gr.graph) == 31.0
    assert critical_path_of(group(graph, 2).graph) == 41.0  # two groups cannot do better


@pytest.mark.parametrize("seed", range(4))
def test_grouped_critical_path_never_below_op_graph(seed):
    graph = layered_dag(300 + 100 * seed, seed=seed, kinds=("k80",))
    cp = critical_path_of(graph)
    assert critical_path_of(group(graph, None).graph) == pytest.approx(cp, rel=1e-9)  # (b) delays nothing
    for target in (200, 100, 30, 5, 1):
        grouped = critical_path_of(group(graph, target).graph)
        assert grouped >= cp * (1 - 1e-9)
        assert target != 1 or grouped == pytest.approx(graph.cost_for("k80").sum())


def test_balance_limits_group_weight():
    nodes = [{"name": f"n{i}", "op": "op", "cost": 1.0, "out_bytes": [4]} for i in range(40)]
    graph = make_graph("chain", nodes, [(i, i + 1, 0) for i in range(39)])
    gr = group(graph, 4, balance=1.0)
    assert [len(m) for m in gr.members] == [10, 10, 10, 10]
    assert group(graph, 4, balance=None).graph.n_nodes == 4
    with pytest.raises(InputError):
        group(graph, 4, kind="k80")  # no such costs


@pytest.mark.parametrize("seed", range(3))
def test_incremental_schedule_matches_recomputation(seed):
    """The exact label update of a contraction equals recomputing from scratch, and the critical path after
    contracting a and b is max(cp before, path_through(a, b))."""
    from simulator.grouping.group import _op_weight
    from simulator.grouping.quotient import Quotient

    graph = layered_dag(150, seed=seed, kinds=("k80",))
    q = Quotient(graph, _op_weight(graph, None))
    q.reschedule(depth_valid=False)
    rng = np.random.default_rng(seed)
    while q.n_groups > 10:
        reps = q.reps()
        a = int(rng.choice(reps))
        nbrs = sorted(q.succ[a] | q.pred[a]) or [r for r in reps if r != a]
        b = int(rng.choice(nbrs))
        if not q.mergeable(a, b):
            continue
        expected = max(q.cp, q.path_through(a, b))
        q.contract(a, b)
        assert q.cp == pytest.approx(expected, rel=1e-12)
        labels = (list(q.start), list(q.bottom), q.cp)
        q.reschedule()
        live = q.reps()
        for got, want in zip(labels[:2], (q.start, q.bottom)):
            assert [got[r] for r in live] == pytest.approx([want[r] for r in live], rel=1e-12)
        assert labels[2] == pytest.approx(q.cp, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_critical_path_bound_holds_and_is_reported(seed):
    """With max_cp_growth the grouped critical path (same weights) grows at most that much; the report gives the
    growth and, when the bound keeps the graph above the target, says so."""
    graph = layered_dag(400, seed=seed, kinds=("k80",))
    cp = critical_path_of(graph)
    stopped = []
    for bound in (0.0, 0.05, 0.3):
        gr = group(graph, 10, max_cp_growth=bound)
        check_grouping(graph, gr)
        r = gr.report
        grown = critical_path_of(gr.graph) / cp - 1
        assert grown <= bound + 1e-9 and r.cp_growth == pytest.approx(grown, abs=1e-9)
        assert (r.n_groups <= 10) == (r.stopped is None) and r.n_groups == gr.graph.n_nodes
        if r.stopped:
            assert r.stopped == "critical path" and "not 10 groups" in r.describe()
        stopped.append(r.n_groups)
    assert stopped[0] > 10 and stopped == sorted(stopped, reverse=True)  # a looser bound, fewer groups
    assert group(graph, 10).report.cp_growth > 0.3  # unbounded (the families' setting): the target wins


def test_joined_names_reach_the_target_and_keep_colocation():
    """Variables' colocation names alone can keep a graph above its target; join_names merges groups of
    different names, the names becoming one, so ops that shared a name still share their group's name."""
    params = {f"l{k}": jnp.full((6, 6), 0.1) for k in range(4)}
    tx = optax.adam(1e-3)

    def step(p, s, x):
        def loss(q):
            h = x
            for k in range(4):
                h = jnp.tanh(h @ q[f"l{k}"])
            return jnp.sum(h)
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, u), s

    from simulator.tracing.trace import trace
    graph = annotate_costs(trace(step, params, tx.init(params), jnp.ones((4, 6))).graph, ("k80",))
    kept = group(graph, 2, max_cp_growth=10.0)
    assert kept.report.stopped == "colocation" and kept.graph.n_nodes > 2
    assert "different colocation names" in kept.report.describe()
    joined = group(graph, 2, max_cp_growth=10.0, join_names=True)
    assert joined.graph.n_nodes == 2 and joined.report.stopped is None
    final: dict[str, set] = {}
    for i, name in enumerate(graph.colocation):
        if name is not None:
            final.setdefault(name, set()).add(joined.graph.colocation[joined.op_to_group[i]])
    assert final and all(len(v) == 1 and None not in v for v in final.values())


def test_a_graph_mixing_kind_costs_and_plain_costs_keeps_its_kinds_when_grouped():
    """A node with {"k80": .., "cpu": ..} beside nodes with a plain-number cost: each group's cost on a kind is
    what the simulator reads for its ops (the kind's own, else the plain number), so the grouping keeps k80 and
    cpu. Summing raw per-kind costs once left every kind NaN, and gdp's coarse view (coarse_groups=1) said
    "has no costs for device kind 'k80' (it has: none)"."""
    from placeto.methods.gdp.config import tiny
    from placeto.methods.gdp.place import placing_task
    from simulator.model.cluster import cluster_preset

    nodes = [{"name": n, "op": "x", "cost": c, "out_bytes": [1e8]}
             for n, c in zip("abcd", [{"k80": 10.0, "cpu": 30.0}, 20.0, 5.0, 1.0])]
    graph = make_graph("mixed", nodes, [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 0)])
    grouped = group(graph, 1).graph
    assert grouped.n_nodes == 1 and set(grouped.kinds) == {"k80", "cpu"}
    assert grouped.cost_for("k80").tolist() == [graph.cost_for("k80").sum()] == [36.0]
    assert grouped.cost_for("cpu").tolist() == [56.0]
    task, _ = placing_task(graph, cluster_preset("placeto-k80", 2), tiny(coarse_groups=1))
    assert task.graph.n_nodes == 1 and task.graph.cost_for("k80").tolist() == [36.0]
