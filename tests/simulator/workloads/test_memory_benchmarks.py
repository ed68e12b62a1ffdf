"""Tests for datasets/memory/ (simulator.workloads.memory): the shipped full-size graphs are out of memory on one
device where the seeds say so, their expert splits fit or not as the README records, and their persistent bytes are
the model's parameters and optimizer slots."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from simulator.engine.fast import simulate
from simulator.model.cluster import cluster_preset
from simulator.model.errors import InputError
from simulator.model.io import load_graph
from simulator.model.placement_file import load_placement
from simulator.tracing.program import retrace
from simulator.workloads.families import DATASETS, load_manifest
from simulator.workloads.memory import FAMILY, MEMORY_SPECS, memory_spec, readme_table
from simulator.workloads.zoo.inception_v3 import InceptionConfig, InceptionV3

MANIFEST = load_manifest(FAMILY)
ENTRIES = {e["name"]: e for e in MANIFEST["graphs"]}
SLOTS = {"sgd": 0, "rmsprop": 1, "adam": 2}  # float32 optimizer slots per parameter (optax's sgd, rmsprop, adam)
TOLERANCE = 0.01  # persistent bytes within 1% of the count: consts (the causal mask) and Adam's step counts


def lstm(inputs: int, hidden: int) -> int:
    """Parameters of one LSTMCell: the fused gate kernel over [x; h] and its bias."""
    return (inputs + hidden) * 4 * hidden + 4 * hidden


def params_from_config(kind: str, cfg: dict) -> int:
    """The parameter count of a zoo model, from its config by hand (Inception-V3: by jax.eval_shape of its init)."""
    if kind == "nmt":
        h, v, n = cfg["hidden"], cfg["vocab"], cfg["layers"]
        encoder = lstm(h, h) * n
        decoder = lstm(2 * h, h) + lstm(h, h) * (n - 1)  # layer 0 reads [embedding; attentional state]
        return 2 * v * h + encoder + decoder + (h * h + 2 * h * h) + (h * v + v)  # attention: query, output
    if kind == "rnnlm":
        h, v = cfg["hidden"], cfg["vocab"]
        return v * h + lstm(h, h) * cfg["layers"] + h * v + v
    if kind == "transformer":
        d, v, t, r = cfg["d_model"], cfg["vocab"], cfg["seq_len"], cfg["mlp_ratio"]
        block = 2 * 2 * d + 4 * (d * d + d) + (d * r * d + r * d) + (r * d * d + d)
        return v * d + t * d + cfg["layers"] * block + 2 * d + d * v + v
    model = InceptionV3(InceptionConfig(**{k: cfg[k] for k in ("batch", "image_size", "width", "classes")}))
    images = jax.ShapeDtypeStruct((cfg["batch"], cfg["image_size"], cfg["image_size"], 3), np.float32)
    labels = jax.ShapeDtypeStruct((cfg["batch"],), np.int32)
    shapes = jax.eval_shape(model.init, jax.random.key(0), images, labels)["params"]
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


def test_the_manifest_lists_every_spec():
    assert [e["name"] for e in MANIFEST["graphs"]] == [s.name for s in MEMORY_SPECS]
    assert all((DATASETS / FAMILY / e["file"]).stat().st_size < 2_000_000 for e in MANIFEST["graphs"])


@pytest.mark.parametrize("name", [s.name for s in MEMORY_SPECS])
def test_persistent_bytes_are_the_parameters_and_slots(name):
    graph = load_graph(DATASETS / FAMILY / ENTRIES[name]["file"])
    model = graph.meta["model"]
    count = params_from_config(memory_spec(name).kind, model)
    assert graph.meta["num_params"] == count
    expected = 4 * count * (1 + SLOTS[model["optimizer"]["name"]])
    assert abs(graph.persistent_bytes.sum() - expected) <= TOLERANCE * expected


@pytest.mark.parametrize("name", [s.name for s in MEMORY_SPECS])
def test_one_device_is_out_of_memory_where_the_seeds_say_so(name):
    spec, entry = memory_spec(name), ENTRIES[name]
    graph = load_graph(DATASETS / FAMILY / entry["file"])
    one = simulate(graph, np.zeros(graph.n_nodes, dtype=np.int32), cluster_preset(spec.preset, 1))
    assert bool(one.oom[0]) == spec.single_device_oom
    assert one.peak_memory[0] == pytest.approx(entry["single_device_peak_bytes"])


# Expert splits that fit (graph, devices), and those over capacity on their softmax GPU: NMT's [B, T, V] float32
# softmax tensors (2 GB each at batch 128, 50 tokens, 80,000 words) do not fit beside an LSTM layer on one K80.
EXPERT_FITS = {("nmt_l2_full", 4): True, ("nmt_l4_full", 8): True, ("rnnlm_l2_full", 2): True,
               ("inception_v3_full", 2): True, ("gpt_l24_full", 2): True, ("gpt_l24_full", 4): True,
               ("nmt_l2_full", 2): False, ("nmt_l4_full", 4): False, ("nmt_l8_full", 8): False}


@pytest.mark.parametrize("name, d", sorted(EXPERT_FITS))
def test_expert_splits_fit_or_not_as_recorded(name, d):
    spec, entry = memory_spec(name), ENTRIES[name]
    graph = load_graph(DATASETS / FAMILY / entry["file"])
    placement = load_placement(DATASETS / FAMILY / f"{name}.expert_{d}dev.json", graph, d).assignment
    np.testing.assert_array_equal(placement, graph.meta["expert_placement"][str(d)])
    split = simulate(graph, placement, cluster_preset(spec.preset, d))
    assert (not split.oom.any()) == EXPERT_FITS[(name, d)], split.peak_memory / 1e9
    np.testing.assert_allclose(split.peak_memory, entry["expert_peak_bytes"][str(d)], rtol=1e-6, atol=1)


def test_the_readme_table_is_the_manifest():
    readme = (DATASETS / FAMILY / "README.md").read_text()
    assert readme_table(MANIFEST) in readme


def test_retracing_a_full_size_graph_is_refused():
    """Re-tracing builds real parameters: the size rule of check_program_args refuses these (simulation only)."""
    graph = load_graph(DATASETS / FAMILY / ENTRIES["nmt_l2_full"]["file"])
    with pytest.raises(InputError, match="meta.program.kwargs"):  # 80,000 words: above any size it builds
        retrace(graph)
