"""Executing a placed graph on real JAX devices, and timing one step.

A placed graph becomes a `Plan` of `Task`s in dispatch order (a topological order of the units: nodes, or groups
of a grouped graph). A task is one jitted function committed to its device (`out_shardings=
SingleDeviceSharding(device)`, its inputs `device_put` there), so XLA runs it there:

* traced programs (`program_plan`, and exported ones through `units_plan`): a unit binds its member equations
  in topological order. By default (`stages=True`) each device's *consecutive* units in dispatch order are ONE
  task, a stage: the composition of the unit bodies in order, one XLA computation, compiled once per equal stage
  (cached by the units' keys, their wiring, the donated inputs and the device). A stage returns only what another
  stage or the step's outputs read, and donates (`donate_argnums`) each input that is a transient of this step
  read by no later stage there, no step output and no send; resident values (parameters, optimizer state, the
  batch, closed-over constants: committed to their device once, when the plan is built) are never donated,
  since the next step reads them again. Units that only hold values dispatch nothing and come first.
  `placeto.evaluate.staged_order` orders the units so a device's units stay together where dependencies allow;
  all on one device, the step is one dispatch. `stages=False` gives one task per unit (what
  `simulator.calibrate.profile_plan` times unit by unit, and `simulator.export.bundle_plan` still builds);
* cost-only graphs (`simulator.synthetic_kernels.synthetic_plan`): a task per node, a `lax.fori_loop` of small
  matmuls whose trip count is set so that it takes the node's cost on its device (`KernelModel`, measured by
  `simulator.calibrate.calibrate_kernel`), then writes outputs of the recorded sizes.

Why stages (issue 29): a dispatched task costs the host about 140 us on an H200 (rnnlm_l2, 400 groups: 57 ms
a step dispatched group by group vs 0.93 ms as one `jax.jit` of the step); on this CPU 62 ms vs 31.6 ms
(experiments/bench_harness.py measures the staged plans beside them). A stage's outputs exist
only once the whole stage has run, so another device waiting for an early unit of a long stage waits longer
than the simulator (which schedules units) assumes.

A tensor moves only when a consumer sits on another device: one `jax.device_put` per (producer task, receiving
device) carrying every value consumers there need, issued right after the producer is dispatched. Dispatch is
asynchronous and, for staged plans, from the calling thread (`run_plan(threads=None)`); per-unit plans are
dispatched by one host thread per device (which waits on an Event for inputs from other devices), as the
calibration probes are measured. Donating works on the CPU client too (jax 0.10: the buffer is taken over, no
warning when an output can reuse it; "not usable" warnings, where none can, are silenced: the buffer is still
freed early). One block on every value at the end of the step.

Three facts about JAX's CPU client shape this (measured with jax 0.10 on 2 cores):

* the host "devices" of `--xla_force_host_platform_device_count` are labels over one shared thread pool:
  independent executions overlap whatever their device. So every task takes and returns its device's *token*
  (an int8 scalar) and cannot start before its device's previous task has finished, as the simulator assumes;
* a computation of under 1000 flops runs inline in the dispatching thread, which first waits for its inputs; one
  scalar task (a gradient-norm clip) would stall every device's dispatch. The token is therefore made by a 16x16
  matmul, so no task is "cheap" and all are dispatched asynchronously (about 1 us of work each);
* `jax.device_put` between CPU devices costs 30-90 us of host time in the calling thread whatever the size (the
  copy itself is fast), so transfers are batched per receiving device.

With XLA's intra-op threading switched off (`SERIAL_CPU_FLAGS`, set by `ensure_host_devices`, both in
`simulator.host_devices`) a task uses one core, so D host devices can behave like D single-core devices when
D <= free cores; with more devices than free cores they share them and the measured times exceed the
simulator's (`simulator.calibrate.measure_parallelism` says how concurrent the devices really are).

`time_plan` runs the step `warmup` times (the first compiles every task), then `repeats` times, blocking on every
value produced, and reports the median and the spread of the wall-clock times. Python's garbage collector is
collected before and switched off during each timed step (as `timeit` does), so a collection triggered by the
step's allocations (or an earlier step's) does not land inside one placement's time.
"""

from __future__ import annotations

import contextlib
import gc
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.errors import InputError

if TYPE_CHECKING:  # this module must not import jax at import time (see simulator.host_devices)
    from simulator.trace import Source, Traced

Key = tuple[Any, int]  # a value on a device: (node output `Source`, or another name, device index)
_FUNCTIONS: "weakref.WeakKeyDictionary[Traced, dict]" = weakref.WeakKeyDictionary()  # jitted units per trace


# ---- plans -------------------------------------------------------------------------------------------------
class Task(NamedTuple):
    """One dispatch: a placed unit, or a stage (consecutive units of one device, `units_plan(stages=True)`).
    fn(token, *inputs) -> (token, *outputs), jitted onto `device`; None if the unit only holds resident values
    (inputs, parameters)."""

    unit: int  # node (or group) index in the placed graph; a stage's first unit
    device: int
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
    staged: bool = False  # tasks are stages (units_plan(stages=True)): run_plan dispatches from one thread


class Timing(NamedTuple):
    """Wall-clock step times after warm-up, microseconds."""

    median_us: float
    q25_us: float
    q75_us: float
    min_us: float
    max_us: float
    times_us: np.ndarray  # float64[R] every timed run


def run_plan(plan: Plan, block: bool = True, threads: bool | None = None) -> tuple[list, dict]:
    """Dispatch one step. Returns (flat outputs, every value by Key but the donated ones); with `block`, waits
    for all of them.

    With `threads`, each device's tasks are dispatched by its own host thread (see `_dispatch_threaded`), else
    all from the calling thread in plan order. None: one thread for a staged plan (a few dispatches per step),
    one per device for a per-unit plan (as the calibration probes are measured).
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
    """Silence JAX's "Some donated buffers were not usable" (a donated input no output can reuse: its buffer is
    still freed early, which is the point) while a plan with donations compiles and runs."""
    return _quiet_donations() if any(t.donated for t in plan.tasks) else contextlib.nullcontext()


@contextlib.contextmanager
def _quiet_donations():
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable", category=UserWarning)
        yield


def _dispatch(t: Task, env: dict, tokens: list, devices: Sequence, wait: Callable | None = None) -> None:
    """Launch task `t` (reading its inputs from `env`, after `wait(key)` for each), then its sends."""
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
    """One host thread per device dispatches that device's tasks in plan order, waiting (on an Event) for each
    input from another device to have been launched. Why: a device's dispatch then never waits behind another
    device's (a `device_put` costs its sender tens of microseconds of host time); measured, this was as fast or
    faster than dispatching from one thread, single-device placements included."""
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


def time_plan(plan: Plan, repeats: int = 5, warmup: int = 2, threads: bool | None = None) -> Timing:
    """Time `repeats` steps after `warmup` (the first run compiles every task); see Timing and run_plan."""
    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        run_plan(plan, threads=threads)
    times = []
    for _ in range(repeats):
        with gc_paused():
            t0 = time.perf_counter()
            run_plan(plan, threads=threads)
            times.append((time.perf_counter() - t0) * 1e6)
    return timing_of(times)


def time_interleaved(plans: Sequence[Plan], repeats: int, warmup: int = 2,
                     threads: bool | None = None) -> list[list[float]]:
    """Step times (us) of every plan, `repeats` each: after `warmup` steps of each (the first compiles), rounds of
    one timed step per plan, round r starting at plan r mod P, so a change in the machine's load hits every plan
    alike and no plan always follows the same one; each timed step follows an untimed step of the same plan, so
    what the previous plan's step left behind (buffers to free, busy threads) is not charged to it."""
    for plan in plans:
        time_plan(plan, repeats=1, warmup=max(1, warmup), threads=threads)
    times: list[list[float]] = [[] for _ in plans]
    for r in range(repeats):
        for i in np.roll(np.arange(len(plans)), -r):
            times[i].append(time_plan(plans[i], repeats=1, warmup=1, threads=threads).median_us)
    return times


@contextlib.contextmanager
def gc_paused():
    """Collect garbage, then keep the collector off inside the block (restored after, as it was)."""
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


def _placement_array(placement: Sequence[int], n_units: int, n_devices: int, what: str) -> np.ndarray:
    p = np.asarray(placement, dtype=np.int64).reshape(-1)
    if p.shape != (n_units,):
        raise InputError(f"placement has {p.size} entries but the graph has {n_units} {what}")
    if p.size and (p.min() < 0 or p.max() >= n_devices):
        raise InputError(f"placement uses device {int(p.max() if p.max() >= n_devices else p.min())} but "
                         f"{n_devices} devices are in use")
    return p


def _check_order(order: Sequence[int] | None, n_units: int) -> list[int]:
    order = list(range(n_units)) if order is None else [int(x) for x in order]
    if sorted(order) != list(range(n_units)):
        raise InputError("dispatch order is not a permutation of the units")
    return order


def _compiled(body: Callable, device: Any, donate: tuple[int, ...] = ()) -> Callable:
    """jit of fn(token, *xs) -> (new token, *body(*xs)), every output committed to `device`; xs[i] for i in
    `donate` are donated (their buffers may be reused for the outputs).

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


def _finish(tasks: list[Task], owner: dict[Source, int], resident: dict, devices: Sequence, outputs: tuple,
            out_tree: Any, staged: bool = False) -> Plan:
    """Add device tokens and each task's sends (from its consumers' devices); check the order is topological.

    owner: value -> position in `tasks` of the unit that produces it or holds it resident.
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


# ---- traced programs -----------------------------------------------------------------------------------------
def _binder(eqn: Any) -> Callable[..., list]:
    """f(*operands) -> list of outputs: the equation's primitive bound with its params (as simulator.profile)."""
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = bind_params if isinstance(bind_params, tuple) else ((), bind_params)
    multiple = eqn.primitive.multiple_results

    def apply(*operands):
        with eqn.ctx.manager:
            out = eqn.primitive.bind(*subfuns, *operands, **params)
        return list(out) if multiple else [out]

    return apply


def _unit_body(traced: Traced, members: Sequence[int], inputs: Sequence[Source],
               outputs: Sequence[Source]) -> Callable:
    """f(*inputs) -> outputs: the member equations bound in node (= topological) order."""
    import jax.extend.core as jcore

    from simulator.trace import Source

    steps = [(m, _binder(traced.equations[m]), traced.args[m]) for m in members if traced.equations[m] is not None]

    def body(*xs):
        env = dict(zip(inputs, xs))
        for m, bind, args in steps:
            outs = bind(*[a.val if isinstance(a, jcore.Literal) else env[a] for a in args])
            env.update((Source(m, k), x) for k, x in enumerate(outs))
        return tuple(env[s] for s in outputs)

    return body


def leaf_values(traced: Traced, args: Sequence[Any], seed: int = 0) -> list:
    """[N] the value of every input/param/const node of `traced` (None elsewhere), from the example arguments
    `args` (a tuple of pytrees as traced); ShapeDtypeStruct leaves become random arrays (floats standard normal,
    integers zero, as simulator.profile does)."""
    import jax

    from simulator.profile import _random_operand

    flat, tree = jax.tree_util.tree_flatten(tuple(args))
    if tree != traced.in_tree:
        raise InputError(f"graph {traced.graph.name!r}: the arguments do not match the traced structure")
    rng = np.random.default_rng(seed)
    flat = [_random_operand(x, rng) if isinstance(x, jax.ShapeDtypeStruct) else x for x in flat]
    values = []
    for i in range(traced.graph.n_nodes):
        if traced.input_leaf[i] >= 0:
            values.append(flat[traced.input_leaf[i]])
        else:
            values.append(traced.const_values[i])
    return values


class UnitProgram(NamedTuple):
    """What one unit (node or group) of a placed program does, whatever it comes from (a trace, or an exported
    file: simulator.export). Values are named by the op graph's `Source(node, out)`."""

    values: tuple[int, ...]  # op nodes whose values this unit holds resident (inputs, parameters, constants)
    inputs: tuple[Any, ...]  # Sources the unit reads, computed by other units or held resident
    outputs: tuple[Any, ...]  # Sources it computes that other units or the step's outputs need, in order
    body: Callable | None  # f(*inputs) -> tuple of outputs; None for a unit that only holds values
    key: Any  # units with equal keys share one jitted function per device


def unit_programs(traced: Traced, op_to_group: np.ndarray | None = None,
                  n_units: int | None = None) -> list[UnitProgram]:
    """[U] the units of a traced program: ops, or groups via `op_to_group` (int32[N_ops]); `n_units` (default:
    the largest group + 1) also counts trailing groups left without ops (a re-trace under another JAX mapped onto
    the file's groups, simulator.retrace_map): such units do nothing."""
    from simulator.trace import Source

    n_ops = traced.graph.n_nodes
    unit_of = np.arange(n_ops) if op_to_group is None else np.asarray(op_to_group, dtype=np.int64)
    if unit_of.shape != (n_ops,):
        raise InputError(f"op_to_group has {unit_of.size} entries, the program has {n_ops} ops")
    least = int(unit_of.max()) + 1 if n_ops else 0
    if n_units is not None and n_units < least:
        raise InputError(f"op_to_group names group {least - 1}, but there are {n_units} units")
    n_units = least if n_units is None else n_units
    members = [[] for _ in range(n_units)]
    for i, u in enumerate(unit_of.tolist()):
        members[u].append(i)
    is_eqn = [e is not None for e in traced.equations]
    used_elsewhere = {a for a in traced.program_outputs if isinstance(a, Source)}
    for j, args in enumerate(traced.args):
        used_elsewhere.update(a for a in args if isinstance(a, Source) and unit_of[a.node] != unit_of[j])
    units = []
    for u in range(n_units):
        inputs = tuple(dict.fromkeys(a for i in members[u] if is_eqn[i] for a in traced.args[i]
                                     if isinstance(a, Source) and not (is_eqn[a.node] and unit_of[a.node] == u)))
        outputs = tuple(Source(i, k) for i in members[u] if is_eqn[i]
                        for k in range(len(traced.equations[i].outvars)) if Source(i, k) in used_elsewhere)
        body = _unit_body(traced, members[u], inputs, outputs) if any(is_eqn[i] for i in members[u]) else None
        units.append(UnitProgram(tuple(i for i in members[u] if not is_eqn[i]), inputs, outputs, body,
                                 _unit_key(traced, members[u], inputs, outputs)))
    return units


def program_plan(traced: Traced, values: Sequence[Any], placement: Sequence[int], devices: Sequence,
                 op_to_group: np.ndarray | None = None, order: Sequence[int] | None = None,
                 stages: bool = True) -> Plan:
    """The plan of a traced program placed unit by unit (ops, or groups via `op_to_group` int32[N_ops]).

    values: per op, the array of input/param/const nodes (see `leaf_values`). placement: int[U] device index per
    unit. order: dispatch order of the units (default: topological, ties by unit index). stages: each device's
    consecutive units (in `order`) run as one jitted stage (see `units_plan`); False: one task per unit.
    """
    units = unit_programs(traced, op_to_group, len(placement) if op_to_group is not None else None)
    what = "groups" if op_to_group is not None else "nodes"
    outputs = tuple(traced.outputs) + tuple(a for _, a in traced.updates)  # Static leaves become Consts
    return units_plan(units, values, placement, devices, outputs, traced.out_tree,
                      _FUNCTIONS.setdefault(traced, {}), order, what, stages)


def units_plan(units: Sequence[UnitProgram], values: Sequence[Any], placement: Sequence[int], devices: Sequence,
               outputs: Sequence[Any], out_tree: Any, cache: dict, order: Sequence[int] | None = None,
               what: str = "units", stages: bool = False) -> Plan:
    """The plan of units placed one device each (placement: int[U]); values: per op node, the array it holds
    (inputs, parameters, constants; None elsewhere); outputs: the step's flat outputs (Sources, or literals with
    `.val`), the first out_tree.num_leaves of them unflattened by `run_outputs`; cache: key -> jitted function,
    shared by every plan of the same program, so each unit (stage) compiles once per device.

    stages=False: one task per unit (what `simulator.calibrate.profile_plan` times). stages=True: the units that
    only hold values come first (they dispatch nothing), then each run of consecutive units (in `order`) on one
    device is ONE task, the composition of their bodies, with one token and transient inputs donated
    (`_stages`). Default False here, so `simulator.export.bundle_plan` (which `measure_units` profiles) keeps
    one task per unit.
    """
    import jax

    from simulator.trace import Source

    place = _placement_array(placement, len(units), len(devices), what)
    order = unit_order(units, None if order is None else _check_order(order, len(units)))
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
                    cache[(unit.key, dev)] = _compiled(unit.body, devices[dev])
                fn = cache[(unit.key, dev)]
            tasks.append(Task(u, dev, fn, unit.inputs, unit.outputs, ()))
    owner = {}
    for k, t in enumerate(tasks):
        for u in t.units or (t.unit,):
            owner.update((Source(i, 0), k) for i in units[u].values)
        owner.update((s, k) for s in t.outputs)
    return _finish(tasks, owner, resident, devices, flat_out, out_tree, stages)


DONATE = True  # donate transient stage inputs; safe on CPU too (jax 0.10: buffers reused, no warning)


def _stages(units: Sequence[UnitProgram], runs: Sequence[Sequence[int]], place: np.ndarray, devices: Sequence,
            resident: dict, step_outputs: set, cache: dict) -> list[Task]:
    """One Task per run of units (one device each, in dispatch order): fn binds the units' bodies in order.

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
        donated = tuple(s for s in inputs if DONATE and (s, dev) not in resident and (s, dev) not in step_outputs
                        and readers[(s, dev)] == [k] and _transient_copy(s, dev, home, read_on, devices))
        key = ("stage", tuple(units[u].key for u in run), tuple(wiring), tuple(made[s] for s in outputs),
               tuple(inputs[s] for s in donated), dev)
        if key not in cache:
            cache[key] = _compiled(_stage_body([units[u].body for u in run], wiring, key[3]), devices[dev],
                                   key[4])
        tasks.append(Task(run[0], dev, cache[key], tuple(inputs), outputs, (), tuple(run), donated))
    return tasks


def _transient_copy(s: Any, dev: int, home: dict, read_on: dict, devices: Sequence) -> bool:
    """Whether value `s` on device index `dev` is this stage's own buffer to donate: made on `dev` and sent
    nowhere (a send may still be copying it), or a copy received from another *physical* device (device_put to
    the same device returns the very array: two indices naming one device, as tests do, would alias it)."""
    if home.get(s) == dev:
        return not read_on[s] - {dev}
    return home.get(s) is not None and devices[home[s]] != devices[dev]


def _stage_body(bodies: Sequence[Callable], wiring: Sequence[tuple], outputs: Sequence[tuple[int, int]]) -> Callable:
    """f(*xs) -> outputs: bodies[j] applied to its arguments, each ("in", i) = xs[i] or ("made", j', m) = output m
    of an earlier body j'."""

    def body(*xs):
        made = []
        for fn, args in zip(bodies, wiring):
            made.append(fn(*[xs[a[1]] if a[0] == "in" else made[a[1]][a[2]] for a in args]))
        return tuple(made[j][m] for j, m in outputs)

    return body


def unit_order(units: Sequence[UnitProgram], priority: Sequence[int] | None = None) -> list[int]:
    """A topological order of the units: of the units whose inputs are all made, the one first in `priority`
    (a permutation of the units, e.g. the simulated start order; None: by unit index). A `priority` that is
    already topological comes back unchanged; one that is not (a file's group graph against a re-traced
    program whose ops moved between groups) is repaired, not refused."""
    import heapq

    from simulator.trace import Source

    made = {Source(i, 0): u for u, unit in enumerate(units) for i in unit.values}
    made.update((s, u) for u, unit in enumerate(units) for s in unit.outputs)
    n_units = len(units)
    edges = {(made[s], v) for v, unit in enumerate(units) for s in unit.inputs if s in made and made[s] != v}
    children: list[list[int]] = [[] for _ in range(n_units)]
    indeg = [0] * n_units
    for u, v in edges:
        children[u].append(v)
        indeg[v] += 1
    rank = list(range(n_units))
    if priority is not None:
        for k, u in enumerate(priority):
            rank[u] = k
    ready = [(rank[u], u) for u in range(n_units) if indeg[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (rank[v], v))
    if len(order) != n_units:
        raise InputError("the units (groups) of this program form a cycle")
    return order


def _unit_key(traced: Traced, members: Sequence[int], inputs: tuple, outputs: tuple) -> Any:
    """Units doing the same thing share one jitted function per device: single equations with the same
    signature and operand pattern (the unrolled steps of an RNN); groups are keyed by identity."""
    from simulator.profile import _signature
    from simulator.trace import Source

    if len(members) == 1 and traced.equations[members[0]] is not None:
        m = members[0]
        pattern = tuple(inputs.index(a) if isinstance(a, Source) else -1 for a in traced.args[m])
        return ("eqn", _signature(traced.equations[m]), pattern, tuple(s.out for s in outputs))
    return ("unit", tuple(members))
