"""placeto.boundary_costs: the stage and transfer costs of the rig, fitted on the graph itself."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from placeto import boundary_costs
from placeto.boundary_costs import Boundary, chunked, fit
from simulator.cluster import Cluster, Device
from simulator.errors import InputError
from simulator.generate import layered_dag
from simulator.rig_worker import Event
from simulator.staged import RigCosts, run_cost, stage_graph, stage_inputs, stage_outputs, stage_sends

COSTS = RigCosts(launch_us=50.0, launch_us_per_input=3.0, launch_us_per_input_mb=10.0, step_us=80.0)


def test_chunked_alternates_runs_of_equal_cost_along_the_order():
    cost = np.asarray([1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    holders = np.zeros(10, dtype=bool)
    holders[2] = True  # counted 0
    order = np.arange(10)[::-1]  # the order, not the index, decides the runs
    p = chunked(cost, order, holders, 3)
    assert p[order].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert set(chunked(cost, np.arange(10), np.zeros(10, bool), 10).tolist()) == {0, 1}


def test_fit_recovers_non_negative_coefficients_and_needs_rows_for_each_term():
    rng = np.random.default_rng(0)
    terms = np.column_stack([np.ones(40), rng.uniform(1, 40, 40), rng.uniform(0, 20, 40), rng.uniform(0, 20, 40)])
    exact = terms @ np.asarray([120.0, 9.0, 180.0, 350.0])
    assert fit(exact, terms) == pytest.approx((120.0, 9.0, 180.0, 350.0))
    assert fit(-5.0 * terms[:, 2], terms) == (0.0, 0.0, 0.0, 0.0)  # never negative
    assert fit(exact[:11], terms[:11]) is None  # fewer than ROWS_PER_TERM rows per term: the cached costs stay
    assert fit(exact[:12], terms[:12]) == pytest.approx((120.0, 9.0, 180.0, 350.0))
    # relative weights leave an exact fit as it is
    assert fit(exact, terms, rng.uniform(1e2, 1e5, 40)) == pytest.approx((120.0, 9.0, 180.0, 350.0))


def test_relative_weights_keep_a_large_stages_noise_off_the_launch():
    """Small stages show the launch (200 us); one large stage's work is off by 3% of its 10^6 us: unweighted, its
    error drags the launch away; weighted by the predicted runs, the launch stays near 200."""
    terms = np.column_stack([np.ones(9), np.asarray([1.0, 2, 3, 4, 5, 6, 7, 8, 9])])
    work = np.asarray([500.0] * 8 + [1e6])
    excess = terms @ np.asarray([200.0, 10.0]) + np.asarray([0.0] * 8 + [-3e4])
    assert fit(excess, terms, None)[0] < 100.0
    assert fit(excess, terms, work + 300.0)[0] == pytest.approx(200.0, rel=0.05)


def test_applied_to_replaces_the_fitted_parts_and_keeps_the_rest():
    base = dataclasses.replace(COSTS, launch_us_per_output_mb=1.0, send_us=10.0, recv_us_per_value=4.0,
                               latency_us=30.0, contention=0.1)
    costs = Boundary((25.0, 1.5, 110.0, 201.0), (30.0, 2.0, 3.0), (4.0, 12.0, 5.0, 90.0), 7, 5).applied_to(base)
    assert (costs.launch_us, costs.launch_us_per_input, costs.launch_us_per_input_mb,
            costs.launch_us_per_output_mb) == (25.0, 1.5, 110.0, 201.0)
    assert (costs.send_us, costs.send_us_per_value, costs.send_us_per_mb) == (30.0, 2.0, 3.0)
    assert (costs.recv_us, costs.recv_us_per_value, costs.recv_us_per_mb, costs.latency_us) == (4.0, 12.0, 5.0, 90.0)
    assert (costs.step_us, costs.contention) == (COSTS.step_us, 0.1)  # the parent's round trip is not the graph's
    kept = Boundary(None, None, (4.0, 12.0, 5.0, 90.0), 2, 30)
    assert kept.applied_to(base).launch_us == base.launch_us and kept.applied_to(base).send_us == base.send_us
    assert "the cached stages', sends' costs kept" in kept.describe() and "a receive 4 + 12.0 per value" in kept.describe()


class _Plan:
    """Events of each step as given: {worker: [Event]}."""

    def __init__(self, events: dict):
        self.given, self.events = events, {}

    def run_step(self):
        self.events = self.given

    def close(self):
        pass


TRUE = RigCosts(launch_us=50.0, launch_us_per_input=3.0, launch_us_per_input_mb=10.0, step_us=80.0, send_us=20.0,
                send_us_per_value=2.0, send_us_per_mb=30.0, recv_us=15.0, recv_us_per_value=4.0, recv_us_per_mb=5.0,
                latency_us=40.0)
FAKE = RigCosts(launch_us=120.0, launch_us_per_input=9.0, launch_us_per_input_mb=180.0, launch_us_per_output_mb=350.0,
                send_us=70.0, send_us_per_value=25.0, send_us_per_mb=60.0, recv_us=30.0, recv_us_per_value=65.0,
                recv_us_per_mb=300.0, latency_us=800.0)


def test_measure_fits_the_graphs_own_costs_from_the_workers_events():
    """A rig whose stages, sends and receives cost what FAKE charges (not what the cached TRUE says; the receivers
    wait from 0, so every receive pays the latency, but for one batch in every step): measure recovers FAKE's
    stage, send and receive costs."""
    graph = layered_dag(60, seed=1, mean_bytes=2e6, kinds=("cpu",))
    cluster = Cluster("c", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(2)), 0.0, 0.0, 1e4)
    holders = np.zeros(graph.n_nodes, dtype=bool)
    order = graph.topo_order
    seen = {}

    def runnable(placement):
        sg = stage_graph(graph, placement, cluster, order, TRUE, holders)
        n_in, in_bytes = stage_inputs(graph, sg.stage_of, len(sg.runs))
        out_bytes = stage_outputs(graph, sg.stage_of, len(sg.runs))
        run = run_cost(FAKE, sg.work, n_in, in_bytes, out_bytes)
        events = {d: [Event("run", k, 0, int(1e3 * run[k])) for k in np.flatnonzero(sg.placement == d)]
                  for d in (0, 1)}
        for i, ((s, dst), (count, nbytes)) in enumerate(stage_sends(graph, sg.stage_of, sg.placement).items()):
            sent = int(1e3 * FAKE.send_cost(nbytes, count))
            events[int(sg.placement[s])].append(Event("send", int(s), 1000, 1000 + sent))
            start = 1000 + sent if i == 0 else 0  # the first batch's receiver came after the send: no wake-up
            events[dst].append(Event("recv", int(s), start, 1000 + sent + int(1e3 * (FAKE.recv_cost(nbytes, count)
                                                                                    + FAKE.latency_us * (i > 0)))))
        seen["stages"], seen["sends"] = len(sg.runs), len(stage_sends(graph, sg.stage_of, sg.placement))
        return _Plan(events)

    runner = SimpleNamespace(rig=SimpleNamespace(n_devices=2), rig_costs=TRUE, graph=graph, holders=holders,
                             cluster=cluster, order=lambda placement: order, runnable=runnable)
    got = boundary_costs.measure(runner, chunks=16, steps=3)
    assert got.stage == pytest.approx((FAKE.launch_us, FAKE.launch_us_per_input, FAKE.launch_us_per_input_mb,
                                       FAKE.launch_us_per_output_mb), rel=1e-3, abs=0.05)
    assert got.send == pytest.approx((FAKE.send_us, FAKE.send_us_per_value, FAKE.send_us_per_mb), rel=1e-3, abs=0.05)
    assert got.recv == pytest.approx((FAKE.recv_us, FAKE.recv_us_per_value, FAKE.recv_us_per_mb, FAKE.latency_us),
                                     rel=1e-3, abs=0.05)
    assert got.stages == seen["stages"] >= 16 and got.transfers == seen["sends"] > 0
    with pytest.raises(InputError):
        boundary_costs.measure(SimpleNamespace(rig=None, rig_costs=COSTS))
