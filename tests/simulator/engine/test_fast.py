"""The numba engine equals the plain-Python reference exactly (==, not approx) on random graphs and placements."""

import dataclasses
import pickle

import numpy as np
import pytest

from simulator import InputError, simulate, simulate_batch, simulate_reference
from simulator.model.cluster import Cluster, Device, Host, cluster_preset
from simulator.model.generate import layered_dag
from simulator.model.graph import DEFAULT_KIND, Graph, make_graph


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


def host_cluster(rng: np.random.Generator, n_dev: int, kind: str = "k80") -> Cluster:
    """A cluster with a latency and 1 to n_dev hosts the devices share at random. Times are drawn from small
    whole numbers (and zero: no host job), so that events tie; a subnormal latency is absorbed by any time."""
    n_hosts = int(rng.integers(1, n_dev + 1))
    pick = lambda values: float(rng.choice(values))  # noqa: E731
    hosts = tuple(Host(f"h{k}", pick([0.0, 0.5, 1.0, 2.0, 7.0]), pick([0.0, 1.0, 2.0, 30.0])) for k in range(n_hosts))
    devices = tuple(Device(f"/d:{i}", kind, 1e6, f"h{int(rng.integers(0, n_hosts))}") for i in range(n_dev))
    return Cluster("hosts", devices, pick([0.0, 1.0, 5.7]), pick([0.0, 2.0, 25.0]), 1000.0,
                   latency_us=pick([0.0, 1.0, 2.0, 40.0, 5e-324]), hosts=hosts)


@pytest.mark.parametrize("n_dev", [1, 2, 3, 5])
def test_latency_and_hosts(n_dev):
    """Random clusters with a per-transfer latency and shared hosts, on tie-heavy and layered graphs."""
    rng = np.random.default_rng(100 + n_dev)
    for n, seed in ((5, 0), (30, 1), (80, 2), (200, 3)):
        for graph in (tie_graph(n, seed), layered_dag(n, seed, max_fan_in=3, max_outputs=3, skip_prob=0.3)):
            check(graph, host_cluster(rng, n_dev), placements(graph, n_dev, rng, n_random=4))


def test_hosts_without_costs_are_the_published_model():
    """Hosts with zero dispatch and transfer times and a zero latency change nothing, float for float."""
    graph = layered_dag(300, 4, max_outputs=2)
    plain = cluster_preset("placeto-k80", 3)
    free = dataclasses.replace(plain, devices=tuple(dataclasses.replace(d, host="h") for d in plain.devices),
                               hosts=(Host("h"),))
    for row in placements(graph, 3, np.random.default_rng(5)):
        assert_same(simulate(graph, row, free), simulate(graph, row, plain))


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


def test_results_are_read_only_and_memory_is_computed_once():
    """simulate() computes peak memory on first read, from arrays no one else can change in between."""
    graph, cluster = layered_dag(100, 2, max_outputs=2), cluster_preset("placeto-k80", 2)
    row = (np.arange(100) % 2).astype(np.int32)
    res = simulate(graph, row, cluster)
    for a in (res.start, res.end, res.device, res.transfers.start):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 1
    row[:] = 0  # the caller's placement array changes after the call: the result does not
    assert np.array_equal(res.device, np.arange(100) % 2)
    first = res.peak_memory
    assert res.peak_memory is first
    assert np.array_equal(first, simulate_reference(graph, np.arange(100) % 2, cluster).peak_memory)
    assert np.array_equal(pickle.loads(pickle.dumps(simulate(graph, np.arange(100) % 2, cluster))).peak_memory,
                          first)


def test_graph_arrays_are_read_only_copies():
    """The simulator caches prepared arrays on the graph: the graph's arrays cannot change under it."""
    cost, out = np.array([1.0, 2.0]), np.array([10.0, 20.0])
    graph = Graph("g", ("a", "b"), ("x", "x"), {DEFAULT_KIND: cost}, np.array([0, 1, 2]), out, np.zeros(2),
                  np.array([0], np.int32), np.array([1], np.int32), np.array([0], np.int32), (None, None), ({}, {}),
                  {})
    cluster = cluster_preset("placeto-k80", 2)
    before = simulate(graph, [0, 1], cluster).runtime
    cost[:], out[:] = 1e6, 1e9  # the caller's arrays: copied on construction
    assert simulate(graph, [0, 1], cluster).runtime == before
    for a in (graph.out_bytes, graph.costs[DEFAULT_KIND], graph.edge_src, graph.out_offsets):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0


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
