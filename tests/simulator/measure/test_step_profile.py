"""simulator.measure.step_profile (units' kernel time inside one compiled step), the fused-group rooflines of
simulator.model.costs and the machine presets of simulator.model.cluster."""

import gzip
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulator.model import costs
from simulator.model.cluster import MACHINES, PRESETS, cluster_preset
from simulator.tracing.lowering import leaf_values, unit_order, unit_programs
from simulator.measure import step_profile
from simulator.measure.step_profile import attribute, instruction_units, profile_trace, profile_units, split_steps
from simulator.tracing.trace import trace

from tests.helpers.programs import mlp_step


@pytest.fixture(scope="module")
def traced():
    step, *args = mlp_step((64, 256, 256, 8), batch=128)
    return trace(step, *args), tuple(args)


def test_attribute_shares_overlap_on_host_threads_and_charges_no_gaps():
    units = {"a": 0, "b": 1, "c.1": 2}
    # a runs 0-10 ns alone, b 10-20 with c overlapping 10-20: they share those 10 ns; a gap 20-30; c_1 (the GPU
    # kernel spelling of "c.1") then runs 30-40
    events = [(0, 10_000, "a"), (10_000, 10_000, "b"), (10_000, 10_000, "c.1"), (30_000, 10_000, "c_1"),
              (40_000, 5_000, "unknown")]
    cost, lost = attribute(events, units, 3)
    np.testing.assert_allclose(cost, [10.0, 5.0, 15.0])  # the idle 10 us before c_1 is charged to nobody
    assert lost == pytest.approx(5.0)
    cost, lost = attribute(events, units, 3, share_overlaps=False)  # a GPU stream: each kernel its duration
    np.testing.assert_allclose(cost, [10.0, 10.0, 20.0])
    assert lost == pytest.approx(5.0)


def test_attribute_takes_the_first_name_that_names_a_unit():
    units = {"fusion.3": 0, "custom-call.1": 1}
    events = [(0, 1_000, ("command_buffer_1", "fusion_3", "")),  # inside a CUDA graph: the kernel's own name
              (1_000, 2_000, ("custom-call.1", "sm90_xmma_gemm_cublas", "jit(f)/placeto_unit_0/dot")),  # hlo_op
              (3_000, 4_000, ("command_buffer_1", "sm90_xmma_gemm", "jit(f)/placeto_unit_2/dot")),  # the scope
              (7_000, 8_000, ("command_buffer_1", "memcpy", ""))]  # nothing names a unit
    cost, lost = attribute(events, units, 3, share_overlaps=False)
    np.testing.assert_allclose(cost, [1.0, 2.0, 4.0])
    assert lost == pytest.approx(8.0)


def test_split_steps_at_the_largest_gaps():
    ev = [(s, 10, "k") for s in (0, 20, 40, 1000, 1020, 1040, 5000, 5020, 5040)]
    steps = split_steps(ev[::-1], 3)  # any order in
    assert [len(s) for s in steps] == [3, 3, 3] and [s[0][0] for s in steps] == [0, 1000, 5000]
    assert split_steps(ev, 1) == [ev] and split_steps([], 3) == []
    # a kernel that overlaps the next one leaves no gap there
    assert [len(s) for s in split_steps([(0, 500, "a"), (100, 10, "b"), (400, 10, "c")], 2)] == [2, 1]


TRACES = Path(__file__).resolve().parents[2] / "data" / "gpu_traces"  # real H200 traces: tests/data/gpu_traces/README.md


def _trace(name: str, hlo: str, n_units: int):
    from jax.profiler import ProfileData

    data = ProfileData.from_serialized_xspace(gzip.decompress((TRACES / f"{name}.xplane.pb.gz").read_bytes()))
    return profile_trace(data, gzip.decompress((TRACES / f"{hlo}.hlo.txt.gz").read_bytes()).decode(), n_units, 3)


@pytest.mark.parametrize("name", ["rnnlm_l2_cmdbuf", "rnnlm_l2_nocmdbuf"])
def test_gpu_trace_of_rnnlm_l2(name):
    sp = _trace(name, "rnnlm_l2", 400)
    assert sp.on_device and sp.steps == 3 and sp.events == 357  # the 1,071 kernels are 3 steps of 357
    assert sp.attributed_fraction >= 0.99  # command buffers or not: the kernels' names find their units
    assert (sp.cost_us > 0).sum() > 50
    # no profiler-induced gap is charged: without command buffers each launch waits ~8 us under the profiler
    # (a 3.4-3.9 ms span per step), and the step's kernels take ~0.63 ms
    assert 500 < sp.busy_us < 800
    if name == "rnnlm_l2_cmdbuf":  # what users run: the real step (no profiler) took 0.853 ms on that H200
        assert abs(sp.busy_us / 853.0 - 1) <= 0.25


def test_gpu_trace_of_a_small_step_splits_its_steps_by_launch():
    # the first step's launch is slow under the profiler: a gap inside it is longer than one between steps,
    # so cutting at the largest gaps would split it wrongly; the launch's correlation id finds its step
    sp = _trace("small_step", "small_step", 3)
    assert sp.steps == 3 and sp.events == 4 and sp.attributed_fraction == 1.0
    assert np.all(sp.cost_us > 0) and sp.cost_us[1] < sp.cost_us[0]  # the two matmul units dominate


def test_instruction_units_from_metadata():
    hlo = """HloModule jit_step
ENTRY %main {
  %p = f32[4]{0} parameter(0), metadata={op_name="x"}
  %fusion.1 = f32[4]{0} fusion(%p), kind=kLoop, metadata={op_name="jit(step)/placeto_unit_3/tanh"}
  %copy.2 = f32[4]{0} copy(%fusion.1)
  %dot.7 = f32[4]{0} dot(%copy.2, %p), metadata={op_name="jit(step)/placeto_unit_1/placeto_unit_5/dot"}
  %ynn_fusion.3 = f32[4]{0} fusion(%fusion.1, %p), kind=kCustom, calls=%fused_computation.3
  %wrapped.4 = f32[4]{0} fusion(%ynn_fusion.3), kind=kLoop, calls=%wrapped_computation.4
  %add.5 = f32[4]{0} add(%wrapped.4, %dot.7), metadata={op_name="jit(step)/placeto_unit_8/add"}
  ROOT %tuple.6 = (f32[4]{0}, f32[4]{0}) tuple(%add.5, %fusion.1)
}"""
    # unscoped instructions take their nearest scoped user's unit (copy.2 -> dot.7; the gradient-like kernel that
    # reads unit 3's value -> add.5 through another unscoped one), else their first scoped operand's (tuple.6)
    assert instruction_units(hlo) == {"p": 3, "fusion.1": 3, "copy.2": 5, "dot.7": 5, "ynn_fusion.3": 8, "wrapped.4": 8,
                                      "add.5": 8, "tuple.6": 8}


def test_instruction_units_follow_a_long_unscoped_chain_to_its_user():
    """A chain of unscoped instructions takes the unit of the scoped instruction at its end (each resolved from
    its user, once)."""
    n = 5000
    body = [f"  %c.{i} = f32[4]{{0}} copy(%{'p' if i == 0 else f'c.{i - 1}'})" for i in range(n)]
    root = f'  ROOT %t = f32[4]{{0}} add(%c.{n - 1}, %p), metadata={{op_name="jit(step)/placeto_unit_3/add"}}'
    hlo = "\n".join(["HloModule m", "ENTRY %main {", "  %p = f32[4]{0} parameter(0)", *body, root, "}"])
    units = instruction_units(hlo)
    assert len(units) == n + 2 and set(units.values()) == {3}


@pytest.mark.parametrize("boundaries", [False, True])
def test_profile_units_in_the_compiled_step(traced, boundaries):
    tr, args = traced
    units = unit_programs(tr)
    values = leaf_values(tr, args)
    outputs = None if boundaries else tr.program_outputs  # every value between units, or the step's outputs
    sp = profile_units(units, values, unit_order(units), jax.devices()[0], repeats=2, warmup=1, outputs=outputs)
    assert sp.cost_us.shape == (tr.graph.n_nodes,) and np.all(sp.cost_us >= 0)
    assert sp.busy_us == pytest.approx(sp.cost_us.sum(), rel=0.5) and sp.busy_us > 0
    dots = [i for i, op in enumerate(tr.graph.ops) if op == "dot_general"]
    assert sp.cost_us[dots].sum() > 0.3 * sp.cost_us.sum()  # the matmuls dominate this step
    assert sp.unattributed_us <= 0.2 * sp.busy_us
    assert np.isfinite(sp.flops) and sp.flops > 0
    assert not sp.on_device and sp.wall_us > 0 and sp.launch_us >= 0  # the step also timed alone


def test_profile_units_traces_at_most_max_traced_steps(traced, monkeypatch):
    """Steps past MAX_TRACED_STEPS are timed, not traced: the profiler's trace lives in memory."""
    tr, args = traced
    units = unit_programs(tr)
    seen = {}

    def trace_of(data, hlo, n_units, repeats, wall_us):
        seen["steps"] = repeats
        return profile_trace(data, hlo, n_units, repeats, wall_us)

    monkeypatch.setattr(step_profile, "MAX_TRACED_STEPS", 2)
    monkeypatch.setattr(step_profile, "profile_trace", trace_of)
    sp = profile_units(units, leaf_values(tr, args), unit_order(units), jax.devices()[0], repeats=5, warmup=1)
    assert seen["steps"] == 2 and sp.wall_us > 0


def test_fused_group_roofline_below_op_sum(traced):
    tr, _ = traced
    g = costs.annotate_costs(tr.graph, ("h100",))
    one_group = np.zeros(g.n_nodes, dtype=np.int64)
    fused = costs.fused_group_costs(g, one_group, "h100")
    assert fused.shape == (1,) and 0 < fused[0] < g.cost_for("h100").sum()  # one launch per kernel, not per op
    per_op = costs.fused_group_costs(g, np.arange(g.n_nodes), "h100")  # every op its own group
    free = np.array([op in costs.FREE_OPS for op in g.ops])
    assert np.all(per_op[free] == 0) and np.all(per_op[~free] > 0)
    np.testing.assert_allclose(per_op.sum(), g.cost_for("h100").sum(), rtol=0.35)


def test_machine_presets():
    for name in MACHINES:
        for preset in (name, f"{name}-cpu"):
            c = cluster_preset(preset, 4)
            assert c.n_devices == 4 and all(k in costs.SPECS for k in c.kinds)
            assert preset in PRESETS and c.bandwidth_bytes_per_us > 0 and c.delta1_us > 0
        assert cluster_preset(f"{name}-cpu", 4).kinds[0] == "cpu"
    nvlink, pcie = cluster_preset("h100-nvlink", 2), cluster_preset("h100-pcie", 2)
    assert nvlink.bandwidth_bytes_per_us > pcie.bandwidth_bytes_per_us


def test_trailing_empty_groups_are_units_that_do_nothing(traced):
    tr, _ = traced
    op_to_group = np.zeros(tr.graph.n_nodes, dtype=np.int32)  # everything in group 0 of 3
    units = unit_programs(tr, op_to_group, n_units=3)
    assert len(units) == 3 and units[0].body is not None
    assert all(u.body is None and not u.values and not u.inputs and not u.outputs for u in units[1:])
    with pytest.raises(Exception, match="there are 0 units"):
        unit_programs(tr, op_to_group, n_units=0)


def test_gpu_cpu_placement_with_nothing_on_the_cpu_costs_the_single_gpu():
    from simulator import simulate
    from simulator.model.cluster import Cluster, Device, Host
    from simulator.model.generate import layered_dag
    from simulator.engine.reference import simulate_reference

    gpu_us = _trace("rnnlm_l2_cmdbuf", "rnnlm_l2", 400).cost_us  # the H200's profiled costs, 400 units
    g = layered_dag(400, seed=0)
    g = g.with_costs("h200", gpu_us).with_costs("cpu", 20 * gpu_us + 5.0)
    host = (Host("host", dispatch_us=3.0, transfer_us=5.0),)
    both = Cluster("gpu+cpu", (Device("cpu", "cpu", 1e12, "host"), Device("gpu", "h200", 1e12, "host")),
                   2.0, 1.0, 100.0, 4.0, host)
    alone = Cluster("gpu", (Device("gpu", "h200", 1e12, "host"),), 2.0, 1.0, 100.0, 4.0, host)
    on_gpu = np.ones(g.n_nodes, np.int32)
    single = simulate(g, np.zeros(g.n_nodes, np.int32), alone).runtime
    assert single > 0.9 * gpu_us.sum()  # the profile is not empty
    assert simulate(g, on_gpu, both).runtime == pytest.approx(single)
    assert simulate_reference(g, on_gpu, both).runtime == pytest.approx(single)
