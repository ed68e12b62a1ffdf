"""simulator.engine.staged: the stage graph of a placement (as simulator.hardware.plans cuts stages) and its simulation."""

import dataclasses

import numpy as np
import pytest

from simulator import make_graph
from simulator.model.cluster import Cluster, Device
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.engine.staged import (RigCosts, default_holders, overlap, simulate_staged, simulate_staged_reference,
                              stage_graph, stage_inputs, stage_outputs, stage_runs)

COSTS = RigCosts(launch_us=30.0, step_us=100.0, send_us=20.0, send_us_per_value=3.0, send_us_per_mb=200.0,
                 recv_us=5.0, recv_us_per_value=2.0, recv_us_per_mb=300.0, latency_us=40.0)


def _cluster(n: int = 2) -> Cluster:
    return Cluster("test", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(n)), 7.0, 11.0, 1000.0)


def _chain(costs, devices):
    """A chain a -> b -> ... with 1 MB between consecutive nodes; costs by kind 'cpu'."""
    nodes = [{"name": f"n{i}", "op": "work", "cost": {"cpu": c}, "out_bytes": [1e6]} for i, c in enumerate(costs)]
    return make_graph("chain", nodes, [(i, i + 1, 0) for i in range(len(costs) - 1)]), np.asarray(devices)


def test_stage_graph_partition_equals_the_plans_stages():
    """On a small traced training step, the stages of stage_graph are the tasks simulator.hardware.plans builds for the
    same placement and order (holders first, then consecutive units of a device)."""
    jax = pytest.importorskip("jax")
    from tests.helpers.programs import mlp_step

    from simulator.tracing import lowering

    from simulator.hardware import plans
    from simulator.tracing.trace import trace

    traced = trace(*mlp_step())
    step, params, state, x = mlp_step()
    values = lowering.leaf_values(traced, (params, state, x))
    units = lowering.unit_programs(traced)
    holders = np.asarray([u.body is None for u in units])
    assert np.array_equal(holders, default_holders(traced.graph))
    graph = traced.graph.with_costs("cpu", np.ones(traced.graph.n_nodes))
    rng = np.random.default_rng(0)
    for trial in range(3):
        placement = rng.integers(0, 2, graph.n_nodes)
        order = graph.topo_order
        plan = plans.program_plan(traced, values, placement, [jax.devices()[0]] * 2, None, order, stages=True)
        tasks = [tuple(t.units or (t.unit,)) for t in plan.tasks]
        sg = stage_graph(graph, placement, _cluster(), order, COSTS, holders)
        assert list(sg.runs) == tasks
        assert sg.placement.tolist() == [t.device for t in plan.tasks]
        assert sg.holder.tolist() == [t.fn is None for t in plan.tasks]


@pytest.mark.parametrize("seed", range(4))
def test_fast_and_reference_staged_simulations_agree(seed):
    graph = layered_dag(40, seed=seed)
    graph = graph.with_costs("cpu", graph.cost_for("cpu"))
    rng = np.random.default_rng(seed)
    cluster = _cluster(3)
    for _ in range(5):
        placement = rng.integers(0, 3, graph.n_nodes)
        order = graph.topo_order
        fast = simulate_staged(graph, placement, cluster, order, COSTS)
        ref = simulate_staged_reference(graph, placement, cluster, order, COSTS)
        assert fast.runtime_us == ref.runtime_us
        assert np.array_equal(fast.schedule.start, ref.schedule.start)


def test_single_device_is_one_stage_one_launch():
    graph, _ = _chain([10.0, 20.0, 30.0], [0, 0, 0])
    result = simulate_staged(graph, np.zeros(3, int), _cluster(), graph.topo_order, COSTS)
    assert len(result.stages.runs) == 1
    assert result.runtime_us == pytest.approx(COSTS.step_us + COSTS.launch_us + 60.0)


def test_values_crossing_stages_are_charged_per_mb_to_their_reader_and_their_maker():
    """a (dev 0) makes 1 MB that b and c (dev 1, one stage) read and 0.5 MB (output 1) that c reads: stage {a}
    makes 1.5 MB read elsewhere, once each however many read it; stage {b, c} reads 1.5 MB. On a chain each
    MB charge lengthens the step by exactly its cost."""
    nodes = [{"name": "a", "op": "work", "cost": {"cpu": 10.0}, "out_bytes": [1e6, 5e5]},
             {"name": "b", "op": "work", "cost": {"cpu": 20.0}, "out_bytes": [1e6]},
             {"name": "c", "op": "work", "cost": {"cpu": 30.0}, "out_bytes": [1e6]}]
    graph = make_graph("fan", nodes, [(0, 1, 0), (0, 2, 0), (0, 2, 1), (1, 2, 0)])
    stage_of = np.asarray([0, 1, 1])
    assert stage_outputs(graph, stage_of, 2).tolist() == [1.5e6, 0.0]
    assert [x.tolist() for x in stage_inputs(graph, stage_of, 2)] == [[0, 2], [0.0, 1.5e6]]
    place = np.asarray([0, 1, 1])
    base = simulate_staged(graph, place, _cluster(), [0, 1, 2], COSTS).runtime_us
    per_mb = dataclasses.replace(COSTS, launch_us_per_input_mb=100.0, launch_us_per_output_mb=40.0)
    for sim in (simulate_staged, simulate_staged_reference):
        assert sim(graph, place, _cluster(), [0, 1, 2], per_mb).runtime_us == pytest.approx(base + 1.5 * 140.0)


def test_consumer_waits_for_the_whole_producer_stage():
    """a (dev 0), b (dev 0), c (dev 1) reading a only: c starts after the stage {a, b} ends, and its send, its
    receive and the materialised value are charged on the workers."""
    nodes = [{"name": n, "op": "work", "cost": {"cpu": c}, "out_bytes": [1e6]} for n, c in
             (("a", 10.0), ("b", 500.0), ("c", 7.0))]
    graph = make_graph("fork", nodes, [(0, 1, 0), (0, 2, 0)])
    result = simulate_staged(graph, np.asarray([0, 0, 1]), _cluster(), [0, 1, 2], COSTS)
    assert [list(r) for r in result.stages.runs] == [[0, 1], [2]]
    producer_end = COSTS.launch_us + 510.0 + COSTS.send_cost(1e6)
    start_c = result.schedule.start[1]
    assert start_c == pytest.approx(producer_end + COSTS.latency_us)
    expected = start_c + COSTS.launch_us + 7.0 + COSTS.recv_cost(1e6) + COSTS.step_us
    assert result.runtime_us == pytest.approx(expected)
    # dispatched as a, c, b: a alone is a stage, so c waits for a only
    early = simulate_staged(graph, np.asarray([0, 0, 1]), _cluster(), [0, 2, 1], COSTS)
    assert [list(r) for r in early.stages.runs] == [[0], [2], [1]]
    assert early.schedule.start[1] < start_c - 400.0


def test_worker_runs_its_stages_in_dispatch_order():
    """Device 1's first stage waits for device 0; its second (independent) stage may not run before it."""
    nodes = [{"name": n, "op": "work", "cost": {"cpu": c}, "out_bytes": [8.0]} for n, c in
             (("a", 300.0), ("b", 5.0), ("c", 5.0), ("d", 5.0))]
    graph = make_graph("order", nodes, [(0, 1, 0), (2, 3, 0)])  # a -> b, c -> d; c is independent of a
    # stages: [a] dev0, [b] dev1, [c] dev0, [d] dev1 -> on dev1, d after b (which waits for a)
    result = simulate_staged(graph, np.asarray([0, 1, 0, 1]), _cluster(), [0, 1, 2, 3], COSTS)
    start = result.schedule.start
    assert start[3] >= start[1] + COSTS.launch_us + 5.0


def test_bad_order_is_refused():
    graph, place = _chain([1.0, 2.0], [0, 1])
    with pytest.raises(InputError, match="not topological"):
        stage_graph(graph, place, _cluster(), [1, 0], COSTS)
    with pytest.raises(InputError, match="permutation"):
        stage_graph(graph, place, _cluster(), [0, 0], COSTS)


def test_stage_runs_puts_holders_first():
    assert stage_runs([0, 1, 1, 0, 0], [0, 2, 1, 3, 4], [False, True, False, False, False]) == [[1], [0], [2],
                                                                                            [3, 4]]


def _mlp_runner():
    """A HardwareRunner of the traced mlp step on two labels of one CPU device, as the process rig orders stages
    (the simulated start order), with test rig costs."""
    import jax
    from tests.helpers.programs import mlp_step

    from simulator.hardware.runner import HardwareRunner
    from simulator.tracing import lowering
    from simulator.hardware import plans
    from simulator.tracing.trace import trace

    traced = trace(*mlp_step())
    step, params, state, x = mlp_step()
    values = lowering.leaf_values(traced, (params, state, x))
    units = lowering.unit_programs(traced)
    graph = traced.graph.with_costs("cpu", np.linspace(1.0, 40.0, traced.graph.n_nodes))
    devices = [jax.devices()[0]] * 2

    def make_plan(placement, order, stages=True):
        return plans.program_plan(traced, values, placement, devices, None, order, stages)

    return HardwareRunner(graph, _cluster(), "program", devices, make_plan, stage_order="simulated",
                          holders=np.asarray([u.body is None for u in units]), rig_costs=COSTS), units


def test_the_runner_simulates_the_stages_its_plan_runs():
    """HardwareRunner.simulate (what eval --hardware prints on the process rig) simulates exactly the tasks
    HardwareRunner.plan builds: same partition, same devices, same result as from the plan's own order."""
    pytest.importorskip("jax")
    from simulator.engine.staged import plan_order

    runner, _ = _mlp_runner()
    rng = np.random.default_rng(1)
    for placement in [np.zeros(runner.graph.n_nodes, np.int32)] + [rng.integers(0, 2, runner.graph.n_nodes)
                                                                   for _ in range(3)]:
        plan = runner.plan(placement)
        assert [list(r) for r in stage_runs(placement, runner.order(placement), runner.holders)] == \
               [list(t.units or (t.unit,)) for t in plan.tasks]
        order, holders = plan_order(plan)
        expected = simulate_staged(runner.graph, placement, runner.cluster, order, COSTS, holders).runtime_us
        assert runner.simulate(placement) == pytest.approx(expected)
    one = np.zeros(runner.graph.n_nodes, np.int32)  # one stage: its units' costs, one launch, the step
    busy = runner.graph.cost_for("cpu")[~runner.holders].sum()
    assert runner.simulate(one) == pytest.approx(busy + COSTS.launch_us + COSTS.step_us)


def test_simulate_and_measure_scales_the_costs_to_the_single_device_in_the_timed_rounds(monkeypatch):
    """HardwareRunner.simulate_and_measure on the staged simulation: every plan warmed, then the timed rounds,
    the single device's plan among them (loaded for them when it is not one of the placements, its times left
    out); the placements simulated with the units' costs scaled to its median step in those rounds (scale_to),
    the stages as planned. Without rescale: no extra plan, the runner's own simulation."""
    pytest.importorskip("jax")
    import simulator.hardware.runner as T  # the runner calls the warm-up and the rounds by these names

    import dataclasses

    runner, _ = _mlp_runner()
    runner = dataclasses.replace(runner, rig_costs=RigCosts())  # nothing charged beyond the units: scale != 1
    n = runner.graph.n_nodes
    single, split = np.zeros(n, np.int32), (np.arange(n) >= n // 2).astype(np.int32)  # few stages to compile
    events, timed = [], []
    real_warm, real_rounds = T.warm_plans, T.time_rounds

    def warm(plans, *a, **k):
        events.append(("warm", len(plans)))
        return real_warm(plans, *a, **k)

    def rounds(plans, *a, **k):
        events.append(("rounds", len(plans)))
        timed.append(real_rounds(plans, *a, **k))
        return timed[-1]

    monkeypatch.setattr(T, "warm_plans", warm)
    monkeypatch.setattr(T, "time_rounds", rounds)
    said = []
    out = runner.simulate_and_measure([split], repeats=3, warmup=1, progress=said.append)
    assert events == [("warm", 2), ("rounds", 2)]  # the single device's plan added to the rounds
    anchor = float(np.median(timed[-1][1]))
    assert out.scale == pytest.approx(runner.scale_to(anchor)) and out.scale != 1.0
    assert out.simulated_us == [pytest.approx(runner.simulate(split, out.scale))]
    assert len(out.timings) == 1 and list(out.timings[0].times_us) == timed[-1][0]  # its own times only
    assert "scaled again by" in said[0] and "in the timed rounds" in said[0]
    events.clear()
    out = runner.simulate_and_measure([split, single], repeats=3, warmup=1, progress=said.append)
    assert events == [("warm", 2), ("rounds", 2)]  # its own plan, timed in the rounds
    assert out.scale == pytest.approx(runner.scale_to(float(np.median(timed[-1][1]))))
    assert out.simulated_us[1] == pytest.approx(out.timings[1].median_us)  # the anchor: equal by construction
    events.clear()
    out = runner.simulate_and_measure([single, split], repeats=1, warmup=1, rescale=False)
    assert events == [("warm", 2), ("rounds", 2)] and out.scale == 1.0
    assert out.simulated_us == [runner.simulate(single), runner.simulate(split)]


def test_a_cpu_stage_returns_every_value_its_units_make():
    """On XLA:CPU (simulator.hardware.plans.materialises) a stage's compiled function also returns the values only its own
    units read, so none is fused away into (and recomputed inside) its consumers; the plan still hands on only
    what other stages and the step's outputs read."""
    jax = pytest.importorskip("jax")
    from simulator.hardware.plans import materialises

    runner, units = _mlp_runner()
    assert materialises(jax.devices()[0])
    plan = runner.plan(np.zeros(runner.graph.n_nodes, np.int32))
    (stage,) = [t for t in plan.tasks if t.fn is not None]
    made = [s for u in stage.units for s in units[u].outputs]
    args = [plan.resident[(s, 0)] for s in stage.inputs]
    returned = stage.fn(plan.resident[("token", 0)], *args)
    assert len(returned) == 1 + len(made)  # the token, then every value made
    assert len(stage.outputs) < len(made)


def test_contention_slows_stages_that_run_while_another_device_runs():
    """Two independent 100 us units on two devices run at once: with contention 0.5 each takes 150 us; one after
    the other on one device they take 100 each; fast and reference engines agree."""
    import dataclasses

    nodes = [{"name": n, "op": "work", "cost": {"cpu": 100.0}, "out_bytes": [8.0]} for n in "ab"]
    graph = make_graph("pair", nodes, [])
    costs = dataclasses.replace(RigCosts(), contention=0.5)
    apart = simulate_staged(graph, np.asarray([0, 1]), _cluster(), [0, 1], costs)
    assert apart.runtime_us == pytest.approx(150.0)
    assert simulate_staged_reference(graph, np.asarray([0, 1]), _cluster(), [0, 1], costs).runtime_us == \
        pytest.approx(150.0)
    assert simulate_staged(graph, np.asarray([0, 0]), _cluster(), [0, 1], costs).runtime_us == pytest.approx(200.0)
    rng = np.random.default_rng(3)
    g = layered_dag(30, seed=4).with_costs("cpu", rng.uniform(10, 100, 30))
    place = rng.integers(0, 3, 30)
    slow = dataclasses.replace(COSTS, contention=0.3)
    fast_r = simulate_staged(g, place, _cluster(3), g.topo_order, slow)
    ref_r = simulate_staged_reference(g, place, _cluster(3), g.topo_order, slow)
    assert fast_r.runtime_us == pytest.approx(ref_r.runtime_us)
    assert fast_r.runtime_us >= simulate_staged(g, place, _cluster(3), g.topo_order, COSTS).runtime_us


def test_overlap_is_the_share_of_a_stage_another_device_runs():
    share = overlap(np.array([0.0, 50.0, 200.0, 0.0]), np.array([100.0, 150.0, 300.0, 0.0]),
                    np.array([0, 1, 0, 1]), np.array([True, True, True, True]))
    assert share.tolist() == [0.5, 0.5, 0.0, 0.0]
