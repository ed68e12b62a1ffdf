"""m-SCT's numba event loop (`m_sct.sct_schedule`) equals Baechi's plain one (`baechi_reference.baechi_sct`) bit
for bit: random layered DAGs (hypothesis) on 1 to 8 devices under every transfer model, with memory that fits
everything, part or nothing (the memory tiers and the fallback), extra zero-cost nodes, and the LP's, random or no
favourite children; then the shipped graphs, and m_sct() itself."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placeto.baselines.etf import etf_schedule
from placeto.baselines.listsched import baechi_reference
from placeto.baselines.listsched import problem as ls
from placeto.baselines.listsched.baechi_reference import baechi_sct
from placeto.baselines.m_sct import favourite_children, m_sct, sct_schedule
from simulator import cluster_preset, load_graph
from simulator.model.generate import layered_dag
from tests.placeto.baselines.listsched.test_problem import assert_same, sct_toy, toy_cluster

ROOT = Path(__file__).resolve().parents[4]
CASES = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_capacities(cluster, fractions, graph):
    """`cluster` whose device d holds fractions[d] of an even share of the graph's bytes (at least 1 byte)."""
    share = float(graph.persistent_bytes.sum() + graph.node_out_bytes.sum()) / cluster.n_devices
    devices = tuple(dataclasses.replace(d, memory_bytes=max(share * f, 1.0))
                    for d, f in zip(cluster.devices, fractions))
    return dataclasses.replace(cluster, devices=devices)


def random_favourites(prob, rng, kind):
    """int64[N]: a random child or -1 per node ("child"), or any value in [-3, N + 3) ("any": the reference reads
    values outside [0, N) as none, and a node that is not a child as a favourite that never follows)."""
    n = prob.cost.shape[0]
    if kind == "any":
        return rng.integers(-3, n + 3, n)
    fav = np.full(n, -1, np.int64)
    for v in range(n):
        kids = prob.ch[prob.ch_off[v]:prob.ch_off[v + 1]]
        if kids.size and rng.random() < 0.7:
            fav[v] = rng.choice(kids)
    return fav


def make_case(seed, n, n_dev, hetero, width, memory, model, zero, kind):
    """(problem, favourites int64[N]) of a layered DAG on placeto-k80 (hetero: placeto-k80-cpu) devices.

    memory: "ample" (the preset's), "tight" (each device 5% to 120% of an even share of the bytes: part fits, tiers
    0 and 1) or "tiny" (under 5%: nearly nothing fits, the fallback and tier 2); zero: the share of nodes made
    zero-cost beside layered_dag's own 5%; kind: the favourites, "lp" (favourite_children), "none" or
    `random_favourites`'s.
    """
    rng = np.random.default_rng(seed)
    graph = layered_dag(n, seed=seed, width=width, kinds=("k80", "cpu") if hetero else ())
    cluster = cluster_preset("placeto-k80-cpu" if hetero else "placeto-k80", n_dev)
    if memory != "ample":
        cluster = with_capacities(cluster, rng.uniform(*((0.05, 1.2) if memory == "tight" else (0.0, 0.05)), n_dev),
                                  graph)
    prob = ls.build_problem(graph, cluster, model)
    if zero:
        prob = prob._replace(cost=np.where(rng.random((n, 1)) < zero, 0.0, prob.cost))
    if kind == "lp":
        return prob, favourite_children(prob)
    return prob, np.full(n, -1, np.int64) if kind == "none" else random_favourites(prob, rng, kind)


MEMORY, MODELS, KINDS = ("ample", "tight", "tiny"), sorted(ls.TRANSFER_MODELS), ("lp", "none", "child", "any")


@st.composite
def cases(draw):
    return make_case(draw(st.integers(0, 2**31 - 1)), draw(st.integers(1, 70)), draw(st.integers(1, 8)),
                     draw(st.booleans()), draw(st.one_of(st.none(), st.integers(1, 10))),
                     draw(st.sampled_from(MEMORY)), draw(st.sampled_from(MODELS)), draw(st.sampled_from([0.0, 0.3])),
                     draw(st.sampled_from(KINDS)))


@CASES
@given(cases())
def test_fast_equals_reference_on_random_problems(case):
    prob, fav = case
    assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))


@pytest.mark.parametrize("first", range(0, 100, 25))
def test_fast_equals_reference_on_seeded_problems(first):
    """A fixed sweep beside hypothesis's draws, which favour small graphs: mid-sized graphs, where rarer paths
    run (e.g. every device waiting for a favourite child while an urgent node's time is the next event)."""
    for seed in range(first, first + 25):
        rng = np.random.default_rng(seed)
        prob, fav = make_case(seed, int(rng.integers(20, 60)), int(rng.integers(2, 9)), bool(rng.integers(2)),
                              None if rng.random() < 0.5 else int(rng.integers(1, 10)), MEMORY[seed % 3],
                              MODELS[seed // 3 % 3], 0.3 * (seed % 2), KINDS[seed // 9 % 4])
        assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))


def test_the_cases_reach_the_memory_fallback_and_the_favourites(monkeypatch):
    """The paths the random cases are meant to cover do run: the reference's fallback when nothing fits, and
    favourites that change the schedule."""
    calls = []
    fallback = baechi_reference._Loop._place_without_memory
    monkeypatch.setattr(baechi_reference._Loop, "_place_without_memory",
                        lambda self: (calls.append(1), fallback(self))[1])
    graph = layered_dag(60, seed=5, kinds=("k80", "cpu"))
    for fraction in (0.02, 0.3):
        cluster = with_capacities(cluster_preset("placeto-k80-cpu", 3), [fraction] * 3, graph)
        for model in sorted(ls.TRANSFER_MODELS):
            prob = ls.build_problem(graph, cluster, model)
            fav = favourite_children(prob)
            assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))
    assert len(calls) > 0
    prob = ls.build_problem(layered_dag(200, seed=4), cluster_preset("placeto-k80", 4))
    fast = sct_schedule(prob, favourite_children(prob))
    assert_same(fast, baechi_sct(prob, favourite_children(prob)))
    assert not np.array_equal(fast.start, etf_schedule(prob).start)


def test_fast_path_on_the_hand_computed_toy():
    prob = ls.build_problem(sct_toy(), toy_cluster(2, delta2=0.0), "simulator")
    s = sct_schedule(prob, np.array([2, -1, -1, -1, -1]))  # test_problem.test_sct_waits_for_the_favourite_child
    assert s.device.tolist() == [0, 1, 0, 1, 0]
    assert s.start.tolist() == [0, 0, 120, 20, 130]
    assert s.end.tolist() == [10, 20, 130, 1020, 330]


def test_favourites_of_the_wrong_shape_are_refused():
    prob = ls.build_problem(sct_toy(), toy_cluster(2), "simulator")
    with pytest.raises(ValueError, match="shape"):
        sct_schedule(prob, np.array([2, -1]))


@pytest.mark.parametrize("name", ["nmt/nmt_004", "benchmarks/inception_v3"])
def test_fast_equals_reference_on_shipped_graphs(name):
    graph = load_graph(ROOT / "datasets" / f"{name}.json.gz")
    for n_dev in (4, 8):
        cluster = cluster_preset("placeto-k80", n_dev)
        for model in sorted(ls.TRANSFER_MODELS):
            prob = ls.build_problem(graph, cluster, model)
            fav = favourite_children(prob)
            ref = baechi_sct(prob, fav)
            assert_same(sct_schedule(prob, fav), ref)
            if model == ls.DEFAULT_TRANSFER_MODEL:
                assert np.array_equal(m_sct(graph, cluster), ref.device)
