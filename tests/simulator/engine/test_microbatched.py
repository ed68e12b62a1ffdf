"""Microbatched steps in both engines: bit-equal, a valid lower bound, and GPipe's step time on a toy pipeline."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import load_graph, lower_bound, simulate, simulate_batch, simulate_reference
from simulator.model.cluster import Cluster, Device, Host, cluster_preset
from simulator.model.generate import layered_dag
from simulator.model.graph import Graph, make_graph
from simulator.model.microbatch import microbatched
from tests.simulator.engine.test_fast import assert_same, placements, small_cluster, tie_graph

PREFIXES = ("jvp(M)/", "transpose(jvp(M))/", "update/", "param[0]", "input[0]")


def traced_names(graph: Graph, rng: np.random.Generator) -> Graph:
    """`graph` with its nodes named as a traced graph's groups: forward, backward, update, parameter, input."""
    nodes = [{"name": f"{i:05d}:{rng.choice(PREFIXES)}n{i}", "cost": float(graph.costs["default"][i]),
              "out_bytes": graph.out_bytes[graph.out_offsets[i]:graph.out_offsets[i + 1]].tolist(),
              "persistent_bytes": float(graph.persistent_bytes[i])} for i in range(graph.n_nodes)]
    edges = list(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()))
    return make_graph(graph.name, nodes, edges)


def check_microbatched(graph: Graph, cluster: Cluster, rows: np.ndarray, m: int) -> None:
    """Fast == reference on every row, the batch equal to them, and the runtime above the lower bound (to rounding)."""
    g = microbatched(graph, m)
    fast = [simulate(g, row, cluster) for row in rows]
    for row, f in zip(rows, fast):
        assert_same(f, simulate_reference(g, row, cluster))
        assert f.start.shape == f.end.shape == (graph.n_nodes,)
        # the bound sums the costs in another order than the schedule does: equal up to rounding (a fuzz case:
        # costs 0.5 and 2.0 on one device, runtime 2.4999999999999996 against the bound's 2.5)
        assert f.runtime >= f.lower_bound * (1 - 1e-12) and f.lower_bound == lower_bound(g, cluster)
    batch = simulate_batch(g, rows, cluster, with_memory=True)
    assert np.array_equal(batch.runtime, [f.runtime for f in fast])
    assert np.array_equal(batch.peak_memory, np.stack([f.peak_memory for f in fast]))


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("n_dev", [1, 2, 3])
def test_fast_equals_reference(m, n_dev):
    rng = np.random.default_rng(10 * m + n_dev)
    for seed in range(3):
        graph = tie_graph(25, seed)
        cluster = small_cluster(n_dev, float(seed % 2), 2.0 * (seed > 0))
        check_microbatched(graph, cluster, placements(graph, n_dev, rng, 2), m)
        check_microbatched(traced_names(graph, rng), cluster, placements(graph, n_dev, rng, 2), m)
    graph = layered_dag(60, m, max_fan_in=3, max_outputs=2, skip_prob=0.3)
    check_microbatched(graph, cluster_preset("placeto-k80", n_dev), placements(graph, n_dev, rng), m)


@st.composite
def cases(draw):
    """(graph with traced names, cluster with a latency and hosts or not, placements, M)."""
    n, n_dev = draw(st.integers(1, 8)), draw(st.integers(1, 3))
    n_out = [draw(st.integers(0 if i == n - 1 else 1, 2)) for i in range(n)]
    nodes = [{"name": f"{i:05d}:{draw(st.sampled_from(PREFIXES))}{i}", "cost": draw(st.integers(0, 5)) / 2,
              "out_bytes": [draw(st.integers(0, 3)) * 1000 for _ in range(n_out[i])],
              "persistent_bytes": draw(st.sampled_from([0, 700]))} for i in range(n)]
    edges = [(src, dst, draw(st.integers(0, n_out[src] - 1))) for dst in range(1, n)
             for src in draw(st.sets(st.integers(0, dst - 1), max_size=3))]
    hosts = draw(st.booleans())
    cluster = Cluster("fuzz", tuple(Device(f"/gpu:{d}", "k80", 1e9, "h" if hosts else None) for d in range(n_dev)),
                      delta1_us=draw(st.sampled_from([0.0, 1.0])), delta2_us=draw(st.sampled_from([0.0, 2.0])),
                      bandwidth_bytes_per_us=1000.0, latency_us=draw(st.sampled_from([0.0, 3.0])),
                      hosts=(Host("h", 0.5, 1.5),) if hosts else ())
    rows = draw(st.lists(st.lists(st.integers(0, n_dev - 1), min_size=n, max_size=n), min_size=1, max_size=3))
    return make_graph("fuzz", nodes, edges), cluster, np.asarray(rows), draw(st.integers(1, 4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_fuzz_fast_equals_reference(case):
    graph, cluster, rows, m = case
    check_microbatched(graph, cluster, rows, m)


def test_bound_and_schedule_sum_in_different_orders():
    """The fuzz case that found it: 0.5 + 2.0 us cut into 3 microbatches on one device simulates to
    2.4999999999999996 us, the bound (their sum / 1 device) is 2.5: equal up to rounding, which the check allows."""
    nodes = [{"name": f"{i:05d}:jvp(M)/{i}", "cost": c, "out_bytes": [0]}
             for i, c in enumerate([0.0] * 6 + [0.5])] + [{"name": "00007:update/7", "cost": 2.0, "out_bytes": []}]
    cluster = Cluster("fuzz", (Device("/gpu:0", "k80", 1e9, None),), delta1_us=0.0, delta2_us=0.0,
                      bandwidth_bytes_per_us=1000.0, latency_us=0.0)
    check_microbatched(make_graph("fuzz", nodes, []), cluster, np.zeros((1, 8), np.int64), 3)


def test_m1_is_the_plain_step():
    graph = tie_graph(30, 1)
    cluster = small_cluster(2, 1.0, 2.0)
    row = np.arange(30) % 2
    assert microbatched(graph, 1) is graph
    assert_same(simulate(microbatched(microbatched(graph, 3), 1), row, cluster), simulate(graph, row, cluster))


def two_stage_chain(f: float = 100.0, b: float = 100.0, act: int = 4000, grad: int = 1000, par: int = 500) -> Graph:
    """Forward s0 -> s1, backward s1 -> s0, one update per stage.

    Each stage: forward f us, backward b us; s0's activation `act` bytes (kept for its backward, sent to s1);
    s1's backward sends the activation gradient (`act` bytes) back to s0 and its weight gradient (`grad`) to
    its update; s0's backward sends its weight gradient to its update. Each forward holds `par` persistent bytes.
    """
    nodes = [{"name": "jvp(M)/s0", "cost": f, "out_bytes": [act], "persistent_bytes": par},
             {"name": "jvp(M)/s1", "cost": f, "out_bytes": [act], "persistent_bytes": par},
             {"name": "transpose(jvp(M))/s1", "cost": b, "out_bytes": [act, grad]},
             {"name": "transpose(jvp(M))/s0", "cost": b, "out_bytes": [grad]},
             {"name": "update/s0", "cost": 0.0, "out_bytes": []},
             {"name": "update/s1", "cost": 0.0, "out_bytes": []}]
    return make_graph("chain", nodes, [(0, 1, 0), (0, 3, 0), (1, 2, 0), (2, 3, 0), (2, 5, 1), (3, 4, 0)])


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_gpipe_step_time_of_a_two_stage_pipeline(m):
    """S = 2 equal stages of f + b = 200 us on 2 devices, transfers free: GPipe's (M + S - 1) * 200 / M us.

    The FIFO schedule runs the forward copies as they come and each backward copy as soon as its forward is
    done: the pipeline fills in one microbatch's stage time and drains in one, as GPipe's does.
    """
    cluster = Cluster("free", (Device("/gpu:0", "k80", 1e9), Device("/gpu:1", "k80", 1e9)), 0.0, 0.0, 1e15)
    placement = [0, 1, 1, 0, 0, 1]
    r = simulate(microbatched(two_stage_chain(), m), placement, cluster)
    assert r.runtime == pytest.approx((m + 2 - 1) * 200.0 / m, rel=1e-12)
    assert r.runtime >= r.lower_bound
    assert r.busy == pytest.approx([200.0, 200.0], rel=1e-12)  # M copies of cost / M: the same work


def test_gpipe_keeps_every_microbatch_in_flight():
    """Peak memory of device 0 (stage s0) at M = 1, 2, 4, by hand.

    M = 1: parameters 500 + its activation 4000 + the activation gradient received 4000 + its weight gradient 1000.
    M > 1: while s0's first backward runs, all M forward copies have run (the FIFO ran them first): their M
    activations of 4000 / M are in flight (GPipe keeps them all: the same 4000 bytes as one batch), plus one
    received activation gradient of 4000 / M and one weight-gradient accumulator of full size 1000.
    """
    cluster = Cluster("free", (Device("/gpu:0", "k80", 1e9), Device("/gpu:1", "k80", 1e9)), 0.0, 0.0, 1e15)
    placement = [0, 1, 1, 0, 0, 1]
    peaks = {m: simulate(microbatched(two_stage_chain(), m), placement, cluster).peak_memory[0] for m in (1, 2, 4)}
    assert peaks[1] == 500 + 4000 + 4000 + 1000
    for m in (2, 4):
        assert peaks[m] == 500 + m * (4000 / m) + 4000 / m + 1000
    assert simulate(microbatched(two_stage_chain(), 4), placement, cluster).peak_memory[0] == peaks[4]


def test_lower_bound_below_every_placement():
    """On a traced graph and a generated DAG the microbatched bound is below every runtime, and below the plain
    bound (copies of cost / M shorten the critical path; the total work is the same, up to rounding)."""
    rng = np.random.default_rng(0)
    cluster = cluster_preset("placeto-k80", 4)
    for graph in (load_graph("datasets/mlp/mlp_000.json.gz"), layered_dag(80, 3, max_fan_in=2, max_outputs=2)):
        for m in (2, 4, 8):
            g = microbatched(graph, m)
            runtimes = simulate_batch(g, placements(graph, 4, rng, 8), cluster)
            assert np.all(runtimes >= lower_bound(g, cluster))
            assert lower_bound(g, cluster) <= lower_bound(graph, cluster) * (1 + 1e-12)
