"""simulator.grouping.fusion: an op graph's fused kernels, convex, and its costs priced per kernel."""

import jax.numpy as jnp
import numpy as np

from simulator import cluster_preset, simulate
from simulator.grouping.fusion import count_kernels, fused_op_costs, fusions
from simulator.grouping.group import group
from simulator.model.costs import FREE_OPS, analytic_costs, annotate_costs, fused_group_costs
from simulator.tracing.trace import trace
from tests.helpers.programs import mlp_step


def _step_graph():
    return annotate_costs(trace(*mlp_step()).graph, ("k80", "h200"))


def test_an_elementwise_chain_fuses_into_its_reduction_and_a_matmul_stays_its_own_kernel():
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w + 1.0) * 2.0)

    g = trace(loss, jnp.ones((8, 4)), jnp.ones((2, 8))).graph
    root = fusions(g)
    ops = {op: i for i, op in enumerate(g.ops)}
    dot, red = ops["dot_general"], ops["reduce_sum"]
    assert root[dot] == dot  # a contraction takes no producers and joins no consumer
    for op in ("add", "tanh", "mul"):
        assert root[ops[op]] == red  # loop ops fused into the reduction (input fusion)
    assert count_kernels(g, root) == 2


def test_fusions_are_convex_so_the_kernels_form_a_dag():
    g = _step_graph()
    root = fusions(g)
    edges = {(int(root[s]), int(root[d])) for s, d in zip(g.edge_src, g.edge_dst) if root[s] != root[d]}
    # Kahn's algorithm over the contracted graph: every fusion is taken, so it has no cycle
    nodes = set(root.tolist())
    indeg = {v: 0 for v in nodes}
    for _, d in edges:
        indeg[d] += 1
    ready, taken = [v for v in nodes if indeg[v] == 0], 0
    children = {}
    for s, d in edges:
        children.setdefault(s, []).append(d)
    while ready:
        v = ready.pop()
        taken += 1
        for c in children.get(v, []):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    assert taken == len(nodes)
    assert count_kernels(g, root) < sum(op not in FREE_OPS for op in g.ops)  # fewer kernels than ops


def test_fused_op_costs_put_each_kernel_on_its_root():
    g = _step_graph()
    root = fusions(g)
    cost = fused_op_costs(g, "h200", root)
    roots, index = np.unique(root, return_inverse=True)
    group_cost = fused_group_costs(g, index, "h200")
    launched = np.array([g.ops[int(r)] not in FREE_OPS for r in roots])
    assert np.isclose(cost.sum(), group_cost[launched].sum())
    assert np.count_nonzero(cost) == count_kernels(g, root)  # one dispatch gap per kernel, not per op
    assert np.all(cost[root != np.arange(g.n_nodes)] == 0)


def test_the_op_graph_priced_per_kernel_simulates_near_its_grouped_graph_on_one_device():
    g = _step_graph()
    fused = g.with_costs("h200", fused_op_costs(g, "h200"))
    grouped = group(g, None, kind="k80", max_cp_growth=0.05, join_names=True).graph
    one = cluster_preset("h200-nvlink", 1)
    t = {name: simulate(x, np.zeros(x.n_nodes, np.int32), one).runtime for name, x in
         (("per op", g), ("per kernel", fused), ("grouped", grouped))}
    assert np.array_equal(g.cost_for("h200"), analytic_costs(g, "h200"))
    assert t["per op"] > 1.25 * t["grouped"]  # op by op: far off
    assert 0.75 < t["per kernel"] / t["grouped"] < 1.25
