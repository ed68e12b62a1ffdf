"""Wall-clock timing of placed steps on real devices.

`time_plan` runs the step of a `simulator.hardware.dispatch.Plan` `warmup` times (the first compiles every task),
then `repeats` times, blocking on every value produced (`simulator.hardware.dispatch.run_plan`), and reports the
median and the spread of the wall-clock times (`Timing`, microseconds). Python's garbage collector is collected once
before a plan's steps and switched off while they run, warm-up steps too (`gc_paused`, as `timeit` does), so a
collection triggered by the step's allocations (or an earlier step's) does not land inside one placement's time, and
no timed step follows a collection: a pause of the caller's own right before a step leaves the step's core cold
(docs/hardware.md, "Timing").

`time_interleaved` times several plans in rotating rounds, so a change in the machine's load hits every plan
alike, each timed step after SETTLE_STEPS untimed ones of the same plan. Why three: on the process rig, with one
settling step, interleaved placements measured above their consecutive steps timed just after, and with three
they did not (docs/hardware.md, "Timing"): a step after another plan's pays for its footprint (the workers' freed
buffers, caches).

A plan on the process rig (`simulator.hardware.rig.plans.RigPlan`, anything with a `run_step()` that runs one
step and waits for it) is timed the same way: its step is every worker's share run at once, the parent waiting
for all. `reporting_steps(callback)` calls `callback()` after every step `time_calls` runs (outside the timed
part): a progress bar's hook (`placeto.harness.evaluate.step_bar`).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.model.errors import InputError
from simulator.hardware.dispatch import Plan, run_plan


class Timing(NamedTuple):
    """Wall-clock step times after warm-up, microseconds."""

    median_us: float
    q25_us: float
    q75_us: float
    min_us: float
    max_us: float
    times_us: np.ndarray  # float64[R] every timed run


def time_plan(plan: Plan, repeats: int = 5, warmup: int = 2, threads: bool | None = None) -> Timing:
    """Times `repeats` steps of `plan` after `warmup` untimed ones.

    The first step compiles every task. Runs the plan with `run_plan`, or with its own `run_step` (a process rig's
    plan: `threads` does not apply).

    Returns:
      The Timing of the timed steps.

    Raises:
      InputError: repeats < 1.
    """
    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    step = getattr(plan, "run_step", None) or (lambda: run_plan(plan, threads=threads))
    return timing_of(time_calls(step, repeats, warmup))


def about(seconds: float) -> str:
    """An estimated duration as a user reads it: "about 40 s", "about 2.3 min"."""
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.1f} min"


_ON_STEP: list[Callable[[], None]] = []  # reporting_steps' callbacks


@contextlib.contextmanager
def reporting_steps(callback: Callable[[], None]):
    """Runs `callback()` after every call `time_calls` makes, untimed.

    Inside the block; warm-up calls included.
    """
    _ON_STEP.append(callback)
    try:
        yield
    finally:
        _ON_STEP.remove(callback)


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    """Microseconds of `repeats` calls of `fn` after `warmup` untimed ones.

    The calls run back to back; `fn` blocks until its work is done. The garbage collector runs once before the first
    call and is paused for all of them (`gc_paused`).
    """
    times = []
    with gc_paused():
        for _ in range(warmup):
            fn()
            _stepped()
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
            _stepped()
    return times


def _stepped() -> None:
    for callback in _ON_STEP:
        callback()


SETTLE_STEPS = 3  # untimed steps of a plan before each of its timed steps in `time_interleaved`'s rounds


def time_interleaved(plans: Sequence[Plan], repeats: int, warmup: int = 2, threads: bool | None = None,
                     settle: int = SETTLE_STEPS) -> list[list[float]]:
    """Step times (us) of every plan, `repeats` each, in interleaved rounds.

    After `warmup` steps of each (the first compiles), rounds of one timed step per plan, round r starting at plan
    r mod P, so a change in the machine's load hits every plan alike and no plan always follows the same one. Each
    timed step follows `settle` untimed steps of the same plan, so it is timed as a training loop runs it, back to
    back, not charged for what the previous plan's steps left behind. On the process rig one settling step is not
    enough (the module docstring).

    Raises:
      InputError: settle < 1.
    """
    if settle < 1:
        raise InputError(f"settle must be >= 1 untimed step, got {settle}")
    warm_plans(plans, warmup, threads)
    return time_rounds(plans, repeats, threads, settle)


def warm_plans(plans: Sequence[Plan], warmup: int = 2, threads: bool | None = None) -> None:
    """The warm-up of `time_interleaved`: untimed steps of every plan.

    `max(1, warmup)` untimed steps of each plan (the first compiles), then one timed and discarded.
    """
    for plan in plans:
        time_plan(plan, repeats=1, warmup=max(1, warmup), threads=threads)


def time_rounds(plans: Sequence[Plan], repeats: int, threads: bool | None = None,
                settle: int = SETTLE_STEPS) -> list[list[float]]:
    """The timed rounds of `time_interleaved`, the plans warmed already.

    Step times (us), `repeats` of every plan; the plans are warmed by `warm_plans`.

    Raises:
      InputError: settle < 1.
    """
    if settle < 1:
        raise InputError(f"settle must be >= 1 untimed step, got {settle}")
    times: list[list[float]] = [[] for _ in plans]
    for r in range(repeats):
        for i in np.roll(np.arange(len(plans)), -r):
            times[i].append(time_plan(plans[i], repeats=1, warmup=settle, threads=threads).median_us)
    return times


def interleaved_steps(n_plans: int, repeats: int, warmup: int = 2, settle: int = SETTLE_STEPS) -> int:
    """How many steps `time_interleaved` runs, untimed ones included.

    For `time_interleaved(plans, repeats, warmup, settle=settle)` with `n_plans` plans.
    """
    return n_plans * (max(1, warmup) + 1) + (settle + 1) * n_plans * repeats


@contextlib.contextmanager
def gc_paused():
    """Collects garbage, then keeps the collector off inside the block.

    The collector is restored after, as it was.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def timing_of(times_us: Sequence[float]) -> Timing:
    """Timing summary of step times (microseconds)."""
    t = np.asarray(times_us, dtype=np.float64)
    q25, q75 = np.percentile(t, [25, 75])
    return Timing(float(np.median(t)), float(q25), float(q75), float(t.min()), float(t.max()), t)
