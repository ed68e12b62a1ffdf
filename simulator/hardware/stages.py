"""How many stages a placement runs as, and what they cost to compile, before anything runs.

A staged plan (simulator.hardware.plans.units_plan) makes one jitted task of each run of consecutive units on one
device in dispatch order, and every distinct stage compiles in its first step: on the process rig each worker
deserializes and compiles its own, one after the other. A placement that switches device at almost every unit
(round-robin over 2 devices of cifar10_000's 490 groups: 331 stages) spends minutes compiling before its first
step, however fast the step then is. `check_stages` refuses such placements up front, in one line, with the
estimate, so that `eval --hardware` does not run for many minutes without saying why.

The estimate (`compile_seconds`) is this 2-core machine's, measured on cifar10_000 (5,459 ops, 2 worker
processes, load about 3): the first step took 16.3 s as 1 stage, 23.0 s as 22 stages and 119.3 s as 331, i.e.
about COMPILE_S_PER_OP s per op plus COMPILE_S_PER_STAGE s per stage; later steps add about
STEP_S_PER_STAGE s per stage (1.07 s, 1.88 s, 3.28 s a step). An order of magnitude, not a promise: another
machine, another load, another graph differ.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np

from simulator.engine.staged import default_holders, stage_runs
from simulator.hardware.options import MAX_STAGES  # noqa: F401 (the default limit, re-exported)
from simulator.hardware.runner import dispatch_order, staged_order
from simulator.hardware.timing import about
from simulator.model.cluster import Cluster, cluster_preset
from simulator.model.errors import InputError
from simulator.model.graph import Graph

COMPILE_S_PER_OP = 0.003  # s: the first step's compilation, per op of the program (all stages together)
COMPILE_S_PER_STAGE = 0.31  # s: the first step's compilation, per stage beyond the first (2 workers at once)
STEP_S_PER_STAGE = 0.007  # s: each later step, per stage (its dispatch, its receives and sends)


class StageCount(NamedTuple):
    """A placement's stages and what they are estimated to cost here."""

    stages: int  # jitted tasks of its plan (units that only hold values dispatch nothing: not counted)
    compile_s: float  # estimated seconds its first step spends compiling
    steps_s: float  # estimated seconds of its other steps' stage overheads (warm-up and timed)


def count_stages(order: Sequence[int], placement: Sequence[int], holders: Sequence[bool]) -> int:
    """The jitted stages of a staged plan: runs of consecutive non-holder units on one device in `order`.

    simulator.engine.staged.stage_runs' runs (as simulator.hardware.plans.units_plan cuts them), less the holders'
    (units that only hold values dispatch nothing).
    """
    return len(stage_runs(placement, order, holders)) - int(np.count_nonzero(holders))


def planned_stages(graph: Graph, placement: Sequence[int], n_devices: int, rig: str) -> int:
    """The stages `placement` of `graph` will run as, estimated before the devices are measured.

    Ordered as simulator.hardware.runner.HardwareRunner orders them (simulated start order; on the threads rig
    regrouped by `staged_order`), simulated with a cost kind the graph has (the measured costs the run uses come
    later, so the order, and the count, may differ a little; a graph with no costs at all: its topological order).
    Holders: simulator.engine.staged.default_holders.
    """
    kind = next((k for k in ("cpu", *graph.kinds) if graph.has_costs(k)), None)
    p = np.asarray(placement, dtype=np.int32)
    if kind is None:  # no costs to simulate with (they are measured later): the topological order stands in
        order = list(graph.topo_order)
    else:
        base = cluster_preset("placeto-k80", n_devices)
        cluster = dataclasses.replace(base, devices=tuple(dataclasses.replace(d, kind=kind) for d in base.devices))
        order = dispatch_order(graph, p, cluster)
    if rig == "threads":
        order = staged_order(graph, p, order)
    return count_stages(order, p, default_holders(graph))


def estimate(graph: Graph, stages: int, steps: int) -> StageCount:
    """What `stages` stages of `graph` cost here (module docstring), over `steps` steps after the first."""
    ops = int(graph.meta.get("ops") or graph.n_nodes)
    return StageCount(stages, COMPILE_S_PER_OP * ops + COMPILE_S_PER_STAGE * max(stages - 1, 0),
                      STEP_S_PER_STAGE * stages * steps)


def check_stages(graph: Graph, placements: Sequence[tuple[str, np.ndarray]], n_devices: int, rig: str,
                 max_stages: int, steps: int) -> list[StageCount]:
    """Every placement's StageCount; refuse, before anything runs, one with more than `max_stages` stages.

    Args:
      placements: (file, int[N] placement) each.
      steps: steps each placement runs after its first (warm-up and timed, `eval`'s rounds).

    Raises:
      InputError: one line naming the first placement over the limit, its stage count, the estimate, and what to
        do (a placement with fewer device switches, or --max-stages to run it anyway).
    """
    counts = [estimate(graph, planned_stages(graph, p, n_devices, rig), steps) for _, p in placements]
    for (path, _), c in zip(placements, counts):
        if c.stages > max_stages:
            raise InputError(f"{path}: about {c.stages} stages on {n_devices} devices (a jitted stage per run of "
                             f"consecutive units on one device), each compiled before the first step: "
                             f"{about(c.compile_s + c.steps_s)} here, over --max-stages {max_stages}; use a "
                             f"placement that switches devices less often, or pass --max-stages {c.stages} to "
                             f"run it anyway")
    return counts
