"""simulator.measure.boundary_costs: the per-MB charges of values crossing stages and the factors of the cached launch and
transfer costs, fitted on the graph itself."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.measure import boundary_costs
from simulator.measure.boundary_costs import Boundary, chunked, fit
from simulator.model.cluster import Cluster, Device
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.hardware.rig.worker import Event
from simulator.engine.staged import RigCosts, stage_graph, stage_inputs, stage_outputs, stage_sends

COSTS = RigCosts(launch_us=50.0, launch_us_per_input=3.0, launch_us_per_input_mb=10.0, step_us=80.0)


def test_chunked_alternates_runs_of_equal_cost_along_the_order():
    cost = np.asarray([1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    holders = np.zeros(10, dtype=bool)
    holders[2] = True  # counted 0
    order = np.arange(10)[::-1]  # the order, not the index, decides the runs
    p = chunked(cost, order, holders, 3)
    assert p[order].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert set(chunked(cost, np.arange(10), np.zeros(10, bool), 10).tolist()) == {0, 1}


def test_fit_recovers_the_fixed_costs_factor_and_the_per_mb_charges():
    rng = np.random.default_rng(0)
    fixed, in_mb, out_mb = rng.uniform(50, 90, 40), rng.uniform(0, 20, 40), rng.uniform(0, 20, 40)
    assert fit(0.4 * fixed + 180.0 * in_mb + 350.0 * out_mb, fixed, in_mb, out_mb) == pytest.approx((0.4, 180.0, 350.0))
    assert fit(-5.0 * in_mb, fixed, in_mb, out_mb) == (0.0, 0.0, 0.0)  # never negative
    assert fit(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)) == (1.0, 0.0, 0.0)
    exact = 0.4 * fixed + 180.0 * in_mb + 350.0 * out_mb  # relative weights leave an exact fit as it is
    assert fit(exact, fixed, in_mb, out_mb, rng.uniform(1e2, 1e5, 40)) == pytest.approx((0.4, 180.0, 350.0))


def test_relative_weights_keep_a_large_stages_noise_off_the_fixed_costs_factor():
    """Small stages show the fixed charges (factor 2); one large stage's work is off by 3% of its 10^6 us:
    unweighted, its error drags the factor away; weighted by the predicted runs, the factor stays near 2."""
    fixed, none = np.full(9, 100.0), np.zeros(9)
    work = np.asarray([500.0] * 8 + [1e6])
    excess = 2.0 * fixed + np.asarray([0.0] * 8 + [-3e4])
    assert fit(excess, fixed, none, none)[0] < 1.0
    assert fit(excess, fixed, none, none, work + fixed)[0] == pytest.approx(2.0, rel=0.05)


def test_added_to_scales_the_fixed_costs_and_adds_to_the_per_mb_charges():
    base = dataclasses.replace(COSTS, launch_us_per_output_mb=1.0, send_us=10.0, recv_us_per_value=4.0, latency_us=30.0)
    costs = Boundary(100.0, 200.0, 0.5, 3.0, 7, 5).added_to(base)
    assert (costs.launch_us_per_input_mb, costs.launch_us_per_output_mb) == (110.0, 201.0)
    assert (costs.launch_us, costs.launch_us_per_input) == (25.0, 1.5)
    assert (costs.send_us, costs.recv_us_per_value, costs.latency_us) == (30.0, 12.0, 90.0)
    assert costs.step_us == COSTS.step_us  # the parent's round trip is not the graph's
    assert Boundary(0.0, 0.0, 1.0, 1.0, 0, 0).added_to(base) == base


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


def test_measure_fits_the_graphs_own_costs_from_the_workers_events():
    """A rig whose stages pay 2x the cached launch and per-input costs plus 180 / 350 us per MB read / made, and
    whose transfers take 1.5x what the cached costs charge: measure recovers all four."""
    graph = layered_dag(60, seed=1, mean_bytes=2e6, kinds=("cpu",))
    cluster = Cluster("c", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(2)), 0.0, 0.0, 1e4)
    holders = np.zeros(graph.n_nodes, dtype=bool)
    order = graph.topo_order
    seen = {}

    def runnable(placement):
        sg = stage_graph(graph, placement, cluster, order, TRUE, holders)
        n_in, in_bytes = stage_inputs(graph, sg.stage_of, len(sg.runs))
        out_bytes = stage_outputs(graph, sg.stage_of, len(sg.runs))
        run = (2.0 * (TRUE.launch_us + TRUE.launch_us_per_input * n_in) + sg.work + TRUE.launch_us_per_input_mb
               * in_bytes / 1e6 + 180.0 * in_bytes / 1e6 + 350.0 * out_bytes / 1e6)
        events = {d: [Event("run", k, 0, int(1e3 * run[k])) for k in np.flatnonzero(sg.placement == d)]
                  for d in (0, 1)}
        for (s, dst), (count, nbytes) in stage_sends(graph, sg.stage_of, sg.placement).items():
            sent = int(1e3 * 1.5 * TRUE.send_cost(nbytes, count))  # the receiver waits from 0: woken up
            events[int(sg.placement[s])].append(Event("send", int(s), 0, sent))
            events[dst].append(Event("recv", int(s), 0, sent + int(1e3 * 1.5 * (TRUE.recv_cost(nbytes, count)
                                                                                 + TRUE.latency_us))))
        seen["stages"], seen["sends"] = len(sg.runs), len(stage_sends(graph, sg.stage_of, sg.placement))
        return _Plan(events)

    runner = SimpleNamespace(rig=SimpleNamespace(n_devices=2), rig_costs=TRUE, graph=graph, holders=holders,
                             cluster=cluster, order=lambda placement: order, runnable=runnable)
    got = boundary_costs.measure(runner, chunks=12, steps=3)
    assert got.per_input_mb == pytest.approx(180.0, rel=1e-3) and got.per_output_mb == pytest.approx(350.0, rel=1e-3)
    assert got.stage_factor == pytest.approx(2.0, rel=1e-3)
    assert got.transfer_factor == pytest.approx(1.5, rel=1e-3)
    assert got.stages == seen["stages"] >= 12 and got.transfers == seen["sends"] > 0
    obs = boundary_costs.observe(runner, chunks=12, steps=3)  # what measure fits, kept apart (RigFit)
    assert len(obs.run_us) == len(obs.work_us) == len(obs.n_in) == len(obs.in_mb) == len(obs.out_mb) == got.stages
    assert obs.taken_us.shape == obs.waited.shape == (got.transfers, 3) and obs.waited.dtype == bool
    assert boundary_costs.fit_observed(obs, TRUE) == got  # pure: the same Boundary from the same observation
    with pytest.raises(InputError):
        boundary_costs.measure(SimpleNamespace(rig=None, rig_costs=COSTS))


def test_observe_keeps_no_batch_whose_events_are_missing():
    """A rig whose events hold the stages' runs but no send or receive: no batch is observed (0 x steps arrays, not
    a crash), and the fit keeps the cached transfer costs (factor 1)."""
    graph = layered_dag(40, seed=2, mean_bytes=1e6, kinds=("cpu",))
    cluster = Cluster("c", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(2)), 0.0, 0.0, 1e4)
    holders = np.zeros(graph.n_nodes, dtype=bool)
    order = graph.topo_order

    def runnable(placement):
        sg = stage_graph(graph, placement, cluster, order, TRUE, holders)
        return _Plan({d: [Event("run", int(k), 0, int(1e3 * (sg.work[k] + 50.0)))
                          for k in np.flatnonzero(sg.placement == d)] for d in (0, 1)})

    runner = SimpleNamespace(rig=SimpleNamespace(n_devices=2), rig_costs=TRUE, graph=graph, holders=holders,
                             cluster=cluster, order=lambda placement: order, runnable=runnable)
    obs = boundary_costs.observe(runner, chunks=8, steps=3)
    assert obs.taken_us.shape == obs.waited.shape == (0, 3) and len(obs.values) == 0 and len(obs.run_us) > 0
    got = boundary_costs.fit_observed(obs, TRUE)
    assert got.transfer_factor == 1.0 and got.transfers == 0
