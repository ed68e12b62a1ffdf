"""The expanded graph of a microbatched step, and meta.microbatches in graph files."""

import gzip
import json

import numpy as np
import pytest

from simulator import InputError, load_graph, save_graph
from simulator.model.graph import make_graph
from simulator.model.limits import MAX_MICROBATCHES
from simulator.model.microbatch import expand, expansion, microbatched, microbatches, per_sample
from tests.simulator.engine.test_microbatched import two_stage_chain


def test_expand_the_two_stage_chain():
    graph, copy_of = expand(two_stage_chain(), 3)
    # 4 per-sample nodes times 3, 2 updates once; the original nodes first
    assert copy_of.tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2, 3]
    assert graph.cost_for("k80").tolist() == pytest.approx([100 / 3] * 4 + [0, 0] + [100 / 3] * 8)
    assert graph.persistent_bytes.tolist() == [500, 500] + [0] * 12  # once, on copy 0
    edges = set(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()))
    assert (0, 1, 0) in edges and (6, 7, 0) in edges and (10, 11, 0) in edges  # copy k -> copy k
    assert {(3, 9, 0), (9, 13, 0), (13, 4, 0)} <= edges  # s0's gradient accumulated, the last copy feeds the update
    assert {(2, 8, 1), (8, 12, 1), (12, 5, 1)} <= edges
    assert (3, 4, 0) not in edges and (9, 4, 0) not in edges
    # activations shrink (ceil to whole bytes); the accumulated weight gradients keep their size
    node_out = [graph.out_bytes[graph.out_offsets[i]:graph.out_offsets[i + 1]].tolist() for i in range(14)]
    assert node_out[:4] == [[1334], [1334], [1334, 1000], [1000]]
    assert node_out[10:] == node_out[6:10] == node_out[:4]
    assert "microbatches" not in graph.meta


def test_m1_and_the_cache():
    g = two_stage_chain()
    assert microbatched(g, 1) is g and expansion(g) is None
    graph, copy_of = expand(g, 1)
    assert graph is g and copy_of.tolist() == list(range(6))
    g4 = microbatched(g, 4)
    assert g4 is not g and g4.meta["microbatches"] == 4 and "microbatches" not in g.meta
    assert microbatched(g4, 4) is g4 and expansion(g4, ("k80",)) is expansion(g4, ("k80",))
    assert "microbatches" not in microbatched(g4, 1).meta


def test_per_sample_rule():
    # traced names: update and parameter reads per step, the rest per sample (a grouped graph's NNNNN: prefix too)
    chain = two_stage_chain()
    assert per_sample(chain).tolist() == [True, True, True, True, False, False]
    traced = load_graph("datasets/cnn/cnn_000.json.gz")
    labels = [n.split(":", 1)[1] for n in traced.names]
    assert per_sample(traced).tolist() == [not x.startswith(("update/", "param[")) for x in labels]
    # no traced names: the weights (persistent bytes) per step
    plain = make_graph("plain", [{"name": "w", "persistent_bytes": 8, "out_bytes": [8]},
                                 {"name": "x", "out_bytes": [8]}, {"name": "y"}], [(0, 2, 0), (1, 2, 0)])
    assert per_sample(plain).tolist() == [False, True, True]


def test_expansion_keeps_the_work_and_the_acyclicity():
    graph = load_graph("datasets/cnn/cnn_000.json.gz")
    kind = graph.kinds[0]
    for m in (2, 5):
        ex, copy_of = expand(graph, m)
        sample = per_sample(graph)
        assert ex.n_nodes == graph.n_nodes + (m - 1) * sample.sum()
        assert ex.cost_for(kind).sum() == pytest.approx(graph.cost_for(kind).sum(), rel=1e-12)
        assert ex.persistent_bytes.sum() == graph.persistent_bytes.sum()
        assert np.array_equal(np.bincount(copy_of, minlength=graph.n_nodes), np.where(sample, m, 1))


def test_save_load_round_trip(tmp_path):
    g = microbatched(two_stage_chain(), 4)
    save_graph(g, tmp_path / "g.json.gz")
    assert microbatches(load_graph(tmp_path / "g.json.gz")) == 4


@pytest.mark.parametrize("bad", [0, -1, 10**9, MAX_MICROBATCHES + 1, float("nan"), 2.5, "4", True])
def test_bad_microbatches_in_a_file(tmp_path, bad):
    path = tmp_path / "g.json.gz"
    save_graph(two_stage_chain(), path)
    d = json.loads(gzip.decompress(path.read_bytes()))
    d["meta"]["microbatches"] = bad
    path.write_bytes(gzip.compress(json.dumps(d).encode()))
    with pytest.raises(InputError) as e:
        load_graph(path)
    assert "meta.microbatches" in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad", [0, -3, 10**9, 1.5, None])
def test_bad_microbatches_in_memory(bad):
    with pytest.raises(InputError, match="microbatches"):
        microbatched(two_stage_chain(), bad)
