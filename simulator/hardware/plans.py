"""Plans of placed programs: units compiled into tasks.

Builds the `simulator.hardware.dispatch.Plan` of a placement. A task is one jitted function committed to its
device (`compile_task`: `out_shardings=SingleDeviceSharding(device)`, taking and returning the device's token),
its inputs `device_put` there, so XLA runs it there. `finish_plan` adds the tokens and each task's sends (one per
producer task and receiving device) and checks the order is topological. Plans of:

* traced programs (`program_plan`, and exported ones through `units_plan`), lowered to units by
  `simulator.tracing.lowering`: by default (`stages=True`) each device's *consecutive* units in dispatch order are
  ONE task, a stage: the composition of the unit bodies in order, one XLA computation, compiled once per equal
  stage (cached by the units' keys, their wiring, the donated inputs and the device). A stage returns only what
  another stage or the step's outputs read, and donates (`donate_argnums`) each input that is a transient of this
  step read by no later stage there, no step output and no send; resident values (parameters, optimizer state,
  the batch, closed-over constants: committed to their device once, when the plan is built) are never donated,
  since the next step reads them again. Units that only hold values dispatch nothing and come first.
  `simulator.hardware.runner.staged_order` orders the units so a device's units stay together where dependencies
  allow; all on one device, the step is one dispatch. `stages=False` gives one task per unit (what
  `simulator.measure.calibrate.profile_plan` times unit by unit, and `simulator.tracing.export.bundle_plan` still
  builds);
* cost-only graphs (`simulator.hardware.synthetic.synthetic_plan`, with this module's `compile_task`,
  `finish_plan`, `placement_array` and `check_order`): a task per node, a `lax.fori_loop` of small matmuls whose
  trip count is set so that it takes the node's cost on its device (`KernelModel`, measured by
  `simulator.measure.calibrate.calibrate_kernel`), then writes outputs of the recorded sizes.

Why stages: every dispatched task costs the host time, so a step dispatched unit by unit is slower than staged,
by far on a GPU (experiments/results/benchmarks/gpu_check_h200.md; on the CPU: bench_harness.md). A stage's
outputs exist only once the whole stage has run, so another device waiting for an early unit of a long stage
waits longer than the simulator (which schedules units) assumes.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from simulator.hardware.dispatch import Const, Key, Plan, Task
from simulator.model.errors import InputError
from simulator.model.graph import Source
from simulator.tracing.lowering import UnitProgram, unit_order, unit_programs

if TYPE_CHECKING:  # this module must not import jax at import time (see simulator.hardware.devices)
    from simulator.tracing.trace import Traced

_FUNCTIONS: "weakref.WeakKeyDictionary[Traced, dict]" = weakref.WeakKeyDictionary()  # jitted units per trace
DONATE = True  # donate transient stage inputs; safe on CPU too (jax 0.10: buffers reused, no warning)
MATERIALISED_PLATFORMS = ("cpu",)  # where a stage also returns every value its units make (see `materialises`)


def program_plan(traced: Traced, values: Sequence[Any], placement: Sequence[int], devices: Sequence,
                 op_to_group: np.ndarray | None = None, order: Sequence[int] | None = None,
                 stages: bool = True) -> Plan:
    """The plan of a traced program placed unit by unit (ops, or groups).

    Args:
      traced: the traced program.
      values: per op, the array of input/param/const nodes (see `leaf_values`).
      placement: int[U] device index per unit.
      devices: the JAX devices, by device index.
      op_to_group: int32[N_ops] group of each op (None: the units are the ops).
      order: dispatch order of the units (default: topological, ties by unit index).
      stages: each device's consecutive units (in `order`) run as one jitted stage (see `units_plan`); False: one
        task per unit.
    """
    units = unit_programs(traced, op_to_group, len(placement) if op_to_group is not None else None)
    what = "groups" if op_to_group is not None else "nodes"
    outputs = tuple(traced.outputs) + tuple(a for _, a in traced.updates)  # Static leaves become Consts
    return units_plan(units, values, placement, devices, outputs, traced.out_tree,
                      _FUNCTIONS.setdefault(traced, {}), order, what, stages)


def units_plan(units: Sequence[UnitProgram], values: Sequence[Any], placement: Sequence[int], devices: Sequence,
               outputs: Sequence[Any], out_tree: Any, cache: dict, order: Sequence[int] | None = None,
               what: str = "units", stages: bool = False) -> Plan:
    """The plan of units placed one device each.

    Args:
      units: [U] the lowered units.
      values: per op node, the array it holds (inputs, parameters, constants; None elsewhere).
      placement: int[U] device index per unit.
      devices: the JAX devices, by device index.
      outputs: the step's flat outputs (Sources, or literals with `.val`), the first out_tree.num_leaves of them
        unflattened by `run_outputs`.
      out_tree: their pytree structure (None: a flat list).
      cache: key -> jitted function, shared by every plan of the same program, so each unit (stage) compiles once
        per device.
      order: dispatch order of the units (default: topological).
      what: what the units are, for errors ("nodes", "groups").
      stages: True: the units that only hold values come first (they dispatch nothing), then each run of
        consecutive units (in `order`) on one device is ONE task, the composition of their bodies, with one token
        and transient inputs donated (see the module docstring). False (the default here, so that
        `simulator.tracing.export.bundle_plan`, which `measure_units` profiles, keeps one task per unit): one task
        per unit, as `simulator.measure.calibrate.profile_plan` times them.
    """
    import jax

    place = placement_array(placement, len(units), len(devices), what)
    order = unit_order(units, None if order is None else check_order(order, len(units)))
    unit_of_value = {Source(i, 0): u for u, unit in enumerate(units) for i in unit.values}
    unit_of_value.update((s, u) for u, unit in enumerate(units) for s in unit.outputs)
    flat_out = tuple((a, int(place[unit_of_value[a]])) if isinstance(a, Source) else Const(a.val) for a in outputs)
    resident = {}
    for u in order:
        for i in units[u].values:
            resident[(Source(i, 0), int(place[u]))] = jax.device_put(values[i], devices[int(place[u])])
    if stages:
        holders = [u for u in order if units[u].body is None]
        runs = [[u] for u in holders]
        for u in (u for u in order if units[u].body is not None):
            if len(runs) > len(holders) and place[runs[-1][-1]] == place[u]:
                runs[-1].append(u)
            else:
                runs.append([u])
        tasks = _stages(units, runs, place, devices, resident, {a for a in flat_out if not isinstance(a, Const)},
                        cache)
    else:
        tasks = []
        for u in order:
            unit, dev = units[u], int(place[u])
            fn = None
            if unit.body is not None:
                if (unit.key, dev) not in cache:
                    cache[(unit.key, dev)] = compile_task(unit.body, devices[dev])
                fn = cache[(unit.key, dev)]
            tasks.append(Task(u, dev, fn, unit.inputs, unit.outputs, ()))
    owner = {}
    for k, t in enumerate(tasks):
        for u in t.units or (t.unit,):
            owner.update((Source(i, 0), k) for i in units[u].values)
        owner.update((s, k) for s in t.outputs)
    return finish_plan(tasks, owner, resident, devices, flat_out, out_tree, stages)


def _stages(units: Sequence[UnitProgram], runs: Sequence[Sequence[int]], place: np.ndarray, devices: Sequence,
            resident: dict, step_outputs: set, cache: dict) -> list[Task]:
    """One Task per run of units on one device (a stage).

    `runs` are in dispatch order.

    A stage returns the values its units make that another stage or the step's outputs read. An input is donated
    when it is a transient made this step (not resident: parameters are reused by the next step), read by no
    other stage on that device, not a step output, and not sent on from there (a send may still be copying it).
    Stages are cached by their units' keys, their wiring, the donated inputs and the device, so equal stages
    compile once.
    """
    readers: dict[Key, list[int]] = {}  # (value, device) -> stages reading it there
    for k, run in enumerate(runs):
        for s in dict.fromkeys(s for u in run for s in units[u].inputs):
            readers.setdefault((s, int(place[run[0]])), []).append(k)
    read_on = {}  # value -> devices it is read on
    home = {s: d for s, d in resident if not isinstance(s, str)}  # value -> device index it is made or held on
    home.update((s, int(place[u])) for run in runs for u in run for s in units[u].outputs)
    for s, d in readers:
        read_on.setdefault(s, set()).add(d)
    tasks = []
    for k, run in enumerate(runs):
        dev = int(place[run[0]])
        if units[run[0]].body is None:
            tasks.append(Task(run[0], dev, None, (), (), (), tuple(run)))
            continue
        made: dict = {}  # value -> (position in run, output index)
        inputs: dict = {}  # value -> argument index
        wiring = []
        for j, u in enumerate(run):
            wiring.append(tuple(("made", *made[s]) if s in made else ("in", inputs.setdefault(s, len(inputs)))
                                for s in units[u].inputs))
            made.update((s, (j, m)) for m, s in enumerate(units[u].outputs))
        outputs = tuple(s for s in made if (s, dev) in step_outputs or read_on.get(s, set()) - {dev}
                        or any(r != k for r in readers.get((s, dev), ())))
        extra = tuple(s for s in made if s not in outputs) if materialises(devices[dev]) else ()
        donated = tuple(s for s in inputs if DONATE and (s, dev) not in resident and (s, dev) not in step_outputs
                        and readers[(s, dev)] == [k] and _transient_copy(s, dev, home, read_on, devices))
        key = ("stage", tuple(units[u].key for u in run), tuple(wiring),
               tuple(made[s] for s in outputs + extra), tuple(inputs[s] for s in donated), dev)
        if key not in cache:
            cache[key] = compile_task(_stage_body([units[u].body for u in run], wiring, key[3]), devices[dev],
                                      key[4])
        tasks.append(Task(run[0], dev, cache[key], tuple(inputs), outputs, (), tuple(run), donated))
    return tasks


def materialises(device: Any) -> bool:
    """Whether a stage on `device` returns all its units' values (CPU).

    Elsewhere a stage returns only the values read outside it. A value only some fusion reads may be recomputed
    inside each of its consumers: XLA duplicates a cheap producer into every consumer it can fuse into, and chains
    of them multiply (nmt_004's step on XLA:CPU: docs/hardware.md, "No fusion across units on the CPU"). A returned
    value is computed once and read back, as across a stage boundary: so a unit costs the same in any stage, and its
    cost measured inside the whole step (simulator.measure.graph_profile, method "step", profiled the same way)
    holds in every placement's stages (simulator.engine.staged). Not on GPUs, whose fusion was measured as is.
    """
    return getattr(device, "platform", None) in MATERIALISED_PLATFORMS


def _transient_copy(s: Any, dev: int, home: dict, read_on: dict, devices: Sequence) -> bool:
    """Whether value `s` on device `dev` is this stage's to donate.

    It is when made on `dev` and sent nowhere (a send may still be copying it), or a copy received from another
    *physical* device (device_put to the same device returns the very array: two indices naming one device, as tests
    do, would alias it).
    """
    if home.get(s) == dev:
        return not read_on[s] - {dev}
    return home.get(s) is not None and devices[home[s]] != devices[dev]


def _stage_body(bodies: Sequence[Callable], wiring: Sequence[tuple], outputs: Sequence[tuple[int, int]]) -> Callable:
    """f(*xs) -> outputs: the stage's bodies applied in order.

    bodies[j] takes its arguments from `wiring[j]`: each ("in", i) is xs[i], each ("made", j', m) is output m of an
    earlier body j'. `outputs` lists the (j, m) returned.
    """

    def body(*xs):
        made = []
        for fn, args in zip(bodies, wiring):
            made.append(fn(*[xs[a[1]] if a[0] == "in" else made[a[1]][a[2]] for a in args]))
        return tuple(made[j][m] for j, m in outputs)

    return body


def placement_array(placement: Sequence[int], n_units: int, n_devices: int, what: str) -> np.ndarray:
    """int64[n_units] device index per unit, checked.

    Raises:
      InputError: not one entry per unit (`what` names the units in the error), or an index outside [0, n_devices).
    """
    p = np.asarray(placement, dtype=np.int64).reshape(-1)
    if p.shape != (n_units,):
        raise InputError(f"placement has {p.size} entries but the graph has {n_units} {what}")
    if p.size and (p.min() < 0 or p.max() >= n_devices):
        raise InputError(f"placement uses device {int(p.max() if p.max() >= n_devices else p.min())} but "
                         f"{n_devices} devices are in use")
    return p


def check_order(order: Sequence[int] | None, n_units: int) -> list[int]:
    """The dispatch order as a list of unit indices, checked.

    None gives 0..n_units-1. Whether the order is topological, `finish_plan` checks.

    Raises:
      InputError: the order is not a permutation of the units.
    """
    order = list(range(n_units)) if order is None else [int(x) for x in order]
    if sorted(order) != list(range(n_units)):
        raise InputError("dispatch order is not a permutation of the units")
    return order


def compile_task(body: Callable, device: Any, donate: tuple[int, ...] = ()) -> Callable:
    """jit of fn(token, *xs) -> (token, *body(*xs)) on `device`.

    Every output is committed to `device`; xs[i] for i in `donate` are donated (their buffers may be reused for the
    outputs).

    The new token comes from a 16x16 matmul (8 kflop, about a microsecond) because XLA's CPU client runs a
    computation of under 1000 flops ("cheap") inline in the calling thread, first waiting for its inputs: one
    scalar task would stall the dispatch of every device. With it, every task is dispatched asynchronously.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    def fn(token, *xs):
        t = jnp.full((16, 16), token, jnp.float32)
        return ((token + (t @ t)[0, 0].astype(jnp.int8)), *body(*xs))

    return jax.jit(fn, out_shardings=SingleDeviceSharding(device), donate_argnums=tuple(1 + i for i in donate))


def finish_plan(tasks: list[Task], owner: dict[Source, int], resident: dict, devices: Sequence, outputs: tuple,
                out_tree: Any, staged: bool = False) -> Plan:
    """The Plan of `tasks`, with tokens and sends added.

    Args:
      tasks: in dispatch order, their sends still empty.
      owner: value -> position in `tasks` of the unit that produces it or holds it resident.
      resident: Key -> array; each device's token is added (changed in place).
      devices: the JAX devices, by device index.
      outputs: the step's flat outputs (a Key, or a Const).
      out_tree: their pytree structure (None: a flat list).
      staged: see `Plan.staged`.

    Raises:
      InputError: the order is not topological.
    """
    import jax
    import jax.numpy as jnp

    for d, dev in enumerate(devices):
        resident[("token", d)] = jax.device_put(jnp.zeros((), jnp.int8), dev)
    needed: dict[int, dict[int, dict[Source, None]]] = {}  # task -> receiving device -> values (ordered set)
    for k, t in enumerate(tasks):
        for s in t.inputs:
            if (s, t.device) in resident:
                continue
            src = owner.get(s)
            if src is None or src >= k:
                raise InputError(f"unit {t.unit}: an input comes from a unit dispatched later (the dispatch order "
                                 f"is not topological)")
            if tasks[src].device != t.device:
                needed.setdefault(src, {}).setdefault(t.device, {})[s] = None
    tasks = [t._replace(sends=tuple((d, tuple(values)) for d, values in sorted(needed.get(k, {}).items())))
             for k, t in enumerate(tasks)]
    return Plan(tuple(tasks), resident, outputs, out_tree, tuple(devices), staged)
