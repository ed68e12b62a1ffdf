"""placeto.boundary_costs: the per-MB charges of values crossing stages, fitted on the graph itself."""

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
from simulator.staged import RigCosts, stage_graph, stage_inputs, stage_outputs

COSTS = RigCosts(launch_us=50.0, launch_us_per_input=3.0, launch_us_per_input_mb=10.0, step_us=80.0)


def test_chunked_alternates_runs_of_equal_cost_along_the_order():
    cost = np.asarray([1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    holders = np.zeros(10, dtype=bool)
    holders[2] = True  # counted 0
    order = np.arange(10)[::-1]  # the order, not the index, decides the runs
    p = chunked(cost, order, holders, 3)
    assert p[order].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert set(chunked(cost, np.arange(10), np.zeros(10, bool), 10).tolist()) == {0, 1}


def test_fit_recovers_the_per_mb_charges():
    rng = np.random.default_rng(0)
    in_mb, out_mb = rng.uniform(0, 20, 40), rng.uniform(0, 20, 40)
    assert fit(180.0 * in_mb + 350.0 * out_mb, in_mb, out_mb) == pytest.approx((180.0, 350.0))
    assert fit(-5.0 * in_mb, in_mb, out_mb) == (0.0, 0.0)  # never negative
    assert fit(np.zeros(0), np.zeros(0), np.zeros(0)) == (0.0, 0.0)


def test_added_to_adds_to_the_costs_per_mb_charges():
    costs = Boundary(100.0, 200.0, 7).added_to(dataclasses.replace(COSTS, launch_us_per_output_mb=1.0))
    assert (costs.launch_us_per_input_mb, costs.launch_us_per_output_mb) == (110.0, 201.0)
    assert costs.launch_us == COSTS.launch_us


class _Plan:
    """Runs of each stage on its worker as the staged model charges them plus the true per-MB extras."""

    def __init__(self, durations: dict):
        self.durations, self.events = durations, {}

    def run_step(self):
        self.events = {d: [Event("run", k, 0, int(1e3 * us)) for k, us in enumerate(runs)]
                       for d, runs in self.durations.items()}

    def close(self):
        pass


def test_measure_fits_the_extras_from_the_workers_run_events():
    graph = layered_dag(60, seed=1, mean_bytes=2e6, kinds=("cpu",))
    cluster = Cluster("c", tuple(Device(f"cpu:{d}", "cpu", 1e12) for d in range(2)), 0.0, 0.0, 1e4)
    holders = np.zeros(graph.n_nodes, dtype=bool)
    order = graph.topo_order
    seen = {}

    def runnable(placement):
        sg = stage_graph(graph, placement, cluster, order, COSTS, holders)
        n_in, in_bytes = stage_inputs(graph, sg.stage_of, len(sg.runs))
        out_bytes = stage_outputs(graph, sg.stage_of, len(sg.runs))
        run = (COSTS.launch_us + sg.work + COSTS.launch_us_per_input * n_in + COSTS.launch_us_per_input_mb
               * in_bytes / 1e6 + 180.0 * in_bytes / 1e6 + 350.0 * out_bytes / 1e6)
        seen["stages"] = len(sg.runs)
        return _Plan({d: run[sg.placement == d].tolist() for d in (0, 1)})

    runner = SimpleNamespace(rig=SimpleNamespace(n_devices=2), rig_costs=COSTS, graph=graph, holders=holders,
                             cluster=cluster, order=lambda placement: order, runnable=runnable)
    got = boundary_costs.measure(runner, chunks=12, steps=3)
    assert got.per_input_mb == pytest.approx(180.0, rel=1e-3) and got.per_output_mb == pytest.approx(350.0, rel=1e-3)
    assert got.stages == seen["stages"] >= 12
    with pytest.raises(InputError):
        boundary_costs.measure(SimpleNamespace(rig=None, rig_costs=COSTS))
