"""Baselines: valid placements, a toy graph whose optimum is known by hand, memory limits, determinism, and the
list schedulers' numba kernels equal to their plain references."""

import numpy as np
import pytest

from placeto.baselines import BUDGETED, METHODS, NotApplicable, get_method, run_method
from placeto.baselines.listsched import problem as ls
from placeto.baselines.common import count_simulator_calls, evaluate, pair_bytes
from placeto.baselines.etf import etf, etf_schedule
from placeto.baselines.heft import heft_schedule
from placeto.baselines.local_search import local_search
from simulator import Cluster, Device, cluster_preset, make_graph, save_placement
from simulator.model.cluster import GB
from simulator.engine.fast import simulate
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.result import upper_bound

BUDGET = 24
GB = 10**9


def _check(p, graph, n_dev):
    assert p.dtype == np.int32 and p.shape == (graph.n_nodes,)
    assert p.min() >= 0 and p.max() < n_dev


@pytest.mark.parametrize("n_dev", [2, 4])
@pytest.mark.parametrize("name", sorted(set(METHODS) - {"expert", "cpu-only"}))
def test_every_method_returns_a_valid_placement(name, n_dev):
    for seed in (0, 1):
        graph = layered_dag(60, seed=seed)
        run = run_method(name, graph, cluster_preset("placeto-k80", n_dev), seed, budget=BUDGET)
        _check(run.placement, graph, n_dev)
        assert run.simulator_calls == (BUDGET if name in BUDGETED else 0)


def test_single_and_cpu_only_on_a_cluster_with_a_cpu():
    graph = layered_dag(30, seed=0, kinds=("k80", "cpu"))
    cluster = cluster_preset("placeto-k80-cpu", 3)  # /cpu:0, /gpu:0, /gpu:1
    assert set(get_method("single")(graph, cluster, 0)) == {1}
    assert set(get_method("cpu-only")(graph, cluster, 0)) == {0}
    with pytest.raises(NotApplicable, match="no 'cpu' device"):
        get_method("cpu-only")(graph, cluster_preset("placeto-k80", 2), 0)


def test_single_device_is_the_fastest_one_in_every_command(tmp_path, capsys):
    """On a GPU + CPU preset (the CPU is device 0) `place`, `compare`, `simulate` and `place --hardware`'s ranking
    mean the same single device: the GPU, where the graph simulates fastest; a CPU-only-fast cluster picks the
    CPU, and identical devices the first accelerator."""
    import json

    from placeto.baselines.single import single_device
    from placeto.cli.main import main
    from placeto.harness.on_hardware import rank_candidates
    from simulator.model.io import load_graph

    g = "datasets/nmt/nmt_002.json.gz"
    graph, cluster = load_graph(g), cluster_preset("h100-nvlink-cpu", 2)  # /cpu:0, /gpu:0
    assert single_device(graph, cluster) == 1
    common = ["--preset", "h100-nvlink-cpu", "--devices", "2"]
    assert main(["place", g, "--method", "etf", *common, "--out", str(tmp_path / "p.json")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "single device" in x)
    assert line.endswith("(/gpu:0)")
    assert main(["compare", g, "--methods", "single", *common, "--quiet", "--save-placements",
                 str(tmp_path / "s")]) == 0
    saved = next((tmp_path / "s").iterdir())
    assert set(json.loads(saved.read_text())["placement"]) == {1}
    capsys.readouterr()
    assert main(["simulate", g, "--placement", str(saved), *common]) == 0
    simulated = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("runtime")).split()[1]
    assert line.split()[2] == simulated  # place's single device = compare's single row, simulated alike
    _, single = rank_candidates(graph, cluster, [], 0.1, progress=lambda x: None)
    assert set(single.placement) == {1}
    slow_gpu = Cluster("c", (Device("/cpu:0", "cpu", 64 * GB), Device("/gpu:0", "k80", 64 * GB)), 0.0, 0.0, 1e3)
    fast = layered_dag(20, seed=0, kinds=("k80", "cpu"))
    fast = fast.with_costs("k80", fast.costs["cpu"] * 10)  # a GPU 10x slower than the CPU here
    assert single_device(fast, slow_gpu) == 0
    assert single_device(fast, cluster_preset("placeto-k80", 4)) == 0


def test_expert_from_meta_or_file(tmp_path):
    base = layered_dag(20, seed=0)
    shipped = {"2": [i % 2 for i in range(20)], "4": [i % 4 for i in range(20)]}
    graph = make_graph("g", [{"name": n, "cost": 1.0, "out_bytes": [8]} for n in base.names],
                       list(zip(base.edge_src.tolist(), base.edge_dst.tolist(), [0] * base.n_edges)),
                       {"expert_placement": shipped})
    for n_dev in (2, 4):
        assert get_method("expert")(graph, cluster_preset("placeto-k80", n_dev), 0).tolist() == shipped[str(n_dev)]
    with pytest.raises(NotApplicable, match="no expert placement for 8 devices"):
        run_method("expert", graph, cluster_preset("placeto-k80", 8))
    with pytest.raises(NotApplicable, match="no expert placement"):
        run_method("expert", base, cluster_preset("placeto-k80", 2))
    path = tmp_path / "p.json"
    save_placement(path, [1] * 20, ["/gpu:0", "/gpu:1"])
    assert get_method("expert")(base, cluster_preset("placeto-k80", 2), 0, placement_file=path).tolist() == [1] * 20
    with pytest.raises(InputError, match="out of range"):
        get_method("expert")(base, cluster_preset("placeto-k80", 1), 0, placement_file=path)


def test_unknown_method():
    with pytest.raises(InputError, match="unknown method 'nope'"):
        get_method("nope")


# ---- a toy graph whose optimum is known ----------------------------------------------------------------------
def two_chains(length=3, cost=1000.0):
    """Two independent chains of heavy nodes passing 8-byte tensors: nodes a0..a{L-1}, b0..b{L-1}."""
    nodes = [{"name": f"{c}{i}", "cost": cost, "out_bytes": [8]} for c in "ab" for i in range(length)]
    edges = [(c * length + i, c * length + i + 1, 0) for c in (0, 1) for i in range(length - 1)]
    return make_graph("two_chains", nodes, edges)


def test_two_chains_optimum_by_hand():
    graph, cluster = two_chains(), cluster_preset("placeto-k80", 2)
    d1 = cluster.delta1_us
    # One device runs 6 ops back to back, each followed by delta1; the runtime is the last device-free time.
    assert simulate(graph, np.zeros(6, np.int32), cluster).runtime == pytest.approx(6 * 1000 + 6 * d1)
    # Any placement puts >= 3 ops on a device, so 3 * (cost + delta1) is optimal: one chain per device.
    optimum = 3 * 1000 + 3 * d1
    assert simulate(graph, np.array([0, 0, 0, 1, 1, 1], np.int32), cluster).runtime == pytest.approx(optimum)
    for placement in (etf(graph, cluster), local_search(graph, cluster, 0, budget=48, init="single"),
                      local_search(graph, cluster, 0, budget=4)):
        assert simulate(graph, placement, cluster).runtime == pytest.approx(optimum)
        assert len(set(placement[:3])) == 1 and len(set(placement[3:])) == 1 and placement[0] != placement[3]


# ---- partitioners -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["metis", "scotch", "mincut"])
def test_partitioners_use_at_most_the_requested_devices(name):
    graph = layered_dag(200, seed=3)
    for n_dev in (1, 2, 3, 4, 8):
        p = get_method(name)(graph, cluster_preset("placeto-k80", n_dev), 0)
        _check(p, graph, n_dev)
        assert len(np.unique(p)) >= min(n_dev, 2)  # a real partition, not everything on one device
    tiny = layered_dag(3, seed=0)
    _check(get_method(name)(tiny, cluster_preset("placeto-k80", 4), 0), tiny, 4)
    assert get_method(name)(graph, cluster_preset("placeto-k80", 4), 0).tolist() == \
        get_method(name)(graph, cluster_preset("placeto-k80", 4), 0).tolist()


def test_mincut_uses_only_the_gpus():
    graph = layered_dag(100, seed=0, kinds=("k80", "cpu"))
    p = get_method("mincut")(graph, cluster_preset("placeto-k80-cpu", 3), 0)
    assert set(p.tolist()) == {1, 2}


def test_pair_bytes_merges_parallel_edges():
    nodes = [{"name": "a", "out_bytes": [100, 30]}, {"name": "b", "out_bytes": [5]}, {"name": "c"}]
    graph = make_graph("g", nodes, [(0, 1, 0), (0, 1, 1), (0, 1, 0), (0, 2, 1), (1, 2, 0)])
    pb = pair_bytes(graph)
    assert list(zip(pb.src.tolist(), pb.dst.tolist(), pb.bytes.tolist())) == [(0, 1, 130.0), (0, 2, 30.0),
                                                                              (1, 2, 5.0)]


# ---- memory -------------------------------------------------------------------------------------------------
def heavy_chain():
    """4 nodes of 4 GB of parameters each: 16 GB that fit on two 10 GB devices but not on one."""
    nodes = [{"name": f"w{i}", "cost": 100.0, "out_bytes": [1000], "persistent_bytes": 4 * GB} for i in range(4)]
    graph = make_graph("heavy", nodes, [(i, i + 1, 0) for i in range(3)])
    cluster = Cluster("small", (Device("/gpu:0", "k80", 10 * GB), Device("/gpu:1", "k80", 10 * GB)),
                      5.7, 25.0, 7600.0)
    return graph, cluster


@pytest.mark.parametrize("name", ["etf", "m-sct", "heft", "mincut", "local-search", "random"])
def test_memory_aware_methods_avoid_oom(name):
    graph, cluster = heavy_chain()
    assert simulate(graph, get_method("single")(graph, cluster, 0), cluster).any_oom
    placement = run_method(name, graph, cluster, 0, budget=BUDGET).placement
    assert not simulate(graph, placement, cluster).any_oom


def test_evaluate_ranks_oom_last_and_counts_calls():
    graph, cluster = heavy_chain()
    with count_simulator_calls() as counter:
        scores = evaluate(graph, np.array([[0, 0, 0, 0], [0, 0, 1, 1]]), cluster)
        evaluate(graph, np.array([0, 1, 0, 1]), cluster)
    assert counter.calls == 3
    single = simulate(graph, np.zeros(4, np.int32), cluster)
    excess = (np.maximum(single.peak_memory - single.capacity, 0) / single.capacity).sum()
    bound = upper_bound(graph, cluster)
    assert excess > 0 and scores[0] == pytest.approx(bound * (2 + excess) + 1e-6 * single.runtime)  # feasibility first
    assert scores[1] == simulate(graph, np.array([0, 0, 1, 1]), cluster).runtime


# ---- determinism --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["random", "local-search", "scotch", "metis"])
def test_deterministic_in_seed(name):
    graph, cluster = layered_dag(80, seed=2), cluster_preset("placeto-k80", 4)
    a = run_method(name, graph, cluster, 7, budget=BUDGET).placement
    b = run_method(name, graph, cluster, 7, budget=BUDGET).placement
    assert np.array_equal(a, b)
    if name == "random":
        assert not np.array_equal(a, run_method(name, graph, cluster, 8, budget=BUDGET).placement)


def test_local_search_never_worse_than_its_start():
    graph, cluster = layered_dag(120, seed=4), cluster_preset("placeto-k80", 4)
    start = min(simulate(graph, get_method(m)(graph, cluster, 0), cluster).runtime for m in ("single", "etf"))
    assert simulate(graph, local_search(graph, cluster, 0, budget=64), cluster).runtime <= start


# ---- fast paths equal their references ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_list_scheduler_kernels_equal_references(seed):
    rng = np.random.default_rng(seed)
    graph = layered_dag(int(rng.integers(20, 150)), seed=seed, kinds=("k80", "cpu"))
    n_dev = int(rng.integers(2, 5))
    cluster = cluster_preset("placeto-k80-cpu", n_dev)
    if seed % 2:  # tight memory, so the memory tiers decide
        total = float(graph.persistent_bytes.sum() + graph.node_out_bytes.sum())
        cluster = Cluster("tight", tuple(Device(d.name, d.kind, total / n_dev * 0.9) for d in cluster.devices),
                          5.7, 25.0, 7600.0)
    prob = ls.build_problem(graph, cluster)
    for fast, ref in ((etf_schedule(prob), ls.etf_reference(prob)),
                      (heft_schedule(prob, ls.heft_order(prob, graph.topo_order)),
                       ls.heft_reference(prob, ls.heft_order(prob, graph.topo_order)))):
        assert np.array_equal(fast.device, ref.device)
        assert np.array_equal(fast.start, ref.start) and np.array_equal(fast.end, ref.end)


def test_heft_order_is_topological():
    graph = layered_dag(300, seed=5)
    prob = ls.build_problem(graph, cluster_preset("placeto-k80", 4))
    pos = np.empty(graph.n_nodes, np.int64)
    pos[ls.heft_order(prob, graph.topo_order)] = np.arange(graph.n_nodes)
    assert np.all(pos[graph.edge_src] < pos[graph.edge_dst])
