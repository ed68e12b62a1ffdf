"""Toy schedules worked out by hand, checked against both simulators.

Unless a case says otherwise the cluster has bandwidth 1000 bytes/us, delta1 = 1 us (device idle after an op of
non-zero cost) and delta2 = 2 us (bus busy after a transfer), so a 1000-byte transfer takes 1 us.
"""

import numpy as np
import pytest

from simulator import lower_bound, simulate, simulate_reference
from simulator.model.cluster import Cluster, Device
from simulator.model.graph import make_graph

SIMULATORS = pytest.mark.parametrize("sim", [simulate, simulate_reference], ids=["engine", "reference"])


def cluster(n_dev: int, memory: tuple[float, ...] | None = None) -> Cluster:
    memory = memory or (1e9,) * n_dev
    return Cluster("toy", tuple(Device(f"/gpu:{i}", "k80", memory[i]) for i in range(n_dev)),
                   delta1_us=1.0, delta2_us=2.0, bandwidth_bytes_per_us=1000.0)


def graph(nodes: list[tuple[str, float, list[int]]], edges: list[tuple[int, int]], persistent=None):
    """Nodes (name, cost us, output bytes); edges (src, dst) read output 0."""
    persistent = persistent or {}
    return make_graph("toy", [{"name": nm, "cost": cost, "out_bytes": out, "persistent_bytes": persistent.get(nm, 0)}
                              for nm, cost, out in nodes], [(s, d, 0) for s, d in edges])


def transfers(result) -> list[tuple]:
    t = result.transfers
    return list(zip(t.node.tolist(), t.out.tolist(), t.device.tolist(), t.start.tolist(), t.end.tolist()))


@SIMULATORS
def test_chain_on_one_device(sim):
    # a(3) -> b(5) -> c(2) on device 0. a: 0-3, free at 4; b: 4-9, free at 10; c: 10-12, free at 13.
    # Runtime = (3 + 5 + 2) + 3 * delta1 = 13.
    g = graph([("a", 3, [1000]), ("b", 5, [1000]), ("c", 2, [1000])], [(0, 1), (1, 2)])
    r = sim(g, [0, 0, 0], cluster(1))
    assert r.runtime == 13.0
    assert r.start.tolist() == [0, 4, 10] and r.end.tolist() == [3, 9, 12]
    assert r.busy.tolist() == [10] and transfers(r) == []
    # Live bytes: a's output 0-9 (until b ends), b's 4-12, c's 10-12: at most two 1000-byte tensors.
    assert r.peak_memory.tolist() == [2000]
    assert r.lower_bound == 10.0  # critical path 10 = total compute on one device


@SIMULATORS
def test_fork_join_on_two_devices(sim):
    # s(2) on d0 feeds a(4) on d0 and b(3) on d1; j(1) on d0 joins a and b.
    # t=0 s runs 0-2 (d0 free at 3); its 2000 bytes leave on bus 0 at 2 and arrive at 4 (bus free at 6).
    # a runs 3-7 (d0 free at 8). b runs 4-7 (d1 free at 8); its 3000 bytes go out on bus 1 at 7, arrive at 10
    # (bus 1 free at 12). j waits for b's tensor: runs 10-11 (d0 free at 12). Runtime = 12.
    g = graph([("s", 2, [2000]), ("a", 4, [1000]), ("b", 3, [3000]), ("j", 1, [500])],
              [(0, 1), (0, 2), (1, 3), (2, 3)])
    r = sim(g, [0, 0, 1, 0], cluster(2))
    assert r.runtime == 12.0
    assert r.start.tolist() == [0, 3, 4, 10] and r.end.tolist() == [2, 7, 7, 11]
    assert transfers(r) == [(0, 0, 0, 2.0, 4.0), (2, 0, 1, 7.0, 10.0)]
    assert r.busy.tolist() == [7, 3]
    # d0: s's tensor 0-7 (until a ends; its copy left at 4), a's 3-11, b's copy 10-11, j's 10-11:
    #     peak 1000 + 3000 + 500 = 4500 at t=10 (s's tensor freed at 7).
    # d1: s's copy 4-7 and b's output 4-10 (until sent): peak 2000 + 3000 = 5000.
    assert r.peak_memory.tolist() == [4500, 5000]
    assert r.lower_bound == 7.0  # critical path s-a-j = 7 > total 10 / 2 devices


@SIMULATORS
def test_two_transfers_contend_for_one_bus(sim):
    # p1(1), p2(1) on d0 feed c1(1), c2(1) on d1, 1000 bytes each.
    # p1 runs 0-1; its transfer 1-2 keeps bus 0 busy until 2 + delta2 = 4. p2 runs 2-3 but its transfer waits
    # for the bus: 4-5. c1 runs 2-3, c2 runs 5-6 (d1 free at 7). Runtime = 7 (bus 0 also free at 7).
    g = graph([("p1", 1, [1000]), ("p2", 1, [1000]), ("c1", 1, []), ("c2", 1, [])], [(0, 2), (1, 3)])
    r = sim(g, [0, 0, 1, 1], cluster(2))
    assert transfers(r) == [(0, 0, 0, 1.0, 2.0), (1, 0, 0, 4.0, 5.0)]
    assert r.start.tolist() == [0, 2, 2, 5] and r.end.tolist() == [1, 3, 3, 6]
    assert r.runtime == 7.0


@SIMULATORS
def test_zero_cost_op_has_no_delta1(sim):
    # a(0) -> b(2) -> c(0) -> d(1) on d0. a: 0-0, device free at once; b: 0-2, free at 3; c: 3-3, free at once;
    # d: 3-4, free at 5. Runtime = 3 us of compute + delta1 after b and d only = 5.
    g = graph([("a", 0, [10]), ("b", 2, [10]), ("c", 0, [10]), ("d", 1, [10])], [(0, 1), (1, 2), (2, 3)])
    r = sim(g, [0, 0, 0, 0], cluster(1))
    assert r.start.tolist() == [0, 0, 3, 3] and r.end.tolist() == [0, 2, 3, 4]
    assert r.runtime == 5.0


@SIMULATORS
def test_one_transfer_serves_every_remote_consumer(sim):
    # p(1) on d0 sends 4000 bytes to c1(1) and c2(2) on d1 and c3(1) on d2: one transfer, 1-5 (bus free at 7).
    # c1 runs 5-6, c2 6+delta1=7-9 (d1 free at 10), c3 5-6 on d2. Runtime = 10.
    g = graph([("p", 1, [4000]), ("c1", 1, []), ("c2", 2, []), ("c3", 1, [])], [(0, 1), (0, 2), (0, 3)])
    r = sim(g, [0, 1, 1, 2], cluster(3))
    assert transfers(r) == [(0, 0, 0, 1.0, 5.0)]
    assert r.start.tolist() == [0, 5, 7, 5] and r.end.tolist() == [1, 6, 9, 6]
    assert r.runtime == 10.0
    # The tensor lives on d0 until sent (0-5) and a copy on d1 (5-9) and on d2 (5-6).
    assert r.peak_memory.tolist() == [4000, 4000, 4000]


@SIMULATORS
def test_out_of_memory(sim):
    # The chain of test_chain_on_one_device on d0 (peak 2000 live bytes) plus a's 300 persistent bytes;
    # z(1) alone on d1 with a 100-byte output and 50 persistent bytes.
    g = graph([("a", 3, [1000]), ("b", 5, [1000]), ("c", 2, [1000]), ("z", 1, [100])], [(0, 1), (1, 2)],
              persistent={"a": 300, "z": 50})
    r = sim(g, [0, 0, 0, 1], cluster(2, memory=(1500, 1000)))
    assert r.peak_memory.tolist() == [2300, 150]
    assert r.oom.tolist() == [True, False] and r.any_oom
    assert r.runtime == 13.0


@SIMULATORS
def test_lower_bound(sim):
    # Costs per device kind; the bound uses each node's fastest kind: a 4, b 3, c 2.
    # Critical path max(a, b) + c = 6 beats total 9 / 2 devices = 4.5.
    g = make_graph("lb", [{"name": "a", "cost": {"k80": 4, "cpu": 10}, "out_bytes": [0]},
                          {"name": "b", "cost": {"k80": 6, "cpu": 3}, "out_bytes": [0]},
                          {"name": "c", "cost": {"k80": 2, "cpu": 2}, "out_bytes": []}], [(0, 2, 0), (1, 2, 0)])
    c = Cluster("mixed", (Device("/cpu:0", "cpu", 1e9), Device("/gpu:0", "k80", 1e9)), 1.0, 2.0, 1000.0)
    r = sim(g, [1, 0, 1], c)
    assert r.lower_bound == lower_bound(g, c) == 6.0
    # a on the GPU 0-4, b on the CPU 0-3 (its zero-byte tensor arrives at 3), c on the GPU 5-7 (after delta1).
    assert r.start.tolist() == [0, 0, 5] and r.end.tolist() == [4, 3, 7] and r.runtime == 8.0
    # Four independent 5-us nodes on two devices: total compute / devices = 10 beats the critical path 5.
    g4 = make_graph("wide", [{"name": f"n{i}", "cost": 5, "out_bytes": []} for i in range(4)], [])
    r4 = sim(g4, np.array([0, 1, 0, 1]), cluster(2))
    assert r4.lower_bound == 10.0 and r4.runtime == 12.0  # 5 + 1 + 5, then delta1


def host_cluster(n_dev: int, latency: float = 0.0, dispatch: float = 0.0, transfer: float = 0.0,
                 shared: bool = True) -> Cluster:
    """The toy cluster (delta1 1, delta2 2, 1000 bytes/us) with a latency and one host shared by every device
    (or, not shared, one host per device) costing `dispatch` per op and `transfer` per transfer sent."""
    from simulator.model.cluster import Host

    n_hosts = 1 if shared else n_dev
    return Cluster("toy-hosts", tuple(Device(f"/gpu:{i}", "k80", 1e9, f"h{i % n_hosts}") for i in range(n_dev)),
                   delta1_us=1.0, delta2_us=2.0, bandwidth_bytes_per_us=1000.0, latency_us=latency,
                   hosts=tuple(Host(f"h{k}", dispatch, transfer) for k in range(n_hosts)))


@SIMULATORS
def test_latency_delays_the_arrival_not_the_bus(sim):
    # p(1) on d0 sends 1000 bytes to c(1) on d1, latency 5. p: 0-1; the bus takes the tensor at 1, the wire is
    # busy 1-2, the bus until 2 + delta2 = 4, and the tensor arrives at 2 + 5 = 7. c runs 7-8, d1 free at 9.
    g = graph([("p", 1, [1000]), ("c", 1, [])], [(0, 1)])
    r = sim(g, [0, 1], host_cluster(2, latency=5.0))
    assert transfers(r) == [(0, 0, 0, 1.0, 7.0)]
    assert r.start.tolist() == [0, 7] and r.runtime == 9.0


@SIMULATORS
def test_latency_lets_the_next_transfer_leave_before_the_first_arrives(sim):
    # p(1) on d0 sends two 1000-byte outputs to c1 and c2 on d1, latency 5. Output 0: bus 1-2 (free at 4),
    # arrives 7; output 1: bus 4-5 (free at 7), arrives 10. c1 7-8 (d1 free 9), c2 10-11 (free 12).
    g = make_graph("two", [{"name": "p", "cost": 1, "out_bytes": [1000, 1000]}, {"name": "c1", "cost": 1},
                           {"name": "c2", "cost": 1}], [(0, 1, 0), (0, 2, 1)])
    r = sim(g, [0, 1, 1], host_cluster(2, latency=5.0))
    assert transfers(r) == [(0, 0, 0, 1.0, 7.0), (0, 1, 0, 4.0, 10.0)]
    assert r.start.tolist() == [0, 7, 10] and r.runtime == 12.0


@SIMULATORS
def test_a_shared_host_serialises_dispatch(sim):
    # a(3) on d0 and b(3) on d1, independent; dispatch takes the shared host 2 us per op. Device events at 0 run
    # by device: a's dispatch 0-2, a 2-5 (d0 free 6); b's dispatch waits for the host: 2-4, b 4-7 (d1 free 8).
    # With a host per device both dispatch 0-2 and run 2-5: runtime 6.
    g = graph([("a", 3, []), ("b", 3, [])], [])
    shared = sim(g, [0, 1], host_cluster(2, dispatch=2.0))
    assert shared.start.tolist() == [2, 4] and shared.runtime == 8.0
    private = sim(g, [0, 1], host_cluster(2, dispatch=2.0, shared=False))
    assert private.start.tolist() == [2, 2] and private.runtime == 6.0


@SIMULATORS
def test_a_producers_transfers_share_one_host_job(sim):
    # p(1) on d0 sends two 1000-byte outputs to c1 and c2 on d1; the host takes 3 us per producer sent. Output 0:
    # host job 1-4, wire 4-5 (bus free 7), arrives 5; output 1 rides on the same job: bus 7, wire 7-8, arrives 8
    # (bus free 10). c1 runs 5-6 (d1 free 7), c2 8-9 (free 10). (With a job per output: output 1 would leave at 10.)
    g = make_graph("two", [{"name": "p", "cost": 1, "out_bytes": [1000, 1000]}, {"name": "c1", "cost": 1},
                           {"name": "c2", "cost": 1}], [(0, 1, 0), (0, 2, 1)])
    r = sim(g, [0, 1, 1], host_cluster(2, transfer=3.0))
    assert transfers(r) == [(0, 0, 0, 1.0, 5.0), (0, 1, 0, 7.0, 8.0)]
    assert r.start.tolist() == [0, 5, 8] and r.runtime == 10.0
    # an output read only on the producer's own device does not take the job: here output 0 stays local
    g2 = make_graph("local-first", [{"name": "p", "cost": 1, "out_bytes": [1000, 1000]}, {"name": "c1", "cost": 1},
                                    {"name": "c2", "cost": 1}], [(0, 1, 0), (0, 2, 1)])
    r2 = sim(g2, [0, 0, 1], host_cluster(2, transfer=3.0))
    assert transfers(r2) == [(0, 1, 0, 1.0, 5.0)]  # output 1 is the producer's first remote one: 1-4 job, 4-5 wire


@SIMULATORS
def test_a_shared_host_serialises_transfers_in_event_order(sim):
    # p0(1) on d0 and p1(1) on d1 each send 1000 bytes to c0, c1 on d2; each transfer takes the shared host 3 us.
    # Both buses take their tensor at 1 (bus events by device): d0's host job 1-4, wire 4-5, arrival 5; d1's job
    # waits for the host: 4-7, wire 7-8, arrival 8 (bus 1 free at 10). c0 runs 5-6 (d2 free 7), c1 8-9 (free 10).
    g = graph([("p0", 1, [1000]), ("p1", 1, [1000]), ("c0", 1, []), ("c1", 1, [])], [(0, 2), (1, 3)])
    r = sim(g, [0, 1, 2, 2], host_cluster(3, transfer=3.0))
    assert transfers(r) == [(0, 0, 0, 1.0, 5.0), (1, 0, 1, 1.0, 8.0)]
    assert r.start.tolist() == [0, 0, 5, 8] and r.runtime == 10.0
