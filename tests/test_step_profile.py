"""simulator.step_profile (units' kernel time inside one compiled step), the fused-group rooflines of
simulator.costs and the machine presets of simulator.cluster."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulator import costs
from simulator.cluster import MACHINES, PRESETS, cluster_preset
from simulator.hardware import _unit_order, leaf_values, unit_programs
from simulator.step_profile import attribute, instruction_units, profile_units
from simulator.trace import trace

from programs import mlp_step


@pytest.fixture(scope="module")
def traced():
    step, *args = mlp_step((64, 256, 256, 8), batch=128)
    return trace(step, *args), tuple(args)


def test_attribute_shares_overlap_and_charges_gaps():
    units = {"a": 0, "b": 1, "c.1": 2}
    # a runs 0-10 ns alone, b 10-20 with c overlapping 10-20: they share those 10 ns; a gap 20-30; c_1 (the GPU
    # kernel spelling of "c.1") then runs 30-40
    events = [(0, 10_000, "a"), (10_000, 10_000, "b"), (10_000, 10_000, "c.1"), (30_000, 10_000, "c_1"),
              (40_000, 5_000, "unknown")]
    cost, lost = attribute(events, units, 3, charge_gaps=False)
    np.testing.assert_allclose(cost, [10.0, 5.0, 15.0])
    assert lost == pytest.approx(5.0)
    cost, _ = attribute(events, units, 3, charge_gaps=True)
    np.testing.assert_allclose(cost, [10.0, 5.0, 25.0])  # the idle 10 us before c_1 is its launch


def test_instruction_units_from_metadata():
    hlo = """HloModule jit_step
ENTRY %main {
  %p = f32[4]{0} parameter(0), metadata={op_name="x"}
  %fusion.1 = f32[4]{0} fusion(%p), kind=kLoop, metadata={op_name="jit(step)/placeto_unit_3/tanh"}
  %copy.2 = f32[4]{0} copy(%fusion.1)
  ROOT %dot.7 = f32[4]{0} dot(%copy.2, %p), metadata={op_name="jit(step)/placeto_unit_1/placeto_unit_5/dot"}
}"""
    assert instruction_units(hlo) == {"fusion.1": 3, "copy.2": 3, "dot.7": 5}


@pytest.mark.parametrize("boundaries", [False, True])
def test_profile_units_in_the_compiled_step(traced, boundaries):
    tr, args = traced
    units = unit_programs(tr)
    values = leaf_values(tr, args)
    outputs = None if boundaries else tr.program_outputs  # every value between units, or the step's outputs
    sp = profile_units(units, values, _unit_order(units), jax.devices()[0], repeats=2, warmup=1, outputs=outputs)
    assert sp.cost_us.shape == (tr.graph.n_nodes,) and np.all(sp.cost_us >= 0)
    assert sp.busy_us == pytest.approx(sp.cost_us.sum(), rel=0.5) and sp.busy_us > 0
    dots = [i for i, op in enumerate(tr.graph.ops) if op == "dot_general"]
    assert sp.cost_us[dots].sum() > 0.3 * sp.cost_us.sum()  # the matmuls dominate this step
    assert sp.unattributed_us <= 0.2 * sp.busy_us
    assert np.isfinite(sp.flops) and sp.flops > 0


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
