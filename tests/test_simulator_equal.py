"""The numba engine equals the plain-Python reference exactly (==, not approx) on random graphs and placements."""

import dataclasses

import numpy as np
import pytest

from simulator import InputError, simulate, simulate_batch, simulate_reference
from simulator.cluster import Cluster, Device, cluster_preset
from simulator.generate import layered_dag
from simulator.graph import DEFAULT_KIND, Graph, make_graph


def assert_same(fast, ref):
    """Every field of two SimResults equal, dtype and value."""
    assert fast.runtime == ref.runtime
    assert fast.lower_bound == ref.lower_bound
    for field in ("start", "end", "device", "busy", "peak_memory", "capacity"):
        a, b = getattr(fast, field), getattr(ref, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    for field in ref.transfers._fields:
        a, b = getattr(fast.transfers, field), getattr(ref.transfers, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), f"transfers.{field}"


def placements(graph: Graph, n_dev: int, rng: np.random.Generator, n_random: int = 3) -> np.ndarray:
    """int64[B, N]: random rows, everything on the first and on the last device, and round robin."""
    n = graph.n_nodes
    rows = [rng.integers(0, n_dev, n) for _ in range(n_random)]
    rows += [np.zeros(n, np.int64), np.full(n, n_dev - 1), np.arange(n) % n_dev]
    return np.stack(rows)


def check(graph: Graph, cluster: Cluster, rows: np.ndarray) -> None:
    fast = [simulate(graph, row, cluster) for row in rows]
    for row, f in zip(rows, fast):
        assert_same(f, simulate_reference(graph, row, cluster))
    batch = simulate_batch(graph, rows, cluster, with_memory=True)
    assert np.array_equal(batch.runtime, [f.runtime for f in fast])
    assert np.array_equal(batch.peak_memory, np.stack([f.peak_memory for f in fast]))
    assert np.array_equal(simulate_batch(graph, rows, cluster), batch.runtime)


def small_cluster(n_dev: int, delta1: float, delta2: float, memory: float = 1e6) -> Cluster:
    return Cluster("test", tuple(Device(f"/gpu:{i}", "k80", memory) for i in range(n_dev)),
                   delta1_us=delta1, delta2_us=delta2, bandwidth_bytes_per_us=1000.0)


def tie_graph(n: int, seed: int) -> Graph:
    """Whole-number costs in {0, 1, 2} and sizes in {0, 1000, 2000} bytes, so that many events coincide;
    duplicate edges, several edges between one pair, nodes without outputs and outputs without consumers."""
    rng = np.random.default_rng(seed)
    n_out = rng.integers(0, 4, n)
    n_out[:-1] = np.maximum(n_out[:-1], 1)
    nodes = [{"name": f"v{i}", "cost": float(rng.integers(0, 3)),
              "out_bytes": [int(b) for b in rng.choice([0, 1000, 2000], n_out[i])],
              "persistent_bytes": int(rng.choice([0, 500]))} for i in range(n)]
    edges = []
    for i in range(1, n):
        for _ in range(rng.integers(0, 4)):
            parents = [p for p in range(i) if n_out[p] > 0]
            if parents:
                p = int(rng.choice(parents))
                edges.append((p, i, int(rng.integers(0, n_out[p]))))
                if rng.random() < 0.2:
                    edges.append(edges[-1])  # a duplicate edge
    return make_graph(f"ties_{n}_{seed}", nodes, edges)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 40, 120, 300])
@pytest.mark.parametrize("n_dev", [1, 2, 3, 8])
def test_layered_dags(n, n_dev):
    rng = np.random.default_rng(n * 10 + n_dev)
    for seed in range(2):
        graph = layered_dag(n, seed, max_fan_in=1 + seed * 3, max_outputs=1 + seed * 2, skip_prob=0.3)
        check(graph, cluster_preset("placeto-k80", n_dev), placements(graph, n_dev, rng))


@pytest.mark.parametrize("n_dev", [1, 2, 4, 5])
def test_heterogeneous_kinds(n_dev):
    rng = np.random.default_rng(n_dev)
    for n, seed in ((20, 0), (150, 1)):
        graph = layered_dag(n, seed, kinds=("k80", "cpu"), max_outputs=3)
        check(graph, cluster_preset("placeto-k80-cpu", n_dev), placements(graph, n_dev, rng))


@pytest.mark.parametrize("delta1, delta2", [(0.0, 0.0), (0.0, 2.0), (1.0, 0.0), (1.0, 2.0)])
@pytest.mark.parametrize("n_dev", [2, 3, 6])
def test_ties(delta1, delta2, n_dev):
    """Zero-cost ops, zero-byte transfers and zero overheads: equal times everywhere, order by tie-break."""
    rng = np.random.default_rng(n_dev)
    for n, seed in ((5, 0), (30, 1), (80, 2), (200, 3)):
        graph = tie_graph(n, seed)
        check(graph, small_cluster(n_dev, delta1, delta2), placements(graph, n_dev, rng, n_random=4))


def test_all_zero():
    """Every cost, size and overhead zero: the whole schedule happens at t = 0."""
    graph = layered_dag(100, 3, max_outputs=3)
    graph = dataclasses.replace(graph.with_costs(DEFAULT_KIND, np.zeros(100)), out_bytes=np.zeros_like(graph.out_bytes))
    cluster = small_cluster(4, 0.0, 0.0)
    check(graph, cluster, placements(graph, 4, np.random.default_rng(0)))


def test_big_graph_spot_check():
    graph = layered_dag(2000, 5)
    cluster = cluster_preset("placeto-k80", 4)
    row = np.random.default_rng(0).integers(0, 4, graph.n_nodes)
    assert_same(simulate(graph, row, cluster), simulate_reference(graph, row, cluster))


def test_batch_rows_equal_simulate():
    graph = layered_dag(200, 7, max_outputs=2)
    cluster = cluster_preset("placeto-k80", 4)
    rows = np.random.default_rng(1).integers(0, 4, (37, graph.n_nodes)).astype(np.int32)
    out = simulate_batch(graph, rows, cluster, with_memory=True)
    assert out.runtime.shape == (37,) and out.peak_memory.shape == (37, 4)
    for row, runtime, peak in zip(rows, out.runtime, out.peak_memory):
        single = simulate(graph, row, cluster)
        assert runtime == single.runtime and np.array_equal(peak, single.peak_memory)
    assert simulate_batch(graph, rows[:0], cluster).shape == (0,)


def test_bad_placements():
    graph = layered_dag(10, 0)
    cluster = cluster_preset("placeto-k80", 2)
    with pytest.raises(InputError, match="device index 2 out of range"):
        simulate(graph, [0] * 9 + [2], cluster)
    with pytest.raises(InputError, match="placement has 9 entries"):
        simulate(graph, [0] * 9, cluster)
    with pytest.raises(InputError, match="placement row 1: .*device index -1"):
        simulate_batch(graph, np.array([[0] * 10, [0] * 9 + [-1]]), cluster)
    with pytest.raises(InputError, match="shape"):
        simulate_batch(graph, np.zeros((2, 9), np.int32), cluster)
