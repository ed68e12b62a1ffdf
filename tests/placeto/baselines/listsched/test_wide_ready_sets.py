"""Wide ready sets, where m-ETF and m-SCT stop their topological scans early (`listsched.ready`): the ranked sets
against Python sets, and the kernels against the plain references bit for bit on isolated nodes, wide layers, a
fan-out and a fan-in, on identical and mixed devices, with ample, tight and tiny memory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placeto.baselines.etf import etf_schedule
from placeto.baselines.listsched import problem as ls
from placeto.baselines.listsched import ready
from placeto.baselines.listsched.baechi_reference import baechi_etf, baechi_sct
from placeto.baselines.m_sct import favourite_children, sct_schedule
from simulator import cluster_preset, make_graph
from tests.placeto.baselines.listsched.test_problem import assert_same
from tests.placeto.baselines.listsched.test_sct_kernel import MODELS, make_case, with_capacities


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 63, 64, 65, 4095, 4096, 4097, 70_000]), st.integers(0, 2**31 - 1))
def test_ranked_sets_agree_with_python_sets(n, seed):
    rng = np.random.default_rng(seed)
    lo, hi = ready.new_set(n)
    members = set()
    for _ in range(300):
        r = int(rng.integers(0, n)) if rng.random() < 0.8 else int(rng.choice([0, n - 1, min(63, n - 1)]))
        if rng.random() < 0.6:
            ready.add(lo, hi, r)
            members.add(r)
        else:
            ready.remove(lo, hi, r)
            members.discard(r)
        q = int(rng.integers(0, n + 70))
        assert ready.next_at(lo, hi, q) == min([x for x in members if x >= q], default=-1)


def _star(n_leaves, seed, fan_in):
    """A root feeding n_leaves nodes (and, with fan_in, a sink they all feed), random costs and bytes."""
    rng = np.random.default_rng(seed)
    nodes = [{"name": f"n{i}", "cost": float(np.round(rng.lognormal(np.log(50), 1.0), 3)) * (rng.random() > 0.1),
              "out_bytes": [int(rng.lognormal(np.log(2e5), 1.0))]} for i in range(n_leaves + 1 + fan_in)]
    edges = [(0, i, 0) for i in range(1, n_leaves + 1)] + [(i, n_leaves + 1, 0) for i in range(1, n_leaves + 1)
                                                           if fan_in]
    return make_graph("star", nodes, edges)


@pytest.mark.parametrize("seed", range(12))
def test_kernels_equal_references_on_wide_layers(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 140))
    width = [n, n // 2, n // 3][seed % 3]  # isolated nodes, two wide layers, three
    for memory in ("ample", "tight", "tiny"):
        prob, fav = make_case(seed, n, int(rng.integers(2, 9)), bool(seed % 2), width, memory,
                              MODELS[seed % len(MODELS)], 0.3 * (seed % 4 == 1), ["lp", "none", "child"][seed % 3])
        assert_same(etf_schedule(prob), baechi_etf(prob))
        assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))


@pytest.mark.parametrize("preset", ["placeto-k80", "placeto-k80-cpu"])
@pytest.mark.parametrize("fan_in", [0, 1])
def test_kernels_equal_references_on_a_fan_out(preset, fan_in):
    graph = _star(150, seed=fan_in, fan_in=fan_in)
    for cluster in (cluster_preset(preset, 4), with_capacities(cluster_preset(preset, 4), [0.3] * 4, graph)):
        for model in MODELS:
            prob = ls.build_problem(graph, cluster, model)
            assert_same(etf_schedule(prob), baechi_etf(prob))
            fav = favourite_children(prob)
            assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))
