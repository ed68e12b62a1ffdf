"""A placement's measured step on the process rig; graph contention.

`measured_step(runner, placement)` runs the placement's plan on the runner's process rig
(simulator.hardware.rig.pool) `steps` times after a warm-up and keeps the step of median wall-clock time: every
worker's events (stage runs, sends into shared memory, receives: `simulator.hardware.rig.worker.Event`, in
`time.perf_counter_ns()`, one clock for all processes of a Linux machine), placed on the parent's time axis (0:
the parent asks the workers to start). `simulator.plots.gantt_measured` draws it under the simulator's schedule
of the same placement on the same cluster (one row of compute and one of transfers per device in both;
milliseconds), so where the simulator and the machine disagree shows.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from simulator.model.errors import InputError




class MeasuredStep(NamedTuple):
    """One measured step on the process rig.

    Times in nanoseconds since the parent started it.
    """

    wall_ns: int  # the parent's step time: its request to every worker until every worker answered
    events: dict  # worker -> list of (kind, task, start_ns, end_ns), relative to the step's start
    steps_ns: tuple[int, ...]  # every timed step's wall time (this one is their median)


def timed_steps(runner: Any, placement: np.ndarray, steps: int = 5, warmup: int = 2) -> list[tuple[int, int, dict]]:
    """Times `steps` steps of `placement` on `runner`'s process rig.

    `runner` is a simulator.hardware.runner.HardwareRunner with a rig; the placement's plan is closed after.

    Returns:
      [(wall ns, start ns, {worker: [simulator.hardware.rig.worker.Event]})], one per timed step.
    """
    plan = runner.runnable(placement)
    try:
        for _ in range(warmup):
            plan.run_step()
        taken = []
        for _ in range(steps):
            t0 = time.perf_counter_ns()
            plan.run_step()
            taken.append((time.perf_counter_ns() - t0, t0, plan.events))
    finally:
        plan.close()
    return taken


def measured_step(runner: Any, placement: np.ndarray, steps: int = 5, warmup: int = 2) -> MeasuredStep:
    """Runs `placement` on the rig; keeps the step of median wall time.

    `runner` is a simulator.hardware.runner.HardwareRunner with a process rig; the step keeps its events.

    Raises:
      InputError: the runner has no process rig.
    """
    if runner.rig is None:
        raise InputError("a measured Gantt chart needs the stage times of each device: run on --rig processes")
    taken = timed_steps(runner, placement, steps, warmup)
    wall, t0, events = sorted(taken, key=lambda x: x[0])[len(taken) // 2]
    return MeasuredStep(wall, {d: [(e.kind, e.label, e.start_ns - t0, e.end_ns - t0) for e in evs]
                               for d, evs in events.items()}, tuple(x[0] for x in taken))


class Contention(NamedTuple):
    """How much the graph's work slows while another worker runs it too.

    Measured by `graph_contention`.
    """

    factor: float  # together_us / alone_us - 1: RigCosts.contention for this graph
    alone_us: float  # median stage time of the whole step on worker 0, the other workers idle
    together_us: float  # median stage time of the same, while worker 1 runs the whole step at the same time


def graph_contention(runner: Any, steps: int = 5, warmup: int = 2) -> Contention:
    """How much the graph's step slows on one core while another runs it.

    The whole step as one stage on worker 0, run alone and at the same time as the whole step on worker 1 (shared
    caches, memory bandwidth). A measurement of the graph on the rig, as the step's scaling in
    HardwareRunner.with_rig_costs is: no placement of it is run. Alone and together steps alternate (`steps` of
    each, after `warmup` together steps, which also compile); stage times are the workers' own "run" events (no
    round trip).

    Raises:
      InputError: the runner has no process rig of at least two workers.
    """
    if runner.rig is None or runner.rig.n_devices < 2:
        raise InputError("contention is measured between two workers of a process rig")
    n = runner.graph.n_nodes
    plans = [runner.runnable(np.full(n, d, dtype=np.int32)) for d in (0, 1)]
    rig = runner.rig

    def run(workers: tuple[int, ...]) -> dict:
        events = rig.call_all({d: ("run", plans[d].id) for d in workers})
        return {d: sum(e.end_ns - e.start_ns for e in evs if e.kind == "run") / 1e3 for d, evs in events.items()}

    try:
        for _ in range(warmup):
            run((0, 1))
        alone, together = [], []
        for _ in range(steps):
            alone.append(run((0,))[0])
            both = run((0, 1))
            together.append(both[0])
    finally:
        for plan in plans:
            plan.close()
    a, t = float(np.median(alone)), float(np.median(together))
    return Contention(max(0.0, t / a - 1.0) if a > 0 else 0.0, a, t)


