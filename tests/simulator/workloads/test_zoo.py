"""Tests for simulator.workloads.zoo: every program is a runnable, deterministic training step with named layers."""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import numpy as np
import pytest

from simulator.tracing.trace import trace
from simulator.workloads import zoo
from simulator.workloads.zoo import enas_cifar10, enas_ptb, inception_v3, nasnet, nmt, rnnlm, transformer
from simulator.workloads.zoo.common import numpy_rng

TINY = {
    "cifar10": enas_cifar10.Cifar10Config.tiny(),
    "ptb": enas_ptb.PTBConfig.tiny(),
    "nmt": nmt.NMTConfig.tiny(),
    "rnnlm": rnnlm.RNNLMConfig.tiny(),
    "inception_v3": inception_v3.InceptionConfig.tiny(),
    "nasnet": nasnet.NASNetConfig.tiny(),
}
# Unoptimised XLA code: the CNN steps compile 3x faster, and the tests only need one step.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def build_tiny(kind: str, seed: int = 0) -> zoo.Program:
    return zoo.build_program(kind, seed=seed, config=TINY[kind])


tiny_program = functools.lru_cache(maxsize=None)(build_tiny)  # programs are immutable; build each once


def run_step(program: zoo.Program):
    args = (program.params, program.opt_state, program.batch)
    return jax.jit(program.step).lower(*args).compile(compiler_options=FAST_COMPILE)(*args)


def equations(program: zoo.Program) -> int:
    return zoo.count_equations(jax.make_jaxpr(program.step)(program.params, program.opt_state, program.batch))


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


def split_stacks(program: zoo.Program) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """Name stacks of the traced step, as path components: (forward, backward, update)."""
    jaxpr = jax.make_jaxpr(program.step)(program.params, program.opt_state, program.batch)
    forward, backward, update = [], [], []
    for stack in zoo.name_stacks(jaxpr):
        parts = stack.split("/")
        if stack.startswith("transpose("):
            backward.append(parts)
        elif stack.startswith("jvp("):
            forward.append(parts)
        elif stack.startswith("update/"):
            update.append(parts)
    return forward, backward, update


@pytest.mark.parametrize("kind", sorted(TINY))
def test_program_runs_one_training_step(kind):
    program = tiny_program(kind)
    new_params, new_state, loss = run_step(program)
    assert np.isfinite(float(loss))
    assert jax.tree.structure(new_params) == jax.tree.structure(program.params)
    assert jax.tree.structure(new_state) == jax.tree.structure(program.opt_state)
    old, new = jax.tree.leaves(program.params), jax.tree.leaves(new_params)
    assert all(not np.array_equal(a, b) for a, b in zip(old, new)), "every parameter should be updated"
    json.dumps(program.meta)  # JSON-serialisable
    assert list(program.params) == program.meta["layers"]
    assert sorted(sum(program.meta["layer_groups"], [])) == sorted(program.meta["layers"])


@pytest.mark.parametrize("kind", ["cifar10", "ptb", "nmt"])
def test_same_seed_gives_identical_program(kind):
    a, b = tiny_program(kind, seed=1), build_tiny(kind, seed=1)
    assert leaves_equal(a.params, b.params)
    assert leaves_equal(a.batch, b.batch)
    assert a.meta == b.meta
    c = tiny_program(kind, seed=2)
    assert not leaves_equal(a.batch, c.batch)
    assert not leaves_equal(a.params, c.params)


def test_cell_sampling_is_deterministic_and_seed_dependent():
    conv = [enas_cifar10.sample_conv_cell(numpy_rng(s, 0)) for s in range(5)]
    rnn = [enas_ptb.sample_rnn_cell(numpy_rng(s, 0)) for s in range(5)]
    assert conv[0] == enas_cifar10.sample_conv_cell(numpy_rng(0, 0))
    assert rnn[0] == enas_ptb.sample_rnn_cell(numpy_rng(0, 0))
    assert len(set(conv)) == 5 and len(set(rnn)) == 5
    a, b = tiny_program("cifar10", seed=1), tiny_program("cifar10", seed=2)
    assert a.meta["normal_cell"] != b.meta["normal_cell"]
    assert tiny_program("ptb", seed=1).meta["cell"] != tiny_program("ptb", seed=2).meta["cell"]


def test_sampled_cells_are_well_formed():
    for seed in range(20):
        conv = enas_cifar10.sample_conv_cell(numpy_rng(seed, 0), n_nodes=5)
        for j, node in enumerate(conv.nodes):
            assert all(0 <= i < j + 2 for i in node.inputs)
            assert set(node.ops) <= set(enas_cifar10.OPS)
        assert conv.loose_ends() and max(conv.loose_ends()) == 6  # the last node is always a loose end
        rnn = enas_ptb.sample_rnn_cell(numpy_rng(seed, 0), n_nodes=8)
        assert rnn.nodes[0].prev == -1 and all(0 <= n.prev < j for j, n in enumerate(rnn.nodes) if j)
        assert 7 in rnn.loose_ends()


@pytest.mark.parametrize("kind", ["nmt", "rnnlm", "cifar10"])
def test_layer_names_appear_in_forward_backward_and_update_name_stacks(kind):
    program = tiny_program(kind)
    forward, backward, update = split_stacks(program)
    for layer in program.meta["layers"]:
        assert any(layer in parts for parts in forward), f"{layer} missing from forward ops"
        assert any(layer in parts for parts in backward), f"{layer} missing from backward ops"
        assert any(parts[:2] == ["update", layer] for parts in update), f"{layer} missing from updates"


def test_nmt_name_stack_example():
    forward, backward, _ = split_stacks(tiny_program("nmt"))
    assert ["jvp(NMT)", "encoder_lstm_0", "gates"] in forward
    assert ["transpose(jvp(NMT))", "encoder_lstm_0", "gates"] in backward


def test_recurrences_are_unrolled_with_shared_weights():
    programs = [
        zoo.build_program("nmt", config=dataclasses.replace(TINY["nmt"], src_len=n, tgt_len=n)) for n in (3, 4, 5)
    ]
    assert len({p.meta["num_params"] for p in programs}) == 1
    counts = [equations(p) for p in programs]
    assert counts[2] - counts[1] == counts[1] - counts[0] > 0  # every time step adds the same ops


def test_nmt_eight_layers_exceeds_ten_thousand_equations():
    cfg = dataclasses.replace(TINY["nmt"], layers=8, src_len=14, tgt_len=14)
    program = zoo.build_program("nmt", config=cfg)
    assert equations(program) > 10_000
    assert program.meta["layer_groups"][-1] == ["encoder_lstm_7", "decoder_lstm_7", "attention", "softmax"]


def test_benchmark_list_and_registry():
    names = [spec.name for spec in zoo.list_benchmarks()]
    expected = ["inception_v3", "nmt_l2", "nmt_l4", "nmt_l8", "rnnlm_l2", "rnnlm_l4", "rnnlm_l8", "nasnet"]
    assert names == expected
    for spec in zoo.list_benchmarks():
        assert spec.kind in zoo.PROGRAMS
        json.dumps(spec.kwargs)
    program = zoo.build_benchmark("rnnlm_l2")
    assert program.name == "rnnlm_l2" and program.batch["inputs"].shape == (64, 20)
    with pytest.raises(KeyError):
        zoo.build_program("resnet")
    with pytest.raises(TypeError):
        zoo.build_program("nmt", no_such_field=1)


@pytest.mark.parametrize("kind, config", [("nmt", nmt.NMTConfig.tiny()), ("rnnlm", rnnlm.RNNLMConfig.tiny()),
                                          ("transformer", transformer.TransformerConfig.tiny())])
def test_a_program_built_by_shape_traces_to_the_same_graph(kind, config):
    """abstract=True: ShapeDtypeStruct parameters, optimizer state and batch, nothing allocated, the same op graph."""
    concrete = zoo.build_program(kind, seed=0, config=config)
    abstract = zoo.build_program(kind, seed=0, config=config, abstract=True)
    leaves = jax.tree.leaves((abstract.params, abstract.opt_state, abstract.batch))
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    assert abstract.meta["num_params"] == concrete.meta["num_params"]
    a, b = (trace(p.step, p.params, p.opt_state, p.batch, name=kind).graph for p in (concrete, abstract))
    assert a.names == b.names and a.ops == b.ops and a.colocation == b.colocation
    np.testing.assert_array_equal(a.out_bytes, b.out_bytes)
    np.testing.assert_array_equal(a.persistent_bytes, b.persistent_bytes)
