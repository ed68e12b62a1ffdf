"""simulator.measure.rig_workload.fit_events: the process rig's costs recovered from the events they produced."""

import numpy as np
import pytest

from simulator import make_graph
from simulator.hardware.dispatch import Task
from simulator.hardware.rig.worker import Event
from simulator.measure.rig_workload import StepEvents, fit_events, placements
from simulator.engine.staged import RigCosts, stage_inputs, stage_outputs
from simulator.model.graph import Source

TRUE = RigCosts(launch_us=40.0, launch_us_per_input=7.0, launch_us_per_input_mb=300.0, launch_us_per_output_mb=150.0,
                step_us=0.0, send_us=20.0, send_us_per_value=5.0, send_us_per_mb=50.0, recv_us=30.0, recv_us_per_value=9.0,
                recv_us_per_mb=800.0, latency_us=60.0)


def _step(rng: np.random.Generator) -> StepEvents:
    """A random DAG of units, each its own stage on device (unit % 2), with events timed by TRUE exactly."""
    n = 12
    sizes = rng.choice([2.5e5, 5e5, 1e6], n)
    edges = sorted({(int(a), int(b), int(rng.integers(0, 3))) for b in range(1, n)
                    for a in rng.choice(b, min(b, rng.integers(1, 5)), replace=False)})
    graph = make_graph("g", [{"name": f"u{i}", "op": "work", "cost": 100.0,
                              "out_bytes": [float(sizes[i]), float(sizes[i]) / 2, float(sizes[i]) / 4]}
                             for i in range(n)], edges)
    device = np.arange(n) % 2
    stage_of = np.arange(n)
    n_in, in_bytes = stage_inputs(graph, stage_of, n)
    out_bytes = stage_outputs(graph, stage_of, n)
    unit_cost = rng.uniform(50, 500, n)
    tasks, events = [], {0: [], 1: []}
    t = 0
    for u in range(n):
        sent = tuple(dict.fromkeys(Source(u, o) for a, b, o in edges if a == u and device[b] != device[u]))
        tasks.append(Task(u, int(device[u]), None, (), (), ((1 - int(device[u]), sent),) if sent else (), (u,)))
        run = (TRUE.launch_us + TRUE.launch_us_per_input * n_in[u] + TRUE.launch_us_per_input_mb * in_bytes[u] / 1e6
               + TRUE.launch_us_per_output_mb * out_bytes[u] / 1e6)
        events[device[u]].append(Event("run", u, t, t + int(1e3 * (run + unit_cost[u]))))
        t += int(1e3 * (run + unit_cost[u])) + 1000
        if sent:
            nbytes = sum(float(graph.out_bytes[graph.out_offsets[u] + s.out]) for s in sent)
            send = TRUE.send_cost(nbytes, len(sent))
            events[device[u]].append(Event("send", u, t, t + int(1e3 * send)))
            end = t + int(1e3 * send)
            recv = TRUE.recv_cost(nbytes, len(sent))
            if rng.random() < 0.5:  # the receiver was idle-waiting: woken latency_us after the send ended
                events[1 - device[u]].append(Event("recv", u, t - 5000, end + int(1e3 * (TRUE.latency_us + recv))))
            else:  # it came later: the receive's own work only
                events[1 - device[u]].append(Event("recv", u, end + 3000, end + 3000 + int(1e3 * recv)))
            t = end + 1000
    return StepEvents(events, tuple(tasks), stage_of, unit_cost, graph, graph)


def test_fit_recovers_the_costs_the_events_were_made_with():
    rng = np.random.default_rng(0)
    fitted = fit_events([_step(rng) for _ in range(30)], step_us=99.0)
    for field in ("launch_us", "launch_us_per_input", "launch_us_per_input_mb", "launch_us_per_output_mb",
                  "send_us", "send_us_per_value",
                  "send_us_per_mb", "recv_us", "recv_us_per_value", "recv_us_per_mb", "latency_us"):
        assert getattr(fitted, field) == pytest.approx(getattr(TRUE, field), rel=0.05, abs=1.0), field
    assert fitted.step_us == 99.0


def test_no_events_fit_zero_costs():
    assert fit_events([]) == RigCosts()


def test_workload_placements_use_both_devices():
    order = list(range(40))
    for p in placements(40, order):
        assert p.shape == (40,) and set(np.unique(p)) == {0, 1}
    chunks, halves = placements(40, order)[1], placements(40, order)[3]
    assert chunks.tolist() == [(i * 8 // 40) % 2 for i in range(40)]
    assert halves.tolist() == [0] * 20 + [1] * 20
