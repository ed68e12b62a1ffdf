"""Measures the process rig's staged-simulation costs on its workers directly.

The costs are a `simulator.engine.staged.RigCosts`, the rig a `simulator.hardware.rig.pool.ProcessRig`. Instead
of fitting a per-op model to synthetic-kernel probes (simulator.measure.calibrate), each cost the staged
simulation charges is timed as the rig pays it, from the workers' own events (`simulator.hardware.rig.worker.Event`,
`perf_counter_ns`, one clock for all processes) and the parent's round trips:

* step_us: the parent's round trip of a chain of `CHAIN` trivial stages (fn(token, x: f32[16]) -> (token, x + 1))
  on every worker (every worker asked at once, all replies back) minus the longest worker's summed events: the
  request, the replies and the worker's loop (`launch_and_step`, which also gives the trivial stage's own time);
* every other field but `contention`: fitted to the events of placements of a real training step
  (simulator.measure.rig_workload), since a real stage and a real transfer cost the worker more than trivial ones
  do. `contention` is the user's graph's own, measured when it is run
  (simulator.measure.rig_step.graph_contention).

Each plan runs `repeats` steps after one warm-up (compiling). Needs at least 2 workers for transfers (with one,
only launch_us and step_us are measured).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from simulator.engine.staged import RigCosts
from simulator.hardware.rig.worker import Run
from simulator.measure import cache
from simulator.measure.rig_workload import VERSION, counts, fit_events, measure
from simulator.model.io import atomic_write_bytes
from simulator.model.limits import number

CHAIN = 8  # trivial stages per worker in the launch plan
MAX_RIG_US = 1e7  # a cached rig cost (per stage, value, event or 10^6 bytes), microseconds: 10 s. Measured ones are
#   tens to thousands; within it, what the rig charges a stage of 10^4 inputs and 10 GB stays below MAX_COST_US
#   (simulator.model.limits), and an entry beyond it is damage, not a slow machine
MAX_CONTENTION = 100.0  # a cached contention: a stage running 100 times longer beside another device's


def _export(fn, *avals) -> bytes:
    import jax

    return bytes(jax.export.export(jax.jit(fn))(*avals).serialize())


def _stage_blob(n: int) -> bytes:
    """fn(token, x: f32[n]) -> (token, x + 1)."""
    import jax
    import jax.numpy as jnp

    def stage(token, x):
        return token, x + 1.0

    return _export(stage, jax.ShapeDtypeStruct((), jnp.int8), jax.ShapeDtypeStruct((n,), jnp.float32))


def _runs(rig: Any, plan: int, workers: list[int], repeats: int) -> tuple[list[float], list[dict]]:
    """Runs `repeats` steps of `plan` on `workers` after one warm-up.

    Returns:
      (the parent's round trips in us, per step {worker: events}).
    """
    import time

    rig.call_all({d: ("run", plan) for d in workers})
    trips, events = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        ev = rig.call_all({d: ("run", plan) for d in workers})
        trips.append((time.perf_counter_ns() - t0) / 1e3)
        events.append(ev)
    return trips, events


def launch_and_step(rig: Any, repeats: int = 30) -> tuple[float, float]:
    """(launch_us, step_us) on every worker of `rig` (see the module docstring)."""
    workers = list(range(rig.n_devices))
    stage, plan, x = rig.new_id(), rig.new_id(), rig.new_id()
    ids = [rig.new_id() for _ in range(CHAIN)]
    rig.call_all({d: ("load", [(stage, _stage_blob(16))]) for d in workers})
    rig.call_all({d: ("put", [(x, np.zeros(16, np.float32))]) for d in workers})
    program = tuple(Run(stage, k, ((x,) + tuple(ids))[k:k + 1], (ids[k],)) for k in range(CHAIN))
    rig.call_all({d: ("plan", plan, program, None, ()) for d in workers})
    try:
        trips, events = _runs(rig, plan, workers, repeats)
    finally:
        rig.call_all({d: ("free", plan) for d in workers})
        rig.call_all({d: ("drop", (x,)) for d in workers})
    runs = [(e.end_ns - e.start_ns) / 1e3 for step in events for ev in step.values() for e in ev]
    busy = [max((ev[-1].end_ns - ev[0].start_ns) / 1e3 for ev in step.values()) for step in events]
    return float(np.median(runs)), float(np.median(np.asarray(trips) - np.asarray(busy)))


def rig_costs(rig: Any, repeats: int = 30) -> tuple[RigCosts, dict]:
    """The RigCosts measured on `rig`, and the raw figures.

    step_us from `launch_and_step`, the rest fitted to the events of placements of a real training step
    (simulator.measure.rig_workload; with one worker, only the trivial launch).

    Returns:
      (RigCosts, {"launch_us", "step_us" of the trivial chain, "events": how many of each kind the fit used}).
    """
    launch, step = launch_and_step(rig, repeats)
    raw: dict = {"launch_us": launch, "step_us": step}
    if rig.n_devices < 2:
        return RigCosts(launch_us=launch, step_us=max(step, 0.0)), raw
    steps = measure(rig, repeats=max(3, repeats // 3), launch_us=launch, step_us=step)
    raw["events"] = counts(steps)
    return fit_events(steps, step), raw


def cached_rig_costs(rig: Any, devices: Sequence[Any], repeats: int = 30,
                     progress: Callable[[str], None] = print) -> RigCosts:
    """The process rig's RigCosts over `devices`: cached, or measured now.

    simulator.engine.staged.RigCosts; the cache is simulator.measure.cache.rig_costs_path, a miss timed on the rig
    now (`rig_costs`, a few seconds) and cached. A damaged entry (`read_rig_costs` refuses it: not JSON, not an
    object of RigCosts' fields, or a field out of range) is named in one warning on stderr and measured again,
    replacing it; one that cannot be written is a warning too.
    """
    path = cache.rig_costs_path(devices, VERSION)
    return cache.cached(path, read_rig_costs, lambda: rig_costs(rig, repeats)[0],
                   lambda costs: atomic_write_bytes(path, json.dumps(dataclasses.asdict(costs), indent=1).encode()),
                   f"rig costs: {path} (cached; delete it to measure again)",
                   f"measuring the process rig's stage launch and transfer costs (cached afterwards in {path}) ...",
                   "damaged rig costs cache entry", "the rig costs", progress)


def read_rig_costs(path: Path) -> RigCosts:
    """The RigCosts cached in `path`, checked.

    Raises:
      ValueError: (UnicodeDecodeError, JSONDecodeError, InputError among them) the file is not UTF-8 JSON, not an
        object of exactly RigCosts' fields, or a field is not a number in [0, MAX_RIG_US] microseconds
        ([0, MAX_CONTENTION] for contention), naming the field.
      OSError: it cannot be read.
    """
    fields = [f.name for f in dataclasses.fields(RigCosts)]
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or sorted(data) != sorted(fields):
        raise ValueError(f"expected an object of the fields {', '.join(fields)}")
    return RigCosts(**{k: number(v, f"field {k!r}", 0.0, MAX_CONTENTION if k == "contention" else MAX_RIG_US,
                                 "" if k == "contention" else "us") for k, v in data.items()})
