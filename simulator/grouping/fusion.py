"""The fused kernels of an op graph, and op costs priced per kernel.

A jitted step does not launch one kernel per jaxpr op: XLA fuses chains of elementwise and layout ops into their
consumer (loop fusion), and producers into a reduction (input fusion); contractions, reductions, gathers and
control flow are kernels of their own. An op graph priced op by op (simulator.model.costs.analytic_costs) charges
every op a launch and the simulator a dispatch gap (delta1) after it: on an H200 one training step's 1,434-op graph
simulated 7.73 ms against 1.01 ms as its 96-group graph, and spreading the ops over devices "sped up" launches the
real step never makes.

`fusions(graph)` partitions the ops in those rules, in one reverse topological pass: an elementwise or layout op
(simulator.model.costs.LIGHT_OPS that are not KERNEL_OPS) joins the fusion of its consumers when they all lie in
one fusion whose root is itself elementwise, layout or a reduction (free ops, bitcasts, are looked through to their
own consumers). Joining a fusion that holds every consumer cannot close a cycle among the fusions (a cycle would
need a path from the fusion back to the op, which with the op's edges into it is a cycle already), so the fusions
are convex, as XLA's. Not modelled: XLA's duplication of a cheap producer into several consumers, sibling
(multi-output) fusion, epilogues fused into a contraction: the partition is a little finer than XLA's.

`fused_op_costs(graph, kind)` prices each fusion as one fused computation (simulator.model.costs.fused_group_costs,
the grouping's own rule: the roofline of its FLOPs and its external bytes, plus a launch per kernel) and puts it on
the fusion's root, its last op; the other members cost 0, so the simulator charges one dispatch gap per fused
kernel, not per op (no delta1 after a zero-cost op). On one device the op graph then simulates as the sum over
fused kernels. `placeto import-jax --out` records these costs for the XLA-era kinds (FUSED_KINDS); the seeds'
TensorFlow 1 kinds (k80, cpu) keep op-by-op costs, as every op was its own kernel there.
"""

from __future__ import annotations

import numpy as np

from simulator.model.costs import FREE_OPS, KERNEL_OPS, LIGHT_OPS, REDUCTIONS, fused_group_costs
from simulator.model.graph import Graph

LOOP_OPS = LIGHT_OPS - KERNEL_OPS - FREE_OPS  # elementwise and layout ops: fused into their consumer
ACCEPTS_PRODUCERS = LOOP_OPS | REDUCTIONS  # roots that take producers in: loop and input fusions


def fusions(graph: Graph) -> np.ndarray:
    """int64[N] the fused kernel of each op: the index of its fusion's root (a free op is its own).

    See the module docstring for the rules. Deterministic: one pass in reverse topological order.
    """
    n = graph.n_nodes
    root = np.arange(n, dtype=np.int64)  # fusion of each op, named by its root
    consumers: list[set[int]] = [set() for _ in range(n)]
    for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        consumers[s].add(d)
    free = [op in FREE_OPS for op in graph.ops]
    through: list[set[int]] = [set() for _ in range(n)]  # the non-free ops each op's values reach, free ops passed
    for u in reversed(graph.topo_order.tolist()):
        for c in consumers[u]:
            through[u] |= through[c] if free[c] else {c}
        if graph.ops[u] not in LOOP_OPS:
            continue
        targets = {int(root[c]) for c in through[u]}
        if len(targets) == 1:
            (f,) = targets
            if graph.ops[f] in ACCEPTS_PRODUCERS:
                root[u] = f
    return root


def fused_op_costs(graph: Graph, kind: str, root: np.ndarray | None = None) -> np.ndarray:
    """float64[N] us: each fusion's fused cost on its root op, 0 on its other members and on free ops.

    `root`: `fusions(graph)` (computed when None). `kind` must have an analytic spec (simulator.model.costs.SPECS).

    Raises:
      InputError: for an op without a 'flops' attribute (traced graphs only).
    """
    root = fusions(graph) if root is None else root
    roots, index = np.unique(root, return_inverse=True)
    cost = fused_group_costs(graph, index, kind)
    out = np.zeros(graph.n_nodes)
    free = np.array([op in FREE_OPS for op in graph.ops], dtype=bool)
    keep = ~free[roots]
    out[roots[keep]] = cost[keep]
    return out


def count_kernels(graph: Graph, root: np.ndarray | None = None) -> int:
    """The fusions that launch work: distinct roots that are not free ops."""
    root = fusions(graph) if root is None else root
    return sum(graph.ops[int(r)] not in FREE_OPS for r in np.unique(root))
