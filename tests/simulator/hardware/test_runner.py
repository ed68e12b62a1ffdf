"""simulator.hardware.runner: the simulation cluster of a graph, the dispatch and staged orders, and a changed
trace run in a repaired order."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware.runner import dispatch_order, simulation_cluster
from simulator import make_graph
from simulator.model.cluster import Cluster, Device
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[3]


def _cluster(kind: str, n: int = 2) -> Cluster:
    return Cluster("c", tuple(Device(f"/cpu:{i}", kind, 1e12) for i in range(n)), 5.0, 40.0, 1e4)


def test_simulation_cluster_falls_back_to_analytic_cpu():
    g = make_graph("g", [{"name": "a", "cost": {"cpu": 10.0, "k80": 1.0}, "out_bytes": [4]}], [])
    same, warning = simulation_cluster(g, _cluster("cpu"))
    assert warning is None and same.kinds == ("cpu", "cpu")
    fallback, warning = simulation_cluster(g, _cluster("local-cpu"))
    assert fallback.kinds == ("cpu", "cpu") and "placeto profile" in warning
    bare = make_graph("bare", [{"name": "a", "cost": {"k80": 1.0}, "out_bytes": [4]}], [])
    with pytest.raises(InputError, match="cannot be run here: no 'local-cpu' or 'cpu' costs"):
        simulation_cluster(bare, _cluster("local-cpu"))
    traced_like = make_graph("t", [{"name": "a", "cost": {"k80": 1.0}}], [], meta={"program": {"kind": "nmt"}})
    with pytest.raises(InputError, match="run `placeto profile`"):
        simulation_cluster(traced_like, _cluster("local-cpu"))


def test_dispatch_order_is_simulated_start_order():
    g = layered_dag(60, seed=3)
    cluster = _cluster("default")
    placement = np.random.default_rng(0).integers(0, 2, g.n_nodes).astype(np.int32)
    order = dispatch_order(g, placement, cluster)
    assert sorted(order.tolist()) == list(range(g.n_nodes))
    position = np.empty(g.n_nodes, dtype=np.int64)
    position[order] = np.arange(g.n_nodes)
    assert np.all(position[g.edge_src] < position[g.edge_dst])  # topological


def test_staged_order_is_topological_and_keeps_devices_together():
    from simulator.hardware.runner import staged_order

    g = layered_dag(80, seed=5)
    placement = np.random.default_rng(1).integers(0, 2, g.n_nodes).astype(np.int32)
    start = dispatch_order(g, placement, _cluster("default"))
    order = staged_order(g, placement, start)
    assert sorted(order.tolist()) == list(range(g.n_nodes))
    position = np.empty(g.n_nodes, dtype=np.int64)
    position[order] = np.arange(g.n_nodes)
    assert np.all(position[g.edge_src] < position[g.edge_dst])  # topological

    def runs(o):
        return 1 + int(np.sum(placement[o][1:] != placement[o][:-1]))

    assert runs(order) < runs(start)  # fewer stages than the simulated start order gives
    assert staged_order(g, np.zeros(g.n_nodes, np.int32), start).tolist() == start.tolist()  # one device: kept


def test_simulation_cluster_keeps_a_kind_per_device():
    g = make_graph("g", [{"name": "a", "cost": {"cpu": 10.0, "h100": 1.0, "local-cpu": 12.0}, "out_bytes": [4]}],
                   [])
    mixed = Cluster("m", (Device("/gpu:0", "local-h100", 8e10), Device("/cpu:0", "local-cpu", 1e11)), 5.0, 40.0,
                    1e4)
    sim, warning = simulation_cluster(g, mixed)
    assert sim.kinds == ("h100", "local-cpu") and "'local-h100' costs; simulating with analytic 'h100'" in warning
    assert g.cost_matrix(sim.kinds).tolist() == [[1.0, 12.0]]


CHANGED_TRACE = textwrap.dedent('''
    import sys
    from simulator.hardware.devices import ensure_host_devices
    ensure_host_devices(4)
    import jax, numpy as np
    from tests.helpers.programs import mlp_step
    from simulator.hardware import dispatch as hw, devices as host_devices, plans
    from simulator.tracing import lowering
    from simulator.grouping.group import group
    from simulator.tracing.trace import trace
    from simulator.hardware.runner import dispatch_order
    from simulator.model.cluster import Cluster, Device
    step, *args = mlp_step((8, 32, 32, 32, 4), batch=8)
    reference = jax.jit(step)(*args)
    traced = trace(step, *args)
    grouping = group(traced.graph, 10)
    # a re-trace whose ops landed in other groups (whole groups traded places, as a mapping that lost its
    # bearings does): the file's group graph no longer orders the units
    rng = np.random.default_rng(0)
    swap = rng.permutation(grouping.graph.n_nodes)
    moved = swap[grouping.op_to_group]
    placement = rng.integers(0, 4, grouping.graph.n_nodes).astype(np.int32)
    cluster = Cluster("c", tuple(Device(f"/cpu:{i}", "default", 1e12) for i in range(4)), 1.0, 1.0, 1e4)
    costed = grouping.graph.with_costs("default", rng.uniform(1.0, 10.0, grouping.graph.n_nodes))
    order = dispatch_order(costed, placement, cluster)  # topological for the file's groups only
    devices = host_devices.local_devices(4)
    units = lowering.unit_programs(traced, moved, grouping.graph.n_nodes)
    print(lowering.unit_order(units, order) == [int(u) for u in order])
    for stages in (False, True):
        plan = plans.program_plan(traced, lowering.leaf_values(traced, args), placement, devices, moved, order, stages)
        out = jax.tree_util.tree_unflatten(plan.out_tree, hw.run_plan(plan)[0])
        ok = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(jax.tree.leaves(out),
                                                                          jax.tree.leaves(reference)))
        print(stages, ok)
''')


def test_a_changed_trace_runs_on_4_devices_in_a_repaired_order():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", CHANGED_TRACE],
                          env=dict(env, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False", "True", "True", "True"]  # not topological, yet runs
