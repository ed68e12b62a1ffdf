"""What values crossing stages cost on the process rig, fitted on the user's graph itself (issue 40, item 2).

The rig's launch and transfer costs (simulator.rig_workload) are fitted on a small calibration step whose values
(64 KB to 1 MB) stay in a core's cache: its per-MB stage charges come out near 0. A graph with large values pays
more where a placement cuts it, beyond its units' profiled costs: a value that crosses stages is written out as a
stage's result and read back by the next, where inside one program it is consumed where it is made. On
inception_v3 at 2 rig devices (ad hoc, 2026-11-28, this 2-core machine), the stages of etf, round-robin and 64
runs alternating between the workers ran 0.18 ms per MB read from other stages and 0.35 ms per MB made for other
stages beyond their units' costs and the fitted launch (the runs' fit alone predicted the other two's excess
within 4% and 16%); the calibration step's fit put both at 0.

`measure(runner)`: the graph's units in the rig's dispatch order are cut into `chunks` runs of about equal
profiled cost alternating between the rig's first two workers (`chunked`: one worker computes at a time, so no
contention), the plan runs `steps` times after `warmup` steps; each stage's median run (its worker's own "run"
events) less what the staged simulation charges it (simulator.staged.stage_graph: launch, inputs, per-MB charges
already in the costs, its units' costs) is fitted as extra per input MB + extra per output MB (`fit`:
non-negative least squares), which `Boundary.added_to` adds to the costs. No placement a placer chose is run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

CHUNKS = 32  # runs of about equal profiled cost (each one stage or a few: holders split none)
STEPS = 3  # timed steps of the chunked plan (each stage's median is fitted)


class Boundary(NamedTuple):
    """Extra microseconds per 10^6 bytes a stage reads from (`per_input_mb`) or makes for (`per_output_mb`) other
    stages, fitted on the graph, and how many stages the fit used."""

    per_input_mb: float
    per_output_mb: float
    stages: int

    def added_to(self, costs: Any) -> Any:
        """`costs` (simulator.staged.RigCosts) with these added to its per-MB stage charges."""
        return dataclasses.replace(costs, launch_us_per_input_mb=costs.launch_us_per_input_mb + self.per_input_mb,
                                   launch_us_per_output_mb=costs.launch_us_per_output_mb + self.per_output_mb)


def chunked(cost: np.ndarray, order: np.ndarray, holders: np.ndarray, chunks: int) -> np.ndarray:
    """int32[N]: worker 0 or 1 of each unit, runs of about equal summed `cost` (float[N] microseconds, holders
    counted 0) along `order` (a permutation of the N units), alternating between the two."""
    cost = np.where(np.asarray(holders, dtype=bool), 0.0, np.asarray(cost, dtype=np.float64))
    order = np.asarray(order)
    cum = np.cumsum(cost[order])
    total = cum[-1] if len(cum) and cum[-1] > 0 else 1.0
    run_at = np.minimum(np.floor((cum - cost[order] / 2) * chunks / total), chunks - 1).astype(int)
    placement = np.empty(len(cost), dtype=np.int32)
    placement[order] = run_at % 2
    return placement


def fit(excess_us: np.ndarray, input_mb: np.ndarray, output_mb: np.ndarray) -> tuple[float, float]:
    """(extra us per input MB, extra us per output MB) >= 0 fitting float[S] `excess_us` (each stage's measured
    run less its simulated cost) as their sum times the stages' float[S] MB read and made, least squares; (0, 0)
    without stages."""
    from scipy.optimize import nnls

    if len(excess_us) == 0:
        return 0.0, 0.0
    a = np.stack([np.asarray(input_mb, dtype=np.float64), np.asarray(output_mb, dtype=np.float64)], axis=1)
    coef = nnls(a, np.asarray(excess_us, dtype=np.float64))[0]
    return float(coef[0]), float(coef[1])


def measure(runner: Any, chunks: int = CHUNKS, steps: int = STEPS, warmup: int = 2) -> Boundary:
    """The Boundary of `runner`'s graph on its process rig (placeto.evaluate.HardwareRunner with a rig of at least
    2 workers and rig costs: the units' costs already scaled to the rig); see the module docstring."""
    from placeto.rig_gantt import timed_steps
    from simulator.errors import InputError
    from simulator.staged import run_cost, stage_graph, stage_inputs, stage_outputs

    if runner.rig is None or runner.rig.n_devices < 2 or runner.rig_costs is None:
        raise InputError("values crossing stages are measured between two workers of a process rig")
    graph, costs, holders = runner.graph, runner.rig_costs, runner.holders
    base = runner.order(np.zeros(graph.n_nodes, dtype=np.int32))
    placement = chunked(graph.cost_for(runner.cluster.kinds[0]), base, holders, chunks)
    sg = stage_graph(graph, placement, runner.cluster, runner.order(placement), costs, holders)
    n_in, in_bytes = stage_inputs(graph, sg.stage_of, len(sg.runs))
    out_bytes = stage_outputs(graph, sg.stage_of, len(sg.runs))
    charged = run_cost(costs, sg.work, n_in, in_bytes, out_bytes)
    taken = [{d: [(e.end_ns - e.start_ns) / 1e3 for e in evs if e.kind == "run"] for d, evs in events.items()}
             for _, _, events in timed_steps(runner, placement, steps, warmup)]
    stages, runs = [], []
    for d in (0, 1):
        ours = [s for s in range(len(sg.runs)) if sg.placement[s] == d and not sg.holder[s]]
        each = [step.get(d, []) for step in taken]
        if any(len(ran) != len(ours) for ran in each):  # not the stages simulated: nothing to fit on this worker
            continue
        stages += ours
        runs += np.median(np.asarray(each), axis=0).tolist()
    s = np.asarray(stages, dtype=np.int64)
    extra_in, extra_out = fit(np.asarray(runs) - charged[s], in_bytes[s] / 1e6, out_bytes[s] / 1e6)
    return Boundary(extra_in, extra_out, len(stages))
