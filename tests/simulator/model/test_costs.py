"""simulator.model.costs: FLOP formulas against hand counts and XLA, roofline times, annotation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulator.model.costs import (FREE_OPS, SPECS, TRANSCENDENTAL_FLOPS, annotate_costs, device_spec, eqn_work,
                             node_time_us)
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.tracing.trace import trace


def only_eqn(fn, *args):
    eqns = jax.make_jaxpr(fn)(*args).jaxpr.eqns
    assert len(eqns) == 1, eqns
    return eqns[0]


def xla_flops(fn, *args) -> float:
    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float(analysis["flops"])


def test_dot_general_flops_batched():
    b, m, k, n = 3, 4, 5, 6
    lhs, rhs = jnp.ones((b, m, k)), jnp.ones((b, k, n))
    fn = lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y)  # noqa: E731
    work = eqn_work(only_eqn(fn, lhs, rhs))
    assert work.flops == 2 * b * m * n * k
    assert work.bytes_accessed == 4 * (b * m * k + b * k * n + b * m * n)
    assert work.flops == pytest.approx(xla_flops(fn, lhs, rhs), rel=0.05)


def test_conv_flops_with_feature_groups():
    x, w = jnp.ones((2, 8, 8, 4)), jnp.ones((3, 3, 2, 6))  # NHWC, HWIO with 2 feature groups (I = 4 / 2)

    def fn(a, b):
        return jax.lax.conv_general_dilated(a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                            feature_group_count=2)

    work = eqn_work(only_eqn(fn, x, w))
    out_elements = 2 * 8 * 8 * 6
    assert work.flops == 2 * out_elements * 3 * 3 * 2
    assert work.flops == pytest.approx(xla_flops(fn, x, w), rel=0.3)  # XLA may skip the zero padding


def test_elementwise_transcendental_and_reduction_flops():
    x = jnp.ones((16, 32))
    assert eqn_work(only_eqn(lambda a: a + a, x)).flops == 16 * 32
    assert eqn_work(only_eqn(jnp.tanh, x)).flops == 16 * 32 * TRANSCENDENTAL_FLOPS
    assert eqn_work(only_eqn(lambda a: jnp.sum(a, axis=1), x)).flops == 16 * 32
    assert eqn_work(only_eqn(lambda a: a.T, x)).flops == 0
    assert eqn_work(only_eqn(lambda a: jax.lax.integer_pow(a, 3), x)).flops == 2 * 16 * 32


def test_roofline_compute_and_memory_bound():
    k80 = device_spec("k80")
    n = 4096
    matmul = {"flops": 2 * n**3, "in_shapes": [[n, n], [n, n]], "in_dtypes": ["float32"] * 2,
              "out_shapes": [[n, n]], "out_dtypes": ["float32"]}
    expected = 2 * n**3 / (4.37e12) * 1e6 + k80.launch_overhead_us
    assert node_time_us(k80, "dot_general", matmul) == pytest.approx(expected)
    add = {"flops": n * n, "in_shapes": [[n, n], [n, n]], "in_dtypes": ["float32"] * 2,
           "out_shapes": [[n, n]], "out_dtypes": ["float32"]}
    assert node_time_us(k80, "add", add) == pytest.approx(3 * 4 * n * n / 240e9 * 1e6 + k80.launch_overhead_us)
    for op in FREE_OPS:
        assert node_time_us(k80, op, add) == 0.0
    bf16 = dict(matmul, in_dtypes=["bfloat16"] * 2, out_dtypes=["bfloat16"])
    a100 = device_spec("a100")
    assert node_time_us(a100, "dot_general", bf16) < node_time_us(a100, "dot_general", matmul) / 10
    assert node_time_us(k80, "dot_general", bf16) > node_time_us(k80, "dot_general", matmul) / 2  # no tensor cores


def test_specs_are_sane():
    assert SPECS["k80"].fp32_tflops == pytest.approx(8.73 / 2, rel=0.01)  # one GK210 of the board
    assert SPECS["k80"].bandwidth_gbs == 240.0
    for spec in SPECS.values():
        assert spec.fp32_tflops > 0 and spec.bandwidth_gbs > 0 and spec.memory_bytes > 0
        assert 0 < spec.launch_overhead_us < 10
    assert SPECS["v100"].fp32_tflops < SPECS["a100"].fp32_tflops < SPECS["h100"].fp32_tflops
    with pytest.raises(InputError, match="unknown device kind"):
        device_spec("tpu-v9")


def test_annotate_traced_step():
    params = {"w": jnp.ones((512, 512)), "b": jnp.zeros(512)}
    tx = optax.sgd(0.1)

    def step(p, s, x):
        g = jax.grad(lambda q: jnp.sum(jnp.tanh(x @ q["w"] + q["b"])))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    g = annotate_costs(trace(step, params, tx.init(params), jnp.ones((256, 512))).graph, ("k80", "cpu", "h100"))
    assert set(g.kinds) == {"k80", "cpu", "h100"}
    k80, cpu, h100 = g.cost_for("k80"), g.cost_for("cpu"), g.cost_for("h100")
    assert np.all(np.isfinite(k80)) and np.all(k80 >= 0)
    free = np.array([op in FREE_OPS for op in g.ops])
    assert np.all(k80[free] == 0) and np.all(k80[~free] > 0)
    assert cpu.sum() > k80.sum() > h100.sum()
    with pytest.raises(InputError, match="flops"):
        annotate_costs(layered_dag(10), ("k80",))
