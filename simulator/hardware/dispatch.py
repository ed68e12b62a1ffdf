"""The runtime that dispatches one step of a placed graph's Plan.

A placed graph becomes a `Plan` of `Task`s in dispatch order (a topological order of the units: nodes, or groups
of a grouped graph); `simulator.hardware.plans` builds it (from units lowered by `simulator.tracing.lowering`, or
the synthetic kernels of `simulator.hardware.synthetic`), and `simulator.hardware.timing` times its steps. A task
is one jitted function fn(token, *inputs) -> (token, *outputs) committed to its device: one unit, or a stage (a
device's consecutive units as one computation).

A tensor moves only when a consumer sits on another device: one `jax.device_put` per (producer task, receiving
device) carrying every value consumers there need, issued right after the producer is dispatched. Dispatch is
asynchronous and, for staged plans, from the calling thread (`run_plan(threads=None)`); per-unit plans are
dispatched by one host thread per device (which waits on an Event for inputs from other devices), as the
calibration probes are measured. Donating works on the CPU client too (jax 0.10: the buffer is taken over, no
warning when an output can reuse it; "not usable" warnings, where none can, are silenced: the buffer is still
freed early). One block on every value at the end of the step.

Three facts about JAX's CPU client (jax 0.10) shape this:

* the host "devices" of `--xla_force_host_platform_device_count` are labels over one shared thread pool:
  independent executions overlap whatever their device. So every task takes and returns its device's *token*
  (an int8 scalar) and cannot start before its device's previous task has finished, as the simulator assumes;
* a computation of under 1000 flops runs inline in the dispatching thread, which first waits for its inputs; one
  scalar task (a gradient-norm clip) would stall every device's dispatch. The token is therefore made by a 16x16
  matmul (`simulator.hardware.plans.compile_task`), so no task is "cheap" and all are dispatched asynchronously
  (about 1 us of work each);
* `jax.device_put` between CPU devices costs the calling thread tens of microseconds of host time whatever the
  size (the copy itself is fast; docs/hardware.md), so transfers are batched per receiving device.

With XLA's intra-op threading switched off (`SERIAL_CPU_FLAGS`, set by `ensure_host_devices`, both in
`simulator.hardware.devices`) a task uses one core, so D host devices can behave like D single-core devices when
D <= free cores; with more devices than free cores they share them and the measured times exceed the
simulator's (`simulator.measure.concurrency.measure_concurrency` says how concurrent the devices really are).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

if TYPE_CHECKING:  # this module must not import jax at import time (see simulator.hardware.devices)
    from simulator.model.graph import Source

Key = tuple[Any, int]  # a value on a device: (node output `Source`, or another name, device index)


class Task(NamedTuple):
    """One dispatch: a placed unit, or a stage of one device's units.

    fn(token, *inputs) -> (token, *outputs), jitted onto `device`; None if the unit only holds resident values
    (inputs, parameters). Stages are built by `simulator.hardware.plans`.
    """

    unit: int  # node (or group) index in the placed graph; a stage's first unit
    device: int  # index into Plan.devices
    fn: Callable | None
    inputs: tuple[Source, ...]  # values read, all on `device` by the time the task is dispatched
    outputs: tuple[Source, ...]  # values fn returns, in order
    sends: tuple[tuple[int, tuple[Source, ...]], ...]  # (device, values this unit owns that consumers there need)
    units: tuple[int, ...] = ()  # a stage's units in execution order (empty: the task is the single `unit`)
    donated: tuple[Source, ...] = ()  # inputs whose buffers fn takes over (donate_argnums): gone from env after


class Const(NamedTuple):
    """A step output that is a literal, not a computed value."""

    value: Any


class Plan(NamedTuple):
    """Everything needed to run one step of a placed graph."""

    tasks: tuple[Task, ...]  # in dispatch order (a topological order of the units)
    resident: dict  # Key -> array placed before the step: inputs, parameters, constants, trip counts
    outputs: tuple[Any, ...]  # flat step outputs: a Key, or a Const
    out_tree: Any  # pytree structure of the step outputs (None: a flat list)
    devices: tuple[Any, ...]  # the jax devices, by device index
    staged: bool = False  # tasks are stages (plans.units_plan(stages=True)): run_plan dispatches from one thread


def run_plan(plan: Plan, block: bool = True, threads: bool | None = None) -> tuple[list, dict]:
    """Dispatches one step of `plan`.

    Args:
      plan: the step to run.
      block: wait for every value before returning.
      threads: dispatch each device's tasks from its own host thread (`_dispatch_threaded`), else all from the
        calling thread in plan order. None: one thread for a staged plan (a few dispatches per step), one per device
        for a per-unit plan (as the calibration probes are measured).

    Returns:
      (flat outputs, every value by Key but the donated ones).
    """
    import jax

    threads = (not plan.staged) if threads is None else threads
    env = dict(plan.resident)
    tokens = [env[("token", d)] for d in range(len(plan.devices))]
    with _donation_quiet(plan):
        if threads and len(plan.devices) > 1:
            _dispatch_threaded(plan, env, tokens)
        else:
            for t in plan.tasks:
                _dispatch(t, env, tokens, plan.devices)
    outputs = [k.value if isinstance(k, Const) else env[k] for k in plan.outputs]
    if block:
        jax.block_until_ready((list(env.values()), tokens))
    return outputs, env


def _donation_quiet(plan: Plan):
    """Silences JAX's unusable-donation warning for `plan`.

    "Some donated buffers were not usable" means a donated input no output can reuse; its buffer is still freed
    early, which is the point.
    """
    return _quiet_donations() if any(t.donated for t in plan.tasks) else contextlib.nullcontext()


@contextlib.contextmanager
def _quiet_donations():
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable", category=UserWarning)
        yield


def _dispatch(t: Task, env: dict, tokens: list, devices: Sequence, wait: Callable | None = None) -> None:
    """Launches task `t`, then its sends.

    Its inputs are read from `env`, each after `wait(key)` when `wait` is given.
    """
    import jax

    if t.fn is not None:
        args = []
        for s in t.inputs:
            if wait is not None:
                wait((s, t.device))
            args.append(env[(s, t.device)])
        tokens[t.device], *outs = t.fn(tokens[t.device], *args)
        for s in t.donated:  # their buffers now belong to the outputs
            del env[(s, t.device)]
        for s, x in zip(t.outputs, outs):
            env[(s, t.device)] = x
    for d, values in t.sends:  # one device_put per receiving device: its Python overhead dominates small copies
        copies = jax.device_put([env[(s, t.device)] for s in values], devices[d])
        env.update(((s, d), x) for s, x in zip(values, copies))


def _dispatch_threaded(plan: Plan, env: dict, tokens: list) -> None:
    """Dispatches with one host thread per device.

    Each thread runs its device's tasks in plan order, waiting for each input from another device to have been
    launched. A device's dispatch then never waits behind another device's (a `device_put` costs its sender tens of
    microseconds of host time); it was as fast as dispatching from one thread or faster, single-device placements
    included.
    """
    import threading

    events: dict = {}
    for t in plan.tasks:
        for d, values in t.sends:
            events.update(((s, d), threading.Event()) for s in values)
    errors: list[BaseException] = []

    def wait(key):
        event = events.get(key)
        if event is not None and not event.wait(timeout=600):
            raise RuntimeError(f"timed out waiting for {key}")

    def worker(d: int) -> None:
        try:
            for t in plan.tasks:
                if t.device == d:
                    _dispatch(t, env, tokens, plan.devices, wait)
                    for target, values in t.sends:
                        for s in values:
                            events[(s, target)].set()
        except BaseException as e:  # noqa: BLE001 -- re-raised in the calling thread
            errors.append(e)
            for event in events.values():
                event.set()

    workers = [threading.Thread(target=worker, args=(d,), daemon=True) for d in range(len(plan.devices))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


def run_outputs(plan: Plan) -> Any:
    """The step's outputs (pytree) after one run."""
    import jax

    flat, _ = run_plan(plan)
    if plan.out_tree is None:
        return flat
    return jax.tree_util.tree_unflatten(plan.out_tree, flat[:plan.out_tree.num_leaves])  # then in-place updates
