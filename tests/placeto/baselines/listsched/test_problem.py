"""The list schedulers with channel-booked transfers: kernels equal to the plain oracle and to Baechi's own event
loop node for node, Baechi's public placements reproduced, hand-computed toy schedules, and m-sct / m-topo."""

import csv
from pathlib import Path

import numpy as np
import pytest

from placeto.baselines.listsched import problem as ls
from placeto.baselines import run_method
from placeto.baselines.listsched.baechi_reference import baechi_etf, baechi_sct
from placeto.baselines.etf import etf, etf_schedule
from placeto.baselines.heft import heft_schedule
from placeto.baselines.m_sct import favourite_children, m_sct, sct_schedule
from placeto.baselines.m_topo import m_topo
from placeto.baselines.single import single
from simulator import Cluster, Device, cluster_preset, load_graph, make_graph
from simulator.engine.fast import simulate
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[4]
REFERENCE = ROOT / "experiments" / "reference" / "baechi_public_placers.csv"


def assert_same(a: ls.Schedule, b: ls.Schedule):
    assert np.array_equal(a.device, b.device)
    assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end)


def toy_cluster(n_dev, delta1=0.0, delta2=25.0):
    """Big memory, 1 byte/us, so transfer times are byte counts."""
    return Cluster("toy", tuple(Device(f"/gpu:{i}", "k80", 1e12) for i in range(n_dev)), delta1, delta2, 1.0)


# ---- fast paths equal the references ------------------------------------------------------------------------
def _check_all(graph, cluster, model):
    prob = ls.build_problem(graph, cluster, model)
    fast = etf_schedule(prob)
    assert_same(fast, ls.etf_reference(prob))
    assert_same(fast, baechi_etf(prob))
    order = ls.heft_order(prob, graph.topo_order)
    assert_same(heft_schedule(prob, order), ls.heft_reference(prob, order))


@pytest.mark.parametrize("model", sorted(ls.TRANSFER_MODELS))
@pytest.mark.parametrize("seed", range(4))
def test_kernels_equal_references_on_random_graphs(seed, model):
    rng = np.random.default_rng(seed)
    graph = layered_dag(int(rng.integers(20, 150)), seed=seed, kinds=("k80", "cpu"))
    n_dev = int(rng.integers(2, 5))
    cluster = cluster_preset("placeto-k80-cpu", n_dev)
    if seed % 2:  # tight memory: the tiers decide, and nothing fits at times (the fallback)
        total = float(graph.persistent_bytes.sum() + graph.node_out_bytes.sum())
        cluster = Cluster("tight", tuple(Device(d.name, d.kind, total / n_dev * 0.3) for d in cluster.devices),
                          5.7, 25.0, 7600.0)
    _check_all(graph, cluster, model)


@pytest.mark.parametrize("name", ["nmt/nmt_006", "benchmarks/inception_v3"])
def test_kernels_equal_references_on_benchmarks(name):
    graph = load_graph(ROOT / "datasets" / f"{name}.json.gz")
    for n_dev in (2, 8):
        for model in (ls.DEFAULT_TRANSFER_MODEL, "baechi"):
            _check_all(graph, cluster_preset("placeto-k80", n_dev), model)


def test_baechi_model_reproduces_the_public_placements():
    with open(REFERENCE, newline="") as f:
        ref = {(r["graph"], int(r["n_devices"]), r["method"]): float(r["runtime_us"]) for r in csv.DictReader(f)}
    for name in ("nmt_005", "nmt_006"):
        graph = load_graph(ROOT / "datasets" / "nmt" / f"{name}.json.gz")
        for n_dev in (2, 4, 8):
            cluster = cluster_preset("placeto-k80", n_dev)
            placements = {"m-etf": etf(graph, cluster, model="baechi"), "m-topo": m_topo(graph, cluster)}
            for method, p in placements.items():
                assert simulate(graph, p, cluster).runtime == pytest.approx(ref[(name, n_dev, method)], abs=1e-3)


# ---- toy schedules by hand ----------------------------------------------------------------------------------
def fork():
    """a (10 us) makes one 20-byte output, read by b, c, d (50 us each)."""
    nodes = [{"name": "a", "cost": 10.0, "out_bytes": [20]}] + [{"name": x, "cost": 50.0} for x in "bcd"]
    return make_graph("fork", nodes, [(0, 1, 0), (0, 2, 0), (0, 3, 0)])


@pytest.mark.parametrize("model", ["simulator", "shared-channel"])
def test_fork_output_is_sent_once_to_every_other_device(model):
    graph, cluster = fork(), toy_cluster(3)
    s = etf_schedule(ls.build_problem(graph, cluster, model))
    # b follows a on /gpu:0; c and d start at 30 = 10 + 20 bytes on the other two devices: one transfer for both
    assert s.device.tolist() == [0, 0, 1, 2]
    assert s.start.tolist() == [0, 10, 30, 30] and s.end.tolist() == [10, 60, 80, 80]
    res = simulate(graph, s.device, cluster)
    assert res.start.tolist() == s.start.tolist() and len(res.transfers.node) == 1


def test_fork_under_baechis_model_pays_a_copy_per_device():
    graph, cluster = fork(), toy_cluster(3)
    s = etf_schedule(ls.build_problem(graph, cluster, "baechi"))
    # comm = round(20 + 25) = 45 per copy. c gets its copy at 10 + 45 = 55; a copy for /gpu:2 would wait for
    # the sender's channel (busy until 55) and arrive at 100, so d runs after b on /gpu:0 at 60.
    assert s.device.tolist() == [0, 0, 1, 0]
    assert s.start.tolist() == [0, 10, 55, 60] and s.end.tolist() == [10, 60, 105, 110]


def test_transfers_queue_fifo_on_the_sender():
    nodes = [{"name": "a", "cost": 10.0, "out_bytes": [100, 100]}, {"name": "b", "cost": 50.0},
             {"name": "c", "cost": 50.0}]
    graph, cluster = make_graph("two_outputs", nodes, [(0, 1, 0), (0, 2, 1)]), toy_cluster(2, delta1=5.0)
    st = ls.State(ls.build_problem(graph, cluster, "simulator"))
    st.commit(0, 0, 0.0)
    st.commit(1, 1, 0.0)  # output 0 leaves at 10 and arrives at 110; the bus is busy until 110 + 25
    st.commit(2, 1, 0.0)  # output 1 leaves at 135 and arrives at 235
    assert st.start == [0, 110, 235] and st.chan[0] == 260 and st.avail == [15, 290]
    assert simulate(graph, np.array([0, 1, 1]), cluster).start.tolist() == [0, 110, 235]


def sct_toy():
    """a, r sources; b needs a's 1000 B and r's 100 B; L (1000 us) and z (200 us) need r's 1-byte output."""
    nodes = [{"name": "a", "cost": 10.0, "out_bytes": [1000]}, {"name": "r", "cost": 20.0, "out_bytes": [100, 1]},
             {"name": "b", "cost": 10.0}, {"name": "L", "cost": 1000.0}, {"name": "z", "cost": 200.0}]
    return make_graph("sct_toy", nodes, [(0, 2, 0), (1, 2, 0), (1, 3, 1), (1, 4, 1)])


def test_sct_waits_for_the_favourite_child():
    graph, cluster = sct_toy(), toy_cluster(2, delta2=0.0)
    prob = ls.build_problem(graph, cluster, "simulator")
    # m-ETF: /gpu:0 runs a, then z as soon as r's byte arrives (21), then b behind z.
    s = etf_schedule(prob)
    assert s.device.tolist() == [0, 1, 0, 1, 0]
    assert s.start.tolist() == [0, 0, 221, 20, 21] and s.end.tolist() == [10, 20, 231, 1020, 221]
    # m-SCT with b as a's favourite: /gpu:0 waits for b (inputs there at 120, the earliest device) and z is not
    # urgent (/gpu:1 is busy with L until 1020), so b runs at 120 and z after it.
    s = baechi_sct(prob, np.array([2, -1, -1, -1, -1]))
    assert s.device.tolist() == [0, 1, 0, 1, 0]
    assert s.start.tolist() == [0, 0, 120, 20, 130] and s.end.tolist() == [10, 20, 130, 1020, 330]


def test_sct_without_favourites_is_etf():
    graph = layered_dag(120, seed=3)
    prob = ls.build_problem(graph, cluster_preset("placeto-k80", 4))
    assert_same(baechi_sct(prob, np.full(graph.n_nodes, -1)), etf_schedule(prob))


# ---- m-sct and m-topo ---------------------------------------------------------------------------------------
def test_favourite_children_from_the_lp():
    chain = make_graph("chain", [{"name": f"n{i}", "cost": 10.0, "out_bytes": [25]} for i in range(4)],
                       [(i, i + 1, 0) for i in range(3)])
    prob = ls.build_problem(chain, toy_cluster(2), "simulator")
    assert favourite_children(prob).tolist() == [1, 2, 3, -1]
    # a fork: keeping the long child b (100 us) next to a shortens the makespan; c pays its 50 us transfer.
    nodes = [{"name": "a", "cost": 10.0, "out_bytes": [25]}, {"name": "b", "cost": 100.0}, {"name": "c", "cost": 10.0}]
    prob = ls.build_problem(make_graph("fork2", nodes, [(0, 1, 0), (0, 2, 0)]), toy_cluster(2), "simulator")
    assert favourite_children(prob).tolist() == [1, -1, -1]


@pytest.mark.parametrize("name", ["m-sct", "m-topo"])
def test_m_sct_and_m_topo_are_valid_and_deterministic(name):
    for graph, cluster in ((layered_dag(90, seed=1), cluster_preset("placeto-k80", 4)),
                           (layered_dag(60, seed=2, kinds=("k80", "cpu")), cluster_preset("placeto-k80-cpu", 3))):
        a = run_method(name, graph, cluster, 0).placement
        assert a.dtype == np.int32 and a.shape == (graph.n_nodes,) and 0 <= a.min() and a.max() < cluster.n_devices
        assert np.array_equal(a, run_method(name, graph, cluster, 5).placement)
    if name == "m-sct":  # the favourites change the schedule, not only the order of equal choices
        graph, cluster = layered_dag(200, seed=4), cluster_preset("placeto-k80", 4)
        assert not np.array_equal(m_sct(graph, cluster), etf(graph, cluster))


@pytest.mark.parametrize("by", ["memory", "compute"])
def test_m_topo_fills_devices_in_topological_order(by):
    graph, cluster = layered_dag(300, seed=6), cluster_preset("placeto-k80", 4)
    p = m_topo(graph, cluster, by=by)
    assert np.all(np.diff(p[graph.topo_order]) >= 0) and len(set(p.tolist())) == 4
    weight = np.floor(graph.persistent_bytes + graph.node_out_bytes) if by == "memory" else graph.cost_for("k80")
    share = weight.sum() // 4 + weight.max()
    assert all(weight[p == d].sum() <= share for d in range(4))
    with pytest.raises(ValueError, match="by must be"):
        m_topo(graph, cluster, by="bytes")


# ---- mixed devices: each node where it finishes first -------------------------------------------------------


def cpu_gpu_cluster():
    """/cpu:0 and /gpu:0 (device 0 is the CPU, as in the -cpu presets): big memory, 1 byte/us, no delta1/delta2."""
    return Cluster("toy-cpu", (Device("/cpu:0", "cpu", 1e12), Device("/gpu:0", "k80", 1e12)), 0.0, 0.0, 1.0)


def _mixed(name, costs, edges):
    """A graph whose node i costs costs[i] = (k80 us, cpu us), each with one 1-byte output."""
    nodes = [{"name": f"n{i}", "cost": {"k80": g, "cpu": c}, "out_bytes": [1]} for i, (g, c) in enumerate(costs)]
    return make_graph(name, nodes, edges)


def _every_loop(prob):
    """m-ETF's three loops and m-SCT's two without favourites, checked equal; the fast m-ETF schedule."""
    fast = etf_schedule(prob)
    for other in (ls.etf_reference(prob), baechi_etf(prob), baechi_sct(prob, np.full(prob.cost.shape[0], -1)),
                  sct_schedule(prob, np.full(prob.cost.shape[0], -1))):
        assert_same(fast, other)
    return fast


def test_a_free_slow_cpu_does_not_take_what_the_gpu_finishes_first():
    # a -> b -> c, 10 us each on the GPU, 100 us on the CPU: by earliest start alone the idle CPU (the lower
    # device) would take a at 0 and the chain would end at 300 us; every node finishes first on the GPU
    graph = _mixed("chain", [(10.0, 100.0)] * 3, [(0, 1, 0), (1, 2, 0)])
    s = _every_loop(ls.build_problem(graph, cpu_gpu_cluster()))
    assert s.device.tolist() == [1, 1, 1]
    assert s.start.tolist() == [0, 10, 20] and s.end.tolist() == [10, 20, 30]


def test_the_cpu_takes_a_node_when_it_finishes_it_first():
    # s (GPU 10 us) feeds x, y, z (GPU 100 us, CPU 150 us). x follows s on the GPU at 10; y would end at 210 there
    # but at 11 + 150 = 161 on the CPU (its byte arrives at 11), so the CPU takes it; z then ends first on the
    # GPU (110 + 100 = 210 against 161 + 150)
    graph = _mixed("fork", [(10.0, 1000.0)] + [(100.0, 150.0)] * 3, [(0, 1, 0), (0, 2, 0), (0, 3, 0)])
    s = _every_loop(ls.build_problem(graph, cpu_gpu_cluster()))
    assert s.device.tolist() == [1, 1, 0, 1]
    assert s.start.tolist() == [0, 10, 11, 110] and s.end.tolist() == [10, 110, 161, 210]
    assert simulate(graph, s.device, cpu_gpu_cluster()).runtime == pytest.approx(210.0)


@pytest.mark.parametrize("seed", range(3))
def test_kernels_equal_references_on_a_gpu_cpu_preset(seed):
    """h100-nvlink-cpu with the CPU 10-100x slower per node than the H100 (the analytic presets' order), memory
    ample or tight: every loop equal, m-SCT's kernel equal to its reference with the LP's favourites."""
    rng = np.random.default_rng(seed)
    graph = layered_dag(int(rng.integers(40, 120)), seed=seed, kinds=("h100", "cpu"))
    graph = graph.with_costs("cpu", graph.cost_for("h100") * rng.uniform(10.0, 100.0, graph.n_nodes))
    cluster = cluster_preset("h100-nvlink-cpu", 4)
    if seed == 2:
        total = float(graph.persistent_bytes.sum() + graph.node_out_bytes.sum())
        cluster = Cluster("tight", tuple(Device(d.name, d.kind, total / 4 * 0.4) for d in cluster.devices),
                          cluster.delta1_us, cluster.delta2_us, cluster.bandwidth_bytes_per_us)
    for model in sorted(ls.TRANSFER_MODELS):
        prob = ls.build_problem(graph, cluster, model)
        _check_all(graph, cluster, model)
        fav = favourite_children(prob)
        assert_same(sct_schedule(prob, fav), baechi_sct(prob, fav))


@pytest.mark.parametrize("preset", ["h100-nvlink-cpu", "h200-nvlink-cpu"])
def test_list_schedulers_are_not_many_times_slower_than_the_gpu_on_cpu_presets(preset):
    """nmt_004 and a CNN on three GPUs and the host CPU: m-ETF and m-SCT placed 7.2 and 7.8 ms on h100-nvlink-cpu
    (cnn_000 on h200-nvlink-cpu: 14.5 and 31.5 ms) by starting nodes on the idle CPU, against 3.2 ms (3.6 ms) on
    one GPU; finishing each node first they are within 10% of it or better."""

    for name in ("nmt/nmt_004", "cnn/cnn_000"):
        graph = load_graph(ROOT / "datasets" / f"{name}.json.gz")
        cluster = cluster_preset(preset, 4)
        one = simulate(graph, single(graph, cluster), cluster).runtime
        for method in (etf, m_sct):
            assert simulate(graph, method(graph, cluster), cluster).runtime < 1.1 * one, (name, method.__name__)
