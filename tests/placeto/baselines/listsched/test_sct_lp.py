"""m-SCT's favourite-child LP on extreme inputs within simulator.model.limits: it solves (the time unit keeps
HiGHS's coefficients in range), and where HiGHS reports no optimum the documented greedy rule takes over."""

import dataclasses
import importlib
from pathlib import Path

import numpy as np
import pytest

from placeto.baselines.listsched import problem as ls
from simulator import cluster_preset, load_graph, make_graph
from tests.placeto.baselines.listsched.test_problem import toy_cluster
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[4]
m_sct_module = importlib.import_module("placeto.baselines.m_sct")  # the package re-exports the function m_sct


def _chain_with_shortcuts(cost: float, out_bytes: float):
    nodes = [{"name": f"n{i}", "cost": cost, "out_bytes": [out_bytes]} for i in range(6)]
    return make_graph("extreme", nodes, [(i, i + 1, 0) for i in range(5)] + [(0, 3, 0), (1, 4, 0)])


def _nmt_with_huge_tensors():
    """nmt_004 with five of its tensors at 1e15 .. 1e18 bytes: microsecond ops beside 1e12 us transfers."""
    graph = load_graph(ROOT / "datasets" / "nmt" / "nmt_004.json.gz")
    rng = np.random.default_rng(13)
    out_bytes = graph.out_bytes.copy()
    idx = rng.choice(out_bytes.size, 5, replace=False)
    out_bytes[idx] = 10 ** rng.uniform(15, 18, 5)
    return dataclasses.replace(graph, name="nmt_004_huge_tensors", out_bytes=out_bytes)


# Each of these made HiGHS fail before the unit was bounded: "Model error" (a coefficient above 1e15) or
# "Status 15: model_status is Unknown" (coefficients 1e11 apart).
EXTREME = [(_chain_with_shortcuts(1e-6, 1e17), "placeto-k80"), (_chain_with_shortcuts(1e-9, 1e12), "placeto-k80"),
           (_chain_with_shortcuts(1e-3, 9e17), "h100-nvlink"), (_nmt_with_huge_tensors(), "h100-nvlink")]


@pytest.mark.parametrize("graph,preset", EXTREME, ids=lambda x: getattr(x, "name", x))
def test_the_lp_solves_extreme_sizes_within_the_limits(graph, preset):
    prob = ls.build_problem(graph, cluster_preset(preset, 4))
    x = m_sct_module.solve_lp(prob)
    assert x is not None and x.shape == (m_sct_module.edges_by_source(prob)[0].size,)
    assert np.all((x >= -1e-9) & (x <= 1 + 1e-9))
    placement = m_sct_module.m_sct(graph, cluster_preset(preset, 4))
    assert placement.shape == (graph.n_nodes,) and np.all((placement >= 0) & (placement < 4))


def test_the_unit_is_unchanged_on_ordinary_graphs_and_bounded_on_extreme_ones():
    cost, comm = np.array([2.0, 4.0, 0.0]), np.array([30.0, 1.0])
    assert m_sct_module._lp_unit(cost, comm) == 3.0  # the mean positive cost: the largest time is 10 units
    big = np.array([30.0, 1e14])
    assert m_sct_module._lp_unit(cost, big) == 1e14 / m_sct_module.LP_RANGE


def test_greedy_favourites_save_the_heaviest_edges_one_child_and_one_parent_each():
    # a -> b (100 bytes), a -> c (300), d -> c (200), c -> e (0): a's favourite is c (the heaviest edge), so d -> c
    # and a -> b pay; c -> e saves nothing.
    nodes = [{"name": "a", "cost": 1.0, "out_bytes": [100, 300]}, {"name": "b", "cost": 1.0},
             {"name": "c", "cost": 1.0, "out_bytes": [0]}, {"name": "d", "cost": 1.0, "out_bytes": [200]},
             {"name": "e", "cost": 1.0}]
    graph = make_graph("greedy", nodes, [(0, 1, 0), (0, 2, 1), (3, 2, 0), (2, 4, 0)])
    prob = ls.build_problem(graph, toy_cluster(2, delta2=0.0), "simulator")
    src, dst, _ = m_sct_module.edges_by_source(prob)
    x = m_sct_module.greedy_favourites(prob)
    assert {(int(i), int(j)) for i, j, v in zip(src, dst, x) if v == 0} == {(0, 2)}


def test_a_failed_lp_falls_back_to_the_greedy_rule(monkeypatch):
    graph = layered_dag(40, seed=5)
    cluster = cluster_preset("placeto-k80", 4)
    prob = ls.build_problem(graph, cluster)

    class Failed:
        status, x, message = 4, None, "HiGHS Status 10: model_status is Unbounded"

    monkeypatch.setattr(m_sct_module.scipy.optimize, "linprog", lambda *a, **k: Failed())
    assert m_sct_module.solve_lp(prob) is None
    assert np.array_equal(m_sct_module.relaxed_favourites(prob), m_sct_module.greedy_favourites(prob))
    placement = m_sct_module.m_sct(graph, cluster)
    assert placement.shape == (graph.n_nodes,) and np.all((placement >= 0) & (placement < 4))


@pytest.mark.parametrize("seed", range(3))
def test_the_sink_rows_alone_give_the_same_optimum(seed, monkeypatch):
    """Above LP_ALL_ROWS nodes the LP states only the sinks' makespan rows: the same feasible set, so the same
    optimal makespan (and x within its bounds)."""
    prob = ls.build_problem(layered_dag(120, seed=seed), cluster_preset("placeto-k80", 4))
    optima = []
    linprog = m_sct_module.scipy.optimize.linprog

    def recording(*args, **kwargs):
        res = linprog(*args, **kwargs)
        optima.append((res.fun, kwargs["A_ub"].shape[0]))
        return res

    monkeypatch.setattr(m_sct_module.scipy.optimize, "linprog", recording)
    m_sct_module.solve_lp(prob)
    x = m_sct_module.solve_lp(prob, all_rows=0)
    (full, full_rows), (sinks, sink_rows) = optima
    n_sinks = int(np.sum(np.diff(prob.ch_off) == 0))
    assert full_rows - sink_rows == prob.cost.shape[0] - n_sinks > 0
    assert sinks == pytest.approx(full, rel=1e-9)
    assert np.all((x >= -1e-9) & (x <= 1 + 1e-9))
